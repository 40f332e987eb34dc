"""The search's proofs (issue #18). The search skips a whole block of layouts when a lower bound on their step
time exceeds the step time of the plans it has found; each bound is the cost model's own pipeline term with
communication and recompute relaxed (estimate.step_time_bound, estimate.time_options_bound). Here: each bound
is below the step time of every layout it covers, each invariant the bounds rely on holds as a property of
the cost functions, and the counts of layouts the search never builds are exact. A cost-model change that
breaks an invariant fails here instead of silently losing the best layout."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from parplan.export import framework_filter
from parplan.hardware import load_cluster
from parplan.models import LayerKind, load_model
from parplan.planner import (
    compute,
    estimate,
    search_cost,
    search_dominance,
    search_grid,
    search_layouts,
    search_survey,
    search_workers,
)
from parplan.planner.context import RC_NONE, Ctx
from parplan.planner.estimate import (
    BOUND_FREE,
    evaluate_layouts,
    pipeline_seconds,
    step_time_bound,
    time_options_bound,
)
from parplan.planner.schedule import S_1F1B, S_DUALPIPE, bubble_time, rank_patterns
from parplan.planner.search import SearchSpace, plan
from parplan.planner.strategy import Layouts, Strategy
from parplan.planner.workload import parse_expert_load
from parplan.stacks.presets import load_stack
from parplan.stacks.support import restrict_space, stack_filter

# Spaces small enough to cost every layout, covering dense and MoE models, MLA, fp8, every schedule, the
# time-only choices, a skewed router, a framework's filter and every training stack's cost model (the last
# field: the stack whose facts cost the layouts and whose abilities restrict them).
CASES = {
    "dense": ("llama3.1-8b", "h100", 32, 64, 4096, SearchSpace(precision=("bf16", "fp8"), pp=(1, 2, 4), mbs=(1, 2),
                                                               cp=(1, 2)), None, None, "megatron-core"),
    "moe": ("qwen1.5-moe-a2.7b", "h100", 16, 32, 4096, SearchSpace(precision=("bf16", "fp8"), pp=(1, 2), mbs=(1, 2),
                                                                   cp=(1,), redundant_experts=(0, 4)), None, None,
            "megatron-core"),
    "mla": ("deepseek-v2-lite", "h800", 16, 32, 4096, SearchSpace(precision=("fp8",), pp=(1, 2, 4), mbs=(1,),
                                                                  cp=(1, 2)), "zipf:1.2", None,
            "megatron-core"),
    "framework": ("qwen1.5-moe-a2.7b", "h100", 16, 32, 4096, SearchSpace(pp=(1, 2), mbs=(1, 2), cp=(1,)), None,
                  "megatron", "megatron-core"),
    "torchtitan": ("llama3.1-8b", "h100", 32, 64, 4096, SearchSpace(pp=(1, 2, 4), mbs=(1, 2), cp=(1, 2)), None, None,
                   "torchtitan"),
    "fsdp": ("llama3.1-8b", "a100-80gb", 16, 64, 4096, SearchSpace(pp=(1,), mbs=(1, 2, 4)), None, None, "fsdp"),
    "maxtext": ("llama3.1-8b", "h100", 16, 32, 4096, SearchSpace(pp=(1, 2), mbs=(1, 2)), None, None, "maxtext"),
    "nanotron": ("llama3.1-8b", "h100", 16, 32, 4096, SearchSpace(pp=(1, 2), mbs=(1, 2)), None, None, "nanotron"),
    "megatron-deepspeed": ("llama3.1-8b", "a100-80gb", 16, 32, 2048, SearchSpace(pp=(1, 2, 4), mbs=(1, 2)), None,
                           None, "megatron-deepspeed"),
    "deepseek": ("deepseek-v2-lite", "h800", 16, 32, 4096, SearchSpace(precision=("fp8",), pp=(1, 2, 4), mbs=(1,),
                                                                       cp=(1,)), "zipf:1.2", None, "deepseek"),
}


def _case(name):
    model_name, gpu, gpus, gbs, seq, space, load, framework, stack_name = CASES[name]
    model, cluster, stack = load_model(model_name), load_cluster(gpu, gpus=gpus), load_stack(stack_name)
    workload = parse_expert_load(load, model)
    # As search.plan composes them: the stack's abilities, then the framework's.
    runnable = stack_filter(stack, model, cluster.gpus)
    extra = framework_filter(framework, model) if framework else None
    layout_filter = runnable if extra is None else (lambda lay: runnable(lay) & extra(lay))
    return model, cluster, gbs, seq, restrict_space(space, stack), workload, layout_filter, stack


def _start(model, cluster, gbs, seq, space, workload, layout_filter, stack):
    """The search's state as search.plan sets it for a survey; the grid's cells."""
    search_workers._STATE.update(model=model, cluster=cluster, space=space, gbs=gbs, seq=seq, workload=workload,
                                 filter=layout_filter, cells=list(search_grid._grid(model, cluster, gbs, seq, space)),
                                 bound=True, stack=stack)
    return search_workers._STATE["cells"]


def _blocks(model, cluster, gbs, seq, space, workload, layout_filter, stack):
    """Every block of a space with its count, its three bounds (the survey's floor, the pipeline of compute
    alone, the pipeline with communication), and the step time of each of its layouts."""
    cells = _start(model, cluster, gbs, seq, space, workload, layout_filter, stack)
    survey = search_survey._survey(list(range(len(cells))))
    reps = search_grid._representatives(search_grid._fields_of(cells, survey.cell, survey.flat, gbs, seq, space))
    bounds = (survey.bound, search_cost._refine(reps), search_cost._tighten(reps))
    lay, owner = search_layouts._expand(reps, model, space)
    rows = search_layouts._valid(lay, model, cluster)
    lay, owner = lay.take(rows), owner[rows]
    lay, parent = search_layouts._time_options(lay, model, cluster, space)
    owner = owner[parent]
    if layout_filter is not None:
        rows = np.flatnonzero(layout_filter(lay))
        lay, owner = lay.take(rows), owner[rows]
    step = evaluate_layouts(model, cluster, lay, breakdown=False, workload=workload, stack=stack).step_time_s
    return survey, bounds, lay, owner, step


@pytest.fixture(scope="module", params=sorted(CASES))
def blocks(request):
    case = _case(request.param)
    return (case, *_blocks(*case))


def test_every_bound_is_below_every_step_time_it_covers(blocks):
    """The skip criterion itself: no block's bound (the survey's floor, the pipeline of compute alone, the
    pipeline with communication) exceeds the step time of any layout in the block."""
    _, survey, bounds, lay, owner, step = blocks
    least = np.full(len(survey.count), np.inf)
    np.minimum.at(least, owner, step)
    for bound in bounds:
        assert (bound <= least * (1 + 1e-12)).all()
    # Bounds that prove nothing would make the property empty: each is tighter than the one before on
    # average, and the last is within 10% of the block's fastest layout somewhere. Without a pipeline (FSDP
    # runs none) the last two coincide: there is no pipeline communication to add.
    means = [np.mean(b) for b in bounds]
    # Without a pipeline the survey's floor may equal the compute pipeline, summed in another order: compare to
    # the rounding tolerance of the check above.
    assert (means[0] < means[1] < means[2]) if lay.pp.max() > 1 else (
        means[0] <= means[1] * (1 + 1e-12) and means[1] == means[2])
    assert (bounds[2] >= 0.9 * least).any()


def test_counts_without_building_equal_the_layouts_built(blocks):
    """Blocks are counted by summing the rules over their axes (search_survey._count_valid); the counts must
    equal the layouts the search builds for the same blocks, rules, time-only choices and filter."""
    _, survey, _, _, owner, _ = blocks
    assert np.array_equal(np.bincount(owner, minlength=len(survey.count)), survey.count)


@pytest.mark.parametrize("name", ["dense", "moe", "torchtitan"])
def test_the_survey_is_the_same_however_its_cells_are_stacked(name, monkeypatch):
    """The survey counts cells stacked in padded groups (search_survey._survey_groups); one cell per group gives
    the same blocks, counts and floors in the same order."""
    ids = list(range(len(_start(*_case(name)))))
    stacked = search_survey._survey(ids)
    monkeypatch.setattr(search_survey, "SURVEY_SMALL", 0)
    monkeypatch.setattr(search_survey, "SURVEY_BLOCKS", 1)
    assert len(list(search_survey._survey_groups(search_workers._STATE["cells"], ids))) == len(ids) > 1
    alone = search_survey._survey(ids)
    for field in ("cell", "flat", "count", "bound"):
        assert np.array_equal(getattr(stacked, field), getattr(alone, field))


def _sample(blocks, n=400, seed=0):
    (model, cluster, _, _, _, workload, _, stack), _, _, lay, _, step = blocks
    pick = np.random.default_rng(seed).choice(len(lay), size=min(n, len(lay)), replace=False)
    return model, cluster, workload, lay.take(pick), step[pick], stack


def _with(lay: Layouts, **fields) -> Layouts:
    return dataclasses.replace(lay, **{k: np.full(len(lay), v, dtype=getattr(lay, k).dtype)
                                       for k, v in fields.items()})


def test_the_pipeline_term_is_at_most_the_step(blocks):
    """Invariant 4 of both bounds: the step adds non-negative time (data-parallel traffic, optimizer) to the
    pipeline term; and the pipeline with communication and recompute is at least its compute alone (1)."""
    model, cluster, workload, lay, step, stack = _sample(blocks)
    pipe = pipeline_seconds(model, cluster, lay, workload, stack)
    assert (pipe <= step * (1 + 1e-12)).all()
    assert (pipeline_seconds(model, cluster, lay, workload, stack, compute_only=True) <= pipe * (1 + 1e-12)).all()


def test_compute_alone_reads_no_free_field_nor_the_schedule(blocks):
    """Invariant 2 of step_time_bound, and what estimate._COMPUTE_KEYS (the key compute is shared under)
    declares: the compute functions give the same seconds whatever the free fields and the schedule."""
    model, cluster, workload, lay, _, stack = _sample(blocks, n=100)
    ref = Ctx.build(model, cluster, lay, workload, stack)
    kinds = [LayerKind.DENSE] + ([LayerKind.MOE] if model.moe_layer_count else [])
    for fields in ({"zero": 3, "recompute": 3, "tp_overlap": False, "dispatch": 2, "ep_overlap": True},
                   {"zero": 0, "recompute": 2, "dispatch": 1, "schedule": 0, "vpp": 1, "pp": 1}):
        other = Ctx.build(model, cluster, _with(lay, **fields), workload, stack)
        for fn in (compute.head_time, compute.embedding_time, compute.mtp_extra_time,
                   *(lambda c, k=k: compute.layer_time(c, k) for k in kinds),
                   *(lambda c, k=k: compute.norm_recompute_time(c, k) for k in kinds)):
            a, b = fn(ref), fn(other)
            for f in dataclasses.fields(a) if dataclasses.is_dataclass(a) else [None]:
                x, y = (getattr(a, f.name), getattr(b, f.name)) if f else (a, b)
                assert np.array_equal(x, y)
    assert set(BOUND_FREE) | {"schedule"} <= set(f.name for f in dataclasses.fields(Layouts)) - set(
        estimate._COMPUTE_KEYS)


def test_compute_alone_bound_ignores_the_free_fields(blocks):
    model, cluster, workload, lay, _, stack = _sample(blocks, n=200)
    bound = step_time_bound(model, cluster, lay, workload, stack)
    for fields in ({"zero": 3, "recompute": 3}, {"zero": 0, "recompute": 1, "tp_overlap": False, "dispatch": 1}):
        assert np.array_equal(step_time_bound(model, cluster, _with(lay, **fields), workload, stack), bound)


def test_pipeline_reads_no_zero_and_recompute_only_adds(blocks):
    """Invariants 1 and 2 of time_options_bound: the pipeline term does not read zero, and with recompute
    none it is at most the pipeline with any recompute (forward and weight-grad unchanged, backward only
    longer)."""
    model, cluster, workload, lay, _, stack = _sample(blocks)
    pipe = pipeline_seconds(model, cluster, lay, workload, stack)
    for zero in range(4):
        assert np.array_equal(pipeline_seconds(model, cluster, _with(lay, zero=zero), workload, stack), pipe)
    none = _with(lay, recompute=RC_NONE)
    assert (pipeline_seconds(model, cluster, none, workload, stack) <= pipe * (1 + 1e-12)).all()
    works, inverse = estimate._units(model, cluster, lay, workload, stack)
    base, base_inverse = estimate._units(model, cluster, none, workload, stack)
    for unit in estimate._UNITS:
        w, b = works[unit], base[unit]
        assert np.array_equal(w.fwd[inverse], b.fwd[base_inverse])
        assert np.array_equal(w.wgrad[inverse], b.wgrad[base_inverse])
        assert (w.bwd[inverse] >= b.bwd[base_inverse]).all()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 64), v=st.integers(1, 8), schedule=st.integers(0, 4),
       t=st.lists(st.floats(0.0, 10.0), min_size=3, max_size=3), grow=st.lists(st.floats(0.0, 5.0), min_size=3,
                                                                                 max_size=3))
def test_bubble_never_falls_as_forward_or_backward_grows(p, v, schedule, t, grow):
    """Invariant 3 of both bounds: schedule.bubble_time is non-decreasing in the ranks' t_f and t_b and
    non-increasing in t_w (the weight-grad part zero-bubble schedules defer), for every pipeline the Strategy
    rules allow (schedules other than 1F1B need pp > 1, DualPipe an even pp)."""
    assume(schedule == S_1F1B or (p > 1 and (schedule != S_DUALPIPE or p % 2 == 0)))
    t_f, t_b, t_w = t
    t_w = min(t_w, t_b)
    args = (np.array([p]), np.array([v]), np.array([schedule]))
    base = bubble_time(*args, np.array([t_f]), np.array([t_b]), np.array([t_w]))[0]
    up = bubble_time(*args, np.array([t_f + grow[0]]), np.array([t_b + grow[1]]), np.array([t_w]))[0]
    less_w = bubble_time(*args, np.array([t_f]), np.array([t_b]), np.array([max(0.0, t_w - grow[2])]))[0]
    assert up >= base - 1e-12 * max(1.0, base)
    assert less_w >= base - 1e-12 * max(1.0, base)


def test_every_schedule_passes_each_unit_once_per_microbatch():
    """What compute_floor relies on: summed over a pipeline's ranks, each rank's units times its work share
    are the model's (estimate.model_units), for every schedule and depth."""
    for name in ("llama3.1-8b", "deepseek-v3", "gpt-oss-120b"):
        model = load_model(name)
        want = estimate.model_units(model)
        for pp in (1, 2, 3, 4, 8):
            for schedule, vpps in ((0, [1]), (1, [2, 3]), (2, [1]), (3, [1]), (4, [2])):
                if (schedule and pp == 1) or (schedule == 3 and pp % 2) or pp * max(vpps) > model.layers:
                    continue
                for vpp in vpps:
                    pats = rank_patterns(model, pp, vpp, schedule)
                    got = {u: sum(pt.count * pt.work * getattr(pt, u) for pt in pats) for u in want}
                    assert got == pytest.approx(want), (name, pp, vpp, schedule)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 64), v=st.integers(1, 8), schedule=st.integers(0, 4),
       t=st.lists(st.floats(0.0, 10.0), min_size=3, max_size=3))
