"""`parplan export`: launch settings for a plan or explain result (their --json output)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from parplan._input import check_output_dir, read_json, write_text
from parplan._mapping import Fields, dataclass_from_mapping
from parplan.cli._options import JsonOpt, usage_errors
from parplan.cli._output import console, print_json, print_text
from parplan.errors import ConfigError
from parplan.export import FRAMEWORKS, Launch, export, framework_filter
from parplan.hardware import load_cluster
from parplan.hardware.spec import MAX_GPUS
from parplan.models import load_model
from parplan.planner.strategy import Strategy

_FIELDS = {f.name for f in dataclasses.fields(Strategy)}


def _read_plan(path: Path, index: int) -> Fields:
    """The plan at `index` of a `plan --json` file, or the one layout of an `explain --json` file."""
    file = str(path)
    doc = read_json(path)
    f = Fields(doc, file)
    if f.has("plans"):
        plans = f.list("plans")
        if not plans:
            raise f.error("plans", "no plans in the file")
        if index >= len(plans):
            raise f.error("plans", f"plan index {index} out of range (the file has {len(plans)})")
        f = Fields(plans[index], file, f"plans[{index}]")
    for key in ("strategy", "gpus"):
        if key not in f.data:
            raise f.error(key, "missing: expected the output of `parplan plan --json` or `parplan explain --json`")
    return f


def strategy_from_dict(raw: Any, file: str, section: str = "strategy") -> Strategy:
    """The layout of a saved plan; the derived dp and microbatches it also lists are dropped, and a field of
    the wrong type is a ConfigError naming it."""
    fields = Fields(raw, file, section)
    return dataclass_from_mapping(Strategy, {k: v for k, v in fields.data.items() if k in _FIELDS}, file, section)


def show_launch(launch: Launch, out: Path | None, json_out: bool) -> None:
    """Print the launch settings; with `out` (checked by `check_output_dir` before the work), also write its
    files there, each atomically."""
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create the folder ({e.strerror or e})", file=str(out)) from None
        for name, text in launch.files.items():
            write_text(out / name, text)
    if json_out:
        print_json({**launch.as_dict(), "written_to": str(out) if out else None})
        return
    print_text(launch.text)
    if out is not None:
        console.print(f"wrote {', '.join(launch.files)} to {out}", highlight=False, markup=False)


def export_command(
    plan_file: Annotated[Path, typer.Argument(help="JSON written by `plan --json` or `explain --json`.")],
    framework: Annotated[str, typer.Option("--format", "-f", help=f"One of {', '.join(FRAMEWORKS)}.")],
    index: Annotated[int, typer.Option(min=0, max=10_000, help="Which plan of a `plan --json` file (0 = best).")]
    = 0,
    out: Annotated[Path | None, typer.Option(help="Directory to write the files to.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write launch settings (Megatron-LM arguments, DeepSpeed config, torchtitan job) for a saved plan."""
    with usage_errors({"framework": "--format"}):
        framework_filter(framework)  # an unknown framework name is a usage error, found before any work
    if out is not None:
        check_output_dir(out)
    doc = _read_plan(plan_file, index)
    model = load_model(doc.str("model_source") if doc.has("model_source") else doc.str("model"))
    cluster = load_cluster(doc.str("cluster_source") if doc.has("cluster_source") else doc.str("cluster"),
                           gpus=doc.int("gpus", min=1, max=MAX_GPUS))
    strategy = strategy_from_dict(doc.data["strategy"], str(plan_file), doc.where("strategy"))
    show_launch(export(model, cluster, strategy, framework), out, json_out)
