"""The one-sided MoE all-to-all over NVLink symmetric memory (TensorRT-LLM's NVLinkOneSided, the default exchange
inside one NVLink domain, also FlashInfer's MoeAlltoAll): seconds of one dispatch or combine.

Dispatch pushes each token once to every rank that holds one of its experts (rank-major receive buffer: no top-k
duplication), already quantised (NVFP4, FP8 or BF16 payloads); combine pulls the experts' partial outputs back and
reduces them. Each phase ends (dispatch) or starts (combine) with a flag barrier over the EP group. The time is an
α-β model of the kernel table TensorRT-LLM published (docs/source/blogs/tech_blog/
blog18_Optimizing_MoE_Communication_with_One_Sided_AlltoAll_Over_NVLink.md @22de8b3, 'Performance Benchmark': GB200
NVL72, DeepSeek-V3 profile, hidden 7168, top-8, 256 experts, BF16, batch 1-2,048 per rank at EP 8/16/32/64):
a floor the barrier and launch set (latency flat below ~32 tokens per rank), then the *logical* bytes (the blog's
convention: tokens x ranks reached x bytes per token, the local rank's share included) at the link's line rate,
which the barrier's growth with the group trims. The tests check the whole table against it (median error 8% for
dispatch, 6% for combine). Every function is numpy-broadcastable.
"""

from __future__ import annotations

import numpy as np

from parplan.hardware.efficiency import ArrayLike
from parplan.hardware.spec import ClusterSpec

DISPATCH_US = 18.0
"""Dispatch floor: 17.6-19.8 µs at 1-16 tokens per rank on EP 8-32 (the blog's tables, measured on GB200 and taken
for every NVLink domain; EP 64 20.4-29.1)."""

COMBINE_US = 30.0
"""Combine floor: 30.8-33.4 µs at 1-16 tokens per rank on EP 8-32 (35.0 on EP 64); the top-k reduction and the
barrier before the pull make it the longer phase."""

GROUP_DECAY = 0.13
"""Bandwidth falls as (8 / ranks)^0.13 beyond 8 ranks ('increased synchronization overhead inside the larger
communication domain'): at 2,048 tokens the logical bandwidth goes 753 / 684 / 629 / 588 GB/s (dispatch) from EP 8 to
64, of the 900 GB/s line rate; a least-squares fit of floor, rate and decay to all 48 points of each table (log error)
gives 0.17 (dispatch) and 0.10 (combine), one on the batches of 256 and more with the floor removed 0.15 and 0.11."""


def logical_bandwidth(cluster: ClusterSpec, ranks: ArrayLike) -> np.ndarray:
    """Logical bytes per second a rank's dispatch or combine moves once its floor is paid: the scale-up link's line
    rate, less the barrier's growth past 8 ranks."""
    r = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    return cluster.scaleup.bandwidth_gbps * 1e9 * (np.minimum(r, 8.0) / r) ** GROUP_DECAY


def _phase_time(floor_us: float, cluster: ClusterSpec, logical_bytes: ArrayLike, ranks: ArrayLike) -> np.ndarray:
    t = floor_us * 1e-6 + np.asarray(logical_bytes, dtype=float) / logical_bandwidth(cluster, ranks)
    return np.where(np.asarray(ranks) > 1, t, 0.0)


def dispatch_time(cluster: ClusterSpec, logical_bytes: ArrayLike, ranks: ArrayLike) -> np.ndarray:
    """Seconds of one dispatch in which a rank sends `logical_bytes`: its tokens x the ranks each reaches x the
    payload's bytes per token (scales included)."""
    return _phase_time(DISPATCH_US, cluster, logical_bytes, ranks)


def combine_time(cluster: ClusterSpec, logical_bytes: ArrayLike, ranks: ArrayLike) -> np.ndarray:
    """Seconds of one combine pulling `logical_bytes` (the same count of token copies, in the output's dtype)."""
    return _phase_time(COMBINE_US, cluster, logical_bytes, ranks)


def exchange_time(cluster: ClusterSpec, copies: ArrayLike, dispatch_bytes: ArrayLike, combine_bytes: ArrayLike,
                  ranks: ArrayLike) -> np.ndarray:
    """Seconds of one dispatch and its combine over `copies` token copies a rank sends (its tokens x the ranks each
    reaches), of `dispatch_bytes` and `combine_bytes` a copy."""
    c = np.asarray(copies, dtype=float)
    return dispatch_time(cluster, c * dispatch_bytes, ranks) + combine_time(cluster, c * combine_bytes, ranks)


def benchmark_bytes(tokens: ArrayLike, ranks: ArrayLike, top_k: ArrayLike, token_bytes: ArrayLike) -> np.ndarray:
    """Logical bytes of the blog's benchmark (bench_moe_comm.py --perfect_router): each token reaches min(ranks,
    top_k) ranks."""
    return np.asarray(tokens, dtype=float) * np.minimum(ranks, top_k) * np.asarray(token_bytes, dtype=float)
