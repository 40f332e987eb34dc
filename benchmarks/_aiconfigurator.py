"""What the scripts that rebuild parplan's data files from aiconfigurator's kernel database share: where the tables
lie in a checkout of ai-dynamo/aiconfigurator, and how the rebuilt CSV is written (to stdout)."""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

DATABASE = Path("aic-core", "src", "aiconfigurator_core", "systems", "data")
"""The kernel database inside a checkout: <gpu system>/<op>/<engine>/<version>/<op>_perf.parquet."""


def rebuild(script: str, columns: Sequence[str], rows: Callable[[Path], list[dict[str, object]]]) -> None:
    """Write `rows` of the checkout named on the command line as CSV with `columns`; a usage or missing-database
    error exits with a message."""
    if len(sys.argv) != 2:
        sys.exit(f"usage: python benchmarks/{script} AICONFIGURATOR_CHECKOUT")
    root = Path(sys.argv[1]) / DATABASE
    if not root.is_dir():
        sys.exit(f"no kernel database under {root}")
    writer = csv.DictWriter(sys.stdout, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows(root))
