"""`serve plan`: exhaustive search, rate matching, the SLO filter, plan quality, bad input, launch settings."""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest

from parplan.cli import main
from parplan.errors import ConfigError, InvalidStrategyError, NoFeasiblePlanError, ParplanError
from parplan.hardware import load_cluster
from parplan.models import load_model
from parplan.serving import Deployment, Pool, Precision, Workload, serve_evaluate
from parplan.serving.engines import load_engine
from parplan.serving.export import check_launch, engine_options, launches
from parplan.serving.plan import explain_command, serve_plan
from parplan.serving.search import RANK_CONCURRENCY, matched_workers


def test_search_is_exhaustive_against_brute_force():
    """Llama-3.1-8B on 2 H100, aggregated: every layout of 1 or 2 GPUs per worker at every concurrency of the
    grid, one serve_evaluate at a time; the search must find the same best tokens/s per GPU (and the same
    numbers for it: the scalar and vectorised paths share the formulas)."""
    best = None
    for tp, dp, workers in ((1, 1, 2), (2, 1, 1), (1, 2, 1)):
        for per_rank in RANK_CONCURRENCY:
            conc = per_rank * dp * workers
            d = Deployment(engine="vllm", precision=Precision(), pool=Pool(tp=tp, dp=dp, workers=workers))
            est = serve_evaluate("llama3.1-8b", "h100", d, Workload(isl=2048, osl=256, concurrency=conc))
            if any("does not fit" in n for n in est.notes) or est.state["running_per_rank"] < per_rank - 1e-9:
                continue
            if est.tpot_ms <= 20.0 and (best is None or est.output_tok_s_per_gpu > best[0]):
                best = (est.output_tok_s_per_gpu, est.ttft_ms, est.tpot_ms, (tp, dp, workers))
    plan = serve_plan("llama3.1-8b", "h100", 2, isl=2048, osl=256, tpot_ms=20.0, modes=("aggregated",))
    found = plan.best
    assert best is not None
    assert found.tokens_per_s_per_gpu == pytest.approx(best[0], rel=1e-9)
    assert (found.pool.tp, found.pool.dp, found.pool.workers) == best[3]
    assert found.ttft_ms == pytest.approx(best[1], rel=1e-9)
    assert found.tpot_ms == pytest.approx(best[2], rel=1e-9)


def test_rate_matching_by_hand():
    # Decode pool: 3 workers each emitting 2.5 requests/s -> 7.5 requests/s to prefill. A prefill worker
    # prefills 2 requests/s: ceil(7.5 / 2) = 4 workers; with one spare, 5.
    assert matched_workers(np.array([7.5]), np.array([2.0]), np.array([0]))[0] == 4
    assert matched_workers(np.array([7.5]), np.array([2.0]), np.array([1]))[0] == 5
    # exactly matched: 8 / 2 = 4 workers, no rounding up
    assert matched_workers(np.array([8.0]), np.array([2.0]), np.array([0]))[0] == 4


def test_rate_matched_plan_carries_the_rate():
    """For a rate, each disaggregated deployment's pools carry it: the decode workers emit at least the rate
    and the prefill workers' capacity is at least the rate (prefill utilisation <= 1)."""
    plan = serve_plan("qwen3-30b-a3b", "h100", 16, isl=2048, osl=512, rate=20.0, tpot_ms=40.0,
                      modes=("disaggregated",), precisions=("fp8",), top=10)
    for c in plan.result.best:
        assert c.requests_per_s == pytest.approx(20.0)
        assert c.detail["prefill_utilisation"] <= 1.0 + 1e-9


