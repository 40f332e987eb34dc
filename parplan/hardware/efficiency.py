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

from parplan.hardware.spec import ClusterSpec, GPUSpec, LinkSpec

ArrayLike = np.ndarray | float | int


class Collective(enum.Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


# ---------------------------------------------------------------------------------------------- compute

def _kernel_time(gpu: GPUSpec, m: np.ndarray, n: np.ndarray, k: np.ndarray, count: ArrayLike,
                 per_sm_flops: float) -> np.ndarray:
    """Tensor-core time of a GEMM at a steady-state per-SM rate, with the best tile choice.

    Tiles run in waves over the SMs; each tile spends 2·tm·tn·K / per-SM-rate in its K loop plus a fixed
    overhead (epilogue, pipeline fill); the kernel pays a launch overhead once. Split-K (cuBLAS/CUTLASS)
    fills idle SMs when there are fewer tiles than SMs, in K chunks of at least 512. The library picks
    the best of a few tile shapes.
    """
    # The candidates along a leading axis: one pass of each operation for all of them (a search calls this a few
    # hundred times per batch, on small arrays).
    candidates = _tile_candidates(gpu)
    lead = (len(candidates),) + (1,) * max(np.ndim(m), np.ndim(n), np.ndim(k), np.ndim(count))
    tm, tn, rate_factor = (np.array(column, dtype=float).reshape(lead) for column in
                           zip(*((tm, tn, rate) for (tm, tn), rate in candidates), strict=True))
    tiles = np.ceil(m / tm) * np.ceil(n / tn) * count
    splits = np.maximum(1.0, np.minimum(np.floor(gpu.sm_count / tiles), np.floor(k / 512)))
    waves = np.ceil(tiles * splits / gpu.sm_count)
    mainloop = 2.0 * tm * tn * (k / splits) / (per_sm_flops * rate_factor)
    best = (waves * (mainloop + gpu.gemm_tile_overhead_us * 1e-6)).min(axis=0)
    return best + gpu.kernel_launch_us * 1e-6


SMALL_TILE_RATE = 0.9
"""Throughput of the half-width square tile relative to the large tile: per SM it loads a third more operand bytes
per FLOP ((tm+tn)/(tm·tn): 128x128 against Hopper's 128x256, and against the 128x256 each SM of Blackwell's 2-SM
256x256 tile computes), an estimate; the kernel library falls back to it when it quantises better. MI300X's 256x256
tile is one CU's, so its half tile loads twice the bytes per FLOP; the same rate is assumed there (unmeasured)."""


SKINNY_TILE_ROWS = 16
"""Rows of the tile GEMM libraries use for a few tokens against a large weight: with swap-AB the tokens become
the narrow N side of the MMA, down to 8 on Hopper wgmma (TensorRT-LLM and vLLM small-M kernels); 16 assumed."""

SKINNY_TILE_RATE = 0.5
"""Throughput of the skinny tile relative to the large tile: it loads (16 + 256)/(16·256), six times the large
tile's operand bytes per FLOP; half the rate assumed (an estimate). It only wins where the GEMM has a few rows,
which HBM traffic bounds anyway."""


def _tile_candidates(gpu: GPUSpec) -> list[tuple[tuple[int, int], float]]:
    """Tile shapes a GEMM library chooses from: both orientations of the large tile, a square one half its long
    side (128x128 beside Hopper's 128x256 and Blackwell's 256x256: cuBLAS and CUTLASS sm100 keep 1-SM 128-row
    tiles beside the 2-SM ones), and a skinny one for a few rows (decode steps)."""
    tm, tn = gpu.gemm_tile
    small = max(tm, tn) // 2
    return [((tm, tn), 1.0), ((tn, tm), 1.0), ((small, small), SMALL_TILE_RATE),
            ((SKINNY_TILE_ROWS, max(tm, tn)), SKINNY_TILE_RATE)]


PRIOR_GEMM_FRACTION = 0.75
"""Best GEMM throughput / peak of a GPU whose file measures none (MAMF puts A100-B200 at 0.71-0.87)."""


def gemm_ceiling(gpu: GPUSpec, dtype: str) -> float:
    """Best measured GEMM throughput / peak of `dtype` on `gpu` (GPUSpec.gemm_peak_fraction: MAMF's, or derived from
    the engines' collectors where MAMF has none): the dtype's, else bf16's, else PRIOR_GEMM_FRACTION."""
    return gpu.gemm_peak_fraction.get(dtype, gpu.gemm_peak_fraction.get("bf16", PRIOR_GEMM_FRACTION))


def _steady_rate(gpu: GPUSpec, dtype: str, ceiling: float | None = None) -> tuple[float, float]:
    """(per-SM steady-state FLOP/s, ceiling fraction) backed out of the best measured GEMM.

    The best measured GEMM (GPUSpec.gemm_peak_fraction) reaches `fraction` of peak at `gemm_best_shape`; solve for the
    per-SM rate at which the tile model reproduces that time (fixed point; converges in a few passes). A
    `ceiling` replaces that fraction for kernels measured slower than dense GEMMs (Engine.moe_gemm_fraction).
    """
    fraction = gemm_ceiling(gpu, dtype) if ceiling is None else ceiling
    key = (gpu.sm_count, gpu.peak_tflops[dtype], fraction, gpu.gemm_best_shape, gpu.gemm_tile,
           gpu.gemm_tile_overhead_us, gpu.kernel_launch_us)
    if key not in _RATE_CACHE:
        _RATE_CACHE[key] = _solve_rate(gpu, gpu.peak_tflops[dtype] * 1e12, fraction)
    return _RATE_CACHE[key], fraction


_RATE_CACHE: dict[tuple, float] = {}


def _solve_rate(gpu: GPUSpec, peak: float, fraction: float) -> float:
    m, n, k = (np.asarray(float(x)) for x in gpu.gemm_best_shape)
    target = 2.0 * m * n * k / (fraction * peak)
    per_sm = fraction * peak / gpu.sm_count
    for _ in range(20):
        per_sm *= float(_kernel_time(gpu, m, n, k, 1, per_sm)) / float(target)
    return per_sm


def gemm_efficiency(gpu: GPUSpec, m: ArrayLike, n: ArrayLike, k: ArrayLike, dtype: str = "bf16",
                    count: ArrayLike = 1, ceiling: float | None = None) -> np.ndarray:
    """Fraction of the dtype's peak a GEMM (m×k)·(k×n) reaches, before the HBM roofline.

    Tile/wave quantisation, per-tile and per-kernel overhead at the steady-state rate backed out of the
    best measured GEMM; never above that measurement (it is the best over all shapes). `count` identical
    GEMMs run as one grouped kernel (experts), so their tiles share the waves. `ceiling` (a fraction of the
    peak) replaces the measured best for a kernel family that runs slower (gemm_ceiling otherwise).
    """
    per_sm, fraction = _steady_rate(gpu, dtype, ceiling)
    m = np.maximum(np.asarray(m, dtype=float), 1.0)
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    k = np.maximum(np.asarray(k, dtype=float), 1.0)
    t = _kernel_time(gpu, m, n, k, count, per_sm)
    eff = 2.0 * m * n * k * count / (t * gpu.peak_tflops[dtype] * 1e12)
    return np.minimum(eff, fraction)


DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "tf32": 4.0, "fp8": 1.0, "fp4": 0.5 + 1 / 16, "int4": 0.5 + 2 / 32}
"""Bytes per element of a GEMM operand: fp4 is NVFP4, 4-bit values plus one fp8 scale per 16 (NVIDIA Blackwell
NVFP4 format; MXFP4's one 8-bit scale per 32 is within 2%); int4 is a weight-only format with one bf16 scale per
group of 32 (Kimi-K2.5 compressed-tensors, group_size 32)."""


