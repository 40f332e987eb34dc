"""`python -m parplan` runs the command line."""

from parplan.cli import run

run()
