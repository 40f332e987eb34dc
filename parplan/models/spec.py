"""What is trained: a decoder-only transformer described by its dimensions.

`ModelSpec` covers dense decoders (MHA/GQA/MQA, head_dim independent of hidden/heads, gated or plain MLP,
LayerNorm or RMSNorm, biases, learned or rotary positions, tied or untied embeddings), mixture-of-experts
layers (routed + shared experts, dense first-k layers, layer frequency, group-limited routing),
DeepSeek's multi-head latent attention with multi-token-prediction layers and its sparse-attention indexer,
sliding-window and chunked local attention layers, and hybrid models whose other layers are Gated DeltaNet
linear attention (Qwen3.5).

The model is described once, as the list of linear layers each transformer layer holds (`Linear`); the
parameter counts, the FLOPs and the cost model's GEMM shapes are all derived from that one list, so they
cannot disagree. Counting conventions follow Megatron-LM (``theoretical_memory_usage.py`` and
``training.py::num_floating_point_operations``), see ``reference/formulas.md`` §1-2.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field

from parplan._mapping import require

_LAYERS = 10_000
"""Ten times the deepest trained transformer: DeepNet's 1,000 layers (Wang et al. 2022, "DeepNet: Scaling
Transformers to 1,000 Layers")."""
_WIDTH = 2**20
"""Forty times the widest published model: Megatron-LM's 1T-parameter GPT, hidden 25,600 (Narayanan et al.
2021, Table 1)."""
_FFN = 2**22
"""Fifty times the widest published MLP: PaLM 540B, 73,728 (Chowdhery et al. 2022, Table 1)."""
_COUNT = 2**16
"""Heads, experts, groups: 170 times the most routed experts of a published model (Kimi K2, 384)."""
_TOKENS = 2**30
"""Positions and windows: a hundred times Llama 4 Scout's 10M-token context."""

RANGES: dict[str, tuple[int, int]] = {
    "hidden": (1, _WIDTH), "layers": (1, _LAYERS), "vocab": (1, 2**24), "max_position": (1, _TOKENS),
    "mtp_layers": (0, _LAYERS),
    "attention.heads": (1, _COUNT), "attention.kv_heads": (1, _COUNT), "attention.head_dim": (1, _COUNT),
    "attention.sliding_window": (1, _TOKENS), "attention.sliding_layers": (0, _LAYERS),
    "attention.mla.q_lora_rank": (0, _WIDTH), "attention.mla.kv_lora_rank": (1, _WIDTH),
    "attention.mla.qk_nope_head_dim": (0, _COUNT), "attention.mla.qk_rope_head_dim": (0, _COUNT),
    "attention.mla.v_head_dim": (1, _COUNT),
    "mlp.ffn": (1, _FFN),
    "moe.experts": (1, _COUNT), "moe.top_k": (1, _COUNT), "moe.expert_ffn": (1, _FFN),
    "moe.shared_experts": (0, _COUNT), "moe.shared_ffn": (0, _FFN), "moe.n_group": (1, _COUNT),
    "moe.topk_group": (1, _COUNT), "moe.first_k_dense": (0, _LAYERS), "moe.layer_freq": (1, _LAYERS),
}
"""Field -> (least, largest) accepted value of every integer of a model description (vocab: 64 times Gemma
3's 262,144). The upper bounds only refuse the absurd (1e9 layers would hang the cost model or exhaust
memory) with the reason, up front; the readers apply them as they read each key, and ModelSpec checks them
again for models built in code. moe.first_k_dense and moe.layer_freq are the file formats' rule for which
layers are MoE (ModelSpec holds the resulting per-layer flags)."""


def _field_value(spec: object, path: str) -> object:
    for part in path.split("."):
        spec = getattr(spec, part, None) if spec is not None else None
    return spec


