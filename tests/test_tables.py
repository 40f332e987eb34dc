"""First use at 80 columns: every table a command prints fits a pipe's 80 columns (rich's width when stdout
is not a terminal) without cutting a cell to '…'; numbers and names stay whole. Commands to copy are the one
exception: they stay on one line."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from parplan.cli._output import console

COMMANDS = [
    ("plan", "-m", "llama3.1-70b", "-c", "h100", "-n", "64", "--gbs", "128", "--seq", "8192", "--tp", "8",
     "--pp", "2"),
    ("plan", "-m", "mixtral-8x7b", "-c", "h100", "-n", "8..16", "--gbs", "64", "--tp", "2"),
    ("scale", "-m", "gpt2", "-c", "h100", "-n", "8..16", "--gbs", "64"),
    ("validate", "--group", "korthikanti22"),
    ("models", "list"),
    ("hardware", "list"),
    ("stacks", "list"),
    ("stacks", "show", "fsdp"),
    ("serve", "explain", "-m", "qwen3-30b-a3b", "-c", "h100", "--concurrency", "64", "--tp", "2", "--moe-ep", "2"),
    ("serve", "explain", "-m", "llama3.1-8b", "-c", "h100", "--concurrency", "8", "--prefill", "tp=1,workers=2",
     "--decode", "tp=2"),
    ("serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "1..4", "--rate", "2", "--mode", "aggregated"),
    ("validate", "--serving", "{data}"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:2]) + f"#{i}" for i, a in enumerate(COMMANDS)])
def test_tables_fit_80_columns_without_cutting(args, run_cli, monkeypatch):
    from parplan._resources import data_dir

    monkeypatch.setattr(console, "_width", 80)
    data = str(data_dir("serving") / "published_serving.yaml")
    code, out, err = run_cli(*(a.replace("{data}", data) for a in args))
    assert code == 0, err
    # a command to copy ("Inspect it with: parplan explain ...") stays on one line on purpose
    wide = [line for line in out.splitlines() if cell_len(line) > 80 and "parplan " not in line]
    assert not wide, wide[:3]
    assert "…" not in out
