"""Raw hardware measurements: collective, GEMM, attention and memory-copy samples, and their YAML form.

A profile file is a cluster file (``parplan/hardware/presets.py`` schema) plus a ``measurements:`` mapping
that keeps every raw sample the fitted numbers came from, so a fit can be redone or audited later::

    measurements:
      date: '2026-07-01'
      device: NVIDIA H100 80GB HBM3
      torch_version: 2.13.0
      nccl_version: 2.21.5          # null when no NCCL was involved
      collectives: [{collective: all_reduce, size_bytes: 1048576, ranks: 8, ...}, ...]
      gemm: [{m: 4096, n: 4096, k: 4096, dtype: bf16, time_us: 182.1, ...}, ...]
      attention: [...]
      memory: [...]

Sizes follow the nccl-tests conventions (``reference/hardware.md`` §2.1) so that nccl-tests logs and
``parplan bench comm`` results mix in one fit.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parplan._input import read_yaml, write_yaml
from parplan._mapping import Fields, dataclass_from_mapping, require
from parplan.errors import ConfigError
from parplan.hardware.efficiency import Collective
from parplan.limits import MAX_GPUS

COLLECTIVES = (*(c.value for c in Collective), "broadcast")
"""Collective names of samples: the cost model's `Collective` values, plus broadcast (nccl-tests has it)."""


