"""torchtitan: a TOML job file for 0.2.2 and dotted overrides for the config-registry releases (0.3.0, HEAD).

Targets (`TARGETS`), each with its own file and rules: torchtitan 0.2.2 (train.toml, JobConfig sections),
0.3.0 (overrides_v0.3.0.txt: the config registry with 0.2's batch names local_batch_size / global_batch_size /
seq_len) and HEAD b5bcd76 (overrides.txt: token-based batch names). Every key, its type and choices are
checked against each release's config classes (tests/data/frameworks/torchtitan-*.txt, read off
``torchtitan/config/job_config.py`` and ``torchtitan/config/configs.py``). Sources: the EP mesh constraints
from ``torchtitan/distributed/parallel_dims.py`` of each release; the CUDA-graph and async-TP refusals from
``torchtitan/trainer.py`` and ``torchtitan/config/configs.py`` (0.3.0, HEAD); the batch checks of
``Trainer.__init__``; the schedules' micro-batch checks from ``torch/distributed/pipelining/schedules.py``
(torch 2.13); stage counting and `module_fqns_per_model_part` (stage i on rank i mod pp for looped schedules,
ranks r and 2pp-1-r for V schedules) from ``torchtitan/distributed/pipeline_parallel.py``; key meanings from
``reference/ecosystem.md`` §A4, §A5 and §0 items 1-2.
"""

from __future__ import annotations

import json

import numpy as np

from parplan.export.common import (
    Known,
    Launch,
    Support,
    Target,
    describe,
    is_dispatch,
    is_recompute,
    is_schedule,
    no_redundant_experts,
    versions,
)
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.schedule import virtual_stage_layers
from parplan.planner.strategy import Layouts, Strategy

NAME = "torchtitan"
TOML_FILE = "train.toml"
HEAD_FILE = "overrides.txt"

TARGETS = (Target("0.2.2", "torchtitan 0.2.2"), Target("0.3.0", "torchtitan 0.3.0"),
           Target("HEAD", "torchtitan HEAD b5bcd76"))
_REGISTRY = ("0.3.0", "HEAD")
"""The releases configured through Python config registries plus command-line overrides (PR #2386 dropped
TOML); 0.2.2 reads a TOML job file."""
_FILES = {"0.2.2": TOML_FILE, "0.3.0": "overrides_v0.3.0.txt", "HEAD": HEAD_FILE}

# parplan schedule -> torch.distributed.pipelining schedule name (ecosystem.md A4).
_SCHEDULE = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "dualpipev": "DualPipeV"}
# HF model_type -> torchtitan model (package under torchtitan/models); preset -> 0.2.2 flavor and the
# 0.3.0 / HEAD config_registry entry (tests check both against each release's registries).
_MODEL = {"llama": "llama3", "deepseek_v2": "deepseek_v3", "deepseek_v3": "deepseek_v3",
          "qwen3": "qwen3", "qwen3_moe": "qwen3"}
_FLAVOR = {"llama3.1-8b": "8B", "llama3.1-70b": "70B", "llama3.1-405b": "405B", "deepseek-v2-lite": "16B",
           "deepseek-v3": "671B", "qwen3-0.6b": "0.6B", "qwen3-8b": "8B", "qwen3-32b": "32B",
           "qwen3-30b-a3b": "30B-A3B", "qwen3-235b-a22b": "235B-A22B", "qwen3-235b-a22b-2507": "235B-A22B"}
_ENTRY = {"llama3.1-8b": "llama3_8b", "llama3.1-70b": "llama3_70b", "llama3.1-405b": "llama3_405b",
          "deepseek-v2-lite": "deepseek_v3_16b", "deepseek-v3": "deepseek_v3_671b", "qwen3-0.6b": "qwen3_0_6b",
          "qwen3-32b": "qwen3_32b", "qwen3-30b-a3b": "qwen3_30b_a3b"}
_FLOAT8_ENTRY = {"deepseek_v3_671b": "deepseek_v3_671b_float8"}
"""The fp8 variant of a registry entry (it also quantises the grouped experts to float8)."""
_FLOAT8_ENTRIES = frozenset({"llama3_405b", "deepseek_v3_671b_float8"})
"""Entries whose model_registry call has float8 converters (models/*/config_registry.py of 0.3.0 and HEAD:
llama3_405b converts its linears whatever the precision asked)."""


