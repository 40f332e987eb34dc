"""Memory of one rank: model states, activations of the micro-batches in flight, and working buffers.

Model states (``reference/formulas.md`` §3.1-3.2): bf16 weights (2 B), fp32 main gradients (4 B, Megatron
with bf16: 18 B/param in all, not the ZeRO paper's 16 with fp16 gradients) and Adam's fp32 master, m and
v (12 B). ZeRO-1 (Megatron's distributed optimizer) shards the optimizer states, ZeRO-2 also the
gradients, ZeRO-3/FSDP also the weights, over the data-parallel group: cp·dp ranks for dense weights
(Megatron shards over DP×CP), the expert-DP group for experts, whose weights are split over ep·etp.

Activations per layer follow Korthikanti et al. 2022 (Table 2): the tensors each op saves for its
backward, in bytes, generalised to GQA/MLA, gated MLPs, MoE (formulas.md §3.4) and flash attention; see
`layer_activation_bytes`. The GPT case reproduces s·b·h·(34 + 5·a·s/h) and its TP, SP, selective and full
recompute variants exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.models.spec import Block, LayerKind, Shard
from parplan.planner.compute import gemm_shapes
from parplan.planner.context import ACT_BYTES, RC_FULL, RC_MODULES, RC_OP_SAC, RC_SELECTIVE, Ctx
from parplan.planner.recompute import RECOMPUTED
from parplan.stacks.spec import RECOMPUTE_KINDS

WEIGHT_BYTES = 2
MAIN_GRAD_BYTES = 4
OPTIMIZER_BYTES = 12
FP8_WEIGHT_CACHE_BYTES = 2
"""Transformer Engine keeps an fp8 copy of each linear weight and its transpose for the whole step
(is_first_microbatch caching): 2 B per linear parameter under fp8."""
FP8_ACTIVATION_BYTES = 1
"""Under fp8 GEMMs a linear layer saves its fp8-cast input for the weight-gradient GEMM instead of the bf16
tensor (Transformer Engine's fp8 Linear/GroupedLinear; DeepSeek-V3 §3.3 "we cache the activations in FP8
for the backward pass of the Linear operator"); norm inputs, activation-function inputs, attention Q/K/V
and the router input stay bf16."""
TOKEN_ID_BYTES = 8
"""Megatron keeps int64 token ids per micro-batch in flight on the first stage (theoretical_memory_usage)."""
LOGIT_BYTES = 6
"""bf16 logits plus the fp32 softmax the vocab-parallel cross entropy keeps for backward."""
CONTEXT_GIB = 1.5
"""CUDA context, cuBLAS workspaces and NCCL buffers outside PyTorch's allocator (formulas.md §3.8:
300 MiB to 2 GiB; reserve 1-2 GiB)."""
ALLOCATOR_HEADROOM = 0.05
"""Fragmentation allowance on top of the peak allocated bytes (formulas.md §3.8: usable ≈ 0.90-0.95 HBM)."""


def model_state_bytes(params: np.ndarray, shard: np.ndarray, zero: np.ndarray,
                      grad_bytes: float = MAIN_GRAD_BYTES, grads_sharded: np.ndarray | bool = True,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, gradients, optimizer) bytes per rank for `params` held by the rank, sharded `shard` ways
    at ZeRO stage `zero` (ZeRO paper §5: P_os, P_os+g, P_os+g+p). `grads_sharded` False keeps full
    gradients at ZeRO-2/3 (a pipeline accumulates them unsharded until its last micro-batch)."""
    weights = params * WEIGHT_BYTES / np.where(zero >= 3, shard, 1)
    grads = params * grad_bytes / np.where((zero >= 2) & grads_sharded, shard, 1)
    optim = params * OPTIMIZER_BYTES / np.where(zero >= 1, shard, 1)
    return weights, grads, optim


def _split(ctx: Ctx, lin) -> np.ndarray:
    """How many ranks share one copy of a linear layer's weight."""
    if lin.block is Block.EXPERTS:
        return (ctx.e * ctx.et).astype(float)
    if lin.shard is Shard.REPLICATED:
        return np.ones(len(ctx.lay))
    return ctx.t.astype(float)


