"""Cluster presets, cluster files and the kernel/collective time models (hand-computed cases)."""

from __future__ import annotations

import pytest

from parplan.errors import ConfigError, UnknownPresetError
from parplan.hardware import (
    Collective,
    attention_efficiency,
    collective_time,
    gemm_efficiency,
    gemm_time,
    load_cluster,
    preset_names,
)


def test_required_presets_exist_with_datasheet_numbers():
    """reference/hardware.md §1.1/1.2: dense bf16 peak, HBM, NVLink per direction."""
    for name in ("a100-40gb", "a100-80gb", "h100", "h800", "h200", "b200", "gb200-nvl72", "mi300x"):
        assert name in preset_names()
    h100 = load_cluster("h100")
    assert h100.gpu.peak_tflops["bf16"] == 989.4  # not the 1979 sparse headline
    assert h100.scaleup.bandwidth_gbps == 450  # not the 900 bidirectional figure
    assert load_cluster("h800").scaleup.bandwidth_gbps == 200  # H800's reduced NVLink
    assert load_cluster("mi300x").scaleup.per_peer_gbps == 64  # full mesh, no switch
    assert load_cluster("gb200-nvl72").scaleup_domain == 72
    assert not load_cluster("a100-80gb").gpu.supports_fp8


def test_gpus_option_sets_total():
    c = load_cluster("h100", gpus=1024)
    assert (c.gpus, c.nodes) == (1024, 128)


def test_every_preset_cites_its_numbers():
    for name in preset_names():
        c = load_cluster(name)
        assert c.sources, name
        assert any(k.startswith("gpu.peak") for k in c.sources), name


def test_gemm_efficiency_hand_computed():
    """A100 GPT-3 QKV GEMM at tp=8: M=2048, N=3·12288/8=4608, K=12288.
    tiles 16·18 = 288 -> 3 waves of 108 SMs; quantisation 2048·4608/(3·108·128·256) = 0.8889;
    short-K 12288/(12288+128) = 0.98969; ceiling 0.869 (MAMF 271.2/312) -> 0.7645."""
    gpu = load_cluster("a100-80gb").gpu
    assert gemm_efficiency(gpu, 2048, 4608, 12288) == pytest.approx(0.869 * 0.88889 * 0.98969, rel=1e-4)


def test_gemm_time_is_memory_bound_for_short_k():
    """M=8192, N=4096, K=64 on H100: 4.3 GFLOP but 68.7 MB of operands and output;
    HBM time (8192·64 + 64·4096 + 8192·4096)·2 B / (3.35e12·0.85) = 24.1 µs beats the tensor-core time."""
    gpu = load_cluster("h100").gpu
    t = gemm_time(gpu, 8192, 4096, 64)
    assert t == pytest.approx((8192 * 64 + 64 * 4096 + 8192 * 4096) * 2 / (3.35e12 * 0.85), rel=1e-6)


def test_split_k_fills_the_gpu_for_few_tiles():
    """M=N=128 on A100: 1 tile; split-K into min(108, 8192/512=16) = 16 chunks of K=512."""
    gpu = load_cluster("a100-80gb").gpu
    expected = 0.869 * (128 * 128 / (128 * 256)) * 16 / 108 * 512 / (512 + 128)
    assert gemm_efficiency(gpu, 128, 128, 8192) == pytest.approx(expected, rel=1e-6)


def test_attention_efficiency_saturates():
    gpu = load_cluster("h100").gpu
    assert attention_efficiency(gpu, 650) == pytest.approx(0.75 / 2)
    assert attention_efficiency(gpu, 10**7) == pytest.approx(0.75, rel=1e-3)
    assert attention_efficiency(gpu, 4096, backward=True) < attention_efficiency(gpu, 4096)


def test_all_reduce_in_node_uses_nvls_busbw():
    """8 GPUs of one H100 node: NVLS busbw 480 GB/s; T = α + 2(n-1)/n·S/busbw = 15 µs + 3.646 ms."""
    c = load_cluster("h100", gpus=8)
    t = collective_time(c, Collective.ALL_REDUCE, 1e9, 8, 8)
    assert t == pytest.approx(15e-6 + 2 * 7 / 8 * 1e9 / 480e9)
    # 4 GPUs: NCCL does not pick NVLS below 5 GPUs -> ring busbw 365.
    t4 = collective_time(c, Collective.ALL_REDUCE, 1e9, 4, 4)
    assert t4 == pytest.approx(15e-6 + 2 * 3 / 4 * 1e9 / 365e9)


