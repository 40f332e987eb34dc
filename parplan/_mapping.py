"""Typed, checked values from the mappings of input files, with errors that name the file, the field and the
rule (the second half of the door; `parplan._input` is the first: it hands over plain, bounded data).

- `Fields(data, file, section)`: one mapping of a file. `f.int("layers", min=1)`, `f.float("bw", above=0)`,
  `f.bool(...)`, `f.str(..., choices=...)`, `f.mapping("gpu")` (a nested `Fields`), `f.list(...)`,
  `f.allow({...})` (unknown keys are errors naming them). A key that is absent or null takes the default;
  without a default it is "required field is missing". The rules every value obeys, whatever the field:
  bool is never a number; a float is finite (NaN, inf and 1e400 are refused); an int is a whole number
  (4096.0 reads as 4096, 8.7 is refused) of at most `MAX_INT` in size; `min`/`max`/`above` add the
  field's own range.
- `dataclass_from_mapping(cls, raw, file, section)`: a dataclass from a mapping, each field read by `Fields`
  according to its annotation; the dataclass's own checks (`require` in `__post_init__`) then see only
  well-typed values, and their errors are re-raised naming the file and the section.
- `require(checks, file=...)`: the first failed (field, ok, rule) check as a ConfigError; the specs'
  `__post_init__` use it for ranges and relationships (heads divisible by KV heads, top-k <= experts), so
  the library checks what the files check.
- `shown(value)`: a value as an error message quotes it, cut to a readable length.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from parplan.errors import ConfigError, ParplanError

MAX_INT = 2**53
"""Largest integer any field accepts: beyond it floats lose whole numbers and numpy's int64 products
overflow; every real count is many orders of magnitude below."""

_MISSING: Any = object()


def shown(value: Any, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters: error messages quote a value, never a whole document."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def require(checks: Iterable[tuple[str, bool, str]], *, file: str | None = None) -> None:
    """Raise a ConfigError for the first (field, ok, rule) whose ok is false, naming `file` and the field."""
    for name, ok, why in checks:
        if not ok:
            raise ConfigError(why, file=file, field=name)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _in_range(value: float, min: float | None, max: float | None, above: float | None) -> str | None:
    """The range rule `value` breaks, or None."""
    if min is not None and value < min:
        return f"must be >= {min:g}"
    if above is not None and value <= above:
        return "must be positive" if above == 0 else f"must be > {above:g}"
    if max is not None and value > max:
        return f"must be <= {max:,}" if isinstance(max, int) else f"must be <= {max:g}"
    return None


def as_int(value: Any, *, min: int | None = None, max: int | None = None) -> tuple[int | None, str | None]:
    """(the integer, None), or (None, the rule `value` breaks): a whole, finite number of at most MAX_INT."""
    if not _number(value):
        return None, f"expected an integer, got {shown(value)}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, f"must be a finite integer, got {shown(value)}"
        if not value.is_integer():
            return None, f"must be a whole number, got {shown(value)}"
    if abs(value) > MAX_INT:
        return None, f"{value:.3g} is beyond any real count (at most {MAX_INT:.3g})"
    value = int(value)
    rule = _in_range(value, min, max, None)
    return (None, f"{rule}, got {value:,}") if rule else (value, None)


def as_float(value: Any, *, min: float | None = None, max: float | None = None,
             above: float | None = None) -> tuple[float | None, str | None]:
    """(the float, None), or (None, the rule `value` breaks): a finite number within the range."""
    if not _number(value):
        return None, f"expected a number, got {shown(value)}"
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        return None, f"must be a finite number, got {shown(value)}"
    if not math.isfinite(number):
        return None, f"must be a finite number, got {shown(value)}"
    rule = _in_range(number, min, max, above)
    return (None, f"{rule}, got {number:g}") if rule else (number, None)


class Fields:
    """Typed access to one mapping of an input file; every error names the file and the field's path."""

    def __init__(self, data: Any, file: str | None, section: str = "") -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"expected a mapping, got {shown(data)}", file=file, field=section or None)
        self.data: dict[str, Any] = data
        self.file = file
        self.section = section

    def where(self, key: str) -> str:
        """The field's path in the file ('attention.heads')."""
        return f"{self.section}.{key}" if self.section else key

    def error(self, key: str | None, message: str) -> ConfigError:
        return ConfigError(message, file=self.file, field=self.where(key) if key else self.section or None)

    def allow(self, allowed: Iterable[str]) -> Fields:
        """Refuse keys outside `allowed`, naming the first and listing the allowed ones; returns self."""
        allowed = set(allowed)
        for key in self.data:
            if key not in allowed:
                raise self.error(key, f"unknown field; allowed: {', '.join(sorted(allowed))}")
        return self

    def without(self, *keys: str) -> Fields:
        """The same mapping less `keys` (read by the caller), under the same section."""
        return Fields({k: v for k, v in self.data.items() if k not in keys}, self.file, self.section)

    def has(self, key: str) -> bool:
        """The key is present with a non-null value."""
        return self.data.get(key) is not None

    def _get(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error(key, "required field is missing")
            return _MISSING
        return value

    def int(self, key: str, default: Any = _MISSING, *, min: int | None = None, max: int | None = None) -> Any:
        value = self._get(key, default)
        if value is _MISSING:
            return default
        number, rule = as_int(value, min=min, max=max)
        if rule:
            raise self.error(key, rule)
        return number

    def float(self, key: str, default: Any = _MISSING, *, min: float | None = None, max: float | None = None,
              above: float | None = None) -> Any:
        value = self._get(key, default)
        if value is _MISSING:
            return default
        number, rule = as_float(value, min=min, max=max, above=above)
        if rule:
            raise self.error(key, rule)
        return number

    def bool(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {shown(value)}")
        return value

    def str(self, key: str, default: Any = _MISSING, *, choices: Iterable[str] | None = None) -> Any:
        value = self._get(key, default)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {shown(value)}")
        if choices is not None and value not in (options := tuple(choices)):
            raise self.error(key, f"must be one of {', '.join(options)}, got {shown(value)}")
        return value

    def mapping(self, key: str, default: Any = _MISSING) -> Any:
        """The nested mapping under `key` as Fields (`default` when absent and given)."""
        value = self._get(key, default)
        if value is _MISSING:
            return default
        return Fields(value, self.file, self.where(key))

    def list(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is _MISSING:
            return default
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {shown(value)}")
        return value

    def int_list(self, key: str, *, min: int | None = None, max: int | None = None) -> list[int]:
        """A list of integers (empty when absent)."""
        out = []
        for i, item in enumerate(self.list(key, [])):
            number, rule = as_int(item, min=min, max=max)
            if rule:
                raise self.error(f"{key}[{i}]", rule)
            out.append(number)
        return out

    def number_map(self, key: str, *, above: float | None = None, min: float | None = None,
                   max: float | None = None) -> dict[str, float]:
        """A mapping of names to finite numbers (peak TFLOP/s per dtype, say)."""
        sub = self.mapping(key)
        return {name: sub.float(name, min=min, max=max, above=above) for name in sub.data}


def dataclass_from_mapping(cls: type, raw: Any, file: str | None, section: str) -> Any:
    """An instance of dataclass `cls` from a mapping: unknown keys, missing required fields and values of the
    wrong type (see Fields) are ConfigErrors naming `file` and the field under `section`; so are the
    dataclass's own checks, re-raised with the section prefixed."""
    f = Fields(raw, file, section)
    fields = {fl.name: fl for fl in dataclasses.fields(cls)}
    f.allow(fields)
    kw = {}
    for name, fl in fields.items():
        if name not in raw:
            if fl.default is dataclasses.MISSING and fl.default_factory is dataclasses.MISSING:
                raise f.error(name, "required field is missing")
            continue
        kind = str(fl.type)
        optional = kind.endswith(" | None")
        if raw[name] is None:
            if not optional:
                raise f.error(name, "required field is missing")
            kw[name] = None
            continue
        kind = kind.removesuffix(" | None")
        if kind in ("int", "float", "bool", "str"):
            kw[name] = getattr(f, kind)(name)
        elif kind.startswith("dict"):
            kw[name] = f.number_map(name)
        elif kind.startswith("tuple"):
            values = f.int_list(name)
            if len(values) != kind.count(",") + 1:
                raise f.error(name, f"expected {kind.count(',') + 1} integers, got {shown(raw[name])}")
            kw[name] = tuple(values)
        else:
            raise TypeError(f"{cls.__name__}.{name}: no reader for the annotation {kind}")
    try:
        return cls(**kw)
    except ConfigError as e:
        raise ConfigError(e.rule, file=file, field=f"{section}.{e.field}" if e.field else section) from None
    except ParplanError as e:  # a spec's own error class (a Strategy rule, say), naming its field or not
        field = getattr(e, "field", None)
        raise ConfigError(str(e), file=file, field=f"{section}.{field}" if field else section) from None
