"""The pipeline-schedule simulator against the closed forms of formulas.md §5 / §3.5 and schedule.py."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from rich.console import Console

from parplan.errors import ParplanError
from parplan.planner.schedule import (
    S_1F1B,
    S_DUALPIPE,
    S_DUALPIPEV,
    S_INTERLEAVED,
    S_ZBH1,
    _assignment,
    bubble_time,
    chunk_inflight,
    chunks_per_rank,
    inflight_share,
)
from parplan.planner.timeline import Timeline, render, simulate

CODES = {"1f1b": S_1F1B, "interleaved": S_INTERLEAVED, "zb-h1": S_ZBH1, "dualpipe": S_DUALPIPE,
         "dualpipev": S_DUALPIPEV}

# Per-rank (t_f, t_b, t_w). ZB-H1's and DualPipe's closed forms assume the deferred W fits the slots it
# fills: T_W <= T_F = T_B(input) = t_b - t_w holds in all of these (the papers' figures use it too).
EQUAL_PASSES = [(1.0, 2.0, 1.0), (2.0, 3.0, 1.0), (1.0, 1.5, 0.5), (1.0, 1.0, 0.0)]


def _formulas_md(schedule: str, p: int, v: int, t_f: float, t_b: float, t_w: float) -> float:
    """formulas.md §5 in its sources' notation: ZB T_B is the input-gradient pass; DualPipe B is the full
    backward and F&B = F + B (the pair overlaps communication, not compute)."""
    big_f, big_b, big_w = t_f, t_b, t_w
    if schedule == "1f1b":
        return (p - 1) * (t_f + t_b)
    if schedule == "interleaved":
        return (p - 1) * (t_f + t_b) / v
    if schedule == "zb-h1":
        return (p - 1) * (t_f + (t_b - t_w) - t_w)
    if schedule == "dualpipev":
        # The DualPipe formula over 2p half-size stages.
        p, big_f, big_b, big_w = 2 * p, t_f / 2, t_b / 2, t_w / 2
    return (p / 2 - 1) * ((big_f + big_b) + big_b - 3 * big_w)


CASES = (
    [("1f1b", p, m, 1, t) for p in (1, 2, 4, 8) for m in (1, 3, 8, 16) for t in [(1.0, 2.0, 0.0), (1.5, 2.5, 0.0)]]
    + [("interleaved", p, m, v, (1.0, 2.0, 0.0)) for p in (2, 4, 8) for v in (2, 3, 4) for m in (p, 2 * p, 3 * p)]
    + [("zb-h1", p, m, 1, t) for p in (1, 2, 4, 8) for m in (p, 2 * p, 24) for t in EQUAL_PASSES]
    + [("dualpipe", p, m, 1, t) for p in (2, 4, 6, 8) for m in (2 * p, 2 * p + 2, 4 * p) for t in EQUAL_PASSES]
    + [("dualpipev", p, m, 1, t) for p in (1, 2, 3, 4, 8) for m in (2 * p, 2 * p + 1, 4 * p) for t in EQUAL_PASSES]
)


def _run(schedule: str, p: int, m: int, v: int, times: tuple[float, float, float]) -> Timeline:
    t_f, t_b, t_w = times
    return simulate(schedule, p, m, v=v, t_f=t_f, t_b=t_b, t_w=t_w)


@pytest.mark.parametrize(("schedule", "p", "m", "v", "times"), CASES)
def test_bubble_matches_formulas_md(schedule, p, m, v, times):
    timeline = _run(schedule, p, m, v, times)
    assert timeline.bubble == pytest.approx(_formulas_md(schedule, p, v, *times), abs=1e-9)


@pytest.mark.parametrize("schedule", list(CODES))
def test_schedule_py_bubble_is_formulas_md(schedule):
    """The cost model's closed forms (schedule.bubble_time) against formulas.md §5 directly."""
    cases = [c for c in CASES if c[0] == schedule]
    pp, vpp = np.array([c[1] for c in cases]), np.array([c[3] for c in cases])
    t_f, t_b, t_w = (np.array([c[4][i] for c in cases]) for i in range(3))
    closed = bubble_time(pp, vpp, np.full(len(cases), CODES[schedule]), t_f, t_b, t_w)
    np.testing.assert_allclose(closed, [_formulas_md(schedule, c[1], c[3], *c[4]) for c in cases], atol=1e-9)


