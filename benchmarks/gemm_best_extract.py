"""Rebuild data/hardware/gemm_best.csv from aiconfigurator's kernel database.

    pip install pyarrow      # not a parplan dependency: only this script reads parquet
    python benchmarks/gemm_best_extract.py AICONFIGURATOR_CHECKOUT > parplan/data/hardware/gemm_best.csv

Reads `aic-core/src/aiconfigurator_core/systems/data/<gpu>/gemm/<engine>/<version>/gemm_perf.parquet` of a checkout
(ai-dynamo/aiconfigurator @ 095f58a for the shipped file): dense GEMMs timed by each engine's collector (its own
GEMM op, activation quantisation included) over a grid of m, n, k. Keeps, per GPU system of DEVICES, engine version
and GEMM type, the best throughput over the grid and the shape it was reached at: the statistic MAMF reports (the
maximum achievable matmul FLOP/s over many shapes). A table counts only where its samples name the system's GPU
(DEVICES) and its grid reaches the large shapes (FULL_GRID). Seconds.
"""

from __future__ import annotations

from pathlib import Path

from _aiconfigurator import rebuild  # benchmarks/, beside this script

DEVICES = {"b200_sxm": "NVIDIA B200", "b300_sxm": "NVIDIA B300", "gb200": "NVIDIA GB200", "gb300": "NVIDIA GB300",
           "h100_sxm": "NVIDIA H100", "h200_sxm": "NVIDIA H200",
           "rtx_pro_6000_server": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}
"""GPU systems as aiconfigurator names its directories -> the device name its samples record (a prefix): one of
B300's tables was collected on a GB300 (sglang 0.5.14 @095f58a, the same file as GB300's), and is left out."""
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "fp4"}
"""aiconfigurator's GEMM types -> parplan's: fp8 is per-tensor scaled (its fp8_block, DeepGEMM's 128x128 blocks, is
left out: the collectors put the same kernel 0.12-0.40 of the peak apart), fp4 is NVFP4."""
FULL_GRID = 16384
"""The largest n and k a table's grid must reach for its best to count, as all tables do but TensorRT-LLM
1.3.0rc15's on B200, which stops at n = 2,560: GEMMs peak at large shapes (the kept tables' bests lie at n >= 1,536,
k >= 2,560 and the larger of the two >= 8,192)."""
COLUMNS = ("system", "dtype", "engine", "version", "best_tflops", "m", "n", "k")


def rows(root: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq  # optional: see the module docstring

    out = []
    for system, device in DEVICES.items():
        for path in sorted((root / system / "gemm").glob("*/*/gemm_perf.parquet")):
            engine, version = path.parent.parent.name, path.parent.name
            samples = pq.read_table(path).to_pylist()
            if (not all(str(r["device"]).startswith(device) for r in samples)
                    or max(r["n"] for r in samples) < FULL_GRID or max(r["k"] for r in samples) < FULL_GRID):
                continue
            best: dict[str, tuple[float, int, int, int]] = {}
            for r in samples:
                dtype = DTYPES.get(r["gemm_dtype"])
                if dtype is None or not r["latency"] > 0:
                    continue
                m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
                tflops = 2.0 * m * n * k / (float(r["latency"]) * 1e-3) / 1e12
                if tflops > best.get(dtype, (0.0,))[0]:
                    best[dtype] = (tflops, m, n, k)
            for dtype, (tflops, m, n, k) in sorted(best.items()):
                out.append({"system": system, "dtype": dtype, "engine": engine, "version": version,
                            "best_tflops": round(tflops, 1), "m": m, "n": n, "k": k})
    return out


def main() -> None:
    rebuild("gemm_best_extract.py", COLUMNS, rows)


if __name__ == "__main__":
    main()
