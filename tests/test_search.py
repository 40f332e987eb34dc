"""`plan`: exhaustive over the space (checked against brute force), constraints honoured, infeasibility."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re

import pytest
from conftest import ANY_STACK

from parplan import load_cluster, load_model
from parplan.cli.explain import explain_args
from parplan.errors import InvalidStrategyError, NoFeasiblePlanError
from parplan.planner import Strategy, evaluate
from parplan.planner.api import plan as plan_api
from parplan.planner.api import space_from_options
from parplan.planner.search import SearchSpace, enumerate_layouts, levers, plan, plan_or_raise
from parplan.planner.strategy import SCHEDULES
from parplan.stacks import load_stack
from parplan.stacks.presets import EXPANDABLE_SEGMENTS


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def brute_force(model, cluster, gbs, seq, space: SearchSpace):
    """Every combination of the space's values, checked and evaluated one by one with `evaluate` (as a stack
    that runs every valid layout)."""
    g = cluster.gpus
    best = None
    count = 0
    values = {
        "tp": space.tp or _divisors(g), "pp": space.pp or _divisors(g), "cp": space.cp or _divisors(g),
        "ep": space.ep or (_divisors(model.moe.experts) if model.moe else [1]),
        "etp": space.etp or _divisors(model.moe.expert_ffn if model.moe else 1),
        "vpp": space.vpp or range(1, model.layers + 1), "zero": space.zero,
        "sp": space.sp, "recompute": space.recompute, "mbs": space.mbs or _divisors(gbs), "schedule": space.schedule,
        "precision": space.precision, "tp_overlap": space.tp_overlap,
        "dispatch": space.dispatch if model.moe else ("alltoall",),
        "redundant_experts": space.redundant_experts if model.moe else (0,),
        "ep_overlap": space.ep_overlap if model.moe else (False,),
    }
    seen = set()
    for combo in itertools.product(*values.values()):
        kw = dict(zip(values, combo, strict=True))
        s = Strategy(**kw, gbs=gbs, seq=seq)
        if s in seen:  # sp / tp_overlap normalise at tp=1
            continue
        seen.add(s)
        try:
            s.check(model, cluster)
        except InvalidStrategyError:
            continue
        count += 1
        est = evaluate(model, cluster, s, stack=ANY_STACK)
        if est.required_gib <= cluster.gpu.hbm_gib * space.max_memory_fraction and (
                best is None or est.tokens_per_s_per_gpu > best.tokens_per_s_per_gpu + 1e-9):
            best = est
    return best, count


SMALL = SearchSpace(tp=(1, 2, 4), pp=(1, 2, 4), cp=(1, 2), zero=(0, 3), recompute=("none", "full"),
                    schedule=("1f1b", "interleaved", "zb-h1"), vpp=(1, 2), mbs=(1, 4), tp_overlap=(False,))


@pytest.mark.parametrize(("name", "gpus", "gbs", "seq"), [("qwen3-0.6b", 8, 32, 2048), ("llama3.1-8b", 16, 64, 4096)])
def test_plan_is_exhaustive_against_brute_force(name, gpus, gbs, seq):
    """Same number of valid layouts, same best layout and the same predicted time as a scalar brute force, with
    most layouts skipped by the search's bounds rather than costed."""
    model, cluster = load_model(name), load_cluster("h100", gpus=gpus)
    best, count = brute_force(model, cluster, gbs, seq, SMALL)
    result = plan(model, cluster, gbs=gbs, seq=seq, space=SMALL, top=3, stack=load_stack(ANY_STACK))
    assert result.evaluated == count
    assert result.skipped > 0  # the bounds proved blocks slower: the pruned path is what is checked
    assert result.plans[0].tokens_per_s_per_gpu == pytest.approx(best.tokens_per_s_per_gpu, rel=1e-12)
    assert result.plans[0].step_time_s == pytest.approx(best.step_time_s, rel=1e-12)


def test_moe_space_against_brute_force():
    model, cluster = load_model("qwen1.5-moe-a2.7b"), load_cluster("h100", gpus=16)
    space = SearchSpace(tp=(1, 2), pp=(1, 2), cp=(1,), ep=(1, 2, 4), etp=(1, 2), zero=(1,), recompute=("none",),
                        schedule=("1f1b", "dualpipe", "interleaved"), vpp=(1, 2), mbs=(1, 2))
    best, count = brute_force(model, cluster, 64, 4096, space)
    result = plan(model, cluster, gbs=64, seq=4096, space=space, stack=load_stack(ANY_STACK))
    assert result.evaluated == count and result.skipped > 0
    assert result.plans[0].step_time_s == pytest.approx(best.step_time_s, rel=1e-12)


