"""The door for every file parplan reads or writes: what comes in is checked here before any reader looks
at it, and what goes out is written whole or not at all.

Reading (model, cluster, runs, plan, expert-count, profile files and nccl-tests logs all come through here):

- `read_text(path)`: the path must name a regular file (not a directory, device or FIFO) of at most
  `MAX_FILE_BYTES`, in UTF-8 with or without a byte-order mark. UTF-16/32, binary content (NUL bytes) and
  any other encoding are `ConfigError`s naming the file, with the offending byte. `errors="replace"` keeps
  the NUL and UTF-16 checks but tolerates stray bytes (log files with a mangled hostname).
- `parse_yaml(text, file)` / `parse_json(text, file)`: the document, or a `ConfigError` naming the file and
  the line for a syntax error. Before a YAML document is built, its event stream is scanned with aliases
  counted at their expanded size, so an alias bomb ("billion laughs"), a recursive alias and nesting deeper
  than `MAX_DEPTH` are refused in time linear in the file, never hang or exhaust memory. Both formats
  refuse nesting deeper than `MAX_DEPTH`, more than `MAX_NODES` values, mapping keys that are not strings
  (YAML reads `on:` as true and `1:` as an int) and numbers too long to read.
- `read_yaml(path)`, `read_json(path)`, `read_document(path)` (by suffix) combine the two.

What the values mean (types, finiteness, ranges, relationships) is the business of `parplan._mapping.Fields`
and of each spec's own checks; this module only guarantees that a reader gets plain, bounded data: dicts
with string keys, lists, str, int, float (possibly NaN or inf: `Fields` refuses those by field name), bool,
None and YAML dates.

Writing:

- `check_output(path)` / `check_output_dir(path)`: refuse, before the work is done, an output that could not
  be written: a directory where a file is wanted (or the reverse), a missing or read-only folder, a special
  file. The check creates and removes a temporary file beside the target, so it sees what a write would.
- `write_text(path, text)` and `atomic_output(path)` (for writers that take a path, such as matplotlib):
  the data goes to a temporary file in the same folder that is renamed over the target only once complete,
  so a failure (a full disk, an exception halfway) never leaves a partial or truncated file.

Adding an input kind: read it with `read_document` (or `read_text` plus your own parser), then take its
fields with `parplan._mapping.Fields`; add its hostile cases to tests/test_hostile.py's tables.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from parplan.errors import ConfigError

MAX_FILE_BYTES = 8 * 2**20
"""Largest input file read, bytes. Real inputs are far smaller: a Hugging Face config.json is a few KiB, the
80 published runs 60 KiB, a measured hardware profile a few hundred KiB."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and lists accepted; real configs nest 5 deep at most (a multimodal wrapper's
text_config holding rope_scaling)."""
MAX_NODES = 200_000
"""Most values (scalars, mappings, lists) a document may hold once YAML aliases are expanded: ten times a
hardware profile of 1,000 samples; large enough for any real file, small enough to read in seconds."""

_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"), (b"\xfe\xff", "UTF-16"),
         (b"\xff\xfe", "UTF-16"))
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader when PyYAML was built with it (several times faster); the same safe constructors."""


