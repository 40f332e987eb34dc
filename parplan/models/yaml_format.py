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
from parplan._mapping import Fields
from parplan.models.spec import RANGES, AttentionSpec, MLASpec, MLPSpec, ModelSpec, MoESpec


def _kwargs(cls: type, f: Fields, skip: frozenset[str] = frozenset(),
            optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Keyword arguments for a spec dataclass from its mapping: unknown keys refused, required fields
    present, every value of its annotated type and integers within spec.RANGES.

    `skip` names fields the caller handles; `optional` names required fields the caller defaults.
    """
    fields = {fl.name: fl for fl in dataclasses.fields(cls) if fl.name not in skip}
    f.allow(fields)
    kw: dict[str, Any] = {}
    for name, fl in fields.items():
        required = (fl.default is dataclasses.MISSING and fl.default_factory is dataclasses.MISSING
                    and name not in optional)
        if not (required or f.has(name)):
            continue
        kind = str(fl.type).removesuffix(" | None")
        if kind == "int":
            lo, hi = RANGES[f.where(name)]
            kw[name] = f.int(name, min=lo, max=hi)
        elif kind == "float":
            kw[name] = f.float(name, above=0)
        else:
            kw[name] = getattr(f, kind)(name)
    return kw


_TOP = {"attention", "mlp", "moe"}


def model_from_yaml_dict(data: Any, *, name: str, file: str) -> ModelSpec:
    top = Fields(data, file)
    top.allow({fl.name for fl in dataclasses.fields(ModelSpec)} - {"family", "source"})
    for key in ("hidden", "layers", "vocab", "attention", "mlp"):
        if not top.has(key):
            raise top.error(key, "required field is missing")
    kw = _kwargs(ModelSpec, top.without(*_TOP), optional=frozenset({"name"}),
                 skip=frozenset({"family", "source", *_TOP}))
    hidden, layers = kw["hidden"], kw["layers"]

    att = top.mapping("attention")
    att.allow({fl.name for fl in dataclasses.fields(AttentionSpec)})
    mla = None
    if att.has("mla"):
        mla_kw = _kwargs(MLASpec, att.mapping("mla"), optional=frozenset({"q_lora_rank"}))
        mla_kw.setdefault("q_lora_rank", 0)
        mla = MLASpec(**mla_kw)
    att_kw = _kwargs(AttentionSpec, att.without("mla"), skip=frozenset({"mla"}),
                     optional=frozenset({"kv_heads", "head_dim"}))
    att_kw.setdefault("kv_heads", att_kw["heads"])
    if mla is not None:
        att_kw.setdefault("head_dim", mla.qk_nope_head_dim + mla.qk_rope_head_dim)
    elif hidden % att_kw["heads"] and "head_dim" not in att_kw:
        raise att.error("head_dim", "hidden is not a multiple of heads: give head_dim")
    att_kw.setdefault("head_dim", hidden // att_kw["heads"])
    if att_kw.get("sliding_window") and "sliding_layers" not in att_kw:
        att_kw["sliding_layers"] = layers
    attention = AttentionSpec(mla=mla, **att_kw)

    mlp = MLPSpec(**_kwargs(MLPSpec, top.mapping("mlp")))

    moe = None
    if top.has("moe"):
        raw = top.mapping("moe")
        raw.allow({fl.name for fl in dataclasses.fields(MoESpec)} - {"layers"} | {"first_k_dense", "layer_freq"})
        lo, hi = RANGES["moe.first_k_dense"]
        first = raw.int("first_k_dense", 0, min=lo, max=hi)
        lo, hi = RANGES["moe.layer_freq"]
        freq = raw.int("layer_freq", 1, min=lo, max=hi)
        moe_kw = _kwargs(MoESpec, raw.without("first_k_dense", "layer_freq"), skip=frozenset({"layers"}))
        if moe_kw.get("shared_experts") and not moe_kw.get("shared_ffn"):
            moe_kw["shared_ffn"] = moe_kw["expert_ffn"]
        moe = MoESpec(layers=tuple(i >= first and (i - first) % freq == 0 for i in range(layers)), **moe_kw)

    kw.setdefault("name", name)
    return ModelSpec(family="parplan", attention=attention, mlp=mlp, moe=moe, source=file, **kw)


def load_model_yaml(path: str | Path, *, name: str | None = None) -> ModelSpec:
    path = Path(path)
    data = read_yaml(path)
    return model_from_yaml_dict(data, name=name or path.stem, file=str(path))
