"""The `parplan` command line (typer + rich).

Exit codes: 0 ok, 1 error in the input, 2 usage error, 3 no feasible plan. Errors are one message on
stderr, never a traceback (set PARPLAN_DEBUG=1 to see one).
"""

from __future__ import annotations

import os
import sys

import typer
from rich.markup import escape

from parplan.cli import bench, hardware, models, stacks
from parplan.cli._output import err_console
from parplan.cli.calibrate import calibrate_command
from parplan.cli.explain import explain
from parplan.cli.export import export_command
from parplan.cli.plan import plan_command
from parplan.cli.scale import scale_command
from parplan.cli.validate import validate
from parplan.errors import ParplanError

app = typer.Typer(
    name="parplan",
    help="Plan how to split an LLM training run over a GPU cluster.",
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
hardware.app.command("import-nccl-tests")(bench.import_nccl_tests)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app and map errors to exit codes."""
    try:
        app(args=argv, standalone_mode=False)
    except ParplanError as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        err_console.print("aborted")
        return 1
    except Exception as e:  # a usage error from typer's bundled click, or a bug
        code = getattr(e, "exit_code", None)
        if code is not None and hasattr(e, "show"):
            e.show()
            return code
        if os.environ.get("PARPLAN_DEBUG"):
            raise
        err_console.print(f"[bold red]internal error:[/] {type(e).__name__}: {escape(str(e))} "
                          "(set PARPLAN_DEBUG=1 for a traceback; please report it)", highlight=False, soft_wrap=True)
        return 1
    return 0


def run() -> None:
    sys.exit(main())