def test_one_chunk_or_many_gives_the_same_answer():
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=64)
    a = plan(model, cluster, gbs=256, seq=4096, top=5)
    b = plan(model, cluster, gbs=256, seq=4096, top=5, chunk=997)
    assert a.evaluated == b.evaluated and a.feasible == b.feasible
    assert [p.strategy for p in a.plans] == [p.strategy for p in b.plans]


def test_returned_layouts_are_valid_and_fit():
    model, cluster = load_model("mixtral-8x7b"), load_cluster("h100", gpus=64)
    result = plan(model, cluster, gbs=256, seq=4096, top=5)
    assert result.plans
    for est in result.plans:
        est.strategy.check(model, cluster)
        assert est.fits and est.required_gib <= cluster.gpu.hbm_gib


def test_fixed_and_bounded_dimensions_are_honoured():
    model, cluster = load_model("llama3.1-70b"), load_cluster("h100", gpus=64)
    space = space_from_options(tp=8, pp="1..4", zero="1,3", schedule="1f1b,interleaved")
    for lay in enumerate_layouts(model, cluster, 128, 4096, space):
        assert set(lay.tp) == {8} and set(lay.pp) <= {1, 2, 4} and set(lay.zero) <= {1, 3}
        assert set(lay.schedule) <= {SCHEDULES.index("1f1b"), SCHEDULES.index("interleaved")}
    plans = plan_api("llama3.1-70b", "h100", gpus=64, gbs=128, max_tp=4, top=3)
    assert all(p.strategy.tp <= 4 for p in plans)


def test_memory_fraction_is_honoured():
    model, cluster = load_model("llama3.1-70b"), load_cluster("h100", gpus=64)
    result = plan(model, cluster, gbs=128, seq=4096, space=SearchSpace(max_memory_fraction=0.6), top=3)
    assert all(p.required_gib <= 0.6 * 80 for p in result.plans)


def test_memory_objective_prefers_headroom_within_slack():
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=16)
    fast = plan(model, cluster, gbs=64, seq=4096, top=1).plans[0]
    roomy = plan(model, cluster, gbs=64, seq=4096, top=1, objective="memory", within=0.05).plans[0]
    assert roomy.tokens_per_s_per_gpu >= 0.95 * fast.tokens_per_s_per_gpu
    assert roomy.required_gib <= fast.required_gib


def test_no_feasible_plan_reports_minimum_and_levers():
    """405B cannot fit on 8 GPUs; the message states the least memory any layout needs and computes levers."""
    model, cluster = load_model("llama3.1-405b"), load_cluster("h100", gpus=8)
    space = SearchSpace(zero=(0, 1), recompute=("none", "selective"), pp=(1, 2, 4, 8))
    with pytest.raises(NoFeasiblePlanError) as e:
        plan_or_raise(model, cluster, gbs=8, seq=4096, space=space)
    msg = str(e.value)
    assert "the least any" in msg and "GiB" in msg
    for lever in ("ZeRO-3", "full recompute", "2× the GPUs", "expandable_segments:True"):
        assert lever in msg
    assert e.value.exit_code == 3


def test_the_no_fit_message_lists_only_the_levers_that_lower_the_need():
    """Every lever the message offers needs less than the base layout; the others are named as not lowering it.
    405B at 8K on 64 H100s: the leanest layout (tp 8 · pp 8, full recompute, dp 1) gains nothing from fp8, whose
    bf16 master weights and fp32 gradients stay, so fp8 must not be offered as a way in."""
    model, cluster = load_model("llama3.1-405b"), load_cluster("h100", gpus=64)
    with pytest.raises(NoFeasiblePlanError) as e:
        plan_or_raise(model, cluster, gbs=64, seq=8192)
    msg = str(e.value)
    need = float(re.search(r"needs is ([0-9.]+) GiB", msg).group(1))
    offered = [float(gib) for gib in re.findall(r"([0-9.]+) GiB", msg.split("each lever:")[1])]
    assert offered and all(gib < need for gib in offered)
    # Every lever is named once: among those offered, with its need, or in the closing "would not lower it" list.
    offered_text, idle_clause = msg.split("each lever: ")[1].rsplit(" (", 1)
    idle = idle_clause.removesuffix(" would not lower it).").split(", ")
    assert "fp8" in idle
    for name in levers(model, cluster, gbs=64, seq=8192, space=SearchSpace()):
        assert (f"{name}: " in offered_text) != (name in idle), name


