"""Memory of one rank: model states, activations of the micro-batches in flight, and working buffers, as the
stack stores them (`StackSpec.memory`).

Model states (``reference/formulas.md`` §3.1-3.2): the parameters as the stack stores them (bf16 with a separate
fp32 master copy in the optimizer, or fp32 cast to bf16 for compute), the gradient accumulation buffer (fp32
main grads or bf16) and the copies of the gradients in the parameter dtype some stacks hold besides it, and
Adam's two moments (fp32 or bf16). Megatron with bf16 is 2 + 4 + 12 = 18 B/param, not the ZeRO paper's 16 with
fp16 gradients; bf16 moments bring the optimizer's 12 B to 8 (DeepSeek-V3 §3.3.3). ZeRO-1 (Megatron's
distributed optimizer) shards the optimizer states, ZeRO-2 also the gradients, ZeRO-3/FSDP also the weights,
over the data-parallel group: cp·dp ranks for dense weights (Megatron shards over DP×CP), the expert-DP group
for experts, whose weights are split over ep·etp. A share of the optimizer states may live in host memory.

Activations per layer follow Korthikanti et al. 2022 (Table 2): the tensors each op saves for its backward, in
bytes, generalised to GQA/MLA, gated MLPs, MoE (formulas.md §3.4) and flash attention, and to how the stack
runs the element-wise ops (fused, eager or compiled) and stores fp8 activations; see `layer_activation_bytes`.
The GPT case reproduces s·b·h·(34 + 5·a·s/h) and its TP, SP, selective and full recompute variants exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.models.spec import Block, LayerKind, Shard
from parplan.planner.compute import gemm_shapes
from parplan.planner.context import ACT_BYTES, RC_FULL, RC_MODULES, RC_NONE, RC_OP_SAC, RC_SELECTIVE, Ctx
from parplan.planner.recompute import RECOMPUTED
from parplan.stacks.spec import RECOMPUTE_KINDS, Memory

COMPUTE_WEIGHT_BYTES = 2
"""bf16 weights the GEMMs read: the stored parameters when the stack stores bf16, else the bf16 copy it casts
(FSDP mixed precision) or gathers (ZeRO-3)."""
GRAD_COPY_BYTES = 2
"""A gradient in the parameter dtype (bf16) before it is added to the accumulation buffer."""
EMA_BYTES = 4
"""An fp32 exponential moving average of each parameter."""
FP8_BYTES = 1
E5M6_BYTES = 1.5
"""DeepSeek-V3's 12-bit format for the attention output (§3.3.3: 1 sign, 5 exponent, 6 mantissa bits)."""
FP32_BYTES = 4
COMPILED_LOGIT_BYTES = 4
"""A compiled cross entropy (Inductor) saves only its bf16 input and the per-token log-sum-exp, and writes the
bf16 gradient in one fused kernel: 2 + 2 B per logit at the loss's peak."""
TOKEN_ID_BYTES = 8
"""Megatron keeps int64 token ids per micro-batch in flight on the first stage (theoretical_memory_usage)."""
OFFLOAD_BUFFER_LAYERS = 2
"""Layers of activations an activation-offloading stack keeps on the GPU while they are copied out or back
(Megatron's and Transformer Engine's CPU offload double-buffer one layer ahead of the one computing)."""


@dataclass(frozen=True, slots=True)
class StateBytes:
    """(N, K) bytes of model states per rank pattern, by component."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    """Master weights, Adam's moments and a GPU-resident EMA: what the optimizer step reads and writes."""
    host: np.ndarray
    """Optimizer states kept in host memory (offload) and a host-resident EMA."""
    updated: np.ndarray
    """Parameters whose optimizer states the rank holds (its ZeRO shard; all it holds below ZeRO-1): what the
    optimizer step updates."""
    grad_elements: np.ndarray
    """Elements of the rank's gradient accumulation buffer: what the step zeroes."""
    backward_copies: np.ndarray
    """Parameter-dtype gradient copies made within each micro-batch's backward and dropped at its end
    (Memory.backward_grad_copies); not in `gradients`: `backward_copy_excess` says what of them the peak holds."""

    def __add__(self, other: StateBytes) -> StateBytes:
        return StateBytes(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))


