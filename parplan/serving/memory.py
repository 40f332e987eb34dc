"""Memory per GPU of a serving worker: weights, activations and workspace, CUDA context, and the KV cache the
rest holds, hence the largest batch an attention rank can run.

Weights follow the layout: attention and dense MLP split over tp (replicated down-projections of MLA whole),
routed experts over moe_ep (plus redundant replicas) with each expert split over moe_tp, the vocabulary over tp,
layers over pp. How much of the remainder becomes KV cache is engine policy (engines.yaml `memory`): vLLM gives
a fraction of the whole GPU to weights + activations + KV, TensorRT-LLM a fraction of what is free after
weights and activations, SGLang everything but a reserve (by its rule, or the rest of --mem-fraction-static).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.hardware.efficiency import DTYPE_BYTES
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import Block, LayerKind, Linear, ModelSpec, Shard
from parplan.planner.device import CUDA_CONTEXT_GIB, nccl_bytes
from parplan.serving.engines import GIB, Engine
from parplan.serving.kvcache import gpu_sequence_bytes
from parplan.serving.layout import PoolArrays
from parplan.serving.spec import Precision

NORM_BYTES = 2.0
"""Norms, biases, routers and embeddings stay in bf16 in every quantised checkpoint (modules_to_not_convert
of the FP8/NVFP4 configs in data/models/hub)."""

ACTIVATION_TENSORS = 4.0
"""Hidden-width bf16 tensors a forward step keeps alive per token (residual, norm output, attention output,
projection input), besides the widest MLP intermediate: an estimate of the engines' profiled peak."""


def _shard(lin: Linear, tp: np.ndarray) -> np.ndarray:
    return np.where(lin.shard is Shard.REPLICATED, 1.0, 1.0 / tp)


def _linear_bytes(lin: Linear, dtype: str, tp: np.ndarray) -> np.ndarray:
    weight = lin.d_in * lin.d_out * lin.instances * DTYPE_BYTES[dtype]
    bias = (lin.d_out * lin.instances * NORM_BYTES) if lin.bias else 0.0
    return (weight + bias) * _shard(lin, tp)


@dataclass(frozen=True, slots=True)
class WeightBytes:
    """Bytes of weights on one GPU, by part (arrays over layouts)."""

    attention: np.ndarray
    dense_mlp: np.ndarray
    experts: np.ndarray
    """Routed experts (with redundant replicas), routers and shared experts."""
    embeddings: np.ndarray
    other: np.ndarray
    """Norms and other small parameters."""

    @property
    def total(self) -> np.ndarray:
        return self.attention + self.dense_mlp + self.experts + self.embeddings + self.other


def weight_bytes(model: ModelSpec, precision: Precision, lay: PoolArrays, *, mtp: bool = False) -> WeightBytes:
    """Weights one GPU of each layout holds (average pipeline stage; the MTP layers when speculative decoding
    uses them)."""
    tp, pp = lay.tp, lay.pp
    g = precision.gemm
    extra_layers = model.mtp_layers if mtp else 0
    soft = (model.softmax_layers + extra_layers) / pp
    attention = soft * sum(_linear_bytes(x, g, tp) for x in model.attention_linears())
    if model.attention.linear_layers:
        attention = attention + model.attention.linear_layers / pp * sum(
            _linear_bytes(x, g, tp) for x in model.linear_attention_linears())
    dense_mlp = model.dense_layers / pp * sum(_linear_bytes(x, g, tp) for x in model.mlp_linears(LayerKind.DENSE))
    experts = np.zeros_like(tp)
    moe = model.moe
    if moe is not None:
        per_layer = np.zeros_like(tp)
        for lin in model.mlp_linears(LayerKind.MOE):
            if lin.block is Block.EXPERTS:
                per_expert = lin.d_in * lin.d_out * DTYPE_BYTES[precision.moe] / lay.moe_tp
                per_layer = per_layer + per_expert * (moe.experts + lay.redundant) / lay.moe_ep
            elif lin.block is Block.ROUTER:
                per_layer = per_layer + lin.d_in * lin.d_out * NORM_BYTES
            else:
                per_layer = per_layer + _linear_bytes(lin, g, tp)
        experts = (model.moe_layer_count + (extra_layers if model.mtp_layer_kind is LayerKind.MOE else 0)) / pp * (
            per_layer)
    if extra_layers and model.mtp_layer_kind is LayerKind.DENSE:
        dense_mlp = dense_mlp + extra_layers / pp * sum(
            _linear_bytes(x, g, tp) for x in model.mlp_linears(LayerKind.DENSE))
    table = model.vocab * model.hidden * NORM_BYTES / tp
    # One stage holds the embedding, another the LM head; without pipelining both sit on every GPU.
    embeddings = np.where(pp > 1, 1.0, 1.0 if model.tied_embeddings else 2.0) * table
    other = (model.layers / pp) * model.layer_norm_params(LayerKind.DENSE) * NORM_BYTES + np.zeros_like(tp)
    return WeightBytes(attention=attention, dense_mlp=dense_mlp, experts=experts, embeddings=embeddings,
                       other=other)


def activation_bytes(model: ModelSpec, lay: PoolArrays, chunk_tokens: float) -> np.ndarray:
    """Peak activation and workspace bytes of a step of `chunk_tokens` tokens per attention rank: a few
    hidden-width tensors plus the widest MLP intermediate (the dense MLP's split over tp, or the expert inputs
    routed to this GPU), in bf16."""
    tokens = float(chunk_tokens)
    dense = 3.0 * model.mlp.ffn / lay.tp if model.dense_layers else np.zeros_like(lay.tp)
    widest = dense
    if model.moe is not None:
        routed = tokens * lay.dp * model.moe.top_k / lay.moe_ep  # token copies this GPU's experts receive
        widest = np.maximum(dense, routed / tokens * (model.hidden + 3.0 * model.moe.expert_ffn / lay.moe_tp))
    return tokens * NORM_BYTES * (ACTIVATION_TENSORS * model.hidden + widest)


