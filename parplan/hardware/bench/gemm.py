"""GEMM benchmark: time torch matmuls of given shapes, for `fit.fit_gemm_curve`.

Shapes are (m, n, k) for (m×k)·(k×n), the convention of `efficiency.gemm_time`. `default_gemm_shapes`
lists the shapes a model's layers run after tensor parallelism, so the fit is tuned where the planner
evaluates the curve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from parplan.hardware.bench import BenchmarkError, device_name, require_torch, resolve_device, time_call, torch_dtype
from parplan.hardware.samples import GemmSample
from parplan.models.spec import Block, ModelSpec, Shard

DEFAULT_TOKENS = (1024, 2048, 4096, 8192, 16384)
"""Micro-batch token counts (micro-batch × sequence) of the default shape list."""


def default_gemm_shapes(model: ModelSpec, tp: int,
                        tokens: Sequence[int] = DEFAULT_TOKENS) -> list[tuple[int, int, int]]:
    """Sorted distinct (m, n, k) of every linear of `model`'s layers on one TP rank, for each token count.

    COLUMN linears split their output features over `tp`, ROW linears their input features; replicated
    ones are whole. Routed experts get tokens × top_k / experts rows each (uniform routing, no expert
    parallelism) and are split like the others (Megatron's default expert-TP = TP). Each linear gives its
    three training GEMMs, as the planner times them: forward (m, n, k), input gradient (m, k, n), weight
    gradient (k, n, m).
    """
    if tp < 1:
        raise BenchmarkError(f"tp must be >= 1, got {tp}")
    shapes: set[tuple[int, int, int]] = set()
    for kind in set(model.layer_kinds()):
        for lin in model.layer_linears(kind):
            n, k = lin.d_out, lin.d_in
            if lin.shard is Shard.COLUMN:
                n = max(1, n // tp)
            elif lin.shard is Shard.ROW:
                k = max(1, k // tp)
            for t in tokens:
                m = max(1, round(t * lin.tokens_fraction)) if lin.block is Block.EXPERTS else t
                shapes |= {(m, n, k), (m, k, n), (k, n, m)}
    return sorted(shapes)


def run_gemm(shapes: Iterable[tuple[int, int, int]], dtypes: Sequence[str] = ("bf16",), *, repeats: int = 20,
             warmup: int = 5, device: str | None = None) -> list[GemmSample]:
    """Time `torch.matmul` of each shape in each dtype; one sample per (shape, dtype).

    dtypes: bf16, fp16, fp32, tf32 (fp32 tensors with TF32 tensor cores allowed; plain fp32 on CPU) and
    fp8 (e4m3 operands through torch._scaled_mm with unit scales and a bf16 output, as fp8 training
    recipes run their GEMMs). Operands are random, allocated once per shape and not flushed from L2
    between calls (ml-engineering's MAMF finder flushes), which flatters shapes that fit in L2 slightly.
    """
    torch = require_torch()
    dev = resolve_device(device)
    name = device_name(dev)
    samples = []
    for dtype in dtypes:
        for m, n, k in shapes:
            fn = _matmul(torch, dev, dtype, m, n, k)
            previous = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            try:
                seconds = time_call(fn, dev, repeats=repeats, warmup=warmup)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = previous
            samples.append(GemmSample(m=m, n=n, k=k, dtype=dtype, time_us=seconds * 1e6,
                                      tflops=2.0 * m * n * k / seconds / 1e12, device=name))
    return samples


def _matmul(torch: Any, device: str, dtype: str, m: int, n: int, k: int) -> Callable[[], object]:
    """A no-argument callable running one (m×k)·(k×n) GEMM on fresh random operands."""
    elem = torch_dtype(dtype)
    if dtype == "fp8":
        if m % 16 or n % 16 or k % 16:
            raise BenchmarkError(f"fp8 GEMMs need every dimension a multiple of 16 (cuBLASLt), got {m}x{n}x{k}")
        a = torch.randn(m, k, device=device).to(elem)
        # _scaled_mm wants its second operand column-major: build (n, k) and view it transposed.
        b = torch.randn(n, k, device=device).to(elem).t()
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, device=device, dtype=elem)
    b = torch.randn(k, n, device=device, dtype=elem)
    return lambda: torch.matmul(a, b)
