"""Command-line options shared by several commands, and the checks every command-line number meets.

A number on the command line is a usage error (exit 2, naming the option) unless it is finite and within
its range: counts are whole numbers within bounds (`typer.Option(min=, max=)`), real numbers go through
`number(...)` (click's own float range lets NaN through), value lists and ranges through `int_spec(...)`,
GPU counts through `parse_gpu_counts`. `usage_errors()` turns the ConfigErrors the library raises about
option values (those that name no file) into usage errors for the option they name.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Annotated

import typer

from parplan._mapping import as_float
from parplan.errors import ConfigError
from parplan.limits import MAX_BATCH, MAX_GPUS, MAX_SEQ
from parplan.names import PRECISIONS


def number(*, min: float | None = None, max: float | None = None,
           above: float | None = None) -> Callable[[float | None], float | None]:
    """A typer callback that refuses a non-finite value (nan, inf, 1e400) or one outside the range."""
    def check(value: float | None) -> float | None:
        if value is None:
            return None
        checked, rule = as_float(value, min=min, max=max, above=above)
        if rule:
            raise typer.BadParameter(rule)
        return checked
    return check


def int_spec(least: int = 1, most: int = MAX_GPUS) -> Callable[[str | None], str | None]:
    """A typer callback that checks a value, list (1,2,4) or range (1..16) of integers in least..most."""
    def check(value: str | None) -> str | None:
        from parplan.planner.api import parse_int_spec

        try:
            parse_int_spec(value, "", least, most)
        except ConfigError as e:
            raise typer.BadParameter(e.rule) from None
        return value
    return check


def option_name(field: str) -> str:
    """The command-line spelling of a library field name (max_tp -> --max-tp)."""
    return "--" + field.replace("_", "-")


@contextlib.contextmanager
def usage_errors(options: dict[str, str] | None = None) -> Iterator[None]:
    """ConfigErrors about option values inside the block become usage errors naming the option: those that
    name no file (`options` maps a field to an option spelt otherwise), and those that name an option where a
    file would be (`--memory`, whose values read like a file's fields). Errors about files pass through."""
    try:
        yield
    except ConfigError as e:
        if e.file is not None and e.file.startswith("--"):
            rule = f"field '{e.field}': {e.rule}" if e.field else e.rule
            raise typer.BadParameter(rule, param_hint=e.file) from None
        if e.file is not None or not e.field:
            raise
        hint = (options or {}).get(e.field) or (e.field if e.field.startswith("--") else option_name(e.field))
        raise typer.BadParameter(e.rule, param_hint=hint) from None


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", metavar="NAME|FILE",
                                       help="Preset name, HF config.json or parplan YAML file.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", metavar="NAME|FILE",
                                         help="Cluster preset or cluster YAML file.")]
GpusOpt = Annotated[int, typer.Option("--gpus", "-n", min=1, max=MAX_GPUS, help="Total GPUs in the job.")]
SeqOpt = Annotated[int, typer.Option("--seq", min=1, max=MAX_SEQ, help="Sequence length, tokens.")]
GbsOpt = Annotated[int, typer.Option(min=1, max=MAX_BATCH, help="Global batch, sequences per step.")]
ExpertLoadOpt = Annotated[str | None, typer.Option(
    metavar="uniform|zipf[:A]|FILE",
    help="Router load: uniform (default), zipf[:exponent] or a per-expert counts file (CSV/JSON/YAML).")]
GpuCountsOpt = Annotated[str, typer.Option(
    "--gpus", "-n", metavar="N|N,M|N..M", help="GPU count, list (256,512) or powers of two (256..4096).")]
PrecisionsOpt = Annotated[str, typer.Option(metavar="LIST",
                                            help=f"Allowed: {','.join(PRECISIONS)} (a list such as bf16,fp8).")]
StackOpt = Annotated[str, typer.Option(
    "--stack", metavar="NAME|FILE",
    help="Software stack the layout runs on: megatron-core (default), megatron-deepspeed, torchtitan, fsdp, "
         "nanotron, maxtext, deepseek, or a stack YAML file (parplan stacks list).")]
CompileOpt = Annotated[bool | None, typer.Option(
    "--compile/--no-compile", help="torch.compile on or off where the stack supports it (default: the stack's).")]
MemoryOpt = Annotated[list[str] | None, typer.Option(
    "--memory", help="Set one memory fact of the stack, KEY=VALUE (repeatable), e.g. moment_bytes=2, "
                     "optimizer_offload=1.0, allocator=expandable_segments (parplan stacks show NAME lists them).")]
RunsStackOpt = Annotated[str | None, typer.Option(
    "--stack", metavar="NAME|FILE",
    help="Cost every run as this stack (preset or stack file); default: each run's own `stack:`.")]
RunsCompileOpt = Annotated[bool | None, typer.Option(
    "--compile/--no-compile", help="torch.compile on or off for every run whose stack can switch it "
                                   "(default: each run's own `compile:`).")]
MemoryFractionOpt = Annotated[float, typer.Option(callback=number(min=0.1, max=1.0), metavar="FRACTION",
                                                  help="Use at most this share of GPU memory (0.1..1).")]
PlotOpt = Annotated[str | None, typer.Option(
    metavar="FILE", help="Also write charts to this .png, .svg or .pdf file (pip install 'parplan[plot]').")]
SearchTimeLimitOpt = Annotated[float | None, typer.Option(
    "--time-limit", callback=number(above=0), metavar="SECONDS",
    help="Stop searching then and report the best layouts found so far, marked incomplete with the count of "
         "layouts left (default 50 s; give more for a larger search).")]
SEARCH_TIME_LIMIT_S = 50.0
"""How long `plan`, `scale` and `validate --rank` search without --time-limit: every answer within a minute
(issue #16), the best found so far when the work is too large to finish (DeepSeek-V3 on 2,048 H800, the
largest shipped example, takes about 10 s; ranking every published recipe about 2 minutes)."""


def deadline(time_limit: float | None) -> float:
    """The time.monotonic() value a --time-limit (else SEARCH_TIME_LIMIT_S) ends at (the option's callback
    checked the number)."""
    return time.monotonic() + (time_limit if time_limit is not None else SEARCH_TIME_LIMIT_S)


def parse_gpu_counts(text: str) -> list[int]:
    """The GPU counts of a --gpus value ('256..4096' powers of two, '8,16,64' or '512'); a malformed or empty
    one, or a count outside 1..MAX_GPUS, is a usage error."""
    from parplan.planner.api import parse_doubling_spec

    try:
        counts = parse_doubling_spec(text)
    except ValueError:
        raise typer.BadParameter("expected N, a list N,M or a range N..M of positive counts",
                                 param_hint="--gpus") from None
    if not counts:
        raise typer.BadParameter("no GPU count in the range", param_hint="--gpus")
    for n in counts:
        if not 1 <= n <= MAX_GPUS:
            raise typer.BadParameter(f"every count must lie in 1..{MAX_GPUS:,}, got {n:,}", param_hint="--gpus")
    return counts
