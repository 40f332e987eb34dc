"""Compute time of one transformer layer, the LM head and the optimizer, per micro-batch per rank.

GEMMs come from the model's own list of linear layers (`ModelSpec.layer_linears`) at the shapes they
have after the TP/ETP/EP splits, each timed with the GPU's GEMM curve (hardware.efficiency.gemm_time):
forward Y = X·W (M×K)·(K×N), backward data-grad dX = dY·Wᵀ and weight-grad dW = Xᵀ·dY.
Attention: flash attention at the GPU's measured efficiency (FLOPs: forward 2·(d_qk + d_v) per key per
head, backward 2.5× forward as FlashAttention counts it, recomputing the scores), or the unfused
kernels of Megatron before 2023 (batched GEMMs plus a memory-bound softmax over the s×s scores).
Element-wise work (norms, residual adds, activation functions, RoPE, fp8 casts, MoE permutation) is
HBM traffic; its byte counts per token are listed where they are computed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parplan.hardware.efficiency import (
    attention_forward_flops,
    flash_attention_time,
    gemm_time,
    memory_bound_time,
)
from parplan.models.spec import Block, LayerKind, Linear, Shard
from parplan.planner.context import ACT_BYTES, Ctx

BACKWARD_ELEMENTWISE = 2.0
"""Backward of an element-wise op reads its saved input and the incoming gradient and writes a gradient:
about twice the forward traffic (hand count for norm, add and activation kernels)."""

ELEMENTWISE_KERNELS = 12
"""Element-wise kernels in one layer's forward when they are fused (2 norms, 2 residual adds, activation,
RoPE, casts...); backward launches twice as many. Each costs at least GPUSpec.kernel_launch_us."""

EAGER_OPS: dict[str, tuple[float, float, int]] = {
    # (fused bytes per element, eager bytes per element, extra eager kernels), hand counts:
    # RMSNorm as PyTorch's composite rms_norm / nn.RMSNorm runs it: upcast (read 2, write 4), pow (4, 4),
    # mean (4), add eps and rsqrt (per row), scale (4, 4), weight (4, 4), downcast (4, 2) = 40 B in 8 kernels,
    # against one fused read and write (4 B).
    "norm": (4.0, 40.0, 7),
    # RoPE as complex multiplication (torchtitan apply_rotary_emb, fms RotaryEmbedding): x.float() (2, 4),
    # complex multiply (4, 4), type_as (4, 2) = 20 B in 3 kernels per rotated tensor, against 4 B in one.
    "rope": (4.0, 20.0, 2),
    # SwiGLU as F.silu(w1(x)) * w3(x): silu (2, 2) and mul (2 + 2, 2) = 10 B in 2 kernels per hidden element,
    # against one fused kernel reading gate and up and writing the product (6 B).
    "activation": (6.0, 10.0, 1),
}
"""Element-wise ops whose eager PyTorch form costs more than a fused kernel (stacks.spec.FUSED_OPS). A
LayerNorm is one native kernel even in eager mode and a plain (GeLU) activation one kernel, so only RMSNorm
and the gated activation differ."""

ADAM_BYTES_PER_PARAM = 38
"""Optimizer step traffic per parameter this rank updates: the gradient-norm pass reads the fp32 grads
(4 B); fused Adam reads grad, master, m, v (16 B) and writes master, m, v (12 B); a separate copy reads the
fp32 master and writes the bf16 model weight (6 B). Memory-bound (Megatron MixedPrecisionOptimizer.step:
clip_grad_norm, optimizer.step, _copy_main_params_to_model_params)."""

GRAD_ZERO_BYTES_PER_PARAM = 4
"""Each step starts by zeroing the fp32 gradient buffer (Megatron DDP zero_grad_buffer: a memset of the
whole buffer, sharded only where ZeRO-2/3 reduce-scatter every micro-batch, i.e. without a pipeline)."""

CROSS_ENTROPY_BYTES = {True: ((10, 8), (3, 2)), False: ((38, 14), (6, 3))}
"""Forward and backward (bytes per logit, kernels) of the vocab-parallel cross entropy, fused (a stack with
"loss" in kernels.fused_ops, or a compiled loss) or not. Fused: bf16 logits read (2), fp32 softmax written and
read back (8); backward reads the softmax and writes the bf16 gradient. Unfused, hand count of Megatron-Core's
VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py), one eager op per pass over the
fp32 logits: forward .float() (read 2, write 4), max (4), subtract the max in place (4, 4), exp in place
(4, 4), sum (4), divide by the sum in place (4, 4) = 38 B in 6 kernels; backward multiplies the saved softmax
by the loss gradient in place (4, 4) and casts it back to bf16 (4, 2) = 14 B, plus the one-hot subtraction
(one element per token). PyTorch's F.cross_entropy on fp32 logits makes the same number of passes in other
places (log_softmax 3 reads and a write forward, its backward 3 passes and a zero-filled one-hot gradient)."""


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Seconds per micro-batch on one rank for one layer (arrays over layouts)."""

    gemm_f: np.ndarray
    gemm_b: np.ndarray
    """Backward GEMMs: data-grad plus weight-grad."""
    gemm_w: np.ndarray
    """The weight-grad part of gemm_b (what zero-bubble schedules defer)."""
    attn_f: np.ndarray
    attn_b: np.ndarray
    elem_f: np.ndarray
    elem_b: np.ndarray
    launch_f: np.ndarray | float = 0.0
    """Seconds the GPU waits for the host to launch the forward's kernels beyond its own work on them
    (launch_time)."""
    launch_b: np.ndarray | float = 0.0

    @property
    def forward(self) -> np.ndarray:
        return self.gemm_f + self.attn_f + self.elem_f + self.launch_f

    @property
    def backward(self) -> np.ndarray:
        return self.gemm_b + self.attn_b + self.elem_b + self.launch_b


