"""Fit a software stack's few global knobs to its public runs (`parplan calibrate --stack`), and measure how
well that generalises by leaving one source group out (`parplan validate --cross-validate`).

The knob (STACK_KNOBS) is a physical fact no source states outright: the stack's residual kernel efficiency
against the GPU's measured curves. One value per stack, fitted by bounded least squares on
log(predicted / measured) tokens/s over the stack's tier A runs (tier B where it has none): never a per-run
factor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from parplan.errors import ConfigError
from parplan.hardware import load_cluster
from parplan.planner.estimate import evaluate
from parplan.planner.validate import PublishedRun
from parplan.stacks.spec import StackSpec

STACK_KNOBS = ("compute_scale",)
"""The fitted facts, all in StackSpec.kernels. The host time per kernel launch is a knob too in principle,
but no shipped run is launch-bound at its prior (the fit cannot see it), so it stays a prior."""
BOUNDS = ((0.4,), (1.25,))
"""Lower and upper bound per knob: 40-125% of the measured kernel curves."""
FIT_TIERS = ("A", "B")
"""The tiers a stack's knobs are fitted on, the first that has runs of the stack: fully specified runs (A)
where there are any, else partly specified ones (B); tier C runs (headline figures) never move a knob."""


def knobs(stack: StackSpec) -> dict[str, float]:
    return {k: float(getattr(stack.kernels, k)) for k in STACK_KNOBS}


def prior(stack: StackSpec) -> dict[str, float]:
    """The knob values before any fit: the fit's recorded prior, else the stack's own values."""
    recorded = stack.fit.get("prior")
    return {k: float(v) for k, v in recorded.items()} if isinstance(recorded, dict) else knobs(stack)


def tuned(stack: StackSpec, values: dict[str, float]) -> StackSpec:
    """`stack` with its knobs set to `values`."""
    return dataclasses.replace(stack, kernels=dataclasses.replace(stack.kernels, **values))


def _errors(runs: list[PublishedRun], cases: list, stack: StackSpec) -> np.ndarray:
    """(predicted − measured) / measured tokens/s of each run as `stack` (compiled as each run was)."""
    out = []
    for run, (model, cluster) in zip(runs, cases, strict=True):
        est = evaluate(model, cluster, run.strategy, stack=stack.with_compile(run.compile))
        out.append(est.tokens_per_s_per_gpu / run.tokens_per_s_per_gpu - 1)
    return np.array(out)


@dataclass(frozen=True, slots=True)
class Residuals:
    """Each run's throughput error before and after a fit (a cluster's knobs or a stack's)."""

    runs: tuple[str, ...]
    errors_before: tuple[float, ...]
    """(predicted − measured) / measured tokens/s/GPU per run with the knobs' starting values."""
    errors_after: tuple[float, ...]

    @staticmethod
    def _rms(errors: tuple[float, ...]) -> float:
        return float(np.sqrt(np.mean(np.square(errors)))) if errors else 0.0

    @property
    def rms_before(self) -> float:
        return self._rms(self.errors_before)

    @property
    def rms_after(self) -> float:
        return self._rms(self.errors_after)


@dataclass(frozen=True, slots=True, kw_only=True)
class StackFit(Residuals):
    stack: StackSpec
    """The stack with its fitted knobs."""
    values: dict[str, float]


def stack_runs(runs: Iterable[PublishedRun], stack: StackSpec) -> list[PublishedRun]:
    """The runs a stack's knobs are fitted on: those of that very stack (by name), of the first tier in
    FIT_TIERS that has any."""
    own = [r for r in runs if r.stack_spec().name == stack.name]
    for tier in FIT_TIERS:
        chosen = [r for r in own if r.tier == tier]
        if chosen:
            return chosen
    return []


def fit_stack(runs: list[PublishedRun], stack: StackSpec) -> StackFit:
    """The knob values that best reproduce `runs` (all run on `stack`), starting from the stack's prior."""
    from scipy.optimize import least_squares

    if not runs:
        raise ConfigError(f"no tier A or B runs of stack {stack.name} to calibrate on", field="stack")
    cases = [(r.model(), load_cluster(r.cluster, gpus=r.gpus)) for r in runs]
    start = prior(stack)
    x0 = np.clip([start[k] for k in STACK_KNOBS], BOUNDS[0], BOUNDS[1])

    def values(x: np.ndarray) -> dict[str, float]:
        return dict(zip(STACK_KNOBS, (float(v) for v in x), strict=True))

    fit = least_squares(lambda x: np.log1p(_errors(runs, cases, tuned(stack, values(x)))), x0,
                        bounds=BOUNDS, diff_step=1e-3)
    best = tuned(stack, values(fit.x))
    return StackFit(stack=best, values=values(fit.x), runs=tuple(r.id for r in runs),
                    errors_before=tuple(float(e) for e in _errors(runs, cases, tuned(stack, start))),
                    errors_after=tuple(float(e) for e in _errors(runs, cases, best)))


def fit_record(fit: StackFit, before: StackSpec, command: str) -> dict[str, object]:
    """The `fit:` section a calibrated stack file carries: the command, the prior, the values and every run's
    residual before and after."""
    return {
        "command": command,
        "knobs": {f"kernels.{k}": round(v, 4) for k, v in fit.values.items()},
        "prior": prior(before),
        "rms_error_before": round(fit.rms_before, 4),
        "rms_error_after": round(fit.rms_after, 4),
        "runs": {rid: {"before": round(b, 4), "after": round(a, 4)}
                 for rid, b, a in zip(fit.runs, fit.errors_before, fit.errors_after, strict=True)},
    }


@dataclass(frozen=True, slots=True)
class HeldOut:
    """One source group predicted with its stack's knobs refitted on the other groups."""

    group: str
    stack: str
    errors: tuple[float, ...]
    """(predicted − measured) / measured per run of the group."""
    refitted: bool
    """False when no other group of the stack remains: the knobs fall back to their priors."""


def cross_validate(runs: list[PublishedRun]) -> list[HeldOut]:
    """Leave-one-group-out: for each source group, refit the calibrated knobs of its stack (one whose file
    carries a `fit:`) on the stack's other groups and predict the group; with no other group the knobs fall
    back to their priors. An uncalibrated stack predicts as it is."""
    out = []
    for group in sorted({r.group for r in runs}):
        held = [r for r in runs if r.group == group]
        for stack in {r.stack_spec().name: r.stack_spec() for r in held}.values():
            members = [r for r in held if r.stack_spec().name == stack.name]
            others = [r for r in stack_runs(runs, stack) if r.group != group]
            if not stack.fit:
                spec, refitted = stack, False
            elif others:
                spec, refitted = fit_stack(others, stack).stack, True
            else:
                spec, refitted = tuned(stack, prior(stack)), False
            cases = [(r.model(), load_cluster(r.cluster, gpus=r.gpus)) for r in members]
            errors = _errors(members, cases, spec)
            out.append(HeldOut(group=group, stack=stack.name, errors=tuple(float(e) for e in errors),
                               refitted=refitted))
    return out
