"""Read a Hugging Face `config.json` into a `ModelSpec`.

Field meanings and per-family defaults follow ``reference/ecosystem.md`` §A1 (transformers'
configuration classes). Both the old keys (`rope_scaling`, `torch_dtype`) and the transformers-v5 ones
(`rope_parameters`, `dtype`) are accepted; multimodal wrappers are unwrapped from `text_config`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parplan._input import read_json
from parplan._mapping import _MISSING, Fields
from parplan.errors import ConfigError, UnsupportedModelError
from parplan.models.spec import (
    RANGES,
    AttentionSpec,
    IndexerSpec,
    LinearAttentionSpec,
    MLASpec,
    MLPSpec,
    ModelSpec,
    MoESpec,
)

_KEYS: dict[str, str] = {
    "hidden_size": "hidden", "n_embd": "hidden", "num_hidden_layers": "layers", "n_layer": "layers",
    "vocab_size": "vocab", "max_position_embeddings": "max_position", "n_positions": "max_position",
    "num_nextn_predict_layers": "mtp_layers", "num_attention_heads": "attention.heads", "n_head": "attention.heads",
    "num_key_value_heads": "attention.kv_heads", "head_dim": "attention.head_dim",
    "sliding_window": "attention.sliding_window", "q_lora_rank": "attention.mla.q_lora_rank",
    "kv_lora_rank": "attention.mla.kv_lora_rank", "qk_nope_head_dim": "attention.mla.qk_nope_head_dim",
    "qk_rope_head_dim": "attention.mla.qk_rope_head_dim", "v_head_dim": "attention.mla.v_head_dim",
    "intermediate_size": "mlp.ffn", "n_inner": "mlp.ffn", "moe_intermediate_size": "moe.expert_ffn",
    "num_local_experts": "moe.experts", "num_experts": "moe.experts", "n_routed_experts": "moe.experts",
    "num_experts_per_tok": "moe.top_k", "experts_per_token": "moe.top_k", "n_shared_experts": "moe.shared_experts",
    "shared_expert_intermediate_size": "moe.shared_ffn", "first_k_dense_replace": "moe.first_k_dense",
    "moe_layer_freq": "moe.layer_freq", "decoder_sparse_step": "moe.layer_freq", "n_group": "moe.n_group",
    "topk_group": "moe.topk_group",
}
"""Hugging Face key -> the ModelSpec field it sets: its range (spec.RANGES) is checked as the key is read,
and a rule the built spec breaks is reported under the key the file used."""


class _Fields(Fields):
    """A config's fields: each integer key is read with the range of the ModelSpec field it sets."""

    def int(self, key: str, default: Any = _MISSING, *, min: int | None = None, max: int | None = None) -> Any:
        lo, hi = RANGES.get(_KEYS.get(key, ""), (min, max))
        return super().int(key, default, min=lo, max=hi)


def _rope(f: _Fields) -> tuple[float | None, str | None]:
    """rope_theta and scaling type from either the legacy or the v5 keys."""
    key = "rope_parameters" if f.has("rope_parameters") else "rope_scaling"
    params = f.mapping(key, None) or _Fields({}, f.file, key)
    theta = None
    for where, name in ((params, "rope_theta"), (f, "rope_theta"), (f, "rotary_emb_base")):
        if where.has(name):
            theta = where.float(name, above=0)
            break
    kind = params.str("rope_type", None) if params.has("rope_type") else params.str("type", None)
    return theta, (None if kind == "default" else kind)


def _dtype(f: _Fields) -> str | None:
    return f.str("dtype", None) if f.has("dtype") else f.str("torch_dtype", None)


_DROPOUT_KEYS = ("attn_pdrop", "resid_pdrop", "attention_dropout", "hidden_dropout", "hidden_dropout_prob")


def _dropout(f: _Fields) -> bool:
    rates = [f.float(key, 0.0, min=0, max=1) for key in _DROPOUT_KEYS]  # every key checked, not the first > 0
    return any(rate > 0 for rate in rates)


