"""`parplan validate`: predicted against measured throughput (and memory) of published training runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from parplan.cli._options import (
    JsonOpt,
    RunsCompileOpt,
    RunsStackOpt,
    SearchTimeLimitOpt,
    deadline,
    usage_errors,
)
from parplan.cli._output import Column, console, fitted_table, print_json, search_progress

if TYPE_CHECKING:
    from parplan.planner.stack_fit import HeldOut
    from parplan.planner.validate import RankResult


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def validate(
    file: Annotated[str | None, typer.Argument(
        help="With --serving: a measured-rows CSV or published-deployments YAML (default: the shipped data).")] = None,
    serving: Annotated[bool, typer.Option("--serving", help="Validate serving deployments (TTFT, TPOT, "
                                                            "throughput) instead of training runs.")] = False,
    data: Annotated[str | None, typer.Option(help="Runs YAML file (default: the shipped published runs).")] = None,
    tier: Annotated[str | None, typer.Option(help="Only runs of this tier (A, B or C).")] = None,
    group: Annotated[str | None, typer.Option(help="Only runs of this group (e.g. mbridge).")] = None,
    rank: Annotated[bool, typer.Option("--rank", help="Also search each run's job and rank the published "
                                                      "layout among all layouts (one search per run).")] = False,
    time_limit: SearchTimeLimitOpt = None,
    cross_validate: Annotated[bool, typer.Option(
        "--cross-validate", help="Leave one source group out: refit the calibrated stack knobs on the other "
                                 "groups, predict the group (slow: one fit per group).")] = False,
    stack: RunsStackOpt = None,
    compile: RunsCompileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Evaluate every run in a data file of measured training runs (or, with --serving, of serving deployments)
    and report the errors."""
    if serving:
        from parplan.cli.serve import validate_serving

        validate_serving(file, json_out)
        return
    if file is not None:
        raise typer.BadParameter("a FILE argument goes with --serving; training runs are read with --data",
                                 param_hint="FILE")
    from parplan.planner.stack_fit import cross_validate as cross_validate_runs
    from parplan.planner.validate import (
        UNKNOWN_KIND_COMPARED_AS,
        load_runs,
        rank_runs,
        summarize,
        validate_runs,
        with_compile,
    )
    from parplan.stacks import load_stack

    until = deadline(time_limit)
    runs = load_runs(data)
    with usage_errors():  # --compile on a stack without a compile path (a stack file's own errors name it)
        override = load_stack(stack, compile=compile) if stack is not None else None
    runs = with_compile(runs, compile)
    if tier:
        runs = [r for r in runs if r.tier == tier]
    if group:
        runs = [r for r in runs if r.group == group]
    if cross_validate:
        # The held-out groups are predicted with refitted knobs of the full set's stacks; --tier/--group only
        # narrow what is reported.
        everyone = with_compile(load_runs(data), compile)
        shown = {r.group for r in runs}
        _show_cross_validation([h for h in cross_validate_runs(everyone) if h.group in shown], json_out)
        return
    results = validate_runs(runs, override)
    if rank:
        with search_progress() as update:
            ranks = rank_runs(results, until, update, override)
        _show_ranks(ranks, json_out)
        return
    by_tier, by_group = summarize(results, "tier"), summarize(results, "group")
    if json_out:
        print_json({
            "runs": [{
                "id": r.run.id, "group": r.run.group, "tier": r.run.tier, "source": r.run.source,
                "stack": r.estimate.stack if r.estimate else None,
                "compile": r.estimate.compile if r.estimate else None,
                "measured_tokens_per_s_per_gpu": r.run.tokens_per_s_per_gpu,
                "predicted_tokens_per_s_per_gpu": r.predicted, "throughput_error": r.throughput_error,
                "measured_memory_gib": r.run.peak_memory_gib, "measured_memory_kind": r.run.peak_memory_kind,
                "memory_kind_compared": r.memory_kind, "memory_flag": r.memory_flag,
                "predicted_memory_gib": r.predicted_memory_gib, "memory_error": r.memory_error,
                "fits": r.fits, "required_gib": r.estimate.required_gib, "capacity_gib": r.estimate.capacity_gib,
                # A run that cannot be evaluated is an input error now, so "error" is always null; the key
                # stays for readers of the document.
                "memory_kinds_gib": r.estimate.memory_kinds(), "error": None,
                "strategy": r.run.strategy.as_dict(r.run.gpus),
            } for r in results],
            "summary": {"by_tier": by_tier, "by_group": by_group},
        })
        return
    columns = [Column("run", left=True, wrap=True), Column("tier", left=True, drop=3), Column("GPUs"),
               Column("measured", "meas"), Column("predicted", "pred"), Column("error"),
               Column("memory GiB pred/meas, kind", "GiB p/m", left=True, wrap=True, drop=2),
               Column("fits", left=True, wrap=True, drop=1)]
    rows = [[r.run.id, r.run.tier, str(r.run.gpus), f"{r.run.tokens_per_s_per_gpu:,.1f}", f"{r.predicted:,.1f}",
             f"{r.throughput_error:+.1%}",
             (f"{r.predicted_memory_gib:.1f}/{r.run.peak_memory_gib:.1f} {r.run.peak_memory_kind}"
              + ("*" if r.memory_flag else "")) if r.memory_error is not None else "",
             "yes" if r.fits else f"DOES NOT FIT ({r.estimate.required_gib:.1f}/{r.estimate.capacity_gib:g})"]
            for r in results]
    console.print(fitted_table("Published runs: predicted vs measured tokens/s/GPU (memory like with like; every run "
                               "ran, so 'does not fit' marks a memory prediction that is too high)", [(columns, rows)]))
    if any(r.memory_flag for r in results):
        console.print(f"* the run does not say which memory it measured: compared as {UNKNOWN_KIND_COMPARED_AS}",
                      highlight=False)
    for title, summary, key in (("By tier", by_tier, "tier"), ("By group", by_group, "group")):
        columns = [Column(key, left=True, wrap=True), Column("runs"), Column("median"), Column("p90"),
                   Column("mean", drop=4), Column("max", drop=3), Column("memory runs", "mem runs", drop=5),
                   Column("memory median", "mem med"), Column("memory p90", "mem p90", drop=2),
                   Column("not fitting", "no fit", drop=1)]
        rows = [[str(row[key]), str(row["runs"]), _pct(row["median_abs_error"]), _pct(row["p90_abs_error"]),
                 _pct(row["mean_abs_error"]), _pct(row["max_abs_error"]), str(row["memory_runs"]),
                 _pct(row["memory_median_abs_error"]), _pct(row["memory_p90_abs_error"]),
                 str(row["predicted_not_to_fit"])] for row in summary]
        console.print(fitted_table(f"{title}: absolute throughput error; peak memory error like with like",
                                   [(columns, rows)]))


