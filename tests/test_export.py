"""Launch-settings export: every emitted flag or key exists and parses, a round trip recovers the layout,
and layouts a framework cannot express are refused the same way one at a time and in a batch."""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from parplan.errors import ConfigError, InvalidStrategyError
from parplan.export import FRAMEWORKS, export, framework_mask, unsupported_reason
from parplan.hardware import load_cluster
from parplan.models import load_model
from parplan.planner.schedule import virtual_stage_layers
from parplan.planner.strategy import Layouts, Strategy

DATA = Path(__file__).parent / "data"

# Megatron-DeepSpeed launcher flags (deepspeedai/Megatron-DeepSpeed megatron/arguments.py and
# deepspeed.add_config_arguments); None marks a store_true flag.
MEGATRON_DEEPSPEED_FLAGS: dict[str, type | None] = {
    "--deepspeed": None, "--deepspeed_config": str, "--zero-stage": int, "--tensor-model-parallel-size": int,
    "--pipeline-model-parallel-size": int, "--no-pipeline-parallel": None, "--enable-zbh1-pipeline": None,
    "--sequence-parallel": None, "--moe-expert-parallel-size": int, "--enable-expert-tensor-parallelism": None,
    "--micro-batch-size": int, "--global-batch-size": int, "--seq-length": int, "--recompute-granularity": str,
    "--recompute-method": str, "--recompute-num-layers": int, "--use-flash-attn-v2": None, "--bf16": None,
}

# torchtitan <= v0.2.2 keys per section (reference/ecosystem.md A4).
TORCHTITAN_KEYS = {
    "model": {"name", "flavor", "converters"},
    "training": {"local_batch_size", "global_batch_size", "seq_len"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_async_tensor_parallel", "pipeline_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size", "module_fqns_per_model_part",
                    "context_parallel_degree", "expert_parallel_degree", "expert_tensor_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "compile": {"enable"},
}
# torchtitan HEAD dotted names (reference/ecosystem.md A4 "HEAD").
TORCHTITAN_HEAD = {
    "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward", "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree", "parallelism.pipeline_parallel_schedule",
    "parallelism.num_pp_microbatches", "parallelism.context_parallel_degree", "parallelism.expert_parallel_degree",
    "compile.enable", "compile.enable_async_tensor_parallel", "training.num_tokens_per_microbatch_per_dp_rank",
    "training.num_tokens_per_train_step", "training.max_context_length",
}
VPP_SELECTORS = ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                 "pipeline_model_parallel_layout")


# ------------------------------------------------------------------------------------------ helpers

def megatron_parser() -> argparse.ArgumentParser:
    """argparse parser of the known Megatron-LM flags in tests/data/megatron_flags.txt, with their types."""
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for line in (DATA / "megatron_flags.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        flag, kind = line.split()
        if kind == "flag":
            parser.add_argument(flag, action="store_true")
        elif kind in ("int", "float", "str"):
            parser.add_argument(flag, type={"int": int, "float": float, "str": str}[kind])
        else:
            parser.add_argument(flag, choices=kind.split("|"))
    return parser


def ds_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for flag, kind in MEGATRON_DEEPSPEED_FLAGS.items():
        if kind is None:
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=kind)
    return parser


def shell_tokens(text: str, variable: str) -> list[str]:
    """The tokens of the bash array `variable=( ... )`, as the shell would pass them."""
    body = text.split(f"{variable}=(\n", 1)[1].split("\n)\n", 1)[0]
    return shlex.split(body)


def parse_strict(parser: argparse.ArgumentParser, tokens: list[str]) -> argparse.Namespace:
    flags = [t for t in tokens if t.startswith("--")]
    assert len(flags) == len(set(flags)), f"repeated flags: {flags}"
    ns, unknown = parser.parse_known_args(tokens)
    assert not unknown, f"unknown arguments: {unknown}"
    return ns


def megatron_ns(launch) -> argparse.Namespace:
    ns = parse_strict(megatron_parser(), shell_tokens(launch.files["pretrain_gpt_args.sh"], "MEGATRON_ARGS"))
    assert sum(getattr(ns, v) is not None for v in VPP_SELECTORS) <= 1, "two VPP selectors"
    return ns


