"""Software stacks as an input: presets and their sources, stack files, --stack/--compile on the commands, the
round trip through runs files, saved plans and export, and what a stack refuses to run."""

from __future__ import annotations

import json
import shutil

import pytest

from parplan._resources import data_dir
from parplan.errors import ConfigError, InvalidStrategyError, UnknownPresetError
from parplan.export import FRAMEWORKS
from parplan.hardware import load_cluster
from parplan.models import load_model
from parplan.planner import Strategy, evaluate
from parplan.planner.validate import load_runs
from parplan.stacks import load_stack, stack_names
from parplan.stacks.spec import RECOMPUTE_KINDS
from parplan.stacks.support import unsupported_reason

PRESETS = ("deepseek", "fsdp", "maxtext", "megatron-core", "megatron-deepspeed", "nanotron", "torchtitan")
"""Issue #12: the preset names, exactly."""


def test_presets_are_the_named_ones_and_every_fact_has_a_source():
    assert tuple(stack_names()) == PRESETS
    for name in PRESETS:
        stack = load_stack(name)
        missing = [path for path, _, source in stack.facts() if not source]
        assert not missing, (name, missing)


def test_a_stack_exporter_is_a_framework_or_one_version_of_it(tmp_path):
    """runs.exporter "torchtitan" applies every version's support rules (what all of them run), and
    "torchtitan@0.2.2" that version's alone: 0.2.2 shards experts over tp (etp = tp), the registry releases
    (0.3.0, HEAD) have no expert tensor parallelism (export/torchtitan.py rules etp_1_or_tp, no_expert_tp)."""
    assert {load_stack(n).runs.exporter for n in PRESETS} - {None} <= set(FRAMEWORKS)
    model = load_model("qwen1.5-moe-a2.7b")
    layout = Strategy(tp=2, ep=2, etp=2, zero=3, gbs=16, seq=4096)
    one = tmp_path / "titan-022.yaml"
    one.write_text("name: titan-022\nbase: torchtitan\nruns: {exporter: torchtitan@0.2.2}\n")
    assert unsupported_reason(load_stack(str(one)), layout, model, 16) is None
    assert "expert" in unsupported_reason(load_stack("torchtitan"), layout, model, 16)
    for value, message in (("torchtitan@9.9", "unknown torchtitan version '9.9'"), ("titan", "not one of")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"name: x\nbase: torchtitan\nruns: {{exporter: '{value}'}}\n")
        with pytest.raises(ConfigError, match=message) as err:
            load_stack(str(bad))
        assert err.value.field == "runs.exporter" and err.value.file == str(bad)


def test_megatron_names_keep_their_codes():
    """Megatron-Core's recompute names map onto themselves, so its cost is what it was before stacks."""
    assert load_stack("megatron-core").recompute == {"none": "none", "selective": "core_attention",
                                                    "modules": "modules", "full": "full"}
    assert RECOMPUTE_KINDS[:4] == ("none", "core_attention", "modules", "full")


def test_user_stack_file_overrides_a_preset_and_sources_follow(tmp_path):
    path = tmp_path / "my-titan.yaml"
    path.write_text("name: my-titan\nbase: torchtitan\nkernels: {attention: cudnn}\n"
                    "communication: {zero3_bucket_params: 20000000}\n"
                    "sources: {kernels.attention: 'our build: SDPA cuDNN backend'}\n")
    stack = load_stack(str(path))
    assert stack.kernels.attention == "cudnn" and stack.kernels.compile_scope == "block"
    assert stack.sources["kernels.attention"] == "our build: SDPA cuDNN backend"
    assert stack.sources["communication.zero3_bucket_params"] == f"set in {path}"
    assert stack.sources["kernels.compile_scope"] == load_stack("torchtitan").sources["kernels.compile_scope"]


