"""The MoE section of `explain`: where one layout's expert-parallel time and memory go.

Every figure is read off the same formulas the estimate used (comm.expert_traffic for the all-to-all
bytes, the GEMM curve for the expert GEMMs, the Workload for the imbalance); the replica memory is the
difference between the estimate and the same layout without redundant experts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from parplan.hardware.efficiency import peak_flops
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import Block, LayerKind, ModelSpec
from parplan.planner import comm, compute, experts
from parplan.planner.context import ACT_BYTES, Ctx
from parplan.planner.estimate import Estimate, evaluate
from parplan.planner.strategy import Layouts
from parplan.planner.workload import UNIFORM, Workload
from parplan.stacks.presets import load_stack
from parplan.stacks.spec import StackSpec


@dataclass(frozen=True, slots=True)
class MoESection:
    """Expert-parallel figures of one layout, per MoE layer and micro-batch unless a field says per step."""

    ep: int
    etp: int
    ep_nodes: int
    """Scale-up domains (nodes) one EP group spans."""
    expert_slots_per_gpu: float
    """Routed expert slots each GPU holds (logical experts plus EPLB replicas, over ep)."""
    dispatch: str
    tokens_per_expert: float
    """Rows of each local expert's GEMMs (its share of the routed copies) on the busiest rank."""
    dispatch_intra_mib: float
    """One forward dispatch, MiB a GPU sends over NVLink (fp8 with deepep-fp8)."""
    dispatch_inter_mib: float
    """One forward dispatch, MiB a GPU sends over its NIC."""
    combine_intra_mib: float
    combine_inter_mib: float
    inter_node_share: float
    """Share of the dispatched bytes that leave the node."""
    max_nodes_per_token: int | None
    """Node-limited routing bound M (n_group/topk_group), None when the model does not limit nodes."""
    remote_nodes_per_token: float
    """Expected other nodes a token is sent to (what DeepEP sends over the NIC, in hidden-size rows)."""
    a2a_step_seconds: float
    """All-to-all (and ETP gather/scatter) seconds per step on the critical rank, exposed or not."""
    a2a_exposed_seconds: float
    workload: str
    imbalance_without_eplb: float
    """Max/mean per-GPU expert load with the experts placed contiguously (no redundant experts)."""
    imbalance: float
    """Max/mean per-GPU load with this layout's redundant experts placed by EPLB."""
    expert_gemm_tflops: float
    """Achieved TFLOP/s of the routed expert GEMMs (forward)."""
    expert_gemm_efficiency: float
    """expert_gemm_tflops over the dense peak of the GEMM dtype."""
    dense_gemm_efficiency: float
    """The same for the layer's other GEMMs (attention, shared experts), for comparison."""
    replica_memory_gib: float
    """GiB of weights, gradients and optimizer states the redundant experts add to a GPU (the most on any
    pipeline rank)."""

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _efficiency(ctx: Ctx, blocks: set[Block], inside: bool) -> tuple[float, float]:
    """(TFLOP/s, share of peak) of one MoE layer's forward GEMMs in `blocks` (or outside them)."""
    work = compute.gemm_work(ctx, LayerKind.MOE, lambda lin: (lin.block in blocks) == inside)
    flops, seconds = float(work.flops[0]), float(work.forward[0])
    gpu = ctx.cluster.gpu
    tflops = flops / seconds / 1e12 if seconds > 0 else 0.0
    return tflops, tflops * 1e12 / float(peak_flops(gpu, ctx.fp8)[0])


def _states(stage: dict[str, object]) -> float:
    mem = stage["memory_gib"]
    return mem["weights"] + mem["gradients"] + mem["optimizer"]


def moe_section(model: ModelSpec, cluster: ClusterSpec, est: Estimate, workload: Workload = UNIFORM,
                stack: StackSpec | None = None) -> MoESection | None:
    """The MoE figures of `est` (costed as `stack` runs it; default megatron-core); None for a dense model."""
    moe = model.moe
    if moe is None:
        return None
    s = est.strategy
    stack = load_stack(stack)
    ctx = Ctx.build(model, cluster, Layouts.from_strategies([s]), workload, stack)
    dispatch = comm.expert_traffic(ctx, comm.dispatch_bytes(ctx))
    combine = comm.expert_traffic(ctx, float(ACT_BYTES))
    mib = 2.0**20
    inter, intra = float(dispatch.inter_node[0]), float(dispatch.intra_node[0])
    nodes = int(ctx.ep_nodes[0])
    limited = moe.group_limited and nodes > 1
    slots = moe.experts + s.redundant_experts
    # The rows each local expert's GEMMs get: read off the very shapes the compute model times.
    tokens_per_expert = next(float(np.asarray(m).ravel()[0]) for lin, m, _, _, _ in
                             compute.gemm_shapes(ctx, LayerKind.MOE) if lin.block is Block.EXPERTS)
    expert_tflops, expert_eff = _efficiency(ctx, {Block.EXPERTS}, inside=True)
    _, dense_eff = _efficiency(ctx, {Block.EXPERTS, Block.ROUTER}, inside=False)
    replica_gib = 0.0
    if s.redundant_experts:
        # Model states only: the replicas also shrink the busiest rank's activations when the load is skewed.
        without = evaluate(model, cluster, dataclasses.replace(s, redundant_experts=0), workload=workload,
                           stack=stack)
        replica_gib = max(_states(a) - _states(b) for a, b in zip(est.stages, without.stages, strict=True))
    ep_time = est.time_breakdown["ep_comm"]
    return MoESection(
        ep=s.ep, etp=s.etp, ep_nodes=nodes, expert_slots_per_gpu=slots / s.ep, dispatch=s.dispatch,
        tokens_per_expert=tokens_per_expert,
        dispatch_intra_mib=intra / mib, dispatch_inter_mib=inter / mib,
        combine_intra_mib=float(combine.intra_node[0]) / mib, combine_inter_mib=float(combine.inter_node[0]) / mib,
        inter_node_share=inter / (inter + intra) if inter + intra > 0 else 0.0,
        max_nodes_per_token=experts.max_nodes_per_token(moe.n_group, moe.topk_group, nodes) if limited else None,
        remote_nodes_per_token=float(comm.remote_nodes_per_token(ctx)[0]) if nodes > 1 else 0.0,
        a2a_step_seconds=ep_time["seconds"], a2a_exposed_seconds=ep_time["exposed"],
        workload=workload.name,
        imbalance_without_eplb=workload.straggler(model, s.ep, 0, nodes),
        imbalance=float(ctx.straggler[0]),
        expert_gemm_tflops=expert_tflops, expert_gemm_efficiency=expert_eff, dense_gemm_efficiency=dense_eff,
        replica_memory_gib=replica_gib,
    )