def kind(path: str | Path) -> str:
    """'missing', 'file' (a regular file), 'dir' or 'other' (a device, FIFO, socket), following links; a name
    the system cannot look up (too long, a NUL character from a YAML escape, a link loop) is a ConfigError
    naming it, where Path.exists would raise."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot look up this path ({getattr(e, 'strerror', None) or e})", file=str(path)) from None
    return "dir" if stat.S_ISDIR(mode) else ("file" if stat.S_ISREG(mode) else "other")


def exists(path: str | Path) -> bool:
    """Whether something is at `path` (see `kind` for names that cannot be looked up)."""
    return kind(path) != "missing"


def check_input(path: str | Path) -> None:
    """Refuse, naming it, a path that is not a regular file: nothing there, a directory, a device."""
    found, file = kind(path), str(path)
    if found == "missing":
        raise ConfigError("no such file", file=file)
    if found == "dir":
        raise ConfigError("is a directory, expected a file", file=file)
    if found == "other":
        raise ConfigError("is not a regular file (a device, FIFO or socket)", file=file)


def read_text(path: str | Path, errors: str = "strict", max_bytes: int = MAX_FILE_BYTES) -> str:
    """The text of the regular file at `path` (UTF-8, a byte-order mark dropped); anything else is a
    ConfigError naming the file. `errors="replace"` tolerates stray non-UTF-8 bytes (log files)."""
    file = str(path)
    check_input(path)
    try:
        info = os.stat(path)
        if info.st_size > max_bytes:
            raise ConfigError(f"is {info.st_size:,} bytes; files over {max_bytes:,} bytes are refused", file=file)
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)  # /proc files report size 0: bound the read itself
    except OSError as e:
        raise ConfigError(f"cannot read file ({e.strerror or e})", file=file) from None
    if len(data) > max_bytes:
        raise ConfigError(f"is over {max_bytes:,} bytes; larger files are refused", file=file)
    return decode(data, file, errors)


def decode(data: bytes, file: str, errors: str = "strict") -> str:
    """UTF-8 text of `data` (with or without a byte-order mark); UTF-16/32, binary and other encodings are
    ConfigErrors naming `file`."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise ConfigError(f"is {name} text; save it as UTF-8", file=file)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ConfigError(f"is binary, not text (a NUL byte at offset {nul}; UTF-16 without a byte-order mark "
                          "looks like this too): expected UTF-8 text", file=file)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"is not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); save it as UTF-8",
                          file=file) from None


def _too_deep(file: str, where: str = "") -> ConfigError:
    return ConfigError(f"nests deeper than {MAX_DEPTH} levels{where}; no real configuration does", file=file)


def _too_big(file: str) -> ConfigError:
    return ConfigError(f"holds more than {MAX_NODES:,} values (YAML aliases counted as expanded); refused",
                       file=file)


def _scan_yaml(text: str, file: str) -> None:
    """Check depth and expanded size on the event stream, before anything is built. An alias counts as the
    size of what it names, so nested aliases that would expand exponentially are refused at the first
    event past the bound; an alias to a collection still open (a recursive structure) is refused too."""
    sizes: dict[str, int] = {}
    stack: list[tuple[str | None, int]] = []  # (anchor, total values when the collection opened)
    total = 0
    for event in yaml.parse(text, Loader=_YAML_LOADER):
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in sizes:
                raise ConfigError(f"the alias *{event.anchor} refers to a collection that contains it (a recursive "
                                  "structure) or to no anchor", file=file)
            total += sizes[event.anchor]
        elif isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            total += 1
            if isinstance(event, yaml.CollectionStartEvent):
                stack.append((event.anchor, total - 1))
                if len(stack) > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else 0
                    raise _too_deep(file, f" (line {line})")
            elif event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, start = stack.pop()
            if anchor:
                sizes[anchor] = total - start
        if total > MAX_NODES:
            raise _too_big(file)


def _check_tree(data: Any, file: str) -> None:
    """Depth, value count and string keys of a parsed document, walked without recursion."""
    count = 0
    todo: list[tuple[Any, int, str]] = [(data, 1, "")]
    while todo:
        value, depth, where = todo.pop()
        count += 1
        if count > MAX_NODES:
            raise _too_big(file)
        if isinstance(value, dict | list) and depth > MAX_DEPTH:
            raise _too_deep(file)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ConfigError(f"the key {key!r} is not a string (quote it: YAML reads on/off/yes/no as "
                                      "true/false and digits as numbers)", file=file, field=where or None)
                todo.append((item, depth + 1, f"{where}.{key}" if where else key))
        elif isinstance(value, list):
            todo += [(item, depth + 1, f"{where}[{i}]") for i, item in enumerate(value)]