@pytest.mark.parametrize("schedule", list(CODES))
def test_bubble_matches_schedule_py(schedule):
    cases = [c for c in CASES if c[0] == schedule]
    simulated = np.array([_run(*c).bubble for c in cases])
    pp, vpp = np.array([c[1] for c in cases]), np.array([c[3] for c in cases])
    t_f, t_b, t_w = (np.array([c[4][i] for c in cases]) for i in range(3))
    closed = bubble_time(pp, vpp, np.full(len(cases), CODES[schedule]), t_f, t_b, t_w)
    np.testing.assert_allclose(simulated, closed, atol=1e-9)


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("m", [8, 16, 32])
def test_zb_h1_fraction_with_equal_passes_is_a_third_of_1f1b(p, m):
    # t_f = T_B(input) = t_w: formulas.md's (p − 1)/(3m), against 1F1B's (p − 1)/m for the same work.
    zb = simulate("zb-h1", p, m, t_f=1.0, t_b=2.0, t_w=1.0)
    assert zb.bubble_fraction == pytest.approx((p - 1) / (3 * m))
    assert simulate("1f1b", p, m, t_f=1.0, t_b=2.0).bubble_fraction == pytest.approx((p - 1) / m)


@pytest.mark.parametrize("p", [4, 6, 8, 10])
@pytest.mark.parametrize(("t_f", "t_bi", "t_w"), [(2.0, 1.0, 1.0), (3.0, 2.0, 1.0), (3.0, 1.0, 0.5)])
def test_dualpipe_slower_forward_adds_its_excess_per_stage_pair(p, t_f, t_bi, t_w):
    # Outside the README's T_F = T_B(input) assumption the real step order gives
    # (p/2 − 1)(F&B + max(F, B − W) − 2W): each of the p/2 − 1 staggered slots waits for a forward.
    timeline = simulate("dualpipe", p, 3 * p, t_f=t_f, t_b=t_bi + t_w, t_w=t_w)
    readme = (p / 2 - 1) * (t_f + 2 * t_bi - t_w)
    assert timeline.bubble == pytest.approx(readme + (p / 2 - 1) * (t_f - t_bi))


INFLIGHT_CASES = (
    [("1f1b", p, m, 1) for p in (1, 2, 4, 8) for m in (1, 3, 8, 16)]
    + [("zb-h1", p, m, 1) for p in (2, 4, 8) for m in (p, 16)]
    + [("interleaved", p, m, v) for p in (2, 4, 8) for v in (2, 3) for m in (p, 2 * p, 3 * p)]
    + [("dualpipe", p, m, 1) for p in (2, 4, 8) for m in (2 * p, 4 * p)]
    + [("dualpipev", p, m, 1) for p in (1, 2, 4, 8) for m in (2 * p, 4 * p)]
)


@pytest.mark.parametrize(("schedule", "p", "m", "v"), INFLIGHT_CASES)
def test_peak_inflight_matches_schedule_py(schedule, p, m, v):
    """The replayed schedule's peak in flight per rank (in whole-rank units, chunks of equal size) is the sum
    of schedule.chunk_inflight over the rank's chunks, capped at m."""
    timeline = simulate(schedule, p, m, v=v, t_f=1.0, t_b=2.0, t_w=1.0 if schedule != "1f1b" else 0.0)
    chunks = v if schedule == "interleaved" else (2 if schedule.startswith("dualpipe") else 1)
    held = np.array([sum(chunk_inflight(r, p, chunks, CODES[schedule])) / chunks for r in range(p)])
    np.testing.assert_allclose(timeline.inflight, held * inflight_share(held, np.full(p, m)))


