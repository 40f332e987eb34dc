"""Expert parallelism: all-to-all volumes, node-limited routing, load imbalance, EPLB replicas, overlap."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from conftest import ANY_STACK

from parplan.errors import InvalidStrategyError
from parplan.hardware import load_cluster
from parplan.models import load_model, model_from_hf_dict
from parplan.planner import Layouts, Strategy, evaluate, evaluate_layouts
from parplan.planner.comm import expert_traffic, remote_nodes_per_token
from parplan.planner.context import Ctx
from parplan.planner.experts import max_nodes_per_token
from parplan.planner.moe import moe_section
from parplan.planner.strategy import DISPATCHERS
from parplan.planner.workload import UNIFORM, parse_expert_load
from parplan.stacks import load_stack

MIB = 2.0**20

# A Mixtral-style toy: h = 1024, 16 experts of width 2048, top-2, 4 MoE layers.
TOY = model_from_hf_dict({"model_type": "mixtral", "hidden_size": 1024, "num_hidden_layers": 4,
                          "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2048,
                          "num_local_experts": 16, "num_experts_per_tok": 2, "vocab_size": 32000,
                          "max_position_embeddings": 4096}, name="toy-moe")
# DeepSeek-style routing on the toy scale: 64 experts, top-8, 8 groups of which 4 per token.
TOY_DS = model_from_hf_dict({"model_type": "deepseek_v3", "hidden_size": 1024, "num_hidden_layers": 4,
                             "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2048,
                             "moe_intermediate_size": 512, "n_routed_experts": 64, "num_experts_per_tok": 8,
                             "n_group": 8, "topk_group": 4, "first_k_dense_replace": 1, "n_shared_experts": 1,
                             "vocab_size": 32000, "q_lora_rank": 256, "kv_lora_rank": 128, "qk_nope_head_dim": 64,
                             "qk_rope_head_dim": 32, "v_head_dim": 64, "max_position_embeddings": 4096},
                            name="toy-ds")


def _ctx(model, gpus: int, **kw) -> Ctx:
    kw.setdefault("gbs", gpus)
    kw.setdefault("seq", 1024)
    return Ctx.build(model, load_cluster("h100", gpus=gpus), Layouts.from_strategies([Strategy(**kw)]))


# --------------------------------------------------------------------------------- all-to-all volumes

# Hand calculation, ep = 16 over two 8-GPU nodes, one rank's 1024 tokens of h = 1024 in bf16:
# a row is 1024·1024·2 B = 2 MiB; top-2 makes 4 MiB of routed copies.
# alltoall: every copy to another node crosses the NIC: 4 MiB·8/16 = 2 MiB; NVLink: 4 MiB·7/16 = 1.75 MiB.
# deepep: one copy per other node touched; P(the other node holds one of the 2 experts) =
# 1 − C(8,2)/C(16,2) = 92/120, so 2 MiB·92/120 over the NIC, then every copy not for the receiving GPU
# is forwarded over NVLink: 4 MiB·15/16 = 3.75 MiB.
@pytest.mark.parametrize(("dispatch", "nic_mib", "nvlink_mib"), [
    ("alltoall", 2.0, 1.75),
    ("deepep", 2.0 * 92 / 120, 3.75),
])
def test_dispatch_volume_across_two_nodes(dispatch, nic_mib, nvlink_mib):
    ctx = _ctx(TOY, 16, ep=16, dispatch=dispatch)
    traffic = expert_traffic(ctx, 2.0)
    assert traffic.inter_node[0] / MIB == pytest.approx(nic_mib, rel=1e-12)
    assert traffic.intra_node[0] / MIB == pytest.approx(nvlink_mib, rel=1e-12)
    half = expert_traffic(ctx, 1.0)  # an fp8 dispatch moves half the bytes
    assert half.inter_node[0] == pytest.approx(traffic.inter_node[0] / 2, rel=1e-12)


def test_dispatch_inside_one_node_never_uses_the_nic():
    for dispatch in DISPATCHERS[:2]:
        traffic = expert_traffic(_ctx(TOY, 16, ep=8, dispatch=dispatch), 2.0)
        assert traffic.inter_node[0] == 0.0
        assert traffic.intra_node[0] / MIB == pytest.approx(4.0 * 7 / 8, rel=1e-12)


def test_cross_node_share_in_the_moe_section():
    """2 MiB of 3.75 MiB leave the node with the alltoall dispatcher (hand calculation above)."""
    cluster = load_cluster("h100", gpus=16)
    est = evaluate(TOY, cluster, Strategy(ep=16, gbs=16, seq=1024))
    section = moe_section(TOY, cluster, est)
    assert section.inter_node_share == pytest.approx(2.0 / 3.75, rel=1e-12)
    assert section.ep_nodes == 2
    assert section.dispatch_inter_mib == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize("ep", [8, 16, 32, 64])
def test_node_limited_routing_never_exceeds_its_bound(ep):
    """DeepSeek's bound: a token reaches at most M = max_nodes_per_token nodes, so it is sent to at most
    min(k, M, N)·(N−1)/N other nodes on average (one of the reached nodes is its own with chance 1/N)."""
    ctx = _ctx(TOY_DS, 64, ep=ep)
    nodes = int(ctx.ep_nodes[0])
    remote = float(remote_nodes_per_token(ctx)[0])
    m = max_nodes_per_token(8, 4, nodes)
    assert remote <= min(8, m, nodes) * (nodes - 1) / nodes + 1e-12
    assert remote <= nodes - 1


def test_deepseek_v3_eight_nodes_reach_four():
    """DeepSeek-V3 §2.1.2: with 8 groups on 8 nodes and 4 groups per token, each token reaches ≤ 4 nodes."""
    ctx = _ctx(load_model("deepseek-v3"), 512, ep=64, seq=4096)
    assert float(remote_nodes_per_token(ctx)[0]) == pytest.approx(4 * 7 / 8, rel=1e-12)


# ------------------------------------------------------------------------------ imbalance and replicas

def test_zipf_load_makes_a_straggler_and_eplb_relieves_it():
    model = load_model("qwen1.5-moe-a2.7b")
    zipf = parse_expert_load("zipf:1.2", model)
    before = zipf.straggler(model, 4, 0, 1)
    after = zipf.straggler(model, 4, 4, 1)
    assert before > 1.05
    assert 1.0 <= after < before
    cluster = load_cluster("h100", gpus=8)
    s = Strategy(ep=4, gbs=64, seq=4096)
    assert evaluate(model, cluster, s, workload=zipf).step_time_s > evaluate(model, cluster, s).step_time_s
    assert UNIFORM.straggler(model, 4, 0, 1) == 1.0


def test_replica_memory_by_hand():
    """ep = 16 with 16 redundant slots: each GPU holds one more expert per MoE layer, 3·1024·2048 parameters
    (gated w1, w3, w2) × 4 layers, each costing 2 (bf16) + 4 (fp32 grad) + 8 (fp32 master and bf16 Adam moments,
    DeepSeek-V3 §3.3.3; unsharded: the expert data-parallel group is 16/(1·16·1) = 1) bytes."""
    cluster = load_cluster("h100", gpus=16)
    base = Strategy(ep=16, gbs=16, seq=1024)
    with_replicas = dataclasses.replace(base, redundant_experts=16)
    expected = 14 * 4 * 3 * 1024 * 2048 / 2**30
    # EPLB replicas are DeepSeek's (report §3.4): the deepseek stack runs them, Megatron-Core does not.
    est = evaluate(TOY, cluster, with_replicas, stack="deepseek")
    assert est.memory_gib - evaluate(TOY, cluster, base, stack="deepseek").memory_gib == pytest.approx(expected,
                                                                                                      rel=1e-9)
    assert moe_section(TOY, cluster, est, stack=load_stack("deepseek")).replica_memory_gib == pytest.approx(
        expected, rel=1e-9)


def test_redundant_experts_must_split_evenly():
    with pytest.raises(InvalidStrategyError, match="multiple of ep"):
        Strategy(ep=16, gbs=16, seq=1024, redundant_experts=8).check(TOY, load_cluster("h100", gpus=16))


# -------------------------------------------------------------------------------------------- overlap

def test_time_only_fields_leave_memory_unchanged():
    """The search computes memory once per layout before expanding dispatch and ep_overlap (search_cost.py)."""
    model, cluster = load_model("qwen1.5-moe-a2.7b"), load_cluster("h100", gpus=32)
    strategies = [Strategy(tp=tp, pp=2, vpp=2, ep=4, gbs=64, seq=4096, schedule="interleaved", precision="fp8",
                           dispatch=d, ep_overlap=o, recompute=r)
                  for tp in (1, 2) for d in DISPATCHERS for o in (False, True) for r in ("none", "modules")]
    ev = evaluate_layouts(model, cluster, Layouts.from_strategies(strategies))
    for i in range(0, len(strategies), 2 * len(DISPATCHERS) * 2):
        block = ev.memory_gib[i:i + 2 * len(DISPATCHERS) * 2].reshape(len(DISPATCHERS) * 2, 2)
        assert np.allclose(block, block[0], rtol=0, atol=0)


def test_overlap_and_fp8_dispatch_never_slow_a_layout():
    model, cluster = load_model("qwen1.5-moe-a2.7b"), load_cluster("h100", gpus=32)
    s = Strategy(tp=2, pp=2, vpp=2, ep=4, gbs=128, seq=4096, schedule="interleaved", precision="fp8",
                 dispatch="deepep")
    plain = evaluate(model, cluster, s, stack=ANY_STACK)
    overlapped = evaluate(model, cluster, dataclasses.replace(s, ep_overlap=True), stack=ANY_STACK)
    fp8 = evaluate(model, cluster, dataclasses.replace(s, dispatch="deepep-fp8"), stack=ANY_STACK)
    assert overlapped.step_time_s <= plain.step_time_s
    assert overlapped.time_breakdown["ep_comm"]["exposed"] < plain.time_breakdown["ep_comm"]["exposed"]
    assert fp8.step_time_s <= plain.step_time_s


@pytest.mark.parametrize(("kw", "message"), [
    ({"pp": 2, "schedule": "1f1b"}, "interleaved"),
    ({"pp": 2, "schedule": "dualpipe"}, "by construction"),
    ({"recompute": "full"}, "full recompute"),
    ({"ep": 1}, "ep > 1"),
])
def test_ep_overlap_follows_megatron_rules(kw, message):
    base = {"ep": 4, "gbs": 64, "seq": 4096, "ep_overlap": True}
    with pytest.raises(InvalidStrategyError, match=message):
        Strategy(**{**base, **kw}).check(load_model("qwen1.5-moe-a2.7b"), load_cluster("h100", gpus=16))


def test_fp8_dispatch_needs_fp8_training():
    with pytest.raises(InvalidStrategyError, match="precision fp8"):
        Strategy(ep=4, gbs=64, dispatch="deepep-fp8").check(load_model("qwen1.5-moe-a2.7b"),
                                                             load_cluster("h100", gpus=16))


# ------------------------------------------------------------------------------------- DeepSeek-V3 check

def test_deepseek_v3_tp8_loses_to_its_published_layout():
    """DeepSeek-V3 (arXiv 2412.19437 §3.2): tp=1, pp=16 DualPipe, ep=64 over 8 nodes on 2048 H800s whose
    NVLink is halved (200 GB/s per direction). tp=8 keeps the same pipeline but all-gathers and
    reduce-scatters every layer's activations over that NVLink: it must lose, mostly to TP communication."""
    model, cluster = load_model("deepseek-v3"), load_cluster("h800", gpus=2048)
    published = Strategy(tp=1, pp=16, ep=64, gbs=15360, seq=4096, schedule="dualpipe", precision="fp8",
                         dispatch="deepep-fp8", recompute="modules")
    tp8 = dataclasses.replace(published, tp=8, sp=True, tp_overlap=True)
    a, b = (evaluate(model, cluster, x, stack=ANY_STACK) for x in (published, tp8))
    assert b.step_time_s > 1.15 * a.step_time_s
    gap = b.step_time_s - a.step_time_s
    tp_gap = b.time_breakdown["tp_comm"]["exposed"] - a.time_breakdown["tp_comm"]["exposed"]
    assert tp_gap > 0.5 * gap


