"""Fit the serving engines' global knobs to the shipped measured rows and report how well they generalise.

    python benchmarks/serving_fit.py [--evaluations 150] [--engines vllm,sglang,trtllm] [--knobs request_ms,burst]
                                     [--logo model,system] [--logo-evaluations 40]

Prints, per engine, the fitted knobs (the numbers data/serving/engines.yaml carries) with the fit's TPOT and
TTFT median absolute percentage errors, then the leave-one-group-out errors: each model (or GPU system) held
out in turn, every engine refitted without its rows, its rows predicted. Minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import time

from parplan.serving.calibrate import FITTED, fit_engine, leave_one_group_out
from parplan.serving.cases import read_measured_csv
from parplan.serving.spec import ENGINES
from parplan.serving.validate import shipped_files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--evaluations", type=int, default=150)
    parser.add_argument("--engines", default=",".join(ENGINES), help="engines to fit (the others keep their knobs)")
    parser.add_argument("--knobs", default=",".join(FITTED), help="knobs to fit (the others keep their values)")
    parser.add_argument("--logo", default="model,system", help="tags to hold out one value of at a time ('' = none)")
    parser.add_argument("--logo-evaluations", type=int, default=40)
    args = parser.parse_args()
    if args.evaluations < 1 or args.logo_evaluations < 1:
        parser.error("--evaluations and --logo-evaluations: at least 1 (Powell's method needs one evaluation)")
    names = [k for k in args.knobs.split(",") if k]
    if not names or set(names) - set(FITTED):
        parser.error(f"--knobs: one or more of {', '.join(FITTED)}")
    cases = read_measured_csv(shipped_files()[0])
    fits = {}
    for name in filter(None, args.engines.split(",")):
        t0 = time.perf_counter()
        fit = fit_engine(cases, name, max_evaluations=args.evaluations, names=names)
        fits[name] = fit
        knobs = ", ".join(f"{k}: {v:.4g}" for k, v in fit.knobs.items())
        print(f"{name:7s} {fit.cases:4d} rows  TPOT median APE {fit.tpot_median_ape:6.1%}  "
              f"TTFT {fit.ttft_median_ape:6.1%}  ({fit.evaluations} evaluations, {time.perf_counter() - t0:.0f} s)"
              f"\n        knobs: {{{knobs}}}", flush=True)
    for tag in filter(None, args.logo.split(",")):
        print(f"\nleave one {tag} out (refit without it, predict it):", flush=True)
        for group, row in leave_one_group_out(cases, tag, fits, max_evaluations=args.logo_evaluations).items():
            print(f"  {group:45s} {row['cases']:4d} rows  TPOT {row['tpot_median_ape']:6.1%}  "
                  f"TTFT {row['ttft_median_ape']:6.1%}", flush=True)


if __name__ == "__main__":
    main()
