"""Time of one engine step on one attention rank: the operators of every layer composed into a step.

A step carries `n_dec` decoding sequences (each adding `spec` tokens: 1, or 1 + drafts under speculative
decoding) and `n_pf` prefill tokens. Every layer runs its linears on all the step's tokens (GEMMs: tensor-core
time or weight streaming, whichever is slower, efficiency.gemm_time), attention (decode queries stream the KV
cache, efficiency.decode_attention_time; prefill tokens run flash attention, efficiency.flash_attention_time),
the elementwise kernels between them, and the communication of its layout: the TP all-reduces (the engine's
one-shot kernel inside a node, NCCL across nodes), and for MoE layers the token exchange of the expert group
(an all-reduce without attention DP; under attention DP a gather/reduce-scatter, an all-to-all (the one-sided NVLink
kernel inside one NVLink domain, hardware.nvlink_alltoall), or DeepEP's normal kernels for prefill and low-latency
kernels for decode, hardware.deepep). Routed experts run as grouped
GEMMs over the experts that received tokens, on the busiest EP rank. A pipeline passes each micro-batch
through all stages, so a step's latency is the sum over all layers. The engine adds host time per step.

Every function is numpy-broadcastable over layouts (PoolArrays) and step compositions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import numpy as np

from parplan.hardware import deepep, nvlink_alltoall
from parplan.hardware.efficiency import (
    DTYPE_BYTES,
    Collective,
    attention_forward_flops,
    collective_time,
    decode_attention_time,
    flash_attention_time,
    gemm_time,
    link_bytes,
    memory_bound_time,
    scaleup_busbw,
)
from parplan.hardware.spec import ClusterSpec, GPUSpec
from parplan.models.spec import (
    Block,
    LayerKind,
    Linear,
    LinearAttentionSpec,
    ModelSpec,
    Shard,
    linear_attention_flops_per_token,
)
from parplan.names import A2A_BACKENDS
from parplan.planner import experts
from parplan.serving.engines import Engine
from parplan.serving.kvcache import kv_dtype_bytes, kv_shape
from parplan.serving.layout import PoolArrays
from parplan.serving.spec import Precision

ACT_BYTES = 2.0
"""Hidden states move and are stored in bf16."""

ELEMENTWISE_PASSES = 6.0
"""Hidden-width reads and writes per layer outside the GEMMs and attention: two norms (read and write each)
and two residual adds, fused as the engines fuse them."""

LAYER_KERNELS = 3.0
"""Elementwise kernels per layer outside GEMMs, attention and communication: two fused residual-add + norm
kernels and the MLP activation (rotary embedding and the KV-cache write count with attention)."""

MOE_AUX_KERNELS = 3.0
"""Kernels an MoE layer runs besides its two grouped GEMMs: routing (top-k), token permutation, and
un-permutation with the weighted sum of the k outputs; the activation is fused into the first GEMM's epilogue
(FlashInfer/TensorRT-LLM fused MoE: routing, permute, gemm1+act, gemm2, finalize)."""

ATTENTION_KERNELS = 2.0
"""Kernels of a softmax-attention core: rotary embedding with the KV-cache write, and attention."""

LINEAR_ATTENTION_KERNELS = 6.0
"""Kernels of a Gated DeltaNet core: the convolution, the gates, the chunked delta rule (two passes), the gated
norm and the state write (transformers Qwen3NextGatedDeltaNet / flash-linear-attention)."""

SAMPLING_KERNELS = 3.0
"""Kernels after the LM head: logits processing, softmax/top-k, sampling."""


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds of one step on one attention rank, by part (arrays)."""

    linears: np.ndarray
    """Attention, dense-MLP, shared-expert and LM-head GEMMs."""
    attention: np.ndarray
    """Attention cores: KV-cache reads of decode queries, flash attention of prefill tokens, linear-attention
    state updates, the sparse-attention indexer."""
    experts: np.ndarray
    """Routed-expert grouped GEMMs, routing and permutation kernels (busiest EP rank)."""
    elementwise: np.ndarray
    """Norms, residual adds, rotary embedding, activations."""
    tp_comm: np.ndarray
    """TP all-reduces of attention and dense MLP outputs."""
    moe_comm: np.ndarray
    """MoE token exchange: all-reduce, gather/reduce-scatter, all-to-all or DeepEP dispatch and combine."""
    host: np.ndarray
    """Engine host time per step (scheduling, sampling, launching)."""

    @property
    def total(self) -> np.ndarray:
        return (self.linears + self.attention + self.experts + self.elementwise + self.tp_comm + self.moe_comm
                + self.host)

    def take(self, index: np.ndarray) -> StepTime:
        """The steps at `index` (as PoolArrays.take)."""
        return StepTime(*(getattr(self, f.name)[index] for f in fields(self)))

    def as_dict(self, index: int = 0) -> dict[str, float]:
        out = {f.name: float(np.broadcast_to(getattr(self, f.name), np.shape(self.total))[index])
               for f in fields(self)}
        out["total"] = float(np.ravel(self.total)[index])
        return out


