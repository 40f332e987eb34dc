"""`parplan plan`: search every layout and recommend the best, with the reason and the command to inspect it."""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from parplan.cli._options import (
    ClusterOpt,
    ExpertLoadOpt,
    GbsOpt,
    GpuCountsOpt,
    JsonOpt,
    MemoryFractionOpt,
    ModelOpt,
    PrecisionsOpt,
    SeqOpt,
    int_spec,
    number,
    parse_gpu_counts,
    usage_errors,
)
from parplan.cli._output import Column, console, err_console, fitted_table, print_json, print_text
from parplan.cli.explain import explain_args
from parplan.errors import ConfigError, NoFeasiblePlanError
from parplan.export import Launch, export, framework_filter
from parplan.hardware import load_cluster
from parplan.models import load_model
from parplan.planner.api import SPEC_VALUES, space_from_options, why_better
from parplan.planner.estimate import Estimate
from parplan.planner.search import OBJECTIVES, PlanResult, plan_or_raise
from parplan.planner.strategy import DISPATCHERS, RECOMPUTE, SCHEDULES, Strategy
from parplan.planner.workload import parse_expert_load

_SPEC = "N|N,M|N..M"
IntSpec = Annotated[str | None, typer.Option(metavar=_SPEC, callback=int_spec(),
                                             help="A value, a list (1,2,4) or a range (1..16).")]
ZeroSpec = Annotated[str | None, typer.Option(metavar=_SPEC, callback=int_spec(0, 3),
                                              help="ZeRO stages 0..3: a value, a list (1,3) or a range (0..3).")]



def _progress_callback():
    """A spinner on stderr that appears only when the search runs longer than a second."""
    state: dict[str, object] = {"start": time.perf_counter(), "bar": None}

    def update(done: int) -> None:
        if state["bar"] is None and time.perf_counter() - state["start"] > 1.0:
            bar = Progress(SpinnerColumn(), TextColumn("searching layouts: {task.completed:,} evaluated"),
                           TimeElapsedColumn(), console=err_console, transient=True)
            bar.start()
            state["bar"], state["task"] = bar, bar.add_task("search", total=None)
        if state["bar"] is not None:
            state["bar"].update(state["task"], completed=done)

    def close() -> None:
        if state["bar"] is not None:
            state["bar"].stop()

    return update, close


def _explain_command(est: Estimate, model: str, cluster: str, expert_load: str | None) -> str:
    parts = ["parplan explain --model", model, "--cluster", cluster, "--gpus", str(est.gpus),
             *explain_args(est.strategy)]
    return " ".join(parts + (["--expert-load", expert_load] if expert_load else []))


def _moe_cell(s: Strategy) -> str:
    """Expert-parallel settings beyond ep, compactly: etp, dispatcher, EP overlap, redundant experts."""
    parts = ([f"etp{s.etp}"] if s.etp > 1 else []) + [s.dispatch] + (["+ovl"] if s.ep_overlap else [])
    return " ".join(parts + ([f"R{s.redundant_experts}"] if s.redundant_experts else []))


def _layout_cell(s: Strategy, gpus: int) -> str:
    """The layout in one wrapping cell: Strategy.describe without the batch and sequence the title states."""
    return " ".join(t for t in s.describe(gpus).split() if not t.startswith(("gbs=", "seq=")))


_RESULTS = [Column("tok/s/GPU", "tok/s"), Column("MFU"), Column("step s", "step"), Column("mem GiB", "GiB")]


def _results(e: Estimate) -> list[str]:
    return [f"{e.tokens_per_s_per_gpu:,.1f}", f"{e.mfu:.1%}", f"{e.step_time_s:.2f}",
            f"{e.required_gib:.1f}/{e.capacity_gib:g}"]


def _plans_table(result: PlanResult, title: str, moe: bool) -> Table:
    """One column per layout field where the console is wide enough, else the layout as one wrapping cell;
    the predicted numbers are never cut."""
    left = {"sp", "recompute", "schedule", "prec", "experts"}
    names = ["#", "tp", "pp", "dp", "cp", "ep", "vpp", "zero", "sp", "recompute", "mbs", "schedule", "prec"]
    names += ["experts"] if moe else []
    wide_rows, compact_rows = [], []
    for i, e in enumerate(result.plans, 1):
        s = e.strategy
        row = [str(i), str(s.tp), str(s.pp), str(s.dp(e.gpus)), str(s.cp), str(s.ep), str(s.vpp), str(s.zero),
               "on" if s.sp else "off", s.recompute, str(s.mbs), s.schedule + (" +ovl" if s.tp_overlap else ""),
               s.precision] + ([_moe_cell(s)] if moe else [])
        wide_rows.append(row + _results(e))
        compact_rows.append([str(i), _layout_cell(s, e.gpus) + (f" {_moe_cell(s)}" if moe else ""), *_results(e)])
    wide = [Column(n, left=n in left) for n in names] + _RESULTS
    compact = [Column("#"), Column("layout", left=True, wrap=True), *_RESULTS]
    return fitted_table(title, [(wide, wide_rows), (compact, compact_rows)])


