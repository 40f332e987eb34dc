"""--json: every command prints exactly one JSON document on stdout when it succeeds and nothing when it fails;
every message (progress, 'wrote ...', warnings) goes to stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parplan.cli._app import command

NCCL_LOG = Path(__file__).parent / "data" / "nccl_samples" / "h200_2node_16gpu_all_reduce_nccl2.30.txt"
RUNS = """- id: mine
  cluster: h100
  gpus: 8
  model: llama3.1-8b
  strategy: {tp: 8, recompute: selective}
  batch: {gbs: 64, seq: 4096}
  measured: {tokens_per_s_per_gpu: 3000.0}
"""


def _commands(tmp: Path) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
    """Each command path -> command lines (without --json) that succeed; {tmp} is a scratch folder."""
    plan = ("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "64", "--tp", "8")
    explain = ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--tp", "8", "--gbs", "64")
    return {
        ("plan",): [plan, (*plan, "--emit", "megatron"), (*plan[:6], "8..16", *plan[7:], "--tokens", "1e12",
                                                          "--days", "30")],
        ("explain",): [explain, (*explain[:7], "--tp", "4", "--pp", "2", "--gbs", "64", "--timeline", "--plot",
                                 f"{tmp}/e.png")],
        ("scale",): [("scale", "-m", "gpt2", "-c", "h100", "-n", "8..16", "--gbs", "64", "--plot", f"{tmp}/s.png")],
        ("validate",): [("validate", "--group", "korthikanti22"), ("validate", "--data", f"{tmp}/runs.yaml", "--rank")],
        ("export",): [("export", f"{tmp}/plan.json", "-f", "megatron", "--out", f"{tmp}/launch")],
        ("calibrate",): [("calibrate", "--runs", f"{tmp}/runs.yaml", "--cluster", "h100", "--out", f"{tmp}/c.yaml")],
        ("models", "list"): [("models", "list")],
        ("models", "show"): [("models", "show", "deepseek-v3")],
        ("hardware", "list"): [("hardware", "list")],
        ("hardware", "show"): [("hardware", "show", "h100", "--gpus", "64")],
        ("hardware", "import-nccl-tests"): [("hardware", "import-nccl-tests", str(NCCL_LOG), "--out",
                                             f"{tmp}/p.yaml")],
        ("bench", "gemm"): [("bench", "gemm", "--device", "cpu", "--model", "gpt2", "--tokens", "16", "--dtype", "fp32",
                             "--repeats", "1")],
        ("bench", "attention"): [("bench", "attention", "--device", "cpu", "--seq", "64", "--heads", "1",
                                  "--head-dim", "16")],
        ("bench", "memory"): [("bench", "memory", "--device", "cpu")],
        ("bench", "comm"): [("bench", "comm", "--collectives", "all_reduce", "--sizes", "1K,4K")],
        ("stacks", "list"): [("stacks", "list")],
        ("stacks", "show"): [("stacks", "show", "deepseek")],
        ("serve", "explain"): [("serve", "explain", "-m", "llama3.1-8b", "-c", "h100", "--concurrency", "8")],
        ("serve", "plan"): [("serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--mode", "aggregated",
                             "--emit", "vllm")],
    }


def _leaves(cmd, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    subs = getattr(cmd, "commands", None)
    if not subs:
        return [path]
    return [leaf for name, sub in subs.items() for leaf in _leaves(sub, (*path, name))]


def test_every_command_is_covered(tmp_path):
    """A new command must join this test: it promises --json like every other."""
    assert sorted(_leaves(command())) == sorted(_commands(tmp_path))


@pytest.mark.parametrize("path", sorted(_commands(Path("{tmp}"))), ids=" ".join)
def test_json_stdout_is_exactly_one_document(path, tmp_path, run_cli):
    if path[0] == "bench":
        pytest.importorskip("torch")
    (tmp_path / "runs.yaml").write_text(RUNS)
    if path == ("export",):
        code, out, err = run_cli("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "64", "--tp", "8",
                                 "--json")
        (tmp_path / "plan.json").write_text(out)
    for args in _commands(tmp_path)[path]:
        code, out, err = run_cli(*args, "--json")
        assert code == 0, err
        json.loads(out)  # one document and nothing else: a second one or a message would not parse
        assert out.startswith("{") and out.rstrip().endswith("}")


@pytest.mark.parametrize("args", [
    ("plan", "-m", "llama3.1-405b", "-c", "h100", "-n", "8", "--gbs", "8"),
    ("explain", "-m", "nowhere.json", "-c", "h100", "-n", "8"),
    ("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--tp", "0"),
    ("export", "nowhere.json", "-f", "megatron"),
    ("hardware", "import-nccl-tests", "nowhere.log"),
    ("models", "show", "nowhere"),
], ids=lambda a: " ".join(a[:2]))
def test_json_failure_leaves_stdout_empty(args, run_cli):
    code, out, err = run_cli(*args, "--json")
    assert code in (1, 2, 3) and out == "" and err


def test_messages_go_to_stderr_under_json(tmp_path, run_cli):
    """import-nccl-tests --out says 'wrote ...': on stderr under --json (it once broke `| jq`)."""
    code, out, err = run_cli("hardware", "import-nccl-tests", str(NCCL_LOG), "--out", str(tmp_path / "p.yaml"),
                             "--json")
    assert code == 0 and "wrote" in err and "wrote" not in out
    assert json.loads(out)["samples"] > 0
