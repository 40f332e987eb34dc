"""The typer application: every command and sub-command, registered once, and the help they print.

A command line names its command first (the root has no options but --help and --version), so `command(name)`
builds the tree of that one command when `name` is one: its module alone is imported and its options alone
are processed, which keeps `parplan plan` from loading every other command's dependencies; anything else
(`--help`, a misspelt name) gets the whole tree."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Annotated, Any

import typer
import typer.main

from parplan.cli import _output

_ROOT_HELP = "Plan how to split an LLM training run, or a serving deployment, over a GPU cluster."


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("parplan")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "unknown"
        _output.console.print(f"parplan {number}", highlight=False)
        raise typer.Exit()


def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """Plan how to split an LLM training run, or a serving deployment, over a GPU cluster."""


def _function(module: str, name: str) -> Callable[..., Any]:
    return getattr(importlib.import_module(f"parplan.cli.{module}"), name)


@functools.cache
def _group(module: str) -> typer.Typer:
    """A command group's typer app, with the commands registered here added once per process."""
    group = _function(module, "app")
    if module == "serve":
        group.command("explain")(_function("serve", "explain"))
        group.command("plan")(_function("serve", "plan"))
    elif module == "hardware":
        group.command("import-nccl-tests")(_function("bench", "import_nccl_tests"))
    return group


_COMMANDS: dict[str, Callable[[typer.Typer], object]] = {
    "models": lambda app: app.add_typer(_group("models"), name="models"),
    "hardware": lambda app: app.add_typer(_group("hardware"), name="hardware"),
    "stacks": lambda app: app.add_typer(_group("stacks"), name="stacks"),
    "plan": lambda app: app.command("plan")(_function("plan", "plan_command")),
    "explain": lambda app: app.command("explain")(_function("explain", "explain")),
    "scale": lambda app: app.command("scale")(_function("scale", "scale_command")),
    "validate": lambda app: app.command("validate")(_function("validate", "validate")),
    "export": lambda app: app.command("export")(_function("export", "export_command")),
    "calibrate": lambda app: app.command("calibrate")(_function("calibrate", "calibrate_command")),
    "bench": lambda app: app.add_typer(_group("bench"), name="bench"),
    "serve": lambda app: app.add_typer(_group("serve"), name="serve"),
}
"""Each top-level command and how it joins the root app, in the order help lists them."""


def _app(names: tuple[str, ...]) -> typer.Typer:
    app = typer.Typer(name="parplan", help=_ROOT_HELP, no_args_is_help=True, pretty_exceptions_enable=False,
                      add_completion=False)
    app.callback()(_root)
    for name in names:
        _COMMANDS[name](app)
    return app


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


@functools.cache
def command(name: str | None = None) -> Any:
    """The click command tree of the app (of command `name` alone when it is one), its help set once: plain
    text that fits 80 columns and a pipe, values named as users write them."""
    root = typer.main.get_command(_app((name,) if name in _COMMANDS else tuple(_COMMANDS)))
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
