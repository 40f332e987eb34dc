"""Fits of the cost model's hardware numbers to samples, and the profile YAML that keeps the samples."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from parplan.errors import ConfigError
from parplan.hardware import load_cluster
from parplan.hardware.efficiency import Collective, attention_efficiency, gemm_time, link_bytes
from parplan.hardware.fit import (
    attention_flops,
    fit_alpha_beta,
    fit_attention,
    fit_collectives,
    fit_gemm_curve,
    fit_memory,
)
from parplan.hardware.nccl_tests import parse_nccl_tests_file
from parplan.hardware.profile import fit_profile
from parplan.hardware.samples import (
    AttentionSample,
    CollectiveSample,
    GemmSample,
    MemorySample,
    ProfileSamples,
    busbw_factor,
    read_profile_samples,
    write_profile_samples,
)

H200_LOG = Path(__file__).parent / "data" / "nccl_samples" / "h200_2node_16gpu_all_reduce_nccl2.30.txt"
SIZES = [1 << p for p in range(10, 31)]  # 1 KiB .. 1 GiB


def _noise(count: int, scale: float, seed: int = 0) -> np.ndarray:
    """Deterministic multiplicative measurement noise of relative size `scale`."""
    return 1.0 + scale * np.random.default_rng(seed).uniform(-1.0, 1.0, count)


def _collective_samples(collective: str, ranks: int, per_node: int, alpha_us: float, busbw: float,
                        noise: float = 0.0) -> list[CollectiveSample]:
    factor = busbw_factor(collective, ranks)
    out = []
    for size, jitter in zip(SIZES, _noise(len(SIZES), noise), strict=True):
        t = (alpha_us + factor * size / (busbw * 1e3)) * jitter
        algbw = size / t / 1e3
        out.append(CollectiveSample(collective=collective, size_bytes=size, ranks=ranks, ranks_per_node=per_node,
                                    time_us=t, algbw_gbps=algbw, busbw_gbps=algbw * factor, source="synthetic"))
    return out


@pytest.mark.parametrize("collective, ranks", [("all_reduce", 16), ("all_gather", 8), ("reduce_scatter", 8),
                                               ("all_to_all", 64), ("send_recv", 2)])
def test_alpha_beta_recovers_synthetic_data_within_1_percent(collective, ranks):
    samples = _collective_samples(collective, ranks, 8, alpha_us=25.0, busbw=350.0, noise=0.003)
    fit = fit_alpha_beta(samples)
    assert fit.alpha_us == pytest.approx(25.0, rel=0.01)
    assert fit.busbw_gbps == pytest.approx(350.0, rel=0.01)
    assert fit.rms_rel_error < 0.005
    assert len(fit.residuals) == len(SIZES)
    assert fit.time_us(1 << 30) == pytest.approx(samples[-1].time_us, rel=0.01)


def test_alpha_beta_min_bytes_and_groups():
    ar = _collective_samples("all_reduce", 16, 8, alpha_us=40.0, busbw=480.0)
    ag = _collective_samples("all_gather", 8, 8, alpha_us=20.0, busbw=360.0)
    fit = fit_alpha_beta(ar, min_bytes=1 << 20)
    assert min(fit.sizes_bytes) == 1 << 20
    with pytest.raises(ValueError, match="fit_collectives"):
        fit_alpha_beta(ar + ag)
    fits = fit_collectives(ar + ag)
    assert set(fits) == {("all_reduce", 16, 8), ("all_gather", 8, 8)}
    assert fits["all_gather", 8, 8].busbw_gbps == pytest.approx(360.0)
    with pytest.raises(ConfigError, match="2 or more message sizes"):
        fit_alpha_beta(ar[:1])


def test_alpha_beta_on_the_h200_log():
    samples = parse_nccl_tests_file(H200_LOG)
    # Bandwidth-bound range (>= 256 MiB): the log's busbw there is 394.7-485.7, flattening at ~486.
    fit = fit_alpha_beta(samples, min_bytes=1 << 28)
    assert 480 < fit.busbw_gbps < 495
    assert fit.rms_rel_error < 0.01
    # Over the whole sweep one α-β line is a compromise: NCCL changes protocol with message size.
    assert fit_alpha_beta(samples).rms_rel_error > 0.1


def test_link_bandwidth_of_multi_node_fits():
    intra = fit_alpha_beta(_collective_samples("all_gather", 8, 8, 20.0, 360.0))
    assert intra.link_busbw_gbps == pytest.approx(360.0)
    # hardware.md §6.2: per-GPU NIC = busbw × (k-1)/(n-1); 2×8 H100 A3 Mega: 338.8 / 15 = 22.6 GB/s.
    across = fit_alpha_beta(_collective_samples("all_reduce", 16, 8, 120.0, 338.8))
    assert across.link_busbw_gbps == pytest.approx(338.8 / 15, rel=1e-6)
    a2a = fit_alpha_beta(_collective_samples("all_to_all", 16, 8, 30.0, 90.0))
    assert a2a.link_busbw_gbps == pytest.approx(90.0 * 8 / 15, rel=1e-6)


H100 = load_cluster("h100").gpu
TRUE_GEMM = dataclasses.replace(H100, gemm_peak_fraction={**H100.gemm_peak_fraction, "bf16": 0.70, "fp8": 0.60},
                                gemm_tile_overhead_us=1.5, kernel_launch_us=6.0)
GEMM_SHAPES = [(m, n, k) for m in (64, 512, 2048, 8192) for n in (256, 1024, 4096, 14336) for k in (512, 4096, 8192)]


def _gemm_samples(gpu, noise: float) -> list[GemmSample]:
    out = []
    shapes = [(dtype, *shape) for dtype in ("bf16", "fp8") for shape in GEMM_SHAPES]
    for (dtype, m, n, k), jitter in zip(shapes, _noise(len(shapes), noise, seed=1), strict=True):
        t = float(gemm_time(gpu, m, n, k, dtype)) * 1e6 * jitter
        out.append(GemmSample(m=m, n=n, k=k, dtype=dtype, time_us=t, tflops=2 * m * n * k / t / 1e6, device="x"))
    return out


def test_gemm_fit_recovers_parameters_of_synthetic_data():
    fit = fit_gemm_curve(_gemm_samples(TRUE_GEMM, noise=0.01), H100)
    assert fit.gemm_peak_fraction["bf16"] == pytest.approx(0.70, rel=0.03)
    assert fit.gemm_peak_fraction["fp8"] == pytest.approx(0.60, rel=0.03)
    assert fit.gemm_tile_overhead_us == pytest.approx(1.5, rel=0.05)
    assert fit.kernel_launch_us == pytest.approx(6.0, rel=0.05)
    assert fit.rms_rel_error < 0.01
    fitted = fit.apply(H100)
    assert fitted.gemm_peak_fraction["fp16"] == H100.gemm_peak_fraction["fp16"]  # dtypes not sampled are kept
    assert fitted.kernel_launch_us == fit.kernel_launch_us


def test_gemm_fit_needs_gpu_dtypes():
    cpu = [GemmSample(m=64, n=64, k=64, dtype="fp32", time_us=10.0, tflops=0.05, device="cpu")]
    with pytest.raises(ConfigError, match="fp32"):
        fit_gemm_curve(cpu, H100)


def test_attention_fit_recovers_synthetic_curve():
    truth = dataclasses.replace(H100, attention_fwd_fraction=0.55, attention_bwd_fraction=0.40,
                                attention_half_seq=900)
    peak = truth.peak_tflops["bf16"] * 1e12
    samples = []
    for seq in (512, 1024, 2048, 4096, 8192):
        shape = AttentionSample(batch=2, heads=32, seq=seq, head_dim=128, causal=True, fwd_us=1.0, bwd_us=1.0,
                                device="x")  # a shape: its times are not read
        flops = attention_flops(shape)
        fwd = flops / (peak * float(attention_efficiency(truth, seq))) * 1e6
        bwd = 2.5 * flops / (peak * float(attention_efficiency(truth, seq, backward=True))) * 1e6
        samples.append(dataclasses.replace(shape, fwd_us=fwd, bwd_us=bwd))
    fit = fit_attention(samples, H100)
    assert fit.attention_fwd_fraction == pytest.approx(0.55, rel=0.01)
    assert fit.attention_bwd_fraction == pytest.approx(0.40, rel=0.01)
    assert fit.attention_half_seq == pytest.approx(900, abs=2)
    assert fit.apply(H100).attention_half_seq == fit.attention_half_seq


def test_memory_fit_recovers_hbm_efficiency():
    samples = []
    for size in (1 << 24, 1 << 26, 1 << 28, 1 << 30):
        t = H100.kernel_launch_us + 2 * size / (H100.hbm_tbps * 1e6 * 0.9)
        samples.append(MemorySample(size_bytes=size, time_us=t, gbps=2 * size / t / 1e3, device="x"))
    fit = fit_memory(samples, H100)
    assert fit.hbm_efficiency == pytest.approx(0.9, rel=1e-6)
    assert fit.apply(H100).hbm_efficiency == fit.hbm_efficiency


def test_profile_yaml_round_trip(tmp_path):
    profile = ProfileSamples(
        date="2026-07-01", device="NVIDIA H100 80GB HBM3", torch_version="2.13.0", nccl_version="2.21.5",
        collectives=tuple(_collective_samples("all_reduce", 8, 8, 20.0, 400.0)[:3]),
        gemm=tuple(_gemm_samples(TRUE_GEMM, 0.0)[:2]),
        attention=(AttentionSample(batch=1, heads=8, seq=1024, head_dim=128, causal=True, fwd_us=50.0,
                                   bwd_us=140.0, device="x"),),
        memory=(MemorySample(size_bytes=1 << 30, time_us=700.0, gbps=3067.0, device="x"),))
    path = tmp_path / "profile.yaml"
    write_profile_samples(path, profile, cluster={"name": "my-h100", "base": "h100"})
    assert read_profile_samples(path) == profile
    text = path.read_text()
    assert text.startswith("name: my-h100\nbase: h100\nmeasurements:\n")


def test_profile_yaml_errors_name_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("measurements:\n  date: 2026-07-01\n  device: x\n"
                    "  gemm: [{m: 1, n: 1, k: 1, dtype: bf16, time_us: fast, tflops: 1.0, device: x}]\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: field 'measurements\.gemm\[0\]\.time_us': expected a number"):
        read_profile_samples(path)
    path.write_text("name: x\n")
    with pytest.raises(ConfigError, match="measurements"):
        read_profile_samples(path)


@pytest.mark.parametrize("kind", list(Collective))
@pytest.mark.parametrize("ranks", [2, 8])
def test_nccl_busbw_convention_is_the_cost_models_byte_count(kind, ranks):
    """nccl-tests' busbw factor (PERFORMANCE.md) equals the bytes per byte of S that the cost model sends
    over the scale-up link of one domain, so a measured busbw is that link's bandwidth as the model uses it."""
    assert busbw_factor(kind.value, ranks) == pytest.approx(float(link_bytes(kind, 1.0, ranks, ranks)[0]))


def test_broadcast_samples_set_no_link_bandwidth():
    """nccl-tests measures broadcast, which no collective of the cost model runs: it is reported, not fitted."""
    samples = _collective_samples("broadcast", 8, 8, alpha_us=20.0, busbw=300.0)
    fields, reports = fit_profile(load_cluster("h100"), ProfileSamples(date="d", device="x", collectives=samples))
    assert "scaleup" not in fields and "scaleout" not in fields
    assert "broadcast 8 ranks, 8/node" in reports["collectives"]
