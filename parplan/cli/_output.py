"""One place for what the CLI prints: JSON documents on stdout, tables and messages for people.

Under `json_mode(True)` (the CLI's --json) stdout is reserved for the one JSON document: `console` and
`print_text` write to stderr, and `print_json` holds the document back until the command has succeeded
(`main` releases it), so a failure leaves stdout empty and a success leaves exactly one document there.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

console = Console(markup=False)
"""What people read on stdout. No markup: model, cluster and run names come from files, and '[/]' in one
would otherwise be read as a style tag (or fail to parse)."""
err_console = Console(stderr=True)
"""Errors and progress on stderr; messages escape the user's text (rich.markup.escape) where they style."""


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


class _Document:
    """The JSON document of one command run, written to stdout only on release."""

    def __init__(self) -> None:
        self.text: str | None = None

    def set(self, text: str) -> None:
        if self.text is not None:
            raise RuntimeError("a command printed two JSON documents")
        self.text = text

    def release(self) -> None:
        if self.text is not None:
            sys.stdout.write(self.text)


_run: dict[str, Any] = {"json": False, "document": None}


@contextlib.contextmanager
def json_mode(on: bool) -> Iterator[_Document]:
    """The scope of one command run; with `on`, every message goes to stderr (see the module docstring)."""
    document = _Document()
    saved = dict(_run)
    _run.update(json=on, document=document)
    if on:
        console.file = sys.stderr
    try:
        yield document
    finally:
        _run.update(saved)
        console.file = None  # back to whatever sys.stdout is at print time


def print_text(text: str) -> None:
    """Text that must reach the user byte for byte (shell fragments, config files): no wrapping, no markup.
    Under --json it is a message like any other: stderr."""
    (sys.stderr if _run["json"] else sys.stdout).write(text if text.endswith("\n") else text + "\n")


def print_json(document: Any) -> None:
    """The one JSON document of the command: held until it succeeds (written at once outside `json_mode`)."""
    text = json.dumps(_plain(document), indent=2) + "\n"
    if _run["document"] is None:
        sys.stdout.write(text)
    else:
        _run["document"].set(text)


def kv_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    """Key, value lines; the keys never wrap, the values wrap at spaces (never cut)."""
    table = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, str(value))
    return table


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a `fitted_table`."""

    header: str
    short: str = ""
    """The header when the full one leaves the table too wide ('tok/s/GPU' -> 'tok/s')."""
    left: bool = False
    """Left-justified (names, text); numbers are right-justified."""
    wrap: bool = False
    """Free text that may wrap at spaces (a layout, a sentence); other cells are never wrapped nor cut."""
    drop: int = 0
    """0: always shown; otherwise dropped, highest first, when the table cannot fit any other way."""


_GAP = 2
"""Characters between two columns of a fitted table."""
_FOLD = 12
"""Width a wrapping column may be folded to (long words split across lines) when nothing else fits."""


def _min_widths(columns: list[Column], rows: list[list[str]], short: bool, fold: bool = False) -> list[int]:
    """The narrowest each column can be: every cell whole, or its longest word for a wrapping column (at
    most _FOLD with `fold`)."""
    out = []
    for i, col in enumerate(columns):
        header = col.short if short and col.short else col.header
        cells = [row[i] for row in rows]
        if col.wrap:
            longest = max((cell_len(w) for text in (header, *cells) for w in text.split()), default=1)
            out.append(min(longest, _FOLD) if fold else longest)
        else:
            out.append(max(cell_len(text) for text in (header, *cells)))
    return out


def _fits(columns: list[Column], rows: list[list[str]], short: bool, width: int, fold: bool = False) -> bool:
    return sum(_min_widths(columns, rows, short, fold)) + _GAP * (len(columns) - 1) <= width


def fitted_table(title: str, variants: list[tuple[list[Column], list[list[str]]]], width: int | None = None) -> Table:
    """A table that fits `width` columns (the console's: 80 in a pipe) without cutting a cell: the first of
    `variants` (columns and rows, widest first) that fits with its full headers, else with its short ones;
    failing that the last variant drops its droppable columns, highest `drop` first, each time trying full
    headers before short ones; as a last resort long words of text columns fold over several lines. Text
    columns wrap at spaces; numbers and names never wrap; cells are plain text (no markup)."""
    width = width or console.width
    chosen = next(((cols, rows, short) for cols, rows in variants for short in (False, True)
                   if _fits(cols, rows, short, width)), None)
    columns, rows = variants[-1]
    keep = list(range(len(columns)))
    while chosen is None:
        droppable = [i for i in keep if columns[i].drop]
        if droppable:
            keep.remove(max(droppable, key=lambda i: columns[i].drop))
        cols = [columns[i] for i in keep]
        sub = [[row[i] for i in keep] for row in rows]
        chosen = next(((cols, sub, short) for short in (False, True) if _fits(cols, sub, short, width)),
                      None if droppable else (cols, sub, True))
    columns, rows, short = chosen
    fold = not _fits(columns, rows, short, width)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, _GAP - 1, 0, 0),
                  pad_edge=False, show_edge=False)
    for col, least in zip(columns, _min_widths(columns, rows, short, fold), strict=True):
        table.add_column(col.short if short and col.short else col.header, justify="left" if col.left else "right",
                         no_wrap=not col.wrap, overflow="fold", min_width=least)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def human_count(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


@contextlib.contextmanager
def search_progress() -> Iterator[Callable[[int, int], None]]:
    """A progress callback for searches (planner.search.plan's `progress`): once a search has run for a second, a
    line on stderr shows the layouts settled (costed, or proved no better) of all valid ones; it goes when done.
    rich's progress module loads only then (a shorter search does without it)."""
    start = time.monotonic()
    bar: Any = None
    task = None

    def update(done: int, total: int) -> None:
        nonlocal bar, task
        if bar is None and time.monotonic() - start > 1.0:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

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
