"""Fit the cost model's hardware numbers to measured samples (nccl-tests logs, `parplan bench`).

Every fit minimises the *relative* time error, so a 45 µs small message and a 66 ms large one weigh the
same: the planner times collectives and GEMMs of every size, and an absolute-error fit would only see the
largest samples. Residuals are returned as (model − measured) / measured per sample.

Where the fitted values go (``parplan.hardware.spec``):

- `fit_alpha_beta` (one collective on one rank placement) -> `AlphaBetaFit.busbw_gbps`; its
  `link_busbw_gbps` is the number for a `LinkSpec`: with all ranks in one node it is ``scaleup.busbw_gbps``
  (all-gather / reduce-scatter / all-to-all fits, ring algorithms) or ``scaleup.allreduce_busbw_gbps``
  (all-reduce over more than 4 GPUs on an NVSwitch, where NCCL picks NVLS); across nodes it is
  ``scaleout.busbw_gbps``, the per-GPU NIC rate that makes the hierarchical model reproduce the measured
  time. A LinkSpec busbw is the *large-message* bandwidth: fit it with ``min_bytes`` in the flat part of
  the sweep (e.g. 256 MiB; on the 2×8 H200 sample log 488 GB/s there, 426 GB/s over the whole 1 KiB-16 GiB
  sweep, where NCCL's protocol changes bend the curve). `alpha_us` is the time of a small message, one
  call (fit over the whole sweep, or read the smallest sizes): the cost model's latency of that collective
  (``efficiency._latency``: NCCL_BASE_US + steps × ``ring_step_us``), so ``ring_step_us`` ≈ (α −
  NCCL_BASE_US) / steps with steps = 2(n−1) for a ring all-reduce, n−1 for all-gather / reduce-scatter.
  nccl-tests' α includes the host launch of a non-aggregated call (~40 µs, ``reference/hardware.md``
  §2.2), so it is an upper bound of the device-side latency.
- `fit_gemm_curve` -> ``GPUSpec.gemm_peak_fraction[dtype]``, ``gemm_tile_overhead_us``,
  ``kernel_launch_us`` (`GemmFit.apply`).
- `fit_attention` -> ``GPUSpec.attention_fwd_fraction``, ``attention_bwd_fraction``,
  ``attention_half_seq`` (`AttentionFit.apply`).
- `fit_memory` -> ``GPUSpec.hbm_efficiency`` (`MemoryFit.apply`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from parplan.errors import ConfigError
from parplan.hardware.efficiency import (
    FLASH_BACKWARD_FLOPS,
    Collective,
    attention_forward_flops,
    flash_attention_time,
    gemm_ceiling,
    gemm_time,
    link_bytes,
    memory_bound_time,
)
from parplan.hardware.samples import AttentionSample, CollectiveSample, GemmSample, MemorySample, busbw_factor
from parplan.hardware.spec import GPUSpec


def _rms(residuals: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(residuals))))


# ------------------------------------------------------------------------------------------ collectives

@dataclass(frozen=True, slots=True, kw_only=True)
class AlphaBetaFit:
    """time(S) = α + factor(n) · S / busbw for one collective on one rank placement (Hockney, hardware.md §6).

    Fitting busbw rather than a per-link bandwidth keeps nccl-tests' convention: for ring algorithms busbw
    does not depend on n, so fits at different rank counts compare directly.
    """

    collective: str
    ranks: int
    ranks_per_node: int
    alpha_us: float
    """Fixed time of one call (latency, launch), microseconds."""
    busbw_gbps: float
    """Bus bandwidth of large messages, GB/s (1e9 B/s)."""
    sizes_bytes: tuple[int, ...]
    """Message size S (nccl-tests convention) of each sample the fit used."""
    residuals: tuple[float, ...]
    """(model − measured) / measured time of each sample the fit used."""
    rms_rel_error: float
    """Root mean square of `residuals`."""

    def time_us(self, size_bytes: float) -> float:
        """Modelled time of one call with message size S, microseconds."""
        return self.alpha_us + busbw_factor(self.collective, self.ranks) * size_bytes / (self.busbw_gbps * 1e3)

    @property
    def link_busbw_gbps(self) -> float:
        """Bandwidth for the `LinkSpec` this fit measures, GB/s (see the module docstring).

        Inside one node: busbw itself. Across k nodes of g ranks (n = g·k) the inter-node phase is taken to
        set the time, as in `efficiency.collective_time`, with the NIC bytes `efficiency.link_bytes` assigns:
        busbw · (k−1)/(n−1) for all-reduce, all-gather and reduce-scatter (hardware.md §6.2), busbw ·
        (n−g)/(n−1) for all-to-all, busbw for send/recv. Only the cost model's collectives have one.
        """
        n, g = self.ranks, self.ranks_per_node
        if g >= n or n <= 1:
            return self.busbw_gbps
        # nccl-tests time = busbw_factor·S / busbw; the model's time = NIC bytes / NIC bandwidth.
        _, nic = link_bytes(Collective(self.collective), 1.0, n, g)
        return self.busbw_gbps * float(nic) / busbw_factor(self.collective, n)


def fit_alpha_beta(samples: Sequence[CollectiveSample], *, min_bytes: int = 0) -> AlphaBetaFit:
    """Least-squares α and busbw of samples of one collective and placement (same ranks, ranks_per_node).

    Relative errors are minimised (a linear problem in α and 1/busbw, weights 1/time), with α ≥ 0; both
    halves of nccl-tests rows (out-of-place, in-place) count as samples. `min_bytes` drops smaller
    messages, to fit the bandwidth-bound range only: NCCL switches protocol (LL -> LL128 -> Simple) with
    size, so a single α-β line is a compromise over the whole sweep (reported as `rms_rel_error`).
    """
    from scipy.optimize import lsq_linear  # scipy (0.5 s to import) loads only when a fit runs

    used = [s for s in samples if s.size_bytes >= min_bytes]
    keys = {(s.collective, s.ranks, s.ranks_per_node) for s in samples}
    if len(keys) > 1:
        raise ValueError(f"samples mix collectives or placements {sorted(keys)}; use fit_collectives")
    source = samples[0].source if samples else None
    if len({s.size_bytes for s in used}) < 2:
        raise ConfigError(f"need samples at 2 or more message sizes >= {min_bytes} B to fit α and busbw",
                          file=source)
    collective, ranks, per_node = next(iter(keys))
    t = np.array([s.time_us for s in used])
    # Microseconds the bytes take at 1 GB/s: time = α + x / busbw.
    x = np.array([busbw_factor(collective, ranks) * s.size_bytes / 1e3 for s in used])
    design = np.column_stack([np.ones_like(t), x]) / t[:, None]
    solution = lsq_linear(design, np.ones_like(t), bounds=([0.0, 0.0], [np.inf, np.inf]))
    alpha, inv_bw = (float(v) for v in solution.x)
    if inv_bw <= 0:
        raise ConfigError(f"{collective}: time does not grow with message size; measure larger messages",
                          file=source)
    residuals = (alpha + x * inv_bw) / t - 1.0
    return AlphaBetaFit(collective=collective, ranks=ranks, ranks_per_node=per_node, alpha_us=alpha,
                        busbw_gbps=1.0 / inv_bw, sizes_bytes=tuple(s.size_bytes for s in used),
                        residuals=tuple(float(r) for r in residuals), rms_rel_error=_rms(residuals))


def fit_collectives(samples: Sequence[CollectiveSample], *,
                    min_bytes: int = 0) -> dict[tuple[str, int, int], AlphaBetaFit]:
    """`fit_alpha_beta` of each (collective, ranks, ranks_per_node) group of `samples`."""
    groups: dict[tuple[str, int, int], list[CollectiveSample]] = {}
    for s in samples:
        groups.setdefault((s.collective, s.ranks, s.ranks_per_node), []).append(s)
    return {key: fit_alpha_beta(group, min_bytes=min_bytes) for key, group in sorted(groups.items())}


# ------------------------------------------------------------------------------------------------- GEMM

@dataclass(frozen=True, slots=True, kw_only=True)
class GemmFit:
    """Free parameters of `efficiency.gemm_time` fitted to measured GEMMs (sm_count and tile kept fixed)."""

    gemm_peak_fraction: dict[str, float]
    """Best-GEMM throughput / peak per fitted dtype (GPUSpec field of the same name)."""
    gemm_tile_overhead_us: float
    """Time per output tile outside the K loop, microseconds."""
    kernel_launch_us: float
    """Fixed cost of every kernel, microseconds."""
    residuals: tuple[float, ...]
    """(model − measured) / measured time per sample, in the samples' order."""
    rms_rel_error: float

    def fields(self) -> dict[str, object]:
        """The fitted GPUSpec fields (gemm_peak_fraction only for the dtypes measured)."""
        return {"gemm_peak_fraction": self.gemm_peak_fraction, "gemm_tile_overhead_us": self.gemm_tile_overhead_us,
                "kernel_launch_us": self.kernel_launch_us}

    def apply(self, gpu: GPUSpec) -> GPUSpec:
        """`gpu` with the fitted GEMM parameters (other dtypes' fractions kept)."""
        return dataclasses.replace(gpu, **{**self.fields(), "gemm_peak_fraction": {**gpu.gemm_peak_fraction,
                                                                                  **self.gemm_peak_fraction}})


