"""`plan`: every valid layout of a model on a cluster, evaluated in numpy chunks, ranked.

Exhaustive: the space is the cartesian product of every degree and setting the Strategy rules allow
(tp, pp, cp, ep, etp, vpp with its schedule, zero, sp, recompute, every divisor of the per-replica batch as
micro-batch, precision, TP overlap); nothing is sampled or pruned except by those rules and the user's
restrictions. Each chunk goes through the same `evaluate_layouts` that `explain` uses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from parplan.errors import NoFeasiblePlanError
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.device import outside_allocator_bytes
from parplan.planner.estimate import Estimate, evaluate_layouts, peak_memory, required_memory_gib
from parplan.planner.estimate import group_rows as _group_rows
from parplan.planner.strategy import (
    DISPATCHERS,
    PRECISIONS,
    RECOMPUTE,
    RULES,
    SCHEDULES,
    Layouts,
    scatter_gather_acts,
    valid_mask,
)
from parplan.planner.workload import UNIFORM, Workload
from parplan.stacks.presets import load_stack
from parplan.stacks.spec import StackSpec
from parplan.stacks.support import restrict_space, stack_filter

OBJECTIVES = ("throughput", "memory", "cost")
CHUNK = 1 << 17
"""Layouts per evaluated chunk: bounds peak memory (about 1 KiB of arrays per layout in flight)."""


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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


def _grid(model: ModelSpec, cluster: ClusterSpec, gbs: int, seq: int, space: SearchSpace) -> Iterator[dict]:
    """(tp, pp, cp) combinations with the lists of everything else that may go with them."""
    g = cluster.gpus
    moe = model.moe
    dom = cluster.scaleup_domain
    for tp in _divisors(g):
        if not space.allows("tp", tp) or model.attention.kv_heads % tp or model.attention.heads % tp:
            continue
        if space.tp is None and space.tp_in_domain and tp > dom:
            continue
        for pp in _divisors(g // tp):
            if not space.allows("pp", pp) or pp > model.layers:
                continue
            for cp in _divisors(g // (tp * pp)):
                if not space.allows("cp", cp) or (cp > 1 and seq % (2 * cp)):
                    continue
                dp = g // (tp * pp * cp)
                if gbs % dp:
                    continue
                per_stage = g // pp
                eps = [1] if moe is None else [e for e in _divisors(moe.experts) if space.allows("ep", e)]
                etps = [1] if moe is None else [x for x in _divisors(moe.expert_ffn) if space.allows("etp", x)
                                                and (space.etp is not None or not space.tp_in_domain or x <= dom)]
                expert = [(e, x) for e in eps for x in etps if per_stage % (e * x) == 0]
                mbs = [b for b in _divisors(gbs // dp) if space.allows("mbs", b)]
                sched = []
                for s in space.schedule:
                    if s == "1f1b":
                        sched.append((s, 1))
                    elif pp > 1 and s == "interleaved":
                        sched += [(s, v) for v in range(2, model.layers // pp + 1)]
                    elif pp > 1 and s == "dualpipev" and 2 * pp <= model.layers:
                        sched.append((s, 2))
                    elif pp > 1 and s in ("zb-h1", "dualpipe"):
                        sched.append((s, 1))
                sched = [(s, v) for s, v in sched if space.allows("vpp", v)]
                if not (expert and mbs and sched):
                    continue
                yield {"tp": tp, "pp": pp, "cp": cp, "expert": expert, "mbs": mbs, "sched": sched,
                       "moe": moe is not None}


def _axes(cell: dict, space: SearchSpace) -> tuple[list[np.ndarray], list[tuple[bool, bool]]]:
    """The independent choices of one grid cell that memory depends on; SP and TP overlap form one axis of
    allowed pairs (overlap needs SP, and both are moot at tp = 1); MoE-only choices collapse for dense
    models. The time-only choices (dispatch, ep_overlap) are added after the memory check, by _time_options."""
    tp = cell["tp"]
    pairs = [(s, o) for s in space.sp for o in space.tp_overlap if (tp > 1 or not (s or o)) and (s or not o)]
    redundant = space.redundant_experts if cell["moe"] else (0,)
    return [
        np.arange(len(cell["expert"])), np.arange(len(cell["sched"])), np.array(space.zero, dtype=np.int64),
        np.arange(len(pairs)), np.array([RECOMPUTE.index(r) for r in space.recompute], dtype=np.int8),
        np.array(cell["mbs"], dtype=np.int64), np.array([PRECISIONS.index(p) for p in space.precision], dtype=np.int8),
        np.array(redundant, dtype=np.int64),
    ], pairs


def _cell_size(cell: dict, space: SearchSpace) -> int:
    axes, _ = _axes(cell, space)
    return int(np.prod([len(a) for a in axes]))


def _expand(cell: dict, gbs: int, seq: int, space: SearchSpace) -> dict[str, np.ndarray]:
    """Cartesian product of one grid cell's choices as flat arrays."""
    axes, pairs = _axes(cell, space)
    e_idx, s_idx, zero, pair, rc, mbs, prec, redundant = (
        a.ravel() for a in np.meshgrid(*axes, indexing="ij"))
    expert = np.array(cell["expert"], dtype=np.int64)
    codes = np.array([SCHEDULES.index(s) for s, _ in cell["sched"]], dtype=np.int8)
    vpps = np.array([v for _, v in cell["sched"]], dtype=np.int64)
    sp_ovl = np.array(pairs, dtype=bool).reshape(-1, 2)
    n = len(zero)

    def full(value: object, dtype: type = np.int64) -> np.ndarray:
        return np.full(n, value, dtype=dtype)

    return {
        "tp": full(cell["tp"]), "pp": full(cell["pp"]), "cp": full(cell["cp"]), "ep": expert[e_idx, 0],
        "etp": expert[e_idx, 1], "vpp": vpps[s_idx], "zero": zero, "mbs": mbs, "gbs": full(gbs), "seq": full(seq),
        "sp": sp_ovl[pair, 0], "recompute": rc, "schedule": codes[s_idx], "precision": prec,
        "recompute_blocks": full(1.0, float),
        "flash_attention": full(True, bool), "tp_overlap": sp_ovl[pair, 1], "dispatch": full(0, np.int8),
        "redundant_experts": redundant, "ep_overlap": full(False, bool),
        "p2p_overlap": full(True, bool),
        "pp_scatter_gather": space.pp_scatter_gather & scatter_gather_acts(cell["tp"], cell["pp"], sp_ovl[pair, 0]),
    }


