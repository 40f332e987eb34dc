"""How the model is split: Strategy, the cost model per parallel dimension, schedules and search.

Public names load on first use (parplan._lazy).
"""

from parplan._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "parplan.planner.estimate": ("Estimate", "Evaluation", "evaluate", "evaluate_layouts"),
    "parplan.planner.strategy": ("PRECISIONS", "RECOMPUTE", "SCHEDULES", "Layouts", "Strategy", "valid_mask"),
})