def layer_params(ctx: Ctx, kind: LayerKind) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parameters of one layer on one rank: (dense, expert, linear-only) after TP/EP/ETP splits."""
    dense = np.full(len(ctx.lay), float(ctx.model.layer_norm_params(kind)))
    expert = np.zeros(len(ctx.lay))
    linear = np.zeros(len(ctx.lay))
    for lin in ctx.model.layer_linears(kind):
        share = lin.params / _split(ctx, lin)
        if lin.block is Block.EXPERTS:
            # Redundant EPLB slots are full trainable copies (weights, gradients, optimizer states).
            share = share * (lin.instances + ctx.redundant) / lin.instances
            expert = expert + share
        else:
            dense = dense + share
        linear = linear + share
    return dense, expert, linear


def embedding_params(ctx: Ctx) -> np.ndarray:
    """Input embedding on the first stage: vocab-parallel over tp, plus learned positions."""
    m = ctx.model
    pos = m.max_position * m.hidden if m.position == "learned" else 0
    return ctx.vocab_padded * m.hidden / ctx.t + pos + (m.norm_params_per_norm if m.embedding_norm else 0)


def head_params(ctx: Ctx) -> np.ndarray:
    """Final norm and LM head on the last stage; a tied head is a second copy there when pp > 1
    (Megatron keeps word embeddings on both ends and all-reduces their gradients)."""
    m = ctx.model
    head = ctx.vocab_padded * m.hidden / ctx.t
    tied_same_rank = m.tied_embeddings & (ctx.p == 1)
    return np.where(tied_same_rank, 0.0, head) + m.norm_params_per_norm


def mtp_params(ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters of the MTP layers, held with the head."""
    m = ctx.model
    if not m.mtp_layers:
        zero = np.zeros(len(ctx.lay))
        return zero, zero
    dense, expert, _ = layer_params(ctx, m.mtp_layer_kind)
    own = 3 * m.norm_params_per_norm + sum(lin.params for lin in m.mtp_linears())
    return m.mtp_layers * (dense + own), m.mtp_layers * expert


def layer_activation_bytes(ctx: Ctx, kind: LayerKind, recompute: np.ndarray | None = None) -> np.ndarray:
    """Bytes one layer keeps for backward per micro-batch on one rank, averaged over the layers: the layouts'
    recompute setting on a fraction `recompute_blocks` of them, nothing recomputed on the others; or
    `recompute` (codes of RECOMPUTE_KINDS) on every layer (the working set of a fully recomputed layer is its
    activations without recompute)."""
    if recompute is not None:
        return _activation_bytes(ctx, kind, recompute)
    own = _activation_bytes(ctx, kind, ctx.recompute)
    if (ctx.recompute_blocks >= 1.0).all():
        return own
    kept = _activation_bytes(ctx, kind, np.zeros_like(ctx.recompute))
    return ctx.recompute_blocks * own + (1.0 - ctx.recompute_blocks) * kept


def _activation_bytes(ctx: Ctx, kind: LayerKind, rc: np.ndarray) -> np.ndarray:
    """Bytes one layer under recompute kind `rc` keeps for backward per micro-batch on one rank (Korthikanti
    2022 accounting). Module recompute keeps each norm's input but not its output (the next
    GEMM's input), the expert activation's input but not its output, and MLA's latents but not the
    up-projected heads. GEMM inputs take FP8_ACTIVATION_BYTES under fp8.
    """
    m = ctx.model
    mods = rc == RC_MODULES
    kept = np.where(mods, 0.0, 1.0)  # tensors module recompute rebuilds in backward
    a = m.attention
    h, t = m.hidden, ctx.t
    tr, tok = ctx.tokens_sp, ctx.tokens
    two = ACT_BYTES
    gin = np.where(ctx.fp8, FP8_ACTIVATION_BYTES, ACT_BYTES)  # a saved GEMM input
    drop = 1.0 if m.dropout else 0.0
    heads = a.heads / t
    # attention block: norm input, input of the first projection (kept sequence-sharded under SP)
    attn = (two + kept * gin) * tr * h + drop * tr * h
    if a.mla:
        ml = a.mla
        # latents before their norms, and after them (the up-projections' inputs; the rope key goes to RoPE)
        latents = (two * (ml.q_lora_rank + ml.kv_lora_rank + 2 * ml.qk_rope_head_dim)
                   + gin * (ml.q_lora_rank + ml.kv_lora_rank))
        attn = attn + tok * (latents + kept * two * heads * (2 * a.qk_head_dim + a.v_head_dim))
    else:
        attn = attn + two * tok * (heads + 2 * a.kv_heads / t) * a.head_dim  # Q, K, V
    attn = attn + gin * tok * heads * a.v_head_dim  # attention output = out-projection input
    # attention core: flash keeps the fp32 log-sum-exp; unfused keeps softmax (2 B), dropout mask (1 B) and
    # dropout output (2 B) per score: Korthikanti's 5·a·s²·b. Selective recompute drops both.
    scores = ctx.b * heads * ctx.s * ctx.s / ctx.c
    core = np.where(ctx.flash, 4.0 * tok * heads, scores * (two + 3.0 * drop))
    attn = attn + np.where((rc == RC_SELECTIVE) | mods, 0.0, core)
    # MLP block: norm input, first GEMM input, activation input(s), second GEMM input
    up = 2 if m.mlp.gated else 1
    if kind is LayerKind.DENSE:
        mlp = (two + kept * gin) * tr * h + tok * (two * up + gin) * m.mlp.ffn / t + drop * tr * h
    else:
        moe = m.moe
        assert moe is not None
        tm = ctx.tokens_moe
        copies = tm * moe.top_k * ctx.straggler  # the busiest EP rank keeps the most routed tokens
        mlp = (two * tr * h + kept * two * tm * h + 4.0 * tm * moe.experts  # norm in, out, fp32 router probs
               + gin * copies * ctx.et * h  # permuted tokens (gathered over ETP)
               + copies * (two * up + kept * gin) * moe.expert_ffn  # expert activation inputs, down-proj input
               # The routing weights multiply the activation output (Megatron's TEGroupedMLP weighted SwiGLU;
               # DeepSeek-V3 §3.3), which keeps one fp32 weight per copy instead of every expert output.
               + 4.0 * copies)
        if moe.shared_experts:
            mlp = mlp + tok * (two * up + gin) * moe.shared_experts * moe.shared_ffn / t
    full = attn + mlp
    out = np.where(rc == RC_FULL, two * tr * h, full)
    for code in np.unique(rc[rc >= RC_OP_SAC]):
        out = np.where(rc == code, _saved_outputs_bytes(ctx, kind, RECOMPUTE_KINDS[int(code)]), out)
    return out


