"""parplan: plan how to split an LLM training run, or a serving deployment, over a GPU cluster."""

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
from parplan.planner import Estimate, Strategy, evaluate
from parplan.planner.api import plan
from parplan.serving import (
    Deployment,
    Pool,
    Precision,
    ServePlan,
    ServingEstimate,
    Workload,
    serve_evaluate,
    serve_plan,
)

__version__ = "0.1.0"

__all__ = [
    "ClusterSpec",
    "ConfigError",
    "Deployment",
    "Estimate",
    "InvalidStrategyError",
    "ModelSpec",
    "NoFeasiblePlanError",
    "ParplanError",
    "Pool",
    "Precision",
    "ServePlan",
    "ServingEstimate",
    "Strategy",
    "UnknownPresetError",
    "UnsupportedModelError",
    "Workload",
    "__version__",
    "evaluate",
    "load_cluster",
    "load_model",
    "plan",
    "serve_evaluate",
    "serve_plan",
]