class Shard(enum.Enum):
    """How tensor parallelism splits a linear layer (Megatron-LM, Shoeybi et al. 2019 §3)."""

    COLUMN = "column"
    """Output features split over the TP group (QKV, MLP up-projection)."""
    ROW = "row"
    """Input features split over the TP group (attention output, MLP down-projection)."""
    REPLICATED = "replicated"
    """Whole copy on every TP rank (router, MLA down-projections, MTP projection)."""


class Block(enum.Enum):
    """Which part of a layer a linear belongs to; decides which parallel group shards it."""

    ATTENTION = "attention"
    MLP = "mlp"
    ROUTER = "router"
    EXPERTS = "experts"
    """Routed experts: instances split over EP, each expert's matrices over ETP."""
    SHARED_EXPERTS = "shared_experts"


class LayerKind(enum.Enum):
    DENSE = "dense"
    MOE = "moe"


@dataclass(frozen=True, slots=True)
class Linear:
    """One linear layer of a transformer layer (or `instances` identical ones, for experts)."""

    name: str
    d_in: int
    """Input features."""
    d_out: int
    """Output features."""
    bias: bool
    shard: Shard
    block: Block
    instances: int = 1
    """Identical copies held by the model (number of routed experts; 1 otherwise)."""
    tokens_fraction: float = 1.0
    """Fraction of the layer's tokens each copy processes: top_k / experts for routed experts."""

    @property
    def params(self) -> int:
        """Parameters of all copies, biases included."""
        return self.instances * (self.d_in * self.d_out + (self.d_out if self.bias else 0))

    @property
    def active_params(self) -> float:
        """Parameters touched per token (top_k experts of E)."""
        return self.params * self.tokens_fraction

    @property
    def flops_per_token(self) -> float:
        """Forward FLOPs per token of the layer's input (2 per multiply-add), over all copies."""
        return 2.0 * self.d_in * self.d_out * self.instances * self.tokens_fraction