@dataclass(frozen=True, slots=True)
class ServingMemory:
    """Memory of one GPU of each layout, GiB, and the KV cache it leaves."""

    hbm_gib: float
    weights: WeightBytes
    activations_gib: np.ndarray
    reserved_gib: np.ndarray
    """What the engine keeps back besides weights and activations (CUDA graphs, allocator, NCCL and DeepEP
    buffers, the CUDA context)."""
    kv_gib: np.ndarray
    """KV cache per GPU."""
    sequence_gib: np.ndarray
    """KV cache one resident request takes per GPU (whole pages)."""
    peak_gib: np.ndarray
    """KV cache the longest request takes per GPU at its last token (whole pages)."""
    max_batch: np.ndarray
    """Requests one attention rank can hold."""

    @property
    def weights_gib(self) -> np.ndarray:
        return self.weights.total / GIB

    @property
    def fits(self) -> np.ndarray:
        """Whether the KV cache holds a resident request and the longest request at its last token (an engine
        refuses to start, or cannot finish a request, otherwise)."""
        return (self.max_batch >= 1) & (self.kv_gib >= self.peak_gib)


def sglang_reserve_gib(engine: Engine, hbm_gib: float, chunk_tokens: float, lay: PoolArrays) -> np.ndarray:
    """What SGLang keeps out of its static memory pool (server_args.py @469c63e, mem_fraction_static =
    (gpu_mem − reserved_mem) / gpu_mem), MB: 512 of metadata, 1.5 per prefill token of the chunk (at least
    2048), 2 per CUDA-graph batch, 1024 per 8 GPUs of tp·dp·pp, under DP attention 3 more per graph batch and
    rank (4.5 above a graph batch of 300), and at least engine.reserve_gib on GPUs above 60 GB. The graph batch
    is the engine's default for the GPU and worker (--cuda-graph-max-bs, Engine.graph_batch), at most the pool's
    batch, and that batch where the launch captures up to it (Engine.graphs_to_batch, as serve plan emits)."""
    graphs = np.minimum(engine.graph_batch(hbm_gib, lay.tp * lay.dp, lay.batch), lay.batch)
    # SGLang's tp_size counts every GPU of a stage, its attention-DP ranks included (--tp-size = tp·dp here)
    mb = 512.0 + 1.5 * max(chunk_tokens, 2048.0) + 2.0 * graphs + lay.tp * lay.dp * lay.pp / 8.0 * 1024.0
    mb = mb + np.where(lay.dp > 1, graphs * lay.dp * np.where(graphs > 300, 4.5, 3.0), 0.0)
    if hbm_gib * GIB > 60e9:
        mb = np.maximum(mb, engine.reserve_gib * 1024.0)
    return mb / 1024.0


def resident_tokens(engine: Engine, isl: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """Tokens of KV cache a resident request holds for admission purposes: isl + osl/2 on average where pages
    are taken as the sequence grows, its whole isl + osl where the engine reserves them at admission."""
    return isl + osl / 2.0 if engine.kv_on_demand else isl + osl


def serving_memory(model: ModelSpec, cluster: ClusterSpec, engine: Engine, precision: Precision, lay: PoolArrays,
                   chunk_tokens: float, seq_tokens: np.ndarray | float, *,
                   peak_tokens: np.ndarray | float | None = None, mtp: bool = False) -> ServingMemory:
    """Weights, activations, engine reserve and KV cache per GPU; the batch the KV cache holds at
    `seq_tokens` per request (resident_tokens), and whether it holds the longest request's `peak_tokens` (its
    input and output; default `seq_tokens`)."""
    hbm = cluster.gpu.hbm_gib
    weights = weight_bytes(model, precision, lay, mtp=mtp)
    act = activation_bytes(model, lay, chunk_tokens) / GIB
    w = weights.total / GIB
    # Outside the allocator: the CUDA context and NCCL's buffers of the TP group and the pipeline neighbours.
    context = CUDA_CONTEXT_GIB + nccl_bytes(lay.tp > 1, 2.0 * (lay.pp > 1)) / GIB
    if engine.memory == "total":
        kv = engine.memory_fraction * hbm - w - act - context
        reserved = context + (1 - engine.memory_fraction) * hbm
    elif engine.memory == "free":
        free = hbm - w - act - context
        kv = engine.memory_fraction * free
        reserved = context + (1 - engine.memory_fraction) * np.maximum(free, 0.0)
    else:  # SGLang keeps a reserve out of its static pool, by its rule or as the launch's fraction says
        keep = ((1.0 - engine.memory_fraction) * hbm if engine.memory == "static"
                else sglang_reserve_gib(engine, hbm, chunk_tokens, lay))
        reserved = np.maximum(keep, act + context)
        act = np.zeros_like(act)  # the reserve holds the activations
        kv = hbm - w - reserved
    kv = np.maximum(kv, 0.0)
    seq = gpu_sequence_bytes(model, precision.kv_cache, seq_tokens, lay.tp, lay.pp, engine.kv_block_tokens) / GIB
    peak = seq if peak_tokens is None else gpu_sequence_bytes(model, precision.kv_cache, peak_tokens, lay.tp, lay.pp,
                                                              engine.kv_block_tokens) / GIB
    max_batch = np.floor(kv / seq)
    return ServingMemory(hbm_gib=hbm, weights=weights, activations_gib=act, reserved_gib=reserved, kv_gib=kv,
                         sequence_gib=seq, peak_gib=np.broadcast_to(peak, np.shape(kv)), max_batch=max_batch)
