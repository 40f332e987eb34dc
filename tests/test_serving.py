"""The serving cost model: KV cache, a decode step against a hand roofline, the steady state of continuous
batching, scalar == vectorised, memory, rate (open loop), and bad input. Expected numbers are hand calculations
from the model configs (data/models/hub) and datasheet figures in the presets, written out in each test."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np
import pytest

from parplan.errors import ConfigError, InvalidStrategyError
from parplan.hardware import load_cluster
from parplan.models import load_model
from parplan.planner.device import CUDA_CONTEXT_GIB, nccl_bytes
from parplan.serving import kvcache
from parplan.serving.batching import dp_balance, harmonic
from parplan.serving.calibrate import with_knobs
from parplan.serving.engines import load_engine
from parplan.serving.evaluate import Traffic, evaluate_aggregated, evaluate_disaggregated, serve_evaluate
from parplan.serving.layout import PoolArrays
from parplan.serving.memory import weight_bytes
from parplan.serving.spec import BatchWait, Deployment, DpBalance, Pool, Precision, Workload
from parplan.serving.step import StepModel

LLAMA70 = "meta-llama/Llama-3.1-70B"
DSV3 = "deepseek-ai/DeepSeek-V3"
GPTOSS = "openai/gpt-oss-120b"


# ---- KV cache ----------------------------------------------------------------------------------------------

def test_kv_bytes_llama70b_gqa():
    """Llama 3.1 70B: 80 layers × K and V × 8 KV heads × 128 × 2 bytes = 327,680 bytes per token in bf16."""
    m = load_model(LLAMA70)
    assert kvcache.kv_bytes_per_token(m, "bf16") == 80 * 2 * 8 * 128 * 2 == 327_680
    assert kvcache.kv_bytes_per_token(m, "fp8") == 163_840
    # TP8 splits the 8 KV heads one per rank; TP16 cannot split further: each rank keeps one head.
    assert float(kvcache.tp_share(m, 8)) == pytest.approx(1 / 8)
    assert float(kvcache.tp_share(m, 16)) == pytest.approx(1 / 8)


def test_kv_bytes_deepseek_v3_mla_latent():
    """DeepSeek-V3: 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes = 70,272 bytes per token,
    the same on every TP rank (the latent is shared by all heads)."""
    m = load_model(DSV3)
    assert kvcache.kv_bytes_per_token(m, "bf16") == 61 * (512 + 64) * 2 == 70_272
    assert float(kvcache.tp_share(m, 8)) == 1.0


def test_kv_bytes_gpt_oss_sliding_window():
    """gpt-oss-120b: 18 full layers grow by 2 × 8 × 64 × 2 = 2,048 bytes per token each; the 18 sliding layers
    keep at most 128 tokens. A 10,000-token sequence: 18·10,000·2,048 + 18·128·2,048 bytes (not 36·10,000·2,048,
    the 1.996× overcharge aiconfigurator PR #1537 fixed)."""
    m = load_model(GPTOSS)
    assert kvcache.kv_bytes_per_token(m, "bf16") == 18 * 2048
    expect = 18 * 10_000 * 2048 + 18 * 128 * 2048
    assert float(kvcache.sequence_bytes(m, "bf16", 10_000)) == expect


def test_kv_pages_round_up():
    """vLLM pages of 16 tokens: a 1,000-token sequence holds 63 pages = 1,008 tokens of cache."""
    m = load_model(LLAMA70)
    one_page = float(kvcache.gpu_sequence_bytes(m, "bf16", 1000, 1, 1, 16))
    assert one_page == 1008 * 327_680


# ---- one decode step against a hand roofline ---------------------------------------------------------------

def test_decode_step_hand_roofline():
    """Llama 3.1 8B, bf16, one H100, one sequence with 1,024 cached tokens. A decode step streams every weight
    but the input embedding (8,030,261,248 − 128,256·4,096 parameters, 2 bytes each) and the KV cache
    (32 layers × 1,024 tokens × 2 × 8 × 128 × 2 bytes) through HBM at 3.35 TB/s × 0.85, and each of its
    129 GEMMs (4 per layer and the LM head) and 32 attention kernels pays the 4 µs kernel cost."""
    m = load_model("meta-llama/Llama-3.1-8B-Instruct")
    cl = load_cluster("h100")
    engine = with_knobs(load_engine("vllm"), {"graph_kernel_us": 4.0})
    sm = StepModel(m, cl, engine, Precision(), PoolArrays.from_pools([Pool(tp=1)]))
    step = sm.step(np.array([1.0]), np.array([1024.0]), 0.0, 0.0, 0.0)
    weights = (8_030_261_248 - 128_256 * 4096) * 2
    kv = 32 * 1024 * 2 * 8 * 128 * 2
    bw = 3.35e12 * 0.85
    hand = (weights + kv) / bw + (129 + 32) * 4e-6
    gpu = float(step.linears[0] + step.attention[0])
    assert gpu == pytest.approx(hand, rel=0.01)


# ---- steady state ------------------------------------------------------------------------------------------

def _agg(model: str, cluster: str, engine: str, pools: list[Pool], isl, osl, conc, precision=None):
    precision = precision or Precision()
    m, cl = load_model(model), load_cluster(cluster)
    traffic = Traffic(isl=np.asarray(isl, float), osl=np.asarray(osl, float), prompt=np.asarray(isl, float),
                      concurrency=np.asarray(conc, float))
    return evaluate_aggregated(m, cl, load_engine(engine), precision, PoolArrays.from_pools(pools), traffic)


def test_littles_law_closes_the_loop():
    """A closed loop of C requests per rank: C = throughput × (TTFT + (OSL − 1)·TPOT), with and without a
    queue (the 4,096 in flight exceed what one H100's KV cache holds)."""
    pools = [Pool(tp=tp) for tp in (1, 2, 4, 8)] * 2
    conc = [16] * 4 + [4096] * 4
    ev = _agg(LLAMA70, "h100", "vllm", pools, [2048] * 8, [512] * 8, conc, Precision(gemm="fp8", moe="fp8"))
    ph = ev.phase
    latency = ph.ttft + 511 * ph.tpot
    assert np.allclose(ph.throughput * latency, np.asarray(conc, float), rtol=1e-9)
    assert np.all(ph.queue[4:] > 0) and np.all(ph.running[4:] < 4096)


@pytest.mark.parametrize("engine", ["trtllm", "vllm"])
def test_scalar_equals_vectorised(engine):
    """Twenty deployments evaluated together give what each gives alone through serve_evaluate (vLLM's prompts
    of 16,384 tokens run over several chunks of its 8,192-token budget, the last one short)."""
    rng = np.random.default_rng(7)
    pools, isl, osl, conc = [], [], [], []
    for _ in range(20):
        tp = int(rng.choice([1, 2, 4, 8]))
        pools.append(Pool(tp=tp, workers=int(rng.integers(1, 3))))
        isl.append(int(rng.choice([128, 1024, 4096, 16384])))
        osl.append(int(rng.choice([64, 512, 2048])))
        conc.append(int(rng.integers(1, 300)))
    prec = Precision(gemm="fp8", moe="fp8")
    ev = _agg(LLAMA70, "h100", engine, pools, isl, osl, conc, prec)
    for i in range(20):
        one = serve_evaluate(LLAMA70, "h100", Deployment(engine=engine, precision=prec, pool=pools[i]),
                             Workload(isl=isl[i], osl=osl[i], concurrency=conc[i]))
        assert one.tpot_ms == pytest.approx(float(ev.phase.tpot[i]) * 1e3, rel=1e-12)
        assert one.ttft_ms == pytest.approx(float(ev.phase.ttft[i]) * 1e3, rel=1e-12)


def test_passes_join_to_one_evaluation(monkeypatch):
    """Many deployments run as cache-sized passes: the joined passes equal one pass over all of them."""
    from parplan.serving import evaluate

    pools = [Pool(tp=tp) for tp in (1, 2, 4, 8)] * 5
    args = ([1024, 2048, 4096, 8192] * 5, [256, 512] * 10, list(range(3, 23)))
    prec = Precision(gemm="fp8", moe="fp8")
    whole = _agg(LLAMA70, "h100", "vllm", pools, *args, prec)
    monkeypatch.setattr(evaluate, "CHUNK", 7)
    parts = _agg(LLAMA70, "h100", "vllm", pools, *args, prec)
    for a, b in ((whole.phase.ttft, parts.phase.ttft), (whole.phase.tpot, parts.phase.tpot),
                 (whole.memory.max_batch, parts.memory.max_batch), (whole.phase.decode_step.experts,
                                                                     parts.phase.decode_step.experts)):
        assert np.array_equal(a, b)


def test_disaggregated_decode_batch_balances():
    """Disaggregated closed loop: the decode batch per rank is what the throughput keeps there, X × (time a
    request decodes) / decode ranks (Little's law on the decode pool), and all C requests are in flight:
    C = X × (TTFT + (OSL − 1)·TPOT)."""
    d = Deployment(engine="sglang", precision=Precision(gemm="fp8", moe="fp8"), mode="disaggregated",
                   prefill=Pool(tp=1, dp=8, moe_ep=8), decode=Pool(tp=1, dp=16, moe_ep=16))
    for c in (64, 512, 1500):
        est = serve_evaluate(DSV3, "h200", d, Workload(isl=2048, osl=512, concurrency=c))
        x = est.requests_per_s
        decoding = x * 511 * est.tpot_ms * 1e-3 / 16
        assert est.state["decode_batch_per_rank"] == pytest.approx(decoding, rel=2e-3)
        assert x * (est.ttft_ms + 511 * est.tpot_ms) * 1e-3 == pytest.approx(c, rel=2e-3)


def test_a_prefill_step_carries_the_prompts_that_arrive_together():
    """A disaggregated prefill rank's step carries the prompts that reach it together (PrefillService.ride), not
    always the token budget's worth: one request in flight is prefilled alone, in the step of its own 1,024
    tokens; a burst of more than a full step per rank (8 prompts of 1,024 in the 8,192-token budget, on each of
    the 4 attention-DP ranks) rides full steps; in between, the step time grows linearly with its prompts. The
    requests of an arrival rate arrive independently (an open loop has no bursts: batching.burst_share), so at any
    rate below saturation each prompt is prefilled alone. A burst spreads over every prefill rank of every worker:
    with two workers of 4 ranks, 1 + pool_burst·(C − 1) prompts reach the pool together and each of the 8 ranks
    carries an eighth of them."""
    from parplan.serving.disagg import prefill_service

    pool = Pool(tp=1, dp=4, moe_ep=4)
    d = Deployment(engine="trtllm", precision=Precision(gemm="fp4", moe="fp4"), mode="disaggregated", prefill=pool,
                   decode=Pool(tp=8, moe_ep=8, workers=5))
    sm = StepModel(load_model(DSV3), load_cluster("b200"), load_engine("trtllm").prefill_pool(), d.precision,
                   PoolArrays.from_pools([pool]))
    one = np.ones(1)
    alone = sm.step(0.0, 0.0, 1024.0 * one, 512.0 * one, one, mixed=True).total[0]
    full = sm.step(0.0, 0.0, 8192.0 * one, 512.0 * one, 8.0 * one, mixed=True).total[0]
    service = prefill_service(sm, 1024.0 * one, 1024.0 * one, 8192.0, np.full(1, np.inf))
    assert (service.prompts[0], service.alone[0], service.latency[0]) == (8.0, alone, full)
    assert service.ride(np.array([4.5]))[0] == pytest.approx((alone + full) / 2.0, rel=1e-12)
    lone = serve_evaluate(DSV3, "b200", d, Workload(isl=1024, osl=1024, concurrency=1))
    assert lone.state["prefill_latency_ms"] == pytest.approx(alone * 1e3, rel=1e-12)
    crowd = serve_evaluate(DSV3, "b200", d, Workload(isl=1024, osl=1024, concurrency=1000))
    assert crowd.state["prefill_latency_ms"] == pytest.approx(full * 1e3, rel=1e-12)
    for rate in (1.0, 10.0, 40.0):
        est = serve_evaluate(DSV3, "b200", d, Workload(isl=1024, osl=1024, rate=rate))
        assert est.state["prefill_latency_ms"] == pytest.approx(alone * 1e3, rel=1e-12)
    two = dataclasses.replace(d, prefill=dataclasses.replace(pool, workers=2))
    share = load_engine("trtllm").knobs.pool_burst
    c = round(1 + (4.5 * 8 - 1) / share)  # about 4.5 prompts per rank: halfway between alone and a full step
    per_rank = (1 + share * (c - 1)) / 8
    est = serve_evaluate(DSV3, "b200", two, Workload(isl=1024, osl=1024, concurrency=c))
    assert est.state["prefill_latency_ms"] == pytest.approx((alone + (per_rank - 1) / 7 * (full - alone)) * 1e3,
                                                            rel=1e-9)
    # A prompt of the whole budget fills each step alone: one prompt a step, whatever arrives with it.
    long = prefill_service(sm, 8192.0 * one, 8192.0 * one, 8192.0, np.full(1, np.inf))
    assert long.prompts[0] == 1.0 and long.alone[0] == long.latency[0]
    assert long.ride(np.array([50.0]))[0] == long.latency[0]


def test_more_concurrency_more_throughput_slower_tokens():
    """On one layout, a larger closed loop raises tokens/s per GPU and TPOT together (batching)."""
    ev = _agg(LLAMA70, "h200", "vllm", [Pool(tp=4)] * 4, [1024] * 4, [1024] * 4, [4, 16, 64, 256],
              Precision(gemm="fp8", moe="fp8"))
    assert np.all(np.diff(ev.output_tok_s_per_gpu) > 0) and np.all(np.diff(ev.phase.tpot) > 0)


def test_lone_request_decodes_alone():
    """With one request in flight no other prompt is prefilled while it decodes (its own prefill is over before
    its first token, in TTFT), so its TPOT is the decode step, every step of its span a pure decode step."""
    est = serve_evaluate(LLAMA70, "h100", Deployment(engine="vllm", precision=Precision(gemm="fp8", moe="fp8"),
                                                     pool=Pool(tp=8)), Workload(isl=4096, osl=256, concurrency=1))
    assert est.tpot_ms == pytest.approx(est.steps["decode"]["total"] * 1e3, rel=1e-12)
    assert est.state["mixed_step_share"] > 0  # the steps of the loop do carry its prompts


def test_attention_dp_ranks_wait_for_each_others_prefill():
    """Under attention DP the MoE layers join the dp ranks in every step: a step carries prefill when any rank
    does. Ranks admit requests independently, so with a share f of each rank's steps carrying its own prompts,
    1 − (1 − f)^dp of the group's steps do (dp 8: f = 5% gives 33.7%); without DP, f."""
    ev = _agg(DSV3, "h200", "sglang", [Pool(tp=1, dp=8, moe_ep=8), Pool(tp=8, moe_ep=8)], [4096] * 2, [1024] * 2,
              [256, 32], Precision(gemm="fp8", moe="fp8"))
    f, share = ev.phase.rank_mixed_share, ev.phase.mixed_share
    assert 0 < f[0] < 1 and share[0] == pytest.approx(1 - (1 - f[0]) ** 8, rel=1e-12)
    assert share[1] == pytest.approx(f[1], rel=1e-12)


def test_last_chunk_carries_only_the_rest():
    """vLLM counts the decode tokens in its budget, so a lone prompt of 4,100 tokens in a 4,096-token budget
    runs as one full chunk and a last chunk of about 5 tokens: it costs about one decode step (≈ 9 ms for
    Llama 3.1 70B on 8 H100) more than a prompt of 4,000 tokens, not a second full step (≈ 0.1 s)."""
    m, cl, prec = load_model(LLAMA70), load_cluster("h100"), Precision(gemm="fp8", moe="fp8")
    lay = PoolArrays.from_pools([Pool(tp=8)] * 2)
    traffic = Traffic(isl=np.array([4000.0, 4100.0]), osl=np.array([256.0, 256.0]),
                      prompt=np.array([4000.0, 4100.0]), concurrency=np.array([1.0, 1.0]))
    ph = evaluate_aggregated(m, cl, load_engine("vllm"), prec, lay, traffic, chunk=4096).phase
    full, decode = float(ph.mixed_step.total[1]), float(ph.decode_step.total[1])
    extra = float(ph.ttft[1] - ph.ttft[0])
    assert extra < 2.0 * decode < 0.25 * full


def test_prefill_first_engine_stays_phase_locked():
    """SGLang runs a prefill batch whenever one can be formed and decodes only when none can
    (scheduler.get_next_batch_to_run), so the 64 requests of a closed loop start, finish and are replaced
    together: each arrives with the other 63. 64 prompts of 1,024 tokens in SGLang's 8,192-token chunks on an
    H200 take 8 prefill steps; a request waits for (8 + 1)/2 = 4.5 of them on average, after half a mean step,
    and the engine's burst knob (for mixed steps) plays no part. vLLM's mixed steps stagger the replacements:
    there the knob counts."""
    prec = Precision(gemm="fp8", moe="fp8")
    m, cl = load_model(LLAMA70), load_cluster("h200")
    lay = PoolArrays.from_pools([Pool(tp=4)])
    traffic = Traffic(isl=np.array([1024.0]), osl=np.array([1024.0]), prompt=np.array([1024.0]),
                      concurrency=np.array([64.0]))
    sglang = load_engine("sglang")
    ph = evaluate_aggregated(m, cl, sglang, prec, lay, traffic).phase
    prefill = float(ph.mixed_step.total[0] + ph.decode_step.total[0])  # a prefill batch, then the decode batch
    s = float(ph.mixed_share[0])
    mean = s * prefill + (1 - s) * float(ph.decode_step.total[0])
    hand = sglang.knobs.request_ms * 1e-3 + 0.5 * mean + 4.5 * prefill
    assert float(ph.ttft[0]) == pytest.approx(hand, rel=1e-9)
    knob = with_knobs(sglang, {"burst": 0.01})
    assert float(evaluate_aggregated(m, cl, knob, prec, lay, traffic).phase.ttft[0]) == float(ph.ttft[0])
    vllm = load_engine("vllm")
    other = with_knobs(vllm, {"burst": 0.5})
    assert (evaluate_aggregated(m, cl, other, prec, lay, traffic).phase.ttft[0]
            > evaluate_aggregated(m, cl, vllm, prec, lay, traffic).phase.ttft[0])


def test_a_prefill_pool_takes_its_own_burst_share():
    """A disaggregated prefill pool receives the first-token requests of many decode ranks, whose completions do not
    line up as one rank's do: its bursts follow pool_burst, and an aggregated rank's follow burst alone."""
    prec = Precision(gemm="fp8", moe="fp8")
    m, cl = load_model(LLAMA70), load_cluster("h200")
    traffic = Traffic(isl=np.array([1024.0]), osl=np.array([1024.0]), prompt=np.array([1024.0]),
                      concurrency=np.array([256.0]))
    pools = (PoolArrays.from_pools([Pool(tp=4)]), PoolArrays.from_pools([Pool(tp=4)]))
    vllm = load_engine("vllm")

    def with_knob(**knob):
        return with_knobs(vllm, knob)

    def disagg(engine):
        return float(evaluate_disaggregated(m, cl, engine, prec, *pools, traffic).phase.ttft[0])

    def agg(engine):
        return float(evaluate_aggregated(m, cl, engine, prec, pools[0], traffic).phase.ttft[0])

    assert disagg(with_knob(pool_burst=0.9)) > disagg(with_knob(pool_burst=0.1))
    assert disagg(with_knob(burst=0.9)) == disagg(with_knob(burst=0.1))
    assert agg(with_knob(pool_burst=0.9)) == agg(with_knob(pool_burst=0.1))
    assert agg(with_knob(burst=0.9)) > agg(with_knob(burst=0.1))


def test_the_longest_request_must_fit_at_its_last_token():
    """Llama 3.1 70B on two H100 (TP2, fp8 weights, vLLM's bf16 KV cache: 80 layers × K and V × 4 KV heads per GPU
    × 128 × 2 bytes = 163,840 bytes per token per GPU), with --gpu-memory-utilization 0.48, leaves between 1.875
    and 2.5 GiB of KV cache. A resident request of 8,192 in and 8,192 out holds 8,192 + 8,192/2 = 12,288 tokens on
    average (1.875 GiB), but 16,384 (2.5 GiB) at its last token: the GPU cannot finish it, and says so. Drawn
    from 0.5-1× the lengths, the longest request is still 8,192 + 8,192; at 4,096 + 4,096 (1.25 GiB) it fits."""
    d = Deployment(engine="vllm", precision=Precision(gemm="fp8", moe="fp8"), pool=Pool(tp=2), memory_fraction=0.48)
    per_token = 80 * 2 * 4 * 128 * 2 / 2**30  # GiB per token per GPU
    for work in (Workload(isl=8192, osl=8192, concurrency=1), Workload(isl=8192, osl=8192, concurrency=1,
                                                                        range_ratio=0.5)):
        est = serve_evaluate(LLAMA70, "h100", d, work)
        mem = est.memory["aggregated"]
        assert 12_288 * per_token <= mem["kv_cache_gib"] < 16_384 * per_token and mem["max_batch_per_rank"] >= 1
        assert mem["kv_longest_request_gib"] == pytest.approx(16_384 * per_token, rel=1e-12)
        assert any("the longest request needs 2.50 GiB of KV cache" in n for n in est.notes)
    short = serve_evaluate(LLAMA70, "h100", d, Workload(isl=4096, osl=4096, concurrency=1))
    assert short.memory["aggregated"]["kv_longest_request_gib"] == pytest.approx(8_192 * per_token, rel=1e-12)
    assert not any("does not fit" in n for n in short.notes)


def test_open_loop_rate():
    """At 2 requests/s a deployment completes 2 requests/s; at 10,000 it is overloaded, with the reason."""
    d = Deployment(engine="vllm", precision=Precision(gemm="fp8", moe="fp8"), pool=Pool(tp=8))
    ok = serve_evaluate(LLAMA70, "h100", d, Workload(isl=1024, osl=256, rate=2.0))
    assert ok.requests_per_s == pytest.approx(2.0, rel=1e-4) and np.isfinite(ok.ttft_ms)
    over = serve_evaluate(LLAMA70, "h100", d, Workload(isl=1024, osl=256, rate=10_000.0))
    assert np.isinf(over.ttft_ms) and any("overloaded" in n for n in over.notes)


def test_drawn_lengths_are_served_at_their_mean():
    """InferenceX's client draws each request's lengths uniformly from the whole numbers in [⌊0.8·L⌋, L]
    (benchmark_serving.py sample_uniform: randint(int(L·ratio), L + 1)): a nominal 1,024 averages
    (819 + 1,024) / 2 = 921.5 tokens, 8,192 averages (6,553 + 8,192) / 2 = 7,372.5. Every cost is linear in a
    request's lengths but attention's, so the deployment serves them as requests of the mean lengths: 1,000 / 1,000
    drawn from 0.8 costs what fixed 900 / 900 costs."""
    assert Workload(isl=1024, osl=8192, concurrency=1, range_ratio=0.8).mean_isl == 921.5
    assert Workload(isl=1024, osl=8192, concurrency=1, range_ratio=0.8).mean_osl == 7372.5
    assert Workload(isl=1024, osl=10, concurrency=1, range_ratio=0.8, prefix_hit=0.5).prefill_tokens == 460.75
    d = Deployment(engine="vllm", precision=Precision(gemm="fp8", moe="fp8"), pool=Pool(tp=8))
    drawn = serve_evaluate(LLAMA70, "h200", d, Workload(isl=1000, osl=1000, concurrency=32, range_ratio=0.8))
    fixed = serve_evaluate(LLAMA70, "h200", d, Workload(isl=900, osl=900, concurrency=32))
    nominal = serve_evaluate(LLAMA70, "h200", d, Workload(isl=1000, osl=1000, concurrency=32))
    for metric in ("ttft_ms", "tpot_ms", "output_tok_s_per_gpu", "request_latency_ms"):
        assert getattr(drawn, metric) == pytest.approx(getattr(fixed, metric), rel=1e-12)
    assert drawn.ttft_ms < nominal.ttft_ms and drawn.request_latency_ms < nominal.request_latency_ms
    assert drawn.as_dict()["workload"]["range_ratio"] == 0.8


def test_drawn_output_lengths_unlock_a_prefill_first_loop():
    """SGLang runs prefill first: requests that start together decode in lockstep, and with equal output lengths
    they finish and are replaced together, so the whole set in flight arrives as one burst. Output lengths drawn
    from 0.8-1× end them over a spread of steps (200 steps for 1,000 tokens: a 1/200 share a step), so only the
    engine's burst share of them arrives together: the first token waits for fewer prompts than at fixed lengths
    of the same mean, while a lone request (no one to wait for) costs what it costs at the mean lengths. vLLM mixes
    prefill into its decode steps and never locks the whole set (test_drawn_lengths_are_served_at_their_mean)."""
    d = Deployment(engine="sglang", precision=Precision.parse("fp8"), pool=Pool(tp=8))

    def ttft(concurrency, **lengths):
        return serve_evaluate(LLAMA70, "h200", d, Workload(concurrency=concurrency, **lengths)).ttft_ms

    assert ttft(32, isl=1000, osl=1000, range_ratio=0.8) < ttft(32, isl=900, osl=900)
    assert ttft(1, isl=1000, osl=1000, range_ratio=0.8) == pytest.approx(ttft(1, isl=900, osl=900), rel=1e-12)
    # lengths drawn from [999, 1000] end a lockstep group within one step: it stays locked, its TTFT that of a
    # locked loop at the mean 999.5 tokens, halfway between those at 999 and at 1,000 (linear over one token)
    near = (ttft(32, isl=999, osl=999), ttft(32, isl=1000, osl=1000))
    assert ttft(32, isl=1000, osl=1000, range_ratio=0.999) == pytest.approx(sum(near) / 2.0, rel=1e-5)
    # the share that stays together is the aggregated burst knob (the prefill pools' pool_burst plays no part),
    # and at a share of 1 the unlocked loop is the locked one
    prec = Precision(gemm="fp8", moe="fp8")
    m, cl, lay = load_model(LLAMA70), load_cluster("h200"), PoolArrays.from_pools([Pool(tp=8)])
    drawn = Traffic.of(Workload(isl=1000, osl=1000, concurrency=32, range_ratio=0.8))
    fixed = Traffic.of(Workload(isl=900, osl=900, concurrency=32))
    sglang = load_engine("sglang")

    def knob(**knobs):
        return with_knobs(sglang, knobs)

    def agg(engine, traffic):
        return float(evaluate_aggregated(m, cl, engine, prec, lay, traffic).phase.ttft[0])

    assert agg(knob(burst=0.6), drawn) > agg(knob(burst=0.2), drawn)
    assert agg(knob(pool_burst=0.9), drawn) == agg(knob(pool_burst=0.1), drawn)
    assert agg(knob(burst=1.0), drawn) == pytest.approx(agg(sglang, fixed), rel=1e-12)


@pytest.mark.parametrize(("ratio", "isl", "message"), [
    (0.0, 1024, r"must lie in \(0, 1\]"), (1.5, 1024, r"must lie in \(0, 1\]"),
    (float("nan"), 1024, r"must lie in \(0, 1\]"), (0.05, 10, "without an input or output token"),
])
def test_bad_range_ratio(ratio, isl, message):
    with pytest.raises(ConfigError, match=message) as e:
        Workload(isl=isl, osl=1024, concurrency=1, range_ratio=ratio)
    assert e.value.field == "range_ratio"


# ---- memory ------------------------------------------------------------------------------------------------

def test_weights_per_gpu_by_hand():
    """Llama 3.1 70B on TP8, fp8 linears: the 80 layers' linears split 8 ways at 1 byte per weight
    (attention 8192·(8192 + 2·1024) + 8192·8192, MLP 3·8192·28672 per layer), the two untied vocab tables
    128,256·8192 in bf16 split 8 ways, and the norms whole in bf16."""
    m = load_model(LLAMA70)
    w = weight_bytes(m, Precision(gemm="fp8", moe="fp8"), PoolArrays.from_pools([Pool(tp=8)]))
    attention = 80 * (8192 * (8192 + 2 * 1024) + 8192 * 8192) / 8
    mlp = 80 * 3 * 8192 * 28672 / 8
    tables = 2 * 128_256 * 8192 * 2 / 8
    assert float(w.attention[0]) == attention and float(w.dense_mlp[0]) == mlp
    assert float(w.embeddings[0]) == tables
    assert float(w.other[0]) == 80 * 2 * 8192 * 2


@pytest.mark.parametrize(("engine", "precision"), [("vllm", "fp8"), ("sglang", "fp8"), ("trtllm", "fp8")])
def test_memory_fraction_sizes_the_kv_cache(engine, precision):
    """A stated memory fraction f sizes the KV cache from f of the GPU (vLLM --gpu-memory-utilization, SGLang
    --mem-fraction-static) or from f of what the weights leave free (TensorRT-LLM free_gpu_memory_fraction). The
    weights, activations and context do not move with f, so by hand: raising vLLM's or SGLang's fraction from
    0.85 to 0.95 adds 0.10 × 140.4 GiB = 14.04 GiB of KV cache per H200 (nvidia-smi's 143,771 MiB); TensorRT-LLM's
    KV cache scales as 0.95 / 0.85."""
    model = load_model("meta-llama/Llama-3.1-70B")
    kv = {}
    for f in (0.85, 0.95):
        dep = Deployment(engine=engine, precision=Precision.parse(precision), pool=Pool(tp=4), memory_fraction=f)
        est = serve_evaluate(model, "h200", dep, Workload(isl=1024, osl=1024, concurrency=8))
        kv[f] = est.memory["aggregated"]["kv_cache_gib"]
    if engine == "trtllm":
        assert kv[0.95] / kv[0.85] == pytest.approx(0.95 / 0.85)
    else:
        assert kv[0.95] - kv[0.85] == pytest.approx(14.04)
    with pytest.raises(ConfigError, match="memory_fraction"):
        Deployment(engine=engine, precision=Precision(), pool=Pool(), memory_fraction=0.0)


def test_sglang_static_fraction_holds_weights_and_kv_cache_only():
    """SGLang's --mem-fraction-static f sizes its static pool, weights and KV cache, as f of the whole GPU; the
    activations and CUDA graphs live in the rest (sglang@v0.5.8 model_runner_kv_cache_mixin.py: rest_memory =
    available_gpu_memory − total_gpu_memory × (1 − f), measured after the weights load). So at f = 0.85 on an
    H200 (140.4 GiB) its KV cache is 0.85 × 140.4 GiB less the weights, and vLLM's --gpu-memory-utilization 0.85,
    whose share also holds the activations and the CUDA context, leaves exactly those less. srt-slurm's SGLang
    prefill recipe for DeepSeek-R1 on 8 H200 runs f = 0.75 with 163,840-token chunks: their activations fit the
    25% rest (35.1 GiB), so it fits, where the vLLM reading of the fraction left it no KV cache."""
    model = load_model("meta-llama/Llama-3.1-70B")
    mem = {}
    for engine in ("sglang", "vllm"):
        dep = Deployment(engine=engine, precision=Precision.parse("fp8"), pool=Pool(tp=4), memory_fraction=0.85)
        mem[engine] = serve_evaluate(model, "h200", dep, Workload(isl=1024, osl=1024, concurrency=8)).memory[
            "aggregated"]
    sg, vl = mem["sglang"], mem["vllm"]
    assert sg["kv_cache_gib"] == pytest.approx(0.85 * sg["hbm_gib"] - sg["weights_gib"], rel=1e-12)
    assert sg["reserved_gib"] == pytest.approx(0.15 * sg["hbm_gib"], rel=1e-12)
    # the CUDA context and the TP group's NCCL buffers (planner.device, cited there), outside vLLM's share too
    context = CUDA_CONTEXT_GIB + nccl_bytes(True, 0.0) / 2**30
    assert vl["reserved_gib"] == pytest.approx(0.15 * vl["hbm_gib"] + context, rel=1e-12)
    assert sg["kv_cache_gib"] - vl["kv_cache_gib"] == pytest.approx(vl["activations_gib"] + context, rel=1e-9)
    recipe = {}
    for engine in ("sglang", "vllm"):
        dep = Deployment(engine=engine, precision=Precision.parse("fp8"), pool=Pool(tp=8, moe_ep=1),
                         memory_fraction=0.75, chunk_tokens=163840)
        recipe[engine] = serve_evaluate(load_model("deepseek-ai/DeepSeek-R1"), "h200", dep,
                                        Workload(isl=8192, osl=1024, concurrency=8)).memory["aggregated"]
    assert recipe["sglang"]["reserved_gib"] == pytest.approx(0.25 * 140.4, rel=1e-9)
    assert recipe["sglang"]["max_batch_per_rank"] >= 8
    assert recipe["vllm"]["kv_cache_gib"] == 0.0


def _trt_70b(concurrency: int, wait: BatchWait | None = None, dp: int = 1):
    # two GPUs: TP2, or two attention-DP ranks of one GPU each (TensorRT-LLM's attention DP runs tp 1)
    dep = Deployment(engine="trtllm", precision=Precision.parse("fp8"), pool=Pool(tp=2 // dp, dp=dp),
                     chunk_tokens=16384, batch_wait=wait)
    return serve_evaluate(LLAMA70, "h200", dep, Workload(isl=1024, osl=1024, concurrency=concurrency))


def test_batch_wait_holds_a_lone_prompt_for_its_timeout():
    """InferenceX's Llama 3.1 70B TensorRT-LLM recipe (benchmarks/70b_fp8_h200_trt_slurm.sh @ b328c7f59) holds
    prompts for up to 20 iterations or until 0.9 × 16,384 = 14,746 tokens gather. Four requests of 1,024 tokens
    never gather that many, so a hold lasts its 20 steps. By hand, on a TP2 worker with 4 in flight: a burst of
    b = 1 + burst·3 prompts starts a hold, a = 4 / (1 + 1,023) prompts arrive per step (one prefill step and
    1,023 decode steps per request), and the mean wait is (b·20 + 20a·10) / (b + 20a) decode steps."""
    b = 1 + load_engine("trtllm").knobs.burst * 3
    a = 4 / 1024
    steps = (b * 20 + 20 * a * 10) / (b + 20 * a)
    base, held = _trt_70b(4), _trt_70b(4, BatchWait(iters=20, ratio=0.9))
    assert held.ttft_ms - base.ttft_ms == pytest.approx(steps * held.steps["decode"]["total"] * 1e3, rel=0.01)


@pytest.mark.parametrize(("wait", "dp"), [
    (BatchWait(iters=20, ratio=0.05), 1),  # 0.05 × 16,384 = 819 tokens: one 1,024-token prompt releases itself
    (BatchWait(iters=0, ratio=0.9), 1),  # TensorRT-LLM's timeout test (count >= 0) passes at once
    (BatchWait(iters=20, ratio=0.9), 2),  # _schedule skips batch waiting under attention DP
])
def test_batch_wait_that_holds_nothing(wait, dp):
    assert _trt_70b(8, wait, dp).ttft_ms == pytest.approx(_trt_70b(8, None, dp).ttft_ms, rel=1e-9)


def test_batch_wait_trades_first_token_for_fewer_prefill_steps():
    """Held prompts go together: fewer steps carry prefill, so the decoding requests' TPOT does not rise while
    the first token waits longer."""
    base, held = _trt_70b(64), _trt_70b(64, BatchWait(iters=20, ratio=0.9))
    assert held.ttft_ms > base.ttft_ms and held.tpot_ms <= base.tpot_ms
    assert held.state["mixed_step_share"] < base.state["mixed_step_share"]
    with pytest.raises(InvalidStrategyError, match="vLLM has no batch waiting"):
        serve_evaluate(LLAMA70, "h200", Deployment(engine="vllm", precision=Precision.parse("fp8"), pool=Pool(tp=2),
                                                   batch_wait=BatchWait(iters=20, ratio=0.9)),
                       Workload(isl=1024, osl=1024, concurrency=4))
    with pytest.raises(ConfigError, match="batch_wait_ratio"):
        BatchWait(iters=20, ratio=1.5)


def _sglang_70b(concurrency: int, recv_interval: int | None = None, range_ratio: float = 0.8):
    dep = Deployment(engine="sglang", precision=Precision.parse("fp8"), pool=Pool(tp=8), recv_interval=recv_interval)
    return serve_evaluate(LLAMA70, "h200", dep, Workload(isl=1024, osl=1024, concurrency=concurrency,
                                                         range_ratio=range_ratio))


def test_a_spaced_poll_delays_the_first_token_by_half_its_decode_steps():
    """InferenceX's DeepSeek-R1 SGLang recipes (benchmarks/single_node/dsr1_fp8_b200.sh) launch
    --scheduler-recv-interval 30 from 16 requests in flight: SGLang's SchedulerRecvSkipper
    (python/sglang/srt/managers/scheduler_recv_skipper.py) then takes new requests every 30 decode steps, and at
    once after a prefill step. A request arriving while others decode waits for the next poll, (30 − 1)/2 = 14.5
    decode steps more on average (half a step was already counted), on the share of steps that only decode, with
    the client's lengths drawn from 0.8-1× (as InferenceX's are). TPOT does not change: the decoding batch runs the
    same steps. At fixed lengths the prefill-first loop stays locked: the whole set is replaced at once, on a rank
    that decodes nothing, and polled at once."""
    base, spaced = _sglang_70b(32), _sglang_70b(32, 30)
    decode_only = 1.0 - spaced.state["mixed_step_share"]
    assert spaced.ttft_ms - base.ttft_ms == pytest.approx(14.5 * decode_only * spaced.steps["decode"]["total"] * 1e3,
                                                          rel=1e-9)
    assert spaced.tpot_ms == pytest.approx(base.tpot_ms, rel=1e-12)
    # alone, no one decodes when the request arrives: the scheduler's idle loop polls at once
    assert _sglang_70b(1, 30).ttft_ms == pytest.approx(_sglang_70b(1).ttft_ms, rel=1e-12)
    assert _sglang_70b(32, 1).ttft_ms == pytest.approx(base.ttft_ms, rel=1e-12)
    assert _sglang_70b(32, 30, range_ratio=1.0).ttft_ms == pytest.approx(_sglang_70b(32, range_ratio=1.0).ttft_ms,
                                                                          rel=1e-12)


def test_a_spaced_poll_costs_nothing_to_a_queued_request_or_an_idle_rank():
    """A request that queues for a slot was polled long before one frees: with 128 in flight and room for 16, the
    spaced poll leaves TTFT as it was (lengths drawn from 0.8-1×, so the loop is not phase-locked and only the
    queue spares the request the poll). An open loop's arrival finds the rank busy as often as it holds a request,
    so the wait grows with the load, in proportion to it while the rank holds less than one request (from
    nothing on an idle rank, no jump): 0.05 requests/s wait 0.05/0.02 = 2.5 times what 0.02 do."""
    def capped(recv):
        dep = Deployment(engine="sglang", precision=Precision.parse("fp8"), pool=Pool(tp=8, batch=16),
                         recv_interval=recv)
        load = Workload(isl=1024, osl=1024, concurrency=128, range_ratio=0.8)
        return serve_evaluate(LLAMA70, "h200", dep, load).ttft_ms

    assert capped(30) == pytest.approx(capped(None), rel=1e-12)

    def opened(rate, recv):
        dep = Deployment(engine="sglang", precision=Precision.parse("fp8"), pool=Pool(tp=8), recv_interval=recv)
        return serve_evaluate(LLAMA70, "h200", dep, Workload(isl=1024, osl=1024, rate=rate)).ttft_ms

    waits = [opened(rate, 30) - opened(rate, None) for rate in (0.02, 0.05, 0.1, 0.2)]
    assert 0 < waits[0] < waits[1] < waits[2] < waits[3]
    assert waits[1] / waits[0] == pytest.approx(0.05 / 0.02, rel=0.02)


def test_a_spaced_poll_is_refused_where_it_is_not_modelled_or_sglang_refuses_it():
    """SGLang 0.5.1-0.5.10 asserts the spaced poll off under DP attention (scheduler_recv_skipper.py); in a
    disaggregated deployment the decode pool's poll would gate the prefill's KV handshake, which parplan does not
    model: both are refused with the reason."""
    fp8 = Precision.parse("fp8")
    with pytest.raises(InvalidStrategyError, match="refuses --scheduler-recv-interval with DP attention"):
        serve_evaluate("deepseek-ai/DeepSeek-R1", "b200", Deployment(
            engine="sglang", precision=fp8, pool=Pool(tp=1, dp=8, moe_ep=8), recv_interval=30),
            Workload(isl=1024, osl=1024, concurrency=64))
    with pytest.raises(InvalidStrategyError, match="aggregated workers only"):
        serve_evaluate("deepseek-ai/DeepSeek-R1", "b200", Deployment(
            engine="sglang", precision=fp8, mode="disaggregated", prefill=Pool(tp=8, moe_tp=8),
            decode=Pool(tp=8, moe_tp=8), recv_interval=30), Workload(isl=1024, osl=1024, concurrency=64))


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_only_sglang_spaces_its_polls(engine):
    with pytest.raises(InvalidStrategyError, match="polls for new requests every step"):
        serve_evaluate(LLAMA70, "h200", Deployment(engine=engine, precision=Precision.parse("fp8"), pool=Pool(tp=8),
                                                   recv_interval=30), Workload(isl=1024, osl=1024, concurrency=32))
    with pytest.raises(ConfigError, match="recv_interval"):
        Deployment(engine=engine, precision=Precision.parse("fp8"), pool=Pool(tp=8), recv_interval=0)


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_an_fp8_kv_cache_speeds_decode_attention_where_read_natively(engine):
    """An fp8 cache holds twice the tokens in every engine, but only a kernel that reads it natively
    (TensorRT-LLM's XQA) streams half the bytes: vLLM's decode rate gains 0.4-5.5% from it (vllm-project/vllm
    issue #42058), so its decode attention is costed as with bf16. Llama 3.1 70B on TP8, 64 in flight of
    1,024/1,024 tokens: the decode attention is memory-bound, so TensorRT-LLM's takes half the streaming time
    plus the same per-layer kernel time (above half, well below the whole)."""
    attention, kv = {}, {}
    for dtype in ("bf16", "fp8"):
        dep = Deployment(engine=engine, precision=Precision(gemm="fp8", moe="fp8", kv_cache=dtype), pool=Pool(tp=8))
        est = serve_evaluate(LLAMA70, "h200", dep, Workload(isl=1024, osl=1024, concurrency=64))
        attention[dtype], kv[dtype] = est.steps["decode"]["attention"], est.memory["aggregated"]["kv_per_request_gib"]
    assert kv["fp8"] == pytest.approx(kv["bf16"] / 2, rel=0.02)
    if engine == "vllm":
        assert attention["fp8"] == pytest.approx(attention["bf16"], rel=1e-12)
    else:
        assert 0.5 * attention["bf16"] < attention["fp8"] < 0.7 * attention["bf16"]


def test_a_larger_cuda_graph_capture_launches_only_the_attention_cores():
    """vLLM captures piecewise CUDA graphs for steps of up to --max-cudagraph-capture-size tokens (512 by default):
    a 1,024-token prompt beside 3 decode tokens runs every kernel eagerly, but with the InferenceX gpt-oss recipes'
    2,048 only the 80 attention cores of Llama 3.1 70B launch between graphs. By hand, the step's host time is the
    engine's step time plus 80 launches; eagerly, every kernel launches: per layer at least 4 fp8 GEMMs and their
    activation quantisation (8), 2 attention kernels, 3 elementwise kernels and 1 all-reduce, 14 in all, so over
    80 layers more than 10 times the 80 (step.kernels)."""
    knobs = load_engine("vllm").knobs
    host = {}
    for capture in (None, 2048):
        dep = Deployment(engine="vllm", precision=Precision.parse("fp8"), pool=Pool(tp=8), cuda_graph_max_batch=capture)
        host[capture] = serve_evaluate(LLAMA70, "h100", dep, Workload(isl=1024, osl=1024, concurrency=4)).steps[
            "mixed"]["host"]
    assert host[2048] == pytest.approx(knobs.decode_step_ms * 1e-3 + 80 * knobs.launch_us * 1e-6, rel=1e-9)
    assert host[None] > 10 * host[2048]
    with pytest.raises(ConfigError, match="cuda_graph_max_batch"):
        Deployment(engine="vllm", precision=Precision(), pool=Pool(), cuda_graph_max_batch=0)


def test_sglang_graph_batch_follows_the_gpu_and_the_worker():
    """SGLang's --cuda-graph-max-bs default (server_args.py _handle_gpu_memory_settings; aiconfigurator's
    sglang_backend.py @095f58a carries the same tiers): 256 for a worker of fewer than 4 GPUs on H100/H200-class
    GPUs (60-160 GB), 512 from 4 GPUs and on B200 (179 GiB); 32 / 160 on an A100 40GB. A launch setting replaces
    it, and a pool capped at a batch captures that batch, as parplan launches it. A decode batch of
    300 on one H200 replays no graph: every kernel launches from the host, while on four H200 or one B200 the
    same batch replays a graph. SGLang's memory reserve counts 2 MB per graph batch and 1,024 MB per 8 GPUs of its
    --tp-size (every attention-DP rank): 512 + 1.5·8,192 + 2·256 + 1,024/8 = 13,440 MB for one H200, and with 8
    DP ranks of batch 64 (their DP term 3 MB per graph batch and rank) 512 + 12,288 + 2·64 + 1,024 + 3·64·8."""
    from parplan.serving.memory import sglang_reserve_gib

    sglang = load_engine("sglang")
    uncapped = np.array([np.inf])

    def graphs(engine, hbm, gpus, batch=uncapped):
        return float(engine.graph_batch(hbm, np.array([float(gpus)]), batch)[0])

    assert (graphs(sglang, 140.4, 2), graphs(sglang, 140.4, 8)) == (256, 512)
    assert (graphs(sglang, 179.0, 1), graphs(sglang, 40.0, 1)) == (512, 32)
    assert sglang.default_chunk_tokens(load_cluster("a100-40gb").gpu) == 4096
    assert graphs(sglang.configured(cuda_graph_max_batch=64), 140.4, 8) == 64
    # a pool capped at 384 launches with --cuda-graph-max-bs 384 (export.py), also on one H100/H200
    assert graphs(sglang, 140.4, 1, np.array([384.0])) == 384
    one = sglang_reserve_gib(sglang, 140.4, 8192.0, PoolArrays.from_pools([Pool(tp=1)]))
    assert float(one[0]) == pytest.approx((512 + 1.5 * 8192 + 2 * 256 + 1024 / 8) / 1024, rel=1e-12)
    dp8 = sglang_reserve_gib(sglang, 140.4, 8192.0, PoolArrays.from_pools([Pool(tp=1, dp=8, moe_ep=8, batch=64)]))
    assert float(dp8[0]) == pytest.approx((512 + 1.5 * 8192 + 2 * 64 + 1024 + 3 * 64 * 8) / 1024, rel=1e-12)

    def host(cluster: str, tp: int) -> float:
        m, cl = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_cluster(cluster)
        sm = StepModel(m, cl, sglang, Precision.parse("fp8"), PoolArrays.from_pools([Pool(tp=tp)]))
        return float(sm.step(np.array([300.0]), np.array([2048.0]), 0.0, 0.0, 0.0).host[0])

    # eagerly, each of the 32 layers launches at least 13 kernels at TP1: 4 fp8 GEMMs and their activation
    # quantisation (8), 2 attention kernels, 3 elementwise kernels (no all-reduce on one GPU)
    graphed = sglang.knobs.decode_step_ms * 1e-3
    assert host("h200", 1) >= graphed + 32 * 13 * sglang.knobs.launch_us * 1e-6
    assert host("h200", 4) == pytest.approx(graphed, rel=1e-9)
    assert host("b200", 1) == pytest.approx(graphed, rel=1e-9)


def test_dp_balance_hold_by_hand():
    """TensorRT-LLM's attention-DP balance holds prompts until every rank has one (py_executor.py
    _balance_adp_requests). With a prompts per step arriving at each of dp ranks, the last of the other dp − 1
    ranks gets one after H_{dp−1}/a steps on average (H_7 = 1 + 1/2 + … + 1/7 = 363/140).
    Slow arrivals, InferenceX's DeepSeek-R1 recipe (timeout_iters 60, batching_wait_iters 0): 8 ranks of 8
    requests of 1,024 output tokens, a = 8/1,024: 363/140 · 128 = 332 steps > 60, so the timeout releases. A burst
    of 2 starts the hold, 8a = 1/16 prompts a step join: mean wait (2·60 + (60/16)·60/2) / (2 + 60/16) steps,
    and each rank prefills (2 + 60/16) / 8 prompts. Fast arrivals, a = 1/2 on 4 ranks with batching_wait_iters 2:
    H_3/a = (11/6)·2 steps plus 2, then (1·L + 2L·L/2) / (1 + 2L) with L = 11/3 + 2."""
    assert float(harmonic(np.array([7.0]))[0]) == pytest.approx(363 / 140, rel=1e-12)
    held, per_rank = dp_balance(DpBalance(timeout_iters=60), np.array([2.0]), np.array([8 / 1024]),
                                np.array([8.0]), np.array([True]))
    assert float(held[0]) == pytest.approx((2 * 60 + 60 / 16 * 60 / 2) / (2 + 60 / 16), rel=1e-12)
    assert float(per_rank[0]) == pytest.approx((2 + 60 / 16) / 8, rel=1e-12)
    held, per_rank = dp_balance(DpBalance(timeout_iters=60, batching_wait_iters=2), np.array([1.0]),
                                np.array([0.5]), np.array([4.0]), np.array([True]))
    steps = 11 / 3 + 2
    assert float(held[0]) == pytest.approx((steps + 2 * steps * steps / 2) / (1 + 2 * steps), rel=1e-12)
    assert float(per_rank[0]) == pytest.approx((1 + 2 * steps) / 4, rel=1e-12)


DP8 = Pool(tp=1, dp=8, moe_ep=8)


def _trt_dsv3(balance: DpBalance | None, pool: Pool = DP8, engine: str = "trtllm"):
    dep = Deployment(engine=engine, precision=Precision.parse("fp8"), pool=pool, dp_balance=balance)
    return serve_evaluate(DSV3, "h200", dep, Workload(isl=1024, osl=1024, concurrency=64))


def test_dp_balance_trades_first_token_for_aligned_prefill():
    """Balanced ranks prefill in the same steps, so far fewer of the group's steps carry prefill than the
    1 − (1 − f)^8 of ranks that admit prompts on their own: TPOT falls while the first token waits for the
    other ranks (the trade NVIDIA's ADP Balance blog reports: throughput up, TTFT up)."""
    base, held = _trt_dsv3(None), _trt_dsv3(DpBalance(timeout_iters=60))
    assert held.ttft_ms > base.ttft_ms and held.tpot_ms < base.tpot_ms
    assert held.state["mixed_step_share"] < base.state["mixed_step_share"]
    assert held.output_tok_s_per_gpu > base.output_tok_s_per_gpu


@pytest.mark.parametrize(("balance", "pool"), [
    (DpBalance(timeout_iters=0, batching_wait_iters=10), DP8),  # count >= 0 at once
    (DpBalance(timeout_iters=60), Pool(tp=8, moe_ep=8)),  # no attention DP: _schedule skips the balance
])
def test_dp_balance_that_holds_nothing(balance, pool):
    assert _trt_dsv3(balance, pool).ttft_ms == pytest.approx(_trt_dsv3(None, pool).ttft_ms, rel=1e-12)


def test_dp_balance_is_tensorrt_llms():
    with pytest.raises(InvalidStrategyError, match="SGLang has no attention-DP balance"):
        _trt_dsv3(DpBalance(timeout_iters=60), engine="sglang")
    with pytest.raises(ConfigError, match="dp_balance_wait_iters"):
        DpBalance(timeout_iters=60, batching_wait_iters=-1)


def test_experts_spread_over_ep():
    """DeepSeek-V3 on 8 GPUs with EP8 and 32 redundant experts: each GPU holds (256 + 32)/8 = 36 experts of
    3·7168·2048 fp8 weights in each of the 58 MoE layers."""
    m = load_model(DSV3)
    w = weight_bytes(m, Precision(gemm="fp8", moe="fp8"), PoolArrays.from_pools([Pool(tp=8, moe_ep=8,
                                                                                       redundant_experts=32)]))
    routed = 58 * 36 * 3 * 7168 * 2048
    router = 58 * 7168 * 256 * 2
    shared = 58 * 3 * 7168 * 2048 / 8
    assert float(w.experts[0]) == pytest.approx(routed + router + shared, rel=1e-12)


# ---- bad input ---------------------------------------------------------------------------------------------

def test_bad_workloads_and_layouts():
    with pytest.raises(ConfigError, match="isl"):
        Workload(isl=0, osl=10, concurrency=1)
    with pytest.raises(ConfigError, match="exactly one"):
        Workload(isl=10, osl=10)
    with pytest.raises(InvalidStrategyError, match="heads"):
        serve_evaluate(DSV3, "h200", Deployment(engine="sglang", precision=Precision(gemm="fp8", moe="fp8"),
                                                pool=Pool(tp=3, moe_ep=3)), Workload(isl=10, osl=10, concurrency=1))
    with pytest.raises(InvalidStrategyError, match="experts"):
        serve_evaluate(DSV3, "h200", Deployment(engine="sglang", precision=Precision(gemm="fp8", moe="fp8"),
                                                pool=Pool(tp=1, dp=6, moe_ep=6)),
                       Workload(isl=10, osl=10, concurrency=1))
    with pytest.raises(ConfigError, match="context"):
        serve_evaluate(LLAMA70, "h100", Deployment(engine="vllm", precision=Precision(), pool=Pool(tp=8)),
                       Workload(isl=200_000, osl=10, concurrency=1))
    with pytest.raises(InvalidStrategyError, match="fp8"):
        serve_evaluate(LLAMA70, "a100-80gb", Deployment(engine="vllm", precision=Precision(gemm="fp8", moe="fp8"),
                                                        pool=Pool(tp=8)), Workload(isl=10, osl=10, concurrency=1))


def test_fit_loss_caps_each_row_and_reports_ape():
    """The calibration's loss: mean |log(pred/meas)| of TPOT (×1.5) and TTFT, each row capped (0.4, 0.5), so
    a row off by 10× weighs as one off by 1.5× (TPOT) or 1.65× (TTFT); its report is the median
    |pred/meas − 1|."""
    from parplan.serving.calibrate import loss, median_ape
    from parplan.serving.cases import Case
    from parplan.serving.validate import CaseResult

    def result(tpot_ratio: float, ttft_ratio: float) -> CaseResult:
        case = Case(id="x", source="", model="m", system="s", cluster=None, engine="vllm", deployment=None,
                    workload=None, measured={"tpot_ms": 10.0, "ttft_ms": 100.0})
        return CaseResult(case, {"tpot_ms": 10.0 * tpot_ratio, "ttft_ms": 100.0 * ttft_ratio}, None)

    rows = [result(1.1, 1.0), result(0.5, 1.0), result(0.1, 20.0)]
    assert median_ape(rows, "tpot_ms") == pytest.approx(0.5)  # APEs 0.1, 0.5, 0.9
    # TPOT: (ln 1.1 + 0.4 capped (ln 2) + 0.4 capped (ln 10)) / 3 × 1.5; TTFT: (0 + 0 + 0.5 capped) / 3
    expected = 1.5 * (np.log(1.1) + 0.4 + 0.4) / 3 + 0.5 / 3
    assert loss(rows) == pytest.approx(expected)


def test_a_fit_of_some_knobs_keeps_the_others_at_their_start():
    """fit_engine(names=...) moves only the named knobs; the others take `start`'s values (the engine's where it
    has none), in the search and in the reported fit alike; a name that is not a knob is refused."""
    from parplan.serving.calibrate import FITTED, fit_engine, median_ape
    from parplan.serving.cases import read_measured_csv
    from parplan.serving.validate import evaluate_cases, shipped_files

    rows = [c for c in read_measured_csv(shipped_files()[0]) if c.engine == "vllm" and not c.refused][:12]
    vllm = load_engine("vllm")
    fit = fit_engine(rows, vllm, start={"burst": 0.3}, max_evaluations=6, names=("request_ms",))
    assert fit.names == ("request_ms",) and fit.knobs["burst"] == 0.3
    assert fit.knobs["request_ms"] != vllm.knobs.request_ms  # the named knob moved
    assert all(fit.knobs[k] == getattr(vllm.knobs, k) for k in FITTED if k not in ("burst", "request_ms"))
    final = evaluate_cases(rows, {"vllm": with_knobs(vllm, fit.knobs)})
    assert fit.ttft_median_ape == median_ape(final, "ttft_ms")
    with pytest.raises(ValueError, match="knobs to fit"):
        fit_engine(rows, vllm, names=("bogus",))


def test_published_run_keeps_its_token_budget():
    """A max-throughput run states its step budget (TensorRT-LLM blog Best_perf_practice_on_DeepSeek-R1:
    trtllm-bench --max_num_tokens 1536 on B200, 1151 on H200): the case runs with it, not the engine default."""
    from parplan.serving.published import read_published_yaml
    from parplan.serving.validate import shipped_files

    cases = {c.id: c for c in read_published_yaml(shipped_files()[1])}
    assert cases["trtllm_dsr1_b200_max_tput_bf16kv"].deployment.chunk_tokens == 1536
    assert cases["trtllm_dsr1_h200_max_tput"].deployment.chunk_tokens == 1151


def test_a_curated_anchor_that_is_a_shipped_row_is_predicted_as_that_row():
    """13 of aiconfigurator's curated rows (published_serving.yaml: 9 from tools/accuracy_tracking/silicon_refs.csv, 4
    from silicon_sample.csv, the file the CSV was copied from) are measurements the shipped CSV holds too: equal
    TTFT and TPOT (to 0.5%), the same model, GPU, lengths, concurrency and layout. Their `launch:` sections and
    workload.range_ratio state the settings the twin row carries (its public launch script, SOURCES.md rules 3,
    4 and 7), so each is predicted exactly as its twin; an anchor left with the generator's defaults, as all
    were once, fails here."""
    from parplan.serving.cases import read_measured_csv
    from parplan.serving.published import read_published_yaml
    from parplan.serving.validate import evaluate_cases, shipped_files

    rows = [c for c in read_measured_csv(shipped_files()[0]) if not c.refused]
    anchors = [c for c in read_published_yaml(shipped_files()[1]) if c.kind == "closed_loop" and not c.refused]
    pairs = []
    for a in anchors:
        twins = [r for r in rows
                 if all(abs(r.measured[k] / a.measured[k] - 1.0) < 5e-3 for k in ("ttft_ms", "tpot_ms"))]
        assert len(twins) <= 1, a.id
        pairs += [(a, t) for t in twins]
    assert len(pairs) == 13
    for (a, t), ra, rt in zip(pairs, evaluate_cases([a for a, _ in pairs]), evaluate_cases([t for _, t in pairs]),
                              strict=True):
        assert (a.model, a.workload.isl, a.workload.osl, a.workload.concurrency) == (
            t.model, t.workload.isl, t.workload.osl, t.workload.concurrency), a.id
        assert ra.error == rt.error, a.id  # DeepSeek-R1 on GB200 under SGLang fits as the TP 4 its script runs (rule 6)
        for metric in ("ttft_ms", "tpot_ms") if rt.error is None else ():
            assert ra.predicted[metric] == pytest.approx(rt.predicted[metric], rel=1e-9), (a.id, metric)


def test_no_shipped_deployment_keeps_a_layout_the_export_multiplied():
    """InferenceX's exports recorded some aggregated layouts of a GPUs per worker as a² (tp 16 with MoE 4×4 for
    tp 4 × EP 4 on an 8-GPU node): SOURCES.md rule 2 corrected the CSV's rows, rule 7 the curated anchor of the
    same configuration (DeepSeek on B300 under SGLang, cfg717). The signature, moe_tp = moe_ep = a > 1 with
    tp·dp = a², is left in neither file."""
    from parplan.serving.cases import read_measured_csv
    from parplan.serving.published import read_published_yaml
    from parplan.serving.validate import shipped_files

    cases = read_measured_csv(shipped_files()[0]) + read_published_yaml(shipped_files()[1])
    pools = [c.deployment.pool for c in cases if c.deployment is not None and c.deployment.pool is not None]
    assert len(pools) > 1000
    signature = [p for p in pools if p.moe_tp and p.moe_tp == p.moe_ep > 1 and p.tp * p.dp == p.moe_tp * p.moe_ep]
    assert not signature
    # the other form, tp a × dp a with EP a² (a = 4: 16 GPUs on the 8-GPU systems of the db-dump export's vLLM rows)
    assert not [p for p in pools if p.tp == p.dp == 4 and p.moe_ep == 16]


def test_a_published_entry_states_its_launch_settings(tmp_path):
    """A closed-loop entry's `launch:` section takes the measured CSV's launch columns (cases.LAUNCH_COLUMNS), read
    and checked by the same code, and workload.range_ratio the client's length draw. A setting it does not know, a
    value outside the setting's own rule, a length draw its lengths cannot make, a KV-cache format the precision
    contradicts, a cap on running requests for a disaggregated deployment, or a launch section on another kind of
    entry is an error naming the file, the entry and the field; speculative decoding without its acceptance is
    refused, as a CSV row is (so is a value past the model's limits, such as a budget beyond its context)."""
    from parplan.serving.published import read_published_yaml

    entry = """- id: x
  kind: e2e_serving_fixed_concurrency
  model: meta-llama/Llama-3.1-70B
  gpu: {type: h200_sxm}
  engine: trtllm 1.2.0
  layout: {tp: 8}
  precision: {gemm_and_moe: fp8}
  workload: {isl: 1024, osl: 1024, concurrency: 16, range_ratio: 0.8}
  launch: {kv_cache_dtype: bf16, chunk_tokens: 16384, memory_fraction: 0.85, overlap_scheduler: true,
           batch_wait_iters: 20, batch_wait_ratio: 0.9, max_running: 64, cuda_graph_max_batch: 32}
  measured: {ttft_ms: 100.0, tpot_ms: 10.0}
"""

    def read(text: str):
        path = tmp_path / "p.yaml"
        path.write_text(text)
        return read_published_yaml(path)[0]

    case = read(entry)
    d = case.deployment
    assert case.refused is None and case.workload.range_ratio == 0.8
    assert (d.precision.kv_cache, d.chunk_tokens, d.memory_fraction, d.overlap_scheduler) == ("bf16", 16384, 0.85, True)
    assert d.batch_wait == BatchWait(iters=20, ratio=0.9) and d.pool.batch == 64 and d.cuda_graph_max_batch == 32
    # unstated: aiconfigurator's generator default (cases.MEASURED_OVERLAP), fixed lengths
    unstated = read(entry.replace(" overlap_scheduler: true,", "").replace(", range_ratio: 0.8", ""))
    assert unstated.deployment.overlap_scheduler is False and unstated.workload.range_ratio == 1.0
    for good, bad, field in (("chunk_tokens: 16384", "chunk_tokens: -4", "launch.chunk_tokens"),
                             ("memory_fraction: 0.85", "memory_fraction: 1.5", "launch.memory_fraction"),
                             ("batch_wait_ratio: 0.9", "batch_wait_ratio: null", "launch.batch_wait_ratio"),
                             ("overlap_scheduler: true", "overlap: true", "launch.overlap"),
                             ("range_ratio: 0.8", "range_ratio: 1.5", "workload.range_ratio"),
                             ("isl: 1024, osl: 1024, concurrency: 16, range_ratio: 0.8",
                              "isl: 16, osl: 16, concurrency: 16, range_ratio: 0.01", "workload.range_ratio"),
                             ("precision: {gemm_and_moe: fp8}", "precision: {gemm_and_moe: fp8, kv_cache: fp8}",
                              "launch.kv_cache_dtype"),
                             ("kind: e2e_serving_fixed_concurrency", "kind: e2e_offline", "launch")):
        with pytest.raises(ConfigError, match=r"entry 'x'") as e:
            read(entry.replace(good, bad))
        assert e.value.field == field and e.value.file.endswith("p.yaml")
    with pytest.raises(ConfigError) as e:
        read(entry.replace("layout: {tp: 8}", "layout: {prefill: {tp: 8}, decode: {tp: 8}}"))
    assert e.value.field == "launch.max_running"
    drafted = read(entry.replace("max_running: 64", "mtp: 3"))
    assert drafted.refused and "acceptance" in drafted.refused


def test_measured_rows_keep_aiconfigurator_token_budget():
    """aiconfigurator's generator gives an aggregated vLLM or TensorRT-LLM worker max_num_tokens = max_batch_size
    + ISL + 1500 (rule_plugin/vllm.rule, trtllm.rule): the Llama 3.1 8B FP8 row of its gap analysis measured at
    batch 112, ISL 1,000 runs with 112 + 1,000 + 1,500 = 2,612 tokens a step; SGLang's rule leaves
    chunked_prefill_size at its default. A row whose
    public launch script states its budget keeps that instead: InferenceX's dsr1_fp4_b200 SGLang script passes
    --chunked-prefill-size 16384 (data/serving/SOURCES.md, rule 3). An InferenceX row whose script was not read
    keeps the engine's default budget (None): no rule of aiconfigurator launched it."""
    from parplan.serving.cases import read_measured_csv
    from parplan.serving.validate import shipped_files

    cases = {c.id: c for c in read_measured_csv(shipped_files()[0])}
    row = cases["nvidia_llama_3_1_8b_instruct_fp8_nvidia_llama_3_1_8b_instruct_fp8_h200_sxm_vllm_agg_1000x100_c112_tp1"
                "_epnone_1"]
    assert row.deployment.chunk_tokens == 2612
    sglang = cases["meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h200_sxm_sglang_agg_1000x1000"
                   "_c352_tp1_epnone_9"]
    assert sglang.deployment.chunk_tokens is None
    recipe = cases["2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c128_tp4_0_ep4_0_291"]
    assert recipe.deployment.chunk_tokens == 16384 and recipe.deployment.pool.batch == 256
    unread = cases["2026_04_06_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x1024_c16_tp2_ep1_1331"]
    assert unread.deployment.chunk_tokens is None


def test_overlap_scheduler_hides_launches_behind_the_gpu():
    """TensorRT-LLM's overlap scheduler (llm_args disable_overlap_scheduler default False) launches a step while
    the GPU runs the one before: an eager step takes the longer of its launches and its GPU work, plus the step's
    host time, instead of their sum. aiconfigurator's measured rows ran with it off (its templates' default,
    disable_overlap_scheduler true, which the rows follow: cases.MEASURED_OVERLAP), so the CSV reader marks them;
    the rows of InferenceX's scripts, which never disable it, carry it on or keep the engine's default, on
    (data/serving/SOURCES.md, rule 3)."""
    from parplan.serving.cases import GENERATED_SOURCE, read_measured_csv
    from parplan.serving.validate import shipped_files

    m, cl = load_model(LLAMA70), load_cluster("h100")
    lay = PoolArrays.from_pools([Pool(tp=8)])
    on = load_engine("trtllm")
    off = on.configured(overlap_scheduler=False)
    assert on.overlap_scheduler and not off.overlap_scheduler
    args = (np.array([64.0]), np.array([2048.0]), np.array([1024.0]), np.array([512.0]), np.array([1.0]))
    a = StepModel(m, cl, on, Precision(gemm="fp8", moe="fp8"), lay).step(*args, mixed=True)
    b = StepModel(m, cl, off, Precision(gemm="fp8", moe="fp8"), lay).step(*args, mixed=True)
    gpu = float(b.total[0] - b.host[0])
    launch = float(b.host[0]) - on.knobs.decode_step_ms * 1e-3
    assert float(a.total[0]) == pytest.approx(max(gpu, launch) + on.knobs.decode_step_ms * 1e-3, rel=1e-12)
    rows = [c for c in read_measured_csv(shipped_files()[0]) if c.engine == "trtllm" and c.deployment]
    launched = [c for c in rows if c.deployment.overlap_scheduler]
    # InferenceX's ids: 2026_04_06_deepseek_r1_..., or dsr1_b200_trtllm_... in the db-dump export
    assert launched and all(any(m in c.id for m in ("llama_3_1_70b", "gpt_oss_120b", "deepseek_r1", "dsr1_"))
                            for c in launched)
    # aiconfigurator's rows all off; InferenceX's on where their scripts were read, else the default (on)
    assert {(GENERATED_SOURCE in c.source, c.deployment.overlap_scheduler) for c in rows} == {
        (True, False), (False, True), (False, None)}


def _shipped_rows(keep: Callable[[dict[str, str]], bool]) -> list[dict[str, str]]:
    """The shipped measured CSV's rows (as text) that `keep` selects."""
    import csv

    from parplan.serving.validate import shipped_files

    with shipped_files()[0].open(newline="") as f:
        return [r for r in csv.DictReader(f) if keep(r)]


def _db_dump_disaggregated(row: dict[str, str]) -> bool:
    return row["mode"] == "disagg" and row["silicon_data_source"].startswith("db-dump")


def _concurrency(row: dict[str, str]) -> int:
    return int(re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"]).group(1))


def test_disaggregated_rows_of_the_db_dump_fill_their_decode_ranks():
    """InferenceX's `db-dump` export records a disaggregated row's decode_batch_size per attention rank: the
    concurrency spread over decode workers × attention-DP ranks (SOURCES.md rule 6 corrected 3 Kimi-K2.5 rows whose
    decode pool runs data-parallel 16, where the export had recorded one worker's whole batch). A cleaning edit
    that breaks this is caught here. All 123 of them (SOURCES.md rule 6 matched each to its recipe)."""
    rows = _shipped_rows(_db_dump_disaggregated)
    assert len(rows) == 123
    for r in rows:
        ranks = int(r["decode_attention_dp_size"] or 1) * int(r["decode_num_workers"])
        assert int(r["decode_batch_size"]) * ranks == _concurrency(r), r["id"]


def test_gb200_sweeps_spread_their_concurrency_over_the_decode_ranks():
    """The 33 GB200 Dynamo sweeps SOURCES.md rule 8 read as disaggregated state their decode batch as the file's
    other disaggregated rows do, the concurrency over decode workers x attention-DP ranks, rounded up where it does
    not divide (1,075 over DEP16: 68), and their GPUs add up to the count the export recorded as tp (in the id):
    4 GPUs a context tray plus the generation servers for TensorRT-LLM (36 = 4 + 4 x 8), 72 for SGLang."""
    import math

    rows = _shipped_rows(lambda r: r["id"].startswith("2026_04_06_deepseek_r1_gb200"))
    assert len(rows) == 33 and {r["mode"] for r in rows} == {"disagg"}
    for r in rows:
        ranks = {role: int(r[f"{role}_num_workers"]) * int(r[f"{role}_tp_size"]) * int(r[f"{role}_attention_dp_size"])
                 for role in ("prefill", "decode")}
        decode_ranks = int(r["decode_num_workers"]) * int(r["decode_attention_dp_size"])
        assert int(r["decode_batch_size"]) == math.ceil(_concurrency(r) / decode_ranks), r["id"]
        assert sum(ranks.values()) == int(re.search(r"_tp(\d+)_", r["id"]).group(1)), r["id"]


def test_tensorrt_llm_exchanges_moe_tokens_as_its_selector_does():
    """TensorRT-LLM's CutlassFusedMoE runs its all-to-all only with MNNVL, attention DP and moe_ep above the top-k
    (fused_moe_cutlass.py @7b437aa enable_alltoall), and otherwise gathers the inputs and reduce-scatters the
    outputs. DeepSeek-V3 routes each token to 8 experts (config.json num_experts_per_tok): DEP8 on one 8-GPU
    B200 node gathers, DEP8 in a GB200 rack too (8 is not above 8), DEP16 in the rack exchanges all-to-all. A
    deployment's own exchange is kept."""
    from parplan.names import A2A_BACKENDS

    m, engine = load_model(DSV3), load_engine("trtllm")
    assert m.moe.top_k == 8 and engine.a2a == "alltoall" and engine.a2a_needs_mnnvl

    def exchange(cluster: str, dp: int, a2a: str = "auto") -> str:
        lay = PoolArrays.from_pools([Pool(tp=1, dp=dp, moe_ep=dp, a2a=a2a)])
        sm = StepModel(m, load_cluster(cluster, gpus=dp), engine, Precision(gemm="fp4", moe="fp4"), lay)
        return A2A_BACKENDS[int(sm.a2a_backend(False)[0])]

    assert exchange("b200", 8) == "allgather"
    assert exchange("gb200-nvl72", 8) == "allgather"
    assert exchange("gb200-nvl72", 16) == "alltoall"
    assert exchange("b200", 8, "alltoall") == "alltoall"
    assert not load_engine("sglang").a2a_needs_mnnvl and load_engine("sglang").a2a == "allgather"


def test_tensorrt_llm_gathers_nvfp4_inputs_quantised():
    """With NVFP4 experts TensorRT-LLM quantises the MoE inputs before its attention-DP allgather (half a byte
    per element and one fp8 scale per 16: 0.5625 bytes) and reduce-scatters 16-bit outputs (fused_moe_cutlass.py
    @7b437aa, 'fp4_allgather'), where SGLang gathers 16-bit activations. So on one DEP8 B200 node, for the same
    tokens, TensorRT-LLM's exchange is that of SGLang less the all-gather's 2 - 0.5625 bytes per element, and with
    fp8 experts (DeepSeek's block-scaled fp8, quantised inside the MoE op) the two are the same."""
    from parplan.hardware.efficiency import Collective, collective_time

    m, cl = load_model(DSV3), load_cluster("b200", gpus=8)
    lay = PoolArrays.from_pools([Pool(tp=1, dp=8, moe_ep=8, a2a="allgather")])
    tokens = np.array([64.0])

    def exchange(engine: str, moe: str) -> float:
        sm = StepModel(m, cl, load_engine(engine), Precision(gemm=moe, moe=moe), lay)
        return float(sm._moe_exchange(tokens, False)[0])

    gathered = 64 * 8 * m.hidden  # elements every rank receives
    gather = {b: float(collective_time(cl, Collective.ALL_GATHER, gathered * b, 8, 8)) for b in (0.5625, 2.0)}
    assert exchange("sglang", "fp4") - exchange("trtllm", "fp4") == pytest.approx(gather[2.0] - gather[0.5625],
                                                                                  rel=1e-9)
    assert exchange("trtllm", "fp8") == pytest.approx(exchange("sglang", "fp8"), rel=1e-12)


def test_a_disaggregated_prefill_pool_runs_without_the_overlap_scheduler():
    """Every public recipe of a disaggregated TensorRT-LLM deployment disables the overlap scheduler on its prefill
    workers and leaves it on for decode (srt-slurm recipes/trtllm @75f6e32a: 297 of 297 prefill sections;
    aiconfigurator rule_plugin/trtllm.rule: `prefill disable_overlap_scheduler = true`), so a deployment's setting
    reaches its decode pool only: the prefill latency is the same with it on or off, the decode step is not (an
    eager decode step past the captured CUDA-graph batch takes the longer of its launches and its GPU work)."""
    engine = load_engine("trtllm")
    assert engine.overlap_scheduler and not engine.prefill_pool().overlap_scheduler
    assert not engine.configured(overlap_scheduler=False).prefill_pool().overlap_scheduler

    def state(overlap: bool) -> dict[str, float]:
        d = Deployment(engine="trtllm", precision=Precision(gemm="fp8", moe="fp8"), mode="disaggregated",
                       prefill=Pool(tp=8), decode=Pool(tp=8), overlap_scheduler=overlap, cuda_graph_max_batch=8)
        est = serve_evaluate(LLAMA70, "h200", d, Workload(isl=1024, osl=256, concurrency=64))
        return est.state | {"decode_step": est.steps["decode"]["total"]}

    on, off = state(True), state(False)
    assert on["prefill_latency_ms"] == pytest.approx(off["prefill_latency_ms"], rel=1e-12)
    assert on["decode_step"] < off["decode_step"]


def test_finite_run_goes_in_whole_waves():
    """trtllm-bench queues all N requests of equal lengths; with B running at once they finish in ⌈N/B⌉ waves, the
    last one partial, so the run keeps (N/B)/⌈N/B⌉ of the steady throughput: 3,000 requests (perf-overview.md's
    count for 128/2048) with 1,237 at once run 3 waves, 3000/1237/3 = 80.8%; with 1,000 at once, all of it."""
    from parplan.serving.published import _whole_waves

    assert _whole_waves(3000, 1237) == pytest.approx(3000 / 1237 / 3, rel=1e-12)
    assert _whole_waves(3000, 1000) == pytest.approx(1.0)
    assert _whole_waves(0, 1000) == 1.0  # the run's request count not stated: steady state


def test_a_blank_precision_text_states_no_format():
    """A published entry's precision field left empty states no format (the engine's default then applies);
    it reached the catch-all as an IndexError (found by tests/test_hostile_properties.py)."""
    from parplan.serving.published import _format

    assert _format("") is None and _format("   ") is None and _format("fp8 (block-scaled)") == "fp8"


def test_a_pcie_server_all_reduces_through_nccl_not_the_engines_one_shot_kernel():
    """vLLM and SGLang run their one-shot custom all-reduce over NVLink but turn it off on more than two PCIe-only
    GPUs (vllm custom_all_reduce.py), so a TP8 all-reduce of a decode step's few KiB on the RTX PRO 6000 server
    costs what NCCL measures there: 25.5 us at 8 GPUs for messages of 8 KiB and less (aiconfigurator @095f58a,
    rtx_pro_6000_server comm/nccl/2.29.2/nccl_perf.parquet; the engines' custom-AR tables 24-38 us), not the
    engines' 7.2 us NVLink latency that an 8x H100 keeps, and a pair of PCIe GPUs keeps too (the kernel's check
    applies beyond two)."""
    m = load_model(LLAMA70)
    lay = PoolArrays.from_pools([Pool(tp=8)])
    nbytes = np.array([8192.0 * 2])

    def per_call(cluster: str, tp: int = 8) -> float:
        sm = StepModel(m, load_cluster(cluster), load_engine("vllm"), Precision.parse("fp8"), lay)
        return float(sm.all_reduce(nbytes, np.array([tp]))[0]) * 1e6

    assert 20.0 <= per_call("rtx-pro-6000") <= 38.0
    assert per_call("h100") < 10.0 and per_call("rtx-pro-6000", tp=2) < 10.0


def test_only_an_engine_that_leaves_nccls_nvls_on_all_reduces_a_prefill_at_the_nvls_bandwidth():
    """A TP8 prefill all-reduce of 4,096 tokens of Llama 70B (8,192 × 2 B each: 64 MiB) moves the ring's
    2 × 7/8 × 64 MiB = 117,440,512 B per GPU. TensorRT-LLM hands messages this large to NCCL and leaves NVLS on
    (customAllReduceUtils.h AllReduceBestStrategyTable), so on 8x H200 they run at NVLS's 480 GB/s bus bandwidth
    (nccl-tests, data/hardware/h200.yaml): 7.2 + 244.7 = 251.9 us. vLLM turns NCCL's cuMem off on one node
    (env_override.py) and SGLang NVLS itself (PR #631): a ring at 365 GB/s, 7.2 + 321.8 = 329.0 us. In a GB200
    NVL72 rack vLLM leaves cuMem on, so NVLS (850 GB/s) stands: 7.2 + 138.2 = 145.4 us."""
    m = load_model(LLAMA70)
    lay = PoolArrays.from_pools([Pool(tp=8)])
    nbytes = np.array([4096 * 8192 * 2.0])

    def per_call(engine: str, cluster: str = "h200") -> float:
        sm = StepModel(m, load_cluster(cluster), load_engine(engine), Precision.parse("fp8"), lay)
        return float(sm.all_reduce(nbytes, np.array([8]))[0]) * 1e6

    assert per_call("trtllm") == pytest.approx(251.9, abs=0.1)
    assert per_call("vllm") == pytest.approx(329.0, abs=0.1)
    assert per_call("sglang") == pytest.approx(329.0, abs=0.1)
    assert per_call("vllm", "gb200-nvl72") == pytest.approx(145.4, abs=0.1)
    assert per_call("sglang", "gb200-nvl72") < per_call("sglang")  # its ring on NVLink5, no NVLS
    # Across two H200 nodes (TP 16) the all-reduce is NCCL's hierarchical one: inside each node with NVLS for
    # TensorRT-LLM, as rings for the engines that turn NVLS off.
    from parplan.hardware.efficiency import Collective, collective_time

    two = load_cluster("h200", gpus=16)
    rings = dataclasses.replace(two, scaleup=dataclasses.replace(two.scaleup, allreduce_busbw_gbps=None))

    def across(engine: str) -> float:
        sm = StepModel(m, two, load_engine(engine), Precision.parse("fp8"), PoolArrays.from_pools([Pool(tp=16)]))
        return float(sm.all_reduce(nbytes, np.array([16]))[0])

    nvls, ring = (float(collective_time(c, Collective.ALL_REDUCE, nbytes, 16, 8)[0]) for c in (two, rings))
    assert across("trtllm") == pytest.approx(nvls, rel=1e-12) and nvls < ring
    assert across("vllm") == pytest.approx(ring, rel=1e-12) == across("sglang")


def test_a_one_shot_all_reduce_over_part_of_a_full_mesh_has_only_its_links():
    """On 8 MI300X every GPU pair has its own 64 GB/s xGMI link (data/hardware/mi300x.yaml): a TP4 all-reduce
    reaches its 3 peers over 3 links, 320 x 3 x 64 / 448 = 137.1 GB/s of the 320 GB/s bus bandwidth, so the 64 MiB
    of a 4,096-token Llama 70B prefill (ring bytes 2 x 3/4 x 64 MiB = 100,663,296 B) take 7.2 + 734.0 = 741.2 us."""
    m = load_model(LLAMA70)
    sm = StepModel(m, load_cluster("mi300x"), load_engine("vllm"), Precision.parse("bf16"),
                   PoolArrays.from_pools([Pool(tp=4)]))
    assert float(sm.all_reduce(np.array([4096 * 8192 * 2.0]), np.array([4]))[0]) * 1e6 == pytest.approx(741.2,
                                                                                                        abs=0.1)


def test_the_db_dump_disaggregated_rows_carry_their_recipes_settings():
    """SOURCES.md rule 6 (stop 32): each of the 123 db-dump disaggregated rows carries its recipe's KV format (fp8
    but the two H200 SGLang rows of cfg434, whose recipe sets none) and each pool's MoE exchange: SGLang's DeepEP
    with 32 redundant experts in 13 GB200 rows, TensorRT-LLM's gather for every attention-DP pool on B200 and H200
    (its selector gathers without MNNVL or TRTLLM_CAN_USE_DEEP_EP). The December GB200 SGLang rows no longer keep
    the export's attention DP with MoE TP, which their Dynamo scripts never ran; every row is logged once as
    `launch`."""
    import csv

    from parplan.serving.validate import shipped_files

    rows = _shipped_rows(_db_dump_disaggregated)
    assert len(rows) == 123
    assert {r["id"] for r in rows if r["kv_cache_dtype"] != "fp8"} == {r["id"] for r in rows if "cfg434" in r["id"]}
    deepep = [r for r in rows if r["decode_a2a"] == "deepep"]
    assert len(deepep) == 13
    assert all(r["backend"] == "sglang" and r["system"] == "gb200" and r["decode_redundant_experts"] == "32"
               for r in deepep)
    for r in rows:
        for role in ("prefill", "decode"):
            dp, moe_tp = int(r[f"{role}_attention_dp_size"] or 1), int(r[f"{role}_moe_tp_size"] or 1)
            if r["backend"] == "trtllm" and r["system"] in ("b200_sxm", "h200_sxm") and dp > 1:
                assert r[f"{role}_a2a"] == "allgather", r["id"]
            if r["backend"] == "sglang" and r["system"] == "gb200":
                assert not (dp > 1 and moe_tp > 1), r["id"]
    with (shipped_files()[0].parent / "serving_measured_cleaning.csv").open(newline="") as f:
        launched = [x["id"] for x in csv.DictReader(f) if x["action"] == "launch"]
    assert all(launched.count(r["id"]) == 1 for r in rows)


def test_a_published_pool_states_its_moe_exchange(tmp_path):
    """A closed-loop entry's pool may state its MoE exchange and redundant experts as the measured CSV's POOL_COLUMNS
    do (the GB300 SGLang anchor: DeepEP with 32 redundant experts, SOURCES.md rule 6); an unknown exchange is an
    error naming the entry and the field."""
    from parplan.serving.published import read_published_yaml

    entry = """- id: x
  kind: e2e_serving_fixed_concurrency
  model: deepseek-ai/DeepSeek-V3
  gpu: {type: gb300}
  engine: sglang 0.5.8
  layout:
    serving: disaggregated
    prefill: {workers: 1, tp: 1, attention_dp: 8, moe_tp: 1, moe_ep: 8, a2a: EXCHANGE, redundant_experts: 32}
    decode: {workers: 1, tp: 1, attention_dp: 8, moe_tp: 1, moe_ep: 8, batch_per_rank: 512}
  precision: {gemm_and_moe: fp8}
  workload: {isl: 1024, osl: 1024, concurrency: 4096}
  measured: {ttft_ms: 3229.6, tpot_ms: 60.0}
"""
    path = tmp_path / "p.yaml"
    path.write_text(entry.replace("EXCHANGE", "deepep"))
    pools = read_published_yaml(path)[0].deployment
    assert (pools.prefill.a2a, pools.prefill.redundant_experts, pools.decode.a2a) == ("deepep", 32, "auto")
    path.write_text(entry.replace("EXCHANGE", "nccl"))
    with pytest.raises(ConfigError, match=r"entry 'x'.*unknown backend 'nccl'") as e:
        read_published_yaml(path)
    assert e.value.field == "layout.prefill.a2a"
