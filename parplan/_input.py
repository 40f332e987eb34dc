"""Reading YAML and JSON input files with errors that name the file and the line (never a traceback), and
writing the YAML files parplan produces (cluster profiles, calibrations)."""

from __future__ import annotations

import json
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


def parse_json(text: str, file: str) -> Any:
    """The JSON document in `text`; a syntax error becomes a ConfigError naming `file`, line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}", file=file) from None


def read_text(path: str | Path, errors: str = "strict") -> str:
    """The text of the file at `path`; an unreadable file is a ConfigError naming it."""
    try:
        return Path(path).read_text(errors=errors)
    except OSError as e:
        raise ConfigError(f"cannot read file ({e.strerror})", file=str(path)) from None


def read_yaml(path: str | Path) -> Any:
    """The YAML document in the file at `path`; an unreadable file is a ConfigError too."""
    return parse_yaml(read_text(path), str(path))


def read_json(path: str | Path) -> Any:
    """The JSON document in the file at `path`; an unreadable file is a ConfigError too."""
    return parse_json(read_text(path), str(path))


def write_yaml(path: str | Path, data: Any, *, block: bool = False) -> None:
    """Write `data` as YAML in parplan's layout: keys in their order, the innermost mappings and lists on one
    line each (hundreds of measured samples stay readable), or every mapping in block style (`block`, for
    files people read field by field, such as stack files)."""
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=False if block else None,
                                         width=4096, allow_unicode=True))
