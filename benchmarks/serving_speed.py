"""Speed of the serving model (issues 14 and 15): prints figures, asserts nothing.

    python benchmarks/serving_speed.py [--repeats 20] [--deployments 200000]

Reports: one `serve explain` in-process (serve_evaluate, median of repeats after a warm-up), the vectorised
path (evaluate_aggregated over many deployments at once: deployments per second, the same formulas), and the
`serve plan` search for DeepSeek-V3 on 64 H200 (ISL 4096 / OSL 1024, TPOT <= 50 ms, aggregated and
disaggregated, SGLang fp8): deployments evaluated and seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from parplan.hardware import load_cluster
from parplan.models import load_model
from parplan.serving import Deployment, Pool, Precision, Workload, serve_evaluate
from parplan.serving.engines import load_engine
from parplan.serving.evaluate import Traffic, evaluate_aggregated
from parplan.serving.layout import PoolArrays
from parplan.serving.plan import serve_plan


def _explain(repeats: int) -> None:
    cases = {
        "Llama-3.1-70B, 8x H100, vLLM tp8": ("llama3.1-70b", "h100", Deployment(
            engine="vllm", precision=Precision(gemm="fp8", moe="fp8", kv_cache="bf16"), pool=Pool(tp=8)),
            Workload(isl=1024, osl=1024, concurrency=64)),
        "DeepSeek-V3, 32x H200, SGLang disaggregated": ("deepseek-v3", "h200", Deployment(
            engine="sglang", precision=Precision(gemm="fp8", moe="fp8", kv_cache="bf16"), mode="disaggregated",
            prefill=Pool(tp=1, dp=16, moe_ep=16), decode=Pool(tp=1, dp=16, moe_ep=16, batch=64)),
            Workload(isl=4096, osl=1024, concurrency=1100)),
    }
    for label, (model, cluster, deployment, workload) in cases.items():
        serve_evaluate(model, cluster, deployment, workload)  # warm-up: file reads, caches
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            serve_evaluate(model, cluster, deployment, workload)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        print(f"serve explain, {label}: {statistics.median(times) * 1e3:.1f} ms wall (median of {repeats}, "
              f"min {min(times) * 1e3:.1f} ms), {statistics.median(cpu) * 1e3:.1f} ms of CPU")


def _vectorised(n: int) -> None:
    model, cluster = load_model("deepseek-v3"), load_cluster("h200", gpus=64)
    engine = load_engine("sglang")
    pools = [Pool(tp=tp, dp=64 // tp // w, moe_ep=64 // w, workers=w) for w in (1, 2, 4, 8) for tp in (1, 2, 4, 8)
             if 64 // w >= tp]
    lay = PoolArrays.from_pools(pools).take(np.arange(n) % len(pools))
    rng = np.random.default_rng(0)
    traffic = Traffic(isl=rng.integers(256, 8192, n).astype(float), osl=rng.integers(64, 2048, n).astype(float),
                      prompt=np.full(n, 1024.0), concurrency=rng.integers(1, 4096, n).astype(float))
    precision = Precision(gemm="fp8", moe="fp8", kv_cache="bf16")
    evaluate_aggregated(model, cluster, engine, precision, lay.take(np.arange(1000)), Traffic(
        isl=traffic.isl[:1000], osl=traffic.osl[:1000], prompt=traffic.prompt[:1000],
        concurrency=traffic.concurrency[:1000]))
    t0, c0 = time.perf_counter(), time.process_time()
    evaluate_aggregated(model, cluster, engine, precision, lay, traffic)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print(f"vectorised path: {n:,} aggregated deployments (DeepSeek-V3, random lengths and concurrency) in "
          f"{dt:.3f} s wall = {n / dt:,.0f} deployments/s; {dc:.3f} s of CPU = {n / dc:,.0f} deployments/s per "
          "core")


def _plan() -> None:
    serve_plan("deepseek-v3", "h200", 8, isl=4096, osl=1024, tpot_ms=50.0, engine="sglang",
               precisions=("fp8",))  # warm-up
    times, cpu, evaluated = [], [], 0
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        p = serve_plan("deepseek-v3", "h200", 64, isl=4096, osl=1024, tpot_ms=50.0, engine="sglang",
                       precisions=("fp8",))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        evaluated = p.evaluated
    best = p.best
    print(f"serve plan, DeepSeek-V3 on 64x H200, ISL 4096 / OSL 1024, TPOT <= 50 ms, both modes: {evaluated:,} "
          f"deployments in {statistics.median(times):.2f} s wall (median of 3, min {min(times):.2f} s; "
          f"{statistics.median(cpu):.2f} s of CPU), {evaluated / statistics.median(times):,.0f} deployments/s; best "
          f"{best.mode} {best.tokens_per_s_per_gpu:,.0f} tokens/s per GPU on {best.gpus} GPUs")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--deployments", type=int, default=200_000)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    _explain(args.repeats)
    _vectorised(args.deployments)
    _plan()


if __name__ == "__main__":
    main()
