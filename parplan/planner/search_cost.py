"""Costing, a search's second pass: the blocks of one task (a run of blocks in the survey's bound order)
bounded more tightly, then costed through the same evaluate_layouts that `explain` uses.

Each bound is computed only where the cheaper one before it is within the limit: the survey's floor, the
pipeline of compute alone (_refine), the pipeline with communication (_tighten). The blocks still within it
are costed in growing batches, memory for every valid layout and time for those that fit and that no sibling
provably beats (search_dominance); _top keeps the best `keep` candidates. _cost runs as a worker task and
reads the search from search_workers._STATE.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from parplan.planner.estimate import device_gib, evaluate_layouts, peak_memory, step_time_bound, time_options_bound
from parplan.planner.search_dominance import _undominated
from parplan.planner.search_grid import _fields_of, _representatives
from parplan.planner.search_layouts import _concat_all, _expand, _time_options, _valid
from parplan.planner.search_workers import _STATE
from parplan.planner.strategy import Layouts

if TYPE_CHECKING:
    from parplan.hardware.spec import ClusterSpec
    from parplan.models.spec import ModelSpec
    from parplan.planner.estimate import MemoryPeaks
    from parplan.planner.search_grid import SearchSpace
    from parplan.planner.workload import Workload
    from parplan.stacks.spec import StackSpec

FIRST_BATCH = 1 << 12
"""Layouts in a task's first costed batch; each next batch is four times larger, up to `chunk`. A batch costs
about 10 ms plus 2.5 µs per layout on one core (llama3.1-405b on 16,384 GPUs), so smaller ones would cost more
in fixed costs than they save by tightening the limit sooner."""
SLACK = 1e-9
"""Relative margin on every skip: a block is proved no better only when its bound exceeds the threshold by
more than float rounding could account for."""


@dataclass(frozen=True, slots=True)
class _Partial:
    """What costing some blocks contributes to a search."""

    blocks: np.ndarray
    """Positions (in the search's bound order) of the blocks reached."""
    tight: np.ndarray
    """Per block reached: its best bound beyond the survey's floor (_refine, then _tighten where that was
    within the limit)."""
    feasible: np.ndarray
    faster: np.ndarray
    """Per costed block: fitting layouts faster than the search's reference throughput (0 without one)."""
    least_required: float
    least: Layouts | None
    top: Layouts | None
    score: np.ndarray
    required: np.ndarray


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
        return _Partial(positions, np.empty(0), *(np.empty(0, np.int64) for _ in range(2)), np.inf, None, None,
                        np.empty(0), np.empty(0))
    reps = _representatives(_fields_of(st["cells"], cell_of, flat, st["gbs"], st["seq"], st["space"]))
    tight = np.full(n, -np.inf)
    if st["bound"]:
        tight = _refine(reps)
        within = np.flatnonzero(tight <= limit * (1 + SLACK))
        if len(within):
            tight[within] = np.maximum(tight[within], _tighten(reps.take(within)))
    feasible, faster = (np.zeros(n, dtype=np.int64) for _ in range(2))
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
        if st["bound"]:
            # The task's own keep-th best is no better than the search's, so this limit is never below the
            # final one: a block skipped here is proved no better there too.
            limit = min(limit, _kth_limit(top, keep, st["tokens_per_gpu"], st["reference_step"]))
        batch = batch[tight[batch] <= limit * (1 + SLACK)]
        if not len(batch):
            continue
        part = _cost_blocks(reps.take(batch))
        feasible[batch], faster[batch] = part.feasible, part.faster
        top, least = _merge(top, least, part, keep)
    return _Partial(positions[settled], tight[settled], feasible[settled], faster[settled],
                    least[0] if least else np.inf, least[1] if least else None,
                    *(top if top else (None, np.empty(0), np.empty(0))))


def _settings_memory(lay: Layouts, model: ModelSpec, cluster: ClusterSpec, space: SearchSpace, workload: Workload,
                     stack: StackSpec | None, keep: Callable[[Layouts], np.ndarray] | None
                     ) -> tuple[Layouts, np.ndarray, MemoryPeaks]:
    """Every setting of the time-only fields of `lay` that `keep` passes (all where None), the layout each came
    from, and its memory. Peak memory is computed once per layout with the time-only fields at their base values,
    and only for layouts with a setting `keep` passes (on Megatron-Core, half of them); device memory includes the
    dispatcher's buffers (device.py), so it is completed per setting."""
    wide, parent = _time_options(lay, model, cluster, space)
    if keep is not None:
        rows = np.flatnonzero(keep(wide))
        wide, parent = wide.take(rows), parent[rows]
    used = np.ones(len(parent), dtype=bool)
    used[1:] = parent[1:] != parent[:-1]  # parent is sorted: _time_options lists each layout's settings in turn
    peaks = peak_memory(model, cluster, lay.take(parent[used]), workload, stack).take(np.cumsum(used) - 1)
    return wide, parent, dataclasses.replace(peaks, device=device_gib(model, cluster, wide, peaks.reserved))


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
    # Memory first: a layout that cannot fit needs no step time.
    wide, parent, peaks = _settings_memory(lay, model, cluster, space, workload, stack, layout_filter)
    lay, owner, required = wide, owner[parent], peaks.device
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
    return _Partial(np.arange(n), np.full(n, -np.inf), feasible, faster, least_req, least, top, score, required_top)


Best = tuple[Layouts, np.ndarray, np.ndarray]
"""The best layouts found so far, their throughput per GPU and their memory (_top)."""


def _kth_limit(best: Best | None, keep: int, tokens_per_gpu: float, reference_step: float) -> float:
    """Step time beyond which a layout is neither among the best `keep` found so far (the keep-th best sets it)
    nor faster than the reference; inf until `keep` layouts fit."""
    if best is None or len(best[1]) < keep:
        return math.inf
    return max(tokens_per_gpu / float(best[1][-1]), reference_step)


def _merge(best: Best | None, least: tuple[float, Layouts] | None, part: _Partial, keep: int
           ) -> tuple[Best | None, tuple[float, Layouts] | None]:
    """The best `keep` layouts and the least-memory one, with what costing `part` found."""
    if part.top is not None:
        best = (_top(*best, part.top, part.score, part.required, keep) if best
                else (part.top, part.score, part.required))
    if part.least is not None and (least is None or part.least_required < least[0]):
        least = (part.least_required, part.least)
    return best, least


def _top(top: Layouts | None, score: np.ndarray, required: np.ndarray, lay: Layouts, new_score: np.ndarray,
         new_required: np.ndarray, keep: int) -> tuple[Layouts, np.ndarray, np.ndarray]:
    """Merge candidates, keeping the best `keep`: higher throughput, then less memory, then simpler."""
    top = lay if top is None else _concat(top, lay)
    score = np.concatenate([score, new_score])
    required = np.concatenate([required, new_required])
    rank = np.lexsort((_complexity(top), required, -score))[:keep]
    return top.take(rank), score[rank], required[rank]


def _concat(a: Layouts, b: Layouts) -> Layouts:
    return _concat_all([a, b])


def _complexity(lay: Layouts) -> np.ndarray:
    """Tie-break between equally fast layouts: fewer parallel dimensions and lower ZeRO stages first."""
    return (lay.tp * lay.pp * lay.cp * lay.ep * lay.etp * lay.vpp).astype(float) + lay.zero + lay.tp_overlap
