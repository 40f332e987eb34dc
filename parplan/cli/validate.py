"""`parplan validate`: predicted against measured throughput (and memory) of published training runs."""

from __future__ import annotations

from typing import Annotated

import typer

from parplan.cli._options import JsonOpt
from parplan.cli._output import Column, console, fitted_table, print_json
from parplan.planner.validate import RankResult, load_runs, rank_runs, summarize, validate_runs


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def validate(
    data: Annotated[str | None, typer.Option(help="Runs YAML file (default: the shipped published runs).")] = None,
    tier: Annotated[str | None, typer.Option(help="Only runs of this tier (A, B or C).")] = None,
    group: Annotated[str | None, typer.Option(help="Only runs of this group (e.g. mbridge).")] = None,
    rank: Annotated[bool, typer.Option("--rank", help="Also search each run's job and rank the published "
                                                      "layout among all layouts (slow: one search per run).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Evaluate every run in a data file of measured training runs and report the errors."""
    runs = load_runs(data)
    if tier:
        runs = [r for r in runs if r.tier == tier]
    if group:
        runs = [r for r in runs if r.group == group]
    results = validate_runs(runs)
    if rank:
        _show_ranks(rank_runs(results), json_out)
        return
    by_tier, by_group = summarize(results, "tier"), summarize(results, "group")
    if json_out:
        print_json({
            "runs": [{
                "id": r.run.id, "group": r.run.group, "tier": r.run.tier, "source": r.run.source,
                "measured_tokens_per_s_per_gpu": r.run.tokens_per_s_per_gpu,
                "predicted_tokens_per_s_per_gpu": r.predicted, "throughput_error": r.throughput_error,
                "measured_memory_gib": r.run.peak_memory_gib, "predicted_memory_gib": r.predicted_memory_gib,
                "memory_error": r.memory_error,
                "strategy": r.run.strategy.as_dict(r.run.gpus),
            } for r in results],
            "summary": {"by_tier": by_tier, "by_group": by_group},
        })
        return
    columns = [Column("run", left=True, wrap=True), Column("tier", left=True, drop=2), Column("GPUs"),
               Column("measured", "meas"), Column("predicted", "pred"), Column("error"),
               Column("memory GiB pred/meas", "GiB p/m", drop=1)]
    rows = [[r.run.id, r.run.tier, str(r.run.gpus), f"{r.run.tokens_per_s_per_gpu:,.1f}", f"{r.predicted:,.1f}",
             f"{r.throughput_error:+.1%}",
             f"{r.predicted_memory_gib:.1f}/{r.run.peak_memory_gib:.1f}" if r.memory_error is not None else ""]
            for r in results]
    console.print(fitted_table("Published runs: predicted vs measured tokens/s/GPU", [(columns, rows)]))
    for title, summary, key in (("By tier", by_tier, "tier"), ("By group", by_group, "group")):
        columns = [Column(key, left=True, wrap=True), Column("runs"), Column("median"), Column("p90"), Column("mean"),
                   Column("max"), Column("memory median", "mem median", drop=1)]
        rows = [[str(row[key]), str(row["runs"]), _pct(row["median_abs_error"]), _pct(row["p90_abs_error"]),
                 _pct(row["mean_abs_error"]), _pct(row["max_abs_error"]), _pct(row["memory_median_abs_error"])]
                for row in summary]
        console.print(fitted_table(f"{title}: absolute throughput error", [(columns, rows)]))


def _show_ranks(ranks: list[RankResult], json_out: bool) -> None:
    if json_out:
        print_json({"runs": [{
            "id": k.result.run.id, "published_tokens_per_s_per_gpu": k.result.predicted,
            "best_tokens_per_s_per_gpu": k.best.tokens_per_s_per_gpu if k.best else None, "gap": k.gap,
            "rank": k.rank, "searched": k.searched,
            "best_strategy": k.best.strategy.as_dict(k.best.gpus) if k.best else None,
        } for k in ranks]})
        return
    columns = [Column("run", left=True, wrap=True), Column("published", "pub"), Column("planner's best", "best"),
               Column("gap"), Column("rank", wrap=True), Column("best layout", left=True, wrap=True)]
    rows = [[k.result.run.id, f"{k.result.predicted:,.1f}",
             f"{k.best.tokens_per_s_per_gpu:,.1f}" if k.best else "-", _pct(k.gap),
             "does not fit" if k.rank is None else f"{k.rank:,} of {k.searched:,}",
             k.best.strategy.describe(k.best.gpus) if k.best else "nothing fits"] for k in ranks]
    console.print(fitted_table("Published layouts among all layouts (predicted tokens/s/GPU)", [(columns, rows)]))
