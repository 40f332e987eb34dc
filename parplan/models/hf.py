"""Read a Hugging Face `config.json` into a `ModelSpec`.

Field meanings and per-family defaults follow ``reference/ecosystem.md`` §A1 (transformers'
configuration classes). Both the old keys (`rope_scaling`, `torch_dtype`) and the transformers-v5 ones
(`rope_parameters`, `dtype`) are accepted; multimodal wrappers are unwrapped from `text_config`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from parplan._input import read_json
from parplan.errors import ConfigError, UnsupportedModelError
from parplan.models.spec import AttentionSpec, MLASpec, MLPSpec, ModelSpec, MoESpec

_MISSING = object()


class _Fields:
    """Typed access to a config dict; every error names the file and the field."""

    def __init__(self, data: dict[str, Any], file: str) -> None:
        self.data = data
        self.file = file

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def _get(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise ConfigError("required field is missing", file=self.file, field=key)
            return default
        return value

    def int(self, key: str, default: Any = _MISSING) -> int:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise ConfigError(f"expected an integer, got {value!r}", file=self.file, field=key)
        return int(value)

    def float(self, key: str, default: Any = _MISSING) -> float:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"expected a number, got {value!r}", file=self.file, field=key)
        return float(value)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"expected true or false, got {value!r}", file=self.file, field=key)
        return value

    def str(self, key: str, default: Any = _MISSING) -> str:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise ConfigError(f"expected a string, got {value!r}", file=self.file, field=key)
        return value

    def int_list(self, key: str) -> list[int]:
        value = self._get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
            raise ConfigError(f"expected a list of integers, got {value!r}", file=self.file, field=key)
        return value


def _rope(f: _Fields) -> tuple[float | None, str | None]:
    """rope_theta and scaling type from either the legacy or the v5 keys."""
    params = f.data.get("rope_parameters")
    if params is None:
        params = f.data.get("rope_scaling")
    if params is not None and not isinstance(params, dict):
        key = "rope_parameters" if "rope_parameters" in f.data else "rope_scaling"
        raise ConfigError(f"expected a mapping, got {params!r}", file=f.file, field=key)
    params = params or {}
    theta = params.get("rope_theta", f.data.get("rope_theta", f.data.get("rotary_emb_base")))
    if theta is not None and (isinstance(theta, bool) or not isinstance(theta, (int, float))):
        raise ConfigError(f"expected a number, got {theta!r}", file=f.file, field="rope_theta")
    kind = params.get("rope_type", params.get("type"))
    if kind == "default":
        kind = None
    return (float(theta) if theta is not None else None), kind


def _dtype(f: _Fields) -> str | None:
    value = f.data.get("dtype", f.data.get("torch_dtype"))
    return str(value) if value is not None else None


_DROPOUT_KEYS = ("attn_pdrop", "resid_pdrop", "attention_dropout", "hidden_dropout", "hidden_dropout_prob")


def _dropout(f: _Fields) -> bool:
    return any(f.float(key, 0.0) > 0 for key in _DROPOUT_KEYS)


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


def _llama_like(f: _Fields, name: str, family: str, *, qkv_bias: bool, qk_norm: bool = False,
                moe: MoESpec | None = None, out_bias: bool = False, sinks: bool = False,
                mlp_bias: bool = False) -> ModelSpec:
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    layers = f.int("num_hidden_layers")
    sliding_window = None
    sliding_layers = 0
    layer_types = f.data.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers:
            raise ConfigError(f"expected a list of {layers} layer types", file=f.file, field="layer_types")
        sliding_layers = sum(1 for t in layer_types if t == "sliding_attention")
    elif f.data.get("sliding_window") is not None and f.data.get("use_sliding_window", True):
        # Mistral v0.1 style: every layer slides (Qwen sets use_sliding_window: false).
        sliding_layers = layers
    if sliding_layers:
        sliding_window = f.int("sliding_window")
    attention = AttentionSpec(
        heads=heads,
        kv_heads=f.int("num_key_value_heads", heads),
        head_dim=f.int("head_dim", hidden // heads),
        qkv_bias=qkv_bias,
        out_bias=out_bias,
        qk_norm=qk_norm,
        sinks=sinks,
        sliding_window=sliding_window,
        sliding_layers=sliding_layers,
    )
    return ModelSpec(**_common(
        f, name, family,
        hidden=hidden,
        layers=layers,
        vocab=f.int("vocab_size"),
        attention=attention,
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
    dense = set(f.int_list("mlp_only_layers"))
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
    attention = AttentionSpec(heads=heads, kv_heads=heads, head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim,
                              qkv_bias=f.bool("attention_bias", False), mla=mla)
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
    "deepseek_v2": lambda f, n: _read_deepseek(f, n, "deepseek_v2"),
    "deepseek_v3": lambda f, n: _read_deepseek(f, n, "deepseek_v3"),
    "gpt_oss": _read_gpt_oss,
}


def model_from_hf_dict(data: dict[str, Any], *, name: str, file: str = "<config>") -> ModelSpec:
    """Build a ModelSpec from the contents of a Hugging Face config.json."""
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object at the top level", file=file)
    text = data.get("text_config")
    if isinstance(text, dict) and "model_type" in text:
        data = text
    model_type = data.get("model_type")
    if model_type is None:
        raise ConfigError("required field is missing", file=file, field="model_type")
    reader = READERS.get(model_type)
    if reader is None:
        raise UnsupportedModelError(str(model_type), READERS, file)
    return reader(_Fields(data, file), name)


def load_hf_config(path: str | Path, *, name: str | None = None) -> ModelSpec:
    """Read a config.json file; the model is named after the file unless `name` is given."""
    path = Path(path)
    data = read_json(path)
    return model_from_hf_dict(data, name=name or path.stem, file=str(path))