def gemm_time(gpu: GPUSpec, m: ArrayLike, n: ArrayLike, k: ArrayLike, dtype: str = "bf16",
              count: ArrayLike = 1, weight_bytes: ArrayLike | None = None,
              ceiling: float | None = None) -> np.ndarray:
    """Seconds for `count` GEMMs of shape (m×k)·(k×n): the slower of tensor-core time and HBM traffic.

    `dtype` is the tensor-core type both operands enter the MMA in; `weight_bytes` (bytes per element of the
    k×n operand, default the dtype's) covers weight-only quantisation, where 4-bit weights stream from HBM and
    are dequantised on the fly (Marlin-style W4A16 kernels); `ceiling` as gemm_efficiency."""
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    flops = 2.0 * m * n * k * count
    compute = flops / (gpu.peak_tflops[dtype] * 1e12 * gemm_efficiency(gpu, m, n, k, dtype, count, ceiling))
    in_bytes = DTYPE_BYTES[dtype]
    w_bytes = in_bytes if weight_bytes is None else np.asarray(weight_bytes, dtype=float)
    traffic = (m * k * in_bytes + k * n * w_bytes + m * n * 2.0) * count
    memory = traffic / (gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency) + gpu.kernel_launch_us * 1e-6
    return np.maximum(compute, memory)


