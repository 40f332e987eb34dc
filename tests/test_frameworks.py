"""Opt-in: parplan's exports run through the frameworks' own parsers and validators (`pytest -m frameworks`).

Skipped unless PARPLAN_FRAMEWORKS_SRC names the extracted framework trees (mlm/{core_v0.16.1,core_v0.19.0,
HEAD}, mds/HEAD, torchtitan/{0.2.2,0.3.0,HEAD}) and PARPLAN_FRAMEWORKS_PY a Python >= 3.12 with their
dependencies (README, "Checking the exports against the frameworks"). Each of the 23 plans below (the
export_check harness's matrix: dense and MoE, 8 to 4,096 GPUs, bf16 and fp8, pp/vpp, cp, ep) is planned with
`--framework F`, exported, and handed to tests/frameworks/harness.py once per version F's export claims; the
test passes when that version's code accepts the files and every value it parses or derives equals the plan.
Slow (about half a minute per version and plan on 2 cores): the default run deselects it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parplan.models import load_model

pytestmark = pytest.mark.frameworks

SRC = os.environ.get("PARPLAN_FRAMEWORKS_SRC")
PY = os.environ.get("PARPLAN_FRAMEWORKS_PY")
HARNESS = Path(__file__).parent / "frameworks" / "harness.py"
MARK = "@@RESULT@@"

# format -> (label, harness worker, tree under PARPLAN_FRAMEWORKS_SRC), one per version the export claims
TARGETS = {
    "megatron": [("Megatron-LM HEAD d98e8a6", "megatron", "mlm/HEAD"),
                 ("Megatron-LM core_v0.19.0", "megatron", "mlm/core_v0.19.0"),
                 ("Megatron-LM core_v0.16.1", "megatron", "mlm/core_v0.16.1")],
    "deepspeed": [("DeepSpeed 0.19.8 + Megatron-DeepSpeed 4efb479", "deepspeed", "mds/HEAD")],
    "torchtitan": [("torchtitan 0.2.2", "titan_toml", "torchtitan/0.2.2"),
                   ("torchtitan 0.3.0", "titan_head", "torchtitan/0.3.0"),
                   ("torchtitan HEAD b5bcd76", "titan_head", "torchtitan/HEAD")],
}

# The export_check harness's matrix (check_exports.py MATRIX): (id, plan arguments, format).
MATRIX = [
    ("m01-l8b-8-bf16", "-m llama3.1-8b -c h100 -n 8 --gbs 64 --seq 8192", "megatron"),
    ("m02-l70b-512-bf16", "-m llama3.1-70b -c h100 -n 512 --gbs 1024 --seq 8192", "megatron"),
    ("m03-l70b-256-vpp-full", "-m llama3.1-70b -c h100 -n 256 --gbs 512 --seq 4096 --pp 4 --vpp 2..10 "
     "--recompute full --zero 1", "megatron"),
    ("m04-l405b-2048-fp8-cp", "-m llama3.1-405b -c h100 -n 2048 --gbs 1024 --seq 32768 --precision fp8 --cp 2..8",
     "megatron"),
    ("m05-l405b-4096-bf16-vpp", "-m llama3.1-405b -c h100 -n 4096 --gbs 2048 --seq 8192 --schedule interleaved",
     "megatron"),
    ("m06-dsv3-1024-fp8", "-m deepseek-v3 -c h100 -n 1024 --gbs 4096 --seq 4096 --precision fp8", "megatron"),
    ("m07-qwen3moe-256-bf16-sel", "-m qwen3-235b-a22b -c h100 -n 256 --gbs 1024 --seq 4096 --recompute selective",
     "megatron"),
    ("m08-mixtral22-128-bf16-ep", "-m mixtral-8x22b -c h100 -n 128 --gbs 512 --seq 4096 --ep 2..8", "megatron"),
    ("m09-l8b-64-b200-fp8-sel", "-m llama3.1-8b -c b200 -n 64 --gbs 256 --seq 8192 --precision fp8 "
     "--recompute selective --zero 1", "megatron"),
    ("m10-l70b-64-a100-full-pp", "-m llama3.1-70b -c a100-80gb -n 64 --gbs 256 --seq 4096 --recompute full "
     "--pp 2..8 --zero 0,1", "megatron"),
    ("d01-l8b-8-zero2", "-m llama3.1-8b -c h100 -n 8 --gbs 64 --seq 4096", "deepspeed"),
    ("d02-l70b-256-pp", "-m llama3.1-70b -c h100 -n 256 --gbs 512 --seq 4096 --pp 2..8", "deepspeed"),
    ("d03-l405b-1024-zero3", "-m llama3.1-405b -c h100 -n 1024 --gbs 1024 --seq 8192 --zero 3", "deepspeed"),
    ("d04-mixtral22-128-ep", "-m mixtral-8x22b -c h100 -n 128 --gbs 512 --seq 4096 --ep 2..8", "deepspeed"),
    ("d05-dsv3-2048-ep", "-m deepseek-v3 -c h100 -n 2048 --gbs 4096 --seq 4096", "deepspeed"),
    ("d06-l70b-128-zbh1", "-m llama3.1-70b -c h100 -n 128 --gbs 256 --seq 4096 --schedule zb-h1", "deepspeed"),
    ("t01-l8b-8-fsdp", "-m llama3.1-8b -c h100 -n 8 --gbs 64 --seq 8192", "torchtitan"),
    ("t02-l70b-512-tp-cp", "-m llama3.1-70b -c h100 -n 512 --gbs 512 --seq 32768 --cp 2..8", "torchtitan"),
    ("t03-l405b-2048-pp-fp8", "-m llama3.1-405b -c h100 -n 2048 --gbs 1024 --seq 8192 --precision fp8 --pp 2..16",
     "torchtitan"),
    ("t04-l405b-1024-vpp", "-m llama3.1-405b -c h100 -n 1024 --gbs 1024 --seq 8192 --schedule interleaved",
     "torchtitan"),
    ("t05-dsv3-1024-ep", "-m deepseek-v3 -c h100 -n 1024 --gbs 4096 --seq 4096", "torchtitan"),
    ("t06-qwen3moe-256-ep-sel", "-m qwen3-235b-a22b -c h100 -n 256 --gbs 1024 --seq 4096 --recompute selective",
     "torchtitan"),
    ("t07-dsv3-2048-dualpipev", "-m deepseek-v3 -c h100 -n 2048 --gbs 4096 --seq 4096 --schedule dualpipev",
     "torchtitan"),
]


def _model_info(name: str) -> dict:
    """The model dimensions the workers need (the harness reads them the same way)."""
    m = load_model(name)
    a = m.attention
    return {"name": m.name, "family": m.family, "layers": m.layers, "hidden": m.hidden, "vocab": m.vocab,
            "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim, "ffn": m.mlp.ffn,
            "max_position": m.max_position, "mla": a.mla is not None, "mtp_layers": m.mtp_layers,
            "moe": None if m.moe is None else {"experts": m.moe.experts, "top_k": m.moe.top_k}}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """case id -> the case file the workers read, planned and exported once per module run."""
    made: dict[str, Path] = {}

    def make(case_id: str, args: str, fmt: str) -> Path:
        if case_id in made:
            return made[case_id]
        d = tmp_path_factory.mktemp(case_id)
        cli = [sys.executable, "-m", "parplan"]
        out = subprocess.run([*cli, "plan", *args.split(), "--framework", fmt, "--json"], capture_output=True,
                             text=True, check=True).stdout
        (d / "plan.json").write_text(out)
        exported = subprocess.run([*cli, "export", str(d / "plan.json"), "--format", fmt, "--out",
                                   str(d / "export"), "--json"], capture_output=True, text=True, check=True)
        plan = json.loads(out)["plans"][0]
        case = {"strategy": plan["strategy"], "gpus": plan["gpus"], "cluster": plan["cluster"],
                "model_name": plan["model"], "model": _model_info(plan["model"]), "stages": plan.get("stages", []),
                "notes": json.loads(exported.stdout).get("notes", []), "export_dir": str(d / "export")}
        (d / "case.json").write_text(json.dumps(case))
        made[case_id] = d / "case.json"
        return made[case_id]

    return make


@pytest.mark.skipif(not (SRC and PY), reason="set PARPLAN_FRAMEWORKS_SRC and PARPLAN_FRAMEWORKS_PY (README)")
@pytest.mark.parametrize(("case_id", "args", "fmt", "label", "kind", "tree"),
                         [(c, a, f, *t) for c, a, f in MATRIX for t in TARGETS[f]],
                         ids=[f"{c}-{t[2]}" for c, _, f in MATRIX for t in TARGETS[f]])
def test_framework_accepts_the_export(cases, case_id, args, fmt, label, kind, tree):
    case = cases(case_id, args, fmt)
    p = subprocess.run([PY, str(HARNESS), "worker", kind, str(Path(SRC) / tree), str(case), label],
                       capture_output=True, text=True, cwd=case.parent, env={**os.environ, "PYTHONWARNINGS": "ignore"},
                       timeout=900)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    assert lines, p.stderr[-3000:]
    result = json.loads(lines[-1][len(MARK):])
    failed = [c for c in result["checks"] if c["ok"] is False]
    assert result["status"] == "pass", json.dumps(
        {"errors": result["errors"], "unknown_flags": result["unknown_flags"], "mismatches": failed}, indent=1)
