"""Hardware profiles: nccl-tests import, fitted fields used by --cluster, calibration, bench CLI."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from parplan import Strategy, evaluate, load_cluster, load_model
from parplan._resources import data_dir
from parplan.hardware.efficiency import gemm_time
from parplan.hardware.profile import write_profile
from parplan.hardware.samples import GemmSample, ProfileSamples, read_profile_samples
from parplan.hardware.spec import Calibration
from parplan.planner.calibrate import calibrate
from parplan.planner.validate import load_runs

DATA = Path(__file__).parent / "data"


def test_import_nccl_tests_writes_a_profile_that_explain_uses(run_cli, run_json, tmp_path):
    """GCP A3 Mega 2x8 H100 log: the fitted per-GPU NIC rate is busbw·(k−1)/(n−1) = 338.8/15 ≈ 22.6 GB/s
    (hardware.md §6.2), not the preset's 40."""
    out = tmp_path / "a3.yaml"
    code, _, err = run_cli("hardware", "import-nccl-tests", str(DATA / "nccl_samples" /
                                                              "h100_2node_16gpu_all_reduce_gcp_a3mega.txt"),
                           "--collective", "all_reduce", "-c", "h100", "-o", str(out))
    assert code == 0, err
    cluster = load_cluster(str(out), gpus=16)
    assert cluster.scaleout.busbw_gbps == pytest.approx(22.6, rel=0.05)
    assert "scaleout.busbw_gbps" in cluster.measured
    slow = run_json("explain", "-m", "llama3.1-8b", "-c", str(out), "-n", "16", "--zero", "0", "--gbs", "16")
    fast = run_json("explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "16", "--zero", "0", "--gbs", "16")
    assert slow["time_breakdown"]["dp_grad_reduce"]["seconds"] > fast["time_breakdown"]["dp_grad_reduce"]["seconds"]
    code, out_text, _ = run_cli("hardware", "show", str(out))
    assert code == 0 and "Measured on this system" in out_text


def test_gemm_samples_refit_the_curve_and_round_trip(tmp_path):
    """Samples generated from the model with a lower ceiling are fitted back, and a profile written from them
    changes what explain predicts in the same direction."""
    base = load_cluster("h100")
    slower = dataclasses.replace(base.gpu, gemm_peak_fraction={**base.gpu.gemm_peak_fraction, "bf16": 0.70})
    shapes = [(m, n, k) for m in (1024, 4096, 8192) for n in (1024, 4096, 14336) for k in (1024, 4096)]
    samples = tuple(GemmSample(m=m, n=n, k=k, dtype="bf16", time_us=float(gemm_time(slower, m, n, k)) * 1e6,
                               tflops=2 * m * n * k / float(gemm_time(slower, m, n, k)) / 1e12, device="synthetic")
                    for m, n, k in shapes)
    path = tmp_path / "p.yaml"
    cluster = write_profile(path, "h100", ProfileSamples(date="2026-11-29", device="synthetic", gemm=samples))
    assert cluster.gpu.gemm_peak_fraction["bf16"] == pytest.approx(0.70, rel=0.03)
    assert "gpu.gemm_peak_fraction" in cluster.measured
    model, s = load_model("llama3.1-8b"), Strategy(tp=1, gbs=8, seq=4096)
    assert (evaluate(model, cluster.with_gpus(8), s).step_time_s
            > evaluate(model, base.with_gpus(8), s).step_time_s)
    # adding more samples to the same file keeps the earlier ones
    again = write_profile(path, "h100", ProfileSamples(date="2026-11-30", device="synthetic", gemm=samples[:3]))
    assert again.gpu.gemm_peak_fraction["bf16"] == pytest.approx(0.70, rel=0.03)
    assert len(read_profile_samples(path).gemm) == len(samples) + 3


def test_calibrate_recovers_a_known_compute_scale():
    """Runs whose 'measured' throughput was produced with compute_scale 0.8: calibration finds 0.8 back."""
    runs = [r for r in load_runs() if r.id in ("korthikanti22_175b_full_recompute", "korthikanti22_1t_seqpar_selective",
                                              "megatron_sc21_weak_18b", "korthikanti22_22b_full_recompute")]
    cluster = load_cluster("a100-80gb")
    truth = dataclasses.replace(cluster, calibration=Calibration(compute_scale=0.8))
    synthetic = []
    for r in runs:
        model = r.model()
        measured = evaluate(model, truth.with_gpus(r.gpus), r.strategy).tokens_per_s_per_gpu
        synthetic.append(dataclasses.replace(r, tokens_per_s_per_gpu=measured))
    result = calibrate(synthetic, cluster)
    assert result.calibration.compute_scale == pytest.approx(0.8, abs=0.01)
    assert result.rms_after < 0.01 < result.rms_before
    assert np.all(np.isfinite(result.errors_after))


def test_calibrate_cli(run_cli, tmp_path):
    runs = tmp_path / "runs.yaml"
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "llama3.1-8b.json").write_text((data_dir("runs", "models") / "llama3.1-8b.json").read_text())
    runs.write_text("""
- id: mine
  cluster: h100
  gpus: 8
  model: llama3.1-8b.json
  strategy: {tp: 1, pp: 1, zero: 3, recompute: none, mbs: 1, schedule: 1f1b}
  batch: {gbs: 128, seq: 8192}
  precision: fp8
  measured: {tokens_per_s_per_gpu: 14451}
""")
    out = tmp_path / "cal.yaml"
    code, text, err = run_cli("calibrate", "--runs", str(runs), "-c", "h100", "-o", str(out))
    assert code == 0, err
    assert "rms error" in text
    # One run, one free compute scale: the calibrated cluster reproduces the measured 14,451 tok/s/GPU
    # (Megatron-Bridge 25.11 table, mbridge2511_h100_llama3_8b_8gpu in the shipped runs).
    predicted = evaluate(load_model("llama3.1-8b"), load_cluster(str(out), gpus=8),
                         Strategy(tp=1, pp=1, zero=3, mbs=1, gbs=128, seq=8192, precision="fp8"))
    assert predicted.tokens_per_s_per_gpu == pytest.approx(14451, rel=1e-3)


