"""What fitting an engine's kernel rate to its micro-benchmarks shares (serving.moe_kernels, serving.gdn_kernels): the
error summary, and the bisection for the rate whose median log error is zero."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def median_error(errors: np.ndarray) -> float:
    """Median absolute relative error of times whose log errors (log(measured / predicted)) are `errors`."""
    return float(np.median(np.abs(np.expm1(errors))))


def zero_median_rate(errors_at: Callable[[float], np.ndarray], lo: float, hi: float, steps: int,
                     decimals: int) -> float:
    """The rate in [lo, hi] at which `errors_at(rate)` (log(measured / predicted)) has zero median, by bisection: a
    higher rate predicts faster kernels, so the error rises with it; rounded to `decimals`."""
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if np.median(errors_at(mid)) > 0 else (mid, hi)
    return round(0.5 * (lo + hi), decimals)
