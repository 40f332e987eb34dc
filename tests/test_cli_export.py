"""CLI: plan --framework / --emit and `parplan export` on saved plans."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from parplan.cli import main
from parplan.cli.export import strategy_from_dict
from parplan.export import unsupported_reason
from parplan.models import load_model


@pytest.fixture(scope="module")
def saved_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--gbs", "64", "--top", "3", "--json"])
    assert code == 0
    path.write_text(buf.getvalue())
    return path


def test_plan_framework_restricts_the_search(run_json):
    doc = run_json("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--gbs", "64", "--framework", "deepspeed")
    model = load_model("llama3.1-8b")
    for p in doc["plans"]:
        assert unsupported_reason("deepspeed", strategy_from_dict(p["strategy"], "x"), model=model) is None


def test_plan_emit_includes_launch(run_json):
    doc = run_json("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--gbs", "64", "--emit", "megatron",
                   "--framework", "megatron")
    assert doc["launch"]["framework"] == "megatron"
    assert "--tensor-model-parallel-size" in next(iter(doc["launch"]["files"].values()))


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "torchtitan"])
def test_export_round_trip_from_plan_file(run_cli, saved_plan, tmp_path, framework):
    plan = json.loads(saved_plan.read_text())["plans"]
    # pick the first saved plan this framework can run
    model = load_model("llama3.1-8b")
    idx = next((i for i, p in enumerate(plan)
                if unsupported_reason(framework, strategy_from_dict(p["strategy"], "x"), model=model) is None), None)
    if idx is None:
        code, _, err = run_cli("export", str(saved_plan), "-f", framework)
        assert code == 1 and "cannot run this layout" in err
        return
    code, out, _ = run_cli("export", str(saved_plan), "-f", framework, "--index", str(idx), "--out", str(tmp_path))
    assert code == 0 and out
    assert any(tmp_path.iterdir())


def test_export_errors(run_cli, tmp_path, saved_plan):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, _, err = run_cli("export", str(bad), "-f", "megatron")
    assert code == 1 and "bad.json" in err
    code, _, err = run_cli("export", str(saved_plan), "-f", "megatron", "--index", "99")
    assert code == 1 and "out of range" in err
    code, _, err = run_cli("export", str(saved_plan), "-f", "jax")
    assert code == 1 and "Known frameworks" in err
