"""The layouts of blocks, built: what the search costs and what enumerate_layouts lists.

A block's layouts are every combination of its inner axes (_expand) that passes the Strategy rules (_valid).
The time-only choices (_TIME_ONLY) change the step time but not memory: the layouts are built with them at
their base values, memory is computed once for those, and _time_options expands them after.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.search_grid import (
    _AXES,
    _BLOCK,
    SearchSpace,
    _block_fields,
    _grid,
    _inner,
    _pair_ok,
    _representatives,
)
from parplan.planner.strategy import RULES, Layouts, valid_mask

CHUNK = 1 << 17
"""Layouts per costed batch: bounds peak memory (about 1 KiB of arrays per layout in flight)."""
_TIME_ONLY = ("tp_overlap", "dispatch", "ep_overlap")
"""Inner axes that change the step time but not a rank's peak memory (the dispatcher only adds its device
buffers): a block's peak memory is computed once per layout with them at their base values (no TP overlap,
alltoall, no EP overlap) and expanded after (_time_options; search_cost._settings_memory)."""


def _expand(reps: Layouts, model: ModelSpec, space: SearchSpace) -> tuple[Layouts, np.ndarray]:
    """Every layout of the blocks `reps` stand for (one representative each) over the inner axes that memory
    reads, the time-only ones at their base values, and each layout's block (its index in `reps`); the
    Strategy rules are not applied yet."""
    values = dict(zip(_AXES[_BLOCK:], _inner(model, space), strict=True))
    axes = [a for a in _AXES[_BLOCK:] if a not in _TIME_ONLY]
    grids = [g.ravel() for g in np.meshgrid(*[np.arange(len(values[a])) for a in axes], indexing="ij")]
    k = len(grids[0])
    owner = np.repeat(np.arange(len(reps)), k)
    lay = dataclasses.replace(reps.take(owner), **{a: np.tile(values[a][g], len(reps)) for a, g in
                                                   zip(axes, grids, strict=True)})
    return lay, owner


def _valid(lay: Layouts, model: ModelSpec, cluster: ClusterSpec) -> np.ndarray:
    """Rows of expanded layouts that pass the Strategy rules and the SP/overlap pairing."""
    return np.flatnonzero(valid_mask(lay, model, cluster) & _pair_ok(lay.tp, lay.sp, lay.tp_overlap))


_TIME_ONLY_RULES = tuple(r for r in RULES if r.time_only)
"""The rules that read the time-only fields (the base layouts already pass every other rule)."""


def _time_options(lay: Layouts, model: ModelSpec, cluster: ClusterSpec, space: SearchSpace
                  ) -> tuple[Layouts, np.ndarray]:
    """Every valid combination of `lay` with the space's time-only choices (_TIME_ONLY), and each row's source
    index: a search computes each layout's memory once with their base values and expands it here."""
    n = len(lay)
    values = dict(zip(_AXES[_BLOCK:], _inner(model, space), strict=True))
    options = np.array(list(itertools.product(*(values[axis] for axis in _TIME_ONLY))), np.int64).reshape(-1, 3)
    ok = []
    for t, d, o in options:
        option = dataclasses.replace(lay, tp_overlap=np.full(n, bool(t)), dispatch=np.full(n, d, np.int8),
                                     ep_overlap=np.full(n, bool(o)))
        ok.append(valid_mask(option, model, cluster, _TIME_ONLY_RULES)
                  & _pair_ok(option.tp, option.sp, option.tp_overlap))
    parent, option = np.nonzero(np.stack(ok, axis=1))
    wide = dataclasses.replace(lay.take(parent), tp_overlap=options[option, 0].astype(bool),
                               dispatch=options[option, 1].astype(np.int8), ep_overlap=options[option, 2].astype(bool))
    return wide, parent


def enumerate_layouts(model: ModelSpec, cluster: ClusterSpec, gbs: int, seq: int, space: SearchSpace,
                      chunk: int = CHUNK) -> Iterator[Layouts]:
    """Every layout of the space that passes the Strategy rules, with the time-only fields (_TIME_ONLY) at
    their base values (off, alltoall, off), which carry the memory of every setting of them; in chunks of at
    most `chunk`, built block by block as the search builds them."""
    cells = list(_grid(model, cluster, gbs, seq, space))
    pending: list[Layouts] = []
    size = 0
    for cell in cells:
        blocks = math.prod(cell.block_shape)
        step = max(1, chunk // math.prod(cell.shape[_BLOCK:]))
        for lo in range(0, blocks, step):
            flat = np.arange(lo, min(lo + step, blocks))
            lay, _ = _expand(_representatives(_block_fields(cell, flat, gbs, seq, space)), model, space)
            pending.append(lay.take(_valid(lay, model, cluster)))
            size += len(pending[-1])
            while size >= chunk:
                merged = _concat_all(pending)
                yield merged.take(np.arange(chunk))
                pending = [merged.take(np.arange(chunk, len(merged)))]
                size = len(pending[0])
    if size:
        yield _concat_all(pending)


def _concat_all(parts: list[Layouts]) -> Layouts:
    return Layouts(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(Layouts)})
