"""Software stacks: what the user runs (framework and its cost-changing settings), as an input of the cost
model; presets in parplan/data/stacks/, user stack files on top of them."""

from parplan.stacks.presets import DEFAULT_STACK, load_stack, stack_from_dict, stack_names
from parplan.stacks.spec import StackSpec

__all__ = ["DEFAULT_STACK", "StackSpec", "load_stack", "stack_from_dict", "stack_names"]
