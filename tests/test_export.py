"""Launch-settings export: every emitted flag or key exists and parses, a round trip recovers the layout,
and layouts a framework cannot express are refused the same way one at a time and in a batch."""

from __future__ import annotations

import argparse
import itertools
import json
import re

import framework_options as fo
import numpy as np
import pytest

from parplan.errors import ConfigError, InvalidStrategyError
from parplan.export import FRAMEWORKS, export, framework_mask, torchtitan, unsupported_reason
from parplan.hardware import load_cluster
from parplan.models import load_model
from parplan.planner.schedule import virtual_stage_layers
from parplan.planner.strategy import Layouts, Strategy

VPP_SELECTORS = ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                 "pipeline_model_parallel_layout")


# ------------------------------------------------------------------------------------------ helpers

def megatron_ns(launch, gpus: int) -> argparse.Namespace:
    """The arguments as Megatron-LM HEAD parses them, after checking that every target version
    (core_v0.16.1, core_v0.19.0, HEAD) parses them too and that its validation refuses nothing."""
    tokens = fo.shell_tokens(launch.files["pretrain_gpt_args.sh"], "MEGATRON_ARGS")
    for target in fo.MEGATRON:
        ns = fo.parse(target, tokens)
        assert fo.megatron_refusals(ns, gpus) == [], target
        assert sum(getattr(ns, v) is not None for v in VPP_SELECTORS) <= 1, "two VPP selectors"
    return ns


def ds_ns(launch) -> argparse.Namespace:
    return fo.parse("megatron-deepspeed-HEAD", fo.shell_tokens(launch.files["megatron_deepspeed_args.sh"], "DS_ARGS"))


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
        "precision": "fp8" if ns.fp8 else "bf16", "tp_overlap": ns.tp_comm_overlap,
        "flash_attention": ns.attention_backend != "unfused", "p2p_overlap": fo.megatron_overlap_p2p(ns),
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
    ns = megatron_ns(export(model, load_cluster("h100", gpus=gpus), s, "megatron"), gpus)
    got = megatron_strategy(ns, model.moe is not None)
    want = fields(s, [*ROUND_TRIP, "sp", "precision", "tp_overlap", "flash_attention", "p2p_overlap"])
    if model.moe is None:
        want.update(ep=1, etp=1)
    assert got == want


@pytest.mark.parametrize(("name", "gpus", "s"), MEGATRON_CASES)
def test_megatron_placement_matches_parplan(request, name, gpus, s):
    """Megatron builds exactly the layers per virtual stage that parplan's cost model assumed."""
    model = request.getfixturevalue(name)
    ns = megatron_ns(export(model, load_cluster("h100", gpus=gpus), s, "megatron"), gpus)
    assert megatron_stage_layers(ns) == virtual_stage_layers(model.layers, s.pp * s.vpp)


def test_megatron_uneven_pipeline_uses_first_last_flags(llama70, dsv3):
    """80 layers on pp=3: the last stage gives up one layer; 61 on pp=3: the last and then the first."""
    ns = megatron_ns(export(llama70, load_cluster("h100", gpus=48), Strategy(tp=8, pp=3, gbs=96), "megatron"), 48)
    assert (ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers) == (None, 26)
    assert ns.pipeline_model_parallel_layout is None
    ns = megatron_ns(export(dsv3, load_cluster("h100", gpus=96), Strategy(pp=3, ep=32, gbs=64), "megatron"), 96)
    assert (ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers) == (20, 20)
    assert ns.pipeline_model_parallel_layout is None


def test_megatron_layout_places_embedding_mtp_and_loss(dsv3):
    s = Strategy(tp=2, pp=8, vpp=2, ep=64, schedule="interleaved", gbs=4096, seq=4096)
    ns = megatron_ns(export(dsv3, load_cluster("h100", gpus=1024), s, "megatron"), 1024)
    stages = layout_stages(ns.pipeline_model_parallel_layout)
    assert stages[0].startswith("E") and stages[-1].endswith("mL") and len(stages) == 16
    assert ns.mtp_num_layers == 1


