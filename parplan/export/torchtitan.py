"""torchtitan: a TOML job file for releases up to v0.2.2 and dotted overrides for the HEAD config system.

Sources: key names, defaults and the TOML-to-dataclass break from ``reference/ecosystem.md`` §A4, §A5 and
§0 items 1-2 (torchtitan v0.1.0, v0.2.0, v0.2.2 and HEAD b5bcd76); the EP/ETP mesh constraints from
``torchtitan/distributed/parallel_dims.py`` (v0.2 era); stage counting and `module_fqns_per_model_part`
(stage i on rank i mod pp for looped schedules, ranks r and 2pp-1-r for V schedules) from
``torchtitan/distributed/pipeline_parallel.py``.
"""

from __future__ import annotations

import json

import numpy as np

from parplan.export.common import (
    Launch,
    Support,
    describe,
    is_dispatch,
    is_recompute,
    is_schedule,
    no_redundant_experts,
)
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.schedule import virtual_stage_layers
from parplan.planner.strategy import Layouts, Strategy

NAME = "torchtitan"
TOML_FILE = "train.toml"
HEAD_FILE = "overrides.txt"

# parplan schedule -> torch.distributed.pipelining schedule name (ecosystem.md A4).
_SCHEDULE = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "dualpipev": "DualPipeV"}
# HF model_type -> torchtitan model name; preset -> flavor (torchtitan/models/*/__init__.py of v0.2.x).
_MODEL = {"llama": "llama3", "deepseek_v2": "deepseek_v3", "deepseek_v3": "deepseek_v3",
          "qwen3": "qwen3", "qwen3_moe": "qwen3"}
_FLAVOR = {"llama3.1-8b": "8B", "llama3.1-70b": "70B", "llama3.1-405b": "405B", "deepseek-v2-lite": "16B",
           "deepseek-v3": "671B", "qwen3-0.6b": "0.6B", "qwen3-8b": "8B", "qwen3-32b": "32B",
           "qwen3-30b-a3b": "30B-A3B", "qwen3-235b-a22b": "235B-A22B", "qwen3-235b-a22b-2507": "235B-A22B"}


def _ep_base(tp: np.ndarray | int, etp: np.ndarray | int, cp: np.ndarray | int) -> np.ndarray | int:
    """Ranks EP must take whole: all cp ranks, plus the tp ranks when experts are not tensor-parallel."""
    return cp * np.where(etp == tp, 1, tp)


def _ep_mesh_ok(lay: Layouts, m: ModelSpec | None) -> np.ndarray:
    # ParallelDims: ep % base == 0 and (dp_shard·base) % ep == 0; the second holds for FSDP by parplan's
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


