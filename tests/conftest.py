"""Shared fixtures: models and clusters from the shipped presets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parplan.cli import main
from parplan.models import load_model

ANY_STACK = str(Path(__file__).parent / "data" / "stacks" / "any-layout.yaml")
"""A stack file with Megatron-Core's physics that runs every layout the Strategy rules allow: for properties
of the cost model over layouts no single real stack runs."""


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def run_json(run_cli):
    def run(*args: str):
        code, out, err = run_cli(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    return run


@pytest.fixture(scope="session")
def llama70():
    return load_model("llama3.1-70b")


@pytest.fixture(scope="session")
def dsv3():
    return load_model("deepseek-v3")


@pytest.fixture(scope="session")
def qwen_moe():
    return load_model("qwen3-30b-a3b")


@pytest.fixture
def assert_png():
    """Check that a file is a written PNG chart (signature and a size no empty figure has)."""

    def check(path: Path) -> None:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000

    return check
