"""Fit the few global knobs of the cost model (hardware.spec.Calibration) to a user's measured steps.

Bounded least squares (scipy) on log(predicted / measured) step time over the runs, one value per knob
for the whole cluster: never a per-run factor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from parplan.errors import ConfigError, ParplanError
from parplan.hardware.spec import Calibration, ClusterSpec
from parplan.planner.estimate import evaluate
from parplan.planner.validate import PublishedRun, RunResult

KNOBS = ("compute_scale", "nvlink_overlap_cost", "nic_overlap_cost")
BOUNDS = ((0.5, 0.0, 0.0), (1.5, 0.6, 0.6))


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    calibration: Calibration
    runs: tuple[str, ...]
    errors_before: tuple[float, ...]
    """(predicted − measured) / measured tokens/s/GPU per run with the cluster's current knobs."""
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


def _errors(runs: list[PublishedRun], models: list, cluster: ClusterSpec, cal: Calibration) -> np.ndarray:
    tuned = dataclasses.replace(cluster, calibration=cal)
    return np.array([RunResult(run, evaluate(model, tuned.with_gpus(run.gpus), run.strategy)).throughput_error
                     for run, model in zip(runs, models, strict=True)])


def calibrate(runs: list[PublishedRun], cluster: ClusterSpec) -> CalibrationResult:
    """Knobs that best reproduce the runs' throughput on `cluster` (every run is taken to use it)."""
    if not runs:
        raise ConfigError("no runs to calibrate on", field="runs")
    models = [r.model() for r in runs]
    start = cluster.calibration
    for run, model in zip(runs, models, strict=True):
        try:
            evaluate(model, cluster.with_gpus(run.gpus), run.strategy)
        except ParplanError as e:
            raise ConfigError(f"the run cannot be evaluated on {cluster.name}: {e}", file=run.file,
                              field=run.id) from None
    before = _errors(runs, models, cluster, start)

    def residuals(x: np.ndarray) -> np.ndarray:
        cal = Calibration(**dict(zip(KNOBS, (float(v) for v in x), strict=True)))
        return np.log1p(_errors(runs, models, cluster, cal))

    x0 = np.clip([getattr(start, k) for k in KNOBS], BOUNDS[0], BOUNDS[1])
    # With fewer runs than knobs only the compute scale is identifiable: keep the others at their priors.
    free = len(KNOBS) if len(runs) >= len(KNOBS) else 1
    fit = least_squares(lambda x: residuals(np.concatenate([x, x0[free:]])), x0[:free],
                        bounds=(BOUNDS[0][:free], BOUNDS[1][:free]), diff_step=1e-3)
    best = Calibration(**dict(zip(KNOBS, (float(v) for v in np.concatenate([fit.x, x0[free:]])), strict=True)))
    after = _errors(runs, models, cluster, best)
    return CalibrationResult(calibration=best, runs=tuple(r.id for r in runs),
                             errors_before=tuple(float(e) for e in before), errors_after=tuple(float(e) for e in after))
