"""What it runs on: GPU, node and cluster specs, presets, and kernel/collective time models."""

from parplan.hardware.efficiency import (
    Collective,
    attention_efficiency,
    collective_time,
    gemm_efficiency,
    gemm_time,
    memory_bound_time,
)
from parplan.hardware.presets import cluster_from_dict, load_cluster, preset_names
from parplan.hardware.spec import ClusterSpec, GPUSpec, LinkSpec

__all__ = [
    "ClusterSpec",
    "Collective",
    "GPUSpec",
    "LinkSpec",
    "attention_efficiency",
    "cluster_from_dict",
    "collective_time",
    "gemm_efficiency",
    "gemm_time",
    "load_cluster",
    "memory_bound_time",
    "preset_names",
]