def busbw_factor(collective: str, ranks: int) -> float:
    """nccl-tests bus-bandwidth factor busbw / algbw (PERFORMANCE.md; ``reference/hardware.md`` §2.1).

    It makes busbw independent of the rank count for ring algorithms, so one busbw describes a fabric.
    """
    n = max(ranks, 1)
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective in ("send_recv", "broadcast"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")


def _sizes(**values: int) -> list[tuple[str, bool, str]]:
    """Checks that each size is a positive count."""
    return [(name, value >= 1, f"must be >= 1, got {value!r}") for name, value in values.items()]


def _measured(**values: float) -> list[tuple[str, bool, str]]:
    """Checks that each measured time or rate is positive (a time) or non-negative (a rate) and finite:
    `_mapping.Fields` already refuses NaN and inf in files; samples built in code meet the same rule."""
    return [(name, (value > 0 if name.endswith("_us") else value >= 0) and math.isfinite(value),
             f"must be {'positive' if name.endswith('_us') else '>= 0'} and finite, got {value!r}")
            for name, value in values.items()]


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSample:
    """Time of one collective call at one message size (one nccl-tests row half, or one bench size)."""

    collective: str
    """One of `COLLECTIVES`."""
    size_bytes: int
    """Message size S in the nccl-tests convention, bytes: all_reduce, send_recv, broadcast = per-rank
    buffer; all_gather = gathered output (ranks × per-rank input); reduce_scatter = input (ranks × per-rank
    output); all_to_all = what one rank sends in total (= what it receives)."""
    ranks: int
    """Ranks taking part (n)."""
    ranks_per_node: int
    """Ranks per node; equal to `ranks` when all of them share one node."""
    time_us: float
    """Time of one call, microseconds."""
    algbw_gbps: float
    """Algorithm bandwidth S / time, GB/s (1e9 B/s)."""
    busbw_gbps: float
    """Bus bandwidth algbw × `busbw_factor`, GB/s."""
    source: str
    """Where the sample comes from: a file path or 'parplan bench comm (backend, torch version)'."""
    in_place: bool = False
    """nccl-tests in-place half of the row (output buffer aliases the input)."""
    dtype: str = ""
    """Element type as the measurement names it (nccl-tests 'float', 'bfloat16'; bench 'fp32', 'bf16')."""

    def __post_init__(self) -> None:
        require([
            ("collective", self.collective in COLLECTIVES, f"unknown collective; known: {', '.join(COLLECTIVES)}"),
            ("size_bytes", self.size_bytes >= 0, "must be >= 0"),
            ("ranks", 1 <= self.ranks <= MAX_GPUS, f"must lie in 1..{MAX_GPUS:,}"),
            ("ranks_per_node", 1 <= self.ranks_per_node <= MAX_GPUS, f"must lie in 1..{MAX_GPUS:,}"),
            *_measured(time_us=self.time_us, algbw_gbps=self.algbw_gbps, busbw_gbps=self.busbw_gbps),
        ])


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmSample:
    """Time of one GEMM (m×k)·(k×n), the shape convention of `efficiency.gemm_time`."""

    m: int
    """Rows of A and of the output (tokens for a forward linear)."""
    n: int
    """Columns of B and of the output (output features)."""
    k: int
    """Reduction dimension (input features)."""
    dtype: str
    """'bf16', 'fp16', 'tf32', 'fp8' (the GPUSpec.peak_tflops keys) or 'fp32' (CPU runs)."""
    time_us: float
    """Time of one GEMM, microseconds."""
    tflops: float
    """Achieved throughput 2·m·n·k / time, TFLOP/s (1e12)."""
    device: str
    """Device name (torch.cuda.get_device_name, or 'cpu')."""

    def __post_init__(self) -> None:
        require([*_sizes(m=self.m, n=self.n, k=self.k), *_measured(time_us=self.time_us, tflops=self.tflops)])


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionSample:
    """Time of scaled-dot-product attention forward and backward on q, k, v of shape (batch, heads, seq, head_dim)."""

    batch: int
    """Sequences."""
    heads: int
    """Attention heads on the device (query = key/value heads)."""
    seq: int
    """Tokens per sequence (queries = keys)."""
    head_dim: int
    """Per-head dimension of q, k and v."""
    causal: bool
    """Causal mask (each query sees the keys before it)."""
    fwd_us: float
    """Forward time, microseconds."""
    bwd_us: float
    """Backward time (gradients of q, k and v), microseconds."""
    device: str
    """Device name."""
    dtype: str = "bf16"
    """Element type of q, k and v."""

    def __post_init__(self) -> None:
        require([*_sizes(batch=self.batch, heads=self.heads, seq=self.seq, head_dim=self.head_dim),
                 *_measured(fwd_us=self.fwd_us, bwd_us=self.bwd_us)])


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySample:
    """Time of a device-to-device copy of one buffer (the memory-bound roofline's throughput)."""

    size_bytes: int
    """Bytes of the buffer copied."""
    time_us: float
    """Time of one copy, microseconds."""
    gbps: float
    """Memory traffic (read + write = 2 × size_bytes) / time, GB/s (1e9 B/s)."""
    device: str
    """Device name."""

    def __post_init__(self) -> None:
        require([*_sizes(size_bytes=self.size_bytes), *_measured(time_us=self.time_us, gbps=self.gbps)])


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileSamples:
    """Everything measured on one system, as the ``measurements:`` mapping of a profile file keeps it."""

    date: str
    """ISO date of the measurement (YYYY-MM-DD)."""
    device: str
    """Device name of the measuring machine."""
    torch_version: str | None = None
    """torch version of `parplan bench`; None for imported nccl-tests logs only."""
    nccl_version: str | None = None
    """NCCL version behind the collective samples; None when unknown or gloo."""
    collectives: tuple[CollectiveSample, ...] = ()
    gemm: tuple[GemmSample, ...] = ()
    attention: tuple[AttentionSample, ...] = ()
    memory: tuple[MemorySample, ...] = ()


_LISTS = {"collectives": CollectiveSample, "gemm": GemmSample, "attention": AttentionSample,
          "memory": MemorySample}
_HEADER = ("date", "device", "torch_version", "nccl_version")


def profile_to_dict(profile: ProfileSamples) -> dict[str, Any]:
    """The ``measurements:`` mapping of a profile (plain YAML-safe types; one mapping per sample)."""
    # str() of each header value: torch.__version__ is a str subclass (TorchVersion) safe_dump cannot write.
    out: dict[str, Any] = {name: None if getattr(profile, name) is None else str(getattr(profile, name))
                           for name in _HEADER}
    for name in _LISTS:
        out[name] = [_plain(s) for s in getattr(profile, name)]
    return out


_CASTS = {"int": int, "float": float, "str": str, "bool": bool}


def _plain(sample: Any) -> dict[str, Any]:
    """A sample as builtin scalars (a sample built from numpy values would not be YAML-safe)."""
    return {f.name: _CASTS[str(f.type)](getattr(sample, f.name)) for f in dataclasses.fields(sample)}


def write_profile_samples(path: str | Path, profile: ProfileSamples, *,
                          cluster: Mapping[str, Any] | None = None) -> None:
    """Write `profile` under ``measurements:``, after the cluster fields `cluster` (a preset-schema mapping
    holding the fitted numbers), so one file is both a ``--cluster`` file and the record of its data."""
    data = dict(cluster or {})
    data["measurements"] = profile_to_dict(profile)
    write_yaml(path, data)


def read_profile_samples(path: str | Path) -> ProfileSamples:
    """The ``measurements:`` mapping of a profile file; other top-level keys are ignored."""
    file = str(path)
    data = read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("measurements"), dict):
        raise ConfigError("expected a 'measurements' mapping", file=file, field="measurements")
    return profile_from_dict(data["measurements"], file=file)


def profile_from_dict(raw: Mapping[str, Any], *, file: str) -> ProfileSamples:
    """Check and convert a ``measurements:`` mapping; errors name the file and the sample's field."""
    f = Fields(raw, file, "measurements").allow((*_HEADER, *_LISTS))
    date = raw.get("date")
    if isinstance(date, datetime.date):  # YAML reads an unquoted 2026-07-01 as a date
        f = Fields({**raw, "date": date.isoformat()}, file, "measurements")
    header = {"date": f.str("date"), "device": f.str("device"),
              **{name: f.str(name, None) for name in ("torch_version", "nccl_version")}}
    lists = {name: tuple(_sample(cls, row, file, f"measurements.{name}[{i}]")
                         for i, row in enumerate(f.list(name, [])))
             for name, cls in _LISTS.items()}
    return ProfileSamples(**header, **lists)


def _sample(cls: type, row: Any, file: str, where: str) -> Any:
    """One sample dataclass from its mapping (its own checks name the field)."""
    return dataclass_from_mapping(cls, row, file, where)