_TIME_ONLY_RULES = tuple(r for r in RULES if r.time_only)
"""The rules that read the time-only fields (the base layouts already pass every other rule)."""


def _time_options(lay: Layouts, model: ModelSpec, cluster: ClusterSpec, space: SearchSpace
                  ) -> tuple[Layouts, np.ndarray]:
    """Every valid combination of `lay` with the space's time-only choices, and each row's source index.

    dispatch and ep_overlap change the step time but not the memory: a search computes each layout's memory
    once with their base values (alltoall, no overlap) and expands it here."""
    if model.moe is None:
        return lay, np.arange(len(lay))
    n = len(lay)
    options = np.array([(DISPATCHERS.index(d), o) for d in space.dispatch for o in space.ep_overlap],
                       dtype=np.int64).reshape(-1, 2)
    ok = np.stack([valid_mask(dataclasses.replace(lay, dispatch=np.full(n, d, np.int8),
                                                  ep_overlap=np.full(n, bool(o))),
                              model, cluster, _TIME_ONLY_RULES) for d, o in options], axis=1)
    parent, option = np.nonzero(ok)
    wide = dataclasses.replace(lay.take(parent), dispatch=options[option, 0].astype(np.int8),
                               ep_overlap=options[option, 1].astype(bool))
    return wide, parent


