"""`parplan stacks list|show`: the software stack presets and every fact with its source."""

from __future__ import annotations

from typing import Annotated

import typer

from parplan.cli._options import JsonOpt, usage_errors
from parplan.cli._output import Column, console, fitted_table, print_json

app = typer.Typer(help="Software stack presets and stack files.", no_args_is_help=True)


def _value(value: object) -> str:
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) or "-"
    return "-" if value is None else str(value)


@app.command("list")
def list_stacks(json_out: JsonOpt = False) -> None:
    """List the stack presets shipped with parplan."""
    from parplan.stacks import load_stack, stack_names

    stacks = [load_stack(n) for n in stack_names()]
    if json_out:
        print_json({"stacks": [s.summary() for s in stacks]})
        return
    columns = [Column("name", left=True), Column("description", left=True, wrap=True, drop=1),
               Column("attention", "attn", left=True), Column("compile", left=True, wrap=True),
               Column("parallelism", "par", left=True, wrap=True), Column("recompute", left=True, wrap=True)]
    rows = []
    for s in stacks:
        k = s.kernels
        compiled = {"none": "-", "program": "always (XLA)"}.get(k.compile_scope,
                                                                  f"{k.compile_scope}, {'on' if k.compile else 'off'}")
        rows.append([s.name, s.description, k.attention, compiled, _value(s.runs.parallelism) or "dp only",
                     ", ".join(f"{n}={m}" for n, m in s.recompute.items() if n != "none")])
    console.print(fitted_table("Stack presets (a stack YAML file also works: base: NAME plus overrides)",
                               [(columns, rows)]))


@app.command("show")
def show_stack(
    name: Annotated[str, typer.Argument(help="Preset name or stack YAML file.")],
    compile: Annotated[bool | None, typer.Option("--compile/--no-compile", help="Show it compiled or not.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show every fact of a stack and where it comes from."""
    from parplan.stacks import load_stack

    with usage_errors():  # --compile on a stack without a compile path (a stack file's own errors name it)
        s = load_stack(name, compile=compile)
    if json_out:
        print_json(s.summary())
        return
    columns = [Column("fact", left=True), Column("value", left=True, wrap=True),
               Column("source", left=True, wrap=True)]
    rows = [[path, _value(value), source] for path, value, source in s.facts()]
    console.print(fitted_table(f"Stack {s.name}: {s.description}", [(columns, rows)]))
    if s.fit:
        console.print(f"Calibrated: {s.fit.get('knobs')} from {len(s.fit.get('runs', {}))} runs "
                      f"({s.fit.get('command', '')})", highlight=False)