def compute_scale(ctx: Ctx) -> float:
    """Throughput of the GEMM and attention kernels relative to the GPU's measured curves: the cluster's
    calibrated scale times the stack's (StackSpec.kernels.compute_scale)."""
    return ctx.cluster.calibration.compute_scale * ctx.stack.kernels.compute_scale


def gemm_shapes(ctx: Ctx, kind: LayerKind):
    """(linear, M, N, K, count) per linear layer of a layer kind, after the parallel splits."""
    model, t, et, e = ctx.model, ctx.t, ctx.et, ctx.e
    out = []
    for lin in model.layer_linears(kind):
        count: np.ndarray | float = 1.0
        if lin.block is Block.EXPERTS:
            # Each of the (E + R)/ep local expert slots (R redundant EPLB copies) gets ep·etp·T·k/(E + R)
            # tokens on average (the ETP group gathers its tokens) and holds 1/etp of the expert's width; the
            # busiest EP rank, which every MoE layer waits for, gets `straggler` times the average.
            slots = lin.instances + ctx.redundant
            m = ctx.tokens_moe * et * e * lin.tokens_fraction * lin.instances / slots * ctx.straggler
            count = slots / e
            n, k = (lin.d_out / et, lin.d_in) if lin.shard is Shard.COLUMN else (lin.d_out, lin.d_in / et)
        elif lin.shard is Shard.REPLICATED:
            # Router, shared-expert gate and MLA down-projections run on the sequence-parallel shard.
            m = ctx.tokens_moe if lin.block in (Block.ROUTER, Block.SHARED_EXPERTS) else ctx.tokens_sp
            n, k = lin.d_out, lin.d_in
        elif lin.shard is Shard.COLUMN:
            m, n, k = ctx.tokens, lin.d_out / t, lin.d_in
        else:
            m, n, k = ctx.tokens, lin.d_out, lin.d_in / t
        out.append((lin, m, n, k, count))
    return out


def _gemm(ctx: Ctx, m, n, k, count, fp8_allowed: bool = True) -> np.ndarray:
    """GEMM time in the layout's precision (fp8 where the layout asks for it and the GPU has it)."""
    gpu = ctx.cluster.gpu
    bf16 = gemm_time(gpu, m, n, k, "bf16", count)
    if not (fp8_allowed and gpu.supports_fp8 and ctx.fp8.any()):
        return bf16
    return np.where(ctx.fp8, gemm_time(gpu, m, n, k, "fp8", count), bf16)