RULES: tuple[Support, ...] = (
    Support("no_dualpipe", lambda lay, m: ~is_schedule(lay, "dualpipe"),
            lambda s: "torchtitan has DualPipeV (schedule dualpipev) but not bidirectional DualPipe"),
    Support("no_zb_h1", lambda lay, m: ~is_schedule(lay, "zb-h1"),
            lambda s: "torch.distributed.pipelining's zero-bubble schedules hold several stages per rank "
                      "(InterleavedZeroBubble needs >= 2, ZBVZeroBubble 2); single-chunk ZB-H1 has none: use "
                      "1f1b, interleaved or dualpipev"),
    Support("no_zero_1", lambda lay, m: lay.zero != 1,
            lambda s: "torchtitan has no ZeRO-1 (sharded optimizer states only): FSDP2 shards gradients with "
                      "them; use zero 2 (fsdp_reshard_after_forward = \"never\") or zero 3"),
    Support("cp_is_sharded", lambda lay, m: (lay.cp == 1) | (lay.zero != 0),
            lambda s: f"torchtitan always applies FSDP over the context-parallel ranks (cp={s.cp}), so "
                      f"parameters cannot stay replicated: use zero 2 or 3"),
    Support("tp_has_sp", lambda lay, m: (lay.tp == 1) | lay.sp,
            lambda s: "torchtitan <= v0.2.2 always shards activations over TP (sequence parallelism); set sp"),
    Support("etp_1_or_tp", lambda lay, m: (lay.etp == 1) | (lay.etp == lay.tp),
            lambda s: f"torchtitan supports expert tensor parallelism of 1 or tp={s.tp} only, got etp={s.etp}"),
    Support("ep_mesh", _ep_mesh_ok, _ep_mesh_why),
    Support("no_fp8_dispatch", lambda lay, m: ~is_dispatch(lay, "deepep-fp8"),
            lambda s: "torchtitan's DeepEP backend dispatches bf16 tokens; use dispatch deepep"),
    Support("no_ep_overlap_flag", lambda lay, m: ~lay.ep_overlap,
            lambda s: "torchtitan overlaps the EP all-to-all only inside DualPipeV (schedule dualpipev), with no "
                      "separate switch: set ep_overlap off"),
    Support("no_module_recompute", lambda lay, m: ~is_recompute(lay, "modules"),
            lambda s: "torchtitan's activation checkpointing is none, selective (per op or per layer) or full; "
                      "Megatron's module recompute has no equivalent"),
    no_redundant_experts("torchtitan"),
    Support("every_nth_block", lambda lay, m: np.abs(1.0 / lay.recompute_blocks - np.round(1.0 / lay.recompute_blocks))
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


def job(model: ModelSpec, cluster: ClusterSpec, s: Strategy) -> dict[str, dict[str, object]]:
    """The v0.2.x job file as sections of keys."""
    dp = s.dp(cluster.gpus)
    model_keys: dict[str, object] = {}
    if model.family in _MODEL:
        model_keys["name"] = _MODEL[model.family]
    if model.name in _FLAVOR:
        model_keys["flavor"] = _FLAVOR[model.name]
    if s.precision == "fp8":
        model_keys["converters"] = ["float8"]
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
    }
    if s.recompute == "selective":
        sections["activation_checkpoint"]["selective_ac_option"] = "op"
    if s.recompute_blocks < 1:  # blocks:1/N: full AC on every Nth block
        sections["activation_checkpoint"] = {"mode": "selective",
                                             "selective_ac_option": str(round(1 / s.recompute_blocks))}
    if s.tp_overlap:
        sections["compile"] = {"enable": True}  # async TP only takes effect under torch.compile
    return sections


def head_overrides(model: ModelSpec, cluster: ClusterSpec, s: Strategy) -> list[str]:
    """Dotted overrides for HEAD (token-based batch names, ecosystem.md §0 item 2); etp must be 1."""
    dp = s.dp(cluster.gpus)
    out = [f"--parallelism.data_parallel_replicate_degree {dp if s.zero == 0 else 1}",
           f"--parallelism.data_parallel_shard_degree {1 if s.zero == 0 else dp}"]
    if s.zero >= 2:
        out.append(f"--parallelism.fsdp_reshard_after_forward {'always' if s.zero == 3 else 'never'}")
    out += [f"--parallelism.tensor_parallel_degree {s.tp}", f"--parallelism.pipeline_parallel_degree {s.pp}"]
    if s.pp > 1:
        out += [f"--parallelism.pipeline_parallel_schedule {_SCHEDULE[s.schedule]}",
                f"--parallelism.num_pp_microbatches {s.microbatches(cluster.gpus)}"]
    out.append(f"--parallelism.context_parallel_degree {s.cp}")
    if model.moe:
        out.append(f"--parallelism.expert_parallel_degree {s.ep}")
        if s.dispatch == "deepep":
            out.append("--parallelism.expert_parallel_comm_backend deepep")
    if s.tp_overlap:
        out += ["--compile.enable", "--compile.enable_async_tensor_parallel"]
    out += [f"--training.num_tokens_per_microbatch_per_dp_rank {_local_batch(cluster, s) * s.seq}",
            f"--training.num_tokens_per_train_step {s.gbs * s.seq}",
            f"--training.max_context_length {s.seq}"]
    return out


def launch(model: ModelSpec, cluster: ClusterSpec, s: Strategy) -> Launch:
    lines = ["# parplan: torchtitan <= v0.2.2 job file; run with --job.config_file train.toml",
             f"# {describe(model, cluster, s)}"]
    for section, keys in job(model, cluster, s).items():
        lines.append(f"\n[{section}]")
        lines += [f"{key} = {_toml(value)}" for key, value in keys.items()]
    files = {TOML_FILE: "\n".join(lines) + "\n"}
    module = _MODEL.get(model.family, "<model>")
    notes = ["train.toml is for torchtitan <= v0.2.2: HEAD dropped TOML (PR #2386, 2026-02-23) for "
             "Python config registries, hence overrides.txt"]
    if s.etp > 1:
        notes.append(f"torchtitan HEAD has no expert_tensor_parallel_degree (experts are never tensor-parallel): "
                     f"etp={s.etp} needs <= v0.2.2, so no HEAD overrides are written")
    else:
        header = [f"# parplan: torchtitan HEAD overrides for {model.name}; append to",
                  f"# torchrun ... -m torchtitan.train --module {module} --config <config_registry entry>"]
        files[HEAD_FILE] = "\n".join(header + head_overrides(model, cluster, s)) + "\n"
        registry = ["activation checkpointing (FullAC.Config(), SelectiveAC.Config())"]
        registry += ["float8"] if s.precision == "fp8" else []
        registry += ["the per-stage module list (module_fqns_per_model_part)"] if s.pp > 1 else []
        notes.append(f"HEAD sets {', '.join(registry)} in the model's config registry, not through overrides")
    if model.family not in _MODEL or model.name not in _FLAVOR:
        notes.append(f"no torchtitan model/flavor is known for {model.name}: set [model] name and flavor")
    if s.zero == 2:
        notes.append("FSDP2 has no separate ZeRO-2: reshard-after-forward \"never\" keeps parameters gathered "
                     "from forward to backward while gradients and optimizer states stay sharded")
    if s.zero == 0 and (s.tp > 1 or s.pp > 1):
        notes.append("releases before the v0.2 device-mesh rewrite refuse DDP combined with other parallelism "
                     "('DDP has not supported > 1D parallelism'); use zero 3 there")
    if model.moe and s.ep == 1 and s.etp < s.tp:
        notes.append(f"with ep=1 torchtitan either tensor-shards the experts over TP (etp=tp={s.tp}) or refuses "
                     f"TP for them, depending on the release; the plan assumed etp={s.etp}")
    if s.recompute == "selective":
        notes.append("torchtitan's selective AC ('op') saves matmul outputs and recomputes the rest, not "
                     "Megatron's core-attention recompute that parplan's memory estimate assumes")
    if s.precision == "fp8" and model.moe:
        notes.append("float8 covers linear layers; grouped experts need [quantize.grouped_mm.float8] fqns")
    if model.mtp_layers:
        notes.append(f"torchtitan's {module} model has no multi-token-prediction layers: "
                     f"{model.mtp_layers} MTP layer(s) are not trained")
    if not s.flash_attention:
        notes.append("the plan assumed unfused attention; torchtitan uses SDPA/FlexAttention kernels")
    return Launch(framework="torchtitan", files=files, notes=tuple(notes))
