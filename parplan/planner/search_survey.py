"""The survey, a search's first pass: every block's valid layouts counted without building them, and its step
time bounded from below by estimate.compute_floor.

The layouts of stacked grid cells are one Layouts whose fields broadcast against each other (_broadcast), so
that each Strategy rule is an array over just the axes it reads; the axes inside a block are then summed out
one at a time (_count_valid). Cells are stacked in padded groups (_survey_groups) so that one pass counts
many. _survey runs as a worker task and reads the search from search_workers._STATE.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.estimate import compute_floor
from parplan.planner.search_grid import _AXES, _BLOCK, SearchSpace, _Cell, _Cells, _fields, _pair_ok, _representatives
from parplan.planner.search_workers import _STATE
from parplan.planner.strategy import RULES, Layouts, p2p_overlap_default, scatter_gather_acts

SURVEY_BLOCKS = 1 << 20
"""Padded blocks per group of cells the survey counts in one pass (_survey_groups): the counting holds a few
arrays of this many blocks times some inner axes (DeepSeek-V3 on 2,048 GPUs: its largest cell alone has
1.0 M blocks)."""
SURVEY_SMALL = 1 << 15
"""Padded blocks below which a survey pass costs about its fixed overhead (a call per rule and filter): cells
of different pipeline depths are stacked together up to this size whatever their padding."""


@dataclass(frozen=True, slots=True)
class _Survey:
    """Valid blocks of some cells: cell index, index in the cell's block grid, valid layouts, step bound."""

    cell: np.ndarray
    flat: np.ndarray
    count: np.ndarray
    bound: np.ndarray


def _broadcast(cells: _Cells, gbs: int, seq: int, space: SearchSpace) -> Layouts:
    """The cells' layouts as one Layouts whose fields broadcast against each other: each field varies along
    its own axis (and the cells') only, so an elementwise rule evaluates to an array over just the axes it
    reads."""
    dims = len(cells.shape)
    count = len(cells.ids)

    def along(axis: str, values: np.ndarray) -> np.ndarray:
        shape = [1] * dims
        shape[1], shape[2 + _AXES.index(axis)] = count, values.shape[1]
        return values.reshape(shape)

    def per_cell(values: np.ndarray) -> np.ndarray:
        return values.reshape((1, count) + (1,) * (dims - 2))

    def const(value: object, dtype: type = np.int64) -> np.ndarray:
        return np.full((1,) * dims, value, dtype=dtype)

    v = dict(zip(_AXES, cells.values, strict=True))
    tp, pp, sp = per_cell(cells.tp), per_cell(cells.pp), along("sp", v["sp"])
    return Layouts(
        tp=tp, pp=pp, cp=along("cp", v["cp"]), ep=along("expert", v["expert"][..., 0]),
        etp=along("expert", v["expert"][..., 1]), vpp=along("schedule", v["schedule"][..., 1]),
        zero=along("zero", v["zero"]), mbs=along("mbs", v["mbs"]), gbs=const(gbs), seq=const(seq), sp=sp,
        recompute=along("recompute", v["recompute"]), recompute_blocks=const(1.0, float), dp_replicate=const(1),
        schedule=along("schedule", v["schedule"][..., 0].astype(np.int8)),
        precision=along("precision", v["precision"]), flash_attention=const(True, bool),
        tp_overlap=along("tp_overlap", v["tp_overlap"]), dispatch=along("dispatch", v["dispatch"]),
        redundant_experts=along("redundant_experts", v["redundant_experts"]),
        ep_overlap=along("ep_overlap", v["ep_overlap"]),
        p2p_overlap=p2p_overlap_default(pp, along("schedule", v["schedule"][..., 0])),
        pp_scatter_gather=space.pp_scatter_gather & scatter_gather_acts(tp, pp, sp),
    )


def _count_valid(factors: list[np.ndarray], shape: tuple[int, ...], keep: int) -> np.ndarray:
    """How many combinations of the trailing axes pass every factor, per combination of the first `keep` axes.

    Each factor is a boolean array broadcastable to `shape` (a rule over just the axes it reads). The trailing
    axes are summed out one at a time (variable elimination), each after multiplying only the factors that
    read it, so a cell's layouts are counted without being built."""
    fs: list[np.ndarray] = []
    for f in factors:
        f = np.asarray(f, dtype=bool)
        if f.all():
            continue  # a rule this grid never breaks (the model has no experts, say): it counts nothing out
        if not f.any():
            return np.zeros(shape[:keep], dtype=np.int64)
        fs.append(f)
    free = 1  # combinations of the axes no factor reads
    # The last axes first: the time-only ones, read by few rules (and those mostly over few other axes).
    for axis in range(len(shape) - 1, keep - 1, -1):
        touching = [f for f in fs if f.shape[axis] > 1]
        if not touching:
            free *= shape[axis]
            continue
        # Boolean factors combine with AND; once an axis is summed out, they are counts (int32: a block
        # holds at most the product of its inner axes, a few hundred layouts).
        product = touching[0]
        for f in touching[1:]:
            product = product & f if product.dtype == f.dtype == bool else product * f
        fs = [f for f in fs if f.shape[axis] == 1] + [product.sum(axis=axis, keepdims=True, dtype=np.int32)]
    # The factors left read only the kept axes: the boolean ones are ANDed smallest first (one byte per
    # element, the result growing to the full block grid only at the last), then the counts multiply in.
    fs.sort(key=lambda f: (f.dtype != bool, f.size))
    counts = np.full((1,) * len(shape), free, dtype=np.int64)
    mask = None
    for f in fs:
        if f.dtype == bool:
            mask = f if mask is None else mask & f
        else:
            counts = counts * f
    if mask is not None:
        counts = counts * mask
    return np.broadcast_to(counts, shape[:keep] + (1,) * (len(shape) - keep)).reshape(shape[:keep])