def test_a_lever_needs_the_least_memory_the_search_with_it_finds():
    """A lever's figure is the least memory the search finds with that lever opened: 2× the GPUs for Qwen3-30B-A3B
    (MoE) on 16 H100s is the least need of the search on 32. An MoE layout's device memory holds its dispatcher's
    buffers (DeepEP's or all-to-all's), which the search costs per setting of the time-only fields; the lever must
    too, or it names a need no layout has."""
    model, space = load_model("qwen3-30b-a3b"), SearchSpace(max_memory_fraction=0.05)
    doubled = levers(model, load_cluster("h100", gpus=16), gbs=64, seq=4096, space=space)["2× the GPUs (32)"]
    searched = plan(model, load_cluster("h100", gpus=32), gbs=64, seq=4096, space=space).least_memory
    assert doubled == pytest.approx(searched.required_gib, rel=1e-12)


def test_the_allocator_lever_only_where_the_allocator_caches():
    """Expandable segments is a lever of stacks on PyTorch's default caching allocator, not of torchtitan, whose
    run_train.sh already launches with it; it never needs more memory than the layouts need without it."""
    model, cluster = load_model("llama3.1-405b"), load_cluster("h100", gpus=8)
    space = SearchSpace(zero=(0, 1), recompute=("none",), pp=(1, 2, 4, 8), tp=(8,))
    caching = levers(model, cluster, gbs=8, seq=4096, space=space)
    base = plan(model, cluster, gbs=8, seq=4096, space=space).least_memory.required_gib
    assert caching[EXPANDABLE_SEGMENTS] < base
    titan = levers(model, cluster, gbs=8, seq=4096, space=space, stack=load_stack("torchtitan"))
    assert EXPANDABLE_SEGMENTS not in titan


def test_cli_plan_json(run_json):
    doc = run_json("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--gbs", "64", "--seq", "4096", "--top", "2")
    assert doc["evaluated"] >= doc["feasible"] > 0 and "search_seconds" in doc
    assert len(doc["plans"]) == 2
    for key in ("strategy", "step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib"):
        assert key in doc["plans"][0]


def test_cli_plan_human_has_reason_and_command(run_cli):
    code, out, _ = run_cli("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--gbs", "64", "--tp", "1,2,4")
    assert code == 0 and "parplan explain --model llama3.1-8b" in out
    assert "faster than the runner-up" in out or "tie within" in out


def test_cli_plan_infeasible_exit_3(run_cli):
    code, _, err = run_cli("plan", "-m", "llama3.1-405b", "-c", "h100", "-n", "8", "--gbs", "8", "--pp", "1,2",
                           "--zero", "0,1", "--recompute", "none")
    assert code == 3 and "least" in err and "Traceback" not in err


def test_cli_plan_sizes_and_deadline(run_json):
    doc = run_json("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8..32", "--gbs", "64", "--tokens", "1e11",
                   "--days", "8", "--tp", "1,2", "--pp", "1,2")
    assert [s["gpus"] for s in doc["sizes"]] == [8, 16, 32]
    days = {s["gpus"]: 1e11 / (s["plans"][0]["tokens_per_s"]) / 86400 for s in doc["sizes"]}
    # A deadline the smallest size misses, so the choice is the smallest size that meets it.
    assert days[8] > 8 and min(days.values()) <= 8
    assert doc["recommended_gpus"] == min(g for g, d in days.items() if d <= 8)