@pytest.mark.parametrize(("text", "field", "message"), [
    ("name: x\nbase: torchtitan\nkernels: {attention: fa5}\n", "kernels.attention", "not one of fa2, fa3, cudnn"),
    ("name: x\nbase: torchtitan\nkernels: {compile: 'yes'}\n", "kernels.compile", "wrong type"),
    ("name: x\nbase: torchtitan\ncommunication: {grad_reduce_bytes: 3}\n", "communication.grad_reduce_bytes",
     "not one of 2, 4"),
    ("name: x\nbase: torchtitan\nkernels: {warp_size: 32}\n", "kernels.warp_size", "unknown field"),
    ("name: x\nbase: torchtitan\nrecompute: {selective: half}\n", "recompute.selective", "not one of"),
    ("name: x\nbase: torchtitan\nmemory: {master_weights: fp32}\n", "memory.master_weights", "unknown field"),
    ("name: x\nbase: torchtitan\nruns: {schedules: [gpipe]}\n", "runs.schedules", "not one of"),
    ("name: x\nkernels: {}\ncommunication: {}\nrecompute: {}\nruns: {}\n", "kernels.fused_ops", "missing"),
    ("name: x\nbase: torchtitan\nflavour: vanilla\n", "flavour", "unknown field"),
])
def test_bad_stack_files_name_the_file_and_field(tmp_path, text, field, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_stack(str(path))
    assert err.value.field == field and err.value.file == str(path)


def test_unknown_stack_suggests_the_nearest():
    with pytest.raises(UnknownPresetError, match="did you mean 'torchtitan'"):
        load_stack("torchtitn")


def test_compile_switch_only_where_the_stack_has_it():
    assert load_stack("torchtitan", compile=True).compiled
    assert not load_stack("torchtitan").compiled
    with pytest.raises(ConfigError, match="no compile path"):
        load_stack("megatron-core", compile=True)
    with pytest.raises(ConfigError, match="always runs compiled"):
        load_stack("maxtext", compile=False)


@pytest.mark.parametrize(("stack", "kw", "reason"), [
    ("fsdp", {"tp": 8}, "no tensor parallelism"),
    ("megatron-core", {"pp": 2, "schedule": "zb-h1"}, "no pipeline schedule zb-h1"),
    ("megatron-core", {"pp": 2, "zero": 3}, "Megatron-FSDP"),
    ("torchtitan", {"recompute": "modules", "zero": 3}, "no recompute setting modules"),
    ("nanotron", {"zero": 3}, "no ZeRO stage 3"),
])
def test_a_stack_refuses_what_it_cannot_run_and_says_why(stack, kw, reason):
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=16)
    s = Strategy(gbs=16, seq=4096, **kw)
    assert reason in unsupported_reason(load_stack(stack), s, model)
    with pytest.raises(InvalidStrategyError, match=f"stack {stack} cannot run this layout"):
        evaluate(model, cluster, s, stack=stack)


def test_blocks_recompute_form():
    s = Strategy(recompute="blocks:1/4")
    assert (s.recompute, s.recompute_blocks) == ("full", 0.25)
    assert "recompute=blocks:1/4" in s.describe(8)
    assert Strategy(recompute="none", recompute_blocks=0.5).recompute_blocks == 1.0
    for bad in ("blocks:1.5", "blocks:0", "blocks:half"):
        with pytest.raises(InvalidStrategyError, match="blocks"):
            Strategy(recompute=bad)


def test_bad_recompute_on_the_command_line(run_cli):
    code, _, err = run_cli("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--recompute", "blocks:1.5")
    assert code == 2 and "fraction of blocks must be in (0, 1]" in err and "--recompute" in err
    code, _, err = run_cli("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--stack", "torchtitn")
    assert code == 1 and "unknown stack 'torchtitn'" in err


def test_runs_file_stack_and_compile_round_trip(tmp_path):
    (tmp_path / "models").mkdir()
    shutil.copy(data_dir("models") / "llama3.1-8b.json", tmp_path / "models" / "m.json")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "ours.yaml").write_text("name: ours\nbase: fsdp\nsources: {}\n")
    runs = tmp_path / "runs.yaml"
    entry = ("  strategy: {{zero: 3}}\n  batch: {{gbs: 8, seq: 4096}}\n  measured: {{tokens_per_s_per_gpu: 1.0}}\n"
             "  model: m.json\n  cluster: h100\n  gpus: 8\n{extra}")
    runs.write_text("- id: a\n" + entry.format(extra="  stack: torchtitan\n  compile: true\n")
                    + "- id: b\n" + entry.format(extra="  stack: ours\n")
                    + "- id: c\n" + entry.format(extra=""))
    a, b, c = load_runs(runs)
    assert a.stack == "torchtitan" and a.compile is True and a.stack_spec().compiled
    assert b.stack == str(tmp_path / "stacks" / "ours.yaml") and b.stack_spec().name == "ours"
    assert c.stack == "megatron-core" and c.compile is None
    runs.write_text("- id: a\n" + entry.format(extra="  stack: megatron-core\n  compile: true\n"))
    with pytest.raises(ConfigError, match="no compile path") as err:
        load_runs(runs)
    assert err.value.field == "a.stack"


