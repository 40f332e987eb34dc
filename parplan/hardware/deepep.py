"""DeepEP's expert-parallel all-to-all kernels (deepseek-ai/DeepEP): seconds of one dispatch or combine.

DeepEP has two kernel families (docs/legacy.md, the V1 README, ``reference/hardware.md`` §3):

- normal (high-throughput) kernels, for training and prefill: a token crosses the network once per
  destination node (IB to the same-index GPU there) and is forwarded over NVLink to the GPUs that hold its
  experts; bandwidth-bound, whichever link is busier sets the time;
- low-latency kernels, for decode: every (token, expert) copy goes straight to the expert's GPU, over RDMA
  (or NVLink for GPUs of the same node, since June 2025), with no forwarding and no per-node dedup; the time
  grows slowly with the EP size because each rank's NIC is the bottleneck.

Both are an α-β model per link: a hop latency plus the busier link's bytes at a measured fraction of its line
rate. The fractions are DeepEP's own figures on H800 (NVLink 200 GB/s per direction, one 400 Gb/s CX7 NIC per
GPU); the tests check the whole published tables against them. Every function is numpy-broadcastable.
"""

from __future__ import annotations

import numpy as np

from parplan.hardware.efficiency import ArrayLike
from parplan.hardware.spec import ClusterSpec

NORMAL_NVLINK_EFFICIENCY = 153 / 200
"""Normal intranode kernels: 153 GB/s dispatch bottleneck bandwidth over H800 NVLink (200 GB/s line rate),
DeepEP docs/legacy.md 'Normal kernels with NVLink and RDMA forwarding', EP8."""

NORMAL_RDMA_EFFICIENCY = 1.0
"""Normal internode kernels: 43, 58 and 51 GB/s RDMA bottleneck bandwidth at EP16/32/64 on a 50 GB/s CX7 NIC
(legacy.md): the NIC line rate on average."""

LOW_LATENCY_NVLINK_EFFICIENCY = 0.5
"""Low-latency kernels over NVLink: 90 (dispatch) and 116 GB/s (combine) of 200 at EP8, where every peer is
in the node (legacy.md low-latency table, 77 and 114 µs for 128 tokens, top-8, hidden 7168)."""

LOW_LATENCY_RDMA_EFFICIENCY = 0.8
"""Low-latency kernels over RDMA: 39-40 GB/s of 50 at EP128-256, where nearly every copy leaves the node
(legacy.md; ``reference/hardware.md`` §3: '~80% of 50 GB/s')."""

FP8_SCALE_GROUP = 128
"""FP8 dispatch carries one fp32 scale per 128 hidden elements (DeepEP per-token, per-128-channel quantisation,
as DeepSeek-V3 §3.3.2's fine-grained FP8)."""


def token_bytes(hidden: ArrayLike, fp8: ArrayLike) -> np.ndarray:
    """Bytes one token's hidden state occupies on the wire: bf16, or fp8 plus its per-128 fp32 scales."""
    h = np.asarray(hidden, dtype=float)
    return np.where(fp8, h + h / FP8_SCALE_GROUP * 4.0, 2.0 * h)


def _spans_nodes(ranks: ArrayLike, per_domain: ArrayLike) -> np.ndarray:
    return np.asarray(ranks) > np.asarray(per_domain)


def _hop_seconds(cluster: ClusterSpec, ranks: ArrayLike, per_domain: ArrayLike) -> np.ndarray:
    """One hop's latency: the NIC's when the group spans scale-up domains, else NVLink's (NCCL hwLat, the
    figures LinkSpec.ring_step_us carries)."""
    return np.where(_spans_nodes(ranks, per_domain), cluster.scaleout.ring_step_us,
                    cluster.scaleup.ring_step_us) * 1e-6


def normal_time(cluster: ClusterSpec, nvlink_bytes: ArrayLike, rdma_bytes: ArrayLike, ranks: ArrayLike,
                per_domain: ArrayLike) -> np.ndarray:
    """Seconds of one normal-kernel dispatch or combine in which the busiest rank moves `nvlink_bytes` over
    NVLink (peers in its node and forwarded tokens) and `rdma_bytes` over its NIC (one copy per remote node)."""
    nvl = np.asarray(nvlink_bytes, dtype=float) / (cluster.scaleup.bandwidth_gbps * 1e9 * NORMAL_NVLINK_EFFICIENCY)
    rdma = np.asarray(rdma_bytes, dtype=float) / (cluster.scaleout.bandwidth_gbps * 1e9 * NORMAL_RDMA_EFFICIENCY)
    t = _hop_seconds(cluster, ranks, per_domain) + np.maximum(nvl, rdma)
    return np.where(np.asarray(ranks) > 1, t, 0.0)


def low_latency_time(cluster: ClusterSpec, copy_bytes: ArrayLike, ranks: ArrayLike,
                     per_domain: ArrayLike) -> np.ndarray:
    """Seconds of one low-latency dispatch or combine in which a rank sends `copy_bytes` in all (one message
    per token and routed expert), spread evenly over the `ranks` of the EP group: the share for the other
    GPUs of its scale-up domain goes over NVLink, the rest over its NIC, both at once."""
    n = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    g = np.minimum(np.asarray(per_domain, dtype=float), n)
    b = np.asarray(copy_bytes, dtype=float)
    nvl = b * (g - 1) / n / (cluster.scaleup.bandwidth_gbps * 1e9 * LOW_LATENCY_NVLINK_EFFICIENCY)
    rdma = b * (n - g) / n / (cluster.scaleout.bandwidth_gbps * 1e9 * LOW_LATENCY_RDMA_EFFICIENCY)
    t = _hop_seconds(cluster, n, g) + np.maximum(nvl, rdma)
    return np.where(n > 1, t, 0.0)