GRAD_ACCUMULATION_BYTES = 8
"""Every micro-batch's weight gradient is added into the fp32 main-grad buffer (Megatron's gradient
accumulation fusion: the weight-grad GEMM reads and writes fp32, 8 B per weight element)."""

FP8_CAST_BYTES = 5
"""Per element of an fp8 GEMM operand: read bf16 (2 B), write the fp8 copy (1 B) and its transpose for the
other GEMM of the pair (read 1 B, write 1 B; Hopper fp8 GEMMs take one layout only)."""

FP8_WEIGHT_CAST_BYTES = (5.0, 3.0)
"""(forward, backward) bytes per linear weight element of casting a bf16 weight to fp8 with a per-tensor scale:
the amax pass reads it (2 B) and the forward cast reads it and writes the fp8 copy (3 B); backward casts it again
into the transposed layout (3 B). torchao's roofline model counts these kernels (torchao/testing/training/
roofline_utils.py get_tensor_memory_traffic_ovhd_s, tensorwise, tensor_role 'weight')."""


@dataclass(frozen=True, slots=True)
class GemmWork:
    """The GEMMs of some of a layer's linears, one micro-batch, one rank."""

    forward: np.ndarray
    """Seconds of the forward GEMMs."""
    backward: np.ndarray
    """Seconds of the backward GEMMs: data-grad plus weight-grad."""
    wgrad: np.ndarray
    """The weight-grad part of `backward` (what zero-bubble schedules defer)."""
    flops: np.ndarray
    """Forward FLOPs, 2·M·N·K per GEMM."""
    fp8_inputs: np.ndarray
    """Elements of the activation (forward) and gradient (backward) operands cast to fp8 where fp8 is on."""
    weights: np.ndarray
    """Weight elements (what each micro-batch's weight gradient is accumulated into)."""
    fp8_weights: np.ndarray
    """Elements of the weights the fp8 GEMMs take (every linear but the router)."""


def gemm_work(ctx: Ctx, kind: LayerKind, keep: Callable[[Linear], float] = lambda lin: 1.0) -> GemmWork:
    """Forward, data-grad and weight-grad GEMMs of the linears of a layer of `kind`, each weighted by `keep`
    (True/1 counts a linear whole, False/0 leaves it out, a fraction counts that share of its work)."""
    scale = compute_scale(ctx)
    fwd = bwd = wgrad = flops = fp8_inputs = weights = fp8_weights = 0.0
    for lin, m, n, k, count in gemm_shapes(ctx, kind):
        share = float(keep(lin))
        if not share:
            continue
        count = count * share
        # The router stays in bf16 under fp8 recipes (Megatron/TE quantise the expert and dense linears).
        quantised = lin.block is not Block.ROUTER
        f = _gemm(ctx, m, n, k, count, quantised)
        dg = _gemm(ctx, m, k, n, count, quantised)
        wg = _gemm(ctx, k, n, m, count, quantised)
        if quantised:
            fp8_inputs = fp8_inputs + m * (k + n) * count  # activation (fwd) and gradient (bwd) casts
            fp8_weights = fp8_weights + k * n * count
        fwd = fwd + f / scale
        bwd = bwd + (dg + wg) / scale
        wgrad = wgrad + wg / scale
        flops = flops + 2.0 * m * n * k * count
        weights = weights + k * n * count
    zero = np.zeros(len(ctx.lay))
    return GemmWork(*(zero + x for x in (fwd, bwd, wgrad, flops, fp8_inputs, weights, fp8_weights)))


DETERMINISTIC_FLASH_BACKWARD = 361.3 / 574.7
"""Throughput of a flash-attention backward that accumulates dQ in a fixed order (each key block waits its turn
on a semaphore instead of adding atomically), relative to the atomic one: FlashAttention-3 on H100, head dim
128, causal, 8k tokens, 574.7 TFLOP/s non-deterministic against 361.3 with the ordered accumulation
(Dao-AILab/flash-attention PR #1893 benchmark, 'naive det'; its later SPT schedule reaches 474.0). Deterministic
mode (StackSpec.kernels.deterministic) runs it: NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 in Transformer Engine,
flash-attn's deterministic=True. The unfused attention has no atomics and is unchanged."""