def _common(f: _Fields, name: str, family: str, **kw: Any) -> dict[str, Any]:
    theta, scaling = _rope(f)
    base = {
        "dropout": _dropout(f),
        "name": name,
        "family": family,
        "rope_theta": theta,
        "rope_scaling": scaling,
        "dtype": _dtype(f),
        "source": f.file,
    }
    base.update(kw)
    return base


_LAYER_TYPES = {"full_attention", "sliding_attention", "linear_attention"}


def _layer_counts(f: _Fields, layers: int, *, linear: bool) -> tuple[int, int]:
    """(sliding, linear) layer counts from `layer_types`; linear_attention only where the reader models it."""
    layer_types = f.list("layer_types", None)
    if layer_types is None:
        return 0, 0
    allowed = _LAYER_TYPES if linear else _LAYER_TYPES - {"linear_attention"}
    if len(layer_types) != layers or any(t not in allowed for t in layer_types):
        raise f.error("layer_types", f"expected a list of {layers} layer types out of {', '.join(sorted(allowed))}")
    return layer_types.count("sliding_attention"), layer_types.count("linear_attention")


def _llama_like(f: _Fields, name: str, family: str, *, qkv_bias: bool, qk_norm: bool = False,
                moe: MoESpec | None = None, out_bias: bool = False, sinks: bool = False,
                mlp_bias: bool = False, linear: LinearAttentionSpec | None = None, **attention: Any
                ) -> ModelSpec:
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    layers = f.int("num_hidden_layers")
    sliding_window = None
    sliding_layers, linear_layers = _layer_counts(f, layers, linear=linear is not None)
    if not f.has("layer_types") and f.has("sliding_window") and f.bool("use_sliding_window", True):
        # Mistral v0.1 style: every layer slides (Qwen sets use_sliding_window: false).
        sliding_layers = layers
    if sliding_layers:
        sliding_window = f.int("sliding_window")
    if not f.has("head_dim") and hidden < heads:
        raise f.error("hidden_size", f"must be at least num_attention_heads ({heads}): head_dim is hidden_size / "
                                     "num_attention_heads when the config gives none")
    spec = AttentionSpec(
        heads=heads,
        kv_heads=f.int("num_key_value_heads", heads),
        head_dim=f.int("head_dim", hidden // heads),
        qkv_bias=qkv_bias,
        out_bias=out_bias,
        qk_norm=qk_norm,
        sinks=sinks,
        sliding_window=sliding_window,
        sliding_layers=sliding_layers,
        linear=linear if linear_layers else None,
        linear_layers=linear_layers,
        **attention,
    )
    return ModelSpec(**_common(
        f, name, family,
        hidden=hidden,
        layers=layers,
        vocab=f.int("vocab_size"),
        attention=spec,
        mlp=MLPSpec(ffn=f.int("intermediate_size"), gated=True, bias=mlp_bias,
                    activation=f.str("hidden_act", "silu")),
        moe=moe,
        norm="rmsnorm",
        position="rope",
        max_position=f.int("max_position_embeddings", 4096),
        tied_embeddings=f.bool("tie_word_embeddings", False),
    ))


def _sparse_step_layers(f: _Fields, layers: int) -> tuple[bool, ...]:
    """Qwen-MoE rule: MoE iff i not in mlp_only_layers and (i+1) % decoder_sparse_step == 0."""
    step = f.int("decoder_sparse_step", 1)
    dense = set(f.int_list("mlp_only_layers", min=0))
    return tuple(i not in dense and (i + 1) % step == 0 for i in range(layers))


def _read_llama(f: _Fields, name: str) -> ModelSpec:
    return _llama_like(f, name, "llama", qkv_bias=f.bool("attention_bias", False),
                       out_bias=f.bool("attention_bias", False), mlp_bias=f.bool("mlp_bias", False))


def _read_mistral(f: _Fields, name: str) -> ModelSpec:
    return _llama_like(f, name, "mistral", qkv_bias=False)


def _read_qwen2(f: _Fields, name: str) -> ModelSpec:
    # Qwen2 has q/k/v biases hard-wired, with no config key (ecosystem.md A1.1).
    return _llama_like(f, name, "qwen2", qkv_bias=True)


def _read_qwen3(f: _Fields, name: str) -> ModelSpec:
    return _llama_like(f, name, "qwen3", qkv_bias=f.bool("attention_bias", False), qk_norm=True)


def _read_mixtral(f: _Fields, name: str) -> ModelSpec:
    layers = f.int("num_hidden_layers")
    moe = MoESpec(experts=f.int("num_local_experts"), top_k=f.int("num_experts_per_tok"),
                  expert_ffn=f.int("intermediate_size"), layers=(True,) * layers)
    return _llama_like(f, name, "mixtral", qkv_bias=False, moe=moe)


def _read_qwen2_moe(f: _Fields, name: str) -> ModelSpec:
    layers = f.int("num_hidden_layers")
    shared_ffn = f.int("shared_expert_intermediate_size", 0)
    moe = MoESpec(experts=f.int("num_experts"), top_k=f.int("num_experts_per_tok"),
                  expert_ffn=f.int("moe_intermediate_size"), shared_experts=1 if shared_ffn else 0,
                  shared_ffn=shared_ffn, shared_gate=bool(shared_ffn),
                  layers=_sparse_step_layers(f, layers))
    return _llama_like(f, name, "qwen2_moe", qkv_bias=True, moe=moe)


def _read_qwen3_moe(f: _Fields, name: str) -> ModelSpec:
    layers = f.int("num_hidden_layers")
    moe = MoESpec(experts=f.int("num_experts"), top_k=f.int("num_experts_per_tok"),
                  expert_ffn=f.int("moe_intermediate_size"), layers=_sparse_step_layers(f, layers))
    return _llama_like(f, name, "qwen3_moe", qkv_bias=f.bool("attention_bias", False), qk_norm=True,
                       moe=moe)


def _read_gpt_oss(f: _Fields, name: str) -> ModelSpec:
    layers = f.int("num_hidden_layers")
    top_k = f.int("num_experts_per_tok") if f.has("num_experts_per_tok") else f.int("experts_per_token")
    moe = MoESpec(experts=f.int("num_local_experts"), top_k=top_k, expert_ffn=f.int("intermediate_size"),
                  router_bias=True, expert_bias=True, layers=(True,) * layers)
    bias = f.bool("attention_bias", True)
    return _llama_like(f, name, "gpt_oss", qkv_bias=bias, out_bias=bias, sinks=True, moe=moe)


def _read_deepseek(f: _Fields, name: str, family: str) -> ModelSpec:
    """DeepSeek-V2/V3 and the models built on them: Kimi K2 (kimi_k2) and GLM-5 (glm_moe_dsa, whose sparse
    attention adds an indexer, read from index_*)."""
    hidden = f.int("hidden_size")
    layers = f.int("num_hidden_layers")
    heads = f.int("num_attention_heads")
    mla = MLASpec(q_lora_rank=f.int("q_lora_rank", 0), kv_lora_rank=f.int("kv_lora_rank"),
                  qk_nope_head_dim=f.int("qk_nope_head_dim"), qk_rope_head_dim=f.int("qk_rope_head_dim"),
                  v_head_dim=f.int("v_head_dim"))
    first_dense = f.int("first_k_dense_replace", 0)
    freq = f.int("moe_layer_freq", 1)
    moe = None
    if f.has("n_routed_experts"):
        expert_ffn = f.int("moe_intermediate_size")
        moe = MoESpec(
            experts=f.int("n_routed_experts"),
            top_k=f.int("num_experts_per_tok"),
            expert_ffn=expert_ffn,
            shared_experts=f.int("n_shared_experts", 0),
            shared_ffn=expert_ffn,
            score_correction_bias=f.str("topk_method", "greedy") == "noaux_tc",
            layers=tuple(i >= first_dense and i % freq == 0 for i in range(layers)),
            n_group=f.int("n_group", 1),
            topk_group=f.int("topk_group", 1),
        )
    indexer = None
    if f.has("index_topk"):
        indexer = IndexerSpec(heads=f.int("index_n_heads"), head_dim=f.int("index_head_dim"),
                              topk=f.int("index_topk"))
    attention = AttentionSpec(heads=heads, kv_heads=heads, head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim,
                              qkv_bias=f.bool("attention_bias", False), mla=mla, indexer=indexer)
    return ModelSpec(**_common(
        f, name, family,
        hidden=hidden,
        layers=layers,
        vocab=f.int("vocab_size"),
        attention=attention,
        mlp=MLPSpec(ffn=f.int("intermediate_size"), gated=True, activation=f.str("hidden_act", "silu")),
        moe=moe,
        max_position=f.int("max_position_embeddings", 4096),
        tied_embeddings=f.bool("tie_word_embeddings", False),
        mtp_layers=f.int("num_nextn_predict_layers", 0),
    ))


def _read_minimax_m2(f: _Fields, name: str) -> ModelSpec:
    """MiniMax-M2 (configuration_minimax_m2.py): GQA with head_dim·heads wider than hidden, q/k norms over all
    heads (qk_norm_type per_layer), sigmoid routing with a correction bias, every layer MoE without a shared
    expert (intermediate_size is the expert width), and num_mtp_modules MTP modules."""
    layers = f.int("num_hidden_layers")
    types = f.data.get("attn_type_list")
    if types is not None and (not isinstance(types, list) or any(t != 1 for t in types)):
        raise f.error("attn_type_list", "only full attention (every entry 1) is modelled for minimax_m2")
    norm_type = f.str("qk_norm_type", "per_layer")
    if norm_type not in ("per_layer", "per_head"):
        raise f.error("qk_norm_type", f"expected 'per_layer' or 'per_head', got {norm_type!r}")
    qk_norm = f.bool("use_qk_norm", False)
    shared_ffn = f.int("shared_intermediate_size", 0)
    moe = MoESpec(experts=f.int("num_local_experts"), top_k=f.int("num_experts_per_tok"),
                  expert_ffn=f.int("intermediate_size"), shared_experts=1 if shared_ffn else 0,
                  shared_ffn=shared_ffn, score_correction_bias=f.bool("use_routing_bias", False),
                  layers=(True,) * layers)
    spec = _llama_like(f, name, "minimax_m2", qkv_bias=False, moe=moe,
                       qk_norm=qk_norm and norm_type == "per_head", qk_norm_full=qk_norm and norm_type == "per_layer")
    mtp = f.int("num_mtp_modules", 0) * f.int("mtp_transformer_layers", 1) if f.bool("use_mtp", False) else 0
    return dataclasses.replace(spec, mtp_layers=mtp)


def _read_llama4(f: _Fields, name: str) -> ModelSpec:
    """Llama 4 text model (transformers Llama4TextConfig): routed experts plus one always-on shared expert of
    intermediate_size on every interleave_moe_layer_step-th layer, dense layers of intermediate_size_mlp,
    chunked local attention (attention_chunk_size) on the RoPE layers and global attention on the NoPE
    ones (no_rope_layers: 1 = RoPE; empty = a NoPE layer every no_rope_layer_interval-th)."""
    layers = f.int("num_hidden_layers")
    step = f.int("interleave_moe_layer_step", 1)
    moe_layers = f.int_list("moe_layers") or list(range(step - 1, layers, step))
    expert_ffn = f.int("intermediate_size")
    moe = MoESpec(experts=f.int("num_local_experts"), top_k=f.int("num_experts_per_tok"), expert_ffn=expert_ffn,
                  shared_experts=1, shared_ffn=expert_ffn,
                  layers=tuple(i in set(moe_layers) for i in range(layers)))
    rope = f.int_list("no_rope_layers")
    if rope and len(rope) < layers:
        raise f.error("no_rope_layers", f"expected at least {layers} entries")
    interval = f.int("no_rope_layer_interval", 4)
    rope_layers = sum(rope[:layers]) if rope else sum(1 for i in range(layers) if (i + 1) % interval)
    chunk = f.int("attention_chunk_size", 0)
    data = dict(f.data)
    data.pop("layer_types", None)  # Llama 4's layer_types name chunked/full, already read from no_rope_layers
    spec = _llama_like(_Fields(data, f.file, f.section), name, "llama4", qkv_bias=f.bool("attention_bias", False),
                       moe=moe)
    # use_qk_norm is a weightless L2 norm in Llama 4: no parameters.
    attention = spec.attention
    if chunk:
        attention = dataclasses.replace(attention, sliding_window=chunk, sliding_layers=rope_layers, chunked=True)
    mlp = dataclasses.replace(spec.mlp, ffn=f.int("intermediate_size_mlp"))
    return dataclasses.replace(spec, attention=attention, mlp=mlp)


def _read_qwen3_5_moe(f: _Fields, name: str) -> ModelSpec:
    """Qwen3.5 MoE text model (qwen3_5_moe_text): Gated DeltaNet linear-attention layers between full GQA
    layers (layer_types, else every full_attention_interval-th layer is full), the full layers' query
    projection doubled for the output gate, q/k norms, and experts plus a gated shared expert."""
    layers = f.int("num_hidden_layers")
    if f.data.get("layer_types") is None:
        interval = f.int("full_attention_interval", 4)
        f = _Fields({**f.data, "layer_types": ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                                               for i in range(layers)]}, f.file, f.section)
    linear = LinearAttentionSpec(
        key_heads=f.int("linear_num_key_heads"), value_heads=f.int("linear_num_value_heads"),
        key_head_dim=f.int("linear_key_head_dim"), value_head_dim=f.int("linear_value_head_dim"),
        conv_kernel=f.int("linear_conv_kernel_dim"))
    shared_ffn = f.int("shared_expert_intermediate_size", 0)
    moe = MoESpec(experts=f.int("num_experts"), top_k=f.int("num_experts_per_tok"),
                  expert_ffn=f.int("moe_intermediate_size"), shared_experts=1 if shared_ffn else 0,
                  shared_ffn=shared_ffn, shared_gate=bool(shared_ffn), layers=_sparse_step_layers(f, layers))
    data = {**f.data, "intermediate_size": f.int("intermediate_size", f.int("moe_intermediate_size"))}
    spec = _llama_like(_Fields(data, f.file, f.section), name, "qwen3_5_moe", qkv_bias=f.bool("attention_bias", False),
                       qk_norm=True, moe=moe, linear=linear, output_gate=f.bool("attn_output_gate", False))
    return dataclasses.replace(spec, mtp_layers=f.int("mtp_num_hidden_layers", 0))


