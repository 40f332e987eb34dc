"""The engines' routed-expert (grouped MoE) kernels against their micro-benchmarks: the shipped samples, the error
of parplan's expert time on them, and the kernel ceiling (Engine.moe_gemm_fraction) that zeroes its median.

The samples (data/serving/moe_kernels.csv; provenance in data/serving/SOURCES.md) are aiconfigurator's measured
MoE ops: the whole layer's routed experts on one rank (routing, permutation, both grouped GEMMs, activation and
combine), balanced routing, at the shipped MoE models' shapes and 1,024-16,384 tokens, where the GEMMs' tensor-core
rate, not the weights' streaming, sets the time. benchmarks/moe_kernel_fit.py prints the fit; engines.yaml carries
its result.
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
from parplan.models import load_model
from parplan.serving.cases import SYSTEMS
from parplan.serving.engines import Engine
from parplan.serving.kernel_fit import zero_median_rate
from parplan.serving.layout import PoolArrays
from parplan.serving.spec import Pool, Precision
from parplan.serving.step import StepModel


@dataclass(frozen=True, slots=True)
class KernelSample:
    """One measured MoE op."""

    engine: str
    system: str
    """GPU system as the measured rows name it (cases.SYSTEMS)."""
    weights: str
    """Expert weight format (bf16, fp8: 128×128 block-scaled, fp4: NVFP4 on Blackwell, MXFP4 with 16-bit
    activations on Hopper)."""
    model: str
    tokens: int
    """Tokens entering the layer on this rank (each routed to top_k experts)."""
    moe_tp: int
    moe_ep: int
    latency_ms: float


Group = tuple[str, str, str]
"""(engine, GPU architecture, expert weight format): what one fraction of Engine.moe_gemm_fraction covers."""


@lru_cache(maxsize=1)
def samples() -> dict[Group, tuple[KernelSample, ...]]:
    """The shipped samples by (engine, GPU architecture, weight format)."""
    groups: dict[Group, list[KernelSample]] = collections.defaultdict(list)
    with open(data_dir("serving") / "moe_kernels.csv", newline="") as f:
        for row in csv.DictReader(f):
            s = KernelSample(engine=row["engine"], system=row["system"], weights=row["format"], model=row["model"],
                             tokens=int(row["tokens"]), moe_tp=int(row["moe_tp"]), moe_ep=int(row["moe_ep"]),
                             latency_ms=float(row["latency_ms"]))
            groups[(s.engine, load_cluster(SYSTEMS[s.system]).gpu.arch, s.weights)].append(s)
    return {k: tuple(v) for k, v in groups.items()}


def log_errors(engine: Engine, group: tuple[KernelSample, ...]) -> np.ndarray:
    """log(measured / predicted) of every sample, with the routed-expert time of `engine`'s StepModel."""
    layouts: dict[tuple[str, str, str, int, int], list[KernelSample]] = collections.defaultdict(list)
    for s in group:
        layouts[(s.model, s.system, s.weights, s.moe_tp, s.moe_ep)].append(s)
    out = []
    for (model, system, weights, moe_tp, moe_ep), rows in layouts.items():
        pool = Pool(tp=moe_tp * moe_ep, pp=1, dp=1, moe_tp=moe_tp, moe_ep=moe_ep, workers=1)
        sm = StepModel(load_model(model), load_cluster(SYSTEMS[system]), engine,
                       Precision(gemm="bf16", moe=weights, kv_cache="bf16"), PoolArrays.from_pools([pool]))
        predicted_ms = sm.experts(np.array([float(s.tokens) for s in rows])) * 1e3
        out.append(np.log(np.array([s.latency_ms for s in rows]) / predicted_ms))
    return np.concatenate(out)


def with_fraction(engine: Engine, arch: str, weights: str, fraction: float | None) -> Engine:
    """The engine with one entry of its table set (None: removed, so the dense GEMM ceiling applies)."""
    table = tuple(e for e in engine.moe_gemm_fraction if (e[0], e[1]) != (arch, weights))
    return dataclasses.replace(engine, moe_gemm_fraction=table + (() if fraction is None else
                                                                   ((arch, weights, fraction),)))


def fit_fraction(engine: Engine, key: Group, group: tuple[KernelSample, ...]) -> float | None:
    """The share of the dense GEMM ceiling with zero median log error (bisection: a higher share predicts a faster
    op, so the error rises with it), to three decimals; None where the dense ceiling already predicts the group as
    slow as measured or slower."""
    _, arch, weights = key
    if np.median(log_errors(with_fraction(engine, arch, weights, None), group)) <= 0:
        return None
    return zero_median_rate(lambda f: log_errors(with_fraction(engine, arch, weights, f), group), 0.01, 1.0, 30, 3)
