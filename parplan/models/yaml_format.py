"""parplan's own YAML model format: the fields of `ModelSpec`, written out.

Schema (documented in README.md)::

    name: my-model            # optional, defaults to the file name
    hidden: 4096              # model width
    layers: 32                # transformer layers
    vocab: 128256
    max_position: 131072      # optional, default 4096
    tied_embeddings: false    # optional
    norm: rmsnorm             # rmsnorm | layernorm
    position: rope            # rope | learned | alibi
    rope_theta: 500000        # optional
    mtp_layers: 0             # optional, DeepSeek multi-token prediction
    dropout: false            # optional, dropout masks (GPT-2/3 era)
    attention:
      heads: 32
      kv_heads: 8             # optional, default = heads
      head_dim: 128           # optional, default = hidden / heads
      qkv_bias: false         # optional; also out_bias, qk_norm, sinks
      sliding_window: 4096    # optional, with sliding_layers: how many layers use it
      mla: {q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64,
            v_head_dim: 128}  # optional, DeepSeek latent attention
    mlp:
      ffn: 14336
      gated: true             # optional, SwiGLU (true) or plain 2-matrix MLP
      bias: false             # optional
      activation: silu        # optional
    moe:                      # optional
      experts: 8
      top_k: 2
      expert_ffn: 14336
      shared_experts: 0       # optional; shared_ffn (default expert_ffn), shared_gate
      first_k_dense: 0        # optional: the first k layers are dense ...
      layer_freq: 1           # ... and then every layer_freq-th layer is MoE
      n_group: 1              # optional, group-limited routing; topk_group
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from parplan._input import read_yaml
from parplan.errors import ConfigError
from parplan.models.spec import AttentionSpec, MLASpec, MLPSpec, ModelSpec, MoESpec


def _check_keys(d: Any, allowed: set[str], required: set[str], file: str, prefix: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ConfigError(f"expected a mapping, got {d!r}", file=file, field=prefix.rstrip(".") or None)
    for key in d:
        if key not in allowed:
            raise ConfigError(f"unknown field; allowed: {', '.join(sorted(allowed))}", file=file,
                              field=prefix + str(key))
    for key in sorted(required):
        if d.get(key) is None:
            raise ConfigError("required field is missing", file=file, field=prefix + key)
    return d


def _typed(d: dict[str, Any], key: str, kind: type, default: Any, file: str, prefix: str) -> Any:
    value = d.get(key, default)
    if value is None:
        return None
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(f"expected {kind.__name__}, got {value!r}", file=file, field=prefix + key)
    return float(value) if kind is float else value


def _build(cls: type, d: dict[str, Any], file: str, prefix: str, skip: frozenset[str] = frozenset(),
           optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Keyword arguments for a spec dataclass from a dict, checking keys and scalar types.

    `skip` names fields handled by the caller; `optional` names required fields the caller defaults.
    """
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    required = {n for n, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING} - optional
    _check_keys(d, set(fields), required, file, prefix)
    kwargs = {}
    types = {"int": int, "bool": bool, "str": str, "float": float, "int | None": int,
             "str | None": str, "float | None": float}
    for name, f in fields.items():
        if name in d and str(f.type) in types:
            kwargs[name] = _typed(d, name, types[str(f.type)], None, file, prefix)
    return kwargs


def model_from_yaml_dict(data: Any, *, name: str, file: str) -> ModelSpec:
    top = {"name", "hidden", "layers", "vocab", "max_position", "tied_embeddings", "norm", "position",
           "rope_theta", "rope_scaling", "embedding_norm", "mtp_layers", "dropout", "attention", "mlp", "moe", "dtype"}
    _check_keys(data, top, {"hidden", "layers", "vocab", "attention", "mlp"}, file, "")
    kw = _build(ModelSpec, {k: v for k, v in data.items() if k not in ("attention", "mlp", "moe")}, file, "",
                skip=frozenset({"family", "source", "attention", "mlp", "moe"}), optional=frozenset({"name"}))
    hidden, layers = kw["hidden"], kw["layers"]

    att = dict(data["attention"]) if isinstance(data["attention"], dict) else data["attention"]
    _check_keys(att, {f.name for f in dataclasses.fields(AttentionSpec)}, {"heads"}, file, "attention.")
    mla = None
    if att.get("mla") is not None:
        mla_kw = _build(MLASpec, att["mla"], file, "attention.mla.", optional=frozenset({"q_lora_rank"}))
        mla_kw.setdefault("q_lora_rank", 0)
        mla = MLASpec(**mla_kw)
    att_kw = _build(AttentionSpec, {k: v for k, v in att.items() if k != "mla"}, file, "attention.",
                    skip=frozenset({"mla"}), optional=frozenset({"kv_heads", "head_dim"}))
    att_kw.setdefault("kv_heads", att_kw["heads"])
    if mla is not None:
        att_kw.setdefault("head_dim", mla.qk_nope_head_dim + mla.qk_rope_head_dim)
    elif hidden % att_kw["heads"] and "head_dim" not in att_kw:
        raise ConfigError("hidden is not a multiple of heads: give head_dim", file=file,
                          field="attention.head_dim")
    att_kw.setdefault("head_dim", hidden // att_kw["heads"])
    if att_kw.get("sliding_window") and "sliding_layers" not in att_kw:
        att_kw["sliding_layers"] = layers
    attention = AttentionSpec(mla=mla, **att_kw)

    mlp = MLPSpec(**_build(MLPSpec, data["mlp"], file, "mlp."))

    moe = None
    if data.get("moe") is not None:
        raw = data["moe"]
        allowed = {f.name for f in dataclasses.fields(MoESpec)} - {"layers"} | {"first_k_dense", "layer_freq"}
        _check_keys(raw, allowed, {"experts", "top_k", "expert_ffn"}, file, "moe.")
        first = _typed(raw, "first_k_dense", int, 0, file, "moe.")
        freq = _typed(raw, "layer_freq", int, 1, file, "moe.")
        if freq < 1:
            raise ConfigError("must be >= 1", file=file, field="moe.layer_freq")
        moe_kw = _build(MoESpec, {k: v for k, v in raw.items() if k not in ("first_k_dense", "layer_freq")},
                        file, "moe.", skip=frozenset({"layers"}))
        if moe_kw.get("shared_experts") and not moe_kw.get("shared_ffn"):
            moe_kw["shared_ffn"] = moe_kw["expert_ffn"]
        moe = MoESpec(layers=tuple(i >= first and (i - first) % freq == 0 for i in range(layers)), **moe_kw)

    kw.setdefault("name", name)
    return ModelSpec(family="parplan", attention=attention, mlp=mlp, moe=moe, source=file, **kw)


def load_model_yaml(path: str | Path, *, name: str | None = None) -> ModelSpec:
    path = Path(path)
    data = read_yaml(path)
    return model_from_yaml_dict(data, name=name or path.stem, file=str(path))