def _ep_base(tp: np.ndarray | int, etp: np.ndarray | int, cp: np.ndarray | int) -> np.ndarray | int:
    """Ranks 0.2.2's EP must take whole: all cp ranks, plus the tp ranks when experts are not tensor-parallel."""
    return cp * np.where(etp == tp, 1, tp)


def _ep_mesh_ok(lay: Layouts, c: Known) -> np.ndarray:
    # 0.2.2 ParallelDims: ep % base == 0 and (dp_shard·base) % ep == 0; the second holds for FSDP by parplan's
    # expert-grid rule, and with zero 0 (dp_shard = 1) it forces ep == base.
    base = _ep_base(lay.tp, lay.etp, lay.cp)
    return (lay.ep == 1) | ((lay.ep % base == 0) & ((lay.zero != 0) | (lay.ep == base)))


def _ep_mesh_why(s: Strategy) -> str:
    base = int(_ep_base(s.tp, s.etp, s.cp))
    what = f"all cp={s.cp} ranks" + ("" if s.etp == s.tp else f" and tp={s.tp} ranks")
    if s.zero == 0:
        return (f"torchtitan builds expert parallelism from {what} plus part of the FSDP shard group, and "
                f"zero 0 has no shard group: ep must equal {base}, got {s.ep}")
    return f"torchtitan builds expert parallelism from {what} plus part of the FSDP shard group: ep must be a " \
           f"multiple of {base}, got {s.ep}"


def _seq_divisor(lay: Layouts | Strategy) -> np.ndarray | int:
    """Tokens a sequence must split into evenly: tp shards (sequence parallel) times 2·cp load-balanced
    chunks (torchtitan's head-tail CP load balancer)."""
    return lay.tp * np.where(lay.cp > 1, 2 * lay.cp, 1)


def _one_f_one_b_microbatches(lay: Layouts, c: Known) -> np.ndarray:
    # torch.distributed.pipelining's Schedule1F1B raises with fewer micro-batches than stages (DualPipeV's
    # 2·pp and Interleaved1F1B's whole rounds of pp are parplan's own schedule rules already).
    m = c.microbatches(lay)
    return np.ones(len(lay), bool) if m is None else ~is_schedule(lay, "1f1b") | (lay.pp == 1) | (m >= lay.pp)


RULES: tuple[Support, ...] = (
    Support("no_dualpipe", lambda lay, c: ~is_schedule(lay, "dualpipe"),
            lambda s: "torchtitan has DualPipeV (schedule dualpipev) but not bidirectional DualPipe"),
    Support("no_zb_h1", lambda lay, c: ~is_schedule(lay, "zb-h1"),
            lambda s: "torch.distributed.pipelining's zero-bubble schedules hold several stages per rank "
                      "(InterleavedZeroBubble needs >= 2, ZBVZeroBubble 2); single-chunk ZB-H1 has none: use "
                      "1f1b, interleaved or dualpipev"),
    Support("one_f_one_b_microbatches", _one_f_one_b_microbatches,
            lambda s: f"torch.distributed.pipelining's 1F1B needs at least pp={s.pp} micro-batches: change gbs, "
                      f"mbs or dp"),
    Support("no_zero_1", lambda lay, c: lay.zero != 1,
            lambda s: "torchtitan has no ZeRO-1 (sharded optimizer states only): FSDP2 shards gradients with "
                      "them; use zero 2 (fsdp_reshard_after_forward = \"never\") or zero 3"),
    Support("cp_is_sharded", lambda lay, c: (lay.cp == 1) | (lay.zero != 0),
            lambda s: f"torchtitan always applies FSDP over the context-parallel ranks (cp={s.cp}), so "
                      f"parameters cannot stay replicated: use zero 2 or 3"),
    Support("tp_has_sp", lambda lay, c: (lay.tp == 1) | lay.sp,
            lambda s: "torchtitan shards activations over TP (sequence parallelism; 0.2.2 always, later releases "
                      "by default, which the exports keep): set sp"),
    Support("seq_splits_evenly", lambda lay, c: lay.seq % _seq_divisor(lay) == 0,
            lambda s: f"the sequence ({s.seq} tokens) must split evenly over tp={s.tp} sequence-parallel shards "
                      f"times 2·cp={2 * s.cp if s.cp > 1 else 1} load-balanced chunks "
                      f"({_seq_divisor(s)}; Trainer.__init__ raises otherwise)"),
    Support("etp_1_or_tp", lambda lay, c: (lay.etp == 1) | (lay.etp == lay.tp),
            lambda s: f"torchtitan supports expert tensor parallelism of 1 or tp={s.tp} only, got etp={s.etp}",
            targets=("0.2.2",)),
    Support("ep_mesh", _ep_mesh_ok, _ep_mesh_why, targets=("0.2.2",)),
    Support("no_expert_tp", lambda lay, c: lay.etp == 1,
            lambda s: f"the registry releases have no expert_tensor_parallel_degree: experts are sharded over EP "
                      f"only (etp=1), got etp={s.etp}; torchtitan@0.2.2 can run it", targets=_REGISTRY),
    Support("ep_divides_sparse_region", lambda lay, c: (lay.zero != 0) | ((lay.cp * lay.tp) % lay.ep == 0),
            lambda s: f"ParallelDims requires ep to divide dp_shard·cp·tp, and zero 0 has dp_shard = 1: ep={s.ep} "
                      f"must divide cp·tp = {s.cp * s.tp}", targets=_REGISTRY),
    Support("no_fp8_dispatch", lambda lay, c: ~is_dispatch(lay, "deepep-fp8"),
            lambda s: "torchtitan's DeepEP backend dispatches bf16 tokens; use dispatch deepep"),
    Support("no_ep_overlap_flag", lambda lay, c: ~lay.ep_overlap,
            lambda s: "torchtitan overlaps the EP all-to-all only inside DualPipeV (schedule dualpipev), with no "
                      "separate switch: set ep_overlap off"),
    Support("no_module_recompute", lambda lay, c: ~is_recompute(lay, "modules"),
            lambda s: "torchtitan's activation checkpointing is none, selective (per op or per layer) or full; "
                      "Megatron's module recompute has no equivalent"),
    no_redundant_experts("torchtitan"),
    Support("every_nth_block", lambda lay, c: np.abs(1.0 / lay.recompute_blocks - np.round(1.0 / lay.recompute_blocks))
            < 1e-9, lambda s: f"torchtitan's per-layer AC checkpoints every Nth block (selective_ac_option N): "
                              f"recompute blocks:{s.recompute_blocks:g} must be 1/N"),
)


