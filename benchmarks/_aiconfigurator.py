"""What the scripts that rebuild parplan's data files from aiconfigurator's kernel database share: where the tables
lie in a checkout of ai-dynamo/aiconfigurator, and how the rebuilt CSV is written (to stdout)."""

from __future__ import annotations

import collections
import csv
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from parplan.serving.cases import SYSTEMS

DATABASE = Path("aic-core", "src", "aiconfigurator_core", "systems", "data")
"""The kernel database inside a checkout: <gpu system>/<op>/<engine>/<version>/<op>_perf.parquet."""

FITTED_SYSTEMS = tuple(s for s in SYSTEMS if not s.startswith("rtx_pro_6000"))
"""The GPU systems whose kernels the engine tables are fitted to. The RTX PRO 6000 (sm_120) shares parplan's
`blackwell` architecture with B200-GB300 (sm_100) but runs other kernels (its collectors' MoE and GDN rates lie 2x
from theirs), so its samples, which would bias the sm_100 fits, are left out."""


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


def collect(root: Path, table: str, versions: Mapping[str, Sequence[str]], systems: Iterable[str],
            key_of: Callable[[str, str, str, dict], tuple | None], columns: Sequence[str]) -> list[dict[str, object]]:
    """The rows of `table` (`<op>/<table>_perf.parquet`'s op and name, e.g. "moe/moe") that `key_of(engine,
    version, system, row)` keeps, from the first of each engine's `versions` with any kept row on each system, as
    dicts of `columns` (the key's fields, then latency_ms: the mean where a key was collected more than once)."""
    import pyarrow.parquet as pq  # optional: only the scripts that rebuild data files read parquet

    op, name = table.split("/")
    kept: dict[tuple, list[float]] = collections.defaultdict(list)
    for system in systems:
        for engine, candidates in versions.items():
            for version in candidates:
                path = root / system / op / engine / version / f"{name}_perf.parquet"
                found = 0
                for r in pq.read_table(path).to_pylist() if path.exists() else []:
                    key = key_of(engine, version, system, r)
                    if key is not None:
                        kept[key].append(float(r["latency"]))
                        found += 1
                if found:
                    break
    return [dict(zip(columns, (*key, round(sum(v) / len(v), 5)), strict=True)) for key, v in sorted(kept.items())]
