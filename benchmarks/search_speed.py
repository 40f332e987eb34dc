"""Search speed of `parplan plan` (issue 4 targets): prints figures, asserts nothing.

    python benchmarks/search_speed.py            # llama3.1-405b on 16384 h100, gbs 2048, seq 8192
    python benchmarks/search_speed.py --scalar 2000   # also time the per-layout scalar path on 2000 layouts

Reports: whole-command wall time (a subprocess, interpreter start included) and its peak RSS, layouts
considered per second by the search, and the speed-up over calling `evaluate` once per layout.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import numpy as np


def _command(args: argparse.Namespace) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "parplan", "plan", "--model", args.model, "--cluster", args.cluster,
           "--gpus", str(args.gpus), "--gbs", str(args.gbs), "--seq", str(args.seq), "--json"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, rss_kib / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3.1-405b")
    ap.add_argument("--cluster", default="h100")
    ap.add_argument("--gpus", type=int, default=16384)
    ap.add_argument("--gbs", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--scalar", type=int, default=1000, help="layouts to time through the scalar path")
    args = ap.parse_args()

    from parplan import evaluate, load_cluster, load_model
    from parplan.planner.search import SearchSpace, enumerate_layouts, plan

    model, cluster = load_model(args.model), load_cluster(args.cluster, gpus=args.gpus)
    wall, rss = _command(args)
    result = plan(model, cluster, gbs=args.gbs, seq=args.seq)
    rate = result.evaluated / result.search_seconds
    print(f"model {args.model} on {args.gpus}x {args.cluster}, gbs {args.gbs}, seq {args.seq}")
    print(f"valid layouts          {result.evaluated:,} ({result.feasible:,} fit in memory)")
    print(f"search time            {result.search_seconds:.2f} s in-process -> {rate:,.0f} layouts/s")
    print(f"whole command          {wall:.2f} s wall (interpreter start included), peak RSS {rss:.0f} MiB")

    layouts = next(enumerate_layouts(model, cluster, args.gbs, args.seq, SearchSpace()))
    pick = np.linspace(0, len(layouts) - 1, min(args.scalar, len(layouts))).astype(int)
    strategies = [layouts.strategy(int(i)) for i in pick]
    start = time.perf_counter()
    for s in strategies:
        evaluate(model, cluster, s)
    scalar = (time.perf_counter() - start) / len(strategies)
    print(f"scalar path            {scalar * 1e3:.2f} ms per layout (evaluate() one at a time)")
    print(f"vectorised / scalar    {rate * scalar:,.0f}x")
    best = result.plans[0]
    print(f"best                   {best.strategy.as_dict(args.gpus)} -> {best.tokens_per_s_per_gpu:,.1f} tok/s/GPU")


if __name__ == "__main__":
    main()
