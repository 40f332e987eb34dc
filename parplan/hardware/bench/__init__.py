"""Micro-benchmarks that measure the numbers the cost model needs (``parplan bench``); they need torch.

Modules: `gemm` (matmul times over the model's GEMM shapes), `attention` (scaled-dot-product attention
forward and backward), `memory` (device copy bandwidth), `comm` (collectives over torchrun processes,
NCCL on GPUs, gloo on CPUs). Each returns `parplan.hardware.samples` records; `parplan.hardware.fit`
turns them into GPUSpec / LinkSpec numbers.

torch is imported lazily, inside the benchmark functions, so that importing parplan (the planner, the CLI)
never loads it and a missing torch gives a clear `BenchmarkError`. CPU runs work everywhere (tests, CI)
but say nothing about a GPU cluster: never fit a cluster to them.

Timing (`time_call`): on CUDA, per-call CUDA events recorded back to back and read after one final
synchronisation, so the device-side time is measured while the launch queue stays full; on CPU,
``time.perf_counter`` around each call. The median over repeats is reported (robust to a stray slow call).
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable
from typing import Any

from parplan.errors import ParplanError

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32",
                "fp8": "float8_e4m3fn"}
"""Benchmark dtype names (GPUSpec.peak_tflops keys, plus fp32 for CPUs) -> torch dtype attribute."""


class BenchmarkError(ParplanError):
    """A benchmark cannot run here: torch missing, an unsupported dtype, a failed torchrun."""


def require_torch() -> Any:
    """The torch module, or a BenchmarkError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise BenchmarkError("parplan bench needs torch: pip install 'parplan[bench]'") from None
    return torch


def resolve_device(device: str | None) -> str:
    """`device`, or 'cuda' when a GPU is visible and 'cpu' otherwise. A device that is not the host or a
    visible GPU ('cuda:7' on a 2-GPU node, 'meta', a typo) is a BenchmarkError: it has nothing to measure."""
    torch = require_torch()
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise BenchmarkError(f"unknown device '{device}'; use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda" and (not torch.cuda.is_available() or (parsed.index or 0) >= torch.cuda.device_count()):
        raise BenchmarkError(f"no CUDA device '{device}' here ({torch.cuda.device_count()} visible)")
    if parsed.type not in ("cpu", "cuda"):
        raise BenchmarkError(f"parplan bench measures cpu or cuda devices, not '{device}'")
    return device


def torch_dtype(name: str) -> Any:
    """torch dtype of a benchmark dtype name."""
    torch = require_torch()
    if name not in TORCH_DTYPES:
        raise BenchmarkError(f"unknown dtype '{name}'; known: {', '.join(TORCH_DTYPES)}")
    return getattr(torch, TORCH_DTYPES[name])


def device_name(device: str) -> str:
    """Marketing name of a CUDA device (torch.cuda.get_device_name), 'cpu' for the host."""
    torch = require_torch()
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"


def environment(device: str | None = None) -> dict[str, str | None]:
    """date, device, torch_version and nccl_version of this machine, the header fields of ProfileSamples."""
    torch = require_torch()
    dev = resolve_device(device)
    nccl = None
    if dev.startswith("cuda") and torch.distributed.is_nccl_available():
        nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    return {"date": datetime.date.today().isoformat(), "device": device_name(dev),
            # torch.__version__ is a TorchVersion (a str subclass) that yaml.safe_dump cannot represent.
            "torch_version": str(torch.__version__), "nccl_version": nccl}


def time_call(fn: Callable[[], object], device: str, *, repeats: int, warmup: int) -> float:
    """Median seconds of one call of `fn` on `device`, after `warmup` untimed calls (see module docstring)."""
    torch = require_torch()
    if repeats < 1:
        raise BenchmarkError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
        events = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(device)
        times = [start.elapsed_time(end) * 1e-3 for start, end in events]  # elapsed_time is in ms
    else:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)