@pytest.mark.parametrize("schedule", CODES)
def test_chunks_per_rank_is_what_the_schedule_assigns(schedule):
    """The chunk count the memory model divides a backward's gradient copies by (estimate) is the number of
    virtual stages the schedule assigns each rank: DualPipeV's V holds two, as DualPipe's two directions do."""
    for p, v in ((2, 1), (4, 2), (8, 3)):
        v = v if schedule == "interleaved" else 1
        code = CODES[schedule]
        assert chunks_per_rank(np.array([code]), np.array([v]))[0] == len(_assignment(p, v, code)[0])


@pytest.mark.parametrize(("schedule", "p", "m", "v"),
                         [("1f1b", 4, 6, 1), ("interleaved", 4, 8, 2), ("interleaved", 4, 10, 3),
                          ("zb-h1", 4, 8, 1), ("dualpipe", 4, 8, 1), ("dualpipev", 3, 7, 1)])
def test_blocks_tile_each_rank_and_cover_all_work(schedule, p, m, v):
    timeline = simulate(schedule, p, m, v=v, t_f=1.0, t_b=2.0, t_w=0.5, t_comm=0.25)
    chunks = v if schedule == "interleaved" else (2 if schedule == "dualpipev" else 1)
    for blocks, busy in zip(timeline.ranks, timeline.busy, strict=True):
        assert blocks[0].start == 0 and blocks[-1].end == pytest.approx(timeline.makespan)
        assert all(a.end == pytest.approx(b.start) for a, b in itertools.pairwise(blocks))
        assert busy == pytest.approx(m * 3.0)
        passes = {kind: sum(b.kind == kind for b in blocks) for kind in ("F", "B", "FB")}
        # Each micro-batch passes every chunk it visits on a rank once forward and once backward.
        assert passes["F"] + passes["FB"] == m * chunks
        assert passes["B"] + passes["FB"] == m * chunks
    assert timeline.ideal == pytest.approx(m * 3.0)


def test_p2p_delay_stretches_the_pipeline():
    # One micro-batch on two ranks: F, hop, F, B, hop, B.
    timeline = simulate("1f1b", 2, 1, t_f=1.0, t_b=2.0, t_comm=0.5)
    assert timeline.makespan == pytest.approx(2 * 3.0 + 2 * 0.5)
    assert timeline.bubble == pytest.approx(3.0 + 2 * 0.5)
    for schedule, p, m, kwargs in [("interleaved", 4, 8, {"v": 2}), ("zb-h1", 4, 8, {"t_w": 1.0}),
                                   ("dualpipe", 4, 8, {"t_w": 1.0}), ("dualpipev", 2, 4, {"t_w": 1.0})]:
        assert simulate(schedule, p, m, t_comm=0.3, **kwargs).makespan > simulate(schedule, p, m, **kwargs).makespan


def test_interleaved_remainder_group_costs_extra_bubble():
    # m not a multiple of p: Megatron's last, smaller group leaves more idle time than (p − 1)(t_f + t_b)/v.
    assert simulate("interleaved", 4, 10, v=2).bubble > simulate("interleaved", 4, 12, v=2).bubble


