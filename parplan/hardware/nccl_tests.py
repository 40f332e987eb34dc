"""Read the text output of nccl-tests (and AMD's rccl-tests) into `CollectiveSample` rows.

Every format generation is accepted (``reference/hardware.md`` §2.1, ``tests/data/nccl_samples/README.md``):
with or without the ``root`` column, ``#wrong`` or the older ``error`` column, ``N/A`` when validation is
off, ``-I 1`` per-iteration columns, ``-S 1`` timestamps, ``cputime`` instead of ``time`` (``-C 1``),
launcher prefixes (``[0] `` from mpirun --tag-output, `` 0: `` from srun -l) and any noise lines (ssh, UCX,
NCCL INFO). Columns are mapped by the last ``# size count ...`` header seen; without a header, by the
token count of the row (an even count means the pre-2022 layout without ``root``).

Both halves of a row are kept, out-of-place and in-place, flagged by `CollectiveSample.in_place`: they
are two measurements of the same collective, and a fit sees twice the data.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from parplan._input import read_text
from parplan._mapping import MAX_INT
from parplan.errors import ConfigError
from parplan.hardware.samples import COLLECTIVES, CollectiveSample, busbw_factor

BINARIES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all", "sendrecv": "send_recv", "broadcast": "broadcast"}
"""nccl-tests binary stem (``<stem>_perf``) -> collective name. Rows of the other binaries (reduce, gather,
scatter, hypercube, alltoallv) are skipped: the cost model has no use for them."""

_PREFIX = re.compile(r"^\s*(?:\[\d+(?:,\d+)*\](?:<std(?:out|err)>:)?|\d+:)")
_BINARY = re.compile(r"(?<![A-Za-z0-9_])([a-z_]+?)_perf(?![A-Za-z0-9])")
_THREADS = re.compile(r"\bnThread\s+(\d+)\s+nGpus\s+(\d+)")
_DEVICE = re.compile(r"\bRank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\b")
_TIME_COLUMNS = ("time", "cputime")


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where the two (time, algbw, busbw) groups of a data row start, as token indices."""

    first: int
    """Index of the out-of-place time."""
    stride: int
    """Tokens from the out-of-place time to the in-place time (4, or 8 with -I per-iteration columns)."""


@dataclass(frozen=True, slots=True)
class _Half:
    """One measured half of a data row (out-of-place or in-place), as printed."""

    size: int
    dtype: str
    in_place: bool
    time_us: float
    algbw: float
    busbw: float


@dataclass(slots=True)
class _Section:
    """One test run inside the text: its collective, rank layout and rows."""

    binary: str | None = None
    """Binary stem named by the output (see BINARIES), if any."""
    threads_gpus: int | None = None
    """nThread × nGpus of the header: the ranks one process drives."""
    hosts: dict[int, str] = field(default_factory=dict)
    """Rank -> hostname from the 'Using devices' lines."""
    rows: list[_Half] = field(default_factory=list)


def parse_nccl_tests(text: str, *, source: str = "", collective: str | None = None, ranks: int | None = None,
                     ranks_per_node: int | None = None) -> list[CollectiveSample]:
    """Samples of every data row in nccl-tests output `text`, in order (out-of-place, then in-place).

    The collective comes from `collective` (a `COLLECTIVES` name), else from the ``Collective test
    starting:`` line or a ``<name>_perf`` binary name anywhere in the text (a command echo, say). Ranks
    come from `ranks`, else the 'Using devices' lines, else busbw/algbw (the factor depends on n), else
    nThread × nGpus. Ranks per node come from `ranks_per_node`, else the most ranks on one hostname of
    the device lines, else all ranks are taken to share one node. Raises ConfigError naming `source`
    when no data row is found or the collective or rank count cannot be told.
    """
    if collective is not None and collective not in COLLECTIVES:
        raise ConfigError(f"unknown collective '{collective}'; known: {', '.join(COLLECTIVES)}", file=source or None)
    samples: list[CollectiveSample] = []
    for section in _sections(text):
        if not section.rows:
            continue
        name = collective or BINARIES.get(section.binary or "")
        if name is None:
            if section.binary is not None:
                continue  # a binary the cost model does not use (see BINARIES)
            raise ConfigError("cannot tell which collective this output measures (no 'Collective test "
                              "starting' line or *_perf name); pass the collective", file=source or None)
        n = ranks or _ranks(section, name, source)
        per_node = ranks_per_node or (max(Counter(section.hosts.values()).values()) if section.hosts else n)
        samples += [CollectiveSample(collective=name, size_bytes=h.size, ranks=n, ranks_per_node=min(per_node, n),
                                     time_us=h.time_us, algbw_gbps=h.algbw, busbw_gbps=h.busbw,
                                     source=source or "nccl-tests output", in_place=h.in_place, dtype=h.dtype)
                    for h in section.rows]
    if not samples:
        raise ConfigError("no nccl-tests data rows found (expected lines like '1024  256  float  sum  -1  "
                          "45.06  0.02  0.04  0 ...')", file=source or None)
    return samples