def _plan_doc(result: PlanResult, sources: dict[str, str]) -> dict[str, object]:
    return {"evaluated": result.evaluated, "feasible": result.feasible, "search_seconds": result.search_seconds,
            "plans": [{**e.as_dict(), **sources} for e in result.plans]}


def plan_command(
    model: ModelOpt,
    cluster: ClusterOpt,
    gpus: GpuCountsOpt,
    gbs: GbsOpt,
    seq: SeqOpt = 4096,
    tp: IntSpec = None,
    pp: IntSpec = None,
    cp: IntSpec = None,
    ep: IntSpec = None,
    etp: IntSpec = None,
    vpp: IntSpec = None,
    zero: ZeroSpec = None,
    mbs: IntSpec = None,
    max_tp: Annotated[int | None, typer.Option(min=1, max=SPEC_VALUES, help="Upper bound on tp.")] = None,
    max_pp: Annotated[int | None, typer.Option(min=1, max=SPEC_VALUES, help="Upper bound on pp.")] = None,
    max_cp: Annotated[int | None, typer.Option(min=1, max=SPEC_VALUES, help="Upper bound on cp.")] = None,
    max_ep: Annotated[int | None, typer.Option(min=1, max=SPEC_VALUES, help="Upper bound on ep.")] = None,
    sp: Annotated[str | None, typer.Option(help="on, off (default: both).")] = None,
    recompute: Annotated[str | None, typer.Option(help=f"Allowed: {','.join(RECOMPUTE)} (default all).")] = None,
    schedule: Annotated[str | None, typer.Option(help=f"Allowed: {','.join(SCHEDULES)} (default all).")] = None,
    precision: PrecisionsOpt = "bf16",
    dispatch: Annotated[str | None, typer.Option(
        help=f"MoE dispatchers to consider: {','.join(DISPATCHERS)} (default all).")] = None,
    redundant_experts: Annotated[str | None, typer.Option(
        metavar=_SPEC, callback=int_spec(0), help="EPLB redundant expert slots: a value, list or range.")] = None,
    ep_overlap: Annotated[str | None, typer.Option(help="EP all-to-all overlap: on, off (default: both).")] = None,
    expert_load: ExpertLoadOpt = None,
    max_memory_fraction: MemoryFractionOpt = 1.0,
    objective: Annotated[str, typer.Option(help="throughput, memory or cost.")] = "throughput",
    within: Annotated[float, typer.Option(callback=number(min=0, max=1), metavar="FRACTION",
                                          help="--objective memory: throughput slack vs the best.")] = 0.05,
    tokens: Annotated[float | None, typer.Option(callback=number(above=0), metavar="NUMBER",
                                                 help="Token budget, e.g. 15e12 (with --days or for cost).")] = None,
    days: Annotated[float | None, typer.Option(callback=number(above=0), metavar="NUMBER",
                                               help="Deadline in days: smallest GPU count meeting it.")] = None,
    top: Annotated[int, typer.Option(min=1, max=1000, help="Rows to show.")] = 5,
    framework: Annotated[str | None, typer.Option(
        help="Only layouts this framework can run: megatron, deepspeed or torchtitan.")] = None,
    emit: Annotated[str | None, typer.Option(
        help="Also write the winner's launch settings for megatron, deepspeed or torchtitan.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Search every valid layout, drop those that do not fit, and recommend the best."""
    if objective not in OBJECTIVES:
        raise typer.BadParameter(f"must be one of {', '.join(OBJECTIVES)}", param_hint="--objective")
    if days is not None and tokens is None:
        raise typer.BadParameter("--days needs --tokens", param_hint="--days")
    counts = parse_gpu_counts(gpus)
    with usage_errors():
        space = space_from_options(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, zero=zero, mbs=mbs, max_tp=max_tp,
                                   max_pp=max_pp, max_cp=max_cp, max_ep=max_ep, sp=sp, recompute=recompute,
                                   schedule=schedule, precision=precision, dispatch=dispatch,
                                   redundant_experts=redundant_experts, ep_overlap=ep_overlap,
                                   max_memory_fraction=max_memory_fraction)
    if emit is not None:
        with usage_errors({"framework": "--emit"}):
            framework_filter(emit)  # an unknown framework name is refused before the search
    model_spec = load_model(model)
    base = load_cluster(cluster)
    if space.precision == ("fp8",) and not base.gpu.supports_fp8:
        # Asked for fp8 only: say why instead of "no layout fits" (in a list, the fp8_supported rule drops it).
        raise ConfigError(f"{base.gpu.name} has no fp8 tensor cores; use --precision bf16", field="precision")
    with usage_errors():
        workload = parse_expert_load(expert_load, model_spec)
        layout_filter = None
        if framework is not None:
            layout_filter = framework_filter(framework, model_spec)
            # DeepSpeed's pipeline engine partitions stage tensors over TP (PartitionedTensor): cost it so.
            space = dataclasses.replace(space, pp_scatter_gather=framework == "deepspeed")

    update, close = _progress_callback()
    results: list[tuple[int, PlanResult]] = []
    failure: NoFeasiblePlanError | None = None
    try:
        for n in counts:
            try:
                result = plan_or_raise(model_spec, base.with_gpus(n), gbs=gbs, seq=seq, space=space,
                                       objective=objective, top=top, within=within, progress=update,
                                       layout_filter=layout_filter, workload=workload)
            except NoFeasiblePlanError as e:
                if len(counts) == 1:
                    raise
                failure = e  # a range of sizes: smaller clusters may simply not fit
                continue
            results.append((n, result))
    finally:
        close()
    if not results:
        assert failure is not None
        raise failure
    sources = {"model_source": model, "cluster_source": cluster}
    launch = None
    if emit is not None:
        best = results[-1][1].plans[0]  # the largest size that fits
        launch = export(model_spec, base.with_gpus(best.gpus), best.strategy, emit)
    if len(results) == 1:
        _show_single(results[0][1], model, cluster, tokens, json_out, sources, launch, expert_load,
                     model_spec.moe is not None)
    else:
        _show_sizes(results, tokens, days, json_out, sources)
        if launch is not None and not json_out:
            print_text(launch.text)


def _show_single(result: PlanResult, model: str, cluster: str, tokens: float | None, json_out: bool,
                 sources: dict[str, str], launch: Launch | None, expert_load: str | None, moe: bool) -> None:
    best = result.plans[0]
    if json_out:
        doc = _plan_doc(result, sources)
        if tokens:
            doc["days"] = best.days_for(tokens)
            doc["gpu_hours"] = best.gpu_hours_for(tokens)
        if launch is not None:
            doc["launch"] = launch.as_dict()
        print_json(doc)
        return
    console.print(_plans_table(result, f"Best layouts of {best.model} on {best.gpus}× {best.cluster} "
                                       f"({result.evaluated:,} valid layouts, {result.feasible:,} fit, "
                                       f"{result.search_seconds:.2f} s)", moe))
    if len(result.plans) > 1:
        console.print(why_better(best, result.plans[1]), highlight=False)
    if tokens:
        console.print(f"{tokens:.3g} tokens take {best.days_for(tokens):.1f} days "
                      f"({best.gpu_hours_for(tokens):,.0f} GPU-hours).", highlight=False)
    console.print("Inspect it with:", highlight=False)
    console.print(f"  {_explain_command(best, model, cluster, expert_load)}", highlight=False, soft_wrap=True)
    if launch is not None:
        print_text(launch.text)


def _show_sizes(results: list[tuple[int, PlanResult]], tokens: float | None, days: float | None,
                json_out: bool, sources: dict[str, str]) -> None:
    chosen = None
    if tokens and days:
        meeting = [(n, r) for n, r in results if r.plans[0].days_for(tokens) <= days]
        chosen = meeting[0][0] if meeting else None
    if json_out:
        print_json({"sizes": [{"gpus": n, **_plan_doc(r, sources)} for n, r in results],
                    "recommended_gpus": chosen})
        return
    columns = [Column("GPUs"), Column("layout", left=True, wrap=True), Column("tok/s/GPU", "tok/s"),
               Column("tokens/s", drop=1), Column("MFU"), Column("mem GiB", "GiB")]
    columns += [Column("days")] if tokens else []
    rows = []
    for n, r in results:
        e = r.plans[0]
        row = [str(n), _layout_cell(e.strategy, n), f"{e.tokens_per_s_per_gpu:,.1f}", f"{e.tokens_per_s:,.0f}",
               f"{e.mfu:.1%}", f"{e.required_gib:.1f}"]
        rows.append(row + ([f"{e.days_for(tokens):.1f}"] if tokens else []))
    console.print(fitted_table("Best layout per cluster size", [(columns, rows)]))
    if tokens and days:
        console.print(f"Smallest GPU count that trains {tokens:.3g} tokens within {days:g} days: "
                      + (f"{chosen}." if chosen else "none of these."), highlight=False)
