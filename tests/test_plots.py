"""Pictures of a plan: the terminal memory bars and the matplotlib PNGs."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

import parplan
from parplan.errors import ParplanError
from parplan.planner.estimate import MEMORY_COMPONENTS, Estimate
from parplan.plots import memory_bars, plot_estimate, plot_scaling, stage_label
from parplan.stacks import load_stack


def _estimate(tp: int, pp: int) -> Estimate:
    return parplan.evaluate(parplan.load_model("llama3.1-70b"), parplan.load_cluster("h100", gpus=64),
                            parplan.Strategy(tp=tp, pp=pp, gbs=128, seq=4096))


@pytest.fixture(scope="module")
def est() -> Estimate:
    """Fits; three rank patterns: the embedding rank, two middle ranks, the head rank."""
    return _estimate(4, 4)


def _render(renderable: object, width: int, color: bool = True) -> list[str]:
    console = Console(record=True, width=width, color_system="truecolor" if color else None, file=io.StringIO())
    console.print(renderable)
    return console.export_text().splitlines()


def test_stage_labels_name_the_ranks_and_what_they_hold(est):
    # Llama 3.1 70B: 80 layers over pp=4, 20 per rank (hf_configs num_hidden_layers 80).
    assert [stage_label(st) for st in est.stages] == ["rank 0 (20 layers, emb)", "2 ranks (20 layers)",
                                                      "rank 3 (20 layers, head)"]
    single = {"first_rank": 0, "ranks": 1, "embedding": True, "head": True, "dense_layers": 1, "moe_layers": 0}
    assert stage_label(single) == "rank 0 (1 layer, emb, head)"


def test_dualpipe_labels_count_ranks_instead_of_inventing_ranges():
    """DualPipe rank r holds stages r and p − 1 − r, so ranks 0 and 15 share a pattern: a label 'ranks 0-1'
    would name a rank that holds something else."""
    est = parplan.evaluate(parplan.load_model("deepseek-v3"), parplan.load_cluster("h800", gpus=2048),
                           parplan.Strategy(pp=16, ep=64, gbs=15360, seq=4096, schedule="dualpipe", precision="fp8"),
                           stack=load_stack("deepseek"))  # the stack that runs DualPipe
    labels = [stage_label(st) for st in est.stages]
    assert sum(st["ranks"] for st in est.stages) == 16
    assert all("-" not in label for label in labels)
    assert labels[0].startswith("2 ranks (") and labels[0].endswith(", emb, head)")


def test_memory_bars_draw_one_line_per_stage_and_a_legend(est):
    lines = _render(memory_bars(est), 100)
    assert len(lines) == len(est.stages) + 1
    for line, stage in zip(lines[:-1], est.stages, strict=True):
        assert line.startswith(stage_label(stage))
        assert line.count("┃") == 1
        assert line.endswith(f"{stage['memory_total_gib']:.1f} GiB")
    assert all(comp in lines[-1] for comp in MEMORY_COMPONENTS)
    assert "capacity 80 GiB" in lines[-1]


@pytest.mark.parametrize("width", [80, 100, 120])
def test_memory_bars_fit_common_terminal_widths(est, width):
    lines = _render(memory_bars(est), width)
    assert len(lines) == len(est.stages) + 1  # nothing wrapped
    assert max(len(line) for line in lines) <= width


def test_memory_bars_scale_to_capacity_when_everything_fits(est):
    """All ranks fit, so the capacity mark closes every bar and the longest bar is the fullest rank."""
    bar_from = max(len(stage_label(st)) for st in est.stages) + 1
    bars = [line[bar_from:] for line in _render(memory_bars(est, width=60), 120)[:-1]]
    assert all(bar.index("┃") == 60 for bar in bars)
    filled = [60 - bar[:60].count("·") for bar in bars]
    assert filled == sorted(filled, reverse=True)  # totals 59.1 > 51.7 > 44.2 GiB
    assert filled[0] == round(60 * est.stages[0]["memory_total_gib"] / est.capacity_gib)


def test_memory_bars_show_ranks_past_capacity():
    over = _estimate(2, 2)
    assert max(st["memory_total_gib"] for st in over.stages) > over.capacity_gib
    for line in _render(memory_bars(over), 100, color=False)[:-1]:
        after_mark = line.split("┃")[1]
        assert after_mark.lstrip(" ·")[0] in "wgoab"  # the bar goes on past the capacity mark


def test_memory_bars_use_letters_without_colour(est):
    lines = _render(memory_bars(est), 100, color=False)
    assert "█" not in "".join(lines)
    assert "w weights" in lines[-1] and "a activations" in lines[-1]
    assert "█" in "".join(_render(memory_bars(est), 100))


def test_plot_estimate_writes_a_png(est, tmp_path, assert_png):
    plt = pytest.importorskip("matplotlib.pyplot")
    path = tmp_path / "estimate.png"
    plot_estimate(est, str(path))
    assert_png(path)
    assert plt.get_fignums() == []  # no figure left open


def test_plot_scaling_writes_a_png(tmp_path, assert_png):
    plt = pytest.importorskip("matplotlib.pyplot")
    rows = []
    for gpus in (8, 16, 32, 64, 128):
        per_gpu = 1200.0 * 0.97 ** (gpus // 8)
        speedup = gpus * per_gpu / (8 * 1200.0 * 0.97)
        rows.append({"gpus": gpus, "tokens_per_s": gpus * per_gpu, "tokens_per_s_per_gpu": per_gpu,
                     "speedup": speedup, "ideal": gpus / 8, "efficiency": speedup / (gpus / 8)})
    path = tmp_path / "scaling.png"
    plot_scaling(rows, str(path), "llama3.1-70b on h100: best layout per size")
    assert_png(path)
    assert plt.get_fignums() == []


def test_plots_without_matplotlib_say_how_to_install_it(est, tmp_path, monkeypatch):
    # A None entry makes the import raise ImportError, even if an earlier test imported the real module.
    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ParplanError, match=r"parplan\[plot\]"):
        plot_estimate(est, str(tmp_path / "x.png"))
