"""Memory benchmark: device-to-device copy bandwidth, for `fit.fit_memory` (GPUSpec.hbm_efficiency)."""

from __future__ import annotations

from collections.abc import Iterable

from parplan.hardware.bench import device_name, require_torch, resolve_device, time_call
from parplan.hardware.samples import MemorySample

GPU_SIZES = tuple(1 << p for p in range(24, 31, 2))
"""16 MiB .. 1 GiB: well past the L2 cache (50-126 MB on H100-B200), so HBM is what is measured."""
CPU_SIZES = (1 << 20, 1 << 22, 1 << 24)
"""1-16 MiB: enough for a functional check of the CPU path."""


def run_memory(sizes: Iterable[int] | None = None, *, repeats: int = 20, warmup: int = 3,
               device: str | None = None) -> list[MemorySample]:
    """Time `dst.copy_(src)` of byte buffers of each size; one sample per size.

    `gbps` counts read + write (2 × size), the traffic `efficiency.memory_bound_time` divides by the HBM
    bandwidth. Default sizes: `GPU_SIZES` on a GPU, `CPU_SIZES` on the host.
    """
    torch = require_torch()
    dev = resolve_device(device)
    name = device_name(dev)
    samples = []
    for size in sizes or (GPU_SIZES if dev.startswith("cuda") else CPU_SIZES):
        src = torch.ones(size, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        seconds = time_call(lambda src=src, dst=dst: dst.copy_(src), dev, repeats=repeats, warmup=warmup)
        samples.append(MemorySample(size_bytes=size, time_us=seconds * 1e6, gbps=2.0 * size / seconds / 1e9,
                                    device=name))
        del src, dst  # free before the next, larger buffer
    return samples
