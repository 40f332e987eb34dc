"""Cost model: closed forms against published numbers, identities, and properties over many layouts."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from conftest import ANY_STACK
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan._resources import data_dir
from parplan.errors import ConfigError, InvalidStrategyError
from parplan.hardware import load_cluster
from parplan.hardware.efficiency import Collective, collective_time
from parplan.models import LayerKind, load_model, model_from_hf_dict
from parplan.planner import Layouts, Strategy, comm, evaluate, evaluate_layouts
from parplan.planner.context import Ctx
from parplan.planner.explain import bottleneck
from parplan.planner.memory import layer_activation_bytes
from parplan.planner.schedule import (
    S_1F1B,
    S_DUALPIPE,
    S_INTERLEAVED,
    chunk_inflight,
    inflight_share,
    virtual_stage_layers,
)
from parplan.planner.validate import load_runs, validate_runs

# ------------------------------------------------------------------------- activations (Korthikanti 2022)

def _gpt(dropout: bool = True):
    """A GPT-3-style layer (MHA, f = 4h, GeLU, LayerNorm, dropout): the setting of Korthikanti Table 2."""
    return model_from_hf_dict({"model_type": "gpt2", "n_embd": 12288, "n_layer": 96, "n_head": 96,
                               "vocab_size": 51200, "n_positions": 2048, "attn_pdrop": 0.1 if dropout else 0.0},
                              name="gpt3")


def _ctx(model, **kw):
    cluster = load_cluster("a100-80gb", gpus=kw.pop("gpus", 8))
    kw.setdefault("gbs", 64)
    return Ctx.build(model, cluster, Layouts.from_strategies([Strategy(**kw)]))


S, B = 2048, 1
H, A = 12288, 96


@pytest.mark.parametrize(("kw", "expected"), [
    # Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, bytes per layer:
    ({"tp": 1}, S * B * H * (34 + 5 * A * S / H)),
    ({"tp": 8, "sp": False}, S * B * H * (10 + 24 / 8 + 5 * A * S / (H * 8))),
    ({"tp": 8, "sp": True}, S * B * H * (34 / 8 + 5 * A * S / (H * 8))),
    ({"tp": 8, "sp": False, "recompute": "selective"}, S * B * H * (10 + 24 / 8)),
    ({"tp": 8, "sp": True, "recompute": "selective"}, S * B * H * 34 / 8),
    ({"tp": 8, "sp": False, "recompute": "full"}, 2 * S * B * H),
    ({"tp": 8, "sp": True, "recompute": "full"}, 2 * S * B * H / 8),  # formulas.md §3.3 [derived]
])
def test_korthikanti_activation_bytes(kw, expected):
    ctx = _ctx(_gpt(), seq=S, mbs=B, flash_attention=False, **kw)
    assert layer_activation_bytes(ctx, LayerKind.DENSE)[0] == pytest.approx(expected, rel=1e-12)


def test_llama_flash_activation_bytes():
    """formulas.md §3.3 [derived]: Llama layer with flash attention keeps s·b·(12h + 4·n_kv·d_h + 6f + 4a)."""
    m = load_model("llama3.1-8b")
    ctx = _ctx(m, seq=8192, mbs=1)
    h, kv, d, f, a = 4096, 8, 128, 14336, 32
    expected = 8192 * (12 * h + 4 * kv * d + 6 * f + 4 * a)
    assert layer_activation_bytes(ctx, LayerKind.DENSE)[0] == pytest.approx(expected)


def test_context_parallel_divides_activations():
    """Megatron context_parallel.rst: activation memory per GPU is cp times smaller."""
    m = load_model("llama3.1-8b")
    one = layer_activation_bytes(_ctx(m, seq=8192, gpus=8), LayerKind.DENSE)[0]
    four = layer_activation_bytes(_ctx(m, seq=8192, cp=4, gpus=8), LayerKind.DENSE)[0]
    assert four == pytest.approx(one / 4)


# ---------------------------------------------------------------------------------------- pipeline

def _arr(*values):
    return [np.array([v]) for v in values]


def test_inflight_microbatches():
    """formulas.md §3.5: 1F1B rank r holds p − r micro-batches, all m when fewer; interleaved rank 0 holds
    1 + (p−1)/(p·v) of its layers' worth per micro-batch-stage; DualPipe PP+1 stage-micro-batches per rank
    (DualPipe README), p − r in the chunk it starts and r + 1 in the one it ends."""
    p, m, v = 8, 64, 4
    assert chunk_inflight(0, p, 1, S_1F1B) == [p]
    assert chunk_inflight(5, p, 1, S_1F1B) == [p - 5]
    assert p * inflight_share(np.array([p]), np.array([3]))[0] == 3
    layers_worth = sum(chunk_inflight(0, p, v, S_INTERLEAVED)) / v / p  # in units of L
    assert layers_worth == pytest.approx(1 + (p - 1) / (p * v))
    assert chunk_inflight(0, p, 2, S_DUALPIPE) == [p, 1]
    assert chunk_inflight(3, p, 2, S_DUALPIPE) == [p - 3, 4]
    assert inflight_share(np.array([(p + 1) / 2]), np.array([m]))[0] == 1.0


def test_interleaved_inflight_counts_the_warmup_forwards():
    """Megatron's interleaved warm-up runs 2(p − r − 1) + (v − 1)·p + 1 forwards on rank r, forward k on chunk
    (k // p) mod v (schedules.py, get_model_chunk_id): chunk_inflight's closed form equals counting them one by
    one, and by hand for p = 4, v = 2, rank 0: 2·3 + 4 + 1 = 11 forwards, chunk 0 runs k = 0-3 and 8-10 (7),
    chunk 1 runs k = 4-7 (4)."""
    assert chunk_inflight(0, 4, 2, S_INTERLEAVED) == [7, 4]
    for p in range(1, 10):
        for v in range(2, 6):
            for r in range(p):
                forwards = 2 * (p - r - 1) + (v - 1) * p + 1
                counted = [sum(1 for k in range(forwards) if (k // p) % v == c) for c in range(v)]
                assert chunk_inflight(r, p, v, S_INTERLEAVED) == counted


def test_uneven_layers_go_to_the_ends():
    """Llama 3 405B: 126 layers on 16 stages with one layer fewer on the first and last (arXiv 2407.21783)."""
    counts = virtual_stage_layers(126, 16)
    assert sum(counts) == 126 and counts[0] == counts[-1] == 7 and set(counts[1:-1]) == {8}


# ------------------------------------------------------------------------------------------- estimate

LLAMA = dict(tp=4, pp=2, gbs=64, seq=4096, mbs=1)


def test_throughput_identities():
    m, c = load_model("llama3.1-8b"), load_cluster("h100", gpus=16)
    est = evaluate(m, c, Strategy(tp=2, pp=2, gbs=64, seq=4096))
    assert est.tokens_per_s_per_gpu * est.gpus * est.step_time_s == pytest.approx(64 * 4096)
    # MFU = tokens/s/GPU × model FLOPs per token / dense bf16 peak (formulas.md §7).
    assert est.mfu == pytest.approx(est.tokens_per_s_per_gpu * m.training_flops_per_token(4096) / 989.4e12)
    total = sum(v["exposed"] for v in est.time_breakdown.values())
    assert total == pytest.approx(est.step_time_s, rel=1e-6)
    assert est.hfu == est.mfu  # no recompute


def test_json_has_the_documented_keys():
    est = evaluate(load_model("llama3.1-8b"), load_cluster("h100", gpus=16), Strategy(tp=2, gbs=64))
    doc = json.loads(json.dumps(est.as_dict()))
    for key in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "hfu", "memory_gib", "fits", "time_breakdown",
                "memory_breakdown", "strategy"):
        assert key in doc


def test_tp_across_nodes_costs_more_than_inside():
    """GPT-3 175B on 128 A100: a tp=16 group spans two 8-GPU nodes, so part of each collective rides the
    25 GB/s NICs instead of NVLink and each rank does half the GEMM work per collective."""
    g, c = load_model("gpt3-175b"), load_cluster("a100-80gb", gpus=128)
    t8 = evaluate(g, c, Strategy(tp=8, pp=16, gbs=128, seq=2048, recompute="full"))
    t16 = evaluate(g, c, Strategy(tp=16, pp=8, gbs=128, seq=2048, recompute="full"))
    assert t16.time_breakdown["tp_comm"]["exposed"] > 1.5 * t8.time_breakdown["tp_comm"]["exposed"]


def _valid_layouts(model, cluster, n, seed=0):
    """`n` valid layouts drawn at random over every dimension: tp, pp with each schedule, cp, ep for MoE
    models, ZeRO, recompute, mbs, SP and fp8 where the GPU has it."""
    rng = np.random.default_rng(seed)
    precisions = ["bf16", "fp8"] if cluster.gpu.supports_fp8 else ["bf16"]
    out = []
    for _ in range(100 * n):
        pp = int(rng.choice([1, 2, 4]))
        schedule = str(rng.choice(["1f1b", "interleaved", "zb-h1", "dualpipe"])) if pp > 1 else "1f1b"
        s = Strategy(tp=int(rng.choice([1, 2, 4, 8])), pp=pp, cp=int(rng.choice([1, 2])),
                     ep=int(rng.choice([1, 2, 4, 8])) if model.moe else 1, zero=int(rng.integers(0, 4)),
                     recompute=str(rng.choice(["none", "selective", "full"])), mbs=int(rng.choice([1, 2])),
                     gbs=256, seq=4096, sp=bool(rng.integers(0, 2)), precision=str(rng.choice(precisions)),
                     schedule=schedule, vpp=2 if schedule == "interleaved" else 1)
        try:
            s.check(model, cluster)
        except InvalidStrategyError:  # sampling: keep only valid layouts
            continue
        out.append(s)
        if len(out) == n:
            return out
    raise AssertionError(f"fewer than {n} valid layouts of {model.name} drawn")


def test_scalar_and_vectorised_paths_agree():
    """evaluate() on one layout equals the batch path on a batch containing it (one formula, one place)."""
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=64)
    strategies = _valid_layouts(model, cluster, n=60)
    ev = evaluate_layouts(model, cluster, Layouts.from_strategies(strategies), stack=ANY_STACK)
    for i in (0, 17, 42, 59):
        one = evaluate(model, cluster, strategies[i], stack=ANY_STACK)
        assert one.step_time_s == pytest.approx(float(ev.step_time_s[i]), rel=1e-12)
        assert one.memory_gib == pytest.approx(float(ev.memory_gib[i]), rel=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), mbs=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective", "modules", "full"]), seq=st.sampled_from([2048, 4096]))
def test_raising_zero_never_raises_memory(tp, pp, mbs, recompute, seq):
    model, cluster = load_model("llama3.1-8b"), load_cluster("h100", gpus=64)
    mems = []
    for zero in range(4):
        s = Strategy(tp=tp, pp=pp, mbs=mbs, recompute=recompute, seq=seq, gbs=256, zero=zero)
        s.check(model, cluster)
        mems.append(evaluate(model, cluster, s, stack=ANY_STACK).memory_gib)
    assert all(a >= b - 1e-9 for a, b in itertools.pairwise(mems))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 2, 4]), zero=st.integers(0, 3),
       flash=st.booleans(), cp=st.sampled_from([1, 2]))
def test_adding_recompute_never_lowers_step_time(tp, pp, zero, flash, cp):
    model, cluster = load_model("qwen3-8b"), load_cluster("a100-80gb", gpus=64)
    times = []
    for recompute in ("none", "selective", "modules", "full"):
        s = Strategy(tp=tp, pp=pp, zero=zero, cp=cp, recompute=recompute, gbs=128, seq=4096,
                     flash_attention=flash or cp > 1)
        s.check(model, cluster)
        times.append(evaluate(model, cluster, s, stack=ANY_STACK).step_time_s)
    # The search's dominance pruning relies on this order (search_dominance._DOMINANCE).
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(times))


@pytest.mark.parametrize("name", ["llama3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b", "qwen3-30b-a3b"])
def test_positive_and_finite_for_valid_layouts(name):
    model = load_model(name)
    cluster = load_cluster("h100", gpus=64)
    strategies = _valid_layouts(model, cluster, n=60, seed=1)
    ev = evaluate_layouts(model, cluster, Layouts.from_strategies(strategies), stack=ANY_STACK)
    for arr in (ev.step_time_s, ev.memory_gib, ev.mfu, ev.tokens_per_s_per_gpu):
        assert np.isfinite(arr).all() and (arr > 0).all()
    for comp in ev.time_exposed.values():
        assert np.isfinite(comp).all() and (comp >= 0).all()


# ------------------------------------------------------------------------------ validation (regression)

@pytest.fixture(scope="module")
def validation():
    """The Megatron-Core-era runs (published_runs.yaml), each costed as its own stack."""
    return validate_runs(load_runs(data_dir("runs") / "published_runs.yaml"))


@pytest.fixture(scope="module")
def shipped():
    """Every shipped run (published_runs.yaml and runs_stacks.yaml), each costed as its own stack."""
    return validate_runs(load_runs())


def test_every_shipped_run_evaluates(shipped):
    # validate_runs raises, naming the run, for one it cannot evaluate: every run reached here has an estimate
    assert len(shipped) == 216


def test_all_runs_tier_a_median_error_target(shipped):
    """Issue #12 targets: over all shipped runs with their stacks, tier-A median |error| <= 10% (7.6% when the
    stacks landed, 7.5% now) and p90 <= 25%: 31.3% when the stacks landed, 26.1% once Megatron's CI tests were
    costed in their deterministic mode, 28.5% once torchtitan's per-op SAC saved every second matmul under
    float8 as in bf16, 24.0% since MI300X's GEMM and FlashAttention-2 rates are measured figures (AMD's MAF table,
    ROCm/flash-attention#142) instead of priors, 22.2% once Megatron's CI tests kept their default dropout and
    ran the loss unfused as --deterministic-mode requires."""
    errs = [abs(r.throughput_error) for r in shipped if r.run.tier == "A"]
    assert np.median(errs) <= 0.10
    assert np.percentile(errs, 90) <= 0.25


def test_every_group_median_target(shipped):
    """Issue #12 target: every source group's median |error| <= 20%, all 21 groups of the shipped runs. Megatron-Core's
    CI tests (mcore_ci) went 44% -> 26.1% once costed in their deterministic mode, -> 18.5% with their default
    dropout (0.1, no flag in the tests) and the unfused cross entropy --deterministic-mode requires; their GB200 and
    MoE tests stay far over (README)."""
    groups: dict[str, list[float]] = {}
    for r in shipped:
        groups.setdefault(r.run.group, []).append(abs(r.throughput_error))
    over = {g: round(float(np.median(e)), 3) for g, e in groups.items() if np.median(e) > 0.20}
    assert len(groups) == 21 and not over


def test_tier_a_median_error_target(validation):
    """Regression guard on the Megatron-era figures: tier-A median absolute throughput error 8.3% before stacks
    existed, 7.6% when they landed, 8.7% since two sourced run facts (issue #13): NeMo's and Megatron-Bridge's
    performance recipes reduce gradients in bf16 (stacks/nemo-perf.yaml: less exposed communication, so their
    over-prediction grows) and Llama 3's runs hold vpp 8 and reduce-scatter gradients every micro-batch (arXiv
    2407.21783 §3.3.2); peak-memory median <= 10% (issue #13)."""
    errs = [abs(r.throughput_error) for r in validation if r.run.tier == "A"]
    mems = [abs(r.memory_error) for r in validation if r.memory_error is not None]
    assert np.median(errs) <= 0.09
    assert mems and np.median(mems) <= 0.10


def test_korthikanti_runs_error(validation):
    """Issue target: the 8 runs of Korthikanti et al. Table 5 below a 3.65% mean absolute error (Calculon's
    3.65% on the same runs, reference/peers.md)."""
    errs = [abs(r.throughput_error) for r in validation if r.run.group == "korthikanti22"]
    assert len(errs) == 8 and np.mean(errs) < 0.0365


def test_run_dropout_setting_applies_to_its_model(tmp_path):
    """A run's `dropout` (a training flag, Megatron --attention-dropout) overrides the model file's; a
    non-boolean value is a config error naming the field."""

    runs = {r.id: r for r in load_runs()}
    sp = runs["korthikanti22_22b_seqpar_selective"]
    assert sp.dropout is True and sp.model().dropout
    assert runs["bloom_176b_384gpu"].dropout is None
    bad = tmp_path / "runs.yaml"
    bad.write_text("- id: x\n  dropout: 0.1\n  strategy: {tp: 1}\n  batch: {gbs: 8, seq: 2048}\n"
                   "  measured: {tokens_per_s_per_gpu: 1.0}\n  model: m.json\n  cluster: h100\n  gpus: 8\n")
    with pytest.raises(ConfigError, match="dropout"):
        load_runs(bad)


@pytest.mark.parametrize(("strategy", "field", "message"), [
    ("{tp: 8, sp: 'yes'}", "x.strategy.sp", "expected true or false"),
    ("{tp: 8, p2p_overlap: 0}", "x.strategy.p2p_overlap", "expected true or false"),
    ("{tp: 8, pipeline: 2}", "x.strategy.pipeline", "unknown field; allowed: .*dp.*"),
    ("{tp: 8, dp: 4}", "x.strategy.dp", "dp=4, but 16 GPUs / \\(tp·pp·cp = 8\\) = 2"),
    ("{tp: 8, gbs: 8}", "x.strategy", "under batch"),
    ("{tp: 8, dp: true}", "x.strategy.dp", "expected an integer"),
    ("{tp: 8, schedule: gpipe}", "x.strategy", "schedule must be one of"),
    ("{tp: 8}\n  precision: fp32", "x.precision", "must be one of bf16, fp16, fp8"),
])
def test_runs_file_strategy_errors_name_the_field(tmp_path, strategy, field, message):
    """A runs file's layout is checked field by field: types, unknown keys, a dp that the GPU count
    contradicts, batch keys in the wrong section."""

    path = tmp_path / "runs.yaml"
    path.write_text(f"- id: x\n  strategy: {strategy}\n  batch: {{gbs: 8, seq: 2048}}\n"
                    "  measured: {tokens_per_s_per_gpu: 1.0}\n  model: m.json\n  cluster: h100\n  gpus: 16\n")
    with pytest.raises(ConfigError, match=message) as err:
        load_runs(path)
    assert err.value.field == field


@pytest.mark.parametrize(("zero", "pp", "adam_share", "buffer_share"), [
    (0, 1, 1.0, 1.0), (1, 1, 0.5, 1.0), (2, 1, 0.5, 0.5),
    (2, 2, 0.5, 1.0),  # under a pipeline ZeRO-2 reduces once per step and keeps the whole buffer
])
def test_optimizer_step_traffic(zero, pp, adam_share, buffer_share):
    """Hand count of Megatron's step (MixedPrecisionOptimizer.step, DDP zero_grad_buffer): grad-norm read
    4 B, fused Adam 16 B read + 12 B written, master→bf16 copy 6 B per updated parameter (1/dp of them from
    ZeRO-1 on, dp = 2 here), plus a 4 B memset of the fp32 grad buffer; memory-bound at the A100's 2.039 TB/s
    × 0.85, five kernels of 4 µs each; the slowest pipeline stage sets the time."""
    model = _gpt()
    dp = 1 if zero == 0 else 2
    cluster = load_cluster("a100-80gb", gpus=8 * pp * dp)
    est = evaluate(model, cluster, Strategy(tp=8, pp=pp, zero=zero, sp=True, gbs=4 * dp, seq=2048), stack=ANY_STACK)
    stage_params = [st["memory_gib"]["weights"] * 2**30 / 2 for st in est.stages]  # bf16: 2 B per parameter
    nbytes = max(stage_params) * (38 * adam_share + 4 * buffer_share)
    assert est.time_breakdown["optimizer"]["seconds"] == pytest.approx(nbytes / (2.039e12 * 0.85) + 5 * 4e-6,
                                                                       rel=1e-6)


def test_pp_scatter_gather_sends_a_tp_share_and_gathers_it():
    """Narayanan 2021 §4.1: without SP each TP rank sends 1/tp of the boundary tensor over its own NIC and
    the receiving node all-gathers it over NVLink, instead of every rank sending the whole tensor."""

    model = _gpt()
    full, sg = (_ctx(model, gpus=16, tp=8, pp=2, sp=False, seq=2048, pp_scatter_gather=on) for on in (False, True))
    msg = 2048 * 12288 * 2  # s·b·h bf16 elements per micro-batch
    c = full.cluster
    whole = collective_time(c, Collective.SEND_RECV, msg, 2, 1)  # stages on different nodes
    share = collective_time(c, Collective.SEND_RECV, msg / 8, 2, 1) + collective_time(
        c, Collective.ALL_GATHER, msg, 8, 8)
    assert comm.pp_microbatch(full).total[0] == pytest.approx(2 * whole)
    assert comm.pp_microbatch(sg).total[0] == pytest.approx(2 * share)
    assert share < whole / 3


@pytest.mark.parametrize("kw", [{"tp": 1, "pp": 2}, {"tp": 8, "pp": 1, "sp": False}, {"tp": 8, "pp": 2, "sp": True}])
def test_pp_scatter_gather_normalised_off_where_it_does_nothing(kw):
    assert not Strategy(**kw, pp_scatter_gather=True).pp_scatter_gather


def test_explain_legacy_pipeline_flags(run_json):
    """The legacy-Megatron switches reach the strategy: scatter-gather makes a no-SP pipeline across nodes
    cheaper, waiting interleaved transfers make it dearer."""
    args = ("explain", "-m", "gpt3-175b", "-c", "a100-80gb", "-n", "64", "--tp", "8", "--pp", "8", "--no-sp",
            "--gbs", "64", "--seq", "2048", "--recompute", "full")
    plain, sg = run_json(*args), run_json(*args, "--pp-scatter-gather")
    assert sg["strategy"]["pp_scatter_gather"] and not plain["strategy"]["pp_scatter_gather"]
    assert sg["time_breakdown"]["pp_comm"]["seconds"] < plain["time_breakdown"]["pp_comm"]["seconds"]
    interleaved = (*args, "--vpp", "2")
    overlapped, waiting = run_json(*interleaved), run_json(*interleaved, "--no-p2p-overlap")
    assert overlapped["strategy"]["p2p_overlap"] and not waiting["strategy"]["p2p_overlap"]
    assert waiting["time_breakdown"]["pp_comm"]["exposed"] > overlapped["time_breakdown"]["pp_comm"]["exposed"]


@pytest.mark.parametrize(("extra", "flag"), [(("--sp", "--pp-scatter-gather"), "--pp-scatter-gather"),
                                             (("--no-p2p-overlap",), "--no-p2p-overlap")])
def test_explain_refuses_a_legacy_flag_the_layout_cannot_use(run_cli, extra, flag):
    """--pp-scatter-gather with SP, or --no-p2p-overlap on 1F1B, would do nothing: a usage error (exit 2)."""
    code, _, err = run_cli("explain", "-m", "gpt3-175b", "-c", "a100-80gb", "-n", "64", "--tp", "8", "--pp", "8",
                           "--gbs", "64", "--seq", "2048", *extra)
    assert code == 2 and flag in err


def test_interleaved_transfers_wait_without_p2p_overlap():
    """Megatron-LM before --overlap-p2p-communication (2023): each of an interleaved micro-batch's 2·v
    transfers per rank waits; with the overlap only their latency shows (formulas.md §4.2)."""

    model = _gpt()
    kw = dict(gpus=64, tp=8, pp=8, vpp=3, schedule="interleaved", seq=2048)
    on, off = (_ctx(model, **kw, p2p_overlap=flag) for flag in (True, False))
    one = comm.pp_microbatch(off).total[0] / (2 * 3)
    assert comm.pp_microbatch(off).exposed[0] == pytest.approx(2 * 3 * one)
    assert comm.pp_microbatch(on).exposed[0] < one
    assert comm.pp_microbatch(on).total[0] == pytest.approx(comm.pp_microbatch(off).total[0])


@pytest.mark.parametrize(("kw", "overlaps"), [({"pp": 1}, False), ({"pp": 4, "schedule": "1f1b"}, False),
                                              ({"pp": 4, "schedule": "zb-h1"}, False),
                                              ({"pp": 4, "vpp": 2, "schedule": "dualpipev"}, True)])
def test_p2p_overlap_normalised_where_the_schedule_decides(kw, overlaps):
    """1F1B and ZB-H1 wait for every transfer (Megatron-LM's validate_args sets overlap_p2p_comm False without
    virtual stages, megatron/training/arguments.py at d98e8a6), DualPipe(V) always overlaps them: the plan
    says what it costs, whatever was asked."""
    assert Strategy(**kw, p2p_overlap=True).p2p_overlap is overlaps
    assert Strategy(**kw, p2p_overlap=False).p2p_overlap is overlaps


@pytest.mark.parametrize("cp", [1, 2])
def test_bottleneck_places_tp_inside_the_domain_whatever_cp(cp):
    """tp is the innermost group (ranks tp-contiguous), so tp=8 on 8-GPU nodes talks over NVLink even when
    cp=2 makes tp·cp = 16 span two nodes."""
    cluster = load_cluster("a100-80gb", gpus=64 * cp)
    est = evaluate(load_model("gpt3-175b"), cluster,
                   Strategy(tp=8, cp=cp, pp=8, sp=True, gbs=64, seq=2048 * cp, recompute="selective"))
    sentence = bottleneck(est, cluster)
    assert "tensor-parallel communication on NVLink (tp=8)" in sentence