@dataclass(frozen=True, slots=True, kw_only=True)
class MLASpec:
    """DeepSeek-V2/V3 multi-head latent attention (HF names; formulas.md §1.3)."""

    q_lora_rank: int
    """Rank of the query down-projection; 0 means a plain h -> heads·(nope+rope) projection."""
    kv_lora_rank: int
    """Rank of the compressed key/value latent."""
    qk_nope_head_dim: int
    """Per-head query/key dimension without rotary embedding (Megatron --qk-head-dim)."""
    qk_rope_head_dim: int
    """Per-head rotary query/key dimension, shared key across heads (Megatron --qk-pos-emb-head-dim)."""
    v_head_dim: int
    """Per-head value dimension."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearAttentionSpec:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5; HF names linear_*): per sequence a constant-size
    recurrent state of value_heads × key_head_dim × value_head_dim instead of a growing KV cache."""

    key_heads: int
    """Query/key heads (linear_num_key_heads)."""
    value_heads: int
    """Value heads (linear_num_value_heads); each owns one dk × dv state matrix."""
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    """Width of the causal depthwise convolution over q, k and v (linear_conv_kernel_dim)."""

    @property
    def key_dim(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels the convolution runs over: q, k and v."""
        return 2 * self.key_dim + self.value_dim


def linear_attention_flops_per_token(la: LinearAttentionSpec) -> float:
    """FLOPs of one Gated DeltaNet token in the recurrent form, per layer: Sᵀk, the rank-one update k(v − Sᵀk)ᵀ and
    the read-out Sᵀq, each 2·dk·dv per value head (Yang et al. 2024, Gated Delta Networks, eq. 10)."""
    return 6.0 * la.value_heads * la.key_head_dim * la.value_head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexerSpec:
    """DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2, GLM-5; HF index_*): `heads` small heads
    of `head_dim` score every cached key, and the main attention reads only the `topk` best."""

    heads: int
    head_dim: int
    topk: int
    """Keys each query attends to once the context is longer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionSpec:
    heads: int
    """Query heads (a)."""
    kv_heads: int
    """Key/value heads (GQA groups); equal to heads for MHA, 1 for MQA."""
    head_dim: int
    """Per-head dimension of q/k/v (d_h); need not equal hidden/heads (Qwen3, gpt-oss)."""
    qkv_bias: bool = False
    out_bias: bool = False
    qk_norm: bool = False
    """Per-head RMSNorm on q and k (Qwen3): 2·head_dim parameters per layer."""
    sinks: bool = False
    """Learned per-head attention-sink logits (gpt-oss): `heads` parameters per layer."""
    sliding_window: int | None = None
    """Window in tokens of the layers that use sliding-window attention; None = all layers full."""
    sliding_layers: int = 0
    """How many layers use the sliding window (gpt-oss alternates sliding and full)."""
    chunked: bool = False
    """The windowed layers attend within fixed chunks of `sliding_window` tokens instead of a sliding window
    (Llama 4's chunked local attention): a query sees the keys of its own chunk only."""
    qk_norm_full: bool = False
    """The q and k norms span all heads (MiniMax-M2 qk_norm_type per_layer): heads·d + kv_heads·d parameters
    instead of 2·head_dim."""
    output_gate: bool = False
    """A sigmoid gate on the attention output computed by the query projection (Qwen3.5 attn_output_gate):
    the q projection is twice as wide."""
    mla: MLASpec | None = None
    indexer: IndexerSpec | None = None
    """Sparse-attention indexer of every full-attention layer (DSA); None = dense attention."""
    linear: LinearAttentionSpec | None = None
    """The linear-attention layers' shape, for hybrid models (with linear_layers)."""
    linear_layers: int = 0
    """How many layers are linear attention instead of softmax attention."""

    @property
    def qk_head_dim(self) -> int:
        """Per-head dimension of the QKᵀ product."""
        if self.mla:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        return self.head_dim

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla else self.head_dim

    @property
    def kv_cache_width(self) -> int:
        """Elements per token of K plus V that context parallelism must pass around (k_v of formulas §4.5).

        MLA passes the expanded per-head K and V in Megatron's CP implementation.
        """
        if self.mla:
            return self.heads * (self.qk_head_dim + self.v_head_dim)
        return 2 * self.kv_heads * self.head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class MLPSpec:
    ffn: int
    """Hidden size of the dense MLP (f); for a gated MLP the width of each of gate and up."""
    gated: bool = True
    """SwiGLU-style gate (3 matrices, g=3) or a plain two-matrix MLP (g=2)."""
    bias: bool = False
    activation: str = "silu"


