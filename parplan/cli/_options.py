"""Command-line options shared by several commands."""

from __future__ import annotations

from typing import Annotated

import typer

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Preset name, HF config.json or parplan YAML file.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Cluster preset or cluster YAML file.")]
GpusOpt = Annotated[int, typer.Option("--gpus", "-n", min=1, help="Total GPUs in the job.")]
SeqOpt = Annotated[int, typer.Option("--seq", min=1, help="Sequence length, tokens.")]
ExpertLoadOpt = Annotated[str | None, typer.Option(
    help="Router load: uniform (default), zipf[:exponent] or a per-expert counts file (CSV/JSON/YAML).")]