def peak_flops(gpu: GPUSpec, fp8: ArrayLike) -> np.ndarray:
    """Dense peak FLOP/s of the GEMM dtype MFU is measured against: fp8 where fp8 GEMMs are on (nan on a GPU
    without fp8 tensor cores, which the Strategy rules refuse anyway), bf16 otherwise."""
    return np.where(fp8, gpu.peak_tflops.get("fp8", np.nan), gpu.peak_tflops["bf16"]) * 1e12


def memory_bound_time(gpu: GPUSpec, nbytes: ArrayLike, kernels: ArrayLike = 1) -> np.ndarray:
    """Seconds to stream `nbytes` through HBM in `kernels` element-wise kernels (each pays its launch)."""
    stream = np.asarray(nbytes, dtype=float) / (gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency)
    return stream + np.asarray(kernels, dtype=float) * gpu.kernel_launch_us * 1e-6


def attention_efficiency(gpu: GPUSpec, kv_len: ArrayLike, backward: bool = False,
                         kernel: str | None = None) -> np.ndarray:
    """Flash-attention throughput / bf16 peak at `kv_len` keys per query, for the GPU's best kernel or the
    named kernel generation (GPUSpec.attention_kernel_fwd/bwd).

    Saturating fit of the FlashAttention-3 sequence sweep (arXiv 2407.08608, hd128 causal forward:
    ~324, 560, 637 TFLOP/s at 512, 2k, 4k tokens = 740·s/(s+650)).
    """
    if backward:
        frac = gpu.attention_kernel_bwd.get(kernel, gpu.attention_bwd_fraction)
    else:
        frac = gpu.attention_kernel_fwd.get(kernel, gpu.attention_fwd_fraction)
    s = np.maximum(np.asarray(kv_len, dtype=float), 1.0)
    return frac * s / (s + gpu.attention_half_seq)


FLASH_BACKWARD_FLOPS = 2.5
"""Backward FLOPs of flash attention per forward FLOP as FlashAttention counts them: it recomputes the
scores, 5 GEMM-sized passes against the forward's 2."""


def attention_forward_flops(batch: ArrayLike, heads: ArrayLike, queries: ArrayLike, keys: ArrayLike,
                            d_qk: ArrayLike, d_v: ArrayLike) -> np.ndarray:
    """FLOPs of QKᵀ and P·V: 2·(d_qk + d_v) per query-key pair per head (`keys` per query, causal half
    included by the caller)."""
    return 2.0 * np.asarray(batch) * heads * queries * keys * (np.asarray(d_qk) + d_v)