def test_slo_filter():
    loose = serve_plan("llama3.1-8b", "h100", 8, isl=1024, osl=256, modes=("aggregated",))
    tight = serve_plan("llama3.1-8b", "h100", 8, isl=1024, osl=256, tpot_ms=8.0, ttft_ms=300.0,
                       modes=("aggregated",))
    assert tight.result.meeting < loose.result.meeting
    for c in tight.result.best:
        assert c.meets and c.tpot_ms <= 8.0 and c.ttft_ms <= 300.0
    # no deployment decodes Llama-3.1-8B in 0.1 ms a token: exit 3 naming TPOT
    with pytest.raises(NoFeasiblePlanError, match="TPOT"):
        serve_plan("llama3.1-8b", "h100", 8, isl=1024, osl=256, tpot_ms=0.1, modes=("aggregated",))


def test_scalar_explain_reproduces_the_plan():
    plan = serve_plan("qwen3-30b-a3b", "h100", 8, isl=1024, osl=256, tpot_ms=30.0, precisions=("fp8",))
    best = plan.result.best_per_mode["aggregated"]
    cmd = explain_command(plan, best)
    assert "--concurrency" in cmd and f"--tp {best.pool.tp}" in cmd
    d = Deployment(engine="vllm", precision=best.precision, pool=best.pool)
    est = serve_evaluate("qwen3-30b-a3b", "h100", d, Workload(isl=1024, osl=256, concurrency=best.concurrency))
    assert est.tpot_ms == pytest.approx(best.tpot_ms, rel=1e-6)
    assert est.output_tok_s_per_gpu == pytest.approx(best.tokens_per_s_per_gpu, rel=1e-6)