def model_state_bytes(params: np.ndarray, shard: np.ndarray, zero: np.ndarray, mem: Memory,
                      grads_sharded: np.ndarray | bool = True, reshards: np.ndarray | bool = True) -> StateBytes:
    """Bytes per rank of `params` parameters held by the rank, sharded `shard` ways at ZeRO stage `zero` (ZeRO
    paper §5: P_os, P_os+g, P_os+g+p), stored as the stack stores them (`mem`).

    Stored parameters: bf16 ones are sharded at ZeRO-3 where the group reshards them after forward; fp32 ones
    (FSDP) are sharded from ZeRO-2 on, and their gathered bf16 copy stays for the whole forward and backward
    unless ZeRO-3 reshards it (then it lives only in the gather buffers). `grads_sharded` False keeps full
    gradients at ZeRO-2/3 (a pipeline accumulates them unsharded until its last micro-batch); `reshards` False
    keeps ZeRO-3's gathered parameters from forward to backward (FSDP under a pipeline)."""
    z3_sharded = (zero >= 3) & reshards
    z2 = zero >= 2
    if mem.weight_bytes == COMPUTE_WEIGHT_BYTES:
        weights = params * COMPUTE_WEIGHT_BYTES / np.where(z3_sharded, shard, 1)
    else:
        stored = params * mem.weight_bytes / np.where(z2, shard, 1)
        weights = stored + np.where(z2 & ~z3_sharded, params * COMPUTE_WEIGHT_BYTES, 0.0)
    grad_elements = params / np.where(z2 & grads_sharded, shard, 1)
    grads = grad_elements * mem.grad_bytes
    # ZeRO-2/3 reduce the parameter-dtype gradients bucket by bucket and free them; below, every one exists at
    # the end of a backward.
    backward = np.zeros(1)
    if mem.grad_copies or mem.backward_grad_copies:
        copies = np.where(z2, 0.0, params * GRAD_COPY_BYTES)
        grads = grads + mem.grad_copies * copies
        backward = mem.backward_grad_copies * copies
    optimizer_shard = params / np.where(zero >= 1, shard, 1)
    states = optimizer_shard * (mem.master_weight_bytes + 2 * mem.moment_bytes)
    ema = optimizer_shard * EMA_BYTES
    on_gpu = states * (1.0 - mem.optimizer_offload) if mem.optimizer_offload else states
    host = states * mem.optimizer_offload if mem.optimizer_offload else np.zeros(1)
    if mem.ema != "none":
        on_gpu, host = (on_gpu + ema, host) if mem.ema == "gpu" else (on_gpu, host + ema)
    return StateBytes(weights=weights, gradients=grads, optimizer=on_gpu, host=host, updated=optimizer_shard,
                      grad_elements=grad_elements, backward_copies=backward)