def test_megatron_model_flags(dsv3, qwen_moe, llama70):
    """MLA naming trap, MoE layer pattern, shared experts, GQA and head_dim != hidden/heads."""
    cluster = load_cluster("h100", gpus=256)
    ds = megatron_ns(export(dsv3, cluster, Strategy(ep=32, gbs=256), "megatron"), 256)
    assert (ds.qk_head_dim, ds.qk_pos_emb_head_dim, ds.v_head_dim, ds.q_lora_rank) == (128, 64, 128, 1536)
    assert eval(ds.moe_layer_freq) == [0] * 3 + [1] * 58
    assert ds.moe_shared_expert_intermediate_size == 2048 and ds.kv_channels is None
    assert (ds.moe_router_num_groups, ds.moe_router_group_topk) == (8, 4)
    qw = megatron_ns(export(qwen_moe, cluster, Strategy(ep=8, gbs=256), "megatron"), 256)
    assert (qw.kv_channels, qw.num_query_groups, qw.qk_layernorm) == (128, 4, True)
    assert qw.moe_shared_expert_intermediate_size is None and eval(qw.moe_layer_freq) == [1] * 48
    ll = megatron_ns(export(llama70, cluster, Strategy(tp=8, gbs=256), "megatron"), 256)
    assert (ll.kv_channels, ll.rotary_base, ll.swiglu, ll.normalization) == (None, 500000, True, "RMSNorm")
    assert ll.use_rope_scaling and not ds.use_rope_scaling  # llama3 scaling has a flag; DeepSeek's yarn does not
    assert ll.num_experts is None and ll.expert_model_parallel_size == 1  # left at the default


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
    ns = ds_ns(launch)
    assert fo.deepspeed_refusals(config, ns, cluster.gpus) == []
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
                             recompute="selective", tp_overlap=True), "torchtitan"),
    ("llama70", 64, Strategy(tp=8, pp=2, vpp=2, zero=2, schedule="dualpipev", gbs=64, seq=8192, precision="fp8"),
     "torchtitan"),
    ("llama70", 64, Strategy(tp=4, cp=2, zero=3, gbs=64, mbs=2, seq=16384, recompute="full"), "torchtitan"),
    ("llama70", 64, Strategy(tp=8, zero=0, gbs=64, seq=4096), "torchtitan"),
    ("dsv3", 256, Strategy(tp=1, pp=2, ep=32, zero=3, gbs=512, seq=4096, precision="fp8"), "torchtitan"),
    ("qwen_moe", 64, Strategy(tp=2, pp=4, vpp=2, ep=8, etp=1, zero=3, schedule="interleaved", gbs=256, seq=4096),
     "torchtitan"),
    # expert tensor parallelism exists in 0.2.2 only: that version alone is exported
    ("qwen_moe", 64, Strategy(tp=2, ep=4, etp=2, zero=2, gbs=128, seq=4096), "torchtitan@0.2.2"),
]


