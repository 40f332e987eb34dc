"""Discrete-event simulation of pipeline schedules, and a terminal picture of the result.

`simulate` replays the per-rank operation order of a real schedule implementation on p ranks with m
micro-batches; every operation starts when its rank is free and its inputs have arrived (a forward on
stage s after the forward on stage s − 1, a backward on stage s after the backward on stage s + 1, plus
`t_comm` when the two stages sit on different ranks). Outputs leave when the producing operation ends.
The orders follow:

- ``1f1b``: PipeDream-flush, p − r − 1 warm-up forwards on rank r (Megatron ``schedules.py``).
- ``interleaved``: Megatron interleaved 1F1B, rank r holds virtual stages r, r + p, ...; warm-up
  2(p − r − 1) + (v − 1)·p chunk micro-batches; micro-batches go in groups of p per chunk, the last
  group taking any remainder (Megatron ``get_schedule_table``).
- ``zb-h1``: zero-bubble ZB-H1 as Megatron-DeepSpeed's ``ZeroBubbleH1Pipeline`` (exact semantics):
  F×(p − r − 1), (F B)×r, (F B W)×(m − p + 1), (B W)×(p − r − 1), W×r, where B is the input-gradient
  pass (t_b − t_w) and W the deferred weight-gradient pass (t_w), taken first in, first out.
- ``dualpipe`` / ``dualpipev``: the eight steps of deepseek-ai/DualPipe ``DualPipe.step`` and
  ``DualPipeV.step``, including which backwards defer W (zero-bubble) and the middle / last rank running
  its first pair unoverlapped. An overlapped forward&backward pair takes t_f + t_b: the overlap hides
  communication (all-to-all, p2p), not compute.

Time units: t_f, t_b, t_w are one micro-batch's forward, full backward and weight-gradient time on one
rank. Interleaved chunks take 1/v of them and DualPipeV chunks 1/2 (a micro-batch passes all chunks of a
rank); a DualPipe micro-batch passes one of its rank's two stages, so it takes the whole t_f.

Against formulas.md §5 (with t_comm = 0): 1F1B and interleaved (m a multiple of p) match exactly; ZB-H1
matches (p − 1)(T_F + T_B − T_W) while T_W <= min(T_F, T_B), T_B being the input-gradient pass; DualPipe(V)
match (PP/2 − 1)(F&B + B − 3W) when T_F = T_B (the README's setting). With T_F > T_B the real step order
gives (PP/2 − 1)(F&B + T_F − 2W); with T_F < T_B it stays about one forward chunk under the formula.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from rich.text import Text

from parplan.errors import ParplanError
from parplan.planner.strategy import SCHEDULES

_Pass = tuple[int, int]
"""(micro-batch, stage along that micro-batch's path)."""


@dataclass(frozen=True, slots=True)
class Block:
    """One interval of a rank's timeline."""

    start: float
    end: float
    kind: str
    """"F", "B" (full backward, or input-gradient only when W is deferred), "W", "FB" or "idle"."""
    microbatch: int
    """Micro-batch id (the forward's for "FB"); -1 when idle."""
    chunk: int
    """Which of the rank's model chunks ran (the forward's for "FB"); -1 when idle."""
    backward: tuple[int, int] | None = None
    """(micro-batch, chunk) of the backward half of an "FB" pair."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """Simulated pipeline schedule: what every rank does when."""

    schedule: str
    p: int
    m: int
    v: int
    ranks: tuple[tuple[Block, ...], ...]
    """Blocks of each rank in time order, idle gaps included, covering [0, makespan]."""
    makespan: float
    busy: tuple[float, ...]
    """Compute time of each rank."""
    ideal: float
    """m·(t_f + t_b): the step with no pipeline bubble."""
    inflight: tuple[float, ...]
    """Peak micro-batches of activations each rank holds, in units of all its layers (a chunk counts
    1/chunks): held from the start of its forward to the end of its backward (B); W only keeps the GEMM
    inputs and is not counted."""

    @property
    def bubble(self) -> float:
        """Makespan minus the busy time of the busiest rank (all ranks are equally busy here)."""
        return self.makespan - max(self.busy)

    @property
    def bubble_fraction(self) -> float:
        """Bubble relative to m·(t_f + t_b), as formulas.md §5 states it."""
        return self.bubble / self.ideal


@dataclass(frozen=True, slots=True)
class _Step:
    """One entry of a rank's program; micro-batches are assigned in order per lane when lowered."""

    kind: str
    """"F", "B" (full backward), "I" (input gradient, W deferred), "W" or "FB" (forward lane + full
    backward of back_lane)."""
    lane: int = 0
    back_lane: int = 0


@dataclass(frozen=True, slots=True)
class _Lane:
    """A stream of micro-batches passing one stage held by a rank, in the order they arrive."""

    microbatches: tuple[int, ...]
    stage: int


@dataclass(frozen=True, slots=True)
class _Op:
    """A lowered step: what it computes, for how long."""

    kind: str
    duration: float
    forward: _Pass | None = None
    backward: _Pass | None = None
    """The pass whose input gradient it computes (or, for kind "W", whose weight gradient)."""


@dataclass(frozen=True, slots=True)
class _Pipe:
    """Where each stage of each micro-batch's path runs, and how long its passes take."""

    schedule: str
    p: int
    m: int
    v: int
    f: float
    b: float
    w: float

    @property
    def stages(self) -> int:
        """Stages along a micro-batch's path."""
        if self.schedule == "interleaved":
            return self.p * self.v
        return 2 * self.p if self.schedule == "dualpipev" else self.p

    @property
    def held_chunks(self) -> int:
        """Model chunks a rank holds (the unit of `Timeline.inflight`)."""
        if self.schedule == "interleaved":
            return self.v
        return 2 if self.schedule in ("dualpipe", "dualpipev") else 1

    def place(self, mb: int, stage: int) -> tuple[int, int]:
        """(rank, chunk) running `stage` of micro-batch `mb`."""
        if self.schedule == "interleaved":
            return stage % self.p, stage // self.p
        if self.schedule == "dualpipev":
            return (stage, 0) if stage < self.p else (2 * self.p - 1 - stage, 1)
        if self.schedule == "dualpipe":
            # The second half of the micro-batches enters at the last rank, which holds stage 0 as chunk 1.
            reverse = int(mb >= self.m // 2)
            return (self.p - 1 - stage if reverse else stage), reverse
        return stage, 0


def simulate(schedule: str, p: int, m: int, *, v: int = 1, t_f: float = 1.0, t_b: float = 2.0, t_w: float = 0.0,
             t_comm: float = 0.0) -> Timeline:
    """Simulate one training step of `schedule` (one of ``SCHEDULES``) on p ranks with m micro-batches.

    v: model chunks per rank (interleaved only). t_f, t_b, t_w: one micro-batch's forward, full backward
    (weight gradient included) and weight-gradient time on one rank; schedules that do not split W run
    the full backward. t_comm: p2p delay between neighbouring ranks. See the module doc for the orders.
    """
    _check(schedule, p, m, v, t_f, t_b, t_w, t_comm)
    chunk_time = v if schedule == "interleaved" else (2 if schedule == "dualpipev" else 1)
    pipe = _Pipe(schedule, p, m, v, t_f / chunk_time, t_b / chunk_time, t_w / chunk_time)
    programs = [_lower(steps, lanes, pipe) for steps, lanes in _programs(pipe)]
    starts = _run(programs, pipe, t_comm)
    makespan = max((s + op.duration for prog, st in zip(programs, starts, strict=True)
                    for op, s in zip(prog, st, strict=True)), default=0.0)
    return Timeline(
        schedule=schedule, p=p, m=m, v=v,
        ranks=tuple(_blocks(prog, st, pipe, makespan) for prog, st in zip(programs, starts, strict=True)),
        makespan=makespan,
        busy=tuple(sum(op.duration for op in prog) for prog in programs),
        ideal=m * (t_f + t_b),
        inflight=tuple(_peak_inflight(prog) / pipe.held_chunks for prog in programs),
    )


def _check(schedule: str, p: int, m: int, v: int, t_f: float, t_b: float, t_w: float, t_comm: float) -> None:
    """Reject layouts the real schedule implementations refuse (their asserts) and impossible times."""
    if schedule not in SCHEDULES:
        raise ParplanError(f"unknown schedule '{schedule}' (one of {', '.join(SCHEDULES)})")
    if p < 1 or m < 1 or v < 1:
        raise ParplanError(f"p, m and v must be positive (got p={p}, m={m}, v={v})")
    if v != 1 and schedule != "interleaved":
        raise ParplanError(f"v={v} model chunks per rank only applies to the interleaved schedule")
    if schedule in ("interleaved", "zb-h1") and m < p:
        raise ParplanError(f"{schedule} needs at least p micro-batches (m={m}, p={p})")
    if schedule == "dualpipe" and (p % 2 or m % 2 or m < 2 * p):
        raise ParplanError(f"dualpipe needs an even p and an even m >= 2p (p={p}, m={m})")
    if schedule == "dualpipev" and m < 2 * p:
        raise ParplanError(f"dualpipev needs m >= 2p (p={p}, m={m})")
    if t_f <= 0 or t_b <= 0 or not 0 <= t_w <= t_b or t_comm < 0:
        raise ParplanError(f"need t_f, t_b > 0, 0 <= t_w <= t_b, t_comm >= 0 (got {t_f}, {t_b}, {t_w}, {t_comm})")


def _programs(pipe: _Pipe) -> Iterator[tuple[list[_Step], list[_Lane]]]:
    """Each rank's step order and the lanes its steps draw micro-batches from."""
    p, m = pipe.p, pipe.m
    everyone = tuple(range(m))
    for r in range(p):
        if pipe.schedule == "interleaved":
            yield _interleaved_steps(p, m, pipe.v, r), [_Lane(everyone, j * p + r) for j in range(pipe.v)]
        elif pipe.schedule == "dualpipe":
            # Lane 0 is the direction entering nearest this rank (DualPipe's `phase ^= is_in_second_half`).
            near = int(r >= p // 2)
            half = [tuple(range(m // 2)), tuple(range(m // 2, m))]
            stage = [r, p - 1 - r]
            lanes = [_Lane(half[near], stage[near]), _Lane(half[1 - near], stage[1 - near])]
            yield _dual_steps(min(r, p - 1 - r), p // 2, m // 2), lanes
        elif pipe.schedule == "dualpipev":
            yield _dual_steps(r, p, m), [_Lane(everyone, r), _Lane(everyone, 2 * p - 1 - r)]
        elif pipe.schedule == "zb-h1":
            yield _zb_h1_steps(p, m, r), [_Lane(everyone, r)]
        else:
            warm = min(p - r - 1, m)
            steps = _steps("F") * warm + _steps("F", "B") * (m - warm) + _steps("B") * warm
            yield steps, [_Lane(everyone, r)]


def _steps(*kinds: str) -> list[_Step]:
    """Lane-0 steps of the given kinds."""
    return [_Step(kind) for kind in kinds]


def _zb_h1_steps(p: int, m: int, r: int) -> list[_Step]:
    """ZB-H1 on rank r: like 1F1B, but rank r defers r weight-gradient passes to the cool-down, where it would
    otherwise wait for gradients (Megatron-DeepSpeed ``ZeroBubbleH1Pipeline``)."""
    return (_steps("F") * (p - r - 1) + _steps("F", "I") * r + _steps("F", "I", "W") * (m - p + 1)
            + _steps("I", "W") * (p - r - 1) + _steps("W") * r)


def _interleaved_steps(p: int, m: int, v: int, r: int) -> list[_Step]:
    """Megatron interleaved 1F1B on rank r; lane j is model chunk j."""
    # Forward order of chunks: groups of p micro-batches pass chunk 0, then chunk 1, ...; the last group
    # holds the remainder when p does not divide m.
    table = [chunk for first in range(0, m, p) for chunk in range(v) for _ in range(min(p, m - first))]
    total = m * v
    warm = min(2 * (p - r - 1) + (v - 1) * p, total)
    forwards = [_Step("F", chunk) for chunk in table]
    backwards = [_Step("B", v - 1 - chunk) for chunk in table]
    steady = [step for k in range(total - warm) for step in (forwards[warm + k], backwards[k])]
    return forwards[:warm] + steady + backwards[total - warm:]


def _dual_steps(h: int, n: int, per_lane: int) -> list[_Step]:
    """DualPipe's eight steps on a rank at distance h from its end of the pipeline, with n such distances
    (n = p/2 for DualPipe, n = p for DualPipeV) and per_lane micro-batches entering each lane."""
    f0, f1, b1, i0, i1, w = _Step("F", 0), _Step("F", 1), _Step("B", 1), _Step("I", 0), _Step("I", 1), _Step("W")
    pair01, pair10 = _Step("FB", 0, 1), _Step("FB", 1, 0)
    k = n - h - 1
    steps = [f0] * (2 * k) + [f0, f1] * (h + 1) + [i1, w, f1] * k
    for i in range(per_lane - 2 * n + h + 1):
        # The rank where the two directions meet runs its first pair unoverlapped, so its forward output
        # leaves before the backward runs (DualPipe's NOTE: it shrinks the bubble).
        first = [f0, b1] if i == 0 and h == n - 1 else [pair01]
        steps += [*first, pair10]
    steps += [b1, pair10] * k
    # Step 6: the later half of these backwards defer W, taken in steps 7 and 8 (DualPipe `enable_zb`).
    half = (h + 1) // 2
    for i in range(h + 1):
        steps.append(i1 if i > half or (i == half and h % 2) else b1)
        steps.append(_Step("I" if i >= half else "B", 0))
    return steps + [w, i0] * k + [w] * (h + 1)


def _lower(steps: list[_Step], lanes: list[_Lane], pipe: _Pipe) -> list[_Op]:
    """Give each step its micro-batch (forwards and backwards each in lane order, W first in, first out)
    and its duration."""
    next_f = [0] * len(lanes)
    next_b = [0] * len(lanes)
    deferred: deque[_Pass] = deque()

    def take(counters: list[int], lane: int) -> _Pass:
        counters[lane] += 1
        return lanes[lane].microbatches[counters[lane] - 1], lanes[lane].stage

    ops = []
    for step in steps:
        if step.kind == "F":
            ops.append(_Op("F", pipe.f, forward=take(next_f, step.lane)))
        elif step.kind == "B":
            ops.append(_Op("B", pipe.b, backward=take(next_b, step.lane)))
        elif step.kind == "I":
            deferred.append(take(next_b, step.lane))
            ops.append(_Op("B", pipe.b - pipe.w, backward=deferred[-1]))
        elif step.kind == "W":
            ops.append(_Op("W", pipe.w, backward=deferred.popleft()))
        else:
            ops.append(_Op("FB", pipe.f + pipe.b, forward=take(next_f, step.lane),
                           backward=take(next_b, step.back_lane)))
    return ops


def _run(programs: list[list[_Op]], pipe: _Pipe, t_comm: float) -> list[list[float]]:
    """Start time of every op: ranks run their programs in order, each op waiting for its inputs."""
    done_f: dict[_Pass, float] = {}
    done_b: dict[_Pass, float] = {}
    starts: list[list[float]] = [[] for _ in programs]
    free = [0.0] * len(programs)
    pending = sum(len(prog) for prog in programs)
    while pending:
        progressed = False
        for rank, prog in enumerate(programs):
            while len(starts[rank]) < len(prog):
                op = prog[len(starts[rank])]
                ready = _ready(op, rank, done_f, done_b, pipe, t_comm)
                if ready is None:
                    break
                start = max(free[rank], ready)
                free[rank] = start + op.duration
                starts[rank].append(start)
                if op.forward is not None:
                    done_f[op.forward] = free[rank]
                if op.backward is not None and op.kind != "W":
                    done_b[op.backward] = free[rank]
                pending -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"bug: the {pipe.schedule} program deadlocks at p={pipe.p}, m={pipe.m}, v={pipe.v}")
    return starts


def _ready(op: _Op, rank: int, done_f: dict[_Pass, float], done_b: dict[_Pass, float], pipe: _Pipe,
           t_comm: float) -> float | None:
    """When the inputs of `op` are on `rank`, or None while one is not computed yet. A W's only input is its
    own rank's B, which ran earlier in the program."""
    needs: list[tuple[dict[_Pass, float], _Pass]] = []
    if op.forward is not None and op.forward[1] > 0:
        mb, stage = op.forward
        needs.append((done_f, (mb, stage - 1)))
    if op.backward is not None and op.kind != "W":
        mb, stage = op.backward
        needs.append((done_b, (mb, stage + 1)) if stage + 1 < pipe.stages else (done_f, (mb, stage)))
    ready = 0.0
    for done, key in needs:
        if key not in done:
            return None
        hop = t_comm if pipe.place(*key)[0] != rank else 0.0
        ready = max(ready, done[key] + hop)
    return ready


def _blocks(prog: list[_Op], starts: list[float], pipe: _Pipe, makespan: float) -> tuple[Block, ...]:
    """A rank's blocks, idle gaps filled in; zero-length ops (W when t_w = 0) are left out."""
    out: list[Block] = []
    clock = 0.0
    for op, start in zip(prog, starts, strict=True):
        if op.duration == 0:
            continue
        if start > clock:
            out.append(Block(clock, start, "idle", -1, -1))
        labelled = op.forward if op.forward is not None else op.backward
        assert labelled is not None
        back = None
        if op.kind == "FB" and op.backward is not None:
            back = (op.backward[0], pipe.place(*op.backward)[1])
        out.append(Block(start, start + op.duration, op.kind, labelled[0], pipe.place(*labelled)[1], back))
        clock = start + op.duration
    if makespan > clock:
        out.append(Block(clock, makespan, "idle", -1, -1))
    return tuple(out)


def _peak_inflight(prog: list[_Op]) -> int:
    """Most chunk micro-batches a rank holds: one more at each forward's start, one fewer at each backward's
    end (a pair's forward allocates before its backward frees)."""
    held = peak = 0
    for op in prog:
        if op.forward is not None:
            held += 1
            peak = max(peak, held)
        if op.backward is not None and op.kind != "W":
            held -= 1
    return peak


# Two shades per kind, alternating by chunk, so the chunks of interleaved / DualPipe ranks stand apart.
_STYLES = {
    "F": ("bold white on blue", "bold black on bright_blue"),
    "B": ("bold black on green", "bold black on bright_green"),
    "W": ("bold black on yellow", "bold black on bright_yellow"),
    "FB": ("bold white on magenta", "bold black on bright_magenta"),
    "idle": ("grey50", "grey50"),
}
_LEGEND = (("F", " F ", "fwd"), ("B", " B ", "bwd"), ("W", " W ", "wgrad"), ("FB", "F&B", "pair"),
           ("idle", " · ", "idle"))
_LETTERS = {"F": "F", "B": "B", "W": "W", "FB": "P", "idle": "·"}
"""Without colour (a pipe, NO_COLOR) each block is filled with its kind's letter, lower case for a rank's
odd chunks (the second shade of the coloured chart)."""
MAX_BLOCKS = 32_768
"""Most operations (p · m · chunks) `simulate` is asked to lay out for a picture: about 3 s on 2 cores; the
terminal shows 80 columns, so a larger schedule draws no more than a smaller one would."""


def render(timeline: Timeline, width: int = 100, *, plain: bool = False, unit: str = "") -> Text:
    """The timeline as text `width` columns wide: one row per rank with time scaled to fit, micro-batch ids
    inside blocks wide enough for them (forward/backward ids for a pair), then a legend of the block kinds
    present and the bubble fraction. `plain`: blocks filled with letters for a reader without colour;
    `unit`: the unit of the simulated times, shown with the makespan."""
    label = len(f"rank {timeline.p - 1}")
    columns = max(width - label - 3, 1)
    scale = columns / timeline.makespan if timeline.makespan else 0.0
    text = Text(f"{timeline.schedule}  p={timeline.p}  m={timeline.m}"
                + (f"  v={timeline.v}" if timeline.schedule == "interleaved" else "")
                + f"  makespan {timeline.makespan:.4g}{' ' + unit if unit else ''}\n")
    for rank, blocks in enumerate(timeline.ranks):
        text.append(f"rank {rank}".rjust(label) + " │")
        for block in blocks:
            # Rounding both ends keeps adjacent blocks tiled exactly over the row.
            cols = round(block.end * scale) - round(block.start * scale)
            text.append(_cell(block, cols, plain), style=_STYLES[block.kind][block.chunk % 2])
        text.append("│\n")
    present = {block.kind for blocks in timeline.ranks for block in blocks}
    for kind, swatch, name in _LEGEND:
        if kind in present:
            text.append(_LETTERS[kind] if plain else swatch, style=_STYLES[kind][0])
            text.append(f" {name}  ")
    if plain and (timeline.v > 1 or timeline.schedule.startswith("dualpipe")):
        text.append("lower case: second chunk  ")
    text.append(f"bubble {timeline.bubble_fraction:.1%} of m·(t_f+t_b)")
    return text


def _cell(block: Block, cols: int, plain: bool = False) -> str:
    """`cols` characters for a block: its micro-batch id(s) centred when they fit, else fill (blank, or the
    block's letter when `plain`)."""
    if block.kind == "idle":
        return "·" * cols
    fill = _LETTERS[block.kind].lower() if block.chunk % 2 else _LETTERS[block.kind]
    tag = str(block.microbatch) if block.backward is None else f"{block.microbatch}/{block.backward[0]}"
    if not plain:
        return tag.center(cols) if len(tag) <= cols else " " * cols
    return tag.center(cols, fill) if len(tag) + 2 <= cols else fill * cols