def _read_gpt2(f: _Fields, name: str) -> ModelSpec:
    """GPT-2 names; also the GPT-style paper models of the published runs.

    Extensions honoured (data/runs/models/README.md): `num_key_value_heads` (GQA in a gpt2-type file)
    and `_true_activation` (relu / relu2: still a plain two-matrix MLP, so counts are unchanged).
    """
    hidden = f.int("n_embd")
    heads = f.int("n_head")
    inner = f.int("n_inner", 4 * hidden)
    activation = f.str("_true_activation", f.str("activation_function", "gelu_new"))
    attention = AttentionSpec(heads=heads, kv_heads=f.int("num_key_value_heads", heads),
                              head_dim=hidden // heads, qkv_bias=True, out_bias=True)
    return ModelSpec(**_common(
        f, name, "gpt2",
        hidden=hidden,
        layers=f.int("n_layer"),
        vocab=f.int("vocab_size"),
        attention=attention,
        mlp=MLPSpec(ffn=inner, gated=False, bias=True, activation=activation),
        norm="layernorm",
        position="learned",
        max_position=f.int("n_positions", 1024),
        tied_embeddings=f.bool("tie_word_embeddings", True),
    ))


def _read_gpt_neox(f: _Fields, name: str) -> ModelSpec:
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    attention = AttentionSpec(heads=heads, kv_heads=heads, head_dim=hidden // heads, qkv_bias=True,
                              out_bias=True)
    return ModelSpec(**_common(
        f, name, "gpt_neox",
        hidden=hidden,
        layers=f.int("num_hidden_layers"),
        vocab=f.int("vocab_size"),
        attention=attention,
        mlp=MLPSpec(ffn=f.int("intermediate_size"), gated=False, bias=True,
                    activation=f.str("hidden_act", "gelu")),
        norm="layernorm",
        position="rope",
        max_position=f.int("max_position_embeddings", 2048),
        tied_embeddings=f.bool("tie_word_embeddings", False),
    ))


def _read_falcon(f: _Fields, name: str) -> ModelSpec:
    """Falcon (transformers FalconConfig). With new_decoder_architecture (Falcon-40B/180B) attention has
    num_kv_heads groups (multi_query is then ignored) and two LayerNorms per parallel block; the older
    single-norm parallel blocks (Falcon-7B) are refused rather than miscounted."""
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    new_arch = f.bool("new_decoder_architecture", False)
    if not new_arch and f.bool("parallel_attn", True):
        raise ConfigError("Falcon blocks with one shared LayerNorm (parallel_attn without "
                          "new_decoder_architecture) are not modelled", file=f.file, field="new_decoder_architecture")
    kv = f.int("num_kv_heads", heads) if new_arch else (1 if f.bool("multi_query", True) else heads)
    bias = f.bool("bias", False)
    attention = AttentionSpec(heads=heads, kv_heads=kv, head_dim=hidden // heads, qkv_bias=bias, out_bias=bias)
    return ModelSpec(**_common(
        f, name, "falcon",
        hidden=hidden,
        layers=f.int("num_hidden_layers"),
        vocab=f.int("vocab_size"),
        attention=attention,
        mlp=MLPSpec(ffn=f.int("ffn_hidden_size", 4 * hidden), gated=False, bias=bias,
                    activation=f.str("activation", "gelu")),
        norm="layernorm",
        position="alibi" if f.bool("alibi", False) else "rope",
        max_position=f.int("max_position_embeddings", 2048),
        tied_embeddings=f.bool("tie_word_embeddings", True),
    ))


def _read_bloom(f: _Fields, name: str) -> ModelSpec:
    """BLOOM (transformers BloomConfig, which aliases n_embed/n_layer/n_head): MHA with biases, ALiBi, an
    embedding LayerNorm, a 4h GeLU MLP with biases and tied embeddings. ALiBi has no position table; the
    context is the 2048 tokens BLOOM was trained on (bigscience tr11-176B-ml.slurm SEQ_LEN)."""
    hidden = f.int("hidden_size") if f.has("hidden_size") else f.int("n_embed")
    heads = f.int("num_attention_heads") if f.has("num_attention_heads") else f.int("n_head")
    layers = f.int("num_hidden_layers") if f.has("num_hidden_layers") else f.int("n_layer")
    attention = AttentionSpec(heads=heads, kv_heads=heads, head_dim=hidden // heads, qkv_bias=True, out_bias=True)
    return ModelSpec(**_common(
        f, name, "bloom",
        hidden=hidden,
        layers=layers,
        vocab=f.int("vocab_size"),
        attention=attention,
        mlp=MLPSpec(ffn=4 * hidden, gated=False, bias=True, activation="gelu"),
        norm="layernorm",
        position="alibi",
        max_position=f.int("seq_length", 2048),
        tied_embeddings=f.bool("tie_word_embeddings", True),
        embedding_norm=True,
    ))


def _read_opt(f: _Fields, name: str) -> ModelSpec:
    """OPT (transformers OPTConfig): MHA and a ReLU MLP with biases, LayerNorm, learned positions (the table
    has 2 extra rows, OPTLearnedPositionalEmbedding's offset), tied embeddings. Checkpoints whose word
    embeddings are narrower than the model (project_in/out, opt-350m) are refused."""
    hidden = f.int("hidden_size")
    if f.int("word_embed_proj_dim", hidden) != hidden:
        raise f.error("word_embed_proj_dim",
                      "word embeddings narrower than hidden_size (project_in/out) are not modelled")
    heads = f.int("num_attention_heads")
    bias = f.bool("enable_bias", True)
    attention = AttentionSpec(heads=heads, kv_heads=heads, head_dim=hidden // heads, qkv_bias=bias, out_bias=bias)
    return ModelSpec(**_common(
        f, name, "opt",
        hidden=hidden,
        layers=f.int("num_hidden_layers"),
        vocab=f.int("vocab_size"),
        attention=attention,
        mlp=MLPSpec(ffn=f.int("ffn_dim"), gated=False, bias=bias, activation=f.str("activation_function", "relu")),
        norm="layernorm",
        position="learned",
        max_position=f.int("max_position_embeddings", 2048),
        tied_embeddings=f.bool("tie_word_embeddings", True),
    ))


READERS: dict[str, Callable[[_Fields, str], ModelSpec]] = {
    "gpt2": _read_gpt2,
    "gpt_neox": _read_gpt_neox,
    "llama": _read_llama,
    "mistral": _read_mistral,
    "mixtral": _read_mixtral,
    "qwen2": _read_qwen2,
    "qwen2_moe": _read_qwen2_moe,
    "qwen3": _read_qwen3,
    "qwen3_moe": _read_qwen3_moe,
    "qwen3_5_moe": _read_qwen3_5_moe,
    "qwen3_5_moe_text": _read_qwen3_5_moe,
    "deepseek_v2": lambda f, n: _read_deepseek(f, n, "deepseek_v2"),
    "deepseek_v3": lambda f, n: _read_deepseek(f, n, "deepseek_v3"),
    "kimi_k2": lambda f, n: _read_deepseek(f, n, "kimi_k2"),
    "glm_moe_dsa": lambda f, n: _read_deepseek(f, n, "glm_moe_dsa"),
    "gpt_oss": _read_gpt_oss,
    "minimax_m2": _read_minimax_m2,
    "llama4_text": _read_llama4,
    "falcon": _read_falcon,
    "bloom": _read_bloom,
    "opt": _read_opt,
}



def model_from_hf_dict(data: dict[str, Any], *, name: str, file: str = "<config>") -> ModelSpec:
    """Build a ModelSpec from the contents of a Hugging Face config.json; a rule the model breaks is reported
    under the key the file used (num_key_value_heads rather than attention.kv_heads)."""
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object at the top level", file=file)
    f = _Fields(data, file)
    if isinstance(data.get("text_config"), dict) and "model_type" in data["text_config"]:
        f = _Fields(data["text_config"], file, "text_config")
    model_type = f.str("model_type")
    reader = READERS.get(model_type)
    if reader is None:
        raise UnsupportedModelError(model_type, READERS, file)
    try:
        return reader(f, name)
    except ConfigError as e:
        keys = [key for key, spec_field in _KEYS.items() if spec_field == e.field and f.has(key)]
        if not keys or e.file != file:
            raise
        raise ConfigError(f"{e.rule} ({e.field})", file=file, field=f.where(keys[0])) from None


def load_hf_config(path: str | Path, *, name: str | None = None) -> ModelSpec:
    """Read a config.json file; the model is named after the file unless `name` is given."""
    path = Path(path)
    data = read_json(path)
    return model_from_hf_dict(data, name=name or path.stem, file=str(path))