@pytest.mark.parametrize(("name", "gpus", "s", "framework"), TORCHTITAN_CASES)
def test_torchtitan_toml_parses_and_round_trips(request, name, gpus, s, framework):
    """0.2.2's job file: known keys of the right types, nothing its checks refuse, and the layout back."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11; parplan itself supports 3.10
    model = request.getfixturevalue(name)
    cluster = load_cluster("h100", gpus=gpus)
    launch = export(model, cluster, s, framework)
    job = tomllib.loads(launch.files["train.toml"])
    cfg = fo.titan_toml_config("0.2.2", job)
    assert fo.titan_refusals("0.2.2", cfg, gpus, model.moe is not None) == []
    assert torchtitan_strategy(job) == fields(s, ROUND_TRIP)
    par, dp = job["parallelism"], s.dp(cluster.gpus)
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == dp
    if s.pp > 1:
        parts = par["module_fqns_per_model_part"]
        assert [len([m for m in p if m.startswith("layers.")]) for p in parts] == \
            virtual_stage_layers(model.layers, s.pp * s.vpp)
        assert [m for p in parts for m in p] == \
            ["tok_embeddings", *(f"layers.{i}" for i in range(model.layers)), "norm", "output"]
    assert par.get("enable_async_tensor_parallel", False) == s.tp_overlap == ("compile" in job)
    converters = job["model"].get("converters", [])
    assert bool(converters) == (s.precision == "fp8")
    assert set(converters) <= fo.titan_registered("0.2.2", "converter")
    assert job["model"]["flavor"] in fo.titan_registered("0.2.2", f"flavor:{job['model']['name']}")


@pytest.mark.parametrize(("name", "gpus", "s", "framework"), TORCHTITAN_CASES)
def test_torchtitan_registry_overrides(request, name, gpus, s, framework):
    """0.3.0 and HEAD get one overrides file each, in that release's names (0.3.0 kept 0.2's batch names,
    HEAD counts tokens and pipeline micro-batches), which its checks accept; no file for a version the
    export was not asked for."""
    model = request.getfixturevalue(name)
    launch = export(model, load_cluster("h100", gpus=gpus), s, framework)
    if framework == "torchtitan@0.2.2":
        assert list(launch.files) == ["train.toml"]
        return
    for version, file in (("0.3.0", "overrides_v0.3.0.txt"), ("HEAD", "overrides.txt")):
        text = launch.files[file]
        assert f"torchtitan {version}" in text.splitlines()[0]
        cfg = fo.titan_overrides_config(version, text)
        assert fo.titan_refusals(version, cfg, gpus, model.moe is not None) == [], version
        assert cfg["parallelism.tensor_parallel_degree"] == s.tp
        if version == "HEAD":
            # one pipeline micro-batch per dp rank, times num_pp_microbatches, times dp: the whole batch
            assert cfg["training.num_tokens_per_microbatch_per_dp_rank"] == s.mbs * s.seq
            assert cfg["training.num_tokens_per_train_step"] == s.gbs * s.seq
            if s.pp > 1:
                assert cfg["parallelism.num_pp_microbatches"] == s.gbs // (s.dp(gpus) * s.mbs)
        else:
            assert (cfg["training.global_batch_size"], cfg["training.seq_len"]) == (s.gbs, s.seq)
        module, entry = re.search(r"--module (\S+) --config (\S+)", text).groups()
        assert entry in fo.titan_registered(version, f"registry:{module}")


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
    ("megatron", "llama70", 64, Strategy(tp=8, pp=2, vpp=2, schedule="interleaved", gbs=64, p2p_overlap=False),
     "pp > 2"),
    # dp=2, gbs=4: 2 micro-batches for 4 stages; tp=8·2cp=4 chunks do not split 4112 tokens evenly (4112 = 16·257)
    ("torchtitan", "llama70", 64, Strategy(tp=8, pp=4, zero=3, gbs=4), "1F1B needs at least pp=4 micro-batches"),
    ("torchtitan", "llama70", 64, Strategy(tp=8, cp=2, zero=3, gbs=64, seq=4112), "split evenly"),
    ("torchtitan@HEAD", "qwen_moe", 64, Strategy(tp=2, etp=2, ep=4, zero=2, gbs=64),
     r"no expert_tensor_parallel_degree.*\(0.3.0, HEAD\)"),
    ("torchtitan@0.3.0", "qwen_moe", 64, Strategy(tp=2, ep=4, zero=0, gbs=64), "ep=4 must divide cp·tp = 2"),
]


@pytest.mark.parametrize(("framework", "name", "gpus", "s", "match"), UNSUPPORTED)
def test_unsupported_layouts_are_refused(request, framework, name, gpus, s, match):
    model = request.getfixturevalue(name)
    cluster = load_cluster("h100", gpus=gpus)
    s.check(model, cluster)  # a valid layout: only the framework refuses it
    with pytest.raises(InvalidStrategyError, match=match):
        export(model, cluster, s, framework)
    assert unsupported_reason(framework, s, model=model, gpus=gpus) is not None


def test_invalid_layout_is_refused_before_export(llama70):
    with pytest.raises(InvalidStrategyError, match="tp=3 must divide"):
        export(llama70, load_cluster("h100", gpus=48), Strategy(tp=3, gbs=48), "megatron")


def test_unknown_framework_suggests_known_ones(llama70):
    with pytest.raises(ConfigError, match="unknown framework 'megatorn'; did you mean 'megatron'.*torchtitan"):
        export(llama70, load_cluster("h100", gpus=64), Strategy(tp=8, gbs=64), "megatorn")
    with pytest.raises(ConfigError, match="Known frameworks: megatron, deepspeed, torchtitan"):
        framework_mask("jax", Layouts.from_strategies([Strategy()]))
    with pytest.raises(ConfigError, match="unknown torchtitan version '0.9'; known: torchtitan@0.2.2, "
                                          "torchtitan@0.3.0, torchtitan@HEAD"):
        framework_mask("torchtitan@0.9", Layouts.from_strategies([Strategy()]))


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
                            precision=precision, tp_overlap=overlap and tp > 1, gbs=12 * (1 + ep % 3)))
    return out


@pytest.mark.parametrize("framework", [*FRAMEWORKS, "torchtitan@0.2.2", "torchtitan@HEAD"])
@pytest.mark.parametrize(("name", "gpus"), [(None, None), ("llama70", 64), ("dsv3", 64)])
def test_framework_mask_agrees_with_unsupported_reason(request, framework, name, gpus):
    model = request.getfixturevalue(name) if name else None
    strategies = _batch()
    mask = framework_mask(framework, Layouts.from_strategies(strategies), model=model, gpus=gpus)
    expected = np.array([unsupported_reason(framework, s, model=model, gpus=gpus) is None for s in strategies])
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


@pytest.mark.parametrize(("recompute", "recipe"), [("modules", "tensorwise"), ("selective", "delayed"),
                                                   ("none", "delayed")])
def test_megatron_fp8_recipe_allows_the_recompute(dsv3, recompute, recipe):
    """Megatron's TransformerConfig refuses delayed scaling with layernorm/moe_act recompute (the DeepSeek-V3
    fp8 export of issue #17 raised it in all three releases); delayed, the default parplan costs, stays
    wherever it is allowed, and the recipe is always written out."""
    s = Strategy(tp=2, pp=8, vpp=2, ep=64, schedule="interleaved", gbs=4096, seq=4096, precision="fp8",
                 recompute=recompute)
    ns = megatron_ns(export(dsv3, load_cluster("h100", gpus=1024), s, "megatron"), 1024)
    assert (ns.fp8, ns.fp8_recipe) == ("hybrid", recipe)


@pytest.mark.parametrize("preset", sorted(torchtitan._FLAVOR))
def test_torchtitan_names_what_each_release_registers(preset):
    """The 0.2.2 model/flavor and the 0.3.0 / HEAD config_registry entry an export names exist in that
    release (issue #17: no qwen3_235b_a22b entry exists; the export must say so instead of naming one)."""
    tomllib = pytest.importorskip("tomllib")
    model = load_model(preset)
    for precision in ("bf16", "fp8"):
        launch = export(model, load_cluster("h100", gpus=8), Strategy(zero=3, gbs=8, precision=precision),
                        "torchtitan")
        job = tomllib.loads(launch.files["train.toml"])["model"]
        assert job["flavor"] in fo.titan_registered("0.2.2", f"flavor:{job['name']}")
        for version, file in (("0.3.0", "overrides_v0.3.0.txt"), ("HEAD", "overrides.txt")):
            module, entry = re.search(r"--module (\S+) --config (\S+)", launch.files[file]).groups()
            if entry.startswith("<"):
                assert any("no config_registry entry" in n for n in launch.notes)
            else:
                assert entry in fo.titan_registered(version, f"registry:{module}"), (version, entry)


def test_torchtitan_says_when_the_registry_entry_changes_the_precision():
    """torchtitan 0.3.0 / HEAD's llama3_405b entry builds Float8LinearConverter (models/llama3/config_registry.py):
    a bf16 plan says to drop it, an fp8 plan needs nothing more."""
    model, cluster = load_model("llama3.1-405b"), load_cluster("h100", gpus=1024)
    for precision, said in (("bf16", True), ("fp8", False)):
        s = Strategy(tp=8, pp=8, zero=3, gbs=1024, seq=8192, precision=precision)
        notes = " ".join(export(model, cluster, s, "torchtitan").notes)
        assert ("drop its converters" in notes) == said and "Float8LinearConverter" not in notes
