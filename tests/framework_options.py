"""What each framework version accepts, for checking exports without the frameworks installed.

Option lists (`tests/data/frameworks/*.txt`) were read off each version's code by
`tests/frameworks/extract_options.py` (source tree and commit in each file's header): Megatron-LM's and
Megatron-DeepSpeed's argparse parsers (flag, dest, action, type, nargs, choices, default), DeepSpeed's
ds_config sections, torchtitan's config dataclasses (dotted key, type, default) with the registry entries,
model flavors and converters each release registers. The cross-option rules below are the checks those
versions' validate_args, TransformerConfig, ParallelDims, Trainer and torch.distributed.pipelining run on
the same values, each citing its file (at the commit of the data file).

`megatron_args(target, tokens)` parses an export's arguments the way that version's parser would (an
unknown flag, a wrong type or a value outside the choices is an error); `megatron_refusals` lists what
its validation would refuse; `titan_config` / `titan_refusals` do the same for torchtitan's job file and
overrides, `deepspeed_refusals` for the DeepSpeed config and launcher arguments.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).parent / "data" / "frameworks"

MEGATRON = ("megatron-core_v0.16.1", "megatron-core_v0.19.0", "megatron-HEAD")
TORCHTITAN = {"0.2.2": "torchtitan-0.2.2", "0.3.0": "torchtitan-0.3.0", "HEAD": "torchtitan-HEAD"}


def rows(target: str) -> list[list[str]]:
    lines = (DATA / f"{target}.txt").read_text().splitlines()
    return [line.split("\t") for line in lines if line and not line.startswith("#")]


def header(target: str) -> str:
    return "".join(line for line in (DATA / f"{target}.txt").read_text().splitlines() if line.startswith("#"))


# ------------------------------------------------------------------------------------------ argparse


class ArgError(Exception):
    """What the framework's parser would print before exiting."""


_TYPES = {"int": int, "float": float, "str": str}


def _typed(name: str):
    """The converter of a parser type read from the data: int, float, str; Megatron's own converters
    (e.g. moe_freq_type, tuple_type, enum_type_handler) take a string and are checked by their rules."""
    return _TYPES.get(name, str)


@cache
def parser(target: str) -> argparse.ArgumentParser:
    """An argparse parser with the flags, actions, types, nargs, choices and defaults of `target`."""
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False, add_help=False)
    actions: dict[tuple[str, ...], argparse.Action] = {}
    for row in rows(target):
        flag, dest, action, type_name, nargs, choices, default = row
        if tuple(row[1:]) in actions:
            # another spelling of the same option (one row per option string of an argparse action)
            p._option_string_actions[flag] = actions[tuple(row[1:])]
            continue
        value = json.loads(default)
        kw: dict[str, object] = {"dest": dest, "default": value}
        if action in ("storetrue", "storefalse"):
            kw["action"] = "store_true" if action == "storetrue" else "store_false"
        elif action == "storeconst":
            kw["action"] = "store_const"
            kw["const"] = True
        elif action in ("store", "append"):
            kw["action"] = action
            kw["type"] = _typed(type_name)
            if nargs != "-":
                kw["nargs"] = int(nargs) if nargs.isdigit() else nargs
            if choices != "-":
                kw["choices"] = [kw["type"](c) for c in choices.split("|")]
        else:
            kw = {"dest": dest, "default": value, "action": "store_true"}
        actions[tuple(row[1:])] = p.add_argument(flag, **kw)
    return p


def parse(target: str, tokens: list[str]) -> argparse.Namespace:
    """Parse like the framework: every flag known, every value of the right type and in its choices."""
    flags = [t for t in tokens if t.startswith("--")]
    repeated = sorted({f for f in flags if flags.count(f) > 1})
    if repeated:
        raise ArgError(f"repeated flags {repeated}")
    known = parser(target)._option_string_actions
    unknown = [f for f in flags if f not in known]
    if unknown:
        raise ArgError(f"{target}: unrecognized arguments {unknown}")
    try:
        ns, rest = parser(target).parse_known_args(tokens)
    except argparse.ArgumentError as e:
        raise ArgError(f"{target}: {e}") from e
    if rest:
        raise ArgError(f"{target}: unrecognized arguments {rest}")
    return ns


def shell_tokens(text: str, variable: str) -> list[str]:
    """The tokens of the bash array `variable=( ... )`, as the shell would pass them."""
    body = text.split(f"{variable}=(\n", 1)[1].split("\n)\n", 1)[0]
    return shlex.split(body)


# ------------------------------------------------------------------------------------------ Megatron-LM


