"""Expert load balance: EPLB (formulas.md §6), load models, imbalance, node-limited routing (§4.4, §8)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.errors import ConfigError
from parplan.planner.experts import (
    expected_nodes_touched,
    expected_remote_nodes,
    expert_load,
    extra_replicas_per_gpu,
    gpu_loads,
    imbalance,
    load_counts_file,
    max_nodes_per_token,
    node_limited,
    rebalance_experts,
    remote_copies,
)

# Derandomized so a property that holds today cannot flake in CI.
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True)


@st.composite
def eplb_inputs(draw, hierarchical: bool = False):
    """(weight, num_replicas, num_groups, num_nodes, num_gpus) that satisfy eplb.py's rules; `hierarchical`
    draws several nodes and several expert groups per node, the case where groups are packed onto nodes."""
    nodes = draw(st.sampled_from([2, 4] if hierarchical else [1, 2, 4]))
    gpus = nodes * draw(st.integers(1, 3))
    groups = nodes * draw(st.integers(2, 4)) if hierarchical else draw(st.sampled_from([1, 2, 3, 4, 8]))
    experts = groups * draw(st.integers(1, 4))
    replicas = gpus * (-(-experts // gpus) + draw(st.integers(0, 3)))
    layers = draw(st.integers(1, 3))
    cells = st.floats(0, 100, allow_nan=False, allow_infinity=False)
    weight = np.array(draw(st.lists(cells, min_size=layers * experts, max_size=layers * experts)))
    return weight.reshape(layers, experts), replicas, groups, nodes, gpus


# ---------------------------------------------------------------------------------------------- EPLB


def test_no_redundancy_packs_heaviest_first_to_lightest_gpu():
    # By hand: 4→GPU0, 3→GPU1, 2→GPU1 (3 < 4), 1→GPU0 (GPU1 full): 5 and 5, slots in assignment order.
    p = rebalance_experts(np.array([[4.0, 3, 2, 1]]), 4, 1, 1, 2)
    assert p.phy2log.tolist() == [[0, 3, 1, 2]]
    assert p.logcnt.tolist() == [[1, 1, 1, 1]]
    assert gpu_loads(np.array([[4.0, 3, 2, 1]]), p.phy2log, p.logcnt, 2).tolist() == [[5.0, 5.0]]


def test_replication_splits_the_hot_expert_until_it_packs_perfectly():
    # By hand: 6 → two replicas of 3 → three of 2 (3 > 2 each time); six replicas of 2, three per GPU: 6 and 6.
    w = np.array([[6.0, 2, 2, 2]])
    p = rebalance_experts(w, 6, 1, 1, 2)
    assert p.logcnt.tolist() == [[3, 1, 1, 1]]
    assert gpu_loads(w, p.phy2log, p.logcnt, 2).tolist() == [[6.0, 6.0]]


def test_hierarchical_policy_by_hand():
    # 8 experts in 4 groups of 2, 2 nodes of 2 GPUs, one slot per expert. Group loads 2, 8, 6, 7:
    # g1→node0, g3→node1, g2→node1 (7 < 8, node1 now full), g0→node0. Node 0 holds experts 2,3,0,1 with
    # loads 8,0,1,1: 8→GPU0, 1 (e0)→GPU1, 1 (e1)→GPU1, 0 (e3)→GPU0. Node 1 holds 6,7,4,5 with loads
    # 5,2,3,3: 5→GPU2, 3 (e4)→GPU3, 3 (e5)→GPU3, 2 (e7)→GPU2.
    w = np.array([[1.0, 1, 8, 0, 3, 3, 5, 2]])
    p = rebalance_experts(w, 8, 4, 2, 4)
    assert p.phy2log.tolist() == [[2, 3, 0, 1, 6, 7, 4, 5]]
    assert gpu_loads(w, p.phy2log, p.logcnt, 4).tolist() == [[8.0, 2.0, 7.0, 6.0]]


def test_matches_the_reference_eplb_py_output():
    # Output of deepseek-ai/EPLB eplb.py (torch, commit 5791971) for this input, run once by hand:
    # 16 experts in 4 groups, 24 slots on 2 nodes × 2 GPUs.
    w = np.array([[9, 144, 16, 121, 1, 25, 64, 36, 225, 169, 49, 100, 196, 81, 4, 256],
                  [9, 144, 225, 36, 169, 25, 4, 1, 81, 121, 196, 49, 64, 100, 16, 256]], dtype=float)
    p = rebalance_experts(w, 24, 4, 2, 4)
    assert p.phy2log.tolist() == [
        [9, 8, 8, 11, 7, 5, 9, 8, 6, 11, 10, 4, 3, 15, 15, 1, 2, 0, 12, 12, 15, 13, 1, 14],
        [4, 8, 10, 9, 5, 6, 4, 10, 10, 9, 11, 7, 2, 13, 15, 1, 3, 14, 2, 15, 15, 1, 12, 0]]
    assert p.logcnt.tolist() == [[1, 2, 1, 1, 1, 1, 1, 1, 3, 2, 1, 2, 2, 1, 1, 3],
                                 [1, 2, 2, 1, 2, 1, 1, 1, 1, 2, 3, 1, 1, 1, 1, 3]]
    assert p.log2phy[0, 8].tolist() == [1, 7, 2]  # replica-rank order, not slot order
    assert p.log2phy[1, 0].tolist() == [23, -1, -1]


def test_global_policy_when_groups_do_not_split_over_nodes():
    # 2 groups over 4 nodes: eplb.py falls back to 1 group on 1 node.
    w = np.array([[5.0, 1, 7, 2, 9, 3, 4, 8]])
    assert np.array_equal(rebalance_experts(w, 12, 2, 4, 4).phy2log, rebalance_experts(w, 12, 1, 1, 4).phy2log)


@PROPERTY
@given(eplb_inputs())
def test_maps_are_consistent(args):
    weight, replicas, groups, nodes, gpus = args
    phy2log, log2phy, logcnt = rebalance_experts(weight, replicas, groups, nodes, gpus)
    layers, experts = weight.shape
    assert phy2log.shape == (layers, replicas) and logcnt.shape == (layers, experts)
    assert log2phy.shape == (layers, experts, logcnt.max())
    assert logcnt.min() >= 1
    for layer in range(layers):
        assert np.bincount(phy2log[layer], minlength=experts).tolist() == logcnt[layer].tolist()
        for e in range(experts):
            slots = log2phy[layer, e]
            assert (slots >= 0).sum() == logcnt[layer, e]
            assert np.all(slots[logcnt[layer, e]:] == -1)  # padding only at the end
            assert np.all(phy2log[layer, slots[: logcnt[layer, e]]] == e)


@PROPERTY
@given(eplb_inputs(hierarchical=True))
def test_hierarchical_keeps_each_group_on_one_node(args):
    weight, replicas, groups, nodes, gpus = args
    phy2log = rebalance_experts(weight, replicas, groups, nodes, gpus).phy2log
    group_size = weight.shape[1] // groups
    node_of_slot = np.arange(replicas) // (replicas // nodes)
    for layer in range(weight.shape[0]):
        for g in range(groups):
            in_group = phy2log[layer] // group_size == g
            assert len(set(node_of_slot[in_group].tolist())) == 1


@PROPERTY
@given(st.lists(st.floats(0.01, 100), min_size=8, max_size=8), st.sampled_from([1, 2, 4]))
def test_more_replicas_never_loosen_the_bound(loads, gpus):
    # What EPLB guarantees: replication never raises the heaviest replica's load, and greedy packing keeps
    # every GPU within one heaviest replica of the mean, so the bound mean + heaviest replica only falls.
    w = np.array([loads])
    mean = w.sum() / gpus
    heaviest_before = np.inf
    for replicas in range(8, 8 + 4 * gpus + 1, gpus):
        p = rebalance_experts(w, replicas, 1, 1, gpus)
        heaviest = (w / p.logcnt).max()
        peak = gpu_loads(w, p.phy2log, p.logcnt, gpus).max()
        assert heaviest <= heaviest_before
        assert max(mean, heaviest) - 1e-9 <= peak <= mean + heaviest + 1e-9
        heaviest_before = heaviest


def test_more_replicas_can_raise_the_max_load():
    # EPLB is greedy, not optimal. Loads 4 and 3 on 2 GPUs, by hand. 4 slots: replicas 2,2,1.5,1.5 pack
    # 2+1.5 per GPU = 3.5 = mean. 6 slots: replicas 4/3 ×3 and 1 ×3 pack 4/3+4/3+1 = 11/3 on GPU0.
    w = np.array([[4.0, 3.0]])
    peaks = [gpu_loads(w, p.phy2log, p.logcnt, 2).max() for p in
             (rebalance_experts(w, 4, 1, 1, 2), rebalance_experts(w, 6, 1, 1, 2))]
    assert peaks == pytest.approx([3.5, 11 / 3])


@pytest.mark.parametrize(("weight", "args", "message"), [
    ([[1.0, 2, 3, 4]], (6, 1, 1, 4), "num_replicas .6. must be a multiple of num_gpus .4."),
    ([[1.0, 2, 3, 4]], (6, 1, 2, 3), "num_gpus .3. must be a multiple of num_nodes .2."),
    ([[1.0, 2, 3, 4]], (4, 3, 1, 2), r"number of experts \(4\) must be a multiple of num_groups \(3\)"),
    ([[1.0, 2, 3, 4]], (2, 1, 1, 2), r"num_replicas \(2\) must be >= the number of experts \(4\)"),
    ([[1.0, 2, 3, 4]], (4, 1, 0, 2), "num_nodes must be >= 1"),
    ([1.0, 2, 3, 4], (4, 1, 1, 2), r"\[layers, experts\]"),
    ([[1.0, -2, 3, 4]], (4, 1, 1, 2), "finite and >= 0"),
    ([[1.0, np.nan, 3, 4]], (4, 1, 1, 2), "finite and >= 0"),
])
def test_rebalance_rejects_bad_input(weight, args, message):
    with pytest.raises(ValueError, match=message):
        rebalance_experts(np.array(weight), *args)


def test_extra_replicas_per_gpu():
    # DeepSeek-V3 prefill (EPLB README): 256 experts + 32 redundant on EP32 → 1 extra expert per GPU.
    assert extra_replicas_per_gpu(288, 256, 32) == 1.0
    with pytest.raises(ValueError, match="must be >= the number of experts"):
        extra_replicas_per_gpu(200, 256, 32)


# ---------------------------------------------------------------------------------------------- loads


def test_uniform_and_zipf_shares():
    assert expert_load("uniform", 4, layers=2).tolist() == [[0.25] * 4] * 2
    # a = 1: 1, 1/2, 1/3, 1/4 over their sum 25/12.
    assert expert_load("zipf", 4, zipf_a=1.0)[0] == pytest.approx([12 / 25, 6 / 25, 4 / 25, 3 / 25])


def test_seeded_zipf_is_deterministic_and_permutes_each_layer():
    a = expert_load("zipf", 32, layers=3, seed=7)
    assert np.array_equal(a, expert_load("zipf", 32, layers=3, seed=7))
    for row in a:
        assert np.sort(row) == pytest.approx(np.sort(expert_load("zipf", 32)[0]))
    assert not np.array_equal(a[0], a[1])


def test_counts_are_normalised_and_broadcast():
    assert expert_load("counts", 3, counts=np.array([2, 1, 1]), layers=2).tolist() == [[0.5, 0.25, 0.25]] * 2
    per_layer = expert_load("counts", 2, counts=np.array([[1, 3], [2, 2]]), layers=2)
    assert per_layer.tolist() == [[0.25, 0.75], [0.5, 0.5]]


@pytest.mark.parametrize(("kind", "kwargs", "message"), [
    ("pareto", {}, "unknown load kind 'pareto'; known: uniform, zipf, counts"),
    ("counts", {}, "counts is required with kind 'counts'"),
    ("uniform", {"counts": np.ones(4)}, "only used there"),
    ("zipf", {"zipf_a": -1.0}, "zipf_a must be finite and >= 0"),
    ("counts", {"counts": np.ones(3)}, "experts = 4"),
    ("counts", {"counts": np.ones((3, 4)), "layers": 2}, "3 rows .one per layer. but layers = 2"),
    ("counts", {"counts": np.array([[1, 1, 1, 1], [0, 0, 0, 0]]), "layers": 2}, "layer 1 has no load"),
])
def test_expert_load_rejects_bad_input(kind, kwargs, message):
    with pytest.raises(ValueError, match=message):
        expert_load(kind, 4, **kwargs)


@pytest.mark.parametrize(("name", "text"), [
    ("c.csv", "# layer counts\n1,2,3\n\n4,5,6\n"),
    ("c.json", json.dumps([[1, 2, 3], [4, 5, 6]])),
    ("c.json", json.dumps({"model": "toy", "counts": [[1, 2, 3], [4, 5, 6]]})),
    ("c.yaml", "counts:\n  - [1, 2, 3]\n  - [4, 5, 6.0]\n"),
    ("c.yml", "- [1, 2, 3]\n- [4, 5, 6]\n"),
])
def test_load_counts_file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    assert load_counts_file(path).tolist() == [[1, 2, 3], [4, 5, 6]]


def test_load_counts_file_single_row(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("[1, 2, 3]")
    assert load_counts_file(path).tolist() == [[1, 2, 3]]


@pytest.mark.parametrize(("name", "text", "field", "message"), [
    ("c.csv", "1,2\n3,x\n", "line 2, expert 1", "'x' is not a number"),
    ("c.csv", "1,2\n3\n", "line 2", "1 counts, but the first row has 2"),
    ("c.csv", "# nothing\n", None, "no counts found"),
    ("c.json", "[[1, -2]]", "[0], expert 1", "finite and >= 0"),
    ("c.json", '{"count": [1]}', "counts", "required field is missing"),
    ("c.json", "[[1, 2], 3]", "[1]", "expected a list of counts"),
    ("c.json", "[1, 2", None, "not valid JSON"),
    ("c.yaml", "counts: 5\n", "counts", "expected a non-empty list"),
    ("c.yaml", "counts: [1, true]\n", "counts, expert 1", "True is not a number"),
    ("c.json", "[1, -2]", "expert 1", "finite and >= 0"),
    ("c.txt", "1,2", None, "expected a .csv, .json, .yaml or .yml file"),
])
def test_load_counts_file_errors(tmp_path, name, text, field, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_counts_file(path)
    assert info.value.file == str(path)
    assert info.value.field == field


def test_load_counts_file_missing(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_counts_file(tmp_path / "none.csv")


# ---------------------------------------------------------------------------------------------- imbalance


def test_imbalance_by_hand():
    # Contiguous: GPU0 holds 4+3, GPU1 2+1 → 7/5 = 1.4; layer 2 even. Overall Σmax/Σmean = (7+2)/(5+2).
    # EPLB with 4 slots: 5 and 5 (see test_no_redundancy_packs_heaviest_first_to_lightest_gpu).
    r = imbalance(np.array([[4.0, 3, 2, 1], [1, 1, 1, 1]]), 2, num_replicas=4)
    assert r.before_per_layer == pytest.approx((1.4, 1.0))
    assert r.before == pytest.approx(9 / 7)
    assert r.after_per_layer == pytest.approx((1.0, 1.0))
    assert r.factor == r.after == pytest.approx(1.0)
    assert r.extra_replicas_per_gpu == 0


def test_uniform_load_is_balanced():
    # DeepSeek-V3's layout: 256 experts in 8 groups, EP64 over 8 nodes; 320 slots = 64 redundant experts.
    r = imbalance(expert_load("uniform", 256, layers=2), 64, num_replicas=320, num_groups=8, num_nodes=8)
    assert r.before == pytest.approx(1.0) and r.after == pytest.approx(1.0)
    assert r.extra_replicas_per_gpu == 1.0


def test_zipf_load_is_imbalanced_and_eplb_helps():
    r = imbalance(expert_load("zipf", 64, layers=4, seed=0), 8, num_replicas=80)
    assert r.before > 1.5
    assert 1.0 <= r.after < r.before
    no_eplb = imbalance(expert_load("zipf", 64, layers=4, seed=0), 8)
    assert no_eplb.after is None and no_eplb.factor == r.before


def test_imbalance_rejects_bad_input():
    with pytest.raises(ValueError, match=r"number of experts \(6\) must be a multiple of num_gpus \(4\)"):
        imbalance(np.ones((1, 6)), 4)
    with pytest.raises(ValueError, match="every layer needs some load"):
        imbalance(np.zeros((1, 4)), 2)


def test_gpu_loads_rejects_mismatched_maps():
    with pytest.raises(ValueError, match="do not match weight"):
        gpu_loads(np.ones((1, 4)), np.zeros((2, 4), dtype=np.int64), np.ones((1, 4), dtype=np.int64), 2)
    with pytest.raises(ValueError, match="5 slots do not split evenly over 2 GPUs"):
        gpu_loads(np.ones((1, 4)), np.zeros((1, 5), dtype=np.int64), np.ones((1, 4), dtype=np.int64), 2)


# ---------------------------------------------------------------------------------------------- routing


def test_section_8_deepseek_v3_numbers():
    # formulas.md §8: E=256, top-8, 8 nodes, uniform routing: 7.00 remote copies, 4.63 remote nodes, 5.29 nodes.
    assert remote_copies(8, 8) == 7.0
    assert expected_remote_nodes(256, 8, 8) == pytest.approx(4.63, abs=0.005)
    assert expected_nodes_touched(256, 8, 8) == pytest.approx(5.29, abs=0.005)


def test_expected_nodes_small_case():
    # 2 experts on 2 nodes, top-1: the expert is on the other node half the time.
    assert expected_remote_nodes(2, 1, 2) == 0.5
    assert expected_nodes_touched(2, 1, 2) == 1.0


def test_deepseek_node_limited_routing():
    # n_group = 8 = nodes, topk_group = 4 → M = 4 (formulas.md §4.4); 4 nodes, 7/8 of them remote.
    assert max_nodes_per_token(8, 4, 8) == 4
    assert node_limited(8, 8, 4) == 3.5


@pytest.mark.parametrize(("n_group", "topk_group", "nodes", "m"), [
    (8, 4, 4, 4),  # 2 groups per node: 4 groups can still be on 4 nodes
    (8, 2, 16, 4),  # each group spans 2 nodes
    (3, 1, 2, 2),  # groups straddle the node boundary
    (1, 1, 8, 8),  # no group-limited routing
])
def test_max_nodes_per_token(n_group, topk_group, nodes, m):
    assert max_nodes_per_token(n_group, topk_group, nodes) == m


@settings(deadline=None, derandomize=True)
@given(st.integers(1, 16), st.integers(1, 32), st.integers(1, 32))
def test_node_limited_never_exceeds_its_bounds(top_k, nodes, max_nodes):
    copies = node_limited(top_k, nodes, max_nodes)
    assert 0 <= copies <= min(max_nodes, nodes - 1, remote_copies(top_k, nodes)) + 1e-12


@pytest.mark.parametrize(("call", "message"), [
    (lambda: expected_remote_nodes(10, 2, 4), r"number of experts \(10\) must be a multiple of nodes \(4\)"),
    (lambda: expected_nodes_touched(8, 9, 2), r"top_k \(9\) must be <= the number of experts \(8\)"),
    (lambda: node_limited(8, 8, 0), "max_nodes must be >= 1"),
    (lambda: remote_copies(0, 8), "top_k must be >= 1"),
    (lambda: max_nodes_per_token(4, 5, 2), r"topk_group \(5\) must be <= n_group \(4\)"),
])
def test_routing_rejects_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
