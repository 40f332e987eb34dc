"""Typed dataclasses from the mappings of input files, with errors that name the file and the field."""

from __future__ import annotations

import dataclasses
from typing import Any

from parplan.errors import ConfigError


def dataclass_from_mapping(cls: type, raw: Any, file: str, section: str) -> Any:
    """An instance of dataclass `cls` from a YAML mapping: unknown keys, missing required fields and values of
    the wrong type are ConfigErrors naming `file` and the field under `section` (bool is never an int)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping, got {raw!r}", file=file, field=section)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            raise ConfigError(f"unknown field; allowed: {', '.join(sorted(fields))}", file=file,
                              field=f"{section}.{key}")
    kw = {}
    for name, f in fields.items():
        if name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError("required field is missing", file=file, field=f"{section}.{name}")
            continue
        value = raw[name]
        kind = str(f.type)
        bad = False
        if kind in ("int",):
            bad = isinstance(value, bool) or not isinstance(value, int)
        elif kind in ("float", "float | None"):
            bad = value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)))
            value = float(value) if value is not None and not bad else value
        elif kind == "bool":
            bad = not isinstance(value, bool)
        elif kind == "str":
            bad = not isinstance(value, str)
        elif kind.startswith("dict"):
            bad = not isinstance(value, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values())
        elif kind.startswith("tuple"):
            size = kind.count(",") + 1
            bad = not isinstance(value, (list, tuple)) or len(value) != size or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value)
            value = tuple(value) if not bad else value
        if bad:
            raise ConfigError(f"wrong type: {value!r}", file=file, field=f"{section}.{name}")
        kw[name] = value
    try:
        return cls(**kw)
    except ConfigError as e:
        raise ConfigError(str(e), file=file, field=f"{section}.{e.field}" if e.field else section) from None