def layout_stages(layout: str) -> list[str]:
    """Expand Megatron's layout repeats (x*n) and split into virtual stages."""
    return re.sub(r"(.)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), layout).split("|")


def megatron_stage_layers(ns: argparse.Namespace) -> list[int]:
    """Layers per virtual stage as Megatron's get_num_layers_to_build computes them from the flags."""
    layers, pp = ns.num_layers, ns.pipeline_model_parallel_size
    if ns.pipeline_model_parallel_layout:
        return [stage.count("t") for stage in layout_stages(ns.pipeline_model_parallel_layout)]
    if ns.num_layers_per_virtual_pipeline_stage:
        per = ns.num_layers_per_virtual_pipeline_stage
        return [per] * (layers // per)
    first, last = ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers
    middle_ranks = pp - (first is not None) - (last is not None)
    middle = (layers - (first or 0) - (last or 0)) // middle_ranks if middle_ranks else 0
    counts = [middle] * pp
    counts[0] = middle if first is None else first
    counts[-1] = middle if last is None else last
    return counts


def megatron_strategy(ns: argparse.Namespace, moe: bool) -> dict[str, object]:
    tp, pp = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size
    stages = len(megatron_stage_layers(ns))
    if ns.use_megatron_fsdp:
        zero = {"optim_grads": 2, "optim_grads_params": 3}[ns.data_parallel_sharding_strategy]
    else:
        zero = int(ns.use_distributed_optimizer)
    return {
        "tp": tp, "pp": pp, "cp": ns.context_parallel_size, "vpp": stages // pp,
        "ep": ns.expert_model_parallel_size if moe else 1, "etp": ns.expert_tensor_parallel_size if moe else 1,
        "mbs": ns.micro_batch_size, "gbs": ns.global_batch_size, "seq": ns.seq_length, "zero": zero,
        "recompute": ns.recompute_granularity or "none", "sp": ns.sequence_parallel,
        "precision": "fp8" if ns.fp8_format else "bf16", "tp_overlap": ns.tp_comm_overlap,
        "flash_attention": ns.attention_backend != "unfused", "p2p_overlap": not ns.no_overlap_p2p_communication,
    }


def torchtitan_strategy(job: dict) -> dict[str, object]:
    par, train = job["parallelism"], job["training"]
    pp = par["pipeline_parallel_degree"]
    zero = {"always": 3, "never": 2}.get(par.get("fsdp_reshard_after_forward"), 0)
    return {
        "tp": par["tensor_parallel_degree"], "pp": pp, "cp": par["context_parallel_degree"],
        "vpp": len(par["module_fqns_per_model_part"]) // pp if pp > 1 else 1,
        "ep": par.get("expert_parallel_degree", 1), "etp": par.get("expert_tensor_parallel_degree", 1),
        "mbs": par["pipeline_parallel_microbatch_size"] if pp > 1 else train["local_batch_size"],
        "gbs": train["global_batch_size"], "seq": train["seq_len"], "zero": zero,
        "recompute": job["activation_checkpoint"]["mode"],
    }


def fields(s: Strategy, names: list[str]) -> dict[str, object]:
    return {n: getattr(s, n) for n in names}


# (model fixture, gpus, strategy) for the round trips; covers even, uneven first/last and layout placements.
MEGATRON_CASES = [
    ("llama70", 64, Strategy(tp=8, pp=4, vpp=5, schedule="interleaved", gbs=128, seq=8192, recompute="selective",
                             tp_overlap=True)),
    ("llama70", 64, Strategy(tp=8, pp=1, zero=3, gbs=64, seq=8192, recompute="full")),
    ("llama70", 48, Strategy(tp=8, pp=3, zero=0, gbs=96, mbs=2, seq=4096, recompute="full",
                             flash_attention=False)),
    ("llama70", 48, Strategy(tp=8, pp=6, gbs=48, seq=4096)),
    ("llama70", 64, Strategy(tp=8, pp=4, vpp=2, schedule="interleaved", gbs=64, seq=4096, p2p_overlap=False)),
    ("llama70", 64, Strategy(tp=4, pp=4, cp=2, vpp=3, schedule="interleaved", gbs=64, seq=16384,
                             precision="fp8")),
    ("dsv3", 1024, Strategy(tp=2, pp=8, vpp=2, ep=64, etp=1, schedule="interleaved", gbs=4096, seq=4096,
                            recompute="selective", precision="fp8")),
    ("dsv3", 256, Strategy(tp=1, pp=2, ep=32, gbs=512, seq=4096, recompute="full")),
    ("dsv3", 96, Strategy(tp=1, pp=3, ep=32, gbs=64, seq=4096)),
    ("qwen_moe", 64, Strategy(tp=2, pp=4, vpp=2, ep=8, etp=2, schedule="interleaved", gbs=256, seq=4096)),
    ("qwen_moe", 64, Strategy(tp=1, ep=8, zero=2, gbs=128, seq=4096)),
]
ROUND_TRIP = ["tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq", "zero", "recompute"]


# ------------------------------------------------------------------------------------------ Megatron-LM

@pytest.mark.parametrize(("name", "gpus", "s"), MEGATRON_CASES)
def test_megatron_args_parse_and_round_trip(request, name, gpus, s):
    """Every emitted argument is a known flag of the right type, and parsing recovers the layout."""
    model = request.getfixturevalue(name)
    ns = megatron_ns(export(model, load_cluster("h100", gpus=gpus), s, "megatron"))
    got = megatron_strategy(ns, model.moe is not None)
    want = fields(s, [*ROUND_TRIP, "sp", "precision", "tp_overlap", "flash_attention", "p2p_overlap"])
    if model.moe is None:
        want.update(ep=1, etp=1)
    assert got == want


@pytest.mark.parametrize(("name", "gpus", "s"), MEGATRON_CASES)
def test_megatron_placement_matches_parplan(request, name, gpus, s):
    """Megatron builds exactly the layers per virtual stage that parplan's cost model assumed."""
    model = request.getfixturevalue(name)
    ns = megatron_ns(export(model, load_cluster("h100", gpus=gpus), s, "megatron"))
    assert megatron_stage_layers(ns) == virtual_stage_layers(model.layers, s.pp * s.vpp)


def test_megatron_uneven_pipeline_uses_first_last_flags(llama70, dsv3):
    """80 layers on pp=3: the last stage gives up one layer; 61 on pp=3: the last and then the first."""
    ns = megatron_ns(export(llama70, load_cluster("h100", gpus=48), Strategy(tp=8, pp=3, gbs=96), "megatron"))
    assert (ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers) == (None, 26)
    assert ns.pipeline_model_parallel_layout is None
    ns = megatron_ns(export(dsv3, load_cluster("h100", gpus=96), Strategy(pp=3, ep=32, gbs=64), "megatron"))
    assert (ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers) == (20, 20)
    assert ns.pipeline_model_parallel_layout is None


def test_megatron_layout_places_embedding_mtp_and_loss(dsv3):
    s = Strategy(tp=2, pp=8, vpp=2, ep=64, schedule="interleaved", gbs=4096, seq=4096)
    ns = megatron_ns(export(dsv3, load_cluster("h100", gpus=1024), s, "megatron"))
    stages = layout_stages(ns.pipeline_model_parallel_layout)
    assert stages[0].startswith("E") and stages[-1].endswith("mL") and len(stages) == 16
    assert ns.mtp_num_layers == 1


def test_megatron_model_flags(dsv3, qwen_moe, llama70):
    """MLA naming trap, MoE layer pattern, shared experts, GQA and head_dim != hidden/heads."""
    cluster = load_cluster("h100", gpus=256)
    ds = megatron_ns(export(dsv3, cluster, Strategy(ep=32, gbs=256), "megatron"))
    assert (ds.qk_head_dim, ds.qk_pos_emb_head_dim, ds.v_head_dim, ds.q_lora_rank) == (128, 64, 128, 1536)
    assert eval(ds.moe_layer_freq) == [0] * 3 + [1] * 58
    assert ds.moe_shared_expert_intermediate_size == 2048 and ds.kv_channels is None
    assert (ds.moe_router_num_groups, ds.moe_router_group_topk) == (8, 4)
    qw = megatron_ns(export(qwen_moe, cluster, Strategy(ep=8, gbs=256), "megatron"))
    assert (qw.kv_channels, qw.num_query_groups, qw.qk_layernorm) == (128, 4, True)
    assert qw.moe_shared_expert_intermediate_size is None and eval(qw.moe_layer_freq) == [1] * 48
    ll = megatron_ns(export(llama70, cluster, Strategy(tp=8, gbs=256), "megatron"))
    assert (ll.kv_channels, ll.rotary_base, ll.swiglu, ll.normalization) == (None, 500000, True, "RMSNorm")
    assert ll.use_rope_scaling and not ds.use_rope_scaling  # llama3 scaling has a flag; DeepSeek's yarn does not
    assert ll.num_experts is None and ll.expert_model_parallel_size is None


# ------------------------------------------------------------------------------------------ DeepSpeed

DEEPSPEED_CASES = [
    ("llama70", 64, Strategy(tp=8, pp=2, zero=1, gbs=128, mbs=2, seq=8192, recompute="full")),
    ("llama70", 64, Strategy(tp=4, zero=3, gbs=64, seq=4096, recompute="selective")),
    ("llama70", 64, Strategy(tp=1, pp=4, zero=0, sp=False, schedule="zb-h1", gbs=64, seq=4096)),
    ("dsv3", 256, Strategy(tp=1, ep=32, zero=2, gbs=512, seq=4096)),
    ("qwen_moe", 64, Strategy(tp=2, ep=8, etp=2, zero=1, gbs=128, seq=4096)),
]


@pytest.mark.parametrize(("name", "gpus", "s"), DEEPSPEED_CASES)
def test_deepspeed_batch_identity_and_round_trip(request, name, gpus, s):
    model = request.getfixturevalue(name)
    cluster = load_cluster("h100", gpus=gpus)
    launch = export(model, cluster, s, "deepspeed")
    config = json.loads(launch.files["ds_config.json"])
    dp = cluster.gpus // (s.tp * s.pp)
    assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                          * config["gradient_accumulation_steps"] * dp) == s.gbs
    assert config["bf16"] == {"enabled": True} and config["gradient_clipping"] == 1.0
    assert config["zero_optimization"]["stage"] == s.zero
    assert all(k.startswith("stage3_") == (s.zero == 3) for k in config["zero_optimization"] if "3" in k)
    ns = parse_strict(ds_parser(), shell_tokens(launch.files["megatron_deepspeed_args.sh"], "DS_ARGS"))
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.zero_stage) == (s.tp, s.pp, s.zero)
    assert (ns.micro_batch_size, ns.global_batch_size, ns.seq_length) == (s.mbs, s.gbs, s.seq)
    assert ns.no_pipeline_parallel == (s.pp == 1) and ns.enable_zbh1_pipeline == (s.schedule == "zb-h1")
    assert (ns.recompute_granularity or "none") == s.recompute
    if model.moe:
        assert ns.moe_expert_parallel_size == s.ep
        assert ns.enable_expert_tensor_parallelism == (s.etp > 1)
        assert any("deepspeed.moe.layer.MoE" in n for n in launch.notes)