def _toml(value: object) -> str:
    """A TOML value: bool, int, str, list of str, or list of lists (one row per line)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and value and isinstance(value[0], list):
        return "[\n" + "".join(f"  {_toml(row)},\n" for row in value) + "]"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    # JSON numbers and escaped strings are valid TOML.
    return json.dumps(value)


def _stage_modules(model: ModelSpec, s: Strategy) -> list[list[str]]:
    """Module FQNs of each virtual stage, in stage order, with parplan's layer placement."""
    stages: list[list[str]] = []
    first = 0
    for n in virtual_stage_layers(model.layers, s.pp * s.vpp):
        stages.append([f"layers.{i}" for i in range(first, first + n)])
        first += n
    stages[0].insert(0, "tok_embeddings")
    stages[-1] += ["norm", "output"]
    return stages


def _local_batch(cluster: ClusterSpec, s: Strategy) -> int:
    # With PP one schedule step runs all of a rank's micro-batches (no gradient accumulation on top);
    # without PP each micro-batch is a gradient-accumulation step.
    return s.gbs // s.dp(cluster.gpus) if s.pp > 1 else s.mbs


def _float8(model: ModelSpec) -> dict[str, dict[str, object]]:
    """0.2.2's float8 converters and their sections: linears except the output head and the router (parplan
    costs both in bf16, as Megatron runs them), and the grouped experts of a MoE model."""
    converters = ["quantize.linear.float8"] + (["quantize.grouped_mm.float8"] if model.moe else [])
    sections: dict[str, dict[str, object]] = {
        "quantize.linear.float8": {"filter_fqns": ["output", "router.gate"]}}
    if model.moe:
        sections["quantize.grouped_mm.float8"] = {"fqns": ["experts"]}
    return {"model": {"converters": converters}, **sections}


