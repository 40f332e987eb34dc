"""`parplan export`: launch settings for a plan or explain result (their --json output)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parplan._input import check_output_dir, read_json, write_text
from parplan._mapping import Fields, dataclass_from_mapping
from parplan.cli._options import JsonOpt, usage_errors
from parplan.cli._output import console, print_json, print_text
from parplan.errors import ConfigError
from parplan.limits import MAX_GPUS
from parplan.names import DEFAULT_STACK, FRAMEWORKS

if TYPE_CHECKING:
    from parplan.export import Launch
    from parplan.planner.strategy import Strategy
    from parplan.stacks import StackSpec


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
    from parplan.planner.strategy import Strategy

    fields = Fields(raw, file, section)
    names = {f.name for f in dataclasses.fields(Strategy)}
    return dataclass_from_mapping(Strategy, {k: v for k, v in fields.data.items() if k in names}, file, section)


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
    framework: Annotated[str | None, typer.Option(
        "--format", "-f", metavar="FRAMEWORK[@VERSION]",
        help=f"One of {', '.join(FRAMEWORKS)} (every version parplan writes for), or one version, e.g. "
             f"torchtitan@0.2.2 (default: the plan's stack's writer).")] = None,
    index: Annotated[int, typer.Option(min=0, max=10_000, help="Which plan of a `plan --json` file (0 = best).")]
    = 0,
    out: Annotated[Path | None, typer.Option(help="Directory to write the files to.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write launch settings (Megatron-LM arguments, DeepSpeed config, torchtitan job) for a saved plan."""
    from parplan.export import export, targets
    from parplan.hardware.presets import load_cluster
    from parplan.models.presets import load_model
    from parplan.stacks.support import check_stack

    if framework is not None:
        with usage_errors({"framework": "--format"}):
            targets(framework)  # an unknown framework name or version is a usage error, found before any work
    if out is not None:
        check_output_dir(out)
    doc = _read_plan(plan_file, index)
    model = load_model(doc.str("model_source") if doc.has("model_source") else doc.str("model"))
    cluster = load_cluster(doc.str("cluster_source") if doc.has("cluster_source") else doc.str("cluster"),
                           gpus=doc.int("gpus", min=1, max=MAX_GPUS))
    strategy = strategy_from_dict(doc.data["strategy"], str(plan_file), doc.where("strategy"))
    stack = plan_stack(doc)
    check_stack(stack, strategy, model, cluster.gpus)
    if framework is None:
        if stack.runs.exporter is None:
            raise typer.BadParameter(f"the plan's stack {stack.name} has no launch-settings writer; choose one of "
                                     f"{', '.join(FRAMEWORKS)}", param_hint="--format")
        framework = stack.runs.exporter
    show_launch(export(model, cluster, strategy, framework), out, json_out)


def plan_stack(doc: Fields) -> StackSpec:
    """The stack a saved plan was costed as (its stack_source, else its stack name; megatron-core for plans
    written before stacks existed), compiled as it was."""
    from parplan.stacks import load_stack

    source = doc.str("stack_source") if doc.has("stack_source") else doc.str("stack", DEFAULT_STACK)
    return load_stack(source, compile=doc.bool("compile", None))
