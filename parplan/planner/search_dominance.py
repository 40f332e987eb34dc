"""Dominance between sibling layouts: what spares the search the step time of fitting layouts a sibling beats.

Siblings are layouts equal in every field but one of _DOMINANCE. Where that field's value in one is never slower than in
the other (it recomputes no more, overlaps the EP all-to-all, or dispatches in fp8 through DeepEP), ranking by
throughput needs no step time for the slower one. Each relation is a strict order, so that every layout
dropped has a kept sibling, or a chain of them, never slower: the best layout is unchanged.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from parplan.models.spec import ModelSpec
from parplan.planner.estimate import group_rows as _group_rows
from parplan.planner.recompute import recomputes_no_more
from parplan.planner.strategy import DISPATCHERS, RECOMPUTE, Layouts
from parplan.stacks.spec import StackSpec

_DOMINANCE = ("recompute", "ep_overlap", "dispatch")
"""The inner fields whose values dominate each other (_dominance): every other field held equal, a sibling
with the dominating value is never slower."""


def _recompute_beats(model: ModelSpec, stack: StackSpec) -> np.ndarray:
    """beats[a, b] over the recompute names (strategy.RECOMPUTE codes): in `stack`, name a re-runs no more than
    name b in any layer (recompute.recomputes_no_more), so that, the rest held equal, a is never slower
    (estimate.py adds what recompute re-runs to the backward, nothing else). Two names the stack makes the same
    kind: the lower code beats the higher, so that the relation stays a strict order."""
    n = len(RECOMPUTE)
    beats = np.zeros((n, n), dtype=bool)
    for a, b in itertools.permutations(range(n), 2):
        name_a, name_b = RECOMPUTE[a], RECOMPUTE[b]
        if name_a not in stack.recompute or name_b not in stack.recompute:
            continue
        kind_a, kind_b = stack.recompute[name_a], stack.recompute[name_b]
        if recomputes_no_more(model, kind_a, kind_b):
            beats[a, b] = a < b or not recomputes_no_more(model, kind_b, kind_a)
    return beats


def _dominance(model: ModelSpec, stack: StackSpec) -> tuple[tuple[str, np.ndarray], ...]:
    """(field, dominators) per _DOMINANCE field: dominators[b] is the bit mask of the values that beat value b.
    EP overlap only widens the window the all-to-all hides behind (comm.ep_layer), and an fp8 DeepEP dispatch
    only shrinks DeepEP's forward dispatch bytes: the sibling with either on is never slower."""
    dispatch = np.zeros((len(DISPATCHERS),) * 2, dtype=bool)
    dispatch[DISPATCHERS.index("deepep-fp8"), DISPATCHERS.index("deepep")] = True
    beats = {"recompute": _recompute_beats(model, stack), "ep_overlap": np.array([[False, False], [True, False]]),
             "dispatch": dispatch}
    weights = {name: 1 << np.arange(len(b), dtype=np.int64) for name, b in beats.items()}
    return tuple((name, (beats[name] * weights[name][:, None]).sum(axis=0)) for name in _DOMINANCE)


def _undominated(lay: Layouts, dominance: tuple[tuple[str, np.ndarray], ...]) -> np.ndarray:
    """Indices of the layouts (all fitting) that no kept sibling beats by a dominance rule (_dominance):
    ranking for throughput needs no step time for them, and the best layout is unchanged (each one dropped has
    a kept sibling, or a chain of them, never slower: every rule is a strict order)."""
    keep = np.ones(len(lay), dtype=bool)
    names = [f.name for f in dataclasses.fields(Layouts)]
    for name, dominators in dominance:
        values = getattr(lay, name).astype(np.int64)
        _, group = _group_rows([getattr(lay, n) for n in names if n != name])
        present = np.zeros(group.max() + 1, dtype=np.int64)
        np.bitwise_or.at(present, group[keep], 1 << values[keep])
        keep &= (present[group] & dominators[values]) == 0
    return np.flatnonzero(keep)