def _show_cross_validation(held: list[HeldOut], json_out: bool) -> None:
    import numpy as np

    every = [abs(e) for h in held for e in h.errors]
    overall = {"runs": len(every), "median_abs_error": float(np.median(every)) if every else None,
               "p90_abs_error": float(np.percentile(every, 90)) if every else None}
    rows = [{"group": h.group, "stack": h.stack, "refitted": h.refitted, "runs": len(h.errors),
             "median_abs_error": float(np.median(np.abs(h.errors))),
             "p90_abs_error": float(np.percentile(np.abs(h.errors), 90))} for h in held]
    if json_out:
        print_json({"groups": rows, "overall": overall})
        return
    columns = [Column("group", left=True, wrap=True), Column("stack", left=True, wrap=True),
               Column("knobs", left=True, wrap=True, drop=1), Column("runs"), Column("median"), Column("p90")]
    cells = [[row["group"], row["stack"], "refitted" if row["refitted"] else "prior / uncalibrated",
              str(row["runs"]), _pct(row["median_abs_error"]), _pct(row["p90_abs_error"])] for row in rows]
    cells.append(["all", "", "", str(overall["runs"]), _pct(overall["median_abs_error"]),
                  _pct(overall["p90_abs_error"])])
    console.print(fitted_table("Leave one group out: each group predicted with its stack's knobs refitted on the "
                               "other groups", [(columns, cells)]))


def _show_ranks(ranks: list[RankResult], json_out: bool) -> None:
    if json_out:
        print_json({"runs": [{
            "id": k.result.run.id, "published_tokens_per_s_per_gpu": k.result.predicted,
            "best_tokens_per_s_per_gpu": k.best.tokens_per_s_per_gpu if k.best else None, "gap": k.gap,
            "rank": k.rank, "searched": k.searched, "complete": not k.left, "layouts_left": k.left,
            "best_strategy": k.best.strategy.as_dict(k.best.gpus) if k.best else None,
            "why": _why(k),
        } for k in ranks]})
        return
    columns = [Column("run", left=True, wrap=True), Column("published", "pub"), Column("planner's best", "best"),
               Column("gap"), Column("rank", wrap=True), Column("best layout", left=True, wrap=True)]
    rows = [[k.result.run.id, f"{k.result.predicted:,.1f}",
             f"{k.best.tokens_per_s_per_gpu:,.1f}" if k.best else "-", _pct(k.gap),
             "does not fit" if k.rank is None else f"{k.rank:,} of {k.searched + k.left:,}"
             + (f" ({k.left:,} left)" if k.left else ""),
             k.best.strategy.describe(k.best.gpus) if k.best else "nothing fits"] for k in ranks]
    console.print(fitted_table("Published layouts among all layouts (predicted tokens/s/GPU)", [(columns, rows)]))
    if any(k.left for k in ranks):
        console.print("Incomplete: the time limit (--time-limit; 50 s by default) stopped the searches marked "
                      "'left'; their rank counts only the layouts searched and their best is the best found so far.",
                      highlight=False)
    for k in ranks:
        if k.gap is not None and k.gap > 0.15:
            console.print(f"{k.result.run.id}: {_why(k)}", highlight=False)


def _why(k: RankResult) -> str | None:
    """Where the planner's best beats the published layout, the physics of it: the time components that
    differ most (planner.api.why_better)."""
    from parplan.planner.api import why_better

    if k.best is None or k.result.estimate is None or k.gap is None or k.gap <= 0:
        return None
    return why_better(k.best, k.result.estimate, "the published layout")
