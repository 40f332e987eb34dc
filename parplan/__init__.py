"""parplan: plan how to split an LLM training run, or a serving deployment, over a GPU cluster.

The public names load on first use (parplan._lazy), so that `parplan --help` or one submodule does not
import the whole cost model.
"""

from parplan._lazy import lazy_exports

__version__ = "0.1.0"

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "parplan.errors": ("ConfigError", "InvalidStrategyError", "NoFeasiblePlanError", "ParplanError",
                       "UnknownPresetError", "UnsupportedModelError"),
    "parplan.hardware.presets": ("load_cluster",),
    "parplan.hardware.spec": ("ClusterSpec",),
    "parplan.models.presets": ("load_model",),
    "parplan.models.spec": ("ModelSpec",),
    "parplan.planner.api": ("plan",),
    "parplan.planner.estimate": ("Estimate", "evaluate"),
    "parplan.planner.strategy": ("Strategy",),
    "parplan.serving.evaluate": ("ServingEstimate", "serve_evaluate"),
    "parplan.serving.plan": ("ServePlan", "serve_plan"),
    "parplan.serving.spec": ("Deployment", "Pool", "Precision", "Workload"),
})
__all__ += ["__version__"]
