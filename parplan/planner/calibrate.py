"""Fit the few global knobs of the cost model (hardware.spec.Calibration) to a user's measured steps.

Bounded least squares (scipy) on log(predicted / measured) step time over the runs, one value per knob
for the whole cluster: never a per-run factor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from parplan.errors import ConfigError, ParplanError
from parplan.hardware.spec import Calibration, ClusterSpec
from parplan.planner.estimate import evaluate
from parplan.planner.stack_fit import Residuals
from parplan.planner.validate import PublishedRun, RunResult
from parplan.stacks.spec import StackSpec

KNOBS = ("compute_scale", "nvlink_overlap_cost", "nic_overlap_cost")
BOUNDS = ((0.5, 0.0, 0.0), (1.5, 0.6, 0.6))


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationResult(Residuals):
    calibration: Calibration


def _errors(runs: list[PublishedRun], models: list, stacks: list[StackSpec], cluster: ClusterSpec,
            cal: Calibration) -> np.ndarray:
    tuned = dataclasses.replace(cluster, calibration=cal)
    return np.array([RunResult(run, evaluate(model, tuned.with_gpus(run.gpus), run.strategy, stack=stack)
                               ).throughput_error
                     for run, model, stack in zip(runs, models, stacks, strict=True)])


def calibrate(runs: list[PublishedRun], cluster: ClusterSpec, stack: StackSpec | None = None) -> CalibrationResult:
    """Knobs that best reproduce the runs' throughput on `cluster` (every run is taken to use it), each run
    costed as its own stack runs it (or as `stack`)."""
    from scipy.optimize import least_squares  # scipy (0.5 s to import) loads only when calibrating

    if not runs:
        raise ConfigError("no runs to calibrate on", field="runs")
    models = [r.model() for r in runs]
    stacks = [stack if stack is not None else r.stack_spec() for r in runs]
    start = cluster.calibration
    for run, model, spec in zip(runs, models, stacks, strict=True):
        try:
            evaluate(model, cluster.with_gpus(run.gpus), run.strategy, stack=spec)
        except ParplanError as e:
            raise ConfigError(f"the run cannot be evaluated on {cluster.name}: {e}", file=run.file,
                              field=run.id) from None
    before = _errors(runs, models, stacks, cluster, start)

    def residuals(x: np.ndarray) -> np.ndarray:
        cal = Calibration(**dict(zip(KNOBS, (float(v) for v in x), strict=True)))
        return np.log1p(_errors(runs, models, stacks, cluster, cal))

    x0 = np.clip([getattr(start, k) for k in KNOBS], BOUNDS[0], BOUNDS[1])
    # With fewer runs than knobs only the compute scale is identifiable: keep the others at their priors.
    free = len(KNOBS) if len(runs) >= len(KNOBS) else 1
    fit = least_squares(lambda x: residuals(np.concatenate([x, x0[free:]])), x0[:free],
                        bounds=(BOUNDS[0][:free], BOUNDS[1][:free]), diff_step=1e-3)
    best = Calibration(**dict(zip(KNOBS, (float(v) for v in np.concatenate([fit.x, x0[free:]])), strict=True)))
    after = _errors(runs, models, stacks, cluster, best)
    return CalibrationResult(calibration=best, runs=tuple(r.id for r in runs),
                             errors_before=tuple(float(e) for e in before), errors_after=tuple(float(e) for e in after))