def test_plan_stack_round_trips_through_the_saved_plan_and_export(run_cli, tmp_path):
    code, out, err = run_cli("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "8", "--seq", "4096",
                             "--stack", "torchtitan", "--compile", "--top", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    best = doc["plans"][0]
    assert best["stack"] == "torchtitan" and best["compile"] is True and best["stack_source"] == "torchtitan"
    assert best["strategy"]["tp"] in (1, 2, 4, 8) and best["strategy"]["zero"] != 1  # torchtitan has no ZeRO-1
    path = tmp_path / "plan.json"
    path.write_text(out)
    code, out, err = run_cli("export", str(path), "--json")  # the format defaults to the stack's exporter
    assert code == 0, err
    assert json.loads(out)["framework"] == "torchtitan"


def test_default_plan_of_the_readme_exports_for_megatron(run_cli, tmp_path):
    """The README's plan, with the default stack, recommends a layout Megatron-LM can run (it used to pick
    ZeRO-3 with a pipeline, which Megatron-FSDP cannot combine)."""
    code, out, err = run_cli("plan", "--model", "llama3.1-70b", "--cluster", "h100", "--gpus", "64", "--gbs", "128",
                             "--seq", "8192", "--top", "1", "--json")
    assert code == 0, err
    path = tmp_path / "plan.json"
    path.write_text(out)
    code, out, err = run_cli("export", str(path), "--format", "megatron", "--json")
    assert code == 0, err


def test_plan_only_searches_what_the_stack_runs(run_json):
    doc = run_json("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--gbs", "32", "--seq", "4096",
                   "--stack", "fsdp", "--top", "3")
    for p in doc["plans"]:
        s = p["strategy"]
        assert (s["tp"], s["pp"], s["cp"]) == (1, 1, 1) and s["zero"] in (0, 2, 3) and p["stack"] == "fsdp"


def test_stacks_list_and_show(run_cli, run_json):
    listed = run_json("stacks", "list")
    assert [s["name"] for s in listed["stacks"]] == list(PRESETS)
    shown = run_json("stacks", "show", "torchtitan")
    assert shown["facts"]["recompute.selective"]["value"] == "op_sac"
    assert "820504e" in shown["facts"]["communication.grad_reduce_bytes"]["source"]
    code, out, _ = run_cli("stacks", "show", "fsdp")
    assert code == 0 and "grad_reduce_bytes" in out and "bfSixteen" in out
    code, _, err = run_cli("stacks", "show", "nope")
    assert code == 1 and "unknown stack" in err


def _subset(tmp_path, ids: set[str]):
    """A runs file holding some of the shipped runs (their real measurements), beside their model files."""
    import yaml

    from parplan.planner.validate import SHIPPED_RUNS

    entries = [e for name in SHIPPED_RUNS for e in yaml.safe_load((data_dir("runs") / name).read_text())
               if e["id"] in ids]
    shutil.copytree(data_dir("runs") / "models", tmp_path / "models")
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(entries, sort_keys=False))
    return path


TITAN_RUNS = {"torchtitan_asynctp_l31_8b_fsdp8_tp8_bf16_vanillatp", "torchao_l3_8b_mi300x_fsdp8_bf16"}
"""One tier-A run from each of two torchtitan source groups (the torchtitan asyncTP and torchao benchmarks)."""


def test_calibrate_stack_fits_its_knob_and_writes_a_reproducible_file(run_cli, tmp_path):
    runs = _subset(tmp_path, TITAN_RUNS)
    out = tmp_path / "titan.yaml"
    code, text, err = run_cli("calibrate", "--stack", "torchtitan", "--runs", str(runs), "--out", str(out), "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["rms_error_after"] < doc["rms_error_before"]
    fitted = load_stack(str(out))
    assert fitted.kernels.compute_scale == pytest.approx(doc["knobs"]["kernels.compute_scale"], abs=1e-4)
    assert fitted.fit["prior"] == {"compute_scale": 1.0}  # the fit started from the prior, not the shipped value
    assert "fitted by parplan calibrate --stack torchtitan" in fitted.sources["kernels.compute_scale"]
    # The recorded command run again gives the same knob (it starts from the recorded prior).
    code, again, err = run_cli(*fitted.fit["command"].split()[1:], "--json")
    assert code == 0, err
    refit = json.loads(again)["knobs"]["kernels.compute_scale"]
    assert refit == pytest.approx(doc["knobs"]["kernels.compute_scale"], rel=1e-6)


def test_cross_validation_predicts_each_group_from_the_others(run_json, tmp_path):
    runs = _subset(tmp_path, TITAN_RUNS)
    doc = run_json("validate", "--data", str(runs), "--cross-validate")
    groups = {g["group"]: g for g in doc["groups"]}
    assert set(groups) == {"torchtitan_asynctp", "torchao_e2e"}
    assert all(g["refitted"] and g["stack"] == "torchtitan" and g["runs"] == 1 for g in groups.values())
    assert doc["overall"]["runs"] == 2


def test_calibrate_needs_a_cluster_or_a_stack(run_cli):
    code, _, err = run_cli("calibrate")
    assert code == 2 and "--cluster" in err
