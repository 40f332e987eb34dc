"""Scaling studies: the best layout at each GPU count, speedup and efficiency (formulas.md §7).

Speedup(N) = Throughput(N) / Throughput(N0) and Efficiency(N) = Speedup(N) / (N / N0), relative to the
smallest count N0 that fits (1 GPU when it fits, the textbook T(1)/T(N)). Strong scaling keeps the global
batch; weak scaling grows it with N from its value at N0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from parplan.errors import NoFeasiblePlanError
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.estimate import Estimate
from parplan.planner.explain import bottleneck
from parplan.planner.search import SearchSpace, check_size, plan
from parplan.planner.workload import UNIFORM, Workload
from parplan.stacks.spec import StackSpec


@dataclass(frozen=True, slots=True)
class ScalePoint:
    gpus: int
    best: Estimate | None
    """None when no layout fits at this count."""
    speedup: float | None = None
    ideal: float | None = None
    efficiency: float | None = None
    bottleneck: str = ""
    left: int = 0
    """Layouts the deadline left unsearched at this count (0: the best layout is the exhaustive search's)."""

    def as_dict(self) -> dict[str, object]:
        b = self.best
        return {"gpus": self.gpus, "tokens_per_s": b.tokens_per_s if b else None,
                "tokens_per_s_per_gpu": b.tokens_per_s_per_gpu if b else None, "speedup": self.speedup,
                "ideal": self.ideal, "efficiency": self.efficiency,
                "strategy": b.strategy.as_dict(self.gpus) if b else None, "bottleneck": self.bottleneck,
                "fits": b is not None, "complete": self.left == 0, "layouts_left": self.left}


def scale(model: ModelSpec, cluster: ClusterSpec, counts: list[int], *, gbs: int, seq: int, weak: bool = False,
          space: SearchSpace | None = None, workload: Workload = UNIFORM, deadline: float | None = None,
          progress: Callable[[int, int], None] | None = None, stack: StackSpec | None = None) -> list[ScalePoint]:
    """Best layout per GPU count (among what `stack` can run, costed as it runs them; default megatron-core)
    and its speedup/efficiency against the smallest count that fits. `deadline` and `progress` go to each
    count's search (search.plan); past the deadline, each remaining count gets the best of its search's first
    task."""
    for n in counts:  # every size refused up front, before any is searched
        check_size(model, cluster.with_gpus(n), gbs * n // min(counts) if weak else gbs, seq)
    points: list[ScalePoint] = []
    base: tuple[int, float] | None = None
    for n in sorted(counts):
        batch = gbs * n // base[0] if weak and base else gbs
        try:
            result = plan(model, cluster.with_gpus(n), gbs=batch, seq=seq, space=space, top=1, workload=workload,
                          deadline=deadline, progress=progress, stack=stack)
        except NoFeasiblePlanError:
            result = None
        best = result.plans[0] if result and result.plans else None
        left = result.left if result else 0
        if best is None:
            points.append(ScalePoint(gpus=n, best=None, bottleneck="no layout fits" if not left else
                                     "the time limit stopped the search before a layout that fits", left=left))
            continue
        if base is None:
            base = (n, best.tokens_per_s)
        speedup = best.tokens_per_s / base[1]
        ideal = n / base[0]
        points.append(ScalePoint(gpus=n, best=best, speedup=speedup, ideal=ideal, efficiency=speedup / ideal,
                                 bottleneck=bottleneck(best, cluster.with_gpus(n)), left=left))
    return points


def thresholds(points: list[ScalePoint]) -> dict[float, int | None]:
    """The first GPU count where efficiency falls below 90% and below 70% (None if it never does)."""
    out: dict[float, int | None] = {}
    for level in (0.9, 0.7):
        out[level] = next((p.gpus for p in points if p.efficiency is not None and p.efficiency < level), None)
    return out
