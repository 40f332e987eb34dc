"""Time of the kernels and collectives a training step is made of, on a given cluster.

Every function is numpy-broadcastable: scalars for `explain`, arrays of millions of layouts for `plan`.

GEMMs: roofline of tensor-core time and HBM traffic. The tensor-core side is the best measured GEMM
throughput (MAMF, ml-engineering) times tile/wave quantisation (NVIDIA Matrix Multiplication Background
guide) times a short-K penalty; see ``reference/hardware.md`` §4.

Collectives: α-β (Hockney) on a two-level network, hierarchical as in ``reference/hardware.md`` §6.2: the
part inside the scale-up domain runs at the measured NVLink bus bandwidth, the part between domains at
the per-GPU NIC rate, and the slower of the two sets the time (the phases pipeline in NCCL). With the
nccl-tests conventions for message size S (PERFORMANCE.md): all-reduce S = per-rank buffer, all-gather
S = gathered output, reduce-scatter S = input, all-to-all S = per-rank send total.
"""

from __future__ import annotations

import enum

import numpy as np

from parplan.hardware.spec import ClusterSpec, GPUSpec

ArrayLike = np.ndarray | float | int


class Collective(enum.Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


# ---------------------------------------------------------------------------------------------- compute

def _tile_efficiency(gpu: GPUSpec, m: np.ndarray, n: np.ndarray, k: np.ndarray, count: ArrayLike,
                     tm: int, tn: int) -> np.ndarray:
    tiles = np.ceil(m / tm) * np.ceil(n / tn) * count
    # Split-K (cuBLAS/CUTLASS) fills idle SMs when there are fewer tiles than SMs, in K chunks >= 512.
    splits = np.maximum(1.0, np.minimum(np.floor(gpu.sm_count / tiles), np.floor(k / 512)))
    units = tiles * splits
    waves = np.ceil(units / gpu.sm_count)
    # Useful share of the launched tile slots: partial edge tiles, then idle SMs in the last wave.
    quantisation = (m * n * count) / (tiles * tm * tn) * units / (waves * gpu.sm_count)
    k_split = k / splits
    return quantisation * k_split / (k_split + gpu.gemm_k_overhead)


def gemm_efficiency(gpu: GPUSpec, m: ArrayLike, n: ArrayLike, k: ArrayLike, dtype: str = "bf16",
                    count: ArrayLike = 1) -> np.ndarray:
    """Fraction of the dtype's peak a GEMM (m×k)·(k×n) reaches, before the HBM roofline.

    Best measured GEMM / peak (MAMF) × tile and wave quantisation × a short-K penalty; the kernel
    library picks the better of the two tile orientations. `count` identical GEMMs run as one grouped
    kernel (experts), so their tiles share the waves.
    """
    tm, tn = gpu.gemm_tile
    m = np.maximum(np.asarray(m, dtype=float), 1.0)
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    k = np.maximum(np.asarray(k, dtype=float), 1.0)
    shape = np.maximum(_tile_efficiency(gpu, m, n, k, count, tm, tn),
                       _tile_efficiency(gpu, m, n, k, count, tn, tm))
    ceiling = gpu.gemm_peak_fraction.get(dtype, gpu.gemm_peak_fraction.get("bf16", 0.75))
    return ceiling * shape


def gemm_time(gpu: GPUSpec, m: ArrayLike, n: ArrayLike, k: ArrayLike, dtype: str = "bf16",
              count: ArrayLike = 1) -> np.ndarray:
    """Seconds for `count` GEMMs of shape (m×k)·(k×n): max of tensor-core time and HBM traffic."""
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    flops = 2.0 * m * n * k * count
    compute = flops / (gpu.peak_tflops[dtype] * 1e12 * gemm_efficiency(gpu, m, n, k, dtype, count))
    in_bytes = 1.0 if dtype == "fp8" else 2.0
    traffic = ((m * k + k * n) * in_bytes + m * n * 2.0) * count
    memory = traffic / (gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency)
    return np.maximum(np.maximum(compute, memory), gpu.kernel_min_us * 1e-6)


def memory_bound_time(gpu: GPUSpec, nbytes: ArrayLike, kernels: ArrayLike = 1) -> np.ndarray:
    """Seconds to stream `nbytes` through HBM in `kernels` element-wise kernels."""
    stream = np.asarray(nbytes, dtype=float) / (gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency)
    return np.maximum(stream, np.asarray(kernels, dtype=float) * gpu.kernel_min_us * 1e-6)


def attention_efficiency(gpu: GPUSpec, kv_len: ArrayLike, backward: bool = False) -> np.ndarray:
    """Flash-attention throughput / bf16 peak at `kv_len` keys per query.

    Saturating fit of the FlashAttention-3 sequence sweep (arXiv 2407.08608, hd128 causal forward:
    ~324, 560, 637 TFLOP/s at 512, 2k, 4k tokens = 740·s/(s+650)).
    """
    frac = gpu.attention_bwd_fraction if backward else gpu.attention_fwd_fraction
    s = np.maximum(np.asarray(kv_len, dtype=float), 1.0)
    return frac * s / (s + gpu.attention_half_seq)


# ---------------------------------------------------------------------------------------- communication

def _scaleup_busbw(cluster: ClusterSpec, per_domain: np.ndarray, kind: Collective) -> np.ndarray:
    """Bus bandwidth (GB/s) of a collective among `per_domain` GPUs of one scale-up domain."""
    link = cluster.scaleup
    bw = np.full(per_domain.shape, link.busbw_gbps, dtype=float)
    if kind is Collective.ALL_REDUCE and link.allreduce_busbw_gbps:
        # NCCL chooses NVLS (in-switch reduction) only above 4 GPUs (ml-engineering H200 sweep).
        bw = np.where(per_domain > 4, link.allreduce_busbw_gbps, bw)
    if link.per_peer_gbps:
        # Full mesh (MI300X): a subset of g GPUs only has its (g-1) direct links.
        bw = bw * np.minimum(1.0, (per_domain - 1) * link.per_peer_gbps / link.bandwidth_gbps)
    return np.maximum(bw, 1e-9)


def collective_time(cluster: ClusterSpec, kind: Collective, nbytes: ArrayLike, ranks: ArrayLike,
                    per_domain: ArrayLike) -> np.ndarray:
    """Seconds for one collective of S = `nbytes` over `ranks` GPUs, `per_domain` of them in each scale-up
    domain (1 when every member sits in a different node). A group of one rank costs nothing."""
    s = np.asarray(nbytes, dtype=float)
    n = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    g = np.clip(np.asarray(per_domain, dtype=float), 1.0, n)
    k = n / g
    b_in = _scaleup_busbw(cluster, np.broadcast_to(g, np.broadcast(g, s).shape), kind) * 1e9
    b_out = cluster.scaleout.busbw_gbps * 1e9
    if kind is Collective.ALL_REDUCE:
        inside = 2 * (g - 1) / g * s / b_in
        across = 2 * (k - 1) / k * (s / g) / b_out
    elif kind in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        inside = (g - 1) / g * s / b_in
        across = (k - 1) / k * (s / g) / b_out
    elif kind is Collective.ALL_TO_ALL:
        inside = (g - 1) / n * s / b_in
        across = (n - g) / n * s / b_out
    else:  # SEND_RECV: one peer, inside the domain when per_domain > 1
        inside = np.where(g > 1, s / b_in, 0.0)
        across = np.where(g > 1, 0.0, s / b_out)
    multi = k > 1
    alpha = np.where(
        multi,
        cluster.scaleout.latency_us + 2 * np.log2(np.maximum(k, 1)) * cluster.scaleout.hop_latency_us,
        cluster.scaleup.latency_us,
    ) * 1e-6
    t = alpha + np.maximum(inside, across)
    return np.where((n > 1) | (kind is Collective.SEND_RECV), t, 0.0)
