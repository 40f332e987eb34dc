"""Integer arithmetic the training and serving searches share."""

from __future__ import annotations

import math


def divisors(n: int) -> list[int]:
    """Divisors of n in increasing order, by trial division up to √n."""
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]