# ------------------------------------------------------------------------------------------ torchtitan

TORCHTITAN_CASES = [
    ("llama70", 64, Strategy(tp=8, pp=4, vpp=5, zero=3, schedule="interleaved", gbs=128, seq=8192,
                             recompute="selective", tp_overlap=True)),
    ("llama70", 64, Strategy(tp=8, pp=2, vpp=2, zero=2, schedule="dualpipev", gbs=64, seq=8192, precision="fp8")),
    ("llama70", 64, Strategy(tp=4, cp=2, zero=3, gbs=64, mbs=2, seq=16384, recompute="full")),
    ("llama70", 64, Strategy(tp=8, zero=0, gbs=64, seq=4096)),
    ("dsv3", 256, Strategy(tp=1, pp=2, ep=32, zero=3, gbs=512, seq=4096)),
    ("qwen_moe", 64, Strategy(tp=2, pp=4, vpp=2, ep=8, etp=1, zero=3, schedule="interleaved", gbs=256, seq=4096)),
    ("qwen_moe", 64, Strategy(tp=2, ep=4, etp=2, zero=2, gbs=128, seq=4096)),
]


@pytest.mark.parametrize(("name", "gpus", "s"), TORCHTITAN_CASES)
def test_torchtitan_toml_parses_and_round_trips(request, name, gpus, s):
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11; parplan itself supports 3.10
    model = request.getfixturevalue(name)
    cluster = load_cluster("h100", gpus=gpus)
    launch = export(model, cluster, s, "torchtitan")
    job = tomllib.loads(launch.files["train.toml"])
    for section, keys in job.items():
        assert set(keys) <= TORCHTITAN_KEYS[section], section
    assert torchtitan_strategy(job) == fields(s, ROUND_TRIP)
    par, dp = job["parallelism"], s.dp(cluster.gpus)
    degrees = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    assert degrees * par["context_parallel_degree"] * s.tp * s.pp == cluster.gpus and degrees == dp
    assert job["training"]["global_batch_size"] % (job["training"]["local_batch_size"] * dp) == 0
    if s.pp > 1:
        parts = par["module_fqns_per_model_part"]
        assert [len([m for m in p if m.startswith("layers.")]) for p in parts] == \
            virtual_stage_layers(model.layers, s.pp * s.vpp)
        assert [m for p in parts for m in p] == \
            ["tok_embeddings", *(f"layers.{i}" for i in range(model.layers)), "norm", "output"]
    assert par.get("enable_async_tensor_parallel", False) == s.tp_overlap == job.get("compile", {}).get("enable", False)
    assert ("converters" in job["model"]) == (s.precision == "fp8")