def backward_copy_excess(copies: np.ndarray, micro_batch: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """What the peak holds of gradient copies made within each backward and dropped at its end (`copies` bytes
    of a rank, StateBytes.backward_copies): a chunk's backward makes its share of them as it frees one
    micro-batch's activations of that chunk (`micro_batch` bytes over the rank's `chunks` chunks), so they add
    only where they outweigh those activations."""
    return np.maximum(copies - micro_batch, 0.0) / chunks


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


def largest_module_params(ctx: Ctx) -> np.ndarray:
    """Parameters of the largest linear module on a rank (what DeepSpeed ZeRO-3 gathers at a time): one expert's
    matrix over ETP, a replicated linear whole, the others over TP."""
    m = ctx.model
    kinds = [LayerKind.DENSE] + ([LayerKind.MOE] if m.moe_layer_count else [])
    largest = np.zeros(len(ctx.lay))
    for lin in (lin for kind in kinds for lin in m.layer_linears(kind)):
        per_module = (lin.params / lin.instances / ctx.et if lin.block is Block.EXPERTS
                      else lin.params / _split(ctx, lin))
        largest = np.maximum(largest, per_module)
    return largest


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


def mtp_params(ctx: Ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dense, expert, embedding copy) parameters of the MTP layers, held with the head. Each MTP module embeds the
    shifted tokens with the main model's embedding and predicts through its output head (DeepSeek-V3 §2.2): the
    head is the rank's own; the embedding is the same parameter where the head's rank also holds the input
    embedding (pp = 1, or DualPipe placing the first and last stages together: §3.2.3, "physical sharing of
    parameters and gradients"), and otherwise a copy kept in sync like a tied embedding (Megatron's MTP on the
    last stage)."""
    m = ctx.model
    zero = np.zeros(len(ctx.lay))
    if not m.mtp_layers:
        return zero, zero, zero
    dense, expert, _ = layer_params(ctx, m.mtp_layer_kind)
    own = 3 * m.norm_params_per_norm + sum(lin.params for lin in m.mtp_linears())
    copy = ctx.vocab_padded * m.hidden / ctx.t
    return m.mtp_layers * (dense + own), m.mtp_layers * expert, copy


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


def _eager(ctx: Ctx, op: str) -> bool:
    """An element-wise op the stack runs as separate eager PyTorch ops (not a fused kernel, not compiled)."""
    return op not in ctx.stack.kernels.fused_ops and not ctx.stack.compiled


def _activation_bytes(ctx: Ctx, kind: LayerKind, rc: np.ndarray) -> np.ndarray:
    """Bytes one layer under recompute kind `rc` keeps for backward per micro-batch on one rank (Korthikanti
    2022 accounting). Module recompute keeps each norm's input but not its output (the next GEMM's input), the
    expert activation's input but not its output, and MLA's latents but not the up-projected heads; a compiled
    block (torch.compile, XLA) saves what fused kernels save, while eager element-wise ops save their
    intermediates (an RMSNorm's fp32 upcast and normalised output, SwiGLU's silu output). Under fp8 a GEMM
    input is kept at the stack's fp8_activation_bytes (norm inputs, activation-function inputs, attention
    Q/K/V and the router input stay bf16). Per-op SAC (torchtitan) saves the block input, every second
    matmul's output and the attention's output.
    """
    m = ctx.model
    mem = ctx.stack.memory
    mods = rc == RC_MODULES
    kept = np.where(mods, 0.0, 1.0)  # tensors module recompute rebuilds in backward
    a = m.attention
    h, t = m.hidden, ctx.t
    tr, tok = ctx.tokens_sp, ctx.tokens
    two = ACT_BYTES
    gin = np.where(ctx.fp8, mem.fp8_activation_bytes, ACT_BYTES)  # a saved GEMM input
    drop = 1.0 if m.dropout else 0.0
    heads = a.heads / t
    # An eager RMSNorm (x.float(), rsqrt of the mean square, scale, cast back) saves the fp32 upcast and the
    # normalised bf16 tensor instead of its bf16 input (PyTorch's composite rms_norm).
    norm = (FP32_BYTES + two if m.norm == "rmsnorm" and _eager(ctx, "norm") else two) * tr * h
    # attention block: norm input, input of the first projection (kept sequence-sharded under SP)
    attn = norm + kept * gin * tr * h + drop * tr * h
    if a.mla:
        ml = a.mla
        # latents before their norms, and after them (the up-projections' inputs; the rope key goes to RoPE)
        latents = (two * (ml.q_lora_rank + ml.kv_lora_rank + 2 * ml.qk_rope_head_dim)
                   + kept * gin * (ml.q_lora_rank + ml.kv_lora_rank))
        attn = attn + tok * (latents + kept * two * heads * (2 * a.qk_head_dim + a.v_head_dim))
    else:
        attn = attn + two * tok * (heads + 2 * a.kv_heads / t) * a.head_dim  # Q, K, V
    core_kept = (rc != RC_SELECTIVE) & ~mods
    # Attention output: the attention keeps it for its backward and the out-projection for its weight gradient;
    # one bf16 tensor serves both; fp8 adds the projection's own fp8 copy (and drops the bf16 one where the core
    # is recomputed), or DeepSeek's E5M6 copy serves both.
    own_copy = mem.fp8_activation_bytes if mem.fp8_activation_bytes < two else 0.0
    fp8_out = (E5M6_BYTES if mem.fp8_attention_output == "e5m6"
               else np.where(core_kept, two + own_copy, mem.fp8_activation_bytes))
    attn = attn + np.where(ctx.fp8, fp8_out, two) * tok * heads * a.v_head_dim
    # attention core: flash keeps the fp32 log-sum-exp; unfused keeps softmax (2 B), dropout mask (1 B) and
    # dropout output (2 B) per score: Korthikanti's 5·a·s²·b. Selective recompute drops both.
    scores = ctx.b * heads * ctx.s * ctx.s / ctx.c
    core = np.where(ctx.flash, 4.0 * tok * heads, scores * (two + 3.0 * drop))
    attn = attn + np.where(core_kept, core, 0.0)
    # MLP block: norm input, first GEMM input, activation input(s), second GEMM input
    up = 2 if m.mlp.gated else 1
    silu_out = two if m.mlp.gated and _eager(ctx, "activation") else 0.0  # eager SwiGLU: silu(gate) * up
    if kind is LayerKind.DENSE:
        mlp = (norm + kept * gin * tr * h + tok * (two * up + silu_out + gin) * m.mlp.ffn / t
               + drop * tr * h)
    else:
        moe = m.moe
        assert moe is not None
        tm = ctx.tokens_moe
        copies = tm * moe.top_k * ctx.straggler  # the busiest EP rank keeps the most routed tokens
        # DeepSeek-V3 caches the experts' SwiGLU inputs in fp8 and recomputes its output (§3.3.3).
        fp8_act = ctx.fp8 & mem.fp8_swiglu_input
        act_in = np.where(fp8_act, FP8_BYTES, two) * up + silu_out
        act_out = np.where(fp8_act, 0.0, kept) * gin
        mlp = (norm + kept * two * tm * h + 4.0 * tm * moe.experts  # norm in, out, fp32 router probs
               + gin * copies * ctx.et * h  # permuted tokens (gathered over ETP)
               + copies * (act_in + act_out) * moe.expert_ffn  # expert activation inputs, down-proj input
               # The routing weights multiply the activation output (Megatron's TEGroupedMLP weighted SwiGLU;
               # DeepSeek-V3 §3.3), which keeps one fp32 weight per copy instead of every expert output.
               + FP32_BYTES * copies)
        if moe.shared_experts:
            mlp = mlp + tok * (act_in + np.where(fp8_act, 0.0, gin)) * moe.shared_experts * moe.shared_ffn / t
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


def offloaded_activations(ctx: Ctx, stored: np.ndarray, layer: np.ndarray) -> np.ndarray:
    """GPU bytes of `stored` activations when a share of the layers is offloaded to host memory: the kept share
    plus the layers in transfer (never more than without offloading)."""
    share = ctx.stack.memory.activation_offload
    if share == 0.0:
        return stored
    return (1.0 - share) * stored + np.minimum(share * stored, OFFLOAD_BUFFER_LAYERS * layer)


def mtp_activation_bytes(ctx: Ctx, dense_layer: np.ndarray, moe_layer: np.ndarray) -> np.ndarray:
    """Activations of the MTP modules on the last stage per micro-batch: each a transformer layer of the
    model's MTP layer kind plus its two norms and concatenated 2h input (4 bf16 copies of the hidden state)."""
    m = ctx.model
    layer = moe_layer if m.mtp_layer_kind is LayerKind.MOE else dense_layer
    return m.mtp_layers * (layer + 4 * ACT_BYTES * ctx.tokens_sp * m.hidden)


