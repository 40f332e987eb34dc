"""One place for what the CLI prints: JSON documents on stdout, tables and messages for people."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    numpy = sys.modules.get("numpy")  # no numpy scalar exists unless numpy is loaded; --help never loads it
    if numpy is not None and isinstance(value, numpy.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_text(text: str) -> None:
    """Text that must reach the user byte for byte (shell fragments, config files): no wrapping, no markup."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(_plain(document), indent=2) + "\n")


def kv_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, str(value))
    return table


def human_count(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


@contextlib.contextmanager
def search_progress() -> Iterator[Callable[[int, int], None]]:
    """A progress callback for searches (planner.search.plan's `progress`): once a search has run for a second, a
    line on stderr shows the layouts settled (costed, or proved no better) of all valid ones; it goes when done."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    start = time.monotonic()
    bar: Progress | None = None
    task = None

    def update(done: int, total: int) -> None:
        nonlocal bar, task
        if bar is None and time.monotonic() - start > 1.0:
            bar = Progress(TextColumn("searching: {task.completed:,} of {task.total:,} layouts settled"), BarColumn(),
                           TimeElapsedColumn(), console=err_console, transient=True)
            bar.start()
            task = bar.add_task("search", total=total)
        if bar is not None and task is not None:
            bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()