def enumerate_layouts(model: ModelSpec, cluster: ClusterSpec, gbs: int, seq: int, space: SearchSpace,
                      chunk: int = CHUNK, cells: list[dict] | None = None) -> Iterator[Layouts]:
    """Every layout of the space (or of the given grid `cells`) that passes the Strategy rules, with the
    time-only fields at their base values (see _time_options), in chunks of at most `chunk`."""
    buffer: list[dict[str, np.ndarray]] = []
    size = 0

    def valid(blocks: list[dict[str, np.ndarray]]) -> Layouts:
        lay = Layouts(**{k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]})
        return lay.take(np.flatnonzero(valid_mask(lay, model, cluster)))

    pending: Layouts | None = None
    for cell in (cells if cells is not None else _grid(model, cluster, gbs, seq, space)):
        block = _expand(cell, gbs, seq, space)
        buffer.append(block)
        size += len(block["tp"])
        if size < chunk:
            continue
        lay = valid(buffer)
        buffer, size = [], 0
        pending = lay if pending is None else _concat(pending, lay)
        while len(pending) >= chunk:
            yield pending.take(np.arange(chunk))
            pending = pending.take(np.arange(chunk, len(pending)))
    if buffer:
        lay = valid(buffer)
        pending = lay if pending is None else _concat(pending, lay)
    if pending is not None and len(pending):
        yield pending


@dataclass(frozen=True, slots=True)
class PlanResult:
    plans: list[Estimate]
    """Best layouts first."""
    evaluated: int
    """Valid layouts evaluated."""
    feasible: int
    """Of those, how many fit in memory."""
    search_seconds: float
    least_memory: Estimate | None = None
    """The layout needing the least memory (the closest to fitting) when nothing fits."""
    extra: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Partial:
    """What one batch of grid cells contributes to a search."""

    evaluated: int
    feasible: int
    least_required: float
    least: Layouts | None
    top: Layouts | None
    score: np.ndarray
    required: np.ndarray
    faster: int
    """Fitting layouts faster than the search's reference throughput (0 without one)."""


_STATE: dict[str, object] = {}
"""The search a forked worker runs (inherited at fork; only the small _Partial results travel back)."""


def _run_batch(index: int) -> _Partial:
    st = _STATE
    model, cluster, space = st["model"], st["cluster"], st["space"]
    cap, keep, layout_filter, chunk = st["cap"], st["keep"], st["filter"], st["chunk"]
    workload, stack = st["workload"], st["stack"]
    evaluated = feasible = faster = 0
    reference = st["reference"]
    least_req, least = np.inf, None
    top: Layouts | None = None
    score = required_top = np.empty(0)
    for lay in enumerate_layouts(model, cluster, st["gbs"], st["seq"], space, chunk=chunk,
                                 cells=st["batches"][index]):
        # Memory first: a layout that cannot fit needs no step time.
        base_peaks = peak_memory(model, cluster, lay, workload, stack)
        lay, parent = _time_options(lay, model, cluster, space)
        peaks = base_peaks.take(parent)
        if layout_filter is not None:
            keep_rows = np.flatnonzero(layout_filter(lay))
            lay, peaks = lay.take(keep_rows), peaks.take(keep_rows)
        if not len(lay):
            continue
        # Device memory includes the dispatcher's buffers (device.py), so it is completed after the expansion.
        required = peaks.reserved + outside_allocator_bytes(model, cluster, lay) / 2**30
        peaks = dataclasses.replace(peaks, device=required)
        evaluated += len(lay)
        i = int(np.argmin(required))
        if required[i] < least_req:
            least_req, least = float(required[i]), lay.take(np.array([i]))
        fitting = np.flatnonzero(required <= cap)
        feasible += len(fitting)
        if not len(fitting):
            continue
        if st["prune"]:
            fitting = fitting[_undominated(lay.take(fitting))]
        ev = evaluate_layouts(model, cluster, lay.take(fitting), breakdown=False, workload=workload,
                              peaks=peaks.take(fitting), stack=stack)
        if reference is not None:
            faster += int(np.count_nonzero(ev.tokens_per_s_per_gpu > reference * (1 + 1e-9)))
        order = np.argsort(-ev.tokens_per_s_per_gpu, kind="stable")[:keep]
        top, score, required_top = _top(top, score, required_top, ev.layouts.take(order),
                                        ev.tokens_per_s_per_gpu[order], ev.required_gib[order], keep)
    return _Partial(evaluated, feasible, least_req, least, top, score, required_top, faster)


