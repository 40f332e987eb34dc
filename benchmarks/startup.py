"""Start-up time of the command line against the libraries every command needs: prints figures, asserts nothing.

    python benchmarks/startup.py            # 15 rounds
    python benchmarks/startup.py --rounds 40

Each round runs, one after the other, `python -c "import numpy, yaml"` (the floor: the interpreter and the
two libraries parplan is built on), `parplan --help` and a `parplan explain`; the medians and quartiles over
the rounds are printed side by side, with the machine's load average before and after, since other
processes on a shared machine slow all three alike. Target (issue #18): `parplan --help` within 2.5x the floor.
parplan's modules are compiled to bytecode first, as an install does (benchmarks/search_speed.py says why).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from search_speed import compile_bytecode

EXPLAIN = ["explain", "-m", "llama3.1-70b", "-c", "h100", "-n", "64", "--tp", "8", "--pp", "2", "--gbs", "128",
           "--seq", "8192", "--recompute", "selective"]


def _parplan() -> list[str]:
    """The installed console script when there is one (what users run), else the module."""
    script = shutil.which("parplan", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return [script] if script else [sys.executable, "-m", "parplan"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    compile_bytecode()
    commands = {
        'python -c "import numpy, yaml"': [sys.executable, "-c", "import numpy, yaml"],
        "parplan --help": [*_parplan(), "--help"],
        "parplan " + " ".join(EXPLAIN): [*_parplan(), *EXPLAIN],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, cmd in commands.items():
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    print(f"{args.rounds} rounds on {os.cpu_count()} CPUs; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after")
    floor = statistics.median(times['python -c "import numpy, yaml"'])
    print(f"{'median s':>9} {'q1':>7} {'q3':>7} {'vs floor':>9}  command")
    for name, ts in times.items():
        q1, med, q3 = statistics.quantiles(ts, n=4)
        print(f"{med:9.3f} {q1:7.3f} {q3:7.3f} {med / floor:8.2f}x  {name}")


if __name__ == "__main__":
    main()