def _attention(ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of the attention core (QKᵀ, softmax, P·V) of one layer, averaged over
    full and sliding layers."""
    model, gpu = ctx.model, ctx.cluster.gpu
    a = model.attention
    heads = a.heads / ctx.t
    d_qk, d_v = a.qk_head_dim, a.v_head_dim
    share_sliding = a.sliding_layers / model.layers
    peak = gpu.peak_tflops["bf16"] * 1e12 * compute_scale(ctx)
    fwd = bwd = 0.0
    for share, sliding in ((1 - share_sliding, False), (share_sliding, True)):
        if share == 0:
            continue
        kv = np.array([model.attention_kv_tokens(float(x), sliding=sliding) for x in np.unique(ctx.s)])
        kv = kv[np.searchsorted(np.unique(ctx.s), ctx.s)]
        # Causal load balancing splits the work evenly over the cp ranks (Megatron context_parallel.rst).
        f_flops = attention_forward_flops(ctx.b, heads, ctx.s / ctx.c, kv, d_qk, d_v)
        block = ctx.s / ctx.c
        if sliding and a.sliding_window:
            block = np.minimum(block, a.sliding_window)
        flash_f, flash_b = flash_attention_time(gpu, f_flops, block, peak, ctx.stack.kernels.attention)
        if ctx.stack.kernels.deterministic:
            flash_b = flash_b / DETERMINISTIC_FLASH_BACKWARD
        # Unfused: the full s×s scores per head, batched GEMMs (bmm) plus a memory-bound softmax.
        count = ctx.b * heads
        s_q = ctx.s / ctx.c
        qk = gemm_time(gpu, s_q, ctx.s, d_qk, "bf16", count)
        pv = gemm_time(gpu, s_q, d_v, ctx.s, "bf16", count)
        bwd_gemms = (gemm_time(gpu, s_q, ctx.s, d_v, "bf16", count) + gemm_time(gpu, s_q, d_v, ctx.s, "bf16", count)
                     + gemm_time(gpu, s_q, d_qk, ctx.s, "bf16", count)
                     + gemm_time(gpu, ctx.s, d_qk, s_q, "bf16", count))
        scores = count * s_q * ctx.s
        # fused scale-mask-softmax reads and writes the scores (4 B); dropout adds read, write, mask (5 B);
        # backward: softmax grad reads probs and grad, writes grad (6 B), dropout grad 5 B.
        drop = 5.0 if model.dropout else 0.0
        soft_f = memory_bound_time(gpu, scores * (4.0 + drop), 2)
        soft_b = memory_bound_time(gpu, scores * (6.0 + drop), 2)
        unfused_f = (qk + pv) / compute_scale(ctx) + soft_f
        unfused_b = bwd_gemms / compute_scale(ctx) + soft_b
        fwd = fwd + share * np.where(ctx.flash, flash_f, unfused_f)
        bwd = bwd + share * np.where(ctx.flash, flash_b, unfused_b)
    return fwd, bwd


def _fused(ctx: Ctx, op: str) -> bool:
    """Whether op (of stacks.spec.FUSED_OPS) runs as a fused kernel in the stack: its own fused kernel,
    compilation, or a form that is one kernel even in eager mode (LayerNorm, a plain activation). Compiling the
    blocks leaves the loss eager unless the stack compiles it too (memory.loss_compiled) or compiles the whole
    program (XLA)."""
    native = {"norm": ctx.model.norm != "rmsnorm", "rope": False, "activation": not ctx.model.mlp.gated,
              "loss": False}[op]
    st = ctx.stack
    compiled = st.compiled and (op != "loss" or st.memory.loss_compiled or st.kernels.compile_scope == "program")
    return native or op in st.kernels.fused_ops or compiled


def _op_bytes(ctx: Ctx, op: str) -> float:
    """Bytes per element of an element-wise op as the stack runs it (EAGER_OPS)."""
    fused, eager, _ = EAGER_OPS[op]
    return fused if _fused(ctx, op) else eager


def _extra_kernels(ctx: Ctx) -> int:
    """Kernels one layer's forward launches beyond ELEMENTWISE_KERNELS for the ops it runs unfused (two norms,
    q and k rotated)."""
    times = {"norm": 2, "rope": 2 if ctx.model.position == "rope" else 0, "activation": 1}
    return sum(n * EAGER_OPS[op][2] for op, n in times.items() if not _fused(ctx, op))


def _norm_bytes(ctx: Ctx) -> np.ndarray:
    """The layer's two norms read and write their input (a fused norm 4 B per element each, an eager RMSNorm
    40 B: EAGER_OPS), on the SP shard."""
    return 2.0 * _op_bytes(ctx, "norm") * ctx.tokens_sp * ctx.model.hidden


def _activation_bytes(ctx: Ctx) -> float:
    """Bytes per hidden element of the MLP activation function: fused gated reads gate and up and writes one
    (6 B), eager gated 10 B (EAGER_OPS); plain reads and writes (4 B)."""
    return _op_bytes(ctx, "activation") if ctx.model.mlp.gated else 4.0


def _expert_activation_bytes(ctx: Ctx) -> np.ndarray:
    """The routed experts' activation function on the busiest EP rank, which handles `straggler` times the
    average token count."""
    moe = ctx.model.moe
    assert moe is not None
    return _activation_bytes(ctx) * ctx.tokens_moe * ctx.straggler * moe.top_k * moe.expert_ffn


def _elementwise_bytes(ctx: Ctx, kind: LayerKind, fp8_inputs: np.ndarray) -> np.ndarray:
    """Forward HBM bytes of the memory-bound kernels of one layer on one rank."""
    model = ctx.model
    h = model.hidden
    a = model.attention
    tr, tok = ctx.tokens_sp, ctx.tokens
    # 2 residual adds: read 2 inputs, write 1 (6 B/elem); dropout after each residual branch writes a
    # 1-byte mask and reads/writes its input (5 B/elem).
    nbytes = _norm_bytes(ctx) + tr * h * (12.0 + (10.0 if model.dropout else 0.0))
    q_w = a.heads * a.qk_head_dim / ctx.t
    k_w = (a.heads * a.qk_head_dim if a.mla else a.kv_heads * a.head_dim) / ctx.t
    if model.position == "rope":
        # MLA rotates only the decoupled RoPE part: qk_rope_head_dim of each query head and the one k_pe all heads
        # share (DeepSeek-V2 §2.1.3; Megatron multi_latent_attention.py applies rotary to q_pos_emb, k_pos_emb).
        rot_q, rot_k = (a.heads * a.mla.qk_rope_head_dim / ctx.t, a.mla.qk_rope_head_dim) if a.mla else (q_w, k_w)
        nbytes = nbytes + _op_bytes(ctx, "rope") * tok * (rot_q + rot_k)  # rotate q and k
    if a.qk_norm:
        nbytes = nbytes + 4.0 * tok * (q_w + k_w)
    act = _activation_bytes(ctx)
    if kind is LayerKind.DENSE:
        nbytes = nbytes + act * tok * model.mlp.ffn / ctx.t
    else:
        moe = model.moe
        assert moe is not None
        tm = ctx.tokens_moe * ctx.straggler
        nbytes = nbytes + _expert_activation_bytes(ctx)
        nbytes = nbytes + act * tok * moe.shared_experts * moe.shared_ffn / ctx.t
        # permute k copies (read + write), unpermute and weight them back into one token (read k, write 1),
        # router softmax/top-k in fp32 over the E scores.
        nbytes = nbytes + tm * h * ACT_BYTES * (2 * moe.top_k + moe.top_k + 1) + tm * moe.experts * 8.0
    # fp8 GEMM operands (activations forward, gradients backward: half each way) are cast from bf16.
    return nbytes + np.where(ctx.fp8, FP8_CAST_BYTES * fp8_inputs / 2, 0.0)


MLA_UP_PROJECTIONS = ("q_up", "kv_up")
"""The linears Megatron's mla_up_proj recompute re-runs (ModelSpec.layer_linears names)."""