def token_id_bytes(ctx: Ctx) -> np.ndarray:
    """Token ids of one micro-batch kept on the first stage (TOKEN_ID_BYTES each)."""
    return TOKEN_ID_BYTES * ctx.b * ctx.s / ctx.c


def zero3_block_bytes(ctx: Ctx, largest_layer: np.ndarray, z3_sharded: np.ndarray) -> np.ndarray:
    """(N, K) ZeRO-3 working buffers of the blocks where it reshards the parameters (`z3_sharded`): per transformer
    block (FSDP, Megatron-FSDP), the bf16 weights of the block computing and of the one prefetched plus the
    block's unsharded gradient in the reduce dtype before its reduce-scatter; per module (DeepSpeed), 4 B per
    parameter of the largest module (memory.rst: bf16 weights and gradients of the largest layer)."""
    if not z3_sharded.any():
        return np.zeros((len(ctx.lay), 1))
    if ctx.stack.memory.zero3_unit == "module":
        return np.where(z3_sharded, 2.0 * COMPUTE_WEIGHT_BYTES * largest_module_params(ctx)[:, None], 0.0)
    grad_bytes = ctx.stack.communication.grad_reduce_bytes
    return np.where(z3_sharded, (2.0 * COMPUTE_WEIGHT_BYTES + grad_bytes) * largest_layer[:, None], 0.0)


