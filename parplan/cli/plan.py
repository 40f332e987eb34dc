"""`parplan plan`: search every layout and recommend the best, with the reason and the command to inspect it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from parplan.cli._options import (
    ClusterOpt,
    CompileOpt,
    ExpertLoadOpt,
    GbsOpt,
    GpuCountsOpt,
    JsonOpt,
    MemoryFractionOpt,
    MemoryOpt,
    ModelOpt,
    PrecisionsOpt,
    SearchTimeLimitOpt,
    SeqOpt,
    deadline,
    int_spec,
    number,
    parse_gpu_counts,
    usage_errors,
)
from parplan.cli._output import Column, console, fitted_table, print_json, print_text, search_progress
from parplan.cli.explain import explain_args
from parplan.errors import ConfigError, NoFeasiblePlanError
from parplan.limits import SPEC_VALUES
from parplan.names import DEFAULT_STACK, DISPATCHERS, RECOMPUTE, SCHEDULES

if TYPE_CHECKING:
    from parplan.export import Launch
    from parplan.planner.estimate import Estimate
    from parplan.planner.search import PlanResult
    from parplan.planner.strategy import Strategy

_SPEC = "N|N,M|N..M"
IntSpec = Annotated[str | None, typer.Option(metavar=_SPEC, callback=int_spec(),
                                             help="A value, a list (1,2,4) or a range (1..16).")]
ZeroSpec = Annotated[str | None, typer.Option(metavar=_SPEC, callback=int_spec(0, 3),
                                              help="ZeRO stages 0..3: a value, a list (1,3) or a range (0..3).")]



def _explain_command(est: Estimate, sources: dict[str, object], expert_load: str | None) -> str:
    from parplan.stacks import load_stack

    parts = ["parplan explain --model", str(sources["model_source"]), "--cluster", str(sources["cluster_source"]),
             "--gpus", str(est.gpus), *explain_args(est.strategy)]
    if sources["stack_source"] != DEFAULT_STACK:
        parts += ["--stack", str(sources["stack_source"])]
    if est.compile != load_stack(sources["stack_source"]).compiled:
        parts.append("--compile" if est.compile else "--no-compile")
    for setting in sources["memory_settings"]:
        parts += ["--memory", str(setting)]
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
    from parplan.planner.strategy import recompute_label

    left = {"sp", "recompute", "schedule", "prec", "experts"}
    names = ["#", "tp", "pp", "dp", "cp", "ep", "vpp", "zero", "sp", "recompute", "mbs", "schedule", "prec"]
    names += ["experts"] if moe else []
    wide_rows, compact_rows = [], []
    for i, e in enumerate(result.plans, 1):
        s = e.strategy
        row = [str(i), str(s.tp), str(s.pp), str(s.dp(e.gpus)), str(s.cp), str(s.ep), str(s.vpp), str(s.zero),
               "on" if s.sp else "off", recompute_label(s.recompute, s.recompute_blocks), str(s.mbs),
               s.schedule + (" +ovl" if s.tp_overlap else ""), s.precision] + ([_moe_cell(s)] if moe else [])
        wide_rows.append(row + _results(e))
        compact_rows.append([str(i), _layout_cell(s, e.gpus) + (f" {_moe_cell(s)}" if moe else ""), *_results(e)])
    wide = [Column(n, left=n in left) for n in names] + _RESULTS
    compact = [Column("#"), Column("layout", left=True, wrap=True), *_RESULTS]
    return fitted_table(title, [(wide, wide_rows), (compact, compact_rows)])


def _plan_doc(result: PlanResult, sources: dict[str, object]) -> dict[str, object]:
    return {"evaluated": result.evaluated, "skipped": result.skipped, "feasible": result.feasible,
            "complete": result.complete, "layouts_left": result.left, "search_seconds": result.search_seconds,
            "plans": [{**e.as_dict(), **sources} for e in result.plans]}


def search_summary(result: PlanResult) -> str:
    """What a search covered, in words: the layouts costed, and those proved slower without being costed."""
    return (f"{result.evaluated + result.left:,} valid layouts: {result.costed:,} costed, {result.feasible:,} of "
            f"them fit; {result.skipped:,} proved slower")


def incomplete_note(result: PlanResult, what: str = "these are") -> str | None:
    """The warning a search stopped by --time-limit carries, or None when it is complete."""
    if result.complete:
        return None
    return (f"Incomplete: the time limit (--time-limit; 50 s by default) stopped the search with {result.left:,} of "
            f"{result.evaluated + result.left:,} valid layouts left; {what} the best found so far, which a "
            "complete search may beat.")


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
    stack: Annotated[str | None, typer.Option(
        "--stack", metavar="NAME|FILE",
        help="Software stack the layouts run on: megatron-core, megatron-deepspeed, torchtitan, fsdp, "
             "nanotron, maxtext, deepseek, or a stack YAML file (parplan stacks list). Default: the "
             "stack of --framework (or --emit) where given, else megatron-core.")] = None,
    compile: CompileOpt = None,
    memory: MemoryOpt = None,
    framework: Annotated[str | None, typer.Option(
        help="Only layouts this framework can run: megatron, deepspeed or torchtitan (every version parplan "
             "exports for), or one version, e.g. torchtitan@0.2.2.")] = None,
    emit: Annotated[str | None, typer.Option(
        help="Also write the winner's launch settings for megatron, deepspeed or torchtitan.")] = None,
    time_limit: SearchTimeLimitOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Search every valid layout, drop those that do not fit, and recommend the best."""
    from parplan.export import export, framework_filter, targets
    from parplan.hardware.presets import load_cluster
    from parplan.models.presets import load_model
    from parplan.planner.api import space_from_options
    from parplan.planner.search import OBJECTIVES, check_size, plan_or_raise
    from parplan.planner.workload import parse_expert_load
    from parplan.stacks import load_stack
    from parplan.stacks.presets import with_memory

    if objective not in OBJECTIVES:
        raise typer.BadParameter(f"must be one of {', '.join(OBJECTIVES)}", param_hint="--objective")
    if days is not None and tokens is None:
        raise typer.BadParameter("--days needs --tokens", param_hint="--days")
    counts = parse_gpu_counts(gpus)
    until = deadline(time_limit)
    with usage_errors():
        space = space_from_options(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, zero=zero, mbs=mbs, max_tp=max_tp,
                                   max_pp=max_pp, max_cp=max_cp, max_ep=max_ep, sp=sp, recompute=recompute,
                                   schedule=schedule, precision=precision, dispatch=dispatch,
                                   redundant_experts=redundant_experts, ep_overlap=ep_overlap,
                                   max_memory_fraction=max_memory_fraction)
    with usage_errors({"framework": "--framework"}):
        if framework is not None:
            targets(framework)  # an unknown framework name or version is refused before the search
    if emit is not None:
        with usage_errors({"framework": "--emit"}):
            targets(emit)
    model_spec = load_model(model)
    base = load_cluster(cluster)
    stack = _stack_name(stack, framework or emit)
    with usage_errors():  # --compile or --memory the stack cannot take (a stack file's own errors name it)
        stack_spec = with_memory(load_stack(stack, compile=compile), memory or [])
    if space.precision == ("fp8",) and not base.gpu.supports_fp8:
        # Asked for fp8 only: say why instead of "no layout fits" (in a list, the fp8_supported rule drops it).
        raise ConfigError(f"{base.gpu.name} has no fp8 tensor cores; use --precision bf16", field="precision")
    with usage_errors():
        workload = parse_expert_load(expert_load, model_spec)
    # DeepSpeed's pipeline engine partitions stage tensors over TP (PartitionedTensor): cost it so.
    writers = (framework, stack_spec.runs.exporter)
    space = dataclasses.replace(space, pp_scatter_gather=any(w is not None and w.partition("@")[0] == "deepspeed"
                                                             for w in writers))

    for n in counts:  # every size refused up front, before any is searched
        check_size(model_spec, base.with_gpus(n), gbs, seq)
    results: list[tuple[int, PlanResult]] = []
    failure: NoFeasiblePlanError | None = None
    with search_progress() as update:
        for n in counts:
            # The framework's rules read the GPU count (a pipeline schedule's micro-batches); an unknown
            # framework name fails here, before the first search.
            layout_filter = None if framework is None else framework_filter(framework, model_spec, n)
            try:
                result = plan_or_raise(model_spec, base.with_gpus(n), gbs=gbs, seq=seq, space=space,
                                       objective=objective, top=top, within=within, progress=update,
                                       layout_filter=layout_filter, workload=workload, deadline=until,
                                       stack=stack_spec)
            except NoFeasiblePlanError as e:
                if len(counts) == 1:
                    raise
                failure = e  # a range of sizes: smaller clusters may simply not fit
                continue
            results.append((n, result))
    if not results:
        assert failure is not None
        raise failure
    sources = {"model_source": model, "cluster_source": cluster, "stack_source": stack,
               "memory_settings": list(memory or [])}
    launch = None
    if emit is not None:
        best = results[-1][1].plans[0]  # the largest size that fits
        launch = export(model_spec, base.with_gpus(best.gpus), best.strategy, emit)
    if len(results) == 1:
        _show_single(results[0][1], tokens, json_out, sources, launch, expert_load, model_spec.moe is not None)
    else:
        _show_sizes(results, tokens, days, json_out, sources)
        if launch is not None and not json_out:
            print_text(launch.text)