@pytest.mark.parametrize(("name", "gpus", "s"), TORCHTITAN_CASES)
def test_torchtitan_head_overrides(request, name, gpus, s):
    """HEAD overrides use HEAD's names (token-based batch), and are left out when etp > 1."""
    model = request.getfixturevalue(name)
    launch = export(model, load_cluster("h100", gpus=gpus), s, "torchtitan")
    if s.etp > 1:
        assert "overrides.txt" not in launch.files
        assert any("expert_tensor_parallel_degree" in n for n in launch.notes)
        return
    lines = [ln.split() for ln in launch.files["overrides.txt"].splitlines() if not ln.startswith("#")]
    values = {ln[0].removeprefix("--"): (ln[1] if len(ln) > 1 else True) for ln in lines}
    assert set(values) <= TORCHTITAN_HEAD
    assert int(values["training.num_tokens_per_train_step"]) == s.gbs * s.seq
    assert int(values["training.max_context_length"]) == s.seq
    assert int(values["parallelism.tensor_parallel_degree"]) == s.tp
    if s.pp > 1:
        assert int(values["parallelism.num_pp_microbatches"]) == s.gbs // (s.dp(gpus) * s.mbs)


# ------------------------------------------------------------------------------------------ support rules

UNSUPPORTED = [
    ("megatron", "llama70", 64, Strategy(tp=8, pp=4, schedule="zb-h1", gbs=64), "Megatron-LM.*zero-bubble"),
    ("megatron", "llama70", 64, Strategy(tp=8, pp=4, vpp=2, schedule="dualpipev", gbs=64), "Megatron-LM.*DeepSeek"),
    ("megatron", "llama70", 64, Strategy(tp=8, pp=2, zero=3, gbs=64), "Megatron-LM.*Megatron-FSDP.*pipeline"),
    ("deepspeed", "llama70", 64, Strategy(tp=8, pp=2, zero=3, gbs=64), "DeepSpeed.*PipelineEngine.*ZeRO stage 0 or 1"),
    ("deepspeed", "llama70", 64, Strategy(tp=8, cp=2, gbs=64), "DeepSpeed.*context parallelism.*Ulysses"),
    ("deepspeed", "llama70", 64, Strategy(tp=8, pp=4, vpp=2, schedule="interleaved", gbs=64),
     "DeepSpeed.*interleaved"),
    ("deepspeed", "llama70", 64, Strategy(tp=8, precision="fp8", gbs=64), "DeepSpeed.*fp8"),
    ("deepspeed", "dsv3", 256, Strategy(pp=2, ep=8, gbs=256), "DeepSpeed.*MoE models"),
    ("deepspeed", "qwen_moe", 64, Strategy(tp=2, ep=8, etp=1, gbs=64), "DeepSpeed.*etp must equal tp=2"),
    ("torchtitan", "llama70", 64, Strategy(tp=8, pp=4, schedule="dualpipe", gbs=64), "torchtitan.*DualPipeV"),
    ("torchtitan", "llama70", 64, Strategy(tp=8, pp=4, schedule="zb-h1", gbs=64), "torchtitan.*ZB-H1"),
    ("torchtitan", "llama70", 64, Strategy(tp=8, zero=1, gbs=64), "torchtitan.*no ZeRO-1"),
    ("torchtitan", "llama70", 64, Strategy(tp=8, cp=2, zero=0, gbs=64), "torchtitan.*FSDP over the context"),
    ("torchtitan", "llama70", 64, Strategy(tp=8, sp=False, zero=3, gbs=64), "torchtitan.*sequence parallelism"),
    ("torchtitan", "qwen_moe", 64, Strategy(tp=4, etp=2, ep=2, zero=3, gbs=64), "torchtitan.*1 or tp=4"),
    ("torchtitan", "qwen_moe", 64, Strategy(tp=4, etp=1, ep=2, zero=3, gbs=64), "torchtitan.*multiple of 4"),
    ("torchtitan", "qwen_moe", 64, Strategy(tp=2, etp=2, ep=4, zero=0, gbs=64), "torchtitan.*ep must equal 1"),
]


