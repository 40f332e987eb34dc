"""`parplan calibrate`: fit the cost model's global knobs to your own measured runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from parplan._input import check_output, read_yaml, write_yaml
from parplan.cli._options import ClusterOpt, JsonOpt
from parplan.cli._output import Column, console, fitted_table, print_json
from parplan.hardware import load_cluster
from parplan.hardware.presets import preset_names
from parplan.planner.calibrate import calibrate
from parplan.planner.validate import load_runs


def calibrate_command(
    runs: Annotated[Path, typer.Option(help="Runs YAML in the published-runs format (see README).")],
    cluster: ClusterOpt,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the calibrated cluster profile here.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Fit compute efficiency and overlap costs to measured step times; print the error before and after."""
    if out is not None:
        check_output(out)
    spec = load_cluster(cluster)
    result = calibrate(load_runs(runs), spec)
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
    cells = [[r, f"{b:+.1%}", f"{a:+.1%}"]
             for r, b, a in zip(result.runs, result.errors_before, result.errors_after, strict=True)]
    console.print(fitted_table(f"Calibration on {spec.name}: throughput error per run",
                               [([Column("run", left=True, wrap=True), Column("before"), Column("after")], cells)]))
    console.print(f"rms error {result.rms_before:.1%} -> {result.rms_after:.1%} with "
                  + ", ".join(f"{k} = {v:.3f}" for k, v in cal.items())
                  + (f"; wrote {out}" if out else ""), highlight=False)
