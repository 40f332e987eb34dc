"""Start-up: each command imports only what it needs (issue #18). scipy (0.5 s to import), matplotlib and
torch load inside the functions that use them; `parplan --help` loads neither numpy nor the cost model."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("scipy", "matplotlib", "torch")


def _modules_after(code: str) -> set[str]:
    """Top-level names of the modules a fresh interpreter holds after running `code`."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def _tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_importing_the_cli_loads_no_heavy_library():
    assert not _tops(_modules_after("import parplan.cli")) & set(HEAVY)


def test_help_loads_neither_numpy_nor_the_cost_model():
    loaded = _modules_after("from parplan.cli import main\nmain(['--help'])")
    assert "numpy" not in _tops(loaded)
    assert "parplan.planner.estimate" not in loaded


def test_explain_and_plan_load_no_heavy_library():
    for args in (["explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--tp", "8", "--json"],
                 ["plan", "-m", "qwen3-0.6b", "-c", "h100", "-n", "8", "--gbs", "8", "--tp", "1", "--pp", "1",
                  "--json"]):
        loaded = _modules_after(f"from parplan.cli import main\nassert main({args!r}) == 0")
        assert not _tops(loaded) & set(HEAVY), args
        assert "parplan.planner.estimate" in loaded  # the probe really ran the command
        # Only the invoked command's module is imported (cli._app.command): not the other commands'.
        assert not {"parplan.cli.serve", "parplan.cli.bench", "parplan.cli.validate"} & loaded


def test_public_names_load_on_first_use():
    import parplan

    assert parplan.load_model("llama3.1-8b").layers == 32
    assert set(parplan.__all__) <= set(dir(parplan))
