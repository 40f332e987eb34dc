"""`parplan validate`: predicted against measured throughput (and memory) of published training runs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from parplan.cli._options import JsonOpt
from parplan.cli._output import console, print_json
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
    table = Table(title="Published runs: predicted vs measured tokens/s/GPU", title_justify="left")
    for col in ("run", "tier", "GPUs", "measured", "predicted", "error", "memory GiB (pred/meas)"):
        table.add_column(col, justify="left" if col in ("run", "tier") else "right")
    for r in results:
        err = r.throughput_error
        style = "green" if abs(err) <= 0.1 else ("yellow" if abs(err) <= 0.3 else "red")
        mem = (f"{r.predicted_memory_gib:.1f}/{r.run.peak_memory_gib:.1f}"
               if r.memory_error is not None else "")
        table.add_row(r.run.id, r.run.tier, str(r.run.gpus), f"{r.run.tokens_per_s_per_gpu:,.1f}",
                      f"{r.predicted:,.1f}", f"[{style}]{err:+.1%}[/]", mem)
    console.print(table)
    for title, rows, key in (("By tier", by_tier, "tier"), ("By group", by_group, "group")):
        summary = Table(title=f"{title}: absolute throughput error", title_justify="left")
        for col in (key, "runs", "median", "p90", "mean", "max", "memory median"):
            summary.add_column(col, justify="left" if col == key else "right")
        for row in rows:
            summary.add_row(str(row[key]), str(row["runs"]), _pct(row["median_abs_error"]), _pct(row["p90_abs_error"]),
                            _pct(row["mean_abs_error"]), _pct(row["max_abs_error"]),
                            _pct(row["memory_median_abs_error"]))
        console.print(summary)


def _show_ranks(ranks: list[RankResult], json_out: bool) -> None:
    if json_out:
        print_json({"runs": [{
            "id": k.result.run.id, "published_tokens_per_s_per_gpu": k.result.predicted,
            "best_tokens_per_s_per_gpu": k.best.tokens_per_s_per_gpu if k.best else None, "gap": k.gap,
            "rank": k.rank, "searched": k.searched,
            "best_strategy": k.best.strategy.as_dict(k.best.gpus) if k.best else None,
        } for k in ranks]})
        return
    table = Table(title="Published layouts among all layouts (predicted tokens/s/GPU)", title_justify="left")
    for col in ("run", "published", "planner's best", "gap", "rank", "best layout"):
        table.add_column(col, justify="left" if col in ("run", "best layout") else "right")
    for k in ranks:
        best = k.best
        table.add_row(k.result.run.id, f"{k.result.predicted:,.1f}",
                      f"{best.tokens_per_s_per_gpu:,.1f}" if best else "-", _pct(k.gap),
                      "does not fit" if k.rank is None else f"{k.rank:,} of {k.searched:,}",
                      best.strategy.describe(best.gpus) if best else "nothing fits")
    console.print(table)
