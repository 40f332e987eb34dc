"""How far the published deployments' median error can tell the model's accuracy, given how few they are.

    python benchmarks/published_sampling.py [--draws 100000] [--limit 0.20]

For TTFT and TPOT: the median absolute percentage error of the shipped measured rows (the population) and of the
published closed loops (the sample the issue's published target reads); a two-sided Mann-Whitney U test of whether
the two sets of errors differ; and, drawing as many errors as there are published closed loops from the measured
rows' (with replacement, a fixed seed), the spread of such a median and the chance that it is within `--limit`, at
the model's population median and with the population's errors scaled to lower medians. Seconds on 2 cores.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.stats import mannwhitneyu

from parplan.serving.validate import CaseResult, evaluate_cases, load_serving_cases, shipped_files


def errors(results: list[CaseResult], metric: str) -> np.ndarray:
    """Absolute percentage errors of `metric` over the predicted cases (CaseResult.ape)."""
    return np.array([e for e in (r.ape(metric) for r in results) if e is not None])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=100_000)
    parser.add_argument("--limit", type=float, default=0.20, help="the target on the median error")
    args = parser.parse_args()
    measured_rows, published_file = (evaluate_cases(load_serving_cases(path)) for path in shipped_files())
    rng = np.random.default_rng(0)
    for metric in ("ttft_ms", "tpot_ms"):
        rows, published = errors(measured_rows, metric), errors(published_file, metric)
        n = len(published)
        test = mannwhitneyu(published, rows, alternative="two-sided")
        print(f"{metric}: measured rows {len(rows)}, median {np.median(rows):.1%}; published closed loops {n}, "
              f"median {np.median(published):.1%} ({np.sum(published <= args.limit)} within {args.limit:.0%}); "
              f"Mann-Whitney U p = {test.pvalue:.2f}")
        population = float(np.median(rows))
        for target in (population, *(t for t in (0.17, 0.15, 0.12) if t < population)):
            # Scale the population's errors to a lower median, keeping their shape.
            scaled = rows * (target / population)
            medians = np.median(rng.choice(scaled, size=(args.draws, n)), axis=1)
            lo, mid, hi = np.percentile(medians, [5, 50, 95])
            print(f"  population median {target:5.1%}: median of {n} draws {mid:5.1%} (90% within {lo:.1%}-{hi:.1%}),"
                  f" within {args.limit:.0%} in {np.mean(medians <= args.limit):.0%} of {args.draws:,} draws")


if __name__ == "__main__":
    main()
