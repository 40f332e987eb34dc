"""Stack presets and stack YAML files.

A stack file has the preset schema (see parplan/data/stacks/megatron-core.yaml)::

    name: my-stack
    base: torchtitan          # optional: start from a preset and override what differs
    description: "..."
    kernels: {fused_ops, attention, compile_scope, compile, cuda_graphs, deterministic, host_us_per_kernel,
              compute_scale}
    communication: {grad_reduce_bytes, reshard_after_forward, reshard_under_pp, zero3_bucket_params, tp_style,
                    zero3_overlaps_tp}
    recompute: {none: none, selective: op_sac, full: full}    # name -> what it recomputes
    runs: {exporter, parallelism, zero, schedules, precisions}   # exporter: megatron, torchtitan@0.3.0, ...
    memory: {weight_bytes, master_weight_bytes, grad_bytes, grad_copies, backward_grad_copies, moment_bytes,
             fp8_params, fp8_weight_cache_bytes, fp8_activation_bytes, fp8_attention_output, fp8_swiglu_input,
             logit_bytes, loss_compiled, loss_chunks, vocab_parallel_loss, zero3_unit, pipeline_grad_shards,
             pipeline_ends, allocator, optimizer_offload, activation_offload, ema}
    sources: {kernels.attention: "where the value comes from", ...}
    fit: {...}                # written by `parplan calibrate --stack`

Every field is checked: an unknown or missing field, a value of the wrong type or outside its choices is a
ConfigError naming the file and the field. A fact a user file sets without a source is attributed to the
file.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import Any

from parplan._input import kind as path_kind
from parplan._input import parse_yaml, read_yaml
from parplan._mapping import Fields, as_float, as_int, shown
from parplan._resources import data_dir
from parplan.errors import ConfigError, UnknownPresetError
from parplan.names import DEFAULT_STACK, FRAMEWORKS
from parplan.planner.strategy import PRECISIONS, RECOMPUTE, SCHEDULES
from parplan.stacks.spec import (
    ALLOCATORS,
    ATTENTION_KERNELS,
    COMPILE_SCOPES,
    EMA_PLACES,
    FP8_ATTENTION_OUTPUTS,
    FUSED_OPS,
    PIPELINE_ENDS,
    RECOMPUTE_KINDS,
    TP_STYLES,
    ZERO3_UNITS,
    Communication,
    Kernels,
    Memory,
    Runs,
    StackSpec,
)

_TOP = {"name", "base", "description", "kernels", "communication", "recompute", "runs", "memory", "sources", "fit"}
_SECTIONS: dict[str, type] = {"kernels": Kernels, "communication": Communication, "runs": Runs, "memory": Memory}
_CHOICES: dict[str, tuple[object, ...]] = {
    "kernels.attention": ATTENTION_KERNELS,
    "kernels.fused_ops": FUSED_OPS,
    "kernels.compile_scope": COMPILE_SCOPES,
    "communication.tp_style": TP_STYLES,
    "communication.grad_reduce_bytes": (2, 4),
    "runs.parallelism": ("tp", "pp", "cp", "ep"),
    "runs.zero": (0, 1, 2, 3),
    "runs.schedules": SCHEDULES,
    "runs.precisions": PRECISIONS,
    "memory.weight_bytes": (2, 4),
    "memory.master_weight_bytes": (0, 4),
    "memory.grad_bytes": (2, 4),
    "memory.grad_copies": (0, 1, 2),
    "memory.backward_grad_copies": (0, 1, 2),
    "memory.moment_bytes": (1, 2, 4),
    "memory.fp8_weight_cache_bytes": (0, 1, 2),
    "memory.fp8_activation_bytes": (1, 2),
    "memory.fp8_attention_output": FP8_ATTENTION_OUTPUTS,
    "memory.zero3_unit": ZERO3_UNITS,
    "memory.pipeline_ends": PIPELINE_ENDS,
    "memory.allocator": ALLOCATORS,
    "memory.ema": EMA_PLACES,
}
"""Allowed values of the fields that take one of a list (each element, for tuples)."""
_RANGES: dict[str, tuple[float, float]] = {
    "kernels.host_us_per_kernel": (0, 1e6),
    "kernels.compute_scale": (0.01, 100),
    "communication.zero3_bucket_params": (0, 1e15),
    "memory.logit_bytes": (0.0, 64.0),
    "memory.loss_chunks": (1, 1 << 20),
    "memory.optimizer_offload": (0.0, 1.0),
    "memory.activation_offload": (0.0, 1.0),
}
"""Closed range of each number of a stack file that is not a list of choices: a launch cost of at most a second,
a kernel efficiency within a hundred times the measured curves either way (as a cluster's
calibration.compute_scale), a bucket of at most a thousand times the largest model's parameters. NaN and
infinities are always refused."""
_FIT_KEYS = {"command", "knobs", "prior", "rms_error_before", "rms_error_after", "runs"}
"""What the `fit:` section `parplan calibrate --stack` writes may hold."""


def stack_names() -> list[str]:
    return sorted(p.stem for p in data_dir("stacks").glob("*.yaml"))


def _mapping(value: Any, file: str, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"expected a mapping, got {value!r}", file=file, field=field)
    return value


def _typed(value: Any, kind: str, file: str, path: str) -> Any:
    """`value` checked against a field's annotation (bool is never a number)."""
    def bad() -> ConfigError:
        return ConfigError(f"wrong type: {shown(value)} (expected {kind})", file=file, field=path)

    if kind.endswith("| None") and value is None:
        return None
    base = kind.removesuffix(" | None")
    if base == "bool":
        if not isinstance(value, bool):
            raise bad()
    elif base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        lo, hi = _RANGES.get(path, (None, None))
        value, rule = as_int(value, min=lo, max=hi)
        if rule:
            raise ConfigError(rule, file=file, field=path)
    elif base == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad()
        lo, hi = _RANGES.get(path, (None, None))
        value, rule = as_float(value, min=lo, max=hi)
        if rule:
            raise ConfigError(rule, file=file, field=path)
        value = float(value)
    elif base == "str":
        if not isinstance(value, str):
            raise bad()
    elif base.startswith("tuple["):
        if not isinstance(value, list):
            raise bad()
        inner = base[len("tuple["):].split(",")[0]
        value = tuple(_typed(v, inner, file, path) for v in value)
    choices = _CHOICES.get(path)
    if choices is not None:
        for v in value if isinstance(value, tuple) else (value,):
            if v not in choices:
                raise ConfigError(f"{shown(v)} is not one of {', '.join(map(str, choices))}", file=file, field=path)
    return value