def test_sglang_plan_predicts_the_graphs_it_launches(capsys):
    """SGLang captures decode graphs up to 256 by default for a one-GPU worker on an H100 (server_args.py), but
    parplan launches a pool capped at 384 with --cuda-graph-max-bs 384: the plan, the `serve explain` that
    reproduces it and the launch agree. A batch of 384 replays a graph (decode host time = the engine's step time
    alone), and SGLang's reserve counts 2 MB per graph batch: 512 + 1.5·8,192 + 2·384 + 1,024/8 = 13,696 MB of
    the H100's 81,920, --mem-fraction-static (81,920 − 13,696) / 81,920 = 0.833."""
    plan = serve_plan("llama3.1-8b", "h100", 1, isl=1024, osl=256, concurrency=384, engine="sglang",
                      precisions=("fp8",), modes=("aggregated",))
    best = plan.best
    assert best.pool.batch == 384 and "--batch 384" in explain_command(plan, best)
    d = Deployment(engine="sglang", precision=best.precision, pool=best.pool)
    est = serve_evaluate("llama3.1-8b", "h100", d, Workload(isl=1024, osl=256, concurrency=384))
    assert est.tpot_ms == pytest.approx(best.tpot_ms, rel=1e-9)
    assert est.steps["decode"]["host"] == pytest.approx(load_engine("sglang").knobs.decode_step_ms * 1e-3)
    assert main(["serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "--gpus", "1", "--isl", "1024", "--osl", "256",
                 "--concurrency", "384", "--precision", "fp8", "--mode", "aggregated", "--emit", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "--cuda-graph-max-bs 384" in out and "--mem-fraction-static 0.833" in out


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_a_disaggregated_plan_predicts_what_its_explain_does(engine):
    """The disaggregated search settles each deployment's TTFT with its prefill pool's bursts at the requests in
    flight that TTFT sets (disagg.settled_first_token), as `serve explain` of the reproducing command computes
    them at that concurrency: the two agree but for the concurrency's rounding down to whole requests. Less than
    one request fewer in the loop shortens its queue by less than one request's share of the throughput, 1/X
    seconds (Little's law), and the decode pool then runs a fraction of a request short of full."""
    plan = serve_plan("llama3.1-70b", "h200", 16, isl=1024, osl=1024, engine=engine, precisions=("fp8",),
                      modes=("disaggregated",))
    best = plan.best
    d = Deployment(engine=engine, precision=best.precision, mode="disaggregated", prefill=best.prefill,
                   decode=best.decode)
    est = serve_evaluate("llama3.1-70b", "h200", d, Workload(isl=1024, osl=1024, concurrency=best.concurrency))
    assert est.ttft_ms <= best.ttft_ms + 1e-6
    assert est.ttft_ms >= best.ttft_ms - 1e3 / best.requests_per_s
    assert est.tpot_ms == pytest.approx(best.tpot_ms, rel=1e-3) and est.tpot_ms <= best.tpot_ms


def test_a_rate_matched_disaggregated_plan_predicts_what_its_explain_does_at_that_rate():
    """At an arrival rate requests come one at a time, in the search (burst_share: no bursts) as in `serve explain
    --rate` of the reproducing deployment (an open loop): the two give the same TTFT. The search costs TPOT at its
    grid batch per decode rank (one of RANK_CONCURRENCY), with the decode workers the rate needs at that batch
    rounded up; explain solves the batch the rate puts there by Little's law, 20/s × 511 tokens × TPOT over the
    decode ranks, below the grid's, so its TPOT is a little lower, never higher (and within 5%, a tolerance: a step's
    time falls less than its batch, 180/192 here, as the weights stream whatever the batch)."""
    plan = serve_plan("qwen3-30b-a3b", "h100", 16, isl=2048, osl=512, rate=20.0, tpot_ms=40.0,
                      modes=("disaggregated",), precisions=("fp8",))
    best = plan.best
    d = Deployment(engine=plan.engine, precision=best.precision, mode="disaggregated", prefill=best.prefill,
                   decode=best.decode)
    est = serve_evaluate("qwen3-30b-a3b", "h100", d, Workload(isl=2048, osl=512, rate=20.0))
    assert est.ttft_ms == pytest.approx(best.ttft_ms, rel=1e-6)
    batch = est.state["decode_batch_per_rank"]
    assert batch == pytest.approx(20.0 * 511 * est.tpot_ms * 1e-3 / (best.decode.workers * best.decode.dp), rel=1e-3)
    assert best.decode.batch in RANK_CONCURRENCY and batch < best.decode.batch
    assert 0.95 * best.tpot_ms < est.tpot_ms <= best.tpot_ms


@pytest.mark.parametrize(("model", "cluster", "gpus", "isl", "osl", "engine", "precision", "ttft_ms", "pools"), [
    # saturated prefill pools (utilisation > 0.95) among the Pareto front
    ("deepseek-v3", "b200", 32, 2048, 512, "trtllm", "fp4", None, "saturated"),
    # a 150 ms TTFT target leaves only prefill pools of several workers well below load, whose bursts of short
    # prompts spread over all pw·dp ranks (search.py's settled_first_token call; over dp ranks alone the best
    # candidate's TTFT moves 149.2 -> 148.6 ms and the search picks other pools)
    ("qwen3-30b-a3b", "h100", 16, 1024, 256, "vllm", "fp8", 150.0, "several unsaturated workers"),
])
def test_a_disaggregated_candidate_is_what_the_cost_model_gives_at_its_requests_in_flight(
        model, cluster, gpus, isl, osl, engine, precision, ttft_ms, pools):
    """A disaggregated candidate's TTFT and prefill time are the cost model's (evaluate_disaggregated) at the
    requests in flight that TTFT sets, X·(TTFT + (OSL − 1)·TPOT), unrounded: the search settles the prompt's own
    prefill step (PrefillService.ride) and its burst's rounds with the TTFT (disagg.settled_first_token), to 1e-4.
    Checked on every candidate of the Pareto front and the best."""
    from parplan.serving.evaluate import Traffic, evaluate_disaggregated
    from parplan.serving.layout import PoolArrays

    plan = serve_plan(model, cluster, gpus, isl=isl, osl=osl, engine=engine, precisions=(precision,),
                      modes=("disaggregated",), ttft_ms=ttft_ms)
    spec, hw = load_model(model), load_cluster(cluster)
    front = plan.result.pareto + plan.result.best
    assert front and all(c.mode == "disaggregated" for c in front)
    if pools == "saturated":
        assert max(c.detail["prefill_utilisation"] for c in front) > 0.95
    else:
        assert all(c.prefill.workers >= 2 and c.detail["prefill_utilisation"] < 0.5 for c in plan.result.best)
    traffic, eng = Traffic.of(Workload(isl=isl, osl=osl, concurrency=1)), load_engine(engine)
    for c in front:
        in_flight = c.requests_per_s * (c.ttft_ms + (osl - 1) * c.tpot_ms) * 1e-3
        d = Deployment(engine=engine, precision=c.precision, mode="disaggregated", prefill=c.prefill,
                       decode=c.decode)
        ev = evaluate_disaggregated(spec, hw, eng.launched(d), c.precision,
                                    PoolArrays.from_pools([c.prefill]), PoolArrays.from_pools([c.decode]),
                                    dataclasses.replace(traffic, concurrency=np.array([in_flight])))
        assert float(ev.phase.ttft[0]) * 1e3 == pytest.approx(c.ttft_ms, rel=1e-4)
        assert float(ev.phase.prefill_latency[0]) * 1e3 == pytest.approx(c.detail["prefill_ms"], rel=1e-4)


def test_launch_settings_reach_the_reproducing_command_and_the_launch():
    """A plan searched with a token budget and a memory fraction reproduces with them (serve explain gives the
    same numbers) and launches with them: --emit once wrote the engine's default budget whatever the plan used."""
    plan = serve_plan("qwen3-30b-a3b", "h100", 8, isl=1024, osl=256, precisions=("fp8",), modes=("aggregated",),
                      chunk_tokens=4096, memory_fraction=0.8, range_ratio=0.8)
    best = plan.best
    cmd = explain_command(plan, best)
    assert "--chunk-tokens 4096" in cmd and "--memory-fraction 0.8" in cmd and "--range-ratio 0.8" in cmd
    d = Deployment(engine="vllm", precision=best.precision, pool=best.pool, chunk_tokens=4096, memory_fraction=0.8)
    est = serve_evaluate("qwen3-30b-a3b", "h100", d, Workload(isl=1024, osl=256, concurrency=best.concurrency,
                                                            range_ratio=0.8))
    assert est.tpot_ms == pytest.approx(best.tpot_ms, rel=1e-6)
    assert est.memory["aggregated"]["kv_cache_gib"] == pytest.approx(best.detail["kv_cache_gib"], rel=1e-6)


@pytest.mark.parametrize(("engine", "words"), [
    ("vllm", ("--max-num-batched-tokens 4096", "--gpu-memory-utilization 0.8")),
    ("sglang", ("--chunked-prefill-size 4096", "--mem-fraction-static 0.800")),
    ("trtllm", ("--max_num_tokens 4096", "--kv_cache_free_gpu_memory_fraction 0.8")),
])
def test_emit_writes_the_plans_launch_settings(capsys, engine, words):
    assert main(["serve", "plan", "-m", "qwen3-30b-a3b", "-c", "h100", "--gpus", "8", "--isl", "1024", "--osl",
                 "256", "--precision", "fp8", "--mode", "aggregated", "--chunk-tokens", "4096",
                 "--memory-fraction", "0.8", "--emit", engine]) == 0
    out = capsys.readouterr().out
    assert all(w in out for w in words)


def test_deepseek_decode_plan_goes_wide_ep_with_dp_attention():
    """DeepSeek's published decode setting (DeepSeek-V3/R1 inference system overview, 2025: H800, ~5K tokens of
    context, 20-22 tokens/s per user) is served with attention DP and expert parallelism over many nodes and
    DeepEP's low-latency kernels. The planner, asked for disaggregated DeepSeek-V3 on 64 H800 at that speed,
    should arrive at the same shape for its decode pool. With a first-token target a service would hold (5 s, an
    assumption: the overview states none): without one the best plan saturates its prefill pool (TTFT ~18 s), its
    throughput is the prefill pool's, and the decode layouts of equal memory tie within a few percent."""
    plan = serve_plan("deepseek-v3", "h800", 64, isl=4096, osl=1024, tpot_ms=1000.0 / 20.0, ttft_ms=5000.0,
                      modes=("disaggregated",), precisions=("fp8",), engine="sglang")
    dec = plan.best.decode
    assert dec.dp > 1  # attention data parallel
    assert dec.moe_ep >= 16 and dec.moe_ep == dec.tp * dec.dp  # wide EP: experts spread over every decode GPU
    cl = load_cluster("h800", gpus=64)
    assert dec.gpus > cl.scaleup_domain  # spans nodes: the auto backend is DeepEP, low-latency for decode
    items = launches(load_model("deepseek-v3"), cl, load_engine("sglang"), plan.best, plan.workload, "m", 8192)
    decode = next(i for i in items if i.role == "decode")
    assert "low_latency" in decode.argv


def test_dense_70b_on_8_h100_lowest_latency_is_tp8():
    # serving_measured.csv, vLLM Llama-3.1-70B fp8 on H100 at 4 requests in flight: TPOT 9.1 ms at TP8,
    # 11.8 ms at TP4, 17.4 ms at TP2: the tightest TPOT target is met by TP8 only.
    plan = serve_plan("llama3.1-70b", "h100", 8, isl=1024, osl=1024, tpot_ms=10.0, precisions=("fp8",),
                      modes=("aggregated",))
    assert plan.best.pool.tp == 8


def test_bad_input_is_a_clear_error():
    with pytest.raises(ParplanError, match="tpot-ms must be > 0"):
        serve_plan("llama3.1-8b", "h100", 8, isl=1024, osl=256, tpot_ms=0.0)
    with pytest.raises(ConfigError, match="context"):
        serve_plan("llama3.1-8b", "h100", 8, isl=200_000, osl=256)
    d = Deployment(engine="vllm", precision=Precision(gemm="fp8", moe="fp8", kv_cache="bf16"),
                   pool=Pool(tp=4, moe_tp=2, moe_ep=2))
    with pytest.raises(InvalidStrategyError, match="vLLM"):
        serve_evaluate("qwen3-30b-a3b", "h100", d, Workload(isl=1024, osl=256, concurrency=8))
    d = Deployment(engine="trtllm", precision=Precision(), pool=Pool(tp=2, dp=4, moe_ep=8))
    with pytest.raises(InvalidStrategyError, match="one GPU per attention rank"):
        serve_evaluate("qwen3-30b-a3b", "h100", d, Workload(isl=1024, osl=256, concurrency=8))


def test_cli_exit_codes(capsys):
    # a target that is not a positive number is a usage error naming the option (issue #16)
    assert main(["serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "--gpus", "8", "--tpot-ms", "0"]) == 2
    assert main(["serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "--gpus", "8", "--tpot-ms", "0.1",
                 "--mode", "aggregated"]) == 3
    assert "TPOT" in capsys.readouterr().err
    assert main(["serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "--gpus", "8", "--mode", "sideways"]) == 2
    assert main(["serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "--gpus", "8", "--engine", "vllm",
                 "--emit", "sglang"]) == 2


def test_cli_plan_json(capsys):
    import json

    assert main(["serve", "plan", "-m", "qwen3-30b-a3b", "-c", "h100", "--gpus", "8", "--isl", "1024", "--osl",
                 "256", "--tpot-ms", "30", "--precision", "fp8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["evaluated"] > 0 and doc["search_seconds"] > 0
    first = doc["plans"][0]
    for key in ("mode", "gpus", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms", "tpot_ms",
                "meets_slo", "layout"):
        assert key in first
    assert first["meets_slo"] and first["tpot_ms"] <= 30.0
    rates = [p["tokens_per_s_per_gpu"] for p in doc["plans"]]
    assert rates == sorted(rates, reverse=True)


def test_sizing_over_gpu_counts(capsys):
    plan = serve_plan("llama3.1-8b", "h100", [1, 2, 4, 8], isl=1024, osl=256, rate=30.0, tpot_ms=15.0,
                      modes=("aggregated",))
    meeting = [r.gpus for r in plan.counts if r.result is not None and r.result.meeting]
    assert plan.chosen.gpus == min(meeting)
    assert main(["serve", "plan", "-m", "llama3.1-8b", "-c", "h100", "--gpus", "1..8", "--rate", "30",
                 "--tpot-ms", "15", "--mode", "aggregated"]) == 0
    assert "Fewest GPUs" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ launch settings


def test_option_lists_name_their_source():
    for name, opts in engine_options().items():
        assert re.search(r"@[0-9a-f]{40}", opts.source), name  # a file at a commit
        assert opts.options and opts.version


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_every_emitted_option_exists(engine, mode):
    """The winner's launch settings use only options (and closed-choice values) of the engine's source."""
    kw = {"mtp": 1, "acceptance": 0.8} if engine != "vllm" else {}
    plan = serve_plan("deepseek-v3", "h200", 32, isl=2048, osl=512, tpot_ms=60.0, engine=engine,
                      modes=(mode,), precisions=("fp8",), **kw)
    cl = load_cluster("h200", gpus=32)
    eng = load_engine(engine)
    items = launches(load_model("deepseek-v3"), cl, eng, plan.best, plan.workload, "deepseek-ai/DeepSeek-V3",
                     eng.default_chunk_tokens(cl.gpu))
    assert len(items) == (1 if mode == "aggregated" else 2)
    for launch in items:
        check_launch(engine, launch)


def test_emit_refuses_what_the_engine_cannot_run():
    plan = serve_plan("qwen3-30b-a3b", "h100", 8, isl=1024, osl=256, tpot_ms=30.0, precisions=("fp8",),
                      mtp=1, acceptance=0.7, modes=("aggregated",))
    cl = load_cluster("h100", gpus=8)
    with pytest.raises(InvalidStrategyError, match="speculative"):
        launches(load_model("qwen3-30b-a3b"), cl, load_engine("vllm"), plan.best, plan.workload, "m", 8192)
    pool = Pool(tp=2, dp=4, moe_ep=8)
    bad = plan.best.__class__(**{**{f: getattr(plan.best, f) for f in plan.best.__dataclass_fields__},
                                 "pool": pool})
    with pytest.raises(InvalidStrategyError):
        launches(load_model("qwen3-30b-a3b"), cl, load_engine("trtllm"), bad, plan.workload, "m", 8192)


def test_cli_emit_prints_the_commands(capsys):
    assert main(["serve", "plan", "-m", "qwen3-30b-a3b", "-c", "h100", "--gpus", "8", "--isl", "1024", "--osl",
                 "256", "--precision", "fp8", "--mode", "aggregated", "--emit", "trtllm"]) == 0
    out = capsys.readouterr().out
    assert "trtllm-serve" in out and "--tp_size" in out and "TensorRT-LLM" in out


def test_grid_matches_the_engine_layout_rules():
    # vLLM: experts all-EP or all-TP (fused_moe/config.py FusedMoEParallelConfig.make); every aggregated
    # layout the search tries for vLLM must respect it.
    from parplan.serving.search import worker_layouts

    m, cl = load_model("qwen3-30b-a3b"), load_cluster("h100", gpus=8)
    for pool in worker_layouts(m, cl, load_engine("vllm"), Precision(gemm="fp8", moe="fp8"), 8):
        assert pool.moe_ep in (1, pool.tp * pool.dp)
    for pool in worker_layouts(m, cl, load_engine("trtllm"), Precision(gemm="fp8", moe="fp8"), 8):
        assert pool.dp == 1 or pool.tp == 1
    assert list(itertools.islice(worker_layouts(m, cl, load_engine("sglang"), Precision(), 8), 1))
