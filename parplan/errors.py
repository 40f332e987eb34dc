"""Errors parplan raises for bad input.

Every error a user can cause is a :class:`ParplanError`; the CLI prints its message (never a traceback)
and exits with its ``exit_code``. Library users catch the subclasses.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ParplanError(Exception):
    """Base class: a problem with the user's input, explained in the message."""

    exit_code = 1


class ConfigError(ParplanError):
    """A model, cluster or run file is malformed: names the file and the field."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.rule = message
        """The message without the file and field it is about."""
        where = ""
        if file:  # a name with control characters (a NUL from a YAML escape) is quoted, not printed raw
            where = f"{file}: " if file.isprintable() else f"{file!r}: "
        if field:
            where += f"field '{field}': " if field.isprintable() else f"field {field!r}: "
        super().__init__(where + message)


class UnknownPresetError(ParplanError):
    """A preset name that does not exist; suggests the nearest names."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        self.name = name
        self.suggestions = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
        msg = f"unknown {kind} '{name}'"
        if self.suggestions:
            msg += f"; did you mean {', '.join(repr(s) for s in self.suggestions)}?"
        msg += f" Known {kind}s: {', '.join(known)}. A path to a file also works."
        super().__init__(msg)


class UnsupportedModelError(ParplanError):
    """A Hugging Face config whose model_type parplan cannot read."""

    def __init__(self, model_type: str, supported: Iterable[str], file: str | None = None) -> None:
        where = f"{file}: " if file else ""
        super().__init__(
            f"{where}unsupported model_type '{model_type}'; supported: {', '.join(sorted(supported))}"
        )


class InvalidStrategyError(ParplanError):
    """A parallel layout that cannot run; the message names the rule it breaks (and `field`, the Strategy
    field, where one field alone breaks it)."""

    exit_code = 1

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class NoFeasiblePlanError(ParplanError):
    """No layout fits in memory; the message says the least memory needed and which levers help."""

    exit_code = 3
