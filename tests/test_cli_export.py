"""CLI: plan --framework / --emit and `parplan export` on saved plans."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from parplan.cli import main
from parplan.cli.export import strategy_from_dict
from parplan.export import export, unsupported_reason
from parplan.hardware import load_cluster
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
    """Each framework can run one of the three saved plans, and `export` writes exactly the launch files the
    library makes for that plan's model, cluster and layout (the JSON round trip loses nothing)."""
    plans = json.loads(saved_plan.read_text())["plans"]
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=16)
    strategies = [strategy_from_dict(p["strategy"], "x") for p in plans]
    idx = next(i for i, s in enumerate(strategies) if unsupported_reason(framework, s, model=model) is None)
    code, _, _ = run_cli("export", str(saved_plan), "-f", framework, "--index", str(idx), "--out", str(tmp_path))
    assert code == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == export(model, cluster, strategies[idx],
                                                                        framework).files


def test_export_refuses_a_layout_the_framework_cannot_run(run_cli, saved_plan, tmp_path):
    doc = json.loads(saved_plan.read_text())["plans"][0]
    doc["strategy"].update(tp=2, sp=True, tp_overlap=True)
    path = tmp_path / "overlap.json"
    path.write_text(json.dumps(doc))
    code, _, err = run_cli("export", str(path), "-f", "deepspeed")
    assert code == 1 and "cannot run this layout" in err and "tp-comm-overlap" in err


def test_export_errors(run_cli, tmp_path, saved_plan):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, _, err = run_cli("export", str(bad), "-f", "megatron")
    assert code == 1 and "bad.json" in err
    code, _, err = run_cli("export", str(saved_plan), "-f", "megatron", "--index", "99")
    assert code == 1 and "out of range" in err
    code, _, err = run_cli("export", str(saved_plan), "-f", "jax")
    assert code == 2 and "Known frameworks" in err  # a usage error: --format names no framework
    doc = json.loads(saved_plan.read_text())["plans"][0]
    doc["strategy"]["tp"] = "8"
    typed = tmp_path / "typed.json"
    typed.write_text(json.dumps(doc))
    code, _, err = run_cli("export", str(typed), "-f", "megatron")
    assert code == 1 and "strategy.tp" in err