def parse_yaml(text: str, file: str) -> Any:
    """The YAML document in `text`, bounded as the module docstring says; a syntax error is a ConfigError
    naming `file`, line and column."""
    try:
        _scan_yaml(text, file)
        data = yaml.load(text, Loader=_YAML_LOADER)  # the C or Python *safe* loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"not valid YAML{where}: {getattr(e, 'problem', None) or e}", file=file) from None
    except (ValueError, OverflowError) as e:  # an integer of thousands of digits, a date out of range
        raise ConfigError(f"a value cannot be read: {e}", file=file) from None
    _check_tree(data, file)
    return data


def parse_json(text: str, file: str) -> Any:
    """The JSON document in `text`, bounded as the module docstring says; a syntax error is a ConfigError
    naming `file`, line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}", file=file) from None
    except RecursionError:
        raise _too_deep(file) from None
    except ValueError as e:  # an integer of thousands of digits
        raise ConfigError(f"a value cannot be read: {e}", file=file) from None
    _check_tree(data, file)
    return data


def read_yaml(path: str | Path) -> Any:
    """The YAML document in the file at `path`; an unreadable file is a ConfigError too."""
    return parse_yaml(read_text(path), str(path))


def read_json(path: str | Path) -> Any:
    """The JSON document in the file at `path`; an unreadable file is a ConfigError too."""
    return parse_json(read_text(path), str(path))


def read_document(path: str | Path) -> Any:
    """The document in a .json file (JSON) or any other file (YAML, of which JSON is a subset)."""
    return read_json(path) if Path(path).suffix.lower() == ".json" else read_yaml(path)


# ------------------------------------------------------------------------------------------------ writing

def _probe_folder(folder: Path, target: str) -> None:
    """Create and remove a temporary file in `folder`: the one check that sees permissions, read-only
    mounts and pseudo-filesystems (/proc) as a real write would."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".parplan-probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise ConfigError(f"cannot write into {folder} ({e.strerror or e})", file=target) from None


def check_output(path: str | Path) -> Path:
    """`path` as an output file parplan can write, checked before the work is done: not a directory nor a
    special file, in an existing folder that accepts new files. Returns the Path."""
    path = Path(path).expanduser()
    target = str(path)
    found = kind(path)
    if found == "dir":
        raise ConfigError("is a directory; give a file name", file=target)
    if found == "other":
        raise ConfigError("is not a regular file (a device, FIFO or socket); give a file name", file=target)
    folder = kind(path.parent)
    if folder != "dir":
        raise ConfigError(f"the folder {path.parent} does not exist" if folder == "missing"
                          else f"{path.parent} is not a folder", file=target)
    _probe_folder(path.parent, target)
    return path


def check_output_dir(path: str | Path) -> Path:
    """`path` as an output folder (created when written) parplan can fill: an existing writable folder, or a
    new one whose nearest existing ancestor is a writable folder. Returns the Path."""
    path = Path(path).expanduser()
    target = str(path)
    if kind(path) not in ("missing", "dir"):
        raise ConfigError("exists and is not a folder; give a folder for the files", file=target)
    ancestor = path
    while kind(ancestor) == "missing":
        ancestor = ancestor.parent
    if kind(ancestor) != "dir":
        raise ConfigError(f"{ancestor} is not a folder", file=target)
    _probe_folder(ancestor, target)
    return path


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed over `path` when the block succeeds, removed when
    it fails, so `path` is never left partial. OSErrors become ConfigErrors naming `path`."""
    path = Path(path)
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise ConfigError(f"cannot write ({e.strerror or e})", file=str(path)) from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a plain write would not
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write ({e.strerror or e})", file=str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically (see `atomic_output`)."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_yaml(path: str | Path, data: Any, *, block: bool = False) -> None:
    """Write `data` as YAML in parplan's layout, atomically: keys in their order, the innermost mappings and
    lists on one line each (hundreds of measured samples stay readable), or every mapping in block style
    (`block`, for files people read field by field, such as stack files)."""
    write_text(path, yaml.safe_dump(data, sort_keys=False, default_flow_style=False if block else None,
                                    width=4096, allow_unicode=True))