_ALLTOALL, _DEEPEP_FP8 = DISPATCHERS.index("alltoall"), DISPATCHERS.index("deepep-fp8")
_DOMINANCE: tuple[tuple[str, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]], ...] = (
    # A lighter recompute setting only removes recomputed forward work (estimate.py adds it, nothing else);
    # among layouts that fit, the lighter one is never slower.
    ("recompute", lambda x: x, np.zeros_like),
    # EP overlap only widens the window the all-to-all hides behind (comm.ep_layer), and an fp8 DeepEP
    # dispatch only shrinks DeepEP's forward dispatch bytes: the sibling with either on is never slower.
    ("ep_overlap", lambda x: ~x, np.zeros_like),
    ("dispatch", lambda x: x != _DEEPEP_FP8, lambda x: x == _ALLTOALL),
)
"""(field, rank, class): within a class, a lower rank is never slower, every other field held equal."""


def _undominated(lay: Layouts) -> np.ndarray:
    """Indices of the layouts (all fitting) that no sibling beats by a dominance rule above: ranking for
    throughput needs no step time for them, and the best layout is unchanged."""
    keep = np.ones(len(lay), dtype=bool)
    names = [f.name for f in dataclasses.fields(Layouts)]
    worst = np.iinfo(np.int64).max
    for name, rank, cls in _DOMINANCE:
        values = getattr(lay, name)
        _, group = _group_rows([getattr(lay, n) for n in names if n != name] + [cls(values)])
        r = rank(values).astype(np.int64)
        best = np.full(group.max() + 1, worst)
        np.minimum.at(best, group, np.where(keep, r, worst))
        keep &= r <= best[group]
    return np.flatnonzero(keep)


def _top(top: Layouts | None, score: np.ndarray, required: np.ndarray, lay: Layouts, new_score: np.ndarray,
         new_required: np.ndarray, keep: int) -> tuple[Layouts, np.ndarray, np.ndarray]:
    """Merge candidates, keeping the best `keep`: higher throughput, then less memory, then simpler."""
    top = lay if top is None else _concat(top, lay)
    score = np.concatenate([score, new_score])
    required = np.concatenate([required, new_required])
    rank = np.lexsort((_complexity(top), required, -score))[:keep]
    return top.take(rank), score[rank], required[rank]


def _batches(cells: list[dict], space: SearchSpace, parts: int) -> list[list[dict]]:
    """Split grid cells into `parts` batches of about equal size (largest cells first, greedily)."""
    sizes = [_cell_size(c, space) for c in cells]
    out: list[list[dict]] = [[] for _ in range(parts)]
    load = [0] * parts
    for i in sorted(range(len(cells)), key=lambda i: -sizes[i]):
        j = load.index(min(load))
        out[j].append(cells[i])
        load[j] += sizes[i]
    return [b for b in out if b]


