"""Search speed of `parplan plan` on the two headline searches (issue #18 targets): prints figures, asserts nothing.

    python benchmarks/search_speed.py                   # both searches, 3 rounds each
    python benchmarks/search_speed.py --only llama --rounds 5
    python benchmarks/search_speed.py --exhaustive      # also the unbounded search, to compare its best

For each search: valid layouts (the space as the default stack, megatron-core, runs it: every layout the
Strategy rules and the stack allow, none sampled and none added), how many were costed and how many skipped by
proof (a block's step-time bound above the plans found), the search's own seconds in-process, the whole
command's wall time in a fresh process (interpreter start-up and imports included), its CPU seconds (all
processes) and its peak resident memory (all its processes summed, sampled every 20 ms; copy-on-write pages
shared by the forked workers count once per process, so this overstates). The rate is the valid layouts settled
(costed, or proved no better) per second, of the in-process search and of the whole command. Other processes
on a shared machine slow every figure: the load average is printed before and after, and each figure is the
median over the rounds with its range.

parplan's modules are compiled to bytecode first, as `pip install` does: a checkout whose environment sets
PYTHONDONTWRITEBYTECODE would otherwise recompile every module on every run (about 0.3 s), which no installed
parplan does.

Targets (2 cores): llama3.1-405b on 16,384 H100 <= 1.0 s wall with start-up and >= 3 M layouts/s settled;
DeepSeek-V3 on 2,048 H800 fp8 <= 10 s wall, with the exhaustive search's best layout (--exhaustive runs the
search without bounds to compare); peak RSS <= 1 GiB.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

SEARCHES = {
    "llama": ("llama3.1-405b", "h100", 16384, 2048, 8192, "bf16"),
    "deepseek": ("deepseek-v3", "h800", 2048, 15360, 4096, "fp8"),
}
def _tree(pid: int) -> list[int]:
    """The process and its descendants (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return out


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _command(args: tuple) -> tuple[float, float, float]:
    """(wall s, CPU s of the command and its workers, peak summed RSS MiB) of `parplan plan ... --json`."""
    model, cluster, gpus, gbs, seq, precision = args
    cmd = [sys.executable, "-m", "parplan", "plan", "--model", model, "--cluster", cluster, "--gpus", str(gpus),
           "--gbs", str(gbs), "--seq", str(seq), "--precision", precision, "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(_rss_kib(p) for p in _tree(proc.pid)))
        time.sleep(0.02)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, peak / 1024


def _spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def compile_bytecode() -> None:
    """Compile parplan's modules to bytecode, as an install does (module docstring)."""
    import compileall

    import parplan

    compileall.compile_dir(Path(parplan.__file__).parent, quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(SEARCHES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--exhaustive", action="store_true",
                    help="also run the search without bounds once, to compare its best (DeepSeek-V3: minutes)")
    args = ap.parse_args()
    compile_bytecode()

    from parplan import load_cluster, load_model
    from parplan.planner.search import SearchSpace, plan

    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start")
    for name, spec in SEARCHES.items():
        if args.only and name != args.only:
            continue
        model_name, cluster_name, gpus, gbs, seq, precision = spec
        model, cluster = load_model(model_name), load_cluster(cluster_name, gpus=gpus)
        space = SearchSpace(precision=(precision,))
        inside, walls, cpus, rss = [], [], [], []
        for _ in range(args.rounds):
            result = plan(model, cluster, gbs=gbs, seq=seq, space=space)
            inside.append(result.search_seconds)
            wall, cpu, peak = _command(spec)
            walls.append(wall)
            cpus.append(cpu)
            rss.append(peak)
        in_rate, wall_rate = (result.evaluated / statistics.median(x) for x in (inside, walls))
        print(f"\n{model_name} on {gpus:,}x {cluster_name}, gbs {gbs}, seq {seq}, {precision}")
        print(f"  valid layouts        {result.evaluated:,}: {result.costed:,} costed ({result.feasible:,} fit), "
              f"{result.skipped:,} skipped by proof")
        print(f"  in-process search    {_spread(inside, '.2f')} s -> {in_rate / 1e6:,.1f} M layouts/s settled; the "
              f"first round (cold caches, as every command runs) {inside[0]:.2f} s -> "
              f"{result.evaluated / inside[0] / 1e6:,.1f} M layouts/s")
        print(f"  whole command        {_spread(walls, '.2f')} s wall with start-up -> {wall_rate / 1e6:,.1f} M "
              f"layouts/s settled; CPU {_spread(cpus, '.2f')} s (all processes)")
        print(f"  peak RSS             {_spread(rss, '.0f')} MiB (all processes summed)")
        best = result.plans[0]
        print(f"  best                 {best.strategy.describe(gpus)} -> {best.step_time_s:.4f} s, "
              f"{best.tokens_per_s_per_gpu:,.1f} tok/s/GPU")
        if args.exhaustive:
            full = plan(model, cluster, gbs=gbs, seq=seq, space=space, bound=False)
            same = full.plans[0].strategy == best.strategy and full.plans[0].step_time_s == best.step_time_s
            print(f"  unbounded search     {full.search_seconds:.1f} s, every layout costed; best "
                  f"{'the same' if same else 'DIFFERENT'}")
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