# -------------------------------------------------------------------------------------------------- CLI

def test_explain_shows_the_moe_section(run_cli):
    args = ("explain", "-m", "deepseek-v2-lite", "-c", "h100", "-n", "16", "--ep", "16", "--gbs", "64",
            "--dispatch", "deepep", "--expert-load", "zipf:1.2", "--redundant-experts", "16", "--stack", "deepseek")
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    moe = json.loads(out)["moe"]
    assert moe["ep_nodes"] == 2 and moe["dispatch"] == "deepep"
    assert moe["imbalance"] < moe["imbalance_without_eplb"]
    assert moe["replica_memory_gib"] > 0
    assert math.isclose(moe["expert_slots_per_gpu"], (64 + 16) / 16)
    code, out, _ = run_cli(*args)
    assert code == 0 and "Mixture of experts" in out and "over the NIC" in out
    code, out, _ = run_cli("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--json")
    assert code == 0 and json.loads(out)["moe"] is None


def test_bad_expert_load_is_a_clear_error(run_cli):
    code, _, err = run_cli("explain", "-m", "qwen1.5-moe-a2.7b", "-c", "h100", "-n", "8", "--ep", "4",
                           "--expert-load", "zipf:x")
    assert code == 2 and "zipf" in err  # a malformed option value: a usage error