def norm_recompute_time(ctx: Ctx, kind: LayerKind) -> np.ndarray:
    """The element-wise work Megatron's layernorm and moe_act recompute modules repeat in backward: the two
    norms (read + write, 4 B per element each) and the routed experts' activation function."""
    nbytes = _norm_bytes(ctx)
    kernels = 2
    if kind is LayerKind.MOE:
        nbytes = nbytes + _expert_activation_bytes(ctx)
        kernels += 1
    return memory_bound_time(ctx.cluster.gpu, nbytes, kernels)


def allocated_elements(ctx: Ctx, kind: LayerKind) -> tuple[np.ndarray, np.ndarray]:
    """Elements of the activation-sized tensors one layer allocates per micro-batch on one rank, forward and
    backward (hand count). Forward: each linear's output (M·N), the attention output, and the element-wise
    outputs: the two norms and the two residual adds (h per token on the SP shard), the rotated q and k, the
    activation function's output, and the MoE permutation's k copies and the unpermuted sum. Backward: each
    linear's data gradient (M·K), the attention's dq, dk and dv, and one gradient per element-wise output.
    Weight gradients accumulate into the preallocated main-grad buffer and allocate nothing."""
    model, a = ctx.model, ctx.model.attention
    fwd = bwd = 0.0
    for _, m, n, k, count in gemm_shapes(ctx, kind):
        fwd = fwd + m * n * count
        bwd = bwd + m * k * count
    heads, kv = a.heads / ctx.t, (a.heads if a.mla else a.kv_heads) / ctx.t
    fwd = fwd + ctx.tokens * heads * a.v_head_dim
    bwd = bwd + ctx.tokens * (heads * a.qk_head_dim + kv * (a.qk_head_dim + a.v_head_dim))
    elem = 4.0 * ctx.tokens_sp * model.hidden
    if model.position == "rope":
        elem = elem + ctx.tokens * (heads + kv) * a.qk_head_dim
    if kind is LayerKind.DENSE:
        elem = elem + ctx.tokens * model.mlp.ffn / ctx.t
    else:
        moe = model.moe
        assert moe is not None
        tm = ctx.tokens_moe * ctx.straggler
        elem = elem + tm * moe.top_k * moe.expert_ffn + ctx.tokens * moe.shared_experts * moe.shared_ffn / ctx.t
        elem = elem + tm * model.hidden * (moe.top_k + 1)
    return fwd + elem, bwd + elem