def _cell_counts(cells: _Cells, model: ModelSpec, cluster: ClusterSpec, gbs: int, seq: int, space: SearchSpace,
                 layout_filter: Callable[[Layouts], np.ndarray] | None) -> np.ndarray:
    """Valid layouts (Strategy rules, the SP/overlap pairing, the layout filter) per block of each of the
    cells: (C, padded block axes...), 0 on the padding."""
    lay = _broadcast(cells, gbs, seq, space)
    factors = [rule.ok(lay, model, cluster) for rule in RULES] + [_pair_ok(lay.tp, lay.sp, lay.tp_overlap)]
    if layout_filter is not None:
        factors.append(layout_filter(lay))
    return _count_valid(factors + cells.padding(), cells.shape, 2 + _BLOCK)[0]


def _survey_groups(cells: list[_Cell], ids: list[int]) -> Iterator[_Cells]:
    """The cells `ids` stacked in groups, deepest pipelines first: a cell joins the group before it while the
    padded group stays within SURVEY_BLOCKS and either within SURVEY_SMALL (a pass over so few blocks costs
    about its fixed overhead, ~1 ms) or padded by at most a quarter (cells of one pipeline depth share their
    schedule axis, so they stack with little padding)."""
    group: list[int] = []
    longest = np.zeros(_BLOCK, dtype=np.int64)
    real = 0
    for i in sorted(ids, key=lambda i: (-cells[i].pp, i)):
        shape = cells[i].block_shape
        grown = np.maximum(longest, shape)
        padded = (len(group) + 1) * math.prod(grown)
        if group and (padded > SURVEY_BLOCKS or padded > max(SURVEY_SMALL, 1.25 * (real + math.prod(shape)))):
            yield _Cells.of(cells, group)
            group, grown, real = [], np.array(shape), 0
        group.append(i)
        longest, real = grown, real + math.prod(shape)
    if group:
        yield _Cells.of(cells, group)


def _survey(cell_ids: list[int]) -> _Survey:
    """Count every block of the given cells and bound the step time of those with a valid layout by
    estimate.compute_floor, which does not read the schedule: it is computed once per block with the schedule
    axis left out, in one call for all the cells (blocks sharing their compute share its evaluation). The
    blocks come in the order of their cell and their index in its block grid."""
    st = _STATE
    model, cluster, space, cells = st["model"], st["cluster"], st["space"], st["cells"]
    gbs, seq = st["gbs"], st["seq"]
    owner, flats, counts, rep_of, reps = [], [], [], [], []
    s_axis = _AXES.index("schedule")
    start = 0
    for group in _survey_groups(cells, cell_ids):
        n = _cell_counts(group, model, cluster, gbs, seq, space, st["filter"])
        found = np.flatnonzero(n)
        of_cell = found // math.prod(n.shape[1:])
        owner.append(group.ids[of_cell])
        flats.append(group.flat_index().ravel()[found])
        counts.append(n.ravel()[found])
        # One representative per block with the schedule at its first value: the floor's inputs.
        inner = math.prod(n.shape[2 + s_axis:])
        rep = found - (found // inner) % n.shape[1 + s_axis] * inner
        used = np.zeros(n.size, dtype=bool)
        used[rep] = True
        first = np.unravel_index(np.flatnonzero(used), n.shape)
        reps.append(_fields(group.tp[first[0]], group.pp[first[0]],
                            [group.values[k][first[0], i] for k, i in enumerate(first[1:])], gbs, seq, space))
        rep_of.append(start + (np.cumsum(used) - 1)[rep])
        start += len(first[0])
    if not flats:
        return _Survey(*(np.empty(0, dtype) for dtype in (np.int64, np.int64, np.int64, float)))
    lay = _representatives({name: np.concatenate([f[name] for f in reps]) for name in reps[0]})
    floor = (compute_floor(model, cluster, lay, st["workload"], st["stack"]) if st["bound"] and len(lay)
             else np.zeros(len(lay)))
    cell, flat = np.concatenate(owner), np.concatenate(flats)
    order = np.argsort(cell, kind="stable")  # each group's blocks are in (cell, index) order already
    return _Survey(cell[order], flat[order], np.concatenate(counts)[order], floor[np.concatenate(rep_of)[order]])
