"""The three kinds of peak memory a run can measure, and what lies between them.

- allocated: the bytes of live tensors at the peak, what ``torch.cuda.max_memory_allocated`` reports
  (Megatron --log-memory-to-tensorboard); `memory.RankMemory.total`.
- reserved: what PyTorch's caching allocator holds from the driver at the peak, what
  ``torch.cuda.max_memory_reserved`` reports (torchtitan's logged "memory", nanotron's "Mem Res"): allocated plus
  the blocks the allocator cached or could not reuse (`reserved_bytes`).
- device: what the GPU has in use, what nvidia-smi shows: reserved plus what lives outside PyTorch's allocator,
  the CUDA context and the communication libraries' buffers (`outside_allocator_bytes`). A layout fits when this
  is within the GPU's memory.

The communication buffers are sized from the libraries' documented defaults: NCCL's per-channel protocol
buffers for every group that runs collectives and its per-peer point-to-point buffers, DeepEP's NVLink and RDMA
buffers from its own size hints. Which buffers exist depends on the MoE dispatcher, a time-only field of the
search (strategy.Rule.time_only): the one explicit rule through which it reaches memory, and only device memory,
which the search therefore adds after expanding the dispatcher.
"""

from __future__ import annotations

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.strategy import DISPATCHERS, Layouts
from parplan.stacks.spec import StackSpec

MEMORY_KINDS = ("allocated", "reserved", "device")

ALLOCATOR_HEADROOM = {"caching": 0.1, "expandable_segments": 0.02, "xla": 0.0}
"""Reserved bytes beyond allocated, as a share of the bytes allocated and freed within each step (activations,
logits, gather and working buffers; the model states are allocated once at start and never fragment). XLA's
buffer assignment lays the step's buffers out at compile time (xla/service/buffer_assignment.cc), so nothing
fragments at run time."""

CUDA_CONTEXT_GIB = 1.0
"""CUDA context, loaded kernels and cuBLAS/cuDNN workspaces outside PyTorch's allocator (formulas.md §3.8: 300 MiB
to 2 GiB on first CUDA use, https://vram.asmirnov.xyz; lazy module loading, the default since CUDA 12.2, keeps it
near the low end)."""

MIB = 2**20
NCCL_CHANNELS = 32
"""NCCL's channel limit (MAXCHANNELS, src/include/device.h); large collectives on NVLink and InfiniBand use all."""
NCCL_PROTOCOL_BYTES = 4 * MIB + 4_915_200 + 524_288
"""Receive buffers of one ring connection of one channel: Simple NCCL_BUFFSIZE (default 4 MiB, NCCL environment
docs), LL128 120 elements × 640 threads × 8 steps × 8 B and LL 8 lines × 512 threads × 8 steps × 16 B
(src/include/device.h DEFAULT_LL128_BUFFSIZE, DEFAULT_LL_BUFFSIZE)."""
NCCL_P2P_PEER_BYTES = 2 * 8 * 512 * 1024
"""Point-to-point buffers per peer: NCCL_NCHANNELS_PER_NET_PEER (2) channels × NCCL_STEPS (8) slots of
NCCL_P2P_NVL_CHUNKSIZE (512 KiB) (NCCL environment docs, src/include/collectives.h)."""

DEEPEP_SMS = 20
"""DeepEP Buffer.num_sms: SMs of the high-throughput kernels, two per channel (deep_ep/buffer.py)."""
DEEPEP_NVL_PEERS = 8
"""NUM_MAX_NVL_PEERS: ranks one DeepEP NVLink domain serves (csrc/kernels/configs.cuh)."""
DEEPEP_RECV_TOKENS = ((8, 256), (64, 288), (128, 560), (160, 720))
"""(largest EP size, num_max_nvl_chunked_recv_tokens) of DeepEP's recommended dispatch and combine configs
(Buffer.get_dispatch_config / get_combine_config); num_max_rdma_chunked_recv_tokens is 128 in all of them."""
DEEPEP_RDMA_RECV_TOKENS = 128
DEEPEP_TOKEN_META_BYTES = 128 * 8 + 128 * 4 + 128 * 4 + 8
"""Per buffered token besides its hidden state: kNumMaxTopK int64 indices and fp32 weights, kNumMaxScales fp32
scales and the source metadata (csrc/config.hpp get_nvl_buffer_size_hint, get_rdma_buffer_size_hint)."""
DEEPEP_HIDDEN_BYTES = 2
"""The buffers are sized for bf16 hidden states: combine stays bf16 even when dispatch is fp8 (DeepEP README
example get_buffer(group, hidden_bytes); DeepSeek-V3 §3.3.3)."""