def job(model: ModelSpec, cluster: ClusterSpec, s: Strategy) -> dict[str, dict[str, object]]:
    """The 0.2.2 job file as sections ("quantize.linear.float8" is a nested table) of keys."""
    dp = s.dp(cluster.gpus)
    model_keys: dict[str, object] = {}
    if model.family in _MODEL:
        model_keys["name"] = _MODEL[model.family]
    if model.name in _FLAVOR:
        model_keys["flavor"] = _FLAVOR[model.name]
    float8 = _float8(model) if s.precision == "fp8" else {}
    model_keys.update(float8.pop("model", {}))
    par: dict[str, object] = {
        # zero 0 = DDP over dp; zero 2/3 = FSDP over dp (torchtitan adds the cp ranks to the shard group).
        "data_parallel_replicate_degree": dp if s.zero == 0 else 1,
        "data_parallel_shard_degree": 1 if s.zero == 0 else dp,
    }
    if s.zero >= 2:
        # Explicit: "default" skips resharding under PP, which would turn zero 3 into zero 2.
        par["fsdp_reshard_after_forward"] = "always" if s.zero == 3 else "never"
    par["tensor_parallel_degree"] = s.tp
    if s.tp_overlap:
        par["enable_async_tensor_parallel"] = True
    par["pipeline_parallel_degree"] = s.pp
    if s.pp > 1:
        par["pipeline_parallel_schedule"] = _SCHEDULE[s.schedule]
        par["pipeline_parallel_microbatch_size"] = s.mbs
        par["module_fqns_per_model_part"] = _stage_modules(model, s)
    par["context_parallel_degree"] = s.cp
    if model.moe:
        par["expert_parallel_degree"] = s.ep
        par["expert_tensor_parallel_degree"] = s.etp
        if s.dispatch == "deepep":
            par["expert_parallel_comm_backend"] = "deepep"
    sections: dict[str, dict[str, object]] = {
        "model": model_keys,
        "training": {"local_batch_size": _local_batch(cluster, s), "global_batch_size": s.gbs, "seq_len": s.seq},
        "parallelism": par,
        "activation_checkpoint": {"mode": s.recompute},
        **float8,
    }
    if s.recompute == "selective":
        sections["activation_checkpoint"]["selective_ac_option"] = "op"
    if s.recompute_blocks < 1:  # blocks:1/N: full AC on every Nth block
        sections["activation_checkpoint"] = {"mode": "selective",
                                             "selective_ac_option": str(round(1 / s.recompute_blocks))}
    if s.tp_overlap:
        # Async TP is applied by compiling the model ("Async TP requires torch.compile", parallelize.py).
        sections["compile"] = {"enable": True, "components": ["model", "loss"]}
    return sections


def overrides(model: ModelSpec, cluster: ClusterSpec, s: Strategy, version: str) -> list[str]:
    """Dotted overrides of a registry release (0.3.0 or HEAD): the same settings, each in that release's name."""
    dp = s.dp(cluster.gpus)
    out = [f"--parallelism.data_parallel_replicate_degree {dp if s.zero == 0 else 1}",
           f"--parallelism.data_parallel_shard_degree {1 if s.zero == 0 else dp}"]
    if s.zero >= 2:
        out.append(f"--parallelism.fsdp_reshard_after_forward {'always' if s.zero == 3 else 'never'}")
    out += [f"--parallelism.tensor_parallel_degree {s.tp}", f"--parallelism.pipeline_parallel_degree {s.pp}"]
    if s.pp > 1:
        out.append(f"--parallelism.pipeline_parallel_schedule {_SCHEDULE[s.schedule]}")
        out.append(f"--parallelism.num_pp_microbatches {s.microbatches(cluster.gpus)}" if version == "HEAD"
                   else f"--parallelism.pipeline_parallel_microbatch_size {s.mbs}")
    out.append(f"--parallelism.context_parallel_degree {s.cp}")
    if model.moe:
        out.append(f"--parallelism.expert_parallel_degree {s.ep}")
    if s.tp_overlap:
        # configs.py CompileConfig: "Async TP requires 'model' in --compile.components and --compile.enable".
        out += ["--compile.enable", "--compile.components model,loss", "--compile.enable_async_tensor_parallel"]
    if s.pp > 1 or (model.moe and s.ep > 1):
        # trainer.py refuses CUDA graphs with PP, and with EP dispatchers that synchronise with the CPU
        # (the all-to-all and DeepEP ones); parplan does not cost CUDA graphs either way.
        out.append("--training.disable_cuda_graphs")
    if version == "HEAD":
        # Tokens of one pipeline micro-batch per dp rank; HEAD multiplies them by num_pp_microbatches.
        out += [f"--training.num_tokens_per_microbatch_per_dp_rank {s.mbs * s.seq}",
                f"--training.num_tokens_per_train_step {s.gbs * s.seq}",
                f"--training.max_context_length {s.seq}"]
    else:
        out += [f"--training.local_batch_size {_local_batch(cluster, s)}",
                f"--training.global_batch_size {s.gbs}", f"--training.seq_len {s.seq}"]
    return out