def fill_time(ctx: Ctx, kind: LayerKind) -> tuple[np.ndarray, np.ndarray]:
    """Seconds (forward, backward) a deterministic-mode stack (StackSpec.kernels.deterministic) spends filling
    the layer's new tensors before use: one bf16 write per allocated element, one fill kernel per tensor
    (about one per launched kernel, layer_kernels)."""
    zero = np.zeros(len(ctx.lay))
    if not ctx.stack.kernels.deterministic:
        return zero, zero
    fwd, bwd = allocated_elements(ctx, kind)
    kernels = layer_kernels(ctx, kind)
    gpu = ctx.cluster.gpu
    return (zero + memory_bound_time(gpu, ACT_BYTES * fwd, kernels),
            zero + memory_bound_time(gpu, ACT_BYTES * bwd, 2 * kernels))


def fp8_weight_casts(ctx: Ctx, fp8_weights: np.ndarray) -> np.ndarray:
    """Weight elements one micro-batch casts to fp8 in kernels of their own (FP8_WEIGHT_CAST_BYTES each): all of
    them where the stack casts at every use (StackSpec.memory.fp8_weight_cache_bytes 0: torchao Float8Linear,
    eager or compiled per block, casts the weight parameter outside the block's fused chain). None where the
    weights are fp8 already (the optimizer step casts its own shard), where the stack keeps the fp8 copies for the
    step (Transformer Engine casts on the first micro-batch only, is_first_microbatch: once per step, 8 B per
    weight against the 38 B per parameter of the optimizer step, ADAM_BYTES_PER_PARAM), or where one compiled
    program covers the step (XLA quantises the weight inside the GEMM's operand fusion: stacks/maxtext.yaml)."""
    st = ctx.stack
    if st.memory.fp8_params or st.memory.fp8_weight_cache_bytes > 0 or (
            st.compiled and st.kernels.compile_scope == "program"):
        return np.zeros(len(ctx.lay))
    return np.where(ctx.fp8, fp8_weights, 0.0)


