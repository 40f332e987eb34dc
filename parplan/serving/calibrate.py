"""Fit an engine's few global knobs to measured deployments, and check they generalise (leave one group out).

The knobs (EngineKnobs) are global per engine: host time per step, eager launch cost, kernel gap in CUDA graphs,
per-request time outside the steps, arrival burstiness at an aggregated rank and at a disaggregated prefill pool.
They are fitted by minimising the mean absolute log error of TPOT (weighted 1.5) and TTFT over every measured row
of the engine, each row's error capped so a few rows whose layout the file records wrongly cannot pull the fit (a
derivative-free Powell search over a bounded transform of each knob). Nothing is fitted per row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parplan.serving.cases import Case
from parplan.serving.engines import Engine, load_engine
from parplan.serving.validate import CaseResult, evaluate_cases

FITTED = ("decode_step_ms", "launch_us", "graph_kernel_us", "request_ms", "burst", "pool_burst")
"""The knobs a fit moves (allreduce_us stays at its published prior)."""

BOUNDS = {"decode_step_ms": (0.01, 5.0), "launch_us": (0.1, 200.0), "graph_kernel_us": (0.1, 8.0),
          "request_ms": (1.0, 400.0), "burst": (0.01, 0.99), "pool_burst": (0.01, 0.99)}
"""Physical ranges the search stays in."""

TPOT_WEIGHT = 1.5
CAP_TPOT, CAP_TTFT = 0.4, 0.5
"""Largest |log(predicted / measured)| a row contributes (×1.5 and ×1.65): the fit follows the bulk of the rows,
as the median error validate --serving reports does, not the few whose measurement carries what no deployment
model has (speculative decoding the file does not record, start-up time in short runs)."""


def with_knobs(engine: Engine, values: dict[str, float]) -> Engine:
    return dataclasses.replace(engine, knobs=dataclasses.replace(engine.knobs, **values))


def log_errors(results: Sequence[CaseResult], metric: str) -> np.ndarray:
    return np.array([abs(np.log(r.predicted[metric] / r.case.measured[metric])) for r in results
                     if r.error is None and metric in r.predicted and metric in r.case.measured])


def median_ape(results: Sequence[CaseResult], metric: str) -> float:
    """Median |predicted / measured − 1| (what validate --serving reports)."""
    ape = [abs(r.predicted[metric] / r.case.measured[metric] - 1.0) for r in results
           if r.error is None and metric in r.predicted and metric in r.case.measured]
    return float(np.median(ape)) if ape else float("nan")


def loss(results: Sequence[CaseResult]) -> float:
    tpot, ttft = log_errors(results, "tpot_ms"), log_errors(results, "ttft_ms")
    if not len(tpot):
        return float("inf")
    return TPOT_WEIGHT * float(np.mean(np.minimum(tpot, CAP_TPOT))) + float(np.mean(np.minimum(ttft, CAP_TTFT)))


def _to_box(z: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    out = {}
    for name, value in zip(names, z, strict=True):
        lo, hi = BOUNDS[name]
        out[name] = lo + (hi - lo) / (1.0 + np.exp(-value))
    return out


def _from_box(values: dict[str, float], names: Sequence[str]) -> np.ndarray:
    z = []
    for name in names:
        lo, hi = BOUNDS[name]
        x = min(max(values[name], lo + 1e-9 * (hi - lo)), hi - 1e-9 * (hi - lo))
        z.append(-np.log((hi - lo) / (x - lo) - 1.0))
    return np.array(z)


@dataclass(frozen=True, slots=True)
class Fit:
    engine: str
    knobs: dict[str, float]
    names: tuple[str, ...]
    """The knobs the fit moved."""
    cases: int
    """Rows the fit used."""
    tpot_median_ape: float
    ttft_median_ape: float
    evaluations: int


def fit_engine(cases: Sequence[Case], engine: str | Engine, *, start: dict[str, float] | None = None,
               max_evaluations: int = 150, names: Sequence[str] = FITTED) -> Fit:
    """The knobs of `engine` that best reproduce its closed-loop `cases` (rows of other engines are ignored);
    only the knobs `names` move, the others keep the engine's values."""
    from scipy.optimize import minimize  # heavy: only a fit needs it

    unknown = sorted(set(names) - set(FITTED))
    if unknown or not names:
        raise ValueError(f"knobs to fit: one or more of {', '.join(FITTED)}, got {', '.join(unknown) or 'none'}")
    given = load_engine(engine) if isinstance(engine, str) else engine
    first = {n: getattr(given.knobs, n) for n in FITTED} | (start or {})
    base = with_knobs(given, first)  # the knobs not fitted keep `start`'s values too
    mine = [c for c in cases if c.engine == base.name and c.kind == "closed_loop" and not c.refused]
    x0 = _from_box(first, names)

    def objective(z: np.ndarray) -> float:
        return loss(evaluate_cases(mine, {base.name: with_knobs(base, _to_box(z, names))}))

    result = minimize(objective, x0, method="Powell",
                      options={"maxfev": max_evaluations, "xtol": 1e-2, "ftol": 1e-4})
    knobs = first | {k: float(v) for k, v in _to_box(result.x, names).items()}
    final = evaluate_cases(mine, {base.name: with_knobs(base, knobs)})
    return Fit(engine=base.name, knobs=knobs, names=tuple(names), cases=len(mine),
               tpot_median_ape=median_ape(final, "tpot_ms"), ttft_median_ape=median_ape(final, "ttft_ms"),
               evaluations=int(result.nfev))


def leave_one_group_out(cases: Sequence[Case], by: str, fits: dict[str, Fit], *,
                        max_evaluations: int = 40) -> dict[str, dict[str, float]]:
    """For each value of tag `by` (a model, a GPU system), refit every engine without those rows (starting from
    the full fit) and predict them: the error a deployment of an unseen model or system would see."""
    groups = sorted({c.tags.get(by, "?") for c in cases if not c.refused and c.kind == "closed_loop"})
    out = {}
    for group in groups:
        held = [c for c in cases if c.tags.get(by) == group and not c.refused and c.kind == "closed_loop"]
        rest = [c for c in cases if c.tags.get(by) != group]
        engines = {}
        for name, full in fits.items():
            if any(c.engine == name for c in held):
                refit = fit_engine(rest, name, start=full.knobs, max_evaluations=max_evaluations, names=full.names)
                engines[name] = with_knobs(load_engine(name), refit.knobs)
        results = evaluate_cases(held, engines)
        out[group] = {"cases": len(held), "predicted": len(log_errors(results, "tpot_ms")),
                      "tpot_median_ape": median_ape(results, "tpot_ms"),
                      "ttft_median_ape": median_ape(results, "ttft_ms")}
    return out