@pytest.mark.parametrize("width", [80, 100, 120])
@pytest.mark.parametrize(("schedule", "p", "m", "v"),
                         [("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2), ("zb-h1", 8, 16, 1), ("dualpipe", 8, 16, 1),
                          ("dualpipev", 4, 64, 1)])
def test_render_fits_the_terminal_and_shows_every_rank(schedule, p, m, v, width):
    timeline = simulate(schedule, p, m, v=v, t_w=0.0 if schedule in ("1f1b", "interleaved") else 1.0)
    text = render(timeline, width=width)
    lines = text.plain.split("\n")
    assert all(len(line) <= width for line in lines)
    console = Console(width=width, record=True, color_system="truecolor")
    console.print(text)
    assert console.export_text().split("\n")[: len(lines)] == lines
    for rank in range(p):
        assert any(line.lstrip().startswith(f"rank {rank} │") for line in lines)
    assert f"bubble {timeline.bubble_fraction:.1%}" in lines[-1]
    assert "fwd" in lines[-1] and "bwd" in lines[-1]


def test_render_labels_blocks_with_their_microbatches():
    text = render(simulate("1f1b", 2, 4), width=100).plain
    row = next(line for line in text.splitlines() if line.startswith("rank 0"))
    assert [int(tok) for tok in row.replace("│", " ").replace("·", " ").split()[2:]] == [0, 1, 0, 2, 1, 3, 2, 3]


@pytest.mark.parametrize(("schedule", "p", "m", "kwargs"), [
    ("gpipe", 4, 8, {}),
    ("1f1b", 0, 8, {}),
    ("1f1b", 4, 8, {"v": 2}),
    ("interleaved", 4, 3, {"v": 2}),
    ("zb-h1", 4, 3, {}),
    ("dualpipe", 3, 12, {}),
    ("dualpipe", 4, 6, {}),
    ("dualpipe", 4, 9, {}),
    ("dualpipev", 4, 7, {}),
    ("zb-h1", 4, 8, {"t_b": 1.0, "t_w": 2.0}),
    ("1f1b", 4, 8, {"t_comm": -1.0}),
])
def test_rejects_layouts_the_real_schedules_refuse(schedule, p, m, kwargs):
    with pytest.raises(ParplanError):
        simulate(schedule, p, m, **kwargs)


def test_plain_render_fills_blocks_with_letters():
    """Without colour the blocks must still read: F, B, W, P (pair) letters, lower case for a second chunk."""
    text = render(simulate("1f1b", 2, 4, t_f=1.0, t_b=2.0), width=80, plain=True, unit="s").plain
    rows = [line for line in text.splitlines() if line.lstrip().startswith("rank")]
    assert all(set(row.split("│")[1]) <= set("FB·0123456789") for row in rows)
    assert "F" in rows[0] and "B" in rows[0]
    # 1F1B on 2 ranks and 4 micro-batches of t_f + t_b = 3: 4·3 + (2 − 1)·3 = 15 (formulas.md §5).
    assert "makespan 15 s" in text
    interleaved = render(simulate("interleaved", 2, 4, v=2), width=80, plain=True).plain
    assert "f" in interleaved and "lower case: second chunk" in interleaved


def test_explain_timeline_is_the_step_it_explains(run_cli):
    """The DualPipe chart replays one stage per micro-batch, as the cost model does: its makespan is a
    step's pipeline, so it cannot exceed the step time (it once drew twice the step)."""
    args = ("explain", "-m", "deepseek-v3", "-c", "h800", "-n", "2048", "--pp", "16", "--ep", "64", "--gbs",
            "15360", "--schedule", "dualpipe", "--precision", "fp8", "--stack", "deepseek", "--timeline")
    code, out, _ = run_cli(*args, "--json")
    doc = json.loads(out)
    assert code == 0 and 0 < doc["timeline"]["makespan_s"] <= doc["step_time_s"]
    code, out, _ = run_cli(*args)
    assert code == 0 and f"makespan {doc['timeline']['makespan_s']:.4g} s" in out


def test_timeline_refuses_schedules_too_long_to_draw(run_cli):
    # dp = 16 / 2 = 8, so 524,288 / 8 = 65,536 micro-batches on each of 2 ranks: 131,072 operations to lay out.
    code, _, err = run_cli("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--pp", "2", "--gbs", "524288",
                           "--timeline")
    assert code == 2 and "--timeline" in err