@pytest.mark.parametrize(("framework", "name", "gpus", "s", "match"), UNSUPPORTED)
def test_unsupported_layouts_are_refused(request, framework, name, gpus, s, match):
    model = request.getfixturevalue(name)
    cluster = load_cluster("h100", gpus=gpus)
    s.check(model, cluster)  # a valid layout: only the framework refuses it
    with pytest.raises(InvalidStrategyError, match=match):
        export(model, cluster, s, framework)
    assert unsupported_reason(framework, s, model=model) is not None


def test_invalid_layout_is_refused_before_export(llama70):
    with pytest.raises(InvalidStrategyError, match="tp=3 must divide"):
        export(llama70, load_cluster("h100", gpus=48), Strategy(tp=3, gbs=48), "megatron")


def test_unknown_framework_suggests_known_ones(llama70):
    with pytest.raises(ConfigError, match="unknown framework 'megatorn'; did you mean 'megatron'.*torchtitan"):
        export(llama70, load_cluster("h100", gpus=64), Strategy(tp=8, gbs=64), "megatorn")
    with pytest.raises(ConfigError, match="Known frameworks: megatron, deepspeed, torchtitan"):
        framework_mask("jax", Layouts.from_strategies([Strategy()]))


def _batch() -> list[Strategy]:
    """Layouts crossing every feature a support rule looks at (validity against a model is not needed);
    every 7th point of the grid keeps the test fast while every value still occurs in many combinations."""
    out = []
    grid = itertools.product((1, 2, 4), (1, 2), (1, 2), (0, 1, 2, 3), (1, 2, 4), (1, 2),
                             ("1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev"), (True, False),
                             ("bf16", "fp8"), (False, True))
    for tp, pp, cp, zero, ep, etp, schedule, sp, precision, overlap in itertools.islice(grid, 0, None, 7):
        vpp = 2 if schedule in ("interleaved", "dualpipev") else 1
        out.append(Strategy(tp=tp, pp=pp, cp=cp, zero=zero, ep=ep, etp=etp, vpp=vpp, schedule=schedule, sp=sp,
                            precision=precision, tp_overlap=overlap and tp > 1))
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", [None, "llama70", "dsv3"])
def test_framework_mask_agrees_with_unsupported_reason(request, framework, name):
    model = request.getfixturevalue(name) if name else None
    strategies = _batch()
    mask = framework_mask(framework, Layouts.from_strategies(strategies), model=model)
    expected = np.array([unsupported_reason(framework, s, model=model) is None for s in strategies])
    assert mask.dtype == bool and np.array_equal(mask, expected)
    assert 0 < mask.sum() < len(strategies)


def test_launch_text_has_every_file_and_the_notes(dsv3):
    launch = export(dsv3, load_cluster("h100", gpus=256), Strategy(ep=32, zero=1, gbs=256), "deepspeed")
    assert launch.framework == "deepspeed"
    for name in launch.files:
        assert f"==> {name} <==" in launch.text
    assert "==> notes <==" in launch.text and launch.notes[0] in launch.text


def test_scatter_gather_plans_warn_megatron_core_users():
    """A plan costed with legacy Megatron's pipeline scatter-gather says Megatron-Core sends whole tensors;
    DeepSpeed's pipeline engine partitions them itself, so its launch has nothing to add."""
    model, cluster = load_model("gpt3-175b"), load_cluster("a100-80gb", gpus=64)
    s = Strategy(tp=8, pp=8, sp=False, pp_scatter_gather=True, gbs=64, seq=2048, recompute="full")
    assert any("scatter-gather" in n for n in export(model, cluster, s, "megatron").notes)
    assert not any("scatter-gather" in n for n in export(model, cluster, s, "deepspeed").notes)
