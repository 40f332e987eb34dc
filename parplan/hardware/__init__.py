"""What it runs on: GPU, node and cluster specs, presets, and kernel/collective time models.

Public names load on first use (parplan._lazy).
"""

from parplan._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "parplan.hardware.efficiency": ("Collective", "attention_efficiency", "collective_time", "gemm_efficiency",
                                    "gemm_time", "memory_bound_time"),
    "parplan.hardware.presets": ("cluster_from_dict", "load_cluster", "preset_names"),
    "parplan.hardware.spec": ("ClusterSpec", "GPUSpec", "LinkSpec"),
})