def test_bubble_is_never_negative(p, v, schedule, t):
    """compute_floor leaves the bubble out: it must be >= 0 for every pipeline the rules allow."""
    assume(schedule == S_1F1B or (p > 1 and (schedule != S_DUALPIPE or p % 2 == 0)))
    t_f, t_b, t_w = t
    assert bubble_time(np.array([p]), np.array([v]), np.array([schedule]), np.array([t_f]), np.array([t_b]),
                       np.array([min(t_w, t_b)]))[0] >= 0


def test_time_options_bound_of_a_layout_without_options_proves_nothing():
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=8)
    lay = Layouts.from_strategies([Strategy(tp=8, gbs=8, seq=2048), Strategy(tp=4, gbs=8, seq=2048)])
    bound = time_options_bound(model, cluster, lay, lay.take(np.array([1])), np.array([1]))
    assert bound[0] == -np.inf and bound[1] > 0


# --------------------------------------------------------------------------- the search, bounded or not

@pytest.mark.parametrize("name", ["dense", "moe", "framework", "torchtitan", "fsdp", "maxtext", "deepseek"])
def test_bounded_search_equals_the_unbounded_one(name):
    """Skipping blocks changes what is costed, never the plans nor the count of valid layouts, on any stack."""
    model, cluster, gbs, seq, space, workload, layout_filter, stack = _case(name)
    kw = {"gbs": gbs, "seq": seq, "space": space, "workload": workload, "layout_filter": layout_filter, "top": 5,
          "stack": stack}
    bounded = plan(model, cluster, workers=1, **kw)
    full = plan(model, cluster, workers=1, bound=False, **kw)
    assert [(p.strategy, p.step_time_s) for p in bounded.plans] == [(p.strategy, p.step_time_s) for p in full.plans]
    assert bounded.evaluated == full.evaluated == full.costed and full.skipped == 0
    assert bounded.costed + bounded.skipped == bounded.evaluated
    # Without a pipeline (FSDP) the bounds are the compute every layout of a block shares: they prove a
    # block no better only against a pipeline; here every block holds a candidate.
    assert bounded.skipped > 0 or name == "fsdp"


