"""What is trained: model descriptions, Hugging Face config reader, presets.

Public names load on first use (parplan._lazy).
"""

from parplan._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "parplan.models.hf": ("load_hf_config", "model_from_hf_dict"),
    "parplan.models.presets": ("hub_ids", "load_model", "preset_names"),
    "parplan.models.spec": ("AttentionSpec", "Block", "IndexerSpec", "LayerKind", "Linear", "LinearAttentionSpec",
                            "MLASpec", "MLPSpec", "ModelSpec", "MoESpec", "Shard"),
    "parplan.models.yaml_format": ("load_model_yaml", "model_from_yaml_dict"),
})