def fit_gemm_curve(samples: Sequence[GemmSample], gpu: GPUSpec) -> GemmFit:
    """Fit gemm_peak_fraction (per dtype in the samples), gemm_tile_overhead_us and kernel_launch_us so that
    `efficiency.gemm_time` on `gpu` matches the measured times with the least relative error.

    Starts from `gpu`'s values; fractions are bounded to [0.05, 1], the overheads to [0, 100] µs. The
    samples should span tile-bound and launch-bound shapes (`bench.default_gemm_shapes` does), else the
    overheads are poorly determined and stay near their start.
    """
    dtypes = sorted({s.dtype for s in samples})
    missing = [d for d in dtypes if d not in gpu.peak_tflops]
    if not samples or missing:
        raise ConfigError(f"GEMM samples needed in dtypes the GPU has a peak for ({', '.join(gpu.peak_tflops)}); "
                          f"got {', '.join(missing) or 'none'}", field="gemm")
    measured = np.array([s.time_us for s in samples])
    groups = [(d, np.array([i for i, s in enumerate(samples) if s.dtype == d])) for d in dtypes]
    shapes = np.array([(s.m, s.n, s.k) for s in samples], dtype=float)

    def with_params(p: np.ndarray) -> GPUSpec:
        fractions = {d: float(f) for d, f in zip(dtypes, p[:-2], strict=True)}
        return dataclasses.replace(gpu, gemm_peak_fraction={**gpu.gemm_peak_fraction, **fractions},
                                   gemm_tile_overhead_us=float(p[-2]), kernel_launch_us=float(p[-1]))

    def residuals(p: np.ndarray) -> np.ndarray:
        g = with_params(p)
        model = np.empty_like(measured)
        for dtype, idx in groups:
            m, n, k = shapes[idx].T
            model[idx] = gemm_time(g, m, n, k, dtype) * 1e6
        return model / measured - 1.0

    x0 = [min(max(gemm_ceiling(gpu, d), 0.05), 1.0) for d in dtypes]
    x0 += [gpu.gemm_tile_overhead_us, gpu.kernel_launch_us]
    lower = [0.05] * len(dtypes) + [0.0, 0.0]
    upper = [1.0] * len(dtypes) + [100.0, 100.0]
    result = _least_squares(residuals, x0, lower, upper)
    fitted = with_params(result)
    res = residuals(result)
    return GemmFit(gemm_peak_fraction={d: fitted.gemm_peak_fraction[d] for d in dtypes},
                   gemm_tile_overhead_us=fitted.gemm_tile_overhead_us, kernel_launch_us=fitted.kernel_launch_us,
                   residuals=tuple(float(r) for r in res), rms_rel_error=_rms(res))