@dataclass(frozen=True, slots=True, kw_only=True)
class MoESpec:
    experts: int
    """Routed experts per MoE layer (E)."""
    top_k: int
    """Experts each token is routed to (k)."""
    expert_ffn: int
    """Hidden size of one routed expert (f_e)."""
    shared_experts: int = 0
    """Shared experts that see every token (n_sh)."""
    shared_ffn: int = 0
    """Hidden size of one shared expert (f_sh)."""
    shared_gate: bool = False
    """Sigmoid gate Linear(h, 1) on the shared expert (Qwen2-MoE)."""
    router_bias: bool = False
    """Router linear has a bias (gpt-oss)."""
    expert_bias: bool = False
    """Expert linears have biases (gpt-oss)."""
    score_correction_bias: bool = False
    """DeepSeek-V3's per-expert `e_score_correction_bias` (E parameters per layer)."""
    layers: tuple[bool, ...] = ()
    """Per transformer layer: True when it is an MoE layer (from first_k_dense / frequency rules)."""
    n_group: int = 1
    """Expert groups for group-limited routing (DeepSeek: one group per node)."""
    topk_group: int = 1
    """Groups a token may be routed to (DeepSeek-V3: 4 of 8)."""

    @property
    def moe_layers(self) -> int:
        return sum(self.layers)

    @property
    def group_limited(self) -> bool:
        """Routing limits each token to topk_group of n_group expert groups (and so to that many nodes)."""
        return self.n_group > 1 and self.topk_group < self.n_group


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer language model."""

    name: str
    family: str
    """HF model_type it was read from (llama, qwen3_moe, deepseek_v3, ...) or 'parplan'."""
    hidden: int
    """Model width h."""
    layers: int
    """Transformer layers L (MTP layers excluded)."""
    vocab: int
    """Vocabulary size V as configured (frameworks may pad it; see the cost model)."""
    attention: AttentionSpec
    mlp: MLPSpec
    moe: MoESpec | None = None
    norm: str = "rmsnorm"
    """'rmsnorm' (weight only) or 'layernorm' (weight and bias)."""
    position: str = "rope"
    """'rope', 'learned' (a table of max_position × hidden parameters) or 'alibi'."""
    max_position: int = 4096
    """Longest sequence the positions support, tokens."""
    tied_embeddings: bool = False
    """Input embedding and LM head share one matrix."""
    embedding_norm: bool = False
    """A norm right after the input embedding (BLOOM)."""
    mtp_layers: int = 0
    """DeepSeek multi-token-prediction layers, trained with the model (excluded from params_total)."""
    dropout: bool = False
    """Dropout in attention and after the residual branches (GPT-2/3 era): 1-byte masks in memory."""
    rope_theta: float | None = None
    """Rotary base (None when positions are not rotary); exported as Megatron --rotary-base."""
    rope_scaling: str | None = None
    """Rotary scaling type from `rope_scaling`/`rope_parameters` (llama3, yarn, ...), if any."""
    dtype: str | None = None
    """Checkpoint dtype from `torch_dtype`/`dtype`; informational (training precision is a strategy)."""
    source: str = field(default="", compare=False)
    """Where the description came from (preset name or file path)."""

    def __post_init__(self) -> None:
        """Every integer within RANGES (an int, not a bool), then the relationships the cost model relies on;
        the first rule broken is a ConfigError naming the field."""
        checks = []
        for path, (lo, hi) in RANGES.items():
            value = _field_value(self, path)
            if value is None:
                continue
            whole = isinstance(value, int) and not isinstance(value, bool)
            checks.append((path, whole and lo <= value <= hi,
                           f"must be an integer in {lo:,}..{hi:,}, got {value!r}" if whole or not isinstance(
                               value, int | float) else f"must be an integer, got {value!r}"))
        require(checks, file=self.source or None)
        a, m = self.attention, self.moe
        checks = [
            ("attention.kv_heads", a.heads % a.kv_heads == 0, f"must divide the {a.heads} query heads"),
            ("attention.sliding_layers", a.sliding_layers <= self.layers - a.linear_layers,
             f"must lie in 0..{self.layers - a.linear_layers} (the softmax-attention layers)"),
            ("attention.linear_layers", 0 <= a.linear_layers < self.layers and (a.linear is not None)
             == (a.linear_layers > 0), f"must lie in 0..{self.layers - 1}, with a linear-attention shape"),
            ("norm", self.norm in ("rmsnorm", "layernorm"), "must be 'rmsnorm' or 'layernorm'"),
            ("position", self.position in ("rope", "learned", "alibi"), "must be 'rope', 'learned' or 'alibi'"),
            ("rope_theta", self.rope_theta is None or 0 < self.rope_theta < float("inf"),
             "must be a positive finite number"),
        ]
        if a.mla is not None:
            checks.append(("attention.mla.qk_nope_head_dim", a.qk_head_dim > 0,
                           "qk_nope_head_dim + qk_rope_head_dim must be positive"))
        if m is not None:
            checks += [
                ("moe.top_k", m.top_k <= m.experts, f"must lie in 1..{m.experts} (the routed experts)"),
                ("moe.layers", len(m.layers) == self.layers, f"must list {self.layers} layers"),
                ("moe.n_group", m.experts % m.n_group == 0, f"must divide the {m.experts} experts"),
                ("moe.topk_group", m.topk_group <= m.n_group, f"must lie in 1..{m.n_group} (the groups)"),
                ("moe.top_k", m.top_k <= m.topk_group * (m.experts // m.n_group),
                 f"must be at most topk_group · experts / n_group = {m.topk_group * (m.experts // m.n_group)} "
                 "(the experts of the groups a token may use)"),
                ("moe.shared_ffn", m.shared_experts == 0 or m.shared_ffn > 0,
                 "must be positive when there are shared experts"),
            ]
        require(checks, file=self.source or None)

    # ---- structure -------------------------------------------------------------------------------
    @property
    def norm_params_per_norm(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Kind of each transformer layer, in order."""
        if self.moe is None:
            return (LayerKind.DENSE,) * self.layers
        return tuple(LayerKind.MOE if m else LayerKind.DENSE for m in self.moe.layers)

    @property
    def dense_layers(self) -> int:
        return self.layers - (self.moe.moe_layers if self.moe else 0)

    @property
    def moe_layer_count(self) -> int:
        return self.moe.moe_layers if self.moe else 0

    @property
    def mtp_layer_kind(self) -> LayerKind:
        """Megatron builds the MTP layer like the model's last layer."""
        return self.layer_kinds()[-1]

    @property
    def softmax_layers(self) -> int:
        """Layers with softmax attention (full or windowed); the rest are linear attention."""
        return self.layers - self.attention.linear_layers

    def attention_linears(self) -> tuple[Linear, ...]:
        """The linears of a softmax-attention layer (every layer of a model without linear attention)."""
        a = self.attention
        h = self.hidden
        gate = 2 if a.output_gate else 1
        if a.mla is None:
            q = a.heads * a.head_dim
            kv = a.kv_heads * a.head_dim
            return (
                Linear("qkv", h, gate * q + 2 * kv, a.qkv_bias, Shard.COLUMN, Block.ATTENTION),
                Linear("attn_out", q, h, a.out_bias, Shard.ROW, Block.ATTENTION),
            )
        m = a.mla
        qk = a.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        out: list[Linear] = []
        if m.q_lora_rank:
            out.append(Linear("q_down", h, m.q_lora_rank, False, Shard.REPLICATED, Block.ATTENTION))
            out.append(Linear("q_up", m.q_lora_rank, qk, False, Shard.COLUMN, Block.ATTENTION))
        else:
            out.append(Linear("q_proj", h, qk, False, Shard.COLUMN, Block.ATTENTION))
        out += [
            Linear("kv_down", h, m.kv_lora_rank + m.qk_rope_head_dim, False, Shard.REPLICATED,
                   Block.ATTENTION),
            Linear("kv_up", m.kv_lora_rank, a.heads * (m.qk_nope_head_dim + m.v_head_dim), False,
                   Shard.COLUMN, Block.ATTENTION),
            Linear("attn_out", a.heads * m.v_head_dim, h, False, Shard.ROW, Block.ATTENTION),
        ]
        if a.indexer is not None:
            # DeepSeek-V3.2 Indexer (inference/model.py): wq_b from the query latent, wk and the per-head
            # weights from the hidden state; replicated on every TP rank.
            ix = a.indexer
            out += [
                Linear("index_q", m.q_lora_rank or h, ix.heads * ix.head_dim, False, Shard.REPLICATED,
                       Block.ATTENTION),
                Linear("index_k", h, ix.head_dim, False, Shard.REPLICATED, Block.ATTENTION),
                Linear("index_weights", h, ix.heads, False, Shard.REPLICATED, Block.ATTENTION),
            ]
        return tuple(out)

    def linear_attention_linears(self) -> tuple[Linear, ...]:
        """The linears of a Gated DeltaNet layer (transformers Qwen3NextGatedDeltaNet): q, k, v and the output
        gate z from one projection, the decay/beta inputs b and a, and the output projection."""
        la = self.attention.linear
        if la is None:
            return ()
        h = self.hidden
        return (
            Linear("qkvz", h, 2 * la.key_dim + 2 * la.value_dim, False, Shard.COLUMN, Block.ATTENTION),
            Linear("ba", h, 2 * la.value_heads, False, Shard.COLUMN, Block.ATTENTION),
            Linear("linear_out", la.value_dim, h, False, Shard.ROW, Block.ATTENTION),
        )

    def attention_other_params(self, *, linear: bool = False) -> int:
        """Attention parameters outside the linears: q/k norms, sinks, MLA latent norms and the indexer's key
        norm (softmax layers); the convolution, A_log, dt_bias and gated output norm (linear layers)."""
        a = self.attention
        if linear:
            la = a.linear
            return 0 if la is None else la.conv_dim * la.conv_kernel + 2 * la.value_heads + la.value_head_dim
        n = 0
        if a.qk_norm_full:
            n += (a.heads + a.kv_heads) * a.head_dim
        elif a.qk_norm:
            n += 2 * a.head_dim
        if a.sinks:
            n += a.heads
        if a.mla:
            n += (a.mla.q_lora_rank or 0) + a.mla.kv_lora_rank
        if a.indexer:
            n += 2 * a.indexer.head_dim  # LayerNorm weight and bias
        return n

    def _linear_layer_delta(self) -> int:
        """Parameters a linear-attention layer has beyond a softmax one (negative when it has fewer)."""
        if not self.attention.linear_layers:
            return 0
        lin = sum(x.params for x in self.linear_attention_linears()) + self.attention_other_params(linear=True)
        soft = sum(x.params for x in self.attention_linears()) + self.attention_other_params()
        return self.attention.linear_layers * (lin - soft)

    def _mlp_pair(self, prefix: str, width: int, bias: bool, block: Block, instances: int = 1,
                  fraction: float = 1.0) -> tuple[Linear, Linear]:
        up = width * (2 if self.mlp.gated else 1)
        return (
            Linear(f"{prefix}_up", self.hidden, up, bias, Shard.COLUMN, block, instances, fraction),
            Linear(f"{prefix}_down", width, self.hidden, bias, Shard.ROW, block, instances, fraction),
        )

    def mlp_linears(self, kind: LayerKind) -> tuple[Linear, ...]:
        if kind is LayerKind.DENSE:
            return self._mlp_pair("mlp", self.mlp.ffn, self.mlp.bias, Block.MLP)
        moe = self.moe
        assert moe is not None
        out = [Linear("router", self.hidden, moe.experts, moe.router_bias, Shard.REPLICATED, Block.ROUTER)]
        out += self._mlp_pair("expert", moe.expert_ffn, moe.expert_bias, Block.EXPERTS, moe.experts,
                              moe.top_k / moe.experts)
        if moe.shared_experts:
            # Megatron builds the shared experts as one MLP of width n_sh·f_sh
            # (--moe-shared-expert-intermediate-size, ecosystem.md A2).
            out += self._mlp_pair("shared", moe.shared_experts * moe.shared_ffn, False,
                                  Block.SHARED_EXPERTS)
            if moe.shared_gate:
                out.append(Linear("shared_gate", self.hidden, 1, False, Shard.REPLICATED,
                                  Block.SHARED_EXPERTS))
        return tuple(out)

    def layer_linears(self, kind: LayerKind) -> tuple[Linear, ...]:
        return _layer_linears(self, kind)

    def layer_norm_params(self, kind: LayerKind) -> int:
        """Norm (and other non-linear) parameters of one softmax-attention layer."""
        n = 2 * self.norm_params_per_norm + self.attention_other_params()
        if kind is LayerKind.MOE and self.moe and self.moe.score_correction_bias:
            n += self.moe.experts
        return n

    # ---- parameter counts (formulas.md §1) --------------------------------------------------------
    def layer_params(self, kind: LayerKind) -> int:
        return sum(lin.params for lin in self.layer_linears(kind)) + self.layer_norm_params(kind)

    def layer_active_params(self, kind: LayerKind) -> float:
        return sum(lin.active_params for lin in self.layer_linears(kind)) + self.layer_norm_params(kind)

    @property
    def embedding_params(self) -> int:
        """Input embedding, learned positions, embedding norm and (untied) LM head."""
        n = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        if self.position == "learned":
            n += self.max_position * self.hidden
        if self.embedding_norm:
            n += self.norm_params_per_norm
        return n

    def mtp_linears(self) -> tuple[Linear, ...]:
        """The MTP module's own projection (DeepSeek-V3 §2.2: concat of 2h -> h)."""
        return (Linear("mtp_eh_proj", 2 * self.hidden, self.hidden, False, Shard.REPLICATED, Block.MLP),)

    @property
    def mtp_params_per_layer(self) -> int:
        """Own parameters of one MTP module: 2 input norms, projection, one layer and the head norm."""
        kind = self.mtp_layer_kind
        return (3 * self.norm_params_per_norm + sum(lin.params for lin in self.mtp_linears())
                + self.layer_params(kind))

    @property
    def params_total(self) -> int:
        """All parameters of the main model (embeddings, LM head, norms, biases); MTP excluded."""
        return int(sum(self.layer_params(k) for k in self.layer_kinds()) + self._linear_layer_delta()
                   + self.norm_params_per_norm + self.embedding_params)

    @property
    def params_active(self) -> float:
        """Parameters used per token: top_k routed experts instead of all, both embedding matrices."""
        return (sum(self.layer_active_params(k) for k in self.layer_kinds()) + self._linear_layer_delta()
                + self.norm_params_per_norm + self.embedding_params)

    @property
    def params_with_mtp(self) -> int:
        return self.params_total + self.mtp_layers * self.mtp_params_per_layer

    # ---- FLOPs (formulas.md §2.3) -----------------------------------------------------------------
    def attention_kv_tokens(self, seq: float, *, causal: bool = True, sliding: bool = False) -> float:
        """Keys each query attends to, averaged over the sequence.

        causal=True counts the causal half (Megatron's convention, what FlashAttention computes);
        causal=False counts the full s×s square (Korthikanti/PaLM convention, formulas.md §2.2).
        A windowed layer (`sliding`) sees at most `sliding_window` keys, or only its own chunk's under
        chunked local attention; a sparse (DSA) layer reads at most the indexer's top-k keys per query.
        """
        a = self.attention
        w = a.sliding_window if sliding else None
        if w is not None and w < seq:
            if a.chunked:
                full, rest = divmod(seq, w)
                return ((full * w * (w + 1) + rest * (rest + 1)) / 2 / seq) if causal else float(w)
            if not causal:
                return float(w)
            return (w * (w + 1) / 2 + (seq - w) * w) / seq
        k = a.indexer.topk if a.indexer else None
        if k is not None and k < seq:
            return (k * (k + 1) / 2 + (seq - k) * k) / seq if causal else float(k)
        return seq / 2 if causal else float(seq)

    def attention_core_flops_per_token(self, seq: float, *, causal: bool = True) -> float:
        """Forward FLOPs of QKᵀ and P·V per token, summed over all layers; a sparse layer's indexer scores
        every earlier key (2·heads·head_dim per key), a linear-attention layer updates and reads its state."""
        a = self.attention
        per_key = 2.0 * a.heads * (a.qk_head_dim + a.v_head_dim)
        full = self.softmax_layers - a.sliding_layers
        flops = per_key * (full * self.attention_kv_tokens(seq, causal=causal)
                           + a.sliding_layers * self.attention_kv_tokens(seq, causal=causal, sliding=True))
        if a.indexer:
            flops += 2.0 * a.indexer.heads * a.indexer.head_dim * (seq / 2 if causal else seq) * self.softmax_layers
        if a.linear:
            flops += a.linear_layers * linear_attention_flops_per_token(a.linear)
        return flops

    def forward_flops_per_token(self, seq: float, *, causal: bool = True, mtp: bool = True) -> float:
        """Model forward FLOPs per token: every GEMM (router included), attention core and LM head.

        Norms, softmax, activations and the embedding lookup are not counted (as in Megatron-LM).
        MTP layers are counted when `mtp` (they run in training). Memoised per model and arguments: every
        batch of layouts asks for it, and it walks every layer's linears.
        """
        return _forward_flops_per_token(self, seq, causal, mtp)

    def _forward_flops_per_token(self, seq: float, causal: bool, mtp: bool) -> float:
        gemm = sum(sum(lin.flops_per_token for lin in self.layer_linears(k)) for k in self.layer_kinds())
        if self.attention.linear_layers:
            gemm += self.attention.linear_layers * (
                sum(lin.flops_per_token for lin in self.linear_attention_linears())
                - sum(lin.flops_per_token for lin in self.attention_linears()))
        flops = gemm + self.attention_core_flops_per_token(seq, causal=causal)
        flops += 2.0 * self.hidden * self.vocab
        if mtp and self.mtp_layers:
            per_core = self.attention_core_flops_per_token(seq, causal=causal) / self.layers
            mtp_layer = (sum(lin.flops_per_token for lin in self.layer_linears(self.mtp_layer_kind))
                         + sum(lin.flops_per_token for lin in self.mtp_linears()) + per_core
                         + 2.0 * self.hidden * self.vocab)
            flops += self.mtp_layers * mtp_layer
        return flops

    def training_flops_per_token(self, seq: float, *, causal: bool = True, mtp: bool = True) -> float:
        """Forward + backward (data-grad and weight-grad) = 3 × forward (formulas.md §2.1)."""
        return 3.0 * self.forward_flops_per_token(seq, causal=causal, mtp=mtp)

    def summary(self) -> dict[str, object]:
        """Plain-data view used by `models show --json`."""
        a = self.attention
        return {
            "name": self.name,
            "family": self.family,
            "params": self.params_total,
            "active_params": round(self.params_active),
            "embedding_params": self.embedding_params,
            "mtp_params": self.mtp_layers * self.mtp_params_per_layer,
            "layers": self.layers,
            "hidden": self.hidden,
            "heads": a.heads,
            "kv_heads": a.kv_heads,
            "head_dim": a.head_dim,
            "ffn": self.mlp.ffn,
            "gated_mlp": self.mlp.gated,
            "vocab": self.vocab,
            "tied_embeddings": self.tied_embeddings,
            "norm": self.norm,
            "position": self.position,
            "max_position": self.max_position,
            "attention": "mla" if a.mla else ("mha" if a.kv_heads == a.heads else
                                               ("mqa" if a.kv_heads == 1 else "gqa")),
            "experts": self.moe.experts if self.moe else 0,
            "top_k": self.moe.top_k if self.moe else 0,
            "expert_ffn": self.moe.expert_ffn if self.moe else 0,
            "shared_experts": self.moe.shared_experts if self.moe else 0,
            "moe_layers": self.moe_layer_count,
            "mtp_layers": self.mtp_layers,
            "sliding_window": a.sliding_window,
            "sliding_layers": a.sliding_layers,
            "chunked_attention": a.chunked,
            "linear_attention_layers": a.linear_layers,
            "sparse_attention_topk": a.indexer.topk if a.indexer else None,
            "training_gflops_per_token_4k": self.training_flops_per_token(4096) / 1e9,
        }


@functools.lru_cache(maxsize=256)
def _layer_linears(model: ModelSpec, kind: LayerKind) -> tuple[Linear, ...]:
    """ModelSpec.layer_linears, built once per model and kind: the cost model walks every layer's linears in
    each call (FLOPs, parameters, recompute), a few hundred times per batch of layouts, and they are frozen."""
    return model.attention_linears() + model.mlp_linears(kind)


@functools.lru_cache(maxsize=1024)
def _forward_flops_per_token(model: ModelSpec, seq: float, causal: bool, mtp: bool) -> float:
    return model._forward_flops_per_token(seq, causal, mtp)