def megatron_refusals(ns: argparse.Namespace, world: int) -> list[str]:
    """What megatron/training/arguments.py validate_args and TransformerConfig.__post_init__
    (megatron/core/transformer/transformer_config.py) of core_v0.16.1, core_v0.19.0 and HEAD refuse, for the
    options an export sets; `ns` as parsed (before validate_args rewrites it)."""
    out = []
    tp, pp, cp = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size
    if world % (tp * pp * cp):
        out.append("world size not divisible by tp*pp*cp (initialize_model_parallel)")
        return out
    dp = world // (tp * pp * cp)
    if ns.global_batch_size % (ns.micro_batch_size * dp):
        out.append("global batch size is not divisible by micro batch size times data parallel size")
    selectors = [ns.num_layers_per_virtual_pipeline_stage, ns.num_virtual_stages_per_pipeline_rank,
                 ns.pipeline_model_parallel_layout]
    if sum(v is not None for v in selectors) > 1:
        out.append("more than one way to set the virtual pipeline (validate_args asserts one)")
    interleaved = any(v is not None for v in selectors[:2]) or (
        ns.pipeline_model_parallel_layout is not None and "|" in ns.pipeline_model_parallel_layout
        and ns.pipeline_model_parallel_layout.count("|") + 1 > pp)
    if interleaved and not ns.overlap_p2p_comm and pp <= 2:
        out.append("interleaved schedule without p2p overlap needs pp > 2")
    if interleaved and pp == 1:
        out.append("interleaved schedule needs pp > 1")
    sp = ns.sequence_parallel and tp > 1  # validate_args turns SP off at tp = 1
    if ns.tp_comm_overlap and not sp:
        out.append("Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled")
    if ns.overlap_param_gather and not (ns.use_distributed_optimizer or ns.use_megatron_fsdp):
        out.append("--overlap-param-gather only supported with distributed optimizer or megatron fsdp")
    if ns.overlap_param_gather and not ns.overlap_grad_reduce:
        out.append("Must use --overlap-param-gather with --overlap-grad-reduce")
    if ns.use_megatron_fsdp and ns.ckpt_format != "fsdp_dtensor":
        out.append("Megatron-FSDP needs --ckpt-format fsdp_dtensor")
    if ns.max_position_embeddings is not None and ns.max_position_embeddings < ns.seq_length:
        out.append("max_position_embeddings < seq_length")
    if ns.recompute_granularity == "full" and ns.recompute_method is None:
        out.append("full recompute needs --recompute-method")
    modules = ns.recompute_modules or []
    if ns.fp8 and ns.recompute_granularity == "selective" and {"moe_act", "layernorm"} & set(modules) \
            and ns.fp8_recipe == "delayed":
        out.append("Delayed scaling does not support moe_act and layernorm recompute for fp8.")
    if ns.num_layers is not None and pp > 1 and ns.pipeline_model_parallel_layout is None:
        first = ns.decoder_first_pipeline_num_layers or 0
        last = ns.decoder_last_pipeline_num_layers or 0
        middle = pp - (ns.decoder_first_pipeline_num_layers is not None) - (
            ns.decoder_last_pipeline_num_layers is not None)
        rest = ns.num_layers - first - last
        if (middle and rest % middle) or (not middle and rest):
            out.append("Number of layers should be divisible by the pipeline-model-parallel size")
    if ns.num_experts:
        ep, etp = ns.expert_model_parallel_size, ns.expert_tensor_parallel_size or tp
        if world % (etp * ep * pp):
            out.append("expert grid etp*ep*pp does not divide the world (initialize_model_parallel)")
        if ns.num_experts % ep:
            out.append("num_experts must be divisible by expert_model_parallel_size")
        if ns.moe_token_dispatcher_type == "flex" and ns.moe_flex_dispatcher_backend is None:
            out.append("flex dispatcher needs a backend")
        if ns.overlap_moe_expert_parallel_comm:
            if pp > 1 and not interleaved:
                out.append("If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified "
                           "when pipeline_model_parallel_size > 1")
            if ep == 1 or ns.recompute_granularity == "full":
                out.append("overlap_moe_expert_parallel_comm needs ep > 1 and no full recompute")
    return out


def megatron_overlap_p2p(ns: argparse.Namespace) -> bool:
    """overlap_p2p_comm after validate_args: only kept with virtual pipeline stages."""
    vpp = ns.num_layers_per_virtual_pipeline_stage or ns.num_virtual_stages_per_pipeline_rank or (
        ns.pipeline_model_parallel_layout and ns.pipeline_model_parallel_layout.count("|") + 1
        > ns.pipeline_model_parallel_size)
    return bool(ns.overlap_p2p_comm and vpp)


# ------------------------------------------------------------------------------------------ DeepSpeed


@cache
def deepspeed_keys() -> set[str]:
    return {row[0] for row in rows("deepspeed-0.19.8")}


