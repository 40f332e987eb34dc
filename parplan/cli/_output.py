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
from collections.abc import Iterator
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
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