def _least_squares(fun: Callable[[np.ndarray], np.ndarray], x0: Sequence[float], lower: Sequence[float],
                   upper: Sequence[float]) -> np.ndarray:
    """Bounded nonlinear least squares; the cost model has kinks (tile choice, roofline max), so the
    finite-difference step is kept well above rounding noise."""
    from scipy.optimize import least_squares  # scipy (0.5 s to import) loads only when a fit runs

    x0 = np.clip(np.asarray(x0, dtype=float), lower, upper)
    return least_squares(fun, x0, bounds=(lower, upper), diff_step=1e-4, x_scale="jac").x


# -------------------------------------------------------------------------------------------- attention

def attention_flops(sample: AttentionSample) -> float:
    """Forward FLOPs of QKᵀ and P·V as the planner counts them (causal half for a causal mask)."""
    kv = sample.seq / 2 if sample.causal else sample.seq
    return float(attention_forward_flops(sample.batch, sample.heads, sample.seq, kv, sample.head_dim,
                                         sample.head_dim))


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionFit:
    """`efficiency.attention_efficiency` parameters: throughput = fraction · peak · s / (s + half_seq)."""

    attention_fwd_fraction: float
    attention_bwd_fraction: float
    attention_half_seq: int
    residuals: tuple[float, ...]
    """(model − measured) / measured, forward times then backward times, in the samples' order."""
    rms_rel_error: float

    def fields(self) -> dict[str, object]:
        """The fitted GPUSpec fields."""
        return {"attention_fwd_fraction": self.attention_fwd_fraction,
                "attention_bwd_fraction": self.attention_bwd_fraction, "attention_half_seq": self.attention_half_seq}

    def apply(self, gpu: GPUSpec) -> GPUSpec:
        return dataclasses.replace(gpu, **self.fields())


