"""What a search hands back: PlanResult, made from the outcome of costing (_Found) by _result.

The tallies count the blocks the final limit does not prove no better; the plans get their full estimates
(a layout predicting exactly like a simpler one above it is dropped); the memory objective re-ranks them; the
layout closest to fitting is estimated only when nothing fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.estimate import Estimate, evaluate_layouts
from parplan.planner.search_cost import SLACK
from parplan.planner.search_survey import _Survey
from parplan.planner.search_workers import _STATE
from parplan.planner.strategy import Layouts
from parplan.planner.workload import Workload
from parplan.stacks.spec import StackSpec


@dataclass(frozen=True, slots=True)
class PlanResult:
    plans: list[Estimate]
    """Best layouts first."""
    evaluated: int
    """Valid layouts settled: costed, or proved no better by a bound. All of the space's valid layouts when
    the search is complete."""
    feasible: int
    """Of the costed layouts, how many fit in memory."""
    search_seconds: float
    least_memory: Estimate | None = None
    """The layout needing the least memory (the closest to fitting) when nothing fits."""
    skipped: int = 0
    """Of the settled layouts, those proved no better without being costed (their block's step-time bound
    exceeds the step time of the plans found)."""
    left: int = 0
    """Valid layouts neither costed nor proved when the deadline stopped the search (0: complete)."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every valid layout was costed or proved no better: the plans are the exhaustive search's."""
        return self.left == 0

    @property
    def costed(self) -> int:
        """Layouts whose memory (and, where they fit, time) was computed."""
        return self.evaluated - self.skipped


@dataclass(frozen=True, slots=True)
class _Found:
    """The outcome of costing: per-block tallies (over the survey's blocks), the best candidates, the limit."""

    done: np.ndarray
    """Per block: reached (its tighter bound computed, and costed unless that bound exceeded the limit)."""
    bound: np.ndarray
    """Per block: the best bound known (the survey's, or the tighter one where reached)."""
    feasible: np.ndarray
    faster: np.ndarray
    top: tuple[Layouts, np.ndarray, np.ndarray] | None
    least: tuple[float, Layouts] | None
    limit: float
    """Step time beyond which a block is proved no better (inf when nothing may be skipped)."""


def _result(model: ModelSpec, cluster: ClusterSpec, survey: _Survey, found: _Found, objective: str, top: int,
            within: float, workload: Workload, stack: StackSpec, seconds: float) -> PlanResult:
    """Tallies over the blocks the final limit does not prove no better, and the plans' full estimates."""
    proved = found.bound > found.limit * (1 + SLACK)
    counted = found.done & ~proved
    left = int(survey.count[~found.done & ~proved].sum())
    plans: list[Estimate] = []
    if found.top is not None:
        ev = evaluate_layouts(model, cluster, found.top[0], workload=workload, stack=stack)
        for i in range(len(found.top[0])):
            # A layout that predicts exactly like a simpler one ranked above it adds nothing to the list.
            if plans and ev.step_time_s[i] == plans[-1].step_time_s and ev.required_gib[i] == plans[-1].required_gib:
                continue
            plans.append(ev.estimate(i))
    if objective == "memory" and plans:
        floor = plans[0].tokens_per_s_per_gpu * (1 - within)
        plans = sorted((e for e in plans if e.tokens_per_s_per_gpu >= floor), key=lambda e: e.required_gib)
    # The layout closest to fitting matters only when nothing fits (plan_or_raise names it).
    least = (evaluate_layouts(model, cluster, found.least[1], workload=workload, stack=stack).estimate(0)
             if found.least and not plans else None)
    extra = {"faster": int(found.faster[counted].sum())} if _STATE["reference"] is not None else {}
    return PlanResult(plans=plans[:top], evaluated=int(survey.count.sum()) - left,
                      feasible=int(found.feasible[counted].sum()), search_seconds=seconds, least_memory=least,
                      skipped=int(survey.count[proved].sum()), left=left, extra=extra)