def flash_attention_time(gpu: GPUSpec, forward_flops: ArrayLike, kv_len: ArrayLike, peak_flops: ArrayLike,
                         kernel: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of flash attention doing `forward_flops` at `kv_len` keys per query, with
    the GPU's best kernel or the named kernel generation."""
    fwd = forward_flops / (peak_flops * attention_efficiency(gpu, kv_len, kernel=kernel))
    bwd = FLASH_BACKWARD_FLOPS * forward_flops / (peak_flops * attention_efficiency(gpu, kv_len, backward=True,
                                                                                     kernel=kernel))
    return fwd, bwd


def decode_attention_time(gpu: GPUSpec, kv_bytes: ArrayLike, flops: ArrayLike, peak_flops: ArrayLike,
                          kernels: ArrayLike = 1) -> np.ndarray:
    """Seconds of attention for queries that read a KV cache (decode, or a short chunk against a long
    prefix): the slower of streaming `kv_bytes` through HBM and doing `flops` at the flash-attention
    forward fraction of `peak_flops`. FlashMLA shows both regimes on one kernel: up to 3000 GB/s (0.90 of
    the H800's 3.35 TB/s) memory-bound and 660 TFLOP/s (0.67 of 989) compute-bound (deepseek-ai/FlashMLA
    README), close to hbm_efficiency and attention_fwd_fraction; MLA's absorbed attention with 128 heads is
    the compute-bound case."""
    compute = np.asarray(flops, dtype=float) / (np.asarray(peak_flops, dtype=float) * gpu.attention_fwd_fraction)
    return np.maximum(memory_bound_time(gpu, kv_bytes, kernels), compute + np.asarray(kernels) * gpu.kernel_launch_us
                      * 1e-6)


# ---------------------------------------------------------------------------------------- communication

NVLS_MIN_GPUS = 4
"""NCCL chooses NVLS (in-switch reduction) for all-reduce only above 4 GPUs (ml-engineering H200 sweep)."""


def uses_nvls(link: LinkSpec, kind: Collective, per_domain: ArrayLike) -> np.ndarray:
    """Where an all-reduce among `per_domain` GPUs of one scale-up domain runs as NVLS on `link`."""
    return ((kind is Collective.ALL_REDUCE) & (link.allreduce_busbw_gbps is not None)
            & (np.asarray(per_domain) > NVLS_MIN_GPUS))


def scaleup_busbw(cluster: ClusterSpec, per_domain: ArrayLike, kind: Collective) -> np.ndarray:
    """Bus bandwidth (GB/s) of a collective among `per_domain` GPUs of one scale-up domain."""
    link = cluster.scaleup
    bw = np.where(uses_nvls(link, kind, per_domain), link.allreduce_busbw_gbps or 0.0, link.busbw_gbps)
    if link.per_peer_gbps:
        # Full mesh (MI300X): a subset of g GPUs only has its (g-1) direct links.
        bw = bw * np.minimum(1.0, (per_domain - 1) * link.per_peer_gbps / link.bandwidth_gbps)
    return np.maximum(bw, 1e-9)


NCCL_BASE_US = 8.4
"""NCCL 2.30 tuning.cc baseLat for Ring and Tree with the Simple protocol (bandwidth-bound messages)."""

RING_ALLREDUCE_MULTINODE = 1.4
"""tuning.cc multiplies multi-node ring Simple all-reduce latency by 1.4 on SM80+ ("plateau effect")."""


RING_PASSES = {Collective.ALL_REDUCE: 2, Collective.ALL_GATHER: 1, Collective.REDUCE_SCATTER: 1}
"""Passes of a ring collective around its n ranks, n − 1 steps each: a ring all-reduce is a reduce-scatter
followed by an all-gather."""


def _latency(cluster: ClusterSpec, kind: Collective, n: np.ndarray, g: np.ndarray, k: np.ndarray,
             nvls: np.ndarray) -> np.ndarray:
    """Seconds of latency of one collective after NCCL's own model (tuning.cc, ``reference/hardware.md``
    §6.3): base + steps × per-link hop latency, for the ring, tree/PAT and NVLS algorithms; NCCL picks the
    fastest, and all of them move the same bytes in the hierarchical bandwidth model."""
    up, out = cluster.scaleup, cluster.scaleout
    multi = k > 1
    log_k = np.log2(np.maximum(k, 1))
    if kind is Collective.ALL_REDUCE:
        passes = RING_PASSES[kind]
        intra_ring = NCCL_BASE_US + passes * (g - 1) * up.ring_step_us
        nvls_lat = np.where(nvls, up.nvls_us or 0.0, np.inf)
        ring = RING_ALLREDUCE_MULTINODE * (NCCL_BASE_US + passes * (n - k) * up.ring_step_us
                                           + passes * (k - 1) * out.ring_step_us)
        tree = NCCL_BASE_US + 2 * ((g - 1) * up.tree_step_us + log_k * out.tree_step_us)
        lat = np.where(multi, np.minimum(ring, tree), np.minimum(intra_ring, nvls_lat))
    elif kind in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        ring = NCCL_BASE_US + RING_PASSES[kind] * ((n - k) * up.ring_step_us + (k - 1) * out.ring_step_us)
        pat = np.where(g == 1, NCCL_BASE_US + log_k * out.ring_step_us, np.inf)  # PAT: one rank per node
        lat = np.minimum(ring, pat)
    else:  # all-to-all and send/recv: the sends of a group proceed together, one hop deep
        lat = NCCL_BASE_US + np.where(multi, out.ring_step_us, up.ring_step_us)
    return lat * 1e-6


def _group(ranks: ArrayLike, per_domain: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n ranks, g of them per scale-up domain, k = n/g domains) of a group."""
    n = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    g = np.clip(np.asarray(per_domain, dtype=float), 1.0, n)
    return n, g, n / g


def link_bytes(kind: Collective, nbytes: ArrayLike, ranks: ArrayLike,
               per_domain: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(bytes over the scale-up link, bytes over the NIC) one GPU moves in a collective of S = `nbytes` in the
    hierarchical model: rings inside the domain, then across domains on the 1/g share each GPU owns."""
    s = np.asarray(nbytes, dtype=float)
    n, g, k = _group(ranks, per_domain)
    if kind is Collective.ALL_REDUCE:
        return 2 * (g - 1) / g * s, 2 * (k - 1) / k * (s / g)
    if kind in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        return (g - 1) / g * s, (k - 1) / k * (s / g)
    if kind is Collective.ALL_TO_ALL:
        return (g - 1) / n * s, (n - g) / n * s
    # SEND_RECV: one peer, inside the domain when per_domain > 1
    return np.where(g > 1, s, 0.0), np.where(g > 1, 0.0, s)


def link_time(cluster: ClusterSpec, kind: Collective, inside_bytes: ArrayLike, across_bytes: ArrayLike,
              ranks: ArrayLike, per_domain: ArrayLike, count: ArrayLike = 1) -> np.ndarray:
    """Seconds of `count` collectives of `kind` whose busiest GPU moves `inside_bytes` over the scale-up link
    and `across_bytes` over its NIC, both links running at once: count × NCCL latency plus the slower link.
    A group of one rank costs nothing."""
    n, g, k = _group(ranks, per_domain)
    inside = np.asarray(inside_bytes, dtype=float)
    shape = np.broadcast(g, inside).shape
    g_b = np.broadcast_to(g, shape)
    b_in = scaleup_busbw(cluster, g_b, kind) * 1e9
    nvls = uses_nvls(cluster.scaleup, kind, g_b)
    b_out = cluster.scaleout.busbw_gbps * 1e9
    t = (np.asarray(count, dtype=float) * _latency(cluster, kind, n, g, k, nvls)
         + np.maximum(inside / b_in, np.asarray(across_bytes, dtype=float) / b_out))
    return np.where((n > 1) | (kind is Collective.SEND_RECV), t, 0.0)


def collective_time(cluster: ClusterSpec, kind: Collective, nbytes: ArrayLike, ranks: ArrayLike,
                    per_domain: ArrayLike, count: ArrayLike = 1) -> np.ndarray:
    """Seconds to move S = `nbytes` in `count` equal collectives over `ranks` GPUs, `per_domain` of them in
    each scale-up domain (1 when every member sits in a different node): count × latency plus the
    bandwidth time of S (link_bytes over link_time)."""
    inside, across = link_bytes(kind, nbytes, ranks, per_domain)
    return link_time(cluster, kind, inside, across, ranks, per_domain, count)
