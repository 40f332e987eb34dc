"""Pictures of a plan: a memory bar chart for the terminal and matplotlib figures for reports.

`memory_bars` draws, with rich, one stacked bar per distinct pipeline-rank pattern against the GPU's
capacity. `plot_estimate` saves the time and memory breakdown of one layout as a PNG; `plot_scaling`
saves the speedup and scaling efficiency of a range of cluster sizes. matplotlib is an optional
dependency (the `plot` extra), imported only when a figure is drawn so that the CLI starts without it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions
from rich.text import Text

from parplan._input import atomic_output, check_output
from parplan.errors import ConfigError, ParplanError
from parplan.planner.estimate import MEMORY_COMPONENTS, TIME_COMPONENTS, Estimate

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS = {
    "weights": "#4c72b0",
    "gradients": "#dd8452",
    "optimizer": "#55a868",
    "activations": "#c44e52",
    "buffers": "#8172b3",
}
"""One colour per memory component, shared by the terminal bars and the figures so they read alike."""

_PLAIN_GLYPHS = {c: c[0] for c in MEMORY_COMPONENTS}
"""Without colour (NO_COLOR, a dumb terminal) the segments are told apart by their initial letter."""

_CAPACITY_MARK = "┃"
_DPI = 120  # about 1700 px wide at the figure sizes used: sharp on screen, small files


def stage_label(stage: dict[str, Any]) -> str:
    """'rank 0 (20 layers, emb)', '2 ranks (20 layers)': how many pipeline ranks share a pattern and what each
    holds. Not a range of rank numbers: the ranks of a pattern need not be neighbours (DualPipe pairs rank r
    with rank p − 1 − r)."""
    count = int(stage["ranks"])
    layers = int(stage["dense_layers"]) + int(stage["moe_layers"])
    held = [f"{layers} layer{'' if layers == 1 else 's'}"]
    held += [name for name, key in (("emb", "embedding"), ("head", "head")) if stage[key]]
    who = f"rank {int(stage['first_rank'])}" if count == 1 else f"{count} ranks"
    return f"{who} ({', '.join(held)})"


def _cells(stage: dict[str, Any], gib_per_cell: float) -> list[tuple[str, int]]:
    """(component, cells) along one bar. Cumulative ends are rounded, not each segment, so that rounding
    errors do not add up and equal totals give equal bar lengths."""
    cells, end, done = [], 0.0, 0
    for comp in MEMORY_COMPONENTS:
        end += float(stage["memory_gib"][comp])
        upto = round(end / gib_per_cell)
        cells.append((comp, upto - done))
        done = upto
    return cells


class MemoryBars:
    """Rich renderable: one stacked memory bar per pipeline-rank pattern, a capacity mark, a legend.

    The bar is at most `width` cells and shrinks to fit narrower consoles; its scale is the larger of the
    capacity and the fullest rank, so a rank that does not fit runs visibly past the mark.
    """

    def __init__(self, est: Estimate, width: int = 60) -> None:
        self.est = est
        self.width = width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        est = self.est
        labels = [stage_label(st) for st in est.stages]
        totals = [f"{float(st['memory_total_gib']):.1f} GiB" for st in est.stages]
        label_w = max(len(s) for s in labels)
        total_w = max(len(s) for s in totals)
        # label, space, bar, capacity mark, space, total
        width = max(10, min(self.width, options.max_width - label_w - total_w - 3))
        plain = console.color_system is None
        scale = max(est.capacity_gib, *(float(st["memory_total_gib"]) for st in est.stages))
        gib_per_cell = scale / width
        mark_at = round(est.capacity_gib / gib_per_cell)
        for stage, label, total in zip(est.stages, labels, totals, strict=True):
            line = Text(label.ljust(label_w) + " ")
            bar = Text()
            for comp, n in _cells(stage, gib_per_cell):
                bar.append((_PLAIN_GLYPHS[comp] if plain else "█") * n, style=COLORS[comp])
            bar.append("·" * (width - len(bar)), style="dim")
            # The mark sits between cells rather than over one, so no segment loses a cell to it.
            line.append_text(bar[:mark_at])
            line.append(_CAPACITY_MARK, style="bold")
            line.append_text(bar[mark_at:])
            over = float(stage["memory_total_gib"]) > est.capacity_gib
            line.append(" " + total.rjust(total_w), style="bold red" if over else "")
            yield line
        legend = Text()
        for comp in MEMORY_COMPONENTS:
            legend.append(_PLAIN_GLYPHS[comp] if plain else "█", style=COLORS[comp])
            legend.append(f" {comp}  ")
        legend.append(f"{_CAPACITY_MARK} capacity {est.capacity_gib:g} GiB", style="bold")
        # Under the bars when it fits on one line; flush left rather than wrapped in narrow consoles.
        if label_w + 1 + len(legend) <= options.max_width:
            legend = Text(" " * (label_w + 1)) + legend
        yield legend


def memory_bars(est: Estimate, width: int = 60) -> MemoryBars:
    """Terminal picture of the memory per pipeline-rank pattern (print it with a rich Console)."""
    return MemoryBars(est, width)


PLOT_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
"""Chart file suffixes and the matplotlib format each is written in; a name without a suffix is a PNG."""


def check_plot_path(path: str) -> str:
    """Refuse, before any work, a chart path parplan could not write: matplotlib missing, a suffix that is
    not a chart format (.docx), or an output `_input.check_output` refuses (a directory, a missing or
    read-only folder). Returns the path."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ParplanError("plots need matplotlib; install the plot extra: pip install 'parplan[plot]'")
    suffix = Path(path).suffix.lower()
    if suffix and suffix not in PLOT_FORMATS:
        raise ConfigError(f"cannot write a chart as '{suffix}'; use {', '.join(PLOT_FORMATS)}", file=path)
    check_output(path)
    return path


