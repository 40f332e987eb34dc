"""`parplan scale`: speedup and efficiency of the best layout across cluster sizes."""

from __future__ import annotations

from typing import Annotated

import typer

from parplan.cli._options import (
    ClusterOpt,
    CompileOpt,
    ExpertLoadOpt,
    GpuCountsOpt,
    JsonOpt,
    MemoryFractionOpt,
    ModelOpt,
    PlotOpt,
    PrecisionsOpt,
    SearchTimeLimitOpt,
    SeqOpt,
    StackOpt,
    deadline,
    parse_gpu_counts,
    usage_errors,
)
from parplan.cli._output import Column, console, fitted_table, print_json, search_progress
from parplan.errors import NoFeasiblePlanError
from parplan.limits import MAX_BATCH
from parplan.names import DEFAULT_STACK


def _short(sentence: str) -> str:
    """The bottleneck sentence up to its first clause, for a table cell."""
    return sentence.split(";")[0].split(":")[0]


def scale_command(
    model: ModelOpt,
    cluster: ClusterOpt,
    gpus: GpuCountsOpt,
    gbs: Annotated[int, typer.Option(min=1, max=MAX_BATCH,
                                     help="Global batch (sequences); with --weak, at the smallest count.")],
    seq: SeqOpt = 4096,
    weak: Annotated[bool, typer.Option("--weak", help="Grow the batch with the GPU count (weak scaling).")] = False,
    precision: PrecisionsOpt = "bf16",
    max_memory_fraction: MemoryFractionOpt = 1.0,
    expert_load: ExpertLoadOpt = None,
    stack: StackOpt = DEFAULT_STACK,
    compile: CompileOpt = None,
    plot: PlotOpt = None,
    time_limit: SearchTimeLimitOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Best layout at each GPU count; speedup and efficiency relative to the smallest count that fits."""
    from parplan.hardware.presets import load_cluster
    from parplan.models.presets import load_model
    from parplan.planner.api import space_from_options
    from parplan.planner.scaling import scale, thresholds
    from parplan.planner.workload import parse_expert_load
    from parplan.plots import check_plot_path, plot_scaling
    from parplan.stacks import load_stack

    counts = parse_gpu_counts(gpus)
    until = deadline(time_limit)
    if plot:
        check_plot_path(plot)
    with usage_errors():
        space = space_from_options(precision=precision, max_memory_fraction=max_memory_fraction)
    model_spec, base = load_model(model), load_cluster(cluster)
    with usage_errors():  # --compile on a stack without a compile path (a stack file's own errors name it)
        stack_spec = load_stack(stack, compile=compile)
    with usage_errors():
        workload = parse_expert_load(expert_load, model_spec)
    with search_progress() as update:
        points = scale(model_spec, base, counts, gbs=gbs, seq=seq, weak=weak, space=space, workload=workload,
                       deadline=until, progress=update, stack=stack_spec)
    fitted = [p for p in points if p.best is not None]
    if not fitted:
        raise NoFeasiblePlanError(f"no layout of {model_spec.name} fits at any of {counts} GPUs of {base.name}")
    marks = thresholds(points)
    rows = [p.as_dict() for p in points]
    if plot:
        plot_scaling([r for r in rows if r["fits"]], plot,
                     f"{model_spec.name} on {base.name}, {'weak' if weak else 'strong'} scaling, seq {seq}")
    incomplete = [p for p in points if p.left]
    if json_out:
        print_json({"stack": stack_spec.name, "compile": stack_spec.compiled, "rows": rows,
                    "below_90_percent_at": marks[0.9], "below_70_percent_at": marks[0.7], "complete": not incomplete})
        return
    columns = [Column("GPUs"), Column("tokens/s", drop=2), Column("tok/s/GPU", "tok/s"), Column("speedup"),
               Column("ideal", drop=1), Column("efficiency", "eff"), Column("layout", left=True, wrap=True),
               Column("bottleneck", left=True, wrap=True, drop=3)]
    rows = []
    for p in points:
        if p.best is None:
            rows.append([str(p.gpus), "-", "-", "-", "-", "-", "does not fit", ""])
            continue
        rows.append([str(p.gpus), f"{p.best.tokens_per_s:,.0f}", f"{p.best.tokens_per_s_per_gpu:,.1f}",
                     f"{p.speedup:.2f}×", f"{p.ideal:.0f}×", f"{p.efficiency:.0%}",
                     " ".join(t for t in p.best.strategy.describe(p.gpus).split() if not t.startswith("seq=")),
                     _short(p.bottleneck)])
    title = (f"{model_spec.name} on {base.name} as {stack_spec.name} runs it: {'weak' if weak else 'strong'} scaling "
             f"(gbs {gbs}{' at the smallest count' if weak else ''}, seq {seq})")
    console.print(fitted_table(title, [(columns, rows)]))
    words = [f"falls below {label} at {marks[level]} GPUs" if marks[level] else f"stays above {label}"
             for level, label in ((0.9, "90%"), (0.7, "70%"))]
    console.print(f"Efficiency {words[0]} and {words[1]} (relative to {fitted[0].gpus} GPUs).", highlight=False)
    if incomplete:
        console.print("Incomplete: the time limit stopped the searches at "
                      + ", ".join(f"{p.gpus} GPUs ({p.left:,} layouts left)" for p in incomplete)
                      + "; their layouts are the best found so far, which a complete search may beat.", highlight=False)
    if plot:
        console.print(f"wrote {plot}", highlight=False, markup=False)