def _stack_name(stack: str | None, framework: str | None) -> str:
    """The stack to cost the layouts as: the one given, else the framework's own (a plan for torchtitan is
    costed as torchtitan runs it); a given stack that exports for another framework is a usage error."""
    from parplan.stacks import load_stack
    from parplan.stacks.support import stack_for_framework

    if stack is None:
        return stack_for_framework(framework) if framework else DEFAULT_STACK
    exporter = load_stack(stack).runs.exporter
    if framework and exporter is not None and exporter.partition("@")[0] != framework.partition("@")[0].lower():
        raise typer.BadParameter(f"the stack {stack} runs {exporter} layouts, not {framework}'s; give the stack "
                                 f"{stack_for_framework(framework)} or leave --stack out", param_hint="--stack")
    return stack


def _show_single(result: PlanResult, tokens: float | None, json_out: bool, sources: dict[str, object],
                 launch: Launch | None, expert_load: str | None, moe: bool) -> None:
    from parplan.planner.api import why_better

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
    console.print(_plans_table(result, f"Best layouts of {best.model} on {best.gpus}× {best.cluster} as "
                                       f"{best.stack}{' (compiled)' if best.compile else ''} runs them "
                                       f"({search_summary(result)}; {result.search_seconds:.2f} s)", moe))
    note = incomplete_note(result)
    if note:
        console.print(note, highlight=False)
    if len(result.plans) > 1:
        console.print(why_better(best, result.plans[1]), highlight=False)
    if tokens:
        console.print(f"{tokens:.3g} tokens take {best.days_for(tokens):.1f} days "
                      f"({best.gpu_hours_for(tokens):,.0f} GPU-hours).", highlight=False)
    console.print("Inspect it with:", highlight=False)
    console.print(f"  {_explain_command(best, sources, expert_load)}", highlight=False, soft_wrap=True)
    if launch is not None:
        print_text(launch.text)


def _show_sizes(results: list[tuple[int, PlanResult]], tokens: float | None, days: float | None,
                json_out: bool, sources: dict[str, object]) -> None:
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
    for n, r in results:
        note = incomplete_note(r, f"at {n} GPUs the layout shown is")
        if note:
            console.print(note, highlight=False)
    if tokens and days:
        console.print(f"Smallest GPU count that trains {tokens:.3g} tokens within {days:g} days: "
                      + (f"{chosen}." if chosen else "none of these."), highlight=False)