def test_bench_gemm_runs_on_cpu(run_json):
    pytest.importorskip("torch")
    doc = run_json("bench", "gemm", "--tokens", "256", "--repeats", "2", "--model", "qwen3-0.6b")
    assert doc["device"] == "cpu" and doc["samples"]
    assert all(s["tflops"] > 0 for s in doc["samples"])


def test_bench_without_torch_says_how_to_install(run_cli, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    code, _, err = run_cli("bench", "memory")
    assert code == 1 and "parplan[bench]" in err and "Traceback" not in err


class TorchVersion(str):
    """What torch.__version__ is: a str subclass (torch.torch_version.TorchVersion) that yaml.safe_dump
    refuses ("cannot represent an object"), so a bench --out on a GPU crashed writing its profile."""


def test_a_torch_version_object_is_written_as_a_plain_string(tmp_path):
    # the sample's rate is a hand calculation: 2·4096³ FLOP / 182.1 µs = 754.7 TFLOP/s
    samples = ProfileSamples(date="2026-07-01", device="NVIDIA H100 80GB HBM3", torch_version=TorchVersion("2.13.0"),
                             nccl_version=TorchVersion("2.21.5"),
                             gemm=(GemmSample(m=4096, n=4096, k=4096, dtype="bf16", time_us=182.1, tflops=754.7,
                                              device="NVIDIA H100 80GB HBM3"),))
    path = tmp_path / "profile.yaml"
    write_profile(path, "h100", samples)
    back = read_profile_samples(path)
    assert back.torch_version == "2.13.0" and type(back.torch_version) is str and back.nccl_version == "2.21.5"


def test_bench_environment_reports_plain_strings():
    pytest.importorskip("torch")
    from parplan.hardware.bench import environment

    assert all(value is None or type(value) is str for value in environment("cpu").values())