def _entry(model: ModelSpec, s: Strategy) -> str | None:
    entry = _ENTRY.get(model.name)
    return _FLOAT8_ENTRY.get(entry, entry) if entry and s.precision == "fp8" else entry


def _registry_file(model: ModelSpec, cluster: ClusterSpec, s: Strategy, target: Target) -> str:
    """One registry release's overrides file; its header names the config_registry entry to start from."""
    entry = _entry(model, s)
    header = [f"# parplan: {target.label} overrides for {model.name}; append to",
              f"# torchrun ... -m torchtitan.train --module {_MODEL.get(model.family, '<model>')} --config "
              + (entry or f"<a config_registry entry building model_registry('{_FLAVOR.get(model.name, '?')}')>"),
              f"# {describe(model, cluster, s)}"]
    return "\n".join(header + overrides(model, cluster, s, target.key)) + "\n"


def _registry_notes(model: ModelSpec, s: Strategy, targets: list[Target]) -> list[str]:
    """What the registry releases set in a config_registry entry rather than through overrides."""
    names = versions(targets)
    entry = _entry(model, s)
    ac = {"none": "no activation_checkpoint", "selective": "SelectiveAC", "full": "FullAC"}[s.recompute]
    if s.recompute_blocks < 1:
        ac = f"SelectiveAC per layer, every {round(1 / s.recompute_blocks)}th block (selective_ac_option)"
    registry = [f"activation checkpointing ({ac})"]
    if s.precision == "fp8" and entry not in _FLOAT8_ENTRIES:
        registry.append("float8 (Float8LinearConverter" + (" and Float8GroupedExpertsConverter" if model.moe
                                                            else "") + " in model_registry's converters)")
    if s.precision == "bf16" and entry in _FLOAT8_ENTRIES:
        registry.append(f"bf16 linears (the {entry} entry converts them to float8: drop its converters)")
    if model.moe and s.dispatch == "deepep":
        registry.append("DeepEP (model_registry(..., moe_comm_backend=\"deepep\"))")
    if s.pp > 1:
        registry.append("the per-stage module list (module_fqns_per_model_part; without it torchtitan splits "
                        "the layers itself)")
    notes = [f"{names} set {', '.join(registry)} in the model's config registry, not through overrides"]
    if entry is None:
        notes.append(f"{names} have no config_registry entry for {model.name}: write one that builds "
                     f"{_MODEL.get(model.family, '<model>')}'s model_registry('{_FLAVOR.get(model.name, '?')}')")
    return notes


def launch(model: ModelSpec, cluster: ClusterSpec, s: Strategy, targets: tuple[Target, ...] = TARGETS) -> Launch:
    files: dict[str, str] = {}
    notes: list[str] = []
    module = _MODEL.get(model.family, "<model>")
    for target in targets:
        if target.key == "0.2.2":
            lines = [f"# parplan: {target.label} job file; run with --job.config_file {TOML_FILE}",
                     f"# {describe(model, cluster, s)}"]
            for section, keys in job(model, cluster, s).items():
                lines.append(f"\n[{section}]")
                lines += [f"{key} = {_toml(value)}" for key, value in keys.items()]
            files[TOML_FILE] = "\n".join(lines) + "\n"
            if model.family not in _MODEL or model.name not in _FLAVOR:
                notes.append(f"no torchtitan model/flavor is known for {model.name}: set [model] name and flavor")
        else:
            files[_FILES[target.key]] = _registry_file(model, cluster, s, target)
    registry = [t for t in targets if t.key in _REGISTRY]
    if registry:
        notes += _registry_notes(model, s, registry)
    notes.append("files: " + ", ".join(f"{_FILES[t.key]} for {t.label}" for t in targets))
    if s.zero == 2:
        notes.append("FSDP2 has no separate ZeRO-2: reshard-after-forward \"never\" keeps parameters gathered "
                     "from forward to backward while gradients and optimizer states stay sharded")
    if s.recompute == "selective":
        notes.append("torchtitan's selective AC ('op') saves matmul outputs and recomputes the rest, not "
                     "Megatron's core-attention recompute that parplan's memory estimate assumes")
    if model.mtp_layers:
        notes.append(f"torchtitan's {module} model has no multi-token-prediction layers: "
                     f"{model.mtp_layers} MTP layer(s) are not trained")
    if not s.flash_attention:
        notes.append("the plan assumed unfused attention; torchtitan uses SDPA/FlexAttention kernels")
    return Launch(framework="torchtitan", files=files, notes=tuple(notes))