def plan(model: ModelSpec, cluster: ClusterSpec, *, gbs: int, seq: int, space: SearchSpace | None = None,
         objective: str = "throughput", top: int = 5, within: float = 0.05,
         layout_filter: Callable[[Layouts], np.ndarray] | None = None,
         progress: Callable[[int], None] | None = None, chunk: int = CHUNK, workers: int | None = None,
         workload: Workload = UNIFORM, faster_than: float | None = None,
         stack: StackSpec | None = None) -> PlanResult:
    """Rank every valid layout that fits. objective 'memory' returns, among the layouts within `within`
    of the best throughput, the ones with the most memory headroom; 'cost' (GPU-hours per token on a fixed
    cluster) ranks like 'throughput'. `layout_filter` restricts the space further (a framework's
    abilities); `progress` is called with the running count of evaluated layouts; `chunk` bounds how many
    layouts are evaluated at once (memory) and `workers` how many processes share the grid (default: the
    CPU count, for large spaces), neither changing the result. `faster_than` (tokens/s/GPU) also counts the
    fitting layouts that beat it, in extra["faster"] (every layout is then timed: no dominance pruning).
    `stack` (default megatron-core): only the layouts it can run are searched, costed as it runs them.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}")
    stack = load_stack(stack)
    space = restrict_space(space or SearchSpace(), stack)
    layout_filter = _both(stack_filter(stack, model), layout_filter)
    start = time.perf_counter()
    keep = max(top, 1) if objective != "memory" else max(top, 1) * 50
    cells = list(_grid(model, cluster, gbs, seq, space))
    workers = workers if workers is not None else (os.cpu_count() or 1)
    parts = max(1, min(workers, len(cells))) * 4 if workers > 1 else 1
    _STATE.update(model=model, cluster=cluster, space=space, gbs=gbs, seq=seq, keep=keep, chunk=chunk,
                  workload=workload, stack=stack, prune=objective != "memory" and faster_than is None,
                  reference=faster_than,
                  cap=space.memory_cap_gib(cluster), filter=layout_filter,
                  batches=_batches(cells, space, parts) if cells else [])
    indices = range(len(_STATE["batches"]))
    partials: list[_Partial] = []
    evaluated = 0
    with contextlib.ExitStack() as resources:
        run = map
        if workers > 1 and len(indices) > 1 and "fork" in mp.get_all_start_methods():
            run = resources.enter_context(mp.get_context("fork").Pool(min(workers, len(indices)))).imap_unordered
        for part in run(_run_batch, indices):
            partials.append(part)
            evaluated += part.evaluated
            if progress:
                progress(evaluated)
    best: tuple[Layouts, np.ndarray, np.ndarray] | None = None
    for part in partials:
        if part.top is not None:
            best = (_top(best[0], best[1], best[2], part.top, part.score, part.required, keep) if best
                    else (part.top, part.score, part.required))
    plans: list[Estimate] = []
    if best is not None:
        ev = evaluate_layouts(model, cluster, best[0], workload=workload, stack=stack)
        for i in range(len(best[0])):
            # A layout that predicts exactly like a simpler one ranked above it adds nothing to the list.
            if plans and ev.step_time_s[i] == plans[-1].step_time_s and ev.required_gib[i] == plans[-1].required_gib:
                continue
            plans.append(ev.estimate(i))
    seconds = time.perf_counter() - start
    if objective == "memory" and plans:
        floor = plans[0].tokens_per_s_per_gpu * (1 - within)
        plans = sorted((e for e in plans if e.tokens_per_s_per_gpu >= floor), key=lambda e: e.required_gib)
    least = min((p for p in partials if p.least is not None), key=lambda p: p.least_required, default=None)
    least_estimate = (evaluate_layouts(model, cluster, least.least, workload=workload, stack=stack).estimate(0)
                      if least else None)
    extra = {"faster": sum(p.faster for p in partials)} if faster_than is not None else {}
    return PlanResult(plans=plans[:top], evaluated=evaluated, feasible=sum(p.feasible for p in partials),
                      search_seconds=seconds, least_memory=least_estimate, extra=extra)


def _both(a: Callable[[Layouts], np.ndarray], b: Callable[[Layouts], np.ndarray] | None
          ) -> Callable[[Layouts], np.ndarray]:
    """A layout filter passing what both filters pass."""
    return a if b is None else (lambda lay: a(lay) & b(lay))


def _concat(a: Layouts, b: Layouts) -> Layouts:
    return Layouts(**{f.name: np.concatenate([getattr(a, f.name), getattr(b, f.name)])
                      for f in dataclasses.fields(Layouts)})


def _complexity(lay: Layouts) -> np.ndarray:
    """Tie-break between equally fast layouts: fewer parallel dimensions and lower ZeRO stages first."""
    return (lay.tp * lay.pp * lay.cp * lay.ep * lay.etp * lay.vpp).astype(float) + lay.zero + lay.tp_overlap


def levers(model: ModelSpec, cluster: ClusterSpec, *, gbs: int, seq: int, space: SearchSpace,
           workload: Workload = UNIFORM, stack: StackSpec | None = None) -> dict[str, float]:
    """Least memory any layout needs (GiB, allocator headroom and context included) under each lever that
    the user's space did not already allow, computed by searching again with that lever opened."""
    out: dict[str, float] = {}
    trials: list[tuple[str, ClusterSpec, SearchSpace]] = []
    if 3 not in space.zero:
        trials.append(("ZeRO-3", cluster, dataclasses.replace(space, zero=(*space.zero, 3))))
    if "full" not in space.recompute:
        trials.append(("full recompute", cluster, dataclasses.replace(space, recompute=(*space.recompute, "full"))))
    if space.cp is not None:
        trials.append(("any context parallelism", cluster, dataclasses.replace(space, cp=None)))
    if space.pp is not None:
        trials.append(("any pipeline depth", cluster, dataclasses.replace(space, pp=None)))
    if "fp8" not in space.precision and cluster.gpu.supports_fp8:
        trials.append(("fp8", cluster, dataclasses.replace(space, precision=(*space.precision, "fp8"))))
    for factor in (2, 4):
        bigger = cluster.with_gpus(cluster.gpus * factor)
        trials.append((f"{factor}× the GPUs ({bigger.gpus})", bigger, space))
    stack = load_stack(stack)
    runnable = stack_filter(stack, model)
    base = restrict_space(space, stack)
    for name, cl, sp in trials:
        sp = restrict_space(sp, stack)
        if sp == base and cl is cluster:
            continue  # a lever the stack cannot pull
        least = None
        for lay in enumerate_layouts(model, cl, gbs, seq, sp):
            lay = lay.take(np.flatnonzero(runnable(lay)))
            if not len(lay):
                continue
            req = float(required_memory_gib(model, cl, lay, workload, stack).min())
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
    if result.least_memory is None:
        raise NoFeasiblePlanError(
            f"no valid layout of {model.name} on {cluster.gpus} GPUs with gbs={gbs}, seq={seq} under the given "
            "restrictions (every combination breaks a Strategy rule, e.g. gbs must be a multiple of dp·mbs)")
    cap = space.memory_cap_gib(cluster)
    need = result.least_memory.required_gib
    options = levers(model, cluster, gbs=gbs, seq=seq, space=space, workload=kw.get("workload", UNIFORM),
                     stack=kw.get("stack"))
    helps = [f"{name}: {gib:.1f} GiB{' (fits)' if gib <= cap else ''}" for name, gib in
             sorted(options.items(), key=lambda kv: kv[1])]
    raise NoFeasiblePlanError(
        f"no layout of {model.name} fits in {cap:.1f} GiB per GPU on {cluster.gpus}× {cluster.name}: the least any "
        f"of the {result.evaluated:,} valid layouts needs is {need:.1f} GiB "
        f"({result.least_memory.strategy.as_dict(cluster.gpus)}). Least memory with each lever: "
        + ("; ".join(helps) if helps else "none left to open") + ".")
