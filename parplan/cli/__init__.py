"""The `parplan` command line (typer + rich; the commands are registered in _app).

Exit codes: 0 ok, 1 error in the input, 2 usage error, 3 no feasible plan, 130 interrupted (Ctrl-C). Errors
are one message on stderr, never a traceback (set PARPLAN_DEBUG=1 to see one). With --json, stdout carries
exactly one JSON document when the command succeeds and nothing when it fails; everything else goes to stderr
(`_output.json_mode`).
"""

from __future__ import annotations

import gc
import os
import sys

from parplan.errors import ParplanError

INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT, the shell convention)."""


def _say(text: str, label: str | None = None) -> None:
    """One message on stderr, after a red `label:` when given."""
    from rich.markup import escape

    from parplan.cli._output import err_console

    err_console.print((f"[bold red]{label}:[/] " if label else "") + escape(text), highlight=False, soft_wrap=True)


def _json_requested(args: list[str]) -> bool:
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app and map errors to exit codes."""
    from parplan.cli import _output

    args = list(sys.argv[1:] if argv is None else argv)
    with _output.json_mode(_json_requested(args)) as document:
        code = _run(args)
        if code == 0:
            document.release()
    return code


def _run(args: list[str]) -> int:
    try:
        # The commands (and what they import) load inside the try, so that Ctrl-C while they load exits cleanly.
        from parplan.cli._app import command

        # Without standalone mode, typer returns the code of a typer.Exit, and turns Ctrl-C into 130.
        code = command(args[0] if args else None).main(args=args, prog_name="parplan", standalone_mode=False)
    except KeyboardInterrupt:
        code = INTERRUPTED
    except ParplanError as e:
        _say(str(e), "error")
        return e.exit_code
    except Exception as e:  # typer's Exit and Abort, a usage error from typer's bundled click, or a bug
        import typer

        if isinstance(e, typer.Exit):
            return e.exit_code
        if isinstance(e, typer.Abort):
            _say("aborted")
            return 1
        code = getattr(e, "exit_code", None)
        if code is not None and hasattr(e, "show"):
            e.show()
            return code
        if os.environ.get("PARPLAN_DEBUG"):
            raise
        _say(f"{type(e).__name__}: {e} (set PARPLAN_DEBUG=1 for a traceback; please report it)", "internal error")
        return 1
    if code == INTERRUPTED:
        _say("interrupted")
    return code if isinstance(code, int) else 0


def run() -> None:
    code = main()
    # The interpreter's shutdown runs a full cyclic collection over every object the imports created (about
    # 0.1 s for `parplan plan`); the process is ending and nothing it made holds a resource a collection would
    # release (files are closed by their `with` blocks), so the collector leaves them alone.
    gc.freeze()
    sys.exit(code)