def test_cli_plan_usage_errors(run_cli):
    assert run_cli("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "x", "--gbs", "8")[0] == 2
    assert run_cli("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "8", "--objective", "speed")[0] == 2
    code, _, err = run_cli("plan", "-m", "llama3.1-8b", "-c", "a100-80gb", "-n", "8", "--gbs", "8",
                           "--precision", "fp8")
    assert code == 1 and "fp8" in err


def test_cli_plan_precision_list_drops_what_the_gpu_lacks(run_json):
    """bf16,fp8 on an A100 (no fp8 tensor cores): the fp8 layouts fail the fp8_supported rule, bf16 remains."""
    doc = run_json("plan", "-m", "llama3.1-8b", "-c", "a100-80gb", "-n", "8", "--gbs", "32", "--precision",
                   "bf16,fp8")
    assert {p["strategy"]["precision"] for p in doc["plans"]} == {"bf16"}


def test_validate_rank_places_the_published_layout(run_cli):
    """validate --rank: the rank counts the fitting layouts predicted faster than the published one, so rank 1
    means the planner's best is no faster, and a higher rank means a positive gap."""
    from parplan.planner.validate import load_runs, rank_runs, validate_runs

    runs = [r for r in load_runs() if r.id == "mcore_h100_weak_1p7b"]
    (k,) = rank_runs(validate_runs(runs))
    assert k.rank is not None and k.rank >= 1 and k.searched > 0
    assert k.gap >= -1e-9
    assert (k.rank == 1) == (k.gap <= 1e-9)
    code, out, err = run_cli("validate", "--group", "megatron_sc21_ptdp", "--rank", "--json")
    assert code == 0, err
    rows = json.loads(out)["runs"]
    assert rows and all(r["rank"] is None or r["rank"] >= 1 for r in rows)


def test_scatter_gather_space_marks_exactly_the_layouts_strategy_keeps_it_for():
    """With pp_scatter_gather (DeepSpeed's pipeline engine), the search sets the flag exactly where
    Strategy's normalisation keeps it (no SP, tp > 1, pp > 1), so vector and scalar layouts agree."""
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=16)
    space = SearchSpace(tp=(1, 2), pp=(1, 2), cp=(1,), zero=(0,), recompute=("none",), schedule=("1f1b",),
                        mbs=(1,), tp_overlap=(False,), pp_scatter_gather=True)
    marked = 0
    for lay in enumerate_layouts(model, cluster, 16, 2048, space):
        for i in range(len(lay)):
            s = lay.strategy(i)
            assert bool(lay.pp_scatter_gather[i]) == s.pp_scatter_gather == (s.tp > 1 and s.pp > 1 and not s.sp)
            marked += s.pp_scatter_gather
    assert marked > 0


def test_cli_plan_for_deepspeed_costs_partitioned_stage_tensors(run_json):
    doc = run_json("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--gbs", "16", "--seq", "2048",
                   "--tp", "2", "--pp", "2", "--sp", "off", "--framework", "deepspeed", "--top", "1")
    assert doc["plans"][0]["strategy"]["pp_scatter_gather"]


@pytest.mark.parametrize(("model", "gpus", "s"), [
    ("llama3.1-8b", 32, Strategy(tp=2, pp=2, sp=False, pp_scatter_gather=True, zero=0, recompute="blocks:1/4", mbs=2,
                                 gbs=16, seq=2048, schedule="zb-h1", flash_attention=False)),
    ("llama3.1-8b", 32, Strategy(tp=4, pp=2, vpp=2, cp=2, schedule="interleaved", p2p_overlap=False, tp_overlap=True,
                                 zero=2, gbs=8, seq=4096, recompute="selective")),
    ("qwen3-30b-a3b", 8, Strategy(tp=2, ep=4, dispatch="deepep", ep_overlap=True, redundant_experts=4, gbs=8,
                                  seq=4096)),
])
def test_explain_args_reproduce_every_strategy_field(run_json, model, gpus, s):
    """The command plan prints to inspect a layout gives explain that very layout, field by field."""
    doc = run_json("explain", "-m", model, "-c", "h100", "-n", str(gpus), *explain_args(s), "--stack", ANY_STACK)
    assert {k: v for k, v in doc["strategy"].items() if k not in ("dp", "microbatches")} == dataclasses.asdict(s)


# ------------------------------------------------------------------------------- bounded work (issue #16)

def test_cli_time_limit_marks_the_plan_incomplete(run_json, run_cli):
    doc = run_json("plan", "-m", "llama3.1-70b", "-c", "h100", "-n", "512", "--gbs", "512", "--time-limit", "1e-9")
    assert doc["plans"] and doc["complete"] is False and doc["layouts_left"] > 0
    code, out, _ = run_cli("plan", "-m", "llama3.1-70b", "-c", "h100", "-n", "512", "--gbs", "512",
                           "--time-limit", "1e-9")
    assert code == 0 and "Incomplete" in out and "layouts left" in out
    done = run_json("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "8", "--time-limit", "600")
    assert done["complete"] is True and done["layouts_left"] == 0
    for bad in ("0", "-1", "nan", "inf"):
        assert run_cli("plan", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "8", "--time-limit", bad)[0] == 2


def test_searches_stop_at_the_default_limit_without_one(run_json, monkeypatch):
    """Without --time-limit, plan, scale and validate --rank stop at SEARCH_TIME_LIMIT_S (50 s) with the best
    found so far: no search runs unbounded (issue #16). The limit is shrunk here to see it act."""
    from parplan.cli import _options

    monkeypatch.setattr(_options, "SEARCH_TIME_LIMIT_S", 1e-9)
    doc = run_json("plan", "-m", "llama3.1-70b", "-c", "h100", "-n", "512", "--gbs", "512")
    assert doc["plans"] and doc["complete"] is False and doc["layouts_left"] > 0
    assert run_json("scale", "-m", "llama3.1-70b", "-c", "h100", "-n", "256..512", "--gbs", "512")["complete"] is False
    ranks = run_json("validate", "--group", "megatron_sc21_ptdp", "--rank")["runs"]
    assert ranks and any(not r["complete"] for r in ranks)


def test_cli_scale_and_rank_take_a_time_limit(run_json):
    doc = run_json("scale", "-m", "llama3.1-70b", "-c", "h100", "-n", "256..512", "--gbs", "512",
                   "--time-limit", "1e-9")
    assert doc["complete"] is False and all(r["layouts_left"] > 0 for r in doc["rows"])
    ranks = run_json("validate", "--group", "megatron_sc21_ptdp", "--rank", "--time-limit", "1e-9")["runs"]
    assert ranks and any(not r["complete"] for r in ranks)


@pytest.mark.parametrize(("args", "code", "field"), [
    # beyond what the options take (limits.MAX_GPUS = 2^24, MAX_BATCH = 2^24): a usage error naming the option
    (["-m", "llama3.1-8b", "-c", "h100", "-n", "1000000000", "--gbs", "8"], 2, "--gpus"),
    (["-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "1000000000000000", "--seq", "100000"], 2, "--gbs"),
    # within them, but beyond what a search is sized for: 2,000,000 > 2^20 GPUs, and 2^24 · 2^30 = 2^54 tokens
    # per step >= 2^53, past what float64 counts exactly
    (["-m", "llama3.1-8b", "-c", "h100", "-n", "2000000", "--gbs", "8"], 1, "gpus"),
    (["-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--gbs", "16777216", "--seq", "1073741824"], 1, "gbs"),
])
def test_absurd_sizes_are_refused_up_front(run_cli, args, code, field):
    got, _, err = run_cli("plan", *args)
    assert got == code and field in err and "Traceback" not in err


def test_a_model_too_deep_to_search_is_refused(run_cli, tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("hidden: 1024\nlayers: 100000\nvocab: 32000\nattention: {heads: 8}\nmlp: {ffn: 4096}\n")
    code, _, err = run_cli("plan", "-m", str(path), "-c", "h100", "-n", "8", "--gbs", "8")
    assert code == 1 and "layers" in err


def test_ctrl_c_stops_a_search_cleanly():
    """SIGINT during a search: one line on stderr, exit 130, no traceback. The signal is sent once the search's
    forked workers exist (where /proc lists a process's children and there are CPUs to fork them for; else after
    1 s, within the search's 2.5 s on 2 cores), so that it lands in the search on a machine of any speed."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    proc = subprocess.Popen([sys.executable, "-m", "parplan", "plan", "-m", "deepseek-v3", "-c", "h800", "-n", "2048",
                             "--gbs", "15360", "--seq", "4096", "--precision", "fp8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    start = time.monotonic()
    forks = children.exists() and (os.cpu_count() or 1) > 1  # one CPU: the search runs in-process (search.py)
    while time.monotonic() - start < (30.0 if forks else 1.0):
        if children.exists() and children.read_text().split():
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip() == "interrupted" and out == ""


def test_a_stuck_pool_teardown_is_bounded(monkeypatch):
    """CPython's Pool.terminate can wait for good on a result a killed worker was writing (about one Ctrl-C in
    fifty near a search's end hung so): _Runner.close gives the teardown TEARDOWN_SECONDS and returns."""
    import threading
    import time

    from parplan.planner import search_workers

    runner = search_workers._Runner(2)
    runner.start()
    if runner.pool is None:
        pytest.skip("no fork start method: the search runs in-process")
    stuck, terminate = threading.Event(), runner.pool.terminate
    monkeypatch.setattr(runner.pool, "terminate", lambda: stuck.wait(30.0))
    monkeypatch.setattr(search_workers, "TEARDOWN_SECONDS", 0.2)
    start = time.monotonic()
    runner.close()
    took = time.monotonic() - start
    stuck.set()
    terminate()
    assert took < 1.0
