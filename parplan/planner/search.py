"""`plan`: every valid layout of a model on a cluster, ranked, by branch and bound over blocks of layouts.

The space is the cartesian product of every degree and setting the Strategy rules allow (tp, pp, cp, ep, etp,
vpp with its schedule, zero, sp, recompute, every divisor of the per-replica batch as micro-batch, precision,
TP overlap, dispatch, EP overlap, redundant experts) under the user's restrictions; nothing is sampled. The
search cuts it into blocks: a (tp, pp, cp) with one expert grid, schedule, micro-batch size, precision,
redundancy and SP setting, inside which only the estimate.BOUND_FREE choices vary (zero, recompute, TP
overlap, dispatch, EP overlap).

1. Survey: every block's valid layouts are counted without building them (the Strategy rules evaluated over
   a grid cell's axes broadcast against each other, then summed: _count_valid), and its step time is
   bounded from below by estimate.compute_floor (the whole model's compute over the pipeline ranks).
2. Cost, in the order of the floors: each bound is computed only where the cheaper one before it is within
   the limit, the step time of the `keep`-th best layout found so far: estimate.step_time_bound (the
   pipeline of compute alone), then estimate.time_options_bound (the pipeline with the least communication
   the block allows); the blocks still within it are costed through the same `evaluate_layouts` that
   `explain` uses (memory first; the time of those that fit and that no sibling provably beats,
   _DOMINANCE). A block bounded above the limit cannot hold a better layout: it is proved no better without
   being costed, and so is every block after the first whose floor is above it.
Every bound is computed through the cost functions themselves and rests on invariants stated where it is
computed and tested as properties (tests/test_bound.py). Cells and costing tasks are spread over the CPUs
(forked workers) for large spaces. The answer is the exhaustive search's: tests compare it with a scalar brute
force and with the search run without bounds.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from parplan.errors import ConfigError, NoFeasiblePlanError
from parplan.hardware.spec import ClusterSpec
from parplan.limits import MAX_PLAN_GPUS
from parplan.models.spec import ModelSpec
from parplan.planner.estimate import (
    Estimate,
    compute_floor,
    device_gib,
    evaluate_layouts,
    peak_memory,
    required_memory_gib,
    step_time_bound,
    time_options_bound,
)
from parplan.planner.estimate import group_rows as _group_rows
from parplan.planner.recompute import recomputes_no_more
from parplan.planner.strategy import (
    DISPATCHERS,
    PRECISIONS,
    RECOMPUTE,
    RULES,
    SCHEDULES,
    Layouts,
    p2p_overlap_default,
    scatter_gather_acts,
    valid_mask,
)
from parplan.planner.workload import UNIFORM, Workload
from parplan.stacks.presets import EXPANDABLE_SEGMENTS, load_stack, with_expandable_segments
from parplan.stacks.spec import StackSpec
from parplan.stacks.support import restrict_space, stack_filter

OBJECTIVES = ("throughput", "memory", "cost")
CHUNK = 1 << 17
"""Layouts per costed batch: bounds peak memory (about 1 KiB of arrays per layout in flight)."""
FIRST_BATCH = 1 << 12
"""Layouts in a task's first costed batch; each next batch is four times larger, up to `chunk`. A batch costs
about 10 ms plus 2.5 µs per layout on one core (llama3.1-405b on 16,384 GPUs), so smaller ones would cost more
in fixed costs than they save by tightening the limit sooner."""
FIRST_TASK_BLOCKS = 1 << 13
TASK_BLOCKS = 1 << 14
"""Blocks per costing task, in the order of the survey's floor: the first task runs alone and sets the limit
the others are cut by, so it takes enough blocks that the best of them (costed first, by their tighter bounds)
is near the final best (llama3.1-405b on 16,384 GPUs: 4,096 find it, 64 a plan 4.4 times slower); the next
grow fourfold up to this (each task bounds its blocks in a few calls, whose fixed costs larger tasks
amortise). The first takes 8,192: each task pays about 15 ms of fixed costs (one call of each bound, and of
memory and time per batch), as much as bounding ~4,000 blocks; llama3.1-405b on 16,384 GPUs has 7,356 blocks
whose floor is within its final limit, which 4,096 left to a second task (2 more bound calls and 2 more
batches)."""
SLACK = 1e-9
"""Relative margin on every skip: a block is proved no better only when its bound exceeds the threshold by
more than float rounding could account for."""
PARALLEL_MIN = 1 << 25
"""Below this many candidate layouts (before the rules), the search runs in-process: forking workers, and each
evaluating its own share of the compute, costs more than it saves (llama3.1-405b on 16,384 GPUs, 2.6 M
candidates, is faster in-process on 2 cores; DeepSeek-V3 on 2,048, 860 M, is not)."""
SURVEY_BLOCKS = 1 << 20
"""Padded blocks per group of cells the survey counts in one pass (_survey_groups): the counting holds a few
arrays of this many blocks times some inner axes (DeepSeek-V3 on 2,048 GPUs: its largest cell alone has
1.0 M blocks)."""
SURVEY_SMALL = 1 << 15
"""Padded blocks below which a survey pass costs about its fixed overhead (a call per rule and filter): cells
of different pipeline depths are stacked together up to this size whatever their padding."""
MAX_BLOCKS = 1 << 25
"""Searches over more blocks than this (seven times DeepSeek-V3's full space on 2,048 GPUs) are refused up
front: counting and bounding every block takes about a microsecond each on one core."""
MAX_LAYERS = 1024
"""Models deeper than this are refused by the search: eight times the deepest published LLM (Llama 3.1 405B,
126 layers); the interleaved schedule alone would offer ~layers·ln(layers) virtual-stage settings."""


def _divisors(n: int) -> list[int]:
    """Divisors of n in increasing order, by trial division up to √n."""
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """Allowed values per dimension; None means every value the rules allow."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    etp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    zero: tuple[int, ...] = (0, 1, 2, 3)
    sp: tuple[bool, ...] = (False, True)
    recompute: tuple[str, ...] = RECOMPUTE
    mbs: tuple[int, ...] | None = None
    schedule: tuple[str, ...] = SCHEDULES
    precision: tuple[str, ...] = ("bf16",)
    tp_overlap: tuple[bool, ...] = (False, True)
    dispatch: tuple[str, ...] = DISPATCHERS
    """MoE token dispatch modes (dense models only take alltoall)."""
    redundant_experts: tuple[int, ...] = (0,)
    """EPLB redundant expert slots per MoE layer to consider (each a multiple of ep)."""
    ep_overlap: tuple[bool, ...] = (False, True)
    """Megatron's EP all-to-all overlap on or off (MoE only; the rules keep it where Megatron allows it)."""
    pp_scatter_gather: bool = False
    """The pipeline engine partitions stage tensors over TP without SP (DeepSpeed's does: `plan --framework
    deepspeed` sets this); Megatron-Core and torchtitan send them whole (Strategy.pp_scatter_gather)."""
    tp_in_domain: bool = True
    """Unless tp (etp) values are listed explicitly, keep tp and etp inside one scale-up domain: a TP group
    on the NIC all-reduces every layer's activations over it, which no published large run does."""
    max_memory_fraction: float = 1.0
    """A plan must need at most this share of GPU memory (after allocator headroom and CUDA context)."""

    def memory_cap_gib(self, cluster: ClusterSpec) -> float:
        """The most GiB a plan may need on `cluster`'s GPUs."""
        return cluster.gpu.hbm_gib * self.max_memory_fraction

    def allows(self, name: str, value: object) -> bool:
        allowed = getattr(self, name)
        return allowed is None or value in allowed


# ------------------------------------------------------------------------------------------------ blocks

_AXES = ("cp", "expert", "schedule", "mbs", "precision", "redundant_experts", "sp",
         "zero", "tp_overlap", "recompute", "dispatch", "ep_overlap")
"""The axes of a grid cell's layouts: the first _BLOCK of them pick a block, the rest (estimate.BOUND_FREE)
vary inside it. expert holds (ep, etp) pairs and schedule (schedule, vpp) pairs."""
_BLOCK = 7
_TIME_ONLY = ("tp_overlap", "dispatch", "ep_overlap")
"""Inner axes that change the step time but not memory: a block's memory is computed once per layout with
them at their base values (no TP overlap, alltoall, no EP overlap) and expanded after (_time_options)."""


@dataclass(frozen=True, slots=True)
class _Cell:
    """One (tp, pp) of the grid and the values each axis takes with it (_AXES order). The values of an axis
    may not all go together (an mbs that does not divide one cp's batch): the rules count those out."""

    tp: int
    pp: int
    values: tuple[np.ndarray, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.values)

    @property
    def block_shape(self) -> tuple[int, ...]:
        return self.shape[:_BLOCK]


def _pair_ok(tp: np.ndarray, sp: np.ndarray, tp_overlap: np.ndarray) -> np.ndarray:
    """The search's own rule on SP and TP overlap: both are moot at tp = 1 (Strategy normalises them off,
    so only the off setting is searched), and overlap needs SP."""
    return ((tp > 1) | ~(sp | tp_overlap)) & (sp | ~tp_overlap)


def _inner(model: ModelSpec, space: SearchSpace) -> tuple[np.ndarray, ...]:
    """The values of the inner axes (_AXES after _BLOCK), the same in every cell."""
    moe = model.moe is not None
    return (np.array(space.zero, dtype=np.int64), np.array(space.tp_overlap, dtype=bool),
            np.array([RECOMPUTE.index(r) for r in space.recompute], dtype=np.int8),
            np.array([DISPATCHERS.index(d) for d in space.dispatch] if moe else [0], dtype=np.int8),
            np.array(space.ep_overlap if moe else (False,), dtype=bool))


def _grid(model: ModelSpec, cluster: ClusterSpec, gbs: int, seq: int, space: SearchSpace) -> Iterator[_Cell]:
    """Every (tp, pp) with the values each other axis may take with it (cp first: a cell holds every cp, so
    that the rules are evaluated over many layouts at once)."""
    g = cluster.gpus
    moe = model.moe
    dom = cluster.scaleup_domain
    inner = _inner(model, space)
    precision = np.array([PRECISIONS.index(p) for p in space.precision], dtype=np.int8)
    redundant = np.array(space.redundant_experts if moe else (0,), dtype=np.int64)
    sps = np.array(sorted(set(space.sp)), dtype=bool)
    divisors = _divisors(g)
    for tp in divisors:
        if not space.allows("tp", tp) or model.attention.kv_heads % tp or model.attention.heads % tp:
            continue
        if space.tp is None and space.tp_in_domain and tp > dom:
            continue
        for pp in _divisors(g // tp):
            if not space.allows("pp", pp) or pp > model.layers:
                continue
            cps = [cp for cp in _divisors(g // (tp * pp)) if space.allows("cp", cp)
                   and not (cp > 1 and seq % (2 * cp)) and gbs % (g // (tp * pp * cp)) == 0]
            per_stage = g // pp
            eps = [1] if moe is None else [e for e in _divisors(moe.experts) if space.allows("ep", e)]
            etps = [1] if moe is None else [x for x in _divisors(moe.expert_ffn) if space.allows("etp", x)
                                            and (space.etp is not None or not space.tp_in_domain or x <= dom)]
            expert = [(e, x) for e in eps for x in etps if per_stage % (e * x) == 0]
            mbs = sorted({b for cp in cps for b in _divisors(gbs // (g // (tp * pp * cp))) if space.allows("mbs", b)})
            sched = []
            for s in space.schedule:
                code = SCHEDULES.index(s)
                if s == "1f1b":
                    sched.append((code, 1))
                elif pp > 1 and s == "interleaved":
                    sched += [(code, v) for v in range(2, model.layers // pp + 1)]
                elif pp > 1 and s == "dualpipev" and 2 * pp <= model.layers:
                    sched.append((code, 2))
                elif pp > 1 and s in ("zb-h1", "dualpipe"):
                    sched.append((code, 1))
            sched = [(s, v) for s, v in sched if space.allows("vpp", v)]
            if not (cps and expert and mbs and sched):
                continue
            values = (np.array(cps, dtype=np.int64), np.array(expert, dtype=np.int64).reshape(-1, 2),
                      np.array(sched, dtype=np.int64), np.array(mbs, dtype=np.int64), precision, redundant, sps,
                      *inner)
            yield _Cell(tp, pp, values)


@dataclass(frozen=True, slots=True)
class _Cells:
    """Grid cells stacked along one axis, each axis's values padded to the longest with the cell's first value
    (the padding is counted out: _padding), so that the survey evaluates the rules over many cells in one pass
    instead of one numpy call per rule and cell."""

    ids: np.ndarray
    """The cells' indices in the search's list."""
    tp: np.ndarray
    pp: np.ndarray
    values: tuple[np.ndarray, ...]
    """Per axis (_AXES order): (C, L) values, (C, L, 2) for the expert and schedule pairs."""
    lengths: np.ndarray
    """(C, axes) how many of each axis's values are the cell's own (the rest is padding)."""

    @classmethod
    def of(cls, cells: list[_Cell], ids: list[int]) -> _Cells:
        picked = [cells[i] for i in ids]
        lengths = np.array([c.shape for c in picked], dtype=np.int64).reshape(len(picked), len(_AXES))
        values = []
        for axis, longest in enumerate(lengths.max(axis=0).tolist()):
            rows = [c.values[axis] for c in picked]
            if any(len(r) < longest for r in rows):
                rows = [np.concatenate([r, np.repeat(r[:1], longest - len(r), axis=0)]) for r in rows]
            values.append(np.stack(rows))
        return cls(np.array(ids, dtype=np.int64), np.array([c.tp for c in picked], dtype=np.int64),
                   np.array([c.pp for c in picked], dtype=np.int64), tuple(values), lengths)

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid the rules are evaluated over: a leading axis of one (a broadcast Layouts' length, which the
        filters' np.ones(len(lay)) broadcast from, is then 1), the cells, then the padded axes."""
        return (1, len(self.ids), *(v.shape[1] for v in self.values))

    def flat_index(self) -> np.ndarray:
        """(C, padded block axes...) each block's index in its own cell's (unpadded) block grid."""
        lengths = self.lengths[:, :_BLOCK]
        strides = np.ones_like(lengths)
        strides[:, :-1] = np.cumprod(lengths[:, :0:-1], axis=1)[:, ::-1]
        shape = self.shape[1:2 + _BLOCK]
        out = np.zeros(shape, dtype=np.int64)
        for axis in range(_BLOCK):
            along = [1] * len(shape)
            along[0], along[1 + axis] = len(self.ids), shape[1 + axis]
            out = out + (np.arange(shape[1 + axis]) * strides[:, axis, None]).reshape(along)
        return out

    def padding(self) -> list[np.ndarray]:
        """Factors that are False on the padded values of each axis some cell has fewer values of."""
        out = []
        for axis, longest in enumerate(self.shape[2:]):
            if (self.lengths[:, axis] < longest).any():
                shape = [1] * len(self.shape)
                shape[1], shape[2 + axis] = len(self.ids), longest
                out.append((np.arange(longest) < self.lengths[:, axis, None]).reshape(shape))
        return out


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


def _fields(tp: np.ndarray, pp: np.ndarray, picked: list[np.ndarray], gbs: int, seq: int, space: SearchSpace
            ) -> dict[str, np.ndarray]:
    """The fields fixed by blocks of (tp, pp) and the values `picked` of each block axis (_AXES[:_BLOCK])."""
    c, e, s, b, x, r, p = picked
    n = len(tp)

    def full(value: object, dtype: type = np.int64) -> np.ndarray:
        return np.full(n, value, dtype=dtype)

    return {"tp": tp, "pp": pp, "cp": c, "ep": e[:, 0], "etp": e[:, 1],
            "vpp": s[:, 1], "schedule": s[:, 0].astype(np.int8), "mbs": b, "gbs": full(gbs), "seq": full(seq),
            "precision": x, "redundant_experts": r, "sp": p, "flash_attention": full(True, bool),
            "recompute_blocks": full(1.0, float), "dp_replicate": full(1),
            "p2p_overlap": p2p_overlap_default(pp, s[:, 0]),
            "pp_scatter_gather": space.pp_scatter_gather & scatter_gather_acts(tp, pp, p)}


def _block_fields(cell: _Cell, flat: np.ndarray, gbs: int, seq: int, space: SearchSpace) -> dict[str, np.ndarray]:
    """The fields fixed by each of the cell's blocks `flat` (indices into its block grid)."""
    index = np.unravel_index(flat, cell.block_shape)
    n = len(flat)
    return _fields(np.full(n, cell.tp, dtype=np.int64), np.full(n, cell.pp, dtype=np.int64),
                   [cell.values[i][j] for i, j in enumerate(index)], gbs, seq, space)


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
    dispatch = [DISPATCHERS.index(d) for d in space.dispatch] if model.moe else [0]
    options = np.array([(t, d, o) for t in space.tp_overlap for d in dispatch
                        for o in (space.ep_overlap if model.moe else (False,))], dtype=np.int64).reshape(-1, 3)
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


# ------------------------------------------------------------------------------------------------ result

@dataclass(frozen=True, slots=True)
class PlanResult:
    plans: list[Estimate]
    """Best layouts first."""
    evaluated: int
    """Valid layouts settled: costed, or proved no better by a bound. All of the space's valid layouts when
    the search is complete."""
    feasible: int
    """Of the costed layouts, how many fit in memory."""
    search_seconds: float
    least_memory: Estimate | None = None
    """The layout needing the least memory (the closest to fitting) when nothing fits."""
    skipped: int = 0
    """Of the settled layouts, those proved no better without being costed (their block's step-time bound
    exceeds the step time of the plans found)."""
    left: int = 0
    """Valid layouts neither costed nor proved when the deadline stopped the search (0: complete)."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every valid layout was costed or proved no better: the plans are the exhaustive search's."""
        return self.left == 0

    @property
    def costed(self) -> int:
        """Layouts whose memory (and, where they fit, time) was computed."""
        return self.evaluated - self.skipped


@dataclass(frozen=True, slots=True)
class _Survey:
    """Valid blocks of some cells: cell index, index in the cell's block grid, valid layouts, step bound."""

    cell: np.ndarray
    flat: np.ndarray
    count: np.ndarray
    bound: np.ndarray


@dataclass(frozen=True, slots=True)
class _Partial:
    """What costing some blocks contributes to a search."""

    blocks: np.ndarray
    """Positions (in the search's bound order) of the blocks reached."""
    tight: np.ndarray
    """Per block reached: its best bound beyond the survey's floor (_refine, then _tighten where that was
    within the limit)."""
    costed: np.ndarray
    """Per costed block: layouts costed (its valid layouts)."""
    feasible: np.ndarray
    faster: np.ndarray
    """Per costed block: fitting layouts faster than the search's reference throughput (0 without one)."""
    least_required: float
    least: Layouts | None
    top: Layouts | None
    score: np.ndarray
    required: np.ndarray


_STATE: dict[str, object] = {}
"""The search a forked worker runs (inherited at fork; only small arrays travel back and forth)."""


def _representatives(fields: dict[str, np.ndarray]) -> Layouts:
    """One layout per block (its fields), the inner choices at their base values: what the bounds read."""
    n = len(fields["tp"])
    return Layouts(**fields, zero=np.zeros(n, np.int64), recompute=np.zeros(n, np.int8), tp_overlap=np.zeros(n, bool),
                   dispatch=np.zeros(n, np.int8), ep_overlap=np.zeros(n, bool))


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


def _refine(reps: Layouts) -> np.ndarray:
    """estimate.step_time_bound of the blocks `reps` stand for: the pipeline of their compute alone."""
    st = _STATE
    return step_time_bound(st["model"], st["cluster"], reps, st["workload"], st["stack"])


def _tighten(reps: Layouts) -> np.ndarray:
    """estimate.time_options_bound of the blocks `reps` stand for: their step-time bound with communication,
    the least over the time-only settings (_TIME_ONLY) each block may take."""
    st = _STATE
    options, owner = _time_options(reps, st["model"], st["cluster"], st["space"])
    return time_options_bound(st["model"], st["cluster"], reps, options, owner, st["workload"], st["stack"])


def _fields_of(cells: list[_Cell], cell_of: np.ndarray, flat: np.ndarray, gbs: int, seq: int, space: SearchSpace
               ) -> dict[str, np.ndarray]:
    """_block_fields of blocks from several cells, in the order given: each block's index unravelled over its
    own cell's block grid, its values read from the cells stacked (_Cells) in one gather per axis."""
    table = _Cells.of(cells, list(range(len(cells))))
    lengths = table.lengths[cell_of, :_BLOCK]
    picked, rest = [], flat
    for axis in range(_BLOCK - 1, -1, -1):
        rest, index = np.divmod(rest, lengths[:, axis])
        picked.append(table.values[axis][cell_of, index])
    return _fields(table.tp[cell_of], table.pp[cell_of], picked[::-1], gbs, seq, space)


def _cost(task: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]) -> _Partial:
    """Cost the blocks of one task (positions, cells, block indices, floors, valid layouts) that no bound
    proves slower than the step-time limit. Each bound is computed only where the cheaper one before it is
    within the limit: the survey's floor, then the pipeline of compute alone (_refine), then the pipeline with
    communication (_tighten); then, in batches of about `chunk` layouts, memory for every valid layout and
    time for those that fit and that no sibling beats. The limit tightens as the task finds layouts. Past the
    search's deadline, the task stops after its first batch: the blocks it has not costed are left unsettled
    (not in the _Partial)."""
    positions, cell_of, flat, floor, count, limit = task
    st = _STATE
    keep = st["keep"]
    go = np.flatnonzero(floor <= limit * (1 + SLACK))
    positions, cell_of, flat, count = positions[go], cell_of[go], flat[go], count[go]
    n = len(positions)
    if not n:
        return _Partial(positions, np.empty(0), *(np.empty(0, np.int64) for _ in range(3)), np.inf, None, None,
                        np.empty(0), np.empty(0))
    reps = _representatives(_fields_of(st["cells"], cell_of, flat, st["gbs"], st["seq"], st["space"]))
    tight = np.full(n, -np.inf)
    if st["bound"]:
        tight = _refine(reps)
        within = np.flatnonzero(tight <= limit * (1 + SLACK))
        if len(within):
            tight[within] = np.maximum(tight[within], _tighten(reps.take(within)))
    costed, feasible, faster = (np.zeros(n, dtype=np.int64) for _ in range(3))
    least: tuple[float, Layouts] | None = None
    top: tuple[Layouts, np.ndarray, np.ndarray] | None = None
    todo = np.flatnonzero(tight <= limit * (1 + SLACK))
    # Best bound first, in batches growing from FIRST_BATCH layouts: the first batches hold the blocks most
    # likely to hold the best layouts, so that the limit falls before the bulk of the task is costed.
    todo = todo[np.argsort(tight[todo], kind="stable")]
    size = min(FIRST_BATCH, st["chunk"])
    settled = np.ones(n, dtype=bool)
    first = True
    while len(todo):
        if not first and st["deadline"] is not None and time.monotonic() >= st["deadline"]:
            settled[todo] = False
            break
        first = False
        take = max(1, int(np.searchsorted(np.cumsum(count[todo]), size, "right")))
        batch, todo = todo[:take], todo[take:]
        size = min(4 * size, st["chunk"])
        if st["bound"] and top is not None and len(top[1]) >= keep:
            # The task's own keep-th best is no better than the search's, so this limit is never below the
            # final one: a block skipped here is proved no better there too.
            limit = min(limit, max(st["tokens_per_gpu"] / float(top[1][-1]), st["reference_step"]))
        batch = batch[tight[batch] <= limit * (1 + SLACK)]
        if not len(batch):
            continue
        part = _cost_blocks(reps.take(batch))
        costed[batch], feasible[batch], faster[batch] = part.costed, part.feasible, part.faster
        if part.least is not None and (least is None or part.least_required < least[0]):
            least = (part.least_required, part.least)
        if part.top is not None:
            top = (_top(top[0], top[1], top[2], part.top, part.score, part.required, keep) if top
                   else (part.top, part.score, part.required))
    return _Partial(positions[settled], tight[settled], costed[settled], feasible[settled], faster[settled],
                    least[0] if least else np.inf, least[1] if least else None,
                    *(top if top else (None, np.empty(0), np.empty(0))))


def _cost_blocks(reps: Layouts) -> _Partial:
    """Memory for every valid layout of the blocks `reps` stand for, time for those that fit and no sibling
    beats."""
    st = _STATE
    model, cluster, space, workload, stack = st["model"], st["cluster"], st["space"], st["workload"], st["stack"]
    keep, layout_filter, reference = st["keep"], st["filter"], st["reference"]
    n = len(reps)
    lay, owner = _expand(reps, model, space)
    rows = _valid(lay, model, cluster)
    lay, owner = lay.take(rows), owner[rows]
    wide, parent = _time_options(lay, model, cluster, space)
    if layout_filter is not None:
        rows = np.flatnonzero(layout_filter(wide))
        wide, parent = wide.take(rows), parent[rows]
    # Memory first: a layout that cannot fit needs no step time. It is computed once per layout with the
    # time-only fields at their base values, and only for those with a setting of them the filter passes (on
    # Megatron-Core, half of the rest).
    used = np.ones(len(parent), dtype=bool)
    used[1:] = parent[1:] != parent[:-1]  # parent is sorted: _time_options lists each layout's settings in turn
    base_peaks = peak_memory(model, cluster, lay.take(parent[used]), workload, stack)
    lay, peaks, owner = wide, base_peaks.take(np.cumsum(used) - 1), owner[parent]
    # Device memory includes the dispatcher's buffers (device.py), so it is completed after the expansion.
    required = device_gib(model, cluster, lay, peaks.reserved)
    peaks = dataclasses.replace(peaks, device=required)
    least_req, least = np.inf, None
    if len(lay):
        i = int(np.argmin(required))
        least_req, least = float(required[i]), lay.take(np.array([i]))
    fitting = np.flatnonzero(required <= st["cap"])
    feasible = np.bincount(owner[fitting], minlength=n)
    faster = np.zeros(n, dtype=np.int64)
    top, score, required_top = None, np.empty(0), np.empty(0)
    if st["prune"] and len(fitting):
        fitting = fitting[_undominated(lay.take(fitting), st["dominance"])]
    if len(fitting):
        ev = evaluate_layouts(model, cluster, lay.take(fitting), breakdown=False, workload=workload,
                              peaks=peaks.take(fitting), stack=stack)
        if reference is not None:
            faster = np.bincount(owner[fitting][ev.tokens_per_s_per_gpu > reference * (1 + SLACK)], minlength=n)
        order = np.argsort(-ev.tokens_per_s_per_gpu, kind="stable")[:keep]
        top, score, required_top = _top(None, score, required_top, ev.layouts.take(order),
                                        ev.tokens_per_s_per_gpu[order], ev.required_gib[order], keep)
    return _Partial(np.arange(n), np.full(n, -np.inf), np.bincount(owner, minlength=n), feasible, faster, least_req,
                    least, top, score, required_top)


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


def _top(top: Layouts | None, score: np.ndarray, required: np.ndarray, lay: Layouts, new_score: np.ndarray,
         new_required: np.ndarray, keep: int) -> tuple[Layouts, np.ndarray, np.ndarray]:
    """Merge candidates, keeping the best `keep`: higher throughput, then less memory, then simpler."""
    top = lay if top is None else _concat(top, lay)
    score = np.concatenate([score, new_score])
    required = np.concatenate([required, new_required])
    rank = np.lexsort((_complexity(top), required, -score))[:keep]
    return top.take(rank), score[rank], required[rank]


def _split(weights: np.ndarray, parts: int) -> list[list[int]]:
    """Indices split into `parts` groups of about equal weight (heaviest first, greedily)."""
    out: list[list[int]] = [[] for _ in range(parts)]
    load = [0.0] * parts
    for i in np.argsort(-weights, kind="stable"):
        j = load.index(min(load))
        out[j].append(int(i))
        load[j] += float(weights[i])
    return [g for g in out if g]


def check_size(model: ModelSpec, cluster: ClusterSpec, gbs: int, seq: int) -> None:
    """Refuse, up front and with the reason, a search too large to mean anything or to finish."""
    if cluster.gpus > MAX_PLAN_GPUS:
        raise ConfigError(f"{cluster.gpus:,} GPUs is beyond the {MAX_PLAN_GPUS:,} a plan is searched for (five times "
                          "the largest GPU cluster built)", field="gpus")
    if model.layers > MAX_LAYERS:
        raise ConfigError(f"{model.name} has {model.layers:,} layers, beyond the {MAX_LAYERS:,} a plan is searched "
                          "for (eight times the deepest published LLM)", field="layers")
    if gbs * seq >= 2**53:
        raise ConfigError(f"gbs·seq = {gbs * seq:.3g} tokens per step is beyond what float64 counts exactly",
                          field="gbs")


class _Runner:
    """Runs survey and costing tasks in forked workers (or in-process) and hands back results as they come."""

    def __init__(self, workers: int) -> None:
        self.pool = None
        if workers > 1 and "fork" in mp.get_all_start_methods():
            # Workers ignore Ctrl-C: the parent stops them (terminate) and reports the interruption once.
            self.pool = mp.get_context("fork").Pool(workers, initializer=signal.signal,
                                                    initargs=(signal.SIGINT, signal.SIG_IGN))
        self.slots = workers if self.pool is not None else 1
        """Tasks in flight: one per worker (or in-process), so that every task starts from the latest limit;
        the parent merges a result and hands out the next task in far less time than a task takes."""
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.pending = 0

    def submit(self, fn: Callable, arg: object) -> None:
        self.pending += 1
        if self.pool is None:
            self.results.put(fn(arg))
        else:
            self.pool.apply_async(fn, (arg,), callback=self.results.put, error_callback=self.results.put)

    def next(self) -> object:
        """The next finished task's result (re-raising a worker's exception)."""
        while True:
            try:
                out = self.results.get(timeout=0.1)  # a short wait keeps Ctrl-C responsive
            except queue.Empty:
                continue
            self.pending -= 1
            if isinstance(out, BaseException):
                raise out
            return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def plan(model: ModelSpec, cluster: ClusterSpec, *, gbs: int, seq: int, space: SearchSpace | None = None,
         objective: str = "throughput", top: int = 5, within: float = 0.05,
         layout_filter: Callable[[Layouts], np.ndarray] | None = None,
         progress: Callable[[int, int], None] | None = None, chunk: int = CHUNK, workers: int | None = None,
         workload: Workload = UNIFORM, faster_than: float | None = None, deadline: float | None = None,
         bound: bool = True, stack: StackSpec | None = None) -> PlanResult:
    """Rank every valid layout that fits. objective 'memory' returns, among the layouts within `within`
    of the best throughput, the ones with the most memory headroom; 'cost' (GPU-hours per token on a fixed
    cluster) ranks like 'throughput'. `layout_filter` restricts the space further (a framework's abilities;
    it must be elementwise over the Layouts fields, as the Strategy rules are); `progress` is called with the
    layouts settled so far and the total; `chunk` bounds how many layouts are costed at once (memory) and
    `workers` how many processes share the work (default: the CPU count, for large spaces), neither changing
    the result. `faster_than` (tokens/s/GPU) also counts the fitting layouts that beat it, in extra["faster"]
    (every layout that might is then timed: no dominance pruning). `deadline` (a time.monotonic() value)
    stops the search there with the best found so far (PlanResult.left > 0). `bound=False` costs every
    layout instead of skipping blocks proved no better: the same answer, slower (a check of the bounds).
    `stack` (default megatron-core): only the layouts it can run are searched, costed as it runs them.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}")
    check_size(model, cluster, gbs, seq)
    stack = load_stack(stack)
    space = restrict_space(space or SearchSpace(), stack)
    layout_filter = _both(stack_filter(stack, model, cluster.gpus), layout_filter)
    start = time.perf_counter()
    keep = max(top, 1) if objective != "memory" else max(top, 1) * 50
    cells = list(_grid(model, cluster, gbs, seq, space))
    blocks = sum(math.prod(c.block_shape) for c in cells)
    if blocks > MAX_BLOCKS:
        raise ConfigError(f"the layouts of {model.name} on {cluster.gpus:,} GPUs fall in {blocks:,} blocks, beyond the "
                          f"{MAX_BLOCKS:,} a search takes on; restrict the space (tp, pp, cp, mbs, schedule, vpp)")
    raw = np.array([math.prod(c.shape) for c in cells], dtype=float)
    if workers is None:
        workers = (os.cpu_count() or 1) if raw.sum() >= PARALLEL_MIN else 1
    workers = max(1, min(workers, len(cells)))
    _STATE.update(model=model, cluster=cluster, space=space, gbs=gbs, seq=seq, keep=keep, workload=workload,
                  stack=stack, dominance=_dominance(model, stack), chunk=chunk, tokens_per_gpu=gbs * seq / cluster.gpus,
                  reference_step=gbs * seq / cluster.gpus / faster_than if faster_than else 0.0,
                  prune=objective != "memory" and faster_than is None, reference=faster_than,
                  cap=space.memory_cap_gib(cluster), filter=layout_filter, cells=cells, bound=bound,
                  deadline=deadline)
    runner = _Runner(workers)
    try:
        survey = _run_survey(runner, cells, raw, workers)
        found = _run_costing(runner, survey, keep, gbs * seq / cluster.gpus, deadline, progress)
    finally:
        runner.close()
    return _result(model, cluster, survey, found, objective, top, within, workload, stack,
                   time.perf_counter() - start)


def _run_survey(runner: _Runner, cells: list[_Cell], raw: np.ndarray, workers: int) -> _Survey:
    """Count and bound every block, the cells split evenly over the workers."""
    for part in _split(raw, workers):
        runner.submit(_survey, sorted(part))
    parts = [runner.next() for _ in range(runner.pending)]
    cat = [np.concatenate([getattr(p, f) for p in parts]) if parts else np.empty(0)
           for f in ("cell", "flat", "count", "bound")]
    order = np.argsort(cat[3], kind="stable")
    return _Survey(*(a[order] for a in cat))


@dataclass(frozen=True, slots=True)
class _Found:
    """The outcome of costing: per-block tallies (over the survey's blocks), the best candidates, the limit."""

    done: np.ndarray
    """Per block: reached (its tighter bound computed, and costed unless that bound exceeded the limit)."""
    bound: np.ndarray
    """Per block: the best bound known (the survey's, or the tighter one where reached)."""
    costed: np.ndarray
    feasible: np.ndarray
    faster: np.ndarray
    top: tuple[Layouts, np.ndarray, np.ndarray] | None
    least: tuple[float, Layouts] | None
    limit: float
    """Step time beyond which a block is proved no better (inf when nothing may be skipped)."""


def _run_costing(runner: _Runner, survey: _Survey, keep: int, tokens_per_gpu: float, deadline: float | None,
                 progress: Callable[[int, int], None] | None) -> _Found:
    """Cost blocks in bound order, a few tasks in flight, until the next block's bound exceeds the limit."""
    n = len(survey.count)
    done = np.zeros(n, dtype=bool)
    tight = np.full(n, -np.inf)
    costed, feasible, faster = (np.zeros(n, dtype=np.int64) for _ in range(3))
    total = int(survey.count.sum())
    # Tasks: runs of consecutive blocks, small at first (the first sets the limit the others are cut by).
    cuts = [0]
    while cuts[-1] < n:
        cuts.append(min(n, cuts[-1] + min(TASK_BLOCKS, FIRST_TASK_BLOCKS << 2 * (len(cuts) - 1))))
    best: tuple[Layouts, np.ndarray, np.ndarray] | None = None
    least: tuple[float, Layouts] | None = None
    reference_step = _STATE["reference_step"]

    def limit() -> float:
        """Blocks bounded above this step time hold no layout among the best `keep` nor faster than the
        reference (the keep-th best found so far sets it; inf until `keep` layouts fit)."""
        if not _STATE["bound"] or best is None or len(best[1]) < keep:
            return math.inf
        return max(tokens_per_gpu / float(best[1][-1]), reference_step)

    task = 0
    while True:
        # Until the first task reports, nothing bounds the others: it runs alone. The deadline stops the
        # search only after it, so that there is a best found so far.
        while (task < len(cuts) - 1 and runner.pending < runner.slots and not (task == 1 and runner.pending)
               and (deadline is None or task == 0 or time.monotonic() < deadline)):
            lo, hi = cuts[task], cuts[task + 1]
            if survey.bound[lo] > limit() * (1 + SLACK):
                task = len(cuts) - 1  # sorted by bound: every later block is proved no better too
                break
            runner.submit(_cost, (np.arange(lo, hi), survey.cell[lo:hi], survey.flat[lo:hi], survey.bound[lo:hi],
                                  survey.count[lo:hi], limit()))
            task += 1
        if not runner.pending:
            break
        part: _Partial = runner.next()
        done[part.blocks], tight[part.blocks] = True, part.tight
        costed[part.blocks], feasible[part.blocks], faster[part.blocks] = part.costed, part.feasible, part.faster
        if part.top is not None:
            best = (_top(best[0], best[1], best[2], part.top, part.score, part.required, keep) if best
                    else (part.top, part.score, part.required))
        if part.least is not None and (least is None or part.least_required < least[0]):
            least = (part.least_required, part.least)
        if progress:
            settled = done | (np.maximum(survey.bound, tight) > limit() * (1 + SLACK))
            progress(int(survey.count[settled].sum()), total)
    return _Found(done, np.maximum(survey.bound, tight), costed, feasible, faster, best, least, limit())


def _result(model: ModelSpec, cluster: ClusterSpec, survey: _Survey, found: _Found, objective: str, top: int,
            within: float, workload: Workload, stack: StackSpec, seconds: float) -> PlanResult:
    """Tallies over the blocks the final limit does not prove no better, and the plans' full estimates."""
    proved = found.bound > found.limit * (1 + SLACK)
    counted = found.done & ~proved
    left = int(survey.count[~found.done & ~proved].sum())
    plans: list[Estimate] = []
    if found.top is not None:
        ev = evaluate_layouts(model, cluster, found.top[0], workload=workload, stack=stack)
        for i in range(len(found.top[0])):
            # A layout that predicts exactly like a simpler one ranked above it adds nothing to the list.
            if plans and ev.step_time_s[i] == plans[-1].step_time_s and ev.required_gib[i] == plans[-1].required_gib:
                continue
            plans.append(ev.estimate(i))
    if objective == "memory" and plans:
        floor = plans[0].tokens_per_s_per_gpu * (1 - within)
        plans = sorted((e for e in plans if e.tokens_per_s_per_gpu >= floor), key=lambda e: e.required_gib)
    # The layout closest to fitting matters only when nothing fits (plan_or_raise names it).
    least = (evaluate_layouts(model, cluster, found.least[1], workload=workload, stack=stack).estimate(0)
             if found.least and not plans else None)
    extra = {"faster": int(found.faster[counted].sum())} if _STATE["reference"] is not None else {}
    return PlanResult(plans=plans[:top], evaluated=int(survey.count.sum()) - left,
                      feasible=int(found.feasible[counted].sum()), search_seconds=seconds, least_memory=least,
                      skipped=int(survey.count[proved].sum()), left=left, extra=extra)


def _both(a: Callable[[Layouts], np.ndarray], b: Callable[[Layouts], np.ndarray] | None
          ) -> Callable[[Layouts], np.ndarray]:
    """A layout filter passing what both filters pass (elementwise, as each is)."""
    return a if b is None else (lambda lay: a(lay) & b(lay))


def _concat(a: Layouts, b: Layouts) -> Layouts:
    return _concat_all([a, b])


def _concat_all(parts: list[Layouts]) -> Layouts:
    return Layouts(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(Layouts)})


def _complexity(lay: Layouts) -> np.ndarray:
    """Tie-break between equally fast layouts: fewer parallel dimensions and lower ZeRO stages first."""
    return (lay.tp * lay.pp * lay.cp * lay.ep * lay.etp * lay.vpp).astype(float) + lay.zero + lay.tp_overlap


LEVER_GAIN_GIB = 0.05
"""Least drop in the memory need (GiB) for which plan's no-fit message counts a lever as lowering it: half the
0.1 GiB its figures are printed to."""


def levers(model: ModelSpec, cluster: ClusterSpec, *, gbs: int, seq: int, space: SearchSpace,
           workload: Workload = UNIFORM, stack: StackSpec | None = None) -> dict[str, float]:
    """Least memory any layout needs (GiB, allocator headroom and context included) under each lever that
    the user's space did not already allow and `stack` can pull (default megatron-core), computed by
    searching again with that lever opened, over the layouts the stack runs. Launching PyTorch's caching allocator
    with expandable segments is one of them: it shrinks the allocator's headroom, not what the layout allocates."""
    out: dict[str, float] = {}
    stack = load_stack(stack)
    trials: list[tuple[str, ClusterSpec, SearchSpace, StackSpec]] = []
    if 3 not in space.zero:
        trials.append(("ZeRO-3", cluster, dataclasses.replace(space, zero=(*space.zero, 3)), stack))
    if "full" not in space.recompute:
        trials.append(("full recompute", cluster, dataclasses.replace(space, recompute=(*space.recompute, "full")),
                       stack))
    if space.cp is not None:
        trials.append(("any context parallelism", cluster, dataclasses.replace(space, cp=None), stack))
    if space.pp is not None:
        trials.append(("any pipeline depth", cluster, dataclasses.replace(space, pp=None), stack))
    if "fp8" not in space.precision and cluster.gpu.supports_fp8:
        trials.append(("fp8", cluster, dataclasses.replace(space, precision=(*space.precision, "fp8")), stack))
    expandable = with_expandable_segments(stack)
    if expandable is not None:
        trials.append((EXPANDABLE_SEGMENTS, cluster, space, expandable))
    for factor in (2, 4):
        bigger = cluster.with_gpus(cluster.gpus * factor)
        if bigger.gpus <= MAX_PLAN_GPUS:
            trials.append((f"{factor}× the GPUs ({bigger.gpus})", bigger, space, stack))
    base = restrict_space(space, stack)
    for name, cl, sp, st in trials:
        sp = restrict_space(sp, st)
        if sp == base and cl is cluster and st is stack:
            continue  # a lever the stack cannot pull
        runnable = stack_filter(st, model, cl.gpus)
        least = None
        for lay in enumerate_layouts(model, cl, gbs, seq, sp):
            # Memory does not read the time-only fields: a layout counts when the stack runs any setting of them.
            wide, parent = _time_options(lay, model, cl, sp)
            lay = lay.take(np.unique(parent[runnable(wide)]))
            if len(lay):
                req = float(required_memory_gib(model, cl, lay, workload, st).min())
                least = req if least is None else min(least, req)
        if least is not None:
            out[name] = least
    return out


def plan_or_raise(model: ModelSpec, cluster: ClusterSpec, *, gbs: int, seq: int, space: SearchSpace | None = None,
                  **kw) -> PlanResult:
    """`plan`, raising NoFeasiblePlanError (exit code 3) with the least memory needed and the levers."""
    space = space or SearchSpace()
    result = plan(model, cluster, gbs=gbs, seq=seq, space=space, **kw)
    if result.plans:
        return result
    if not result.complete:
        raise NoFeasiblePlanError(
            f"the time limit stopped the search of {model.name} on {cluster.gpus} GPUs before any layout that fits "
            f"was found ({result.left:,} of {result.evaluated + result.left:,} valid layouts left)")
    if result.least_memory is None:
        raise NoFeasiblePlanError(
            f"no valid layout of {model.name} on {cluster.gpus} GPUs with gbs={gbs}, seq={seq} under the given "
            "restrictions (every combination breaks a Strategy rule, e.g. gbs must be a multiple of dp·mbs)")
    cap = space.memory_cap_gib(cluster)
    need = result.least_memory.required_gib
    options = levers(model, cluster, gbs=gbs, seq=seq, space=space, workload=kw.get("workload", UNIFORM),
                     stack=kw.get("stack"))
    # A lever whose least need rounds to the same figure as the base need does not help; naming it among the
    # ones that do would send the user after it (fp8 keeps the bf16 master weights and gradients of the fullest rank).
    helps = [f"{name}: {gib:.1f} GiB{' (fits)' if gib <= cap else ''}" for name, gib in
             sorted(options.items(), key=lambda kv: kv[1]) if gib < need - LEVER_GAIN_GIB]
    idle = sorted(name for name, gib in options.items() if gib >= need - LEVER_GAIN_GIB)
    advice = ("Least memory with each lever: " + "; ".join(helps)) if helps else "No lever left to open lowers it"
    raise NoFeasiblePlanError(
        f"no layout of {model.name} fits in {cap:.1f} GiB per GPU on {cluster.gpus}× {cluster.name}: the least any "
        f"of the {result.evaluated:,} valid layouts needs is {need:.1f} GiB "
        f"({result.least_memory.strategy.describe(cluster.gpus)}). " + advice
        + (f" ({', '.join(idle)} would not lower it)" if idle else "") + ".")