def _save(fig: Figure, path: str) -> None:
    """Write the figure to exactly `path` (atomically), in the format its suffix names (PNG without one)."""
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=PLOT_FORMATS.get(Path(path).suffix.lower(), "png"), dpi=_DPI)


def _figure(figsize: tuple[float, float]) -> Figure:
    """A bare matplotlib Figure, or a ParplanError saying how to install matplotlib.

    The Figure is built without pyplot: it renders PNGs on the Agg canvas, needs no display, does not
    switch the backend of a notebook that imported us, and is not kept alive by pyplot's figure registry,
    so nothing needs closing.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ParplanError("plots need matplotlib; install the plot extra: pip install 'parplan[plot]'") from exc
    return Figure(figsize=figsize, layout="constrained")


def _time_panel(ax: Axes, est: Estimate) -> None:
    """Seconds per step by component: the exposed part (what the step waits for) solid, the part hidden
    behind compute hatched after it."""
    rows = [(c, est.time_breakdown[c]) for c in TIME_COMPONENTS
            if est.time_breakdown[c]["exposed"] > 0 or est.time_breakdown[c]["overlapped"] > 0]
    names = [c.replace("_", " ") for c, _ in rows]
    exposed = [t["exposed"] for _, t in rows]
    overlapped = [t["overlapped"] for _, t in rows]
    ax.barh(names, exposed, color="#4c72b0", label="exposed (on the critical path)")
    ax.barh(names, overlapped, left=exposed, color="#a1c9f4", hatch="//", edgecolor="#4c72b0", linewidth=0,
            label="overlapped (hidden behind compute)")
    for y, (exp, ovl) in enumerate(zip(exposed, overlapped, strict=True)):
        share = exp / est.step_time_s
        text = f" {exp:.3g} s ({share:.0%})" if share >= 0.005 else f" {exp:.3g} s (<1%)"
        if ovl > 0:
            text += f" + {ovl:.3g} s hidden"
        ax.text(exp + ovl, y, text, va="center", fontsize=9)
    ax.invert_yaxis()  # TIME_COMPONENTS order, compute first, reads top-down
    ax.set_xlim(0, max(e + o for e, o in zip(exposed, overlapped, strict=True)) * 1.35)  # room for the labels
    ax.set_xlabel(f"seconds per step (step time {est.step_time_s:.3g} s)")
    ax.set_title("Time per step by component")
    ax.legend(loc="best", fontsize=9)
    ax.grid(axis="x", alpha=0.3)


def _memory_panel(ax: Axes, est: Estimate) -> None:
    """Memory of each pipeline-rank pattern, stacked by component, against the GPU's capacity."""
    labels = [stage_label(st).replace(" (", "\n(") for st in est.stages]
    bottom = [0.0] * len(est.stages)
    for comp in MEMORY_COMPONENTS:
        values = [float(st["memory_gib"][comp]) for st in est.stages]
        ax.bar(labels, values, bottom=bottom, color=COLORS[comp], label=comp, width=0.6)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, total in enumerate(bottom):
        ax.text(x, total, f"{total:.1f}", ha="center", va="bottom", fontsize=9)
    ax.axhline(est.capacity_gib, color="black", linestyle="--", linewidth=1.2,
               label=f"capacity {est.capacity_gib:g} GiB")
    ax.set_ylim(0, max(est.capacity_gib, *bottom) * 1.3)  # headroom above the line for the legend
    ax.set_ylabel("GiB per GPU (peak allocated)")
    ax.set_title("Memory per pipeline rank")
    ax.legend(loc="upper center", ncols=3, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def plot_estimate(est: Estimate, path: str) -> None:
    """Chart (PNG, SVG or PDF by suffix) of one layout: time per step by component (left) and memory per
    pipeline rank (right)."""
    fig = _figure((14, 6))
    ax_time, ax_mem = fig.subplots(1, 2, width_ratios=(1.3, 1))
    fig.suptitle(f"{est.model} on {est.gpus}× {est.cluster}: {est.strategy.describe(est.gpus)}\n"
                 f"{est.step_time_s:.3g} s/step, {est.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU {est.mfu:.1%}, "
                 f"{est.required_gib:.1f} of {est.capacity_gib:g} GiB needed", fontsize=12,
                 parse_math=False)  # names come from files: a '$' in one is text, not TeX
    _time_panel(ax_time, est)
    _memory_panel(ax_mem, est)
    _save(fig, path)


def _gpu_axis(ax: Axes, gpus: list[float]) -> None:
    """Log2 GPU axis ticked at the sizes measured: sizes usually double, so they sit evenly spaced."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus, [f"{g:g}" for g in gpus])
    ax.minorticks_off()
    ax.set_xlabel("GPUs")
    ax.grid(alpha=0.3)


def plot_scaling(rows: list[dict[str, float]], path: str, title: str) -> None:
    """Chart (PNG, SVG or PDF by suffix) of how a run scales over cluster sizes: speedup against the ideal
    (left), efficiency (right).

    Each row has gpus, tokens_per_s, tokens_per_s_per_gpu, speedup, ideal (the linear speedup) and
    efficiency (speedup / ideal as a fraction; plotted in %).
    """
    fig = _figure((13, 5.5))
    from matplotlib.ticker import FuncFormatter  # importable: _figure found matplotlib

    rows = sorted(rows, key=lambda r: r["gpus"])
    gpus = [r["gpus"] for r in rows]
    speedup = [r["speedup"] for r in rows]
    efficiency = [100 * r["efficiency"] for r in rows]
    ax_speed, ax_eff = fig.subplots(1, 2)
    fig.suptitle(title, fontsize=12, parse_math=False)  # names come from files: a '$' is text, not TeX

    ax_speed.plot(gpus, [r["ideal"] for r in rows], "--", color="grey", label="ideal (linear)")
    ax_speed.plot(gpus, speedup, "o-", color="#4c72b0", label="predicted (points labelled in tokens/s)")
    for r in rows:
        ax_speed.annotate(f"{r['tokens_per_s']:,.0f}", (r["gpus"], r["speedup"]), textcoords="offset points",
                          xytext=(6, -12), fontsize=8)
    _gpu_axis(ax_speed, gpus)
    # Log2 on both axes draws a linear speedup as a straight diagonal.
    ax_speed.set_yscale("log", base=2)
    ax_speed.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    base = next((r["gpus"] for r in rows if r["ideal"] == 1), None)
    ax_speed.set_ylabel(f"speedup over {base:g} GPUs (×)" if base else "speedup (×)")
    ax_speed.set_title("Speedup")
    ax_speed.legend(loc="upper left", fontsize=9)

    ax_eff.plot(gpus, efficiency, "o-", color="#4c72b0", label="predicted")
    for g, e in zip(gpus, efficiency, strict=True):
        ax_eff.annotate(f"{e:.0f}%", (g, e), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    for y, style in ((90, "--"), (70, ":")):
        ax_eff.axhline(y, color="grey", linestyle=style, linewidth=1, label=f"{y}%")
    _gpu_axis(ax_eff, gpus)
    ax_eff.set_ylim(0, max(110, *(e + 10 for e in efficiency)))
    ax_eff.set_ylabel("scaling efficiency (%)")
    ax_eff.set_title("Scaling efficiency (speedup / ideal)")
    ax_eff.legend(loc="lower left", fontsize=9)
    _save(fig, path)