def deepspeed_refusals(config: dict, ns: argparse.Namespace, world: int) -> list[str]:
    """deepspeed/runtime/config.py _batch_assertion, the ZeRO section's pydantic model (extra keys
    forbidden), PipelineEngine's ZeRO limit (deepspeed/runtime/pipe/engine.py) and Megatron-DeepSpeed's
    validate_args (megatron/arguments.py) on the launcher arguments."""
    out = []
    keys = deepspeed_keys()
    for key in config:
        if key not in keys:
            out.append(f"unknown ds_config key {key}")
    for section in ("zero_optimization", "bf16"):
        for key in config.get(section, {}):
            if f"{section}.{key}" not in keys:
                out.append(f"unknown {section} key {key} (the pydantic model forbids extra keys)")
    dp = world // (ns.tensor_model_parallel_size * ns.pipeline_model_parallel_size)
    if config["train_batch_size"] != (config["train_micro_batch_size_per_gpu"]
                                      * config["gradient_accumulation_steps"] * dp):
        out.append("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size")
    if ns.pipeline_model_parallel_size > 1 and not ns.no_pipeline_parallel and \
            config["zero_optimization"]["stage"] >= 2:
        out.append("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")
    if ns.zero_stage != config["zero_optimization"]["stage"]:
        out.append("--zero-stage differs from the JSON's zero_optimization.stage")
    if ns.enable_zbh1_pipeline and ns.sequence_parallel:
        out.append("zbh1 pipeline does not support sequence parallelism")
    if ns.global_batch_size != config["train_batch_size"] or ns.micro_batch_size != \
            config["train_micro_batch_size_per_gpu"]:
        out.append("launcher batch sizes differ from the DeepSpeed config")
    return out


# ------------------------------------------------------------------------------------------ torchtitan


@dataclass(frozen=True)
class TitanKey:
    type: str
    default: object


@cache
def titan_keys(version: str) -> dict[str, TitanKey]:
    return {key: TitanKey(kind, json.loads(default)) for key, kind, default in rows(TORCHTITAN[version])
            if ":" not in key and key != "converter"}


@cache
def titan_registered(version: str, what: str) -> set[str]:
    """Registry entries ('registry:<module>'), flavors ('flavor:<model>') or converters of a release."""
    return {name for key, name, _ in rows(TORCHTITAN[version]) if key == what}


def _check_value(key: str, kind: str, value: object) -> str | None:
    """None when `value` has the type `kind` (as the data writes Python annotations), else why not."""
    if kind.endswith(" | None"):
        if value is None:
            return None
        kind = kind.removesuffix(" | None")
    literal = re.fullmatch(r"Literal\[(.*)\]", kind)
    if literal:
        choices = ast.literal_eval(f"[{literal.group(1)}]")
        return None if value in choices else f"{key}={value!r} is not one of {choices}"
    simple = {"int": int, "bool": bool, "str": str, "float": float, "float | int": (float, int)}
    if kind in simple:
        ok = isinstance(value, simple[kind]) and not (kind in ("int", "float") and isinstance(value, bool))
        return None if ok else f"{key}={value!r} is not {kind}"
    if kind == "list[str]":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else f"{key}={value!r} is not list[str]"
    if kind in ("list[list[str]]", "list[str] | str"):
        ok = isinstance(value, (list, str))
        return None if ok else f"{key}={value!r} is not {kind}"
    return f"{key}: type {kind} not understood by the test"


def titan_toml_config(version: str, job: dict[str, dict[str, object]]) -> dict[str, object]:
    """Dotted keys of a 0.2.2 job file, checked against JobConfig's fields (unknown keys and wrong types
    raise ValueError, as torchtitan's TOML loader and tyro do)."""
    keys = titan_keys(version)
    flat: dict[str, object] = {}

    def walk(prefix: str, table: dict[str, object]) -> None:
        for k, v in table.items():
            if isinstance(v, dict):
                walk(f"{prefix}{k}.", v)
            else:
                flat[f"{prefix}{k}"] = v

    walk("", job)
    errors = [f"unknown key {k}" for k in flat if k not in keys]
    errors += [e for k, v in flat.items() if k in keys and (e := _check_value(k, keys[k].type, v))]
    if errors:
        raise ValueError(f"torchtitan {version}: " + "; ".join(errors))
    return {**{k: key.default for k, key in keys.items()}, **flat}