def reserved_bytes(allocated: np.ndarray, transient: np.ndarray, stack: StackSpec) -> np.ndarray:
    """Peak reserved bytes of a rank: allocated plus the allocator's headroom on what it allocates and frees."""
    return allocated + ALLOCATOR_HEADROOM[stack.memory.allocator] * transient


def nccl_bytes(ring_groups: np.ndarray, p2p_peers: np.ndarray) -> np.ndarray:
    """NCCL's buffers of a rank that runs collectives in `ring_groups` groups and point-to-point transfers with
    `p2p_peers` peers."""
    return ring_groups * NCCL_CHANNELS * NCCL_PROTOCOL_BYTES + p2p_peers * NCCL_P2P_PEER_BYTES


def _ring_groups(model: ModelSpec, lay: Layouts, gpus: int) -> np.ndarray:
    """Groups a rank runs collectives in: TP, the dense gradient group (cp·dp), the expert gradient group and the
    context-parallel group."""
    dp = gpus // (lay.tp * lay.pp * lay.cp)
    edp = gpus // (lay.etp * lay.ep * lay.pp)
    groups = (lay.tp > 1).astype(float) + (lay.cp * dp > 1) + (lay.cp > 1)
    if model.moe is not None:
        groups = groups + ((edp > 1) & (lay.ep * lay.etp > 1))
    return groups


def deepep_bytes(hidden: int, ep: np.ndarray) -> np.ndarray:
    """DeepEP's NVLink and (across domains) RDMA buffers for an EP group of `ep` ranks, from its size hints."""
    recv = np.full(ep.shape, DEEPEP_RECV_TOKENS[-1][1], dtype=float)
    for largest, tokens in reversed(DEEPEP_RECV_TOKENS):
        recv = np.where(ep <= largest, tokens, recv)
    channels = DEEPEP_SMS // 2
    token = hidden * DEEPEP_HIDDEN_BYTES + DEEPEP_TOKEN_META_BYTES
    nvl_ranks = np.minimum(ep, DEEPEP_NVL_PEERS)
    rdma_ranks = np.maximum(ep // DEEPEP_NVL_PEERS, 1)
    nvl = channels * nvl_ranks * recv * token
    # The RDMA buffer holds send and receive sides (the factor 2 of get_rdma_buffer_size_hint).
    rdma = np.where(rdma_ranks > 1, channels * rdma_ranks * DEEPEP_RDMA_RECV_TOKENS * token * 2, 0.0)
    return nvl + rdma


def outside_allocator_parts(model: ModelSpec, cluster: ClusterSpec, lay: Layouts) -> dict[str, np.ndarray]:
    """(N,) device bytes outside PyTorch's allocator, by part: the CUDA context; NCCL's buffers for each collective
    group and each point-to-point peer (pipeline neighbours, all-to-all peers of the alltoall dispatcher); and
    DeepEP's buffers where the deepep dispatchers move the tokens."""
    deepep = np.isin(lay.dispatch, [DISPATCHERS.index("deepep"), DISPATCHERS.index("deepep-fp8")])
    experts = (model.moe is not None) & (lay.ep > 1)
    alltoall_peers = np.where(experts & ~deepep, lay.ep * lay.etp - 1, 0)
    peers = 2.0 * (lay.pp > 1) + alltoall_peers
    return {
        "cuda_context": np.full(len(lay), CUDA_CONTEXT_GIB * 2**30),
        "nccl": nccl_bytes(_ring_groups(model, lay, cluster.gpus), peers),
        "deepep": (np.where(experts & deepep, deepep_bytes(model.hidden, lay.ep), 0.0) if (experts & deepep).any()
                   else np.zeros(len(lay))),
    }


def outside_allocator_bytes(model: ModelSpec, cluster: ClusterSpec, lay: Layouts) -> np.ndarray:
    """(N,) device bytes outside PyTorch's allocator (the sum of `outside_allocator_parts`)."""
    return sum(outside_allocator_parts(model, cluster, lay).values())