def layer_time(ctx: Ctx, kind: LayerKind) -> LayerTime:
    """Forward/backward compute of one layer of `kind`, one micro-batch, one rank (no communication)."""
    gpu = ctx.cluster.gpu
    gemms = gemm_work(ctx, kind)
    attn_f, attn_b = _attention(ctx)
    elem = _elementwise_bytes(ctx, kind, gemms.fp8_inputs)
    casts = fp8_weight_casts(ctx, gemms.fp8_weights)
    kernels = ELEMENTWISE_KERNELS + _extra_kernels(ctx)
    fill_f, fill_b = fill_time(ctx, kind)
    elem_f = memory_bound_time(gpu, elem + FP8_WEIGHT_CAST_BYTES[0] * casts, kernels) + fill_f
    elem_b = memory_bound_time(gpu, BACKWARD_ELEMENTWISE * elem + GRAD_ACCUMULATION_BYTES * gemms.weights
                               + FP8_WEIGHT_CAST_BYTES[1] * casts, 2 * kernels) + fill_b
    launch_f, launch_b = launch_time(ctx, kind, gemms.forward + attn_f + elem_f, gemms.backward + attn_b + elem_b)
    return LayerTime(gemm_f=gemms.forward, gemm_b=gemms.backward, gemm_w=gemms.wgrad, attn_f=attn_f,
                     attn_b=attn_b, elem_f=elem_f, elem_b=elem_b, launch_f=launch_f, launch_b=launch_b)


FP8_CAST_KERNELS = 2
"""Kernels an fp8 GEMM adds for its activation operand: the amax/scale and the cast (with its transpose for the
other GEMM of the pair); the weights' casts are fp8_weight_casts."""

MOE_ROUTING_KERNELS = 8
"""Kernels of an MoE layer's routing beyond its GEMMs: router softmax/top-k, permute, the dispatch all-to-all,
unpermute with the routing weights, the combine all-to-all (Megatron's MoEAlltoAllTokenDispatcher)."""


def layer_kernels(ctx: Ctx, kind: LayerKind) -> np.ndarray:
    """Kernels one layer's forward launches: one GEMM per linear, and per local expert slot for the routed
    experts (Transformer Engine's GroupedLinear calls a GEMM per expert), each fp8 GEMM with its casts, the
    attention kernel and the element-wise and routing kernels; compiled, the element-wise chain between two
    GEMMs becomes one generated kernel."""
    gemms = np.zeros(len(ctx.lay))
    for lin in ctx.model.layer_linears(kind):
        calls = (lin.instances + ctx.redundant) / ctx.e if lin.block is Block.EXPERTS else 1.0
        gemms = gemms + calls * np.where(ctx.fp8 & (lin.block is not Block.ROUTER), 1 + FP8_CAST_KERNELS, 1)
    routing = MOE_ROUTING_KERNELS if kind is LayerKind.MOE else 0
    if ctx.stack.compiled:
        return 2 * gemms + 1 + routing
    return gemms + 1 + ELEMENTWISE_KERNELS + _extra_kernels(ctx) + routing


