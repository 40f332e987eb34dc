"""The typer application: every command and sub-command, registered once."""

from __future__ import annotations

import typer

from parplan.cli import bench, hardware, models, serve, stacks
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
