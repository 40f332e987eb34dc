"""`parplan calibrate`: fit the cost model's global knobs to measured runs: a cluster's (compute efficiency and
overlap costs, from your own runs) or a software stack's (its kernel efficiency, from its public runs)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Annotated

import typer

from parplan._input import check_output, read_yaml, write_yaml
from parplan._resources import data_dir
from parplan.cli._options import JsonOpt, RunsCompileOpt, usage_errors
from parplan.cli._output import Column, console, fitted_table, print_json


def calibrate_command(
    runs: Annotated[Path | None, typer.Option(
        help="Runs YAML in the published-runs format (see README); default with --stack: the shipped runs.")] = None,
    cluster: Annotated[str | None, typer.Option(
        "--cluster", "-c", metavar="NAME|FILE",
        help="Fit this cluster's knobs (preset or cluster YAML file) to --runs.")] = None,
    stack: Annotated[str | None, typer.Option(
        "--stack", metavar="NAME|FILE",
        help="With --cluster: cost every run as this stack. Alone: fit this stack's knobs to its runs.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Write the calibrated cluster profile, or stack file, here.")] = None,
    compile: RunsCompileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Fit a cluster's compute efficiency and overlap costs to your measured runs (--cluster --runs), or a stack's
    kernel efficiency to its runs (--stack); print each run's error before and after."""
    if out is not None:
        check_output(out)
    if cluster is not None:
        if runs is None:
            raise typer.BadParameter("--cluster needs --runs (your measured runs)", param_hint="--runs")
        _cluster_fit(runs, cluster, stack, compile, out, json_out)
    elif stack is not None:
        _stack_fit(runs, stack, compile, out, json_out)
    else:
        raise typer.BadParameter("name --cluster (with --runs) or --stack", param_hint="--cluster")


def _show(title: str, ids: tuple[str, ...], before: tuple[float, ...], after: tuple[float, ...]) -> None:
    cells = [[r, f"{b:+.1%}", f"{a:+.1%}"] for r, b, a in zip(ids, before, after, strict=True)]
    console.print(fitted_table(title, [([Column("run", left=True, wrap=True), Column("before"), Column("after")],
                                        cells)]))


def _cluster_fit(runs: Path, cluster: str, stack: str | None, compile: bool | None, out: Path | None,
                 json_out: bool) -> None:
    from parplan.hardware.presets import load_cluster, preset_names
    from parplan.planner.calibrate import calibrate
    from parplan.planner.validate import load_runs, with_compile
    from parplan.stacks import load_stack

    spec = load_cluster(cluster)
    with usage_errors():  # --compile on a stack without a compile path (a stack file's own errors name it)
        override = load_stack(stack, compile=compile) if stack is not None else None
    result = calibrate(with_compile(load_runs(runs), compile), spec, override)
    cal = dataclasses.asdict(result.calibration)
    if out is not None:
        if cluster.lower() in preset_names():
            mapping = {"name": out.stem, "base": cluster.lower()}
        else:
            mapping = read_yaml(cluster)
        mapping["calibration"] = cal
        write_yaml(out, mapping)
    if json_out:
        print_json({"calibration": cal, "rms_error_before": result.rms_before, "rms_error_after": result.rms_after,
                    "runs": [{"id": r, "error_before": b, "error_after": a} for r, b, a in
                             zip(result.runs, result.errors_before, result.errors_after, strict=True)],
                    "written_to": str(out) if out else None})
        return
    _show(f"Calibration on {spec.name}: throughput error per run", result.runs, result.errors_before,
          result.errors_after)
    console.print(f"rms error {result.rms_before:.1%} -> {result.rms_after:.1%} with "
                  + ", ".join(f"{k} = {v:.3f}" for k, v in cal.items())
                  + (f"; wrote {out}" if out else ""), highlight=False)


def _stack_fit(runs: Path | None, stack: str, compile: bool | None, out: Path | None, json_out: bool) -> None:
    from parplan.planner.stack_fit import STACK_KNOBS, fit_record, fit_stack, stack_runs
    from parplan.planner.validate import load_runs, with_compile
    from parplan.stacks import load_stack, stack_names

    spec = load_stack(stack)
    chosen = stack_runs(with_compile(load_runs(runs), compile), spec)
    fit = fit_stack(chosen, spec)
    command = (["parplan", "calibrate", "--stack", stack] + (["--runs", str(runs)] if runs else [])
               + (["--compile" if compile else "--no-compile"] if compile is not None else [])
               + (["--out", str(out)] if out else []))
    record = fit_record(fit, spec, shlex.join(command))
    if out is not None:
        source = data_dir("stacks") / f"{spec.name}.yaml" if stack.lower() in stack_names() else Path(stack)
        mapping = read_yaml(source)
        mapping.setdefault("kernels", {})
        sources = mapping.setdefault("sources", {})
        for knob, value in fit.values.items():
            mapping["kernels"][knob] = round(value, 4)
            sources[f"kernels.{knob}"] = (f"fitted by parplan calibrate --stack {spec.name} on its {len(fit.runs)} "
                                          f"public runs: rms error {fit.rms_before:.1%} -> {fit.rms_after:.1%} "
                                          f"(fit: below)")
        mapping["fit"] = record
        write_yaml(out, mapping, block=True)
    if json_out:
        print_json({"stack": spec.name, **record, "written_to": str(out) if out else None})
        return
    _show(f"Calibration of stack {spec.name} on its runs: throughput error per run", fit.runs, fit.errors_before,
          fit.errors_after)
    console.print(f"rms error {fit.rms_before:.1%} -> {fit.rms_after:.1%} with "
                  + ", ".join(f"kernels.{k} = {fit.values[k]:.3f}" for k in STACK_KNOBS)
                  + (f"; wrote {out}" if out else ""), highlight=False)