def _saved_outputs_bytes(ctx: Ctx, kind: LayerKind, name: str) -> np.ndarray:
    """Bytes a layer keeps under a kind that saves chosen op outputs and recomputes the rest (torchtitan's
    per-op SAC, MaxText's remat policies; recompute.RECOMPUTED): the layer's input, the output of every
    linear it does not recompute (column-parallel outputs split over TP, row-parallel ones on the
    sequence-parallel shard), and the attention output with its fp32 log-sum-exp where the attention core is
    not recomputed. What the recomputation rebuilds in backward is transient."""
    m = ctx.model
    what = RECOMPUTED[name]
    out = ACT_BYTES * ctx.tokens_sp * m.hidden
    for fp8 in (False, True):
        share = what.linears(m, kind, fp8)
        kept = 0.0
        for lin, rows, n, _, count in gemm_shapes(ctx, kind):
            width_tokens = rows * n * count  # output elements of this linear on this rank
            kept = kept + (1.0 - share(lin)) * width_tokens
        out = out + np.where(ctx.fp8 == fp8, ACT_BYTES * kept, 0.0)
    if not what.attention:
        a = m.attention
        out = out + ctx.tokens * a.heads / ctx.t * (ACT_BYTES * a.v_head_dim + 4.0)
    return out


def mtp_activation_bytes(ctx: Ctx, dense_layer: np.ndarray, moe_layer: np.ndarray) -> np.ndarray:
    """Activations of the MTP modules on the last stage per micro-batch: each a transformer layer of the
    model's MTP layer kind plus its two norms and concatenated 2h input (4 bf16 copies of the hidden state)."""
    m = ctx.model
    layer = moe_layer if m.mtp_layer_kind is LayerKind.MOE else dense_layer
    return m.mtp_layers * (layer + 4 * ACT_BYTES * ctx.tokens_sp * m.hidden)


def token_id_bytes(ctx: Ctx) -> np.ndarray:
    """Token ids of one micro-batch kept on the first stage (TOKEN_ID_BYTES each)."""
    return TOKEN_ID_BYTES * ctx.b * ctx.s / ctx.c


def buffer_bytes(ctx: Ctx, largest_layer: np.ndarray, linear_params: np.ndarray) -> np.ndarray:
    """(N, K) buffers held across the step: ZeRO-3 gathers one layer's bf16 weights and their gradient,
    double-buffered for prefetch (4 × 2 B per parameter of the largest layer); fp8 training caches each
    linear weight in fp8 (FP8_WEIGHT_CACHE_BYTES)."""
    zero3 = np.where(ctx.lay.zero == 3, 2 * (2 * WEIGHT_BYTES) * largest_layer, 0.0)
    return zero3[:, None] + np.where(ctx.fp8[:, None], FP8_WEIGHT_CACHE_BYTES * linear_params, 0.0)


def transient_bytes(ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
    """Short-lived peak on top of stored activations: (logits, held by the head rank only; working set of
    every rank: a fully recomputed layer's activations during its backward and the gradient of the widest
    activation)."""
    m = ctx.model
    logits = LOGIT_BYTES * ctx.tokens * ctx.vocab_padded / ctx.t * (1 + m.mtp_layers)
    kind = LayerKind.MOE if m.moe_layer_count else LayerKind.DENSE
    recomputed = np.where(ctx.recompute == RC_FULL,
                          layer_activation_bytes(ctx, kind, recompute=np.zeros_like(ctx.recompute)), 0.0)
    width = max(m.mlp.ffn * (2 if m.mlp.gated else 1), m.hidden)
    grad_buffer = ACT_BYTES * ctx.tokens * width / ctx.t
    return logits, recomputed + grad_buffer


@dataclass(frozen=True, slots=True)
class RankMemory:
    """Bytes per rank, by component."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    buffers: np.ndarray
    """ZeRO-3 gather buffers, fp8 weight caches and transient working memory."""

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers

    def as_gib(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) / 2**30
                for name in ("weights", "gradients", "optimizer", "activations", "buffers")}


def required_gib(peak_allocated_gib: np.ndarray) -> np.ndarray:
    """GPU memory a run needs for a given peak of allocated bytes (allocator headroom + CUDA context)."""
    return peak_allocated_gib * (1 + ALLOCATOR_HEADROOM) + CONTEXT_GIB
