"""Time of what a stack keeps in host memory (`StackSpec.memory`): the traffic over the GPU's host link and the CPU
optimizer step. Offloading only adds time: the GPU optimizer step shrinks by the offloaded share, and the host
step that replaces it streams the same bytes at host DRAM bandwidth, lower than HBM's on every GPU parplan knows.

- Optimizer states (Megatron --optimizer-cpu-offload, DeepSpeed ZeRO-Offload): each step the offloaded share
  of the gradients goes to the host, the CPU runs Adam over it, and the updated bf16 weights come back; nothing
  of it overlaps the forward and backward (ZeRO-Offload paper, arXiv 2101.06840 §4: the CPU step sits between
  backward and the next forward unless delayed parameter update is on).
- Activations (Megatron --cpu-offloading, Transformer Engine's CPU offload): each offloaded layer's saved
  activations go out after its forward and come back before its backward, on a copy stream beside the other
  layers' compute; only what the compute of a micro-batch cannot cover waits.
- EMA in host memory (DeepSeek-V3 §3.2.3): the updated weights go to the host after each step, asynchronously,
  behind the next step; only a copy longer than the step waits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.planner.context import Ctx
from parplan.planner.memory import COMPUTE_WEIGHT_BYTES, EMA_BYTES

CPU_ADAM_BYTES_PER_PARAM = 28
"""Host traffic of one Adam update per parameter: read gradient, master, m, v (16 B), write master, m, v (12 B)
(DeepSpeed csrc/adam/cpu_adam_impl.cpp Step_AVX over fp32 buffers)."""


@dataclass(frozen=True, slots=True)
class OffloadTime:
    """Seconds per step of host-memory traffic and the CPU step, busy and exposed on the critical path."""

    seconds: np.ndarray
    exposed: np.ndarray


def offload_time(ctx: Ctx, offloaded_params: np.ndarray, grad_elements: np.ndarray, ema_params: np.ndarray,
                 activations: np.ndarray, forward_s: np.ndarray, backward_s: np.ndarray,
                 step_s: np.ndarray) -> OffloadTime:
    """(N,) host traffic of one step: `offloaded_params` parameters whose optimizer states the host holds and
    their `grad_elements` gradients; `ema_params` parameters whose EMA the host holds; `activations` bytes
    offloaded per micro-batch on the critical rank, whose compute takes `forward_s` and `backward_s` per
    micro-batch; `step_s` the step without offloading."""
    mem, gpu = ctx.stack.memory, ctx.cluster.gpu
    link = gpu.host_link_gbps * 1e9
    optimizer = (grad_elements * mem.grad_bytes / link + offloaded_params * COMPUTE_WEIGHT_BYTES / link
                 + offloaded_params * CPU_ADAM_BYTES_PER_PARAM / (gpu.host_memory_gbps * 1e9))
    copy = activations / link
    m = ctx.m.astype(float)
    act_exposed = m * (np.maximum(copy - forward_s, 0.0) + np.maximum(copy - backward_s, 0.0))
    ema = ema_params * EMA_BYTES / link
    ema_exposed = np.maximum(ema - step_s, 0.0)
    return OffloadTime(seconds=optimizer + 2.0 * m * copy + ema, exposed=optimizer + act_exposed + ema_exposed)