def test_workers_change_nothing():
    model, cluster = load_model("qwen1.5-moe-a2.7b"), load_cluster("h100", gpus=32)
    one = plan(model, cluster, gbs=64, seq=4096, workers=1, chunk=5000)
    two = plan(model, cluster, gbs=64, seq=4096, workers=2)
    assert [p.strategy for p in one.plans] == [p.strategy for p in two.plans]
    assert (one.evaluated, one.skipped, one.feasible) == (two.evaluated, two.skipped, two.feasible)


def test_faster_than_counts_as_the_unbounded_search():
    """validate --rank counts the fitting layouts faster than a published one: blocks bounded above its
    step time are skipped, and the count is unchanged."""
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=16)
    kw = {"gbs": 64, "seq": 4096, "top": 1, "workers": 1, "space": SearchSpace(pp=(1, 2), cp=(1, 2))}
    reference = plan(model, cluster, **kw).plans[0].tokens_per_s_per_gpu * 0.9
    bounded = plan(model, cluster, faster_than=reference, chunk=500, **kw)  # many batches per task
    full = plan(model, cluster, faster_than=reference, bound=False, **kw)
    assert bounded.extra["faster"] == full.extra["faster"] > 0 and bounded.skipped > 0


def test_a_past_deadline_returns_the_first_batch_marked_incomplete():
    """The first task stops after its first batch: what it settled counts, the rest is left."""
    model, cluster = load_model("llama3.1-70b"), load_cluster("h100", gpus=512)
    result = plan(model, cluster, gbs=512, seq=4096, workers=1, deadline=0.0)
    assert result.plans and not result.complete and result.left > 0
    assert result.evaluated + result.left == plan(model, cluster, gbs=512, seq=4096, workers=1).evaluated
    assert math.isfinite(result.plans[0].step_time_s)


def test_dominance_ranks_stay_within_blocks():
    """The dominance pruning compares siblings that differ in one inner field: they share their block."""
    fields = set(search_dominance._DOMINANCE)
    assert fields <= set(search_grid._AXES[search_grid._BLOCK:])


def test_axes_cover_every_field_the_search_sets():
    """Every Layouts field is either fixed per cell, a block axis or an inner axis (or a constant)."""
    named = {"tp", "pp", "cp", "ep", "etp", "vpp", "schedule", "mbs", "precision", "redundant_experts", "sp",
             "zero", "tp_overlap", "recompute", "dispatch", "ep_overlap", "gbs", "seq", "flash_attention",
             "p2p_overlap", "pp_scatter_gather", "dp_replicate", "recompute_blocks"}
    assert named == {f.name for f in dataclasses.fields(Layouts)}
    assert set(itertools.chain(search_grid._AXES)) - {"expert", "schedule"} <= named