def zero3_ends_bytes(ctx: Ctx, ends: np.ndarray, z3_sharded: np.ndarray) -> np.ndarray:
    """(N, K) the bf16 embedding and head (`ends` parameters) ZeRO-3 keeps gathered from their forward to their
    backward (FSDP2's root module does not reshard after forward); DeepSpeed gathers them module by module like
    any other (zero3_block_bytes)."""
    if not z3_sharded.any() or ctx.stack.memory.zero3_unit == "module":
        return np.zeros((len(ctx.lay), 1))
    return np.where(z3_sharded, COMPUTE_WEIGHT_BYTES * ends, 0.0)


def fp8_weight_bytes(ctx: Ctx, linear_params: np.ndarray, z3_sharded: np.ndarray) -> np.ndarray:
    """(N, K) fp8 copies of the linear weights kept for the step: a transpose next to fp8 parameters, or the
    stack's fp8 cache of bf16 parameters (none where ZeRO-3 gathers the weights block by block)."""
    mem = ctx.stack.memory
    per = FP8_BYTES if mem.fp8_params else mem.fp8_weight_cache_bytes
    return np.where(ctx.fp8[:, None] & ~z3_sharded, per * linear_params, 0.0)


def logit_bytes(ctx: Ctx) -> np.ndarray:
    """The loss's peak on the head rank: logits of one micro-batch (per MTP module too) at the stack's bytes per
    logit (fewer where the loss is compiled), split over TP when the loss is vocab-parallel, one chunk at a time
    when it is chunked."""
    mem, m = ctx.stack.memory, ctx.model
    vocab = ctx.vocab_padded / (ctx.t if mem.vocab_parallel_loss else 1)
    per_logit = COMPILED_LOGIT_BYTES if mem.loss_compiled and ctx.stack.compiled else mem.logit_bytes
    return per_logit * ctx.tokens * vocab * (1 + m.mtp_layers) / mem.loss_chunks


def working_bytes(ctx: Ctx) -> np.ndarray:
    """Short-lived peak on top of stored activations on every rank: a fully recomputed layer's activations
    during its backward and the gradient of the widest activation."""
    m = ctx.model
    width = max(m.mlp.ffn * (2 if m.mlp.gated else 1), m.hidden)
    grad_buffer = ACT_BYTES * ctx.tokens * width / ctx.t
    full = ctx.recompute == RC_FULL
    if not full.any():
        return grad_buffer
    kind = LayerKind.MOE if m.moe_layer_count else LayerKind.DENSE
    recomputed = layer_activation_bytes(ctx, kind, recompute=np.full_like(ctx.recompute, RC_NONE))
    return np.where(full, recomputed, 0.0) + grad_buffer


MEMORY_COMPONENTS = ("weights", "gradients", "optimizer", "activations", "buffers")


@dataclass(frozen=True, slots=True)
class RankMemory:
    """Bytes per rank, by component."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    buffers: np.ndarray
    """fp8 weight copies, the gathered ZeRO-3 embedding and head, and the larger of the loss's logits and the
    backward's ZeRO-3 block buffers with its working memory (the two phases do not overlap)."""
    host: np.ndarray
    """Bytes the rank keeps in host memory (offloaded optimizer states, a host EMA); not part of `total`."""

    @property
    def total(self) -> np.ndarray:
        """Peak allocated bytes on the GPU."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers

    @property
    def transient(self) -> np.ndarray:
        """Bytes allocated and freed within each step (what the allocator has to fit around the states)."""
        return self.activations + self.buffers

    def as_gib(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) / 2**30 for name in MEMORY_COMPONENTS}