def compute_format(gpu_fp4: bool, gpu_fp8: bool, dtype: str) -> tuple[str, float]:
    """(tensor-core dtype, weight bytes per element) of linears stored as `dtype`: fp8 and fp4 run natively
    where the GPU has those tensor cores; 4-bit weights elsewhere, and int4 always, are dequantised into bf16
    GEMMs (W4A16, Marlin-style kernels) and stream 0.5625 bytes per weight."""
    if dtype == "fp4":
        return ("fp4", DTYPE_BYTES["fp4"]) if gpu_fp4 else ("bf16", DTYPE_BYTES["fp4"])
    if dtype == "int4":
        return "bf16", DTYPE_BYTES["int4"]
    if dtype == "fp8" and not gpu_fp8:
        return "bf16", DTYPE_BYTES["fp8"]
    return dtype, DTYPE_BYTES[dtype]


GDN_PREFILL_KERNELS = 6.0
"""Kernels of one chunked Gated DeltaNet prefill: chunk_local_cumsum, chunk_scaled_dot_kkt_fwd, solve_tril,
recompute_w_u_fwd, chunk_gated_delta_rule_fwd_h and chunk_fwd_o (FLA's chunk_gated_delta_rule_fwd, as vLLM and SGLang
vendor it in their fla/ops/chunk.py)."""


def gdn_prefill_time(gpu: GPUSpec, engine: Engine, la: LinearAttentionSpec, tokens: np.ndarray,
                     heads_share: np.ndarray | float = 1.0) -> np.ndarray:
    """Seconds of one Gated DeltaNet layer's chunked prefill kernel over `tokens` on one GPU holding `heads_share`
    of the layer's heads: the recurrence's FLOPs at the engine's measured share of the bf16 peak
    (Engine.gdn_fraction: FLA's chunked kernels run far below the tensor cores' rate), plus their launches."""
    flops = np.asarray(tokens, dtype=float) * linear_attention_flops_per_token(la) * heads_share
    peak = gpu.peak_tflops["bf16"] * 1e12 * engine.gdn_fraction(gpu)
    return np.where(np.asarray(tokens) > 0, flops / peak + GDN_PREFILL_KERNELS * gpu.kernel_launch_us * 1e-6, 0.0)


