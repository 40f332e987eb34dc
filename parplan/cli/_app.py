"""The typer application: every command and sub-command, registered once, and the help they print."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import typer
import typer.main

from parplan.cli import _output, bench, hardware, models, serve, stacks
from parplan.cli.calibrate import calibrate_command
from parplan.cli.explain import explain
from parplan.cli.export import export_command
from parplan.cli.plan import plan_command
from parplan.cli.scale import scale_command
from parplan.cli.validate import validate

app = typer.Typer(
    name="parplan",
    help="Plan how to split an LLM training run, or a serving deployment, over a GPU cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        try:
            number = version("parplan")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "unknown"
        _output.console.print(f"parplan {number}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """Plan how to split an LLM training run, or a serving deployment, over a GPU cluster."""


app.add_typer(models.app, name="models")
app.add_typer(hardware.app, name="hardware")
app.add_typer(stacks.app, name="stacks")
app.command("plan")(plan_command)
app.command("explain")(explain)
app.command("scale")(scale_command)
app.command("validate")(validate)
app.command("export")(export_command)
app.command("calibrate")(calibrate_command)
app.add_typer(bench.app, name="bench")
app.add_typer(serve.app, name="serve")
serve.app.command("explain")(serve.explain)
serve.app.command("plan")(serve.plan)
hardware.app.command("import-nccl-tests")(bench.import_nccl_tests)

_TYPE_NAMES = {"int": "INTEGER", "float": "NUMBER", "str": "TEXT", "Path": "PATH"}
"""How help shows an option's value: as users write it (typer's own '<int range>', '<bool>' read oddly)."""


def _label(param: Any) -> str | None:
    """The value an option takes, as help shows it: its metavar, else its type's name; none for a flag."""
    if getattr(param, "is_flag", False):
        return None
    if param.metavar:
        return param.metavar
    name = _TYPE_NAMES.get(getattr(param.type_descriptor.annotation, "__name__", ""), "VALUE")
    return name + ("..." if param.nargs != 1 else "")


def _range(param: Any) -> str:
    """An option's range as help shows it: '0..3', or '>=1' when the bound is only there to refuse the
    absurd."""
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is None and high is None:
        return ""
    if high is None or high >= 2**16:
        return f">={low}"
    return f"{low}..{high}" if low is not None else f"<={high}"


@lru_cache(maxsize=1)
def command() -> Any:
    """The click command tree of `app`, its help set once: plain text that fits 80 columns and a pipe,
    values named as users write them."""
    root = typer.main.get_command(app)
    todo = [root]
    while todo:
        cmd = todo.pop()
        todo += list(getattr(cmd, "commands", {}).values())
        cmd.rich_markup_mode = None
        for param in cmd.params:
            if param.param_type_name == "argument" and not param.metavar:
                param.metavar = param.name.upper()  # typer's usage line would show '{name}'
            label, limits = _label(param), _range(param)
            param.display_type = param.display_type_rich = lambda ctx, label=label: label
            param._get_number_range_help_str = lambda limits=limits: limits
    return root
