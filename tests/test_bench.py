"""parplan bench on this machine's CPU: GEMM, attention, memory copy, and gloo collectives over two local
torchrun processes (functional checks; CPU numbers never calibrate a cluster)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from parplan.hardware.bench import BenchmarkError
from parplan.hardware.bench.attention import run_attention
from parplan.hardware.bench.comm import run_comm
from parplan.hardware.bench.gemm import default_gemm_shapes, run_gemm
from parplan.hardware.bench.memory import run_memory
from parplan.hardware.samples import busbw_factor
from parplan.models import load_model

# The bench modules import torch only when they run (so these imports work without it).
pytest.importorskip("torch")


def test_gemm_runs_on_cpu():
    samples = run_gemm([(64, 32, 48), (16, 64, 32)], ("fp32", "bf16"), repeats=3, warmup=1, device="cpu")
    assert [(s.m, s.n, s.k, s.dtype) for s in samples] == [(64, 32, 48, "fp32"), (16, 64, 32, "fp32"),
                                                           (64, 32, 48, "bf16"), (16, 64, 32, "bf16")]
    assert all(s.time_us > 0 and s.tflops > 0 and s.device == "cpu" for s in samples)
    (s,) = run_gemm([(32, 32, 32)], ("fp8",), repeats=2, warmup=1, device="cpu")  # torch._scaled_mm path
    assert s.time_us > 0
    with pytest.raises(BenchmarkError, match="multiple of 16"):
        run_gemm([(30, 32, 32)], ("fp8",), device="cpu")
    with pytest.raises(BenchmarkError, match="unknown dtype"):
        run_gemm([(32, 32, 32)], ("int4",), device="cpu")


def test_default_gemm_shapes_follow_tensor_parallel_splits():
    t = 2048
    shapes = default_gemm_shapes(load_model("llama3.1-8b"), tp=8, tokens=(t,))
    assert (t, 6144 // 8, 4096) in shapes  # qkv: COLUMN, output features split
    assert (t, 4096, 4096 // 8) in shapes  # attn_out: ROW, input features split
    assert (t, 2 * 14336 // 8, 4096) in shapes  # gated mlp_up
    assert (t, 4096, 2 * 14336 // 8) in shapes  # its input-gradient GEMM (m, k, n)
    assert (4096, 2 * 14336 // 8, t) in shapes  # and its weight-gradient GEMM (k, n, m)
    assert len(shapes) == len(set(shapes)) == 4 * 3  # 4 linears × 3 GEMMs, all distinct at this t
    moe = default_gemm_shapes(load_model("qwen3-30b-a3b"), tp=1, tokens=(4096,))
    assert (4096 * 8 // 128, 2 * 768, 2048) in moe  # each routed expert sees tokens × top_k / experts
    with pytest.raises(BenchmarkError, match="tp"):
        default_gemm_shapes(load_model("llama3.1-8b"), tp=0)


def test_attention_runs_on_cpu():
    (s,) = run_attention([(1, 2, 64, 32)], dtype="fp32", repeats=2, warmup=1, device="cpu")
    assert (s.batch, s.heads, s.seq, s.head_dim, s.causal) == (1, 2, 64, 32, True)
    assert s.fwd_us > 0 and s.bwd_us > 0


def test_memory_bandwidth_is_positive():
    samples = run_memory([1 << 16, 1 << 20], repeats=3, warmup=1, device="cpu")
    assert [s.size_bytes for s in samples] == [1 << 16, 1 << 20]
    assert all(s.gbps > 0 and s.gbps == pytest.approx(2 * s.size_bytes / s.time_us / 1e3) for s in samples)


def test_comm_gloo_two_local_processes():
    samples = run_comm(("all_reduce", "all_gather"), (4096, 65536, 1 << 18), nproc_per_node=2, backend="gloo",
                       iters=4, warmup=1, timeout_s=120)
    assert [(s.collective, s.size_bytes) for s in samples] == [
        (c, size) for c in ("all_reduce", "all_gather") for size in (4096, 65536, 1 << 18)]
    for s in samples:
        assert (s.ranks, s.ranks_per_node, s.dtype) == (2, 2, "fp32")
        assert s.time_us > 0 and 0 < s.busbw_gbps < 1000
        assert s.algbw_gbps == pytest.approx(s.size_bytes / s.time_us / 1e3)
        assert s.busbw_gbps == pytest.approx(s.algbw_gbps * busbw_factor(s.collective, 2))
        assert s.source.startswith("parplan bench comm (gloo")


def test_comm_rejects_bad_requests():
    with pytest.raises(BenchmarkError, match="broadcast"):
        run_comm(("broadcast",))
    with pytest.raises(BenchmarkError, match="2 or more ranks"):
        run_comm(nproc_per_node=1, backend="gloo")


def test_planner_and_parsers_never_import_torch():
    code = ("import sys; import parplan.cli, parplan.planner, parplan.hardware.fit, parplan.hardware.nccl_tests; "
            "import parplan.hardware.bench.gemm, parplan.hardware.bench.comm; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