def _section(cls: type, raw: Any, file: str, section: str) -> Any:
    raw = _mapping(raw, file, section)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            allowed = ", ".join(fields) or "none yet"
            raise ConfigError(f"unknown field; allowed: {allowed}", file=file, field=f"{section}.{key}")
    kw = {}
    for name, f in fields.items():
        if name not in raw:
            raise ConfigError("required field is missing", file=file, field=f"{section}.{name}")
        kw[name] = _typed(raw[name], str(f.type), file, f"{section}.{name}")
    return cls(**kw)


def _recompute(raw: Any, file: str) -> dict[str, str]:
    raw = _mapping(raw, file, "recompute")
    out = {}
    for name, kind in raw.items():
        if name not in RECOMPUTE:
            raise ConfigError(f"unknown recompute name; known: {', '.join(RECOMPUTE)}", file=file,
                              field=f"recompute.{name}")
        if not isinstance(kind, str) or kind not in RECOMPUTE_KINDS:
            raise ConfigError(f"{shown(kind)} is not one of {', '.join(RECOMPUTE_KINDS)}", file=file,
                              field=f"recompute.{name}")
        out[name] = kind
    if out.get("none", "none") != "none":
        raise ConfigError("'none' recomputes nothing in every stack", file=file, field="recompute.none")
    out.setdefault("none", "none")
    return out


def _check_exporter(exporter: str | None, file: str) -> None:
    """runs.exporter names a launch-settings writer (parplan.names.FRAMEWORKS): "torchtitan" for the rules of
    every version it writes for, "torchtitan@0.3.0" for one (parplan.export.targets)."""
    if exporter is None:
        return
    name, _, version = exporter.partition("@")
    if name not in FRAMEWORKS:
        raise ConfigError(f"{exporter!r} is not one of {', '.join(FRAMEWORKS)} (or name@version), or null",
                          file=file, field="runs.exporter")
    if version:
        from parplan.export import targets

        try:
            targets(exporter)
        except ConfigError as e:
            raise ConfigError(str(e).removeprefix("field 'framework': "), file=file, field="runs.exporter") from None


def _fit(raw: Any, file: str) -> dict[str, Any]:
    """The `fit:` record `parplan calibrate --stack` writes, checked as it is read back: the command, the knob
    values and their prior, the rms errors and each run's error before and after."""
    f = Fields(raw, file, "fit").allow(_FIT_KEYS)
    f.str("command", None)
    for key in ("rms_error_before", "rms_error_after"):
        f.float(key, None, min=0)
    if f.has("knobs"):
        f.number_map("knobs")
    if f.has("prior"):
        prior = f.mapping("prior").allow(("host_us_per_kernel", "compute_scale"))
        for knob in prior.data:
            low, high = _RANGES[f"kernels.{knob}"]
            prior.float(knob, min=low, max=high)
    runs = f.mapping("runs", None)
    for rid in runs.data if runs is not None else ():
        run = runs.mapping(rid).allow(("before", "after"))
        run.float("before")
        run.float("after")
    return f.data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _paths(data: dict[str, Any]) -> list[str]:
    """Fact paths a file sets (section.field)."""
    return [f"{section}.{key}" for section in (*_SECTIONS, "recompute") if isinstance(data.get(section), dict)
            for key in data[section]]