def fit_attention(samples: Sequence[AttentionSample], gpu: GPUSpec) -> AttentionFit:
    """Fit the flash-attention curve to measured forward and backward times (backward FLOPs = 2.5 × forward,
    the planner's convention). half_seq is shared by both passes and kept at `gpu`'s value unless the
    samples cover two or more sequence lengths."""
    if not samples or any(s.dtype not in gpu.peak_tflops for s in samples):
        raise ConfigError("attention samples needed in a dtype the GPU has a peak for", field="attention")
    seq = np.array([s.seq for s in samples], dtype=float)
    peak = np.array([gpu.peak_tflops[s.dtype] * 1e12 for s in samples])
    flops = np.array([attention_flops(s) for s in samples])
    measured = np.concatenate([[s.fwd_us for s in samples], [s.bwd_us for s in samples]]) * 1e-6
    free_half = len(set(seq)) > 1

    def with_params(p: np.ndarray) -> GPUSpec:
        half = round(float(p[2])) if free_half else gpu.attention_half_seq
        return dataclasses.replace(gpu, attention_fwd_fraction=float(p[0]), attention_bwd_fraction=float(p[1]),
                                   attention_half_seq=half)

    def residuals(p: np.ndarray) -> np.ndarray:
        # The curve of attention_efficiency written out: half_seq is an int field, the fit moves it smoothly.
        half = p[2] if free_half else gpu.attention_half_seq
        fwd = flops / (peak * p[0] * seq / (seq + half))
        bwd = FLASH_BACKWARD_FLOPS * flops / (peak * p[1] * seq / (seq + half))
        return np.concatenate([fwd, bwd]) / measured - 1.0

    x0 = [gpu.attention_fwd_fraction, gpu.attention_bwd_fraction, float(gpu.attention_half_seq)]
    result = _least_squares(residuals, x0, [0.01, 0.01, 0.0], [1.0, 1.0, 1e5])
    fitted = with_params(result)
    # Report residuals of the model as the planner evaluates it (integer half_seq).
    fwd, bwd = flash_attention_time(fitted, flops, seq, peak)
    res = np.concatenate([fwd, bwd]) / measured - 1.0
    return AttentionFit(attention_fwd_fraction=fitted.attention_fwd_fraction,
                        attention_bwd_fraction=fitted.attention_bwd_fraction,
                        attention_half_seq=fitted.attention_half_seq,
                        residuals=tuple(float(r) for r in res), rms_rel_error=_rms(res))


# ----------------------------------------------------------------------------------------------- memory

@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryFit:
    """`GPUSpec.hbm_efficiency` fitted to copy times: time = traffic / (hbm_tbps · efficiency) + launch."""

    hbm_efficiency: float
    residuals: tuple[float, ...]
    rms_rel_error: float

    def fields(self) -> dict[str, object]:
        """The fitted GPUSpec field."""
        return {"hbm_efficiency": self.hbm_efficiency}

    def apply(self, gpu: GPUSpec) -> GPUSpec:
        return dataclasses.replace(gpu, **self.fields())


def fit_memory(samples: Sequence[MemorySample], gpu: GPUSpec) -> MemoryFit:
    """Least relative error hbm_efficiency, with `gpu.kernel_launch_us` as the fixed per-copy cost (fit the
    GEMM curve first). Traffic is read + write, as `MemorySample.gbps` counts it."""
    if not samples:
        raise ConfigError("memory samples needed", field="memory")
    t = np.array([s.time_us for s in samples])
    # Microseconds the traffic takes at the full hbm_tbps; time = launch + x / efficiency.
    x = np.array([2.0 * s.size_bytes for s in samples]) / (gpu.hbm_tbps * 1e6)
    rest = t - gpu.kernel_launch_us
    # Weighted (1/t) linear least squares for 1/efficiency.
    inv = float(np.sum(x * rest / t**2) / np.sum(x * x / t**2))
    efficiency = float(np.clip(1.0 / inv, 1e-3, 1.0)) if inv > 0 else 1.0
    traffic = np.array([2.0 * s.size_bytes for s in samples])
    res = memory_bound_time(dataclasses.replace(gpu, hbm_efficiency=efficiency), traffic) * 1e6 / t - 1.0
    return MemoryFit(hbm_efficiency=efficiency, residuals=tuple(float(r) for r in res), rms_rel_error=_rms(res))