def launch_time(ctx: Ctx, kind: LayerKind, gpu_f: np.ndarray, gpu_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds (forward, backward) one layer's GPU waits for its kernel launches: the host issues each kernel
    in StackSpec.kernels.host_us_per_kernel (autograd launches about two per forward kernel), asynchronously
    ahead of the GPU, so only what exceeds the GPU's own time on them is exposed. CUDA graphs replay the
    layer's kernels without the host."""
    if ctx.stack.kernels.cuda_graphs:
        zero = np.zeros(len(ctx.lay))
        return zero, zero
    host_f = layer_kernels(ctx, kind) * ctx.stack.kernels.host_us_per_kernel * 1e-6
    return np.maximum(host_f - gpu_f, 0.0), np.maximum(2.0 * host_f - gpu_b, 0.0)


def head_time(ctx: Ctx) -> LayerTime:
    """LM head GEMM (vocab-parallel over tp) and the cross entropy on the last pipeline stage."""
    gpu = ctx.cluster.gpu
    scale = compute_scale(ctx)
    h, vp = ctx.model.hidden, ctx.vocab_padded / ctx.t
    m = ctx.tokens
    # Megatron keeps the output layer in bf16 under fp8 recipes.
    f = gemm_time(gpu, m, vp, h) / scale
    dg = gemm_time(gpu, m, h, vp) / scale
    wg = gemm_time(gpu, h, vp, m) / scale
    logits = m * vp
    zero = np.zeros_like(f)
    # Deterministic mode fills what the head allocates (fill_time): the bf16 logits and their fp32 softmax
    # forward, the logits' gradient and the hidden states' gradient backward.
    fill = 1.0 if ctx.stack.kernels.deterministic else 0.0
    (bytes_f, bytes_b), (kernels_f, kernels_b) = CROSS_ENTROPY_BYTES[_fused(ctx, "loss")]
    return LayerTime(gemm_f=f, gemm_b=dg + wg, gemm_w=wg, attn_f=zero, attn_b=zero,
                     elem_f=memory_bound_time(gpu, logits * (bytes_f + fill * 6.0), kernels_f + 2 * fill),
                     elem_b=memory_bound_time(
                         gpu, logits * bytes_b + GRAD_ACCUMULATION_BYTES * vp * h
                         + fill * ACT_BYTES * (logits + m * h), kernels_b + 2 * fill))


def embedding_time(ctx: Ctx) -> LayerTime:
    """Input embedding on the first stage: a gather of the token rows forward; backward adds the rows' gradients
    into the dense fp32 main-grad of the vocab shard (Megatron VocabParallelEmbedding), 8 B per element."""
    gpu = ctx.cluster.gpu
    h, vp = ctx.model.hidden, ctx.vocab_padded / ctx.t
    rows = ctx.tokens * h * ACT_BYTES
    zero = np.zeros(len(ctx.lay))
    return LayerTime(gemm_f=zero, gemm_b=zero, gemm_w=zero, attn_f=zero, attn_b=zero,
                     elem_f=memory_bound_time(gpu, 2 * rows, 2),
                     elem_b=memory_bound_time(gpu, 2 * rows + GRAD_ACCUMULATION_BYTES * vp * h, 2))


def mtp_extra_time(ctx: Ctx) -> LayerTime:
    """DeepSeek MTP module beyond its transformer layer: the 2h -> h projection on the last stage."""
    gpu = ctx.cluster.gpu
    h = ctx.model.hidden
    m = ctx.tokens_sp
    f = gemm_time(gpu, m, h, 2 * h)
    dg = gemm_time(gpu, m, 2 * h, h)
    wg = gemm_time(gpu, 2 * h, h, m)
    zero = np.zeros_like(f)
    return LayerTime(gemm_f=f, gemm_b=dg + wg, gemm_w=wg, attn_f=zero, attn_b=zero,
                     elem_f=memory_bound_time(gpu, m * h * 16.0, 4), elem_b=memory_bound_time(gpu, m * h * 32.0, 8))


def optimizer_time(ctx: Ctx, local_params: np.ndarray, grad_buffer: np.ndarray) -> np.ndarray:
    """Adam step over the `local_params` this rank updates and the zeroing of its gradient buffer of
    `grad_buffer` parameters (memory-bound)."""
    nbytes = local_params * ADAM_BYTES_PER_PARAM + grad_buffer * GRAD_ZERO_BYTES_PER_PARAM
    # Five multi-tensor kernels: memset, grad-norm, Adam, master -> bf16 copy, and the norm's reduction.
    return memory_bound_time(ctx.cluster.gpu, nbytes, 5)
