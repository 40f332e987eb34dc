"""Command-line options shared by several commands."""

from __future__ import annotations

import math
import time
from typing import Annotated

import typer

from parplan.names import PRECISIONS

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Preset name, HF config.json or parplan YAML file.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Cluster preset or cluster YAML file.")]
GpusOpt = Annotated[int, typer.Option("--gpus", "-n", min=1, help="Total GPUs in the job.")]
SeqOpt = Annotated[int, typer.Option("--seq", min=1, help="Sequence length, tokens.")]
ExpertLoadOpt = Annotated[str | None, typer.Option(
    help="Router load: uniform (default), zipf[:exponent] or a per-expert counts file (CSV/JSON/YAML).")]
GpuCountsOpt = Annotated[str, typer.Option(
    "--gpus", "-n", help="GPU count, list (256,512) or powers of two (256..4096).")]
PrecisionsOpt = Annotated[str, typer.Option(help=f"Allowed: {','.join(PRECISIONS)} (a list such as bf16,fp8).")]
StackOpt = Annotated[str, typer.Option(
    "--stack", help="Software stack the layout runs on: megatron-core (default), megatron-deepspeed, torchtitan, fsdp, "
                    "nanotron, maxtext, deepseek, or a stack YAML file (parplan stacks list).")]
CompileOpt = Annotated[bool | None, typer.Option(
    "--compile/--no-compile", help="torch.compile on or off where the stack supports it (default: the stack's).")]
MemoryOpt = Annotated[list[str] | None, typer.Option(
    "--memory", help="Set one memory fact of the stack, KEY=VALUE (repeatable), e.g. moment_bytes=2, "
                     "optimizer_offload=1.0, allocator=expandable_segments (parplan stacks show NAME lists them).")]
RunsStackOpt = Annotated[str | None, typer.Option(
    "--stack", help="Cost every run as this stack (preset or stack file); default: each run's own `stack:`.")]
RunsCompileOpt = Annotated[bool | None, typer.Option(
    "--compile/--no-compile", help="torch.compile on or off for every run whose stack can switch it "
                                   "(default: each run's own `compile:`).")]
MemoryFractionOpt = Annotated[float, typer.Option(min=0.1, max=1.0, help="Use at most this share of GPU memory.")]
TimeLimitOpt = Annotated[float | None, typer.Option(
    help="Seconds: stop searching then and report the best layouts found so far, marked incomplete with the "
         "count of layouts left.")]


def deadline(time_limit: float | None) -> float | None:
    """The time.monotonic() value a --time-limit ends at (None: no limit); a limit that is not a positive
    number of seconds is a usage error."""
    if time_limit is None:
        return None
    if not (math.isfinite(time_limit) and time_limit > 0):
        raise typer.BadParameter("must be a positive number of seconds", param_hint="--time-limit")
    return time.monotonic() + time_limit


def parse_gpu_counts(text: str) -> list[int]:
    """The GPU counts of a --gpus value ('256..4096' powers of two, '8,16,64' or '512'); a malformed or empty
    one is a usage error."""
    from parplan.planner.api import parse_doubling_spec

    try:
        counts = parse_doubling_spec(text)
    except ValueError:
        raise typer.BadParameter("expected N, a list N,M or a range N..M", param_hint="--gpus") from None
    if not counts:
        raise typer.BadParameter("no GPU count in the range", param_hint="--gpus")
    return counts