def titan_overrides_config(version: str, text: str) -> dict[str, object]:
    """Dotted overrides of a registry release parsed as tyro would: every key a field, bool keys take no
    value, lists are comma-separated; the result is the defaults updated (the registry entry's own values
    are not known here, so checks read only what the overrides set)."""
    keys = titan_keys(version)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    flat: dict[str, object] = {}
    errors = []
    for line in lines:
        flag, *values = shlex.split(line)
        key = flag.removeprefix("--")
        if key not in keys:
            errors.append(f"Unrecognized option {flag}")
            continue
        kind = keys[key].type
        if kind == "bool":
            value: object = True
            if values:
                errors.append(f"{flag} takes no value")
        elif len(values) != 1:
            errors.append(f"{flag} needs one value, got {values}")
            continue
        elif kind.startswith("list"):
            value = values[0].split(",")
        elif kind in ("int", "int | None"):
            value = int(values[0]) if values[0].lstrip("-").isdigit() else values[0]
        else:
            value = values[0]
        if error := _check_value(key, kind, value):
            errors.append(error)
        flat[key] = value
    if errors:
        raise ValueError(f"torchtitan {version}: " + "; ".join(errors))
    return {**{k: key.default for k, key in keys.items()}, **flat}


def titan_refusals(version: str, cfg: dict[str, object], world: int, moe: bool) -> list[str]:
    """What ParallelDims (torchtitan/distributed/parallel_dims.py), Trainer / train.py batch checks,
    CompileConfig and the Trainer's CUDA-graph validation (torchtitan/config/configs.py, trainer.py) and
    torch.distributed.pipelining's schedule constructors (torch 2.13 schedules.py) refuse."""
    g = cfg.get
    out = []
    rep, shard = g("parallelism.data_parallel_replicate_degree"), g("parallelism.data_parallel_shard_degree")
    tp, pp, cp = (g(f"parallelism.{k}_parallel_degree") for k in ("tensor", "pipeline", "context"))
    ep = g("parallelism.expert_parallel_degree") or 1
    if shard == -1:
        shard = world // (rep * cp * tp * pp)
    if rep * shard * cp * tp * pp != world:
        out.append("Invalid parallel dims: dp_replicate * dp_shard * cp * tp * pp != WORLD_SIZE")
    dp = rep * shard
    if moe and ep > 1:
        if version == "0.2.2":
            etp = g("parallelism.expert_tensor_parallel_degree")
            base = cp * (1 if etp == tp else tp)
            if ep % base or (shard * base) % ep:
                out.append("0.2.2 ParallelDims: ep must be a multiple of cp (and tp unless etp == tp) and divide "
                           "dp_shard times that")
        elif (shard * cp * tp) % ep:
            out.append("expert_parallel_degree must divide dp_shard * cp * tp")
    async_tp = g("parallelism.enable_async_tensor_parallel") or g("compile.enable_async_tensor_parallel")
    if async_tp and tp > 1 and not (g("compile.enable") and "model" in g("compile.components")):
        out.append("Async TP requires 'model' in --compile.components and --compile.enable")
    divisor = (tp if g("parallelism.enable_sequence_parallel", True) else 1) * (2 * cp if cp > 1 else 1)
    if version == "HEAD":
        n_tok = g("training.num_tokens_per_microbatch_per_dp_rank")
        n_mb = g("parallelism.num_pp_microbatches") if pp > 1 else 1
        step = g("training.num_tokens_per_train_step")
        step = n_tok * n_mb * dp if step == -1 else step
        if n_tok % divisor:
            out.append("The number of tokens per pipeline microbatch must be divisible for sequence/context "
                       "parallelism")
        if step % (n_tok * n_mb * dp):
            out.append(f"num_tokens_per_train_step ({step}) must be divisible by the tokens processed globally "
                       f"in one gradient accumulation iteration ({n_tok * n_mb * dp})")
        microbatches = n_mb
    else:
        local, glob = g("training.local_batch_size"), g("training.global_batch_size")
        glob = local * dp if glob == -1 else glob
        if glob % (local * dp):
            out.append("global batch size must be a multiple of local batch size times data-parallel degree")
        mb = g("parallelism.pipeline_parallel_microbatch_size")
        if local % mb:
            out.append("training.local_batch_size must be evenly divisible by "
                       "parallelism.pipeline_parallel_microbatch_size")
        if version == "0.3.0" and g("training.seq_len") % divisor:
            out.append("Training sequence length must be divisible for sequence/context parallelism")
        microbatches = local // mb
    if version != "0.2.2" and not g("training.disable_cuda_graphs"):
        if pp > 1:
            out.append("CUDA graphs do not support pipeline parallelism yet. Set --training.disable_cuda_graphs.")
        if moe and ep > 1:
            out.append("CUDA graphs support only expert parallel token dispatcher configurations without CPU "
                       "synchronization")
    if pp > 1:
        schedule = g("parallelism.pipeline_parallel_schedule")
        stages = pp * (2 if schedule == "DualPipeV" else 1)
        if schedule in ("1F1B", "DualPipeV") and microbatches < stages:
            out.append(f"{schedule} needs at least as many microbatches as stages")
        if schedule == "Interleaved1F1B" and microbatches % max(1, microbatches // pp):
            out.append("Interleaved 1F1B requires the number of microbatches to be a multiple of the rounds")
    return out