def stack_from_dict(data: Any, *, file: str) -> StackSpec:
    """A StackSpec from a stack file's mapping (a preset's, or a user file on top of its `base`)."""
    data = _mapping(data, file, "top level")
    for key in data:
        if key not in _TOP:
            raise ConfigError(f"unknown field; allowed: {', '.join(sorted(_TOP))}", file=file, field=key)
    top = Fields(data, file)
    for key in ("name", "base", "description"):
        top.str(key, None)
    own_sources = _mapping(data.get("sources") or {}, file, "sources")
    for path, text in own_sources.items():
        if not isinstance(text, str):
            raise ConfigError(f"expected the source as text, got {shown(text)}", file=file, field=f"sources.{path}")
    if data.get("base") is not None:
        base_name = data["base"].lower()
        if base_name not in stack_names():
            raise UnknownPresetError("stack", base_name, stack_names())
        base = read_yaml(data_dir("stacks") / f"{base_name}.yaml")
        inherited = {k: v for k, v in base.get("sources", {}).items()}
        for path in _paths(data):
            inherited[path] = own_sources.get(path, f"set in {file}")
        data = _merge({k: v for k, v in base.items() if k != "fit"},
                      {k: v for k, v in data.items() if k not in ("base", "sources")})
        data["sources"] = {**inherited, **own_sources}
    for key in ("name", "kernels", "communication", "recompute", "runs"):
        if data.get(key) is None:
            raise ConfigError("required field is missing", file=file, field=key)
    # A file without a memory section is told which memory fact it misses first, after the other sections.
    sections = {name: _section(cls, data.get(name) or {} if name == "memory" else data[name], file, name)
                for name, cls in _SECTIONS.items()}
    _check_exporter(sections["runs"].exporter, file)
    sources = _mapping(data.get("sources") or {}, file, "sources")
    return StackSpec(
        name=str(data["name"]), description=str(data.get("description", "")),
        recompute=_recompute(data["recompute"], file), sources={str(k): str(v) for k, v in sources.items()},
        fit=_fit(data.get("fit") or {}, file), source=file, **sections,
    )


@lru_cache(maxsize=16)
def _preset(name: str) -> StackSpec:
    path = data_dir("stacks") / f"{name}.yaml"
    return stack_from_dict(read_yaml(path), file=str(path))


def load_stack(name_or_path: str | Path | StackSpec | None = None, *, compile: bool | None = None) -> StackSpec:
    """Resolve a preset name (case-insensitive), a stack YAML file or a StackSpec (None: the default stack);
    `compile` switches compilation on or off (None: the stack's default)."""
    if isinstance(name_or_path, StackSpec):
        spec = name_or_path
    else:
        text = DEFAULT_STACK if name_or_path is None else str(name_or_path)
        if text.lower() in stack_names():
            spec = _preset(text.lower())
        else:
            path = Path(text).expanduser()
            if path_kind(path) != "missing":  # a directory or a device is reported as such by read_yaml
                spec = stack_from_dict(read_yaml(path), file=str(path))
            elif path.suffix in (".yaml", ".yml") or "/" in text:
                raise ConfigError("no such file", file=text)
            else:
                raise UnknownPresetError("stack", text, stack_names())
    if compile and spec.kernels.compile_scope == "none":
        raise ConfigError(f"stack {spec.name} has no compile path (kernels.compile_scope is none); drop --compile",
                          field="compile")
    if compile is False and spec.kernels.compile_scope == "program":
        raise ConfigError(f"stack {spec.name} always runs compiled (XLA compiles the whole step); drop --no-compile",
                          field="compile")
    return spec.with_compile(compile)


EXPANDABLE_SEGMENTS = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
"""The allocator setting NVIDIA's Megatron-Bridge memory-tuning guide names as the first fix for an OOM near the
limit: it 'dramatically reduces fragmentation and often eliminates borderline OOM without any model or
parallelism changes', 'with zero performance cost' (docs.nvidia.com/nemo/megatron-bridge, skills/perf-memory-tuning)."""


def with_expandable_segments(spec: StackSpec) -> StackSpec | None:
    """`spec` launched with expandable segments, or None where that changes nothing: its allocator is already
    expandable or is not PyTorch's (XLA)."""
    if spec.memory.allocator != "caching":
        return None
    return with_memory(spec, ["allocator=expandable_segments"], where=EXPANDABLE_SEGMENTS)


def with_memory(spec: StackSpec, settings: list[str], *, where: str = "--memory") -> StackSpec:
    """`spec` with memory facts set one by one from KEY=VALUE texts (the command line's --memory), each value
    read as YAML and checked like a stack file's; the facts' source becomes `where`."""
    if not settings:
        return spec
    over: dict[str, Any] = {}
    for text in settings:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"expected KEY=VALUE, got {text!r}", field=where)
        fields = {f.name: f for f in dataclasses.fields(Memory)}
        if key not in fields:
            raise ConfigError(f"unknown memory fact {key!r}; known: {', '.join(fields)}", field=where)
        over[key] = _typed(parse_yaml(value, where), str(fields[key].type), where, f"memory.{key}")
    sources = {**spec.sources, **{f"memory.{k}": f"set by {where}" for k in over}}
    return dataclasses.replace(spec, memory=dataclasses.replace(spec.memory, **over), sources=sources)