def parse_nccl_tests_file(path: str | Path, *, collective: str | None = None, ranks: int | None = None,
                          ranks_per_node: int | None = None) -> list[CollectiveSample]:
    """`parse_nccl_tests` of a file; the path is the samples' source and the errors' file."""
    text = read_text(path, errors="replace")
    return parse_nccl_tests(text, source=str(path), collective=collective, ranks=ranks,
                            ranks_per_node=ranks_per_node)


def nccl_version(text: str) -> str | None:
    """NCCL version the output was produced with: the library's own 'NCCL version 2.30.4+cuda13.2' line, else
    the nccl-tests header's 'nccl-library=23004' code (major·10000 + minor·100 + patch)."""
    line = re.search(r"NCCL version (\d+\.\d+\.\d+)", text)
    if line:
        return line.group(1)
    code = re.search(r"nccl-library=(\d+)", text)
    if code:
        value = int(code.group(1))
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return None


def _sections(text: str) -> list[_Section]:
    """Split the text into test runs and collect each one's header facts and data rows."""
    sections = [_Section()]
    layout: _Layout | None = None
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw, count=1).strip()
        binary = _BINARY.search(line)
        threads = _THREADS.search(line)
        if binary or threads:
            if sections[-1].rows:  # a new test starts after the previous one's table
                sections.append(_Section(binary=sections[-1].binary))
            if binary:
                sections[-1].binary = binary.group(1)
            if threads:
                sections[-1].threads_gpus = int(threads.group(1)) * int(threads.group(2))
        if line.startswith("#"):
            device = _DEVICE.search(line)
            if device:
                sections[-1].hosts[int(device.group(1))] = device.group(2)
            layout = _header_layout(line) or layout
            continue
        sections[-1].rows += _row(line.split(), layout)
    return sections


def _header_layout(line: str) -> _Layout | None:
    """Column layout from a '# size count type ...' header line; None for any other comment line."""
    names = line.lstrip("#").split()
    if names[:2] != ["size", "count"]:
        return None
    times = [i for i, name in enumerate(names) if name in _TIME_COLUMNS]
    if len(times) < 2:
        return None
    return _Layout(first=times[0], stride=times[1] - times[0])


def _row(tokens: list[str], layout: _Layout | None) -> list[_Half]:
    """The measured halves of a data row; [] when the line is not one (noise, partial line)."""
    if len(tokens) < 9 or not (tokens[0].isdigit() and tokens[1].isdigit()) or _number(tokens[2]) is not None:
        return []
    if int(tokens[0]) > MAX_INT:  # a size no buffer has: a mangled line, not a measurement
        return []
    if layout is None:
        # Pre-2022 rows lack `root`: 12 tokens (or 20 with -I); later rows have 13, 21, or 15 with -S.
        first = 4 if len(tokens) % 2 == 0 else 5
        layout = _Layout(first=first, stride=8 if len(tokens) - first >= 16 else 4)
    halves = []
    for in_place, start in ((False, layout.first), (True, layout.first + layout.stride)):
        values = [_number(t) for t in tokens[start:start + 3]]
        if len(values) == 3 and None not in values and values[0] > 0:
            time_us, algbw, busbw = values
            halves.append(_Half(int(tokens[0]), tokens[2], in_place, time_us, algbw, busbw))
    return halves


def _number(token: str) -> float | None:
    """A finite float ('45.06', '24410', '1.2e+05'), or None ('N/A', 'float', '-')."""
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _ranks(section: _Section, collective: str, source: str) -> int:
    """Ranks of a section: device lines, else busbw/algbw, else nThread × nGpus (see parse_nccl_tests)."""
    if section.hosts:
        return max(len(section.hosts), section.threads_gpus or 0)
    inferred = _ranks_from_bandwidth(section.rows, collective)
    if inferred:
        return inferred
    if section.threads_gpus:
        return section.threads_gpus
    raise ConfigError("cannot tell how many ranks ran the test (no 'Using devices' or 'nThread' lines); "
                      "pass the rank count", file=source or None)


def _ranks_from_bandwidth(rows: list[_Half], collective: str) -> int | None:
    """n solving busbw/algbw = factor(n) on the row with the most printed digits (largest algbw).

    all_reduce: 2(n-1)/n, all_gather/reduce_scatter/all_to_all: (n-1)/n; send/recv and broadcast have a
    factor of 1 whatever n is, so they tell nothing.
    """
    if busbw_factor(collective, 2) == busbw_factor(collective, 3):
        return None
    best = max(rows, key=lambda h: h.algbw)
    if best.algbw <= 0:
        return None
    ceiling = 2.0 if collective == "all_reduce" else 1.0  # factor(n) -> ceiling as n grows
    ratio = best.busbw / best.algbw
    if ratio >= ceiling:
        return None
    n = ceiling / (ceiling - ratio)
    # Bandwidths are printed to 0.01 GB/s: propagate that rounding to n (dn = n²/ceiling · d ratio) and
    # trust the answer only when it pins n to within a quarter rank.
    spread = n * n / ceiling * 0.005 * (1.0 + ratio) / best.algbw
    return round(n) if round(n) >= 2 and abs(n - round(n)) + spread < 0.25 else None
