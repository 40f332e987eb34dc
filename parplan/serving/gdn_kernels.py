"""The engines' chunked Gated DeltaNet prefill kernels against their micro-benchmarks: the shipped samples, the error
of parplan's prefill time on them, and the share of the bf16 peak (Engine.gdn_prefill_fraction) that zeroes its
median.

The samples (data/serving/gdn_kernels.csv; provenance in data/serving/SOURCES.md) are aiconfigurator's measured
`chunk_gated_delta_rule` context kernels (FLA's Triton kernels as SGLang, TensorRT-LLM and vLLM call them) at the
Qwen3.5 models' GDN head shapes over 1-16 GPUs and 1,024-2,097,152 tokens. They run at 1.5-3.5 ns per token and
value head on H100-GB300 (29-63 TFLOP/s of the recurrence's FLOPs), not at the tensor cores' rate:
benchmarks/gdn_kernel_fit.py prints the fit; engines.yaml carries its result.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from parplan._resources import data_dir
from parplan.hardware.presets import load_cluster
from parplan.models.spec import LinearAttentionSpec
from parplan.serving.cases import SYSTEMS
from parplan.serving.engines import Engine
from parplan.serving.kernel_fit import zero_median_rate
from parplan.serving.step import gdn_prefill_time


@dataclass(frozen=True, slots=True)
class GdnSample:
    """One measured chunked prefill kernel of one GDN layer on one GPU."""

    engine: str
    system: str
    """GPU system as the measured rows name it (cases.SYSTEMS)."""
    tokens: int
    """Batch x sequence length."""
    heads: LinearAttentionSpec
    """The heads the GPU holds."""
    latency_ms: float


Group = tuple[str, str]
"""(engine, GPU architecture): what one entry of Engine.gdn_prefill_fraction covers."""


@lru_cache(maxsize=1)
def samples() -> dict[Group, tuple[GdnSample, ...]]:
    """The shipped samples by (engine, GPU architecture)."""
    groups: dict[Group, list[GdnSample]] = collections.defaultdict(list)
    with open(data_dir("serving") / "gdn_kernels.csv", newline="") as f:
        for row in csv.DictReader(f):
            heads = LinearAttentionSpec(key_heads=int(row["key_heads"]), value_heads=int(row["value_heads"]),
                                        key_head_dim=int(row["key_head_dim"]),
                                        value_head_dim=int(row["value_head_dim"]), conv_kernel=4)
            s = GdnSample(engine=row["engine"], system=row["system"],
                          tokens=int(row["batch"]) * int(row["seq_len"]), heads=heads,
                          latency_ms=float(row["latency_ms"]))
            groups[(s.engine, load_cluster(SYSTEMS[s.system]).gpu.arch)].append(s)
    return {k: tuple(v) for k, v in groups.items()}


def log_errors(engine: Engine, group: tuple[GdnSample, ...]) -> np.ndarray:
    """log(measured / predicted) of every sample, with `engine`'s gdn_prefill_time (one call per GPU system and
    head shape, over its token counts)."""
    shapes: dict[tuple[str, LinearAttentionSpec], list[GdnSample]] = collections.defaultdict(list)
    for s in group:
        shapes[(s.system, s.heads)].append(s)
    out = []
    for (system, heads), rows in shapes.items():
        gpu = load_cluster(SYSTEMS[system]).gpu
        predicted_ms = gdn_prefill_time(gpu, engine, heads, np.array([float(s.tokens) for s in rows])) * 1e3
        out.append(np.log(np.array([s.latency_ms for s in rows]) / predicted_ms))
    return np.concatenate(out)


def with_fraction(engine: Engine, arch: str, fraction: float | None) -> Engine:
    """The engine with one entry of its table set (None: the table emptied, so the flash-attention fraction
    applies, as it did before the table)."""
    if fraction is None:
        return dataclasses.replace(engine, gdn_prefill_fraction=())
    table = tuple(e for e in engine.gdn_prefill_fraction if e[0] != arch)
    return dataclasses.replace(engine, gdn_prefill_fraction=(*table, (arch, fraction)))


def fit_fraction(engine: Engine, arch: str, group: tuple[GdnSample, ...]) -> float:
    """The share of the bf16 peak with zero median log error (bisection: a higher share predicts a faster kernel,
    so the error rises with it), to four decimals."""
    return zero_median_rate(lambda f: log_errors(with_fraction(engine, arch, f), group), 1e-4, 1.0, 40, 4)
