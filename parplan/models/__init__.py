"""What is trained: model descriptions, Hugging Face config reader, presets."""

from parplan.models.hf import load_hf_config, model_from_hf_dict
from parplan.models.presets import hub_ids, load_model, preset_names
from parplan.models.spec import (
    AttentionSpec,
    Block,
    IndexerSpec,
    LayerKind,
    Linear,
    LinearAttentionSpec,
    MLASpec,
    MLPSpec,
    ModelSpec,
    MoESpec,
    Shard,
)
from parplan.models.yaml_format import load_model_yaml, model_from_yaml_dict

__all__ = [
    "AttentionSpec",
    "Block",
    "IndexerSpec",
    "LayerKind",
    "Linear",
    "LinearAttentionSpec",
    "MLASpec",
    "MLPSpec",
    "MoESpec",
    "ModelSpec",
    "Shard",
    "hub_ids",
    "load_hf_config",
    "load_model",
    "load_model_yaml",
    "model_from_hf_dict",
    "model_from_yaml_dict",
    "preset_names",
]
