"""`plan`: every valid layout of a model on a cluster, ranked, by branch and bound over blocks of layouts.

The space is the cartesian product of every degree and setting the Strategy rules allow (tp, pp, cp, ep, etp,
vpp with its schedule, zero, sp, recompute, every divisor of the per-replica batch as micro-batch, precision,
TP overlap, dispatch, EP overlap, redundant experts) under the user's restrictions; nothing is sampled. The
search cuts it into blocks: a (tp, pp, cp) with one expert grid, schedule, micro-batch size, precision,
redundancy and SP setting, inside which only the estimate.BOUND_FREE choices vary (zero, recompute, TP
overlap, dispatch, EP overlap).

1. Survey (search_survey): every block's valid layouts are counted without building them (the Strategy rules
   evaluated over a grid cell's axes broadcast against each other, then summed), and its step time is
   bounded from below by estimate.compute_floor (the whole model's compute over the pipeline ranks).
2. Cost (search_cost), in the order of the floors: each bound is computed only where the cheaper one before it
   is within the limit, the step time of the `keep`-th best layout found so far: estimate.step_time_bound
   (the pipeline of compute alone), then estimate.time_options_bound (the pipeline with the least
   communication the block allows); the blocks still within it are costed through the same
   `evaluate_layouts` that `explain` uses (memory first; the time of those that fit and that no sibling
   provably beats, search_dominance). A block bounded above the limit cannot hold a better layout: it is
   proved no better without being costed, and so is every block after the first whose floor is above it.
Every bound is computed through the cost functions themselves and rests on invariants stated where it is
computed and tested as properties (tests/test_bound.py). Cells and costing tasks are spread over the CPUs
(forked workers: search_workers) for large spaces. The answer is the exhaustive search's: tests compare it with
a scalar brute force and with the search run without bounds.

The space and its blocks are built by search_grid and search_layouts, the answer by search_result. This
module holds the entry points (plan, plan_or_raise and its levers) and the loop that hands out the costing
tasks in bound order and tightens the limit as their results come back. The underscored names these modules
import from each other are the search's inner workings, shared among them only.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable

import numpy as np

from parplan._mapping import MAX_INT
from parplan.errors import ConfigError, NoFeasiblePlanError
from parplan.hardware.spec import ClusterSpec
from parplan.limits import MAX_PLAN_GPUS
from parplan.models.spec import ModelSpec
from parplan.planner.search_cost import SLACK, Best, _cost, _kth_limit, _merge, _Partial, _settings_memory
from parplan.planner.search_dominance import _dominance
from parplan.planner.search_grid import SearchSpace, _Cell, _grid
from parplan.planner.search_layouts import CHUNK, enumerate_layouts
from parplan.planner.search_result import PlanResult, _Found, _result
from parplan.planner.search_survey import _Survey, _survey
from parplan.planner.search_workers import _STATE, PARALLEL_MIN, _Runner, _split
from parplan.planner.strategy import Layouts
from parplan.planner.workload import UNIFORM, Workload
from parplan.stacks.presets import EXPANDABLE_SEGMENTS, load_stack, with_expandable_segments
from parplan.stacks.spec import StackSpec
from parplan.stacks.support import restrict_space, stack_filter

OBJECTIVES = ("throughput", "memory", "cost")
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
MAX_BLOCKS = 1 << 25
"""Searches over more blocks than this (seven times DeepSeek-V3's full space on 2,048 GPUs) are refused up
front: counting and bounding every block takes about a microsecond each on one core."""
MAX_LAYERS = 1024
"""Models deeper than this are refused by the search: eight times the deepest published LLM (Llama 3.1 405B,
126 layers); the interleaved schedule alone would offer ~layers·ln(layers) virtual-stage settings."""


def check_size(model: ModelSpec, cluster: ClusterSpec, gbs: int, seq: int) -> None:
    """Refuse, up front and with the reason, a search too large to mean anything or to finish."""
    if cluster.gpus > MAX_PLAN_GPUS:
        raise ConfigError(f"{cluster.gpus:,} GPUs is beyond the {MAX_PLAN_GPUS:,} a plan is searched for (five times "
                          "the largest GPU cluster built)", field="gpus")
    if model.layers > MAX_LAYERS:
        raise ConfigError(f"{model.name} has {model.layers:,} layers, beyond the {MAX_LAYERS:,} a plan is searched "
                          "for (eight times the deepest published LLM)", field="layers")
    if gbs * seq >= MAX_INT:
        raise ConfigError(f"gbs·seq = {gbs * seq:.3g} tokens per step is beyond what float64 counts exactly",
                          field="gbs")


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
        runner.start()
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


def _run_costing(runner: _Runner, survey: _Survey, keep: int, tokens_per_gpu: float, deadline: float | None,
                 progress: Callable[[int, int], None] | None) -> _Found:
    """Cost blocks in bound order, a few tasks in flight, until the next block's bound exceeds the limit."""
    n = len(survey.count)
    done = np.zeros(n, dtype=bool)
    tight = np.full(n, -np.inf)
    feasible, faster = (np.zeros(n, dtype=np.int64) for _ in range(2))
    total = int(survey.count.sum())
    # Tasks: runs of consecutive blocks, small at first (the first sets the limit the others are cut by).
    cuts = [0]
    while cuts[-1] < n:
        cuts.append(min(n, cuts[-1] + min(TASK_BLOCKS, FIRST_TASK_BLOCKS << 2 * (len(cuts) - 1))))
    best: Best | None = None
    least: tuple[float, Layouts] | None = None
    reference_step = _STATE["reference_step"]

    def limit() -> float:
        """Blocks bounded above this step time hold no layout among the best `keep` nor faster than the
        reference (the keep-th best found so far sets it; inf until `keep` layouts fit)."""
        return _kth_limit(best, keep, tokens_per_gpu, reference_step) if _STATE["bound"] else math.inf

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
        feasible[part.blocks], faster[part.blocks] = part.feasible, part.faster
        best, least = _merge(best, least, part, keep)
        if progress:
            settled = done | (np.maximum(survey.bound, tight) > limit() * (1 + SLACK))
            progress(int(survey.count[settled].sum()), total)
    return _Found(done, np.maximum(survey.bound, tight), feasible, faster, best, least, limit())


def _both(a: Callable[[Layouts], np.ndarray], b: Callable[[Layouts], np.ndarray] | None
          ) -> Callable[[Layouts], np.ndarray]:
    """A layout filter passing what both filters pass (elementwise, as each is)."""
    return a if b is None else (lambda lay: a(lay) & b(lay))


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
            # the search's memory: every setting of the time-only fields the stack runs (the dispatcher's buffers)
            required = _settings_memory(lay, model, cl, sp, workload, st, runnable)[2].device
            if len(required):
                least = float(required.min()) if least is None else min(least, float(required.min()))
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