def test_all_gather_one_rank_per_node_is_nic_bound():
    """16 ranks each in a different node: (n-1)/n·S over the 40 GB/s NIC; α = 40 µs + 2·log2(16)·5 µs."""
    c = load_cluster("h100", gpus=128)
    t = collective_time(c, Collective.ALL_GATHER, 1e9, 16, 1)
    assert t == pytest.approx(80e-6 + 15 / 16 * 1e9 / 40e9)


def test_hierarchical_all_reduce_two_nodes():
    """2 nodes × 8: the in-node NVLS phase (2·7/8·S/480) outweighs the NIC phase (2·1/2·S/8/40)."""
    c = load_cluster("h100", gpus=16)
    s = 16 * 2**30
    t = collective_time(c, Collective.ALL_REDUCE, s, 16, 8)
    assert t == pytest.approx(40e-6 + 2 * 5e-6 + 2 * 7 / 8 * s / 480e9)


def test_h200_two_node_all_reduce_close_to_nccl_tests_sample():
    """tests/data/nccl_samples/h200_2node_16gpu_all_reduce_nccl2.30.txt: busbw 485.7 GB/s at 16 GiB.
    The model (no fit to this file) lands within 10%."""
    c = load_cluster("h200", gpus=16)
    s = 17179869184
    t = collective_time(c, Collective.ALL_REDUCE, s, 16, 8)
    busbw = 2 * 15 / 16 * s / t / 1e9
    assert busbw == pytest.approx(485.7, rel=0.10)


def test_all_to_all_split_between_nvlink_and_nic():
    """16 ranks, 8 per node: (n-g)/n·S = S/2 over the NIC dominates (g-1)/n·S over NVLink."""
    c = load_cluster("h100", gpus=16)
    t = collective_time(c, Collective.ALL_TO_ALL, 1e9, 16, 8)
    assert t == pytest.approx(40e-6 + 2 * 5e-6 + 0.5e9 / 40e9)


def test_full_mesh_subgroup_gets_its_links_only():
    """MI300X: 2 GPUs share one 64 GB/s xGMI link: busbw 320·64/448."""
    c = load_cluster("mi300x", gpus=8)
    t = collective_time(c, Collective.ALL_GATHER, 1e9, 2, 2)
    assert t == pytest.approx(15e-6 + 0.5 * 1e9 / (320e9 * 64 / 448))


def test_single_rank_group_costs_nothing():
    c = load_cluster("h100")
    assert collective_time(c, Collective.ALL_REDUCE, 1e9, 1, 1) == 0.0


def test_cluster_file_with_base_and_override(tmp_path):
    p = tmp_path / "a3mega.yaml"
    p.write_text("name: a3-mega\nbase: h100\nscaleout: {name: 8x200G TCPXO, bandwidth_gbps: 25, busbw_gbps: 22.6}\n")
    c = load_cluster(str(p), gpus=16)
    assert (c.name, c.scaleout.bandwidth_gbps, c.scaleup.bandwidth_gbps, c.gpus) == ("a3-mega", 25, 450, 16)


@pytest.mark.parametrize(("text", "field"), [
    ("name: x\nbase: h100\ngpu: {hbm_gib: big}\n", "gpu.hbm_gib"),
    ("name: x\nbase: h100\nscaleup: {bandwith_gbps: 1}\n", "scaleup.bandwith_gbps"),
    ("name: x\nbase: h100\nnode: {gpus_per_node: 0}\n", "node.gpus_per_node"),
    ("name: x\nbase: h100\ngpu: {peak_tflops: {bf17: 1}}\n", "gpu.peak_tflops"),
    ("name: x\nbase: h100\nnetwork: {}\n", "network"),
])
def test_cluster_file_errors_name_the_field(tmp_path, text, field):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_cluster(str(p))
    assert e.value.file == str(p) and e.value.field == field


def test_unknown_cluster_suggests():
    with pytest.raises(UnknownPresetError) as e:
        load_cluster("h1000")
    assert "h100" in e.value.suggestions
