"""How the model is split: Strategy, the cost model per parallel dimension, schedules and search."""

from parplan.planner.estimate import Estimate, Evaluation, evaluate, evaluate_layouts
from parplan.planner.strategy import PRECISIONS, RECOMPUTE, SCHEDULES, Layouts, Strategy, valid_mask

__all__ = [
    "PRECISIONS",
    "RECOMPUTE",
    "SCHEDULES",
    "Estimate",
    "Evaluation",
    "Layouts",
    "Strategy",
    "evaluate",
    "evaluate_layouts",
    "valid_mask",
]