@dataclass(frozen=True, slots=True)
class StepModel:
    """What a step's cost depends on besides its composition: model, cluster, engine, precision, layouts."""

    model: ModelSpec
    cluster: ClusterSpec
    engine: Engine
    precision: Precision
    lay: PoolArrays

    # ---- linears ----------------------------------------------------------------------------------------
    def _gemm(self, lin: Linear, tokens: np.ndarray, dtype: str, tp: np.ndarray) -> np.ndarray:
        gpu = self.cluster.gpu
        cdt, wb = compute_format(gpu.supports_fp4, gpu.supports_fp8, dtype)
        n = lin.d_out / np.where(lin.shard is Shard.COLUMN, tp, 1.0)
        k = lin.d_in / np.where(lin.shard is Shard.ROW, tp, 1.0)
        return gemm_time(gpu, np.maximum(tokens, 1.0), n, k, cdt, weight_bytes=wb)

    def _linears(self, linears: tuple[Linear, ...], tokens: np.ndarray) -> np.ndarray:
        total = np.zeros(np.broadcast(tokens, self.lay.tp).shape)
        for lin in linears:
            dtype = "bf16" if lin.block is Block.ROUTER else self.precision.gemm
            total = total + self._gemm(lin, tokens, dtype, self.lay.tp)
        return total

    # ---- attention --------------------------------------------------------------------------------------
    def _decode_keys(self, ctx: np.ndarray, window: bool) -> np.ndarray:
        """Keys a decode query of a sequence with `ctx` cached tokens reads: all of them, at most the window
        (or, chunked, the current chunk: half a chunk on average), at most the sparse-attention top-k."""
        a = self.model.attention
        keys = ctx
        if window and a.sliding_window:
            w = float(a.sliding_window)
            keys = np.where(ctx > w, w / 2, ctx) if a.chunked else np.minimum(ctx, w)
        if a.indexer is not None:
            keys = np.minimum(keys, a.indexer.topk)
        return keys

    def _softmax_attention(self, n_dec: np.ndarray, ctx: np.ndarray, spec: float, n_pf: np.ndarray,
                           pf_keys: np.ndarray, window: bool) -> np.ndarray:
        """One softmax-attention layer's core on one GPU."""
        m, gpu = self.model, self.cluster.gpu
        a = m.attention
        tp = self.lay.tp
        heads = a.heads / tp
        kvb = kv_dtype_bytes(self.precision.kv_cache)
        # Where the engine dequantises an 8-bit cache as it loads it, the conversion, not the halved bytes, sets
        # the pace: decode attention takes what a 16-bit cache takes (Engine.kv_dequant).
        read = max(kvb, ACT_BYTES) if self.engine.kv_dequant else kvb
        peak = gpu.peak_tflops["bf16"] * 1e12
        keys = self._decode_keys(ctx, window)
        queries = n_dec * spec
        if a.mla is not None:
            lat = a.mla.kv_lora_rank + a.mla.qk_rope_head_dim
            kv_bytes = n_dec * keys * lat * read
            # absorbed MLA: q·[latent, rope]ᵀ over lat dims, then P·latent over kv_lora dims, for every head
            dec_flops = 2.0 * queries * keys * heads * (lat + a.mla.kv_lora_rank)
        else:
            kv_heads = np.maximum(a.kv_heads / tp, 1.0)
            kv_bytes = n_dec * keys * 2 * kv_heads * a.head_dim * read
            dec_flops = attention_forward_flops(1, heads, queries, keys, a.head_dim, a.head_dim)
        if a.indexer is not None:
            ix = a.indexer
            kv_bytes = kv_bytes + n_dec * ctx * (ix.head_dim + 4.0)
            dec_flops = dec_flops + 2.0 * queries * ctx * ix.heads * ix.head_dim
        decode = np.where(n_dec > 0, decode_attention_time(gpu, kv_bytes, dec_flops, peak), 0.0)
        pkeys = pf_keys
        if window and a.sliding_window:
            pkeys = np.minimum(pkeys, a.sliding_window / (2.0 if a.chunked else 1.0))
        if a.indexer is not None:
            pkeys = np.minimum(pkeys, a.indexer.topk)
        pf_flops = attention_forward_flops(1, heads, n_pf, pkeys, a.qk_head_dim, a.v_head_dim)
        if a.indexer is not None:
            pf_flops = pf_flops + 2.0 * n_pf * pf_keys * a.indexer.heads * a.indexer.head_dim
        fwd, _ = flash_attention_time(gpu, pf_flops, np.maximum(2.0 * pkeys, 1.0), peak)
        prefill = np.where(n_pf > 0, fwd + gpu.kernel_launch_us * 1e-6, 0.0)
        return decode + prefill

    def _linear_attention(self, n_dec: np.ndarray, spec: float, n_pf: np.ndarray) -> np.ndarray:
        """One Gated DeltaNet layer's cores: the decode kernel reads and writes each sequence's state (its FLOPs
        at the flash-attention fraction of the bf16 peak, if slower), and prefill tokens run the engine's chunked
        kernel (gdn_prefill_time), a kernel of its own."""
        m, gpu = self.model, self.cluster.gpu
        la = m.attention.linear
        if la is None:
            return np.zeros(np.broadcast(n_dec, self.lay.tp).shape)
        shape = kv_shape(m, self.precision.kv_cache)
        state = 2.0 * n_dec * shape.state_bytes / self.lay.tp
        flops = n_dec * spec * linear_attention_flops_per_token(la) / self.lay.tp
        peak = gpu.peak_tflops["bf16"] * 1e12 * gpu.attention_fwd_fraction
        decode = np.maximum(memory_bound_time(gpu, state), flops / peak + gpu.kernel_launch_us * 1e-6)
        prefill = gdn_prefill_time(gpu, self.engine, la, n_pf, 1.0 / self.lay.tp)
        return np.where(np.asarray(n_dec) > 0, decode, 0.0) + prefill

    # ---- communication ----------------------------------------------------------------------------------
    def all_reduce(self, nbytes: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """A TP all-reduce of `nbytes` per rank: inside one NVLink domain the engine's one-shot kernel's latency and
        the ring's bytes at the domain's bus bandwidth, or at its NVLS bus bandwidth where the engine leaves NCCL's
        NVLS on (Engine.nccl_cluster: the messages large enough to carry many bytes go to NCCL); across domains, or over
        more than two GPUs of a link the kernel does not run on (PCIe: LinkSpec.one_shot_allreduce), NCCL's
        model."""
        cl = self.engine.nccl_cluster(self.cluster)
        inside = (ranks <= cl.scaleup_domain) & (cl.scaleup.one_shot_allreduce | (ranks <= 2))
        per_domain = np.minimum(ranks, cl.scaleup_domain)
        wire, _ = link_bytes(Collective.ALL_REDUCE, nbytes, ranks, per_domain)
        one_shot = (self.engine.knobs.allreduce_us * 1e-6
                    + wire / (scaleup_busbw(cl, per_domain, Collective.ALL_REDUCE) * 1e9))
        nccl = collective_time(cl, Collective.ALL_REDUCE, nbytes, ranks, per_domain)
        return np.where(ranks > 1, np.where(inside, one_shot, nccl), 0.0)

    def a2a_backend(self, mixed: bool) -> np.ndarray:
        """The MoE exchange each layout uses under attention DP: its own, else the engine's default (gathering
        where the engine's all-to-all needs a multi-node NVLink domain, whole experts and moe_ep > top_k that the
        layout lacks: Engine.a2a_needs_mnnvl), with DeepEP wherever the expert group leaves one NVLink domain and
        the engine has it."""
        lay, cl, eng = self.lay, self.cluster, self.engine
        default = A2A_BACKENDS.index(eng.a2a)
        if eng.a2a_needs_mnnvl:
            moe = self.model.moe
            routed = (lay.moe_tp == 1) & (lay.moe_ep > (moe.top_k if moe is not None else 0))
            default = np.where(cl.multi_node_nvlink & routed, default, A2A_BACKENDS.index("allgather"))
        spans = lay.stage_gpus > cl.scaleup_domain
        auto = np.where(spans & self.engine.deepep, A2A_BACKENDS.index("deepep"), default)
        return np.where(lay.a2a == A2A_BACKENDS.index("auto"), auto, lay.a2a)

    def _moe_exchange(self, tokens: np.ndarray, mixed: bool) -> np.ndarray:
        """Dispatch plus combine of one MoE layer for `tokens` per attention rank."""
        m, cl, lay = self.model, self.cluster, self.lay
        moe = m.moe
        assert moe is not None
        h = m.hidden
        group = lay.stage_gpus
        dom = np.minimum(group, cl.scaleup_domain)
        no_dp = self.all_reduce(tokens * h * ACT_BYTES, lay.tp)
        gathered = tokens * lay.dp * h
        moe_cdt = compute_format(cl.gpu.supports_fp4, cl.gpu.supports_fp8, self.precision.moe)[0]
        nvfp4 = moe_cdt == "fp4"
        gather_bytes = DTYPE_BYTES["fp4"] if self.engine.fp4_gather and nvfp4 else ACT_BYTES
        allgather = (collective_time(cl, Collective.ALL_GATHER, gathered * gather_bytes, group, dom)
                     + collective_time(cl, Collective.REDUCE_SCATTER, gathered * ACT_BYTES, group, dom))
        # 8-bit payloads where the experts' GEMMs take 8- or 4-bit inputs (Hopper's 4-bit weights run W4A16)
        fp8 = moe_cdt in ("fp8", "fp4")
        copies = tokens * moe.top_k
        # Whole experts inside one NVLink domain exchange through the one-sided kernel (a token once per rank it
        # reaches, its payload quantised as the experts take it); tensor-sharded experts, PCIe domains and groups
        # past the domain through NCCL's all-to-all of every copy.
        payload = np.where(nvfp4, DTYPE_BYTES["fp4"] * h, deepep.token_bytes(h, fp8))
        reached = tokens * self._ranks_reached(lay.moe_ep)
        one_sided = nvlink_alltoall.exchange_time(cl, reached, payload, h * ACT_BYTES, lay.moe_ep)
        nccl = (collective_time(cl, Collective.ALL_TO_ALL, copies * deepep.token_bytes(h, fp8), group, dom)
                + collective_time(cl, Collective.ALL_TO_ALL, copies * h * ACT_BYTES, group, dom))
        inside = (group <= cl.scaleup_domain) & cl.scaleup.symmetric_memory & (lay.moe_tp == 1)
        alltoall = np.where(inside, one_sided, nccl)
        if mixed:
            nodes = np.maximum(group / dom, 1.0)
            remote = self._remote_nodes(nodes)
            disp, comb = deepep.token_bytes(h, fp8), deepep.token_bytes(h, False)
            local = copies * (dom - 1) / np.maximum(dom, 1.0)
            ep_time = (deepep.normal_time(cl, local * disp, tokens * remote * disp, group, dom)
                       + deepep.normal_time(cl, local * comb, tokens * remote * comb, group, dom))
        else:
            ep_time = (deepep.low_latency_time(cl, copies * deepep.token_bytes(h, fp8), group, dom)
                       + deepep.low_latency_time(cl, copies * deepep.token_bytes(h, False), group, dom))
        # DeepEP's kernels scale H800's NVLink figures to the link; inside one NVLink domain none is faster than the
        # one-sided kernel, which TensorRT-LLM measured as the fastest MoE exchange there (blog18 @22de8b3: "the best
        # performance among known MoE communication implementations for inference"), floors included, with DeepEP's
        # own payload (fp8 or 16-bit dispatch, 16-bit combine).
        bound = nvlink_alltoall.exchange_time(cl, reached, deepep.token_bytes(h, fp8), h * ACT_BYTES, lay.moe_ep)
        ep_time = np.where(inside, np.maximum(ep_time, bound), ep_time)
        backend = self.a2a_backend(mixed)
        with_dp = np.select([backend == A2A_BACKENDS.index("allgather"), backend == A2A_BACKENDS.index("alltoall")],
                            [allgather, alltoall], ep_time)
        return np.where(lay.dp > 1, with_dp, no_dp)

    def _ranks_reached(self, ranks: np.ndarray) -> np.ndarray:
        """EP ranks a token's experts sit on, its own included (planner.experts.ranks_reached)."""
        moe = self.model.moe
        assert moe is not None
        return experts.per_size(ranks, lambda n: experts.ranks_reached(moe, n))

    def _remote_nodes(self, nodes: np.ndarray) -> np.ndarray:
        """Remote nodes a token's experts sit on (DeepEP normal kernels send one copy to each; planner.experts)."""
        moe = self.model.moe
        assert moe is not None
        return experts.per_size(nodes, lambda n: experts.remote_nodes_reached(moe, n))

    # ---- routed experts ---------------------------------------------------------------------------------
    def experts(self, tokens: np.ndarray) -> np.ndarray:
        """Routed experts of one MoE layer on the busiest EP rank: the copies it receives, over the local
        experts that got any (only those stream their weights), plus routing and permutation kernels."""
        m, gpu, lay = self.model, self.cluster.gpu, self.lay
        moe = m.moe
        assert moe is not None
        group_tokens = tokens * lay.dp
        copies = group_tokens * moe.top_k / lay.moe_ep
        local = (moe.experts + lay.redundant) / lay.moe_ep
        active = np.maximum(local * (1.0 - (1.0 - moe.top_k / moe.experts) ** group_tokens), 1.0)
        # The busiest of moe_ep ranks under uniform routing: Poisson counts, mean + sqrt(2·mean·ln n).
        straggler = np.where(lay.moe_ep > 1, 1.0 + np.sqrt(2.0 * np.log(lay.moe_ep) / np.maximum(copies, 1.0)), 1.0)
        rank_copies = np.minimum(copies * straggler, group_tokens * np.minimum(moe.top_k, local))
        cdt, wb = compute_format(gpu.supports_fp4, gpu.supports_fp8, self.precision.moe)
        ceiling = self.engine.expert_ceiling(gpu, self.precision.moe, cdt)
        up = (2 if m.mlp.gated else 1) * moe.expert_ffn / lay.moe_tp
        per_expert = np.maximum(rank_copies / active, 1.0)
        gemms = (gemm_time(gpu, per_expert, up, m.hidden, cdt, active, weight_bytes=wb, ceiling=ceiling)
                 + gemm_time(gpu, per_expert, m.hidden, moe.expert_ffn / lay.moe_tp, cdt, active, weight_bytes=wb,
                             ceiling=ceiling))
        aux = memory_bound_time(gpu, rank_copies * (4.0 * m.hidden + 3.0 * moe.expert_ffn / lay.moe_tp) * ACT_BYTES,
                                MOE_AUX_KERNELS)
        return gemms + aux

    # ---- the step ---------------------------------------------------------------------------------------
    def step(self, n_dec: np.ndarray, ctx: np.ndarray, n_pf: np.ndarray, pf_keys: np.ndarray,
             pf_seqs: np.ndarray, *, spec: float = 1.0, mixed: bool = False) -> StepTime:
        """One step of `n_dec` decoding sequences (mean `ctx` cached tokens) and `n_pf` prefill tokens (mean
        `pf_keys` keys each, completing `pf_seqs` prompts) on one attention rank; `mixed` marks a step that
        carries prefill (no full CUDA graph; DeepEP normal kernels). A decode step replays a CUDA graph, where a
        kernel boundary costs the engine's graph_kernel_us instead of the GPU's eager kernel_launch_us (NCCL
        all-reduce of 1 KiB on 4 H800: 3.5 µs per op eagerly, 0.5 µs in a CUDA graph; hardware.md §2.2)."""
        if mixed:
            return self._step(n_dec, ctx, n_pf, pf_keys, pf_seqs, spec, mixed)
        gpu = dataclasses.replace(self.cluster.gpu, kernel_launch_us=self.engine.knobs.graph_kernel_us)
        graph = dataclasses.replace(self, cluster=dataclasses.replace(self.cluster, gpu=gpu))
        return graph._step(n_dec, ctx, n_pf, pf_keys, pf_seqs, spec, mixed)

    def _step(self, n_dec: np.ndarray, ctx: np.ndarray, n_pf: np.ndarray, pf_keys: np.ndarray,
              pf_seqs: np.ndarray, spec: float, mixed: bool) -> StepTime:
        m, gpu, lay = self.model, self.cluster.gpu, self.lay
        n_dec, ctx, n_pf = (np.asarray(x, dtype=float) for x in (n_dec, ctx, n_pf))
        tokens = n_dec * spec + n_pf
        a = m.attention
        soft, lin_layers, window = m.softmax_layers, a.linear_layers, a.sliding_layers
        attn_lin = soft * self._linears(m.attention_linears(), tokens)
        if lin_layers:
            attn_lin = attn_lin + lin_layers * self._linears(m.linear_attention_linears(), tokens)
        attention = ((soft - window) * self._softmax_attention(n_dec, ctx, spec, n_pf, pf_keys, False)
                     + window * self._softmax_attention(n_dec, ctx, spec, n_pf, pf_keys, True)
                     + lin_layers * self._linear_attention(n_dec, spec, n_pf))
        dense = m.dense_layers * self._linears(m.mlp_linears(LayerKind.DENSE), tokens)
        hidden_ar = self.all_reduce(tokens * m.hidden * ACT_BYTES, lay.tp)
        tp_comm = (m.layers + m.dense_layers) * hidden_ar  # after attention; after each dense MLP
        moe_layers = m.moe_layer_count
        experts_t = np.zeros_like(attention)
        moe_comm = np.zeros_like(attention)
        shared = np.zeros_like(attention)
        if m.moe is not None:
            shared_lins = tuple(x for x in m.mlp_linears(LayerKind.MOE) if x.block is not Block.EXPERTS)
            shared = moe_layers * self._linears(shared_lins, tokens)
            experts_t = moe_layers * self.experts(tokens)
            moe_comm = moe_layers * self._moe_exchange(tokens, mixed)
        head_tokens = n_dec * spec + pf_seqs
        head = self._gemm(_lm_head(m), head_tokens, "bf16", lay.tp)
        width = (m.dense_layers * 3.0 * m.mlp.ffn + (moe_layers * 3.0 * m.moe.shared_experts * m.moe.shared_ffn
                                                      if m.moe else 0.0)) / lay.tp
        elem_bytes = tokens * ACT_BYTES * (m.layers * ELEMENTWISE_PASSES * m.hidden + width)
        elementwise = memory_bound_time(gpu, elem_bytes, m.layers * LAYER_KERNELS)
        eng = self.engine
        captured = eng.graph_batch(gpu.hbm_gib, lay.tp * lay.dp, lay.batch)
        if mixed:
            # Piecewise graphs (where the engine has them) launch only the attention cores in between; they are
            # captured for steps of up to cuda_graph_max_batch tokens (vLLM's capture sizes count a step's
            # tokens), and a longer step runs every kernel eagerly.
            piecewise = np.where(tokens > captured, self.kernels(), float(soft + lin_layers))
            launched = self.kernels() if eng.eager_prefill else piecewise
        else:  # decode steps replay CUDA graphs up to the captured batch size
            launched = np.where(n_dec > captured, self.kernels(), 0.0)
        # Eager steps dispatch from Python with synchronisations inside (MoE routing counts, scheduling), so the
        # launches do not hide behind the GPU work: they add to it, unless the engine launches a step while the
        # GPU still runs the one before (an overlap scheduler): then the step takes the longer of the two.
        launch = launched * eng.knobs.launch_us * 1e-6
        linears = attn_lin + dense + shared + head
        if eng.overlap_scheduler:
            launch = np.maximum(launch - (linears + attention + experts_t + elementwise + tp_comm + moe_comm), 0.0)
        host = eng.knobs.decode_step_ms * 1e-3 + launch
        return StepTime(linears=linears, attention=attention, experts=experts_t, elementwise=elementwise,
                        tp_comm=tp_comm, moe_comm=moe_comm, host=host)

    def kernels(self) -> np.ndarray:
        """Kernels one step launches: every GEMM (and the activation quantisation before fp8/fp4 GEMMs), the
        attention cores, the elementwise kernels, each collective, the MoE stages, the LM head and sampling."""
        m, gpu, lay = self.model, self.cluster.gpu, self.lay
        a = m.attention

        def gemms(n: int, dtype: str) -> float:
            quantised = compute_format(gpu.supports_fp4, gpu.supports_fp8, dtype)[0] in ("fp8", "fp4")
            return n * (2.0 if quantised else 1.0)

        g, e = self.precision.gemm, self.precision.moe
        tp_ar = np.where(lay.tp > 1, 1.0, 0.0)
        count = (m.softmax_layers * (gemms(len(m.attention_linears()), g) + ATTENTION_KERNELS)
                 + a.linear_layers * (gemms(len(m.linear_attention_linears()), g) + LINEAR_ATTENTION_KERNELS)
                 + m.dense_layers * (gemms(2, g) + tp_ar)
                 + m.layers * (LAYER_KERNELS + tp_ar) + 1.0 + SAMPLING_KERNELS)
        if m.moe is not None:
            shared = gemms(2, g) if m.moe.shared_experts else 0.0
            count = count + m.moe_layer_count * (1.0 + MOE_AUX_KERNELS + gemms(2, e) + shared + 2.0)
        return count + np.zeros_like(lay.tp)


def _lm_head(model: ModelSpec) -> Linear:
    """The LM head, vocabulary-parallel over TP."""
    return Linear("lm_head", model.hidden, model.vocab, False, Shard.COLUMN, Block.MLP)

