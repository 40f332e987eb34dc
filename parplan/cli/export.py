"""`parplan export`: launch settings for a plan or explain result (their --json output)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parplan._input import read_json
from parplan._mapping import dataclass_from_mapping
from parplan.cli._options import JsonOpt
from parplan.cli._output import console, print_json, print_text
from parplan.errors import ConfigError
from parplan.names import DEFAULT_STACK, FRAMEWORKS

if TYPE_CHECKING:
    from parplan.export import Launch
    from parplan.planner.strategy import Strategy
    from parplan.stacks import StackSpec


def _read_plan(path: Path, index: int) -> dict[str, Any]:
    doc = read_json(path)
    if isinstance(doc, dict) and "plans" in doc:
        plans = doc["plans"]
        if not isinstance(plans, list) or not plans:
            raise ConfigError("no plans in the file", file=str(path), field="plans")
        if not 0 <= index < len(plans):
            raise ConfigError(f"plan index {index} out of range (the file has {len(plans)})", file=str(path),
                              field="plans")
        doc = plans[index]
    for key in ("strategy", "gpus"):
        if not isinstance(doc, dict) or key not in doc:
            raise ConfigError("expected the output of `parplan plan --json` or `parplan explain --json`",
                              file=str(path), field=key)
    return doc


def strategy_from_dict(raw: dict[str, Any], file: str) -> Strategy:
    """The layout of a saved plan; the derived dp and microbatches it also lists are dropped, and a field of
    the wrong type is a ConfigError naming it."""
    from parplan.planner.strategy import Strategy

    fields = {f.name for f in dataclasses.fields(Strategy)}
    return dataclass_from_mapping(Strategy, {k: v for k, v in raw.items() if k in fields}, file, "strategy")


def show_launch(launch: Launch, out: Path | None, json_out: bool) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in launch.files.items():
            (out / name).write_text(text)
    if json_out:
        print_json({**launch.as_dict(), "written_to": str(out) if out else None})
        return
    print_text(launch.text)
    if out is not None:
        console.print(f"wrote {', '.join(launch.files)} to {out}", highlight=False, markup=False)


def export_command(
    plan_file: Annotated[Path, typer.Argument(help="JSON written by `plan --json` or `explain --json`.")],
    framework: Annotated[str | None, typer.Option(
        "--format", "-f", help=f"One of {', '.join(FRAMEWORKS)} (every version parplan writes for), or one "
                               f"version, e.g. torchtitan@0.2.2 (default: the plan's stack's writer).")] = None,
    index: Annotated[int, typer.Option(min=0, help="Which plan of a `plan --json` file (0 = best).")] = 0,
    out: Annotated[Path | None, typer.Option(help="Directory to write the files to.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write launch settings (Megatron-LM arguments, DeepSpeed config, torchtitan job) for a saved plan."""
    from parplan.export import export
    from parplan.hardware.presets import load_cluster
    from parplan.models.presets import load_model
    from parplan.stacks.support import check_stack

    doc = _read_plan(plan_file, index)
    model = load_model(doc.get("model_source") or doc["model"])
    cluster = load_cluster(doc.get("cluster_source") or doc["cluster"], gpus=int(doc["gpus"]))
    strategy = strategy_from_dict(doc["strategy"], str(plan_file))
    stack = plan_stack(doc, str(plan_file))
    check_stack(stack, strategy, model, cluster.gpus)
    if framework is None:
        if stack.runs.exporter is None:
            raise typer.BadParameter(f"the plan's stack {stack.name} has no launch-settings writer; choose one of "
                                     f"{', '.join(FRAMEWORKS)}", param_hint="--format")
        framework = stack.runs.exporter
    show_launch(export(model, cluster, strategy, framework), out, json_out)


def plan_stack(doc: dict[str, Any], file: str) -> StackSpec:
    """The stack a saved plan was costed as (its stack_source, else its stack name; megatron-core for plans
    written before stacks existed), compiled as it was."""
    from parplan.stacks import load_stack

    source = doc.get("stack_source") or doc.get("stack") or DEFAULT_STACK
    compiled = doc.get("compile")
    if not isinstance(source, str) or (compiled is not None and not isinstance(compiled, bool)):
        raise ConfigError(f"expected a stack name and a boolean compile, got {source!r}, {compiled!r}", file=file,
                          field="stack")
    return load_stack(source, compile=compiled)
