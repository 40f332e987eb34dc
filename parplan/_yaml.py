"""Reading YAML input files with errors that name the file and the line (never a traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from parplan.errors import ConfigError


def parse_yaml(text: str, file: str) -> Any:
    """The document in `text`; a syntax error becomes a ConfigError naming `file`, line and column."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"not valid YAML{where}: {getattr(e, 'problem', e)}", file=file) from None


def read_yaml(path: str | Path) -> Any:
    """The document in the file at `path` (see parse_yaml); an unreadable file is a ConfigError too."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read file ({e.strerror})", file=str(path)) from None
    return parse_yaml(text, str(path))
