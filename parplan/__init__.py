"""parplan: plan how to split an LLM training run over a GPU cluster."""

from parplan.errors import (
    ConfigError,
    InvalidStrategyError,
    NoFeasiblePlanError,
    ParplanError,
    UnknownPresetError,
    UnsupportedModelError,
)
from parplan.hardware import ClusterSpec, load_cluster
from parplan.models import ModelSpec, load_model

__version__ = "0.1.0"

__all__ = [
    "ClusterSpec",
    "ConfigError",
    "InvalidStrategyError",
    "ModelSpec",
    "NoFeasiblePlanError",
    "ParplanError",
    "UnknownPresetError",
    "UnsupportedModelError",
    "__version__",
    "load_cluster",
    "load_model",
]
