"""Communication of each parallel dimension, and how much of it the step actually waits for.

Volumes follow ``reference/formulas.md`` §4 (message S in nccl-tests' convention, see
hardware.efficiency.collective_time); the link level each collective lands on follows from the rank
placement in context.py. Overlap is modelled, not assumed:

- TP: on the critical path (Megatron runs it between dependent GEMMs), except the backward re-gather of
  the sequence-parallel input, which overlaps the data-grad GEMM; with --tp-comm-overlap (torchtitan: async
  TP) it hides behind the layer's GEMMs. DTensor TP (StackSpec.communication.tp_style) keeps the gathered
  input instead of re-gathering it.
- CP: ring passes of K/V blocks overlap the attention of the block before (Megatron context_parallel.rst).
- EP: dispatch and combine wait on the router and feed the experts: exposed, except under DualPipe and
  DualPipeV whose paired micro-batch computes while they run.
- PP: point-to-point per micro-batch; exposed under 1F1B/ZB, overlapped by the interleaved and DualPipe
  schedules.
- DP: Megatron --overlap-grad-reduce reduces buckets during the last micro-batch's backward and
  --overlap-param-gather gathers during the next forward, so only what exceeds that window, and at least
  the last bucket, is exposed. ZeRO-2/3 without pipelining reduce-scatter after every micro-batch
  (DeepSpeed, FSDP); under pipelining the gradient sync is deferred to the last micro-batch
  (torch.distributed.pipelining stage.backward_maybe_with_nosync), so they reduce once per step. ZeRO-3
  gathers parameters before each micro-batch's forward and again for its backward (prefetched); under
  pipelining the forward's copy is kept for the backward (torchtitan: no reshard after forward with PP).
Overlapped communication still steals a share of the compute throughput (Calibration.*_overlap_cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.hardware.efficiency import Collective, collective_time, link_bytes, link_time
from parplan.models.spec import LayerKind
from parplan.planner import experts
from parplan.planner.context import ACT_BYTES, Ctx
from parplan.planner.schedule import S_DUALPIPE, S_DUALPIPEV, S_ZBH1
from parplan.planner.strategy import DISPATCHERS

PARAM_GATHER_BYTES = 2
"""Parameters are gathered in bf16."""


def ddp_bucket_params(dp: np.ndarray) -> np.ndarray:
    """Megatron DDP bucket size: max(40M, 1M × dp) parameters (DistributedDataParallelConfig)."""
    return np.maximum(40e6, 1e6 * dp)



@dataclass(frozen=True, slots=True)
class Comm:
    """Seconds of one communication class: total time on the wire and the part the step waits for."""

    total: np.ndarray
    exposed: np.ndarray


def _overlap(comm: np.ndarray, window: np.ndarray, cost: float) -> np.ndarray:
    """Exposed time of `comm` run beside `window` seconds of compute, plus the compute it slows."""
    return np.maximum(comm - window, 0.0) + cost * np.minimum(comm, window)


def _in_domain(ranks_in_domain: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    return ranks_in_domain >= ranks


def _cost(ctx: Ctx, inside: np.ndarray) -> np.ndarray:
    cal = ctx.cluster.calibration
    return np.where(inside, cal.nvlink_overlap_cost, cal.nic_overlap_cost)


def _activation_bytes(ctx: Ctx) -> np.ndarray:
    """One micro-batch's hidden states on one rank, s·b·h in bf16: the tensor TP and PP move."""
    return ctx.tokens * ctx.model.hidden * ACT_BYTES


def tp_head(ctx: Ctx) -> np.ndarray:
    """The LM head's input is all-gathered over TP under SP (forward; its gradient reduce-scattered back)."""
    gather = collective_time(ctx.cluster, Collective.ALL_GATHER, _activation_bytes(ctx), ctx.t, ctx.tp_domain)
    return np.where(ctx.sp, gather, 0.0)


def tp_embedding(ctx: Ctx) -> np.ndarray:
    """The vocab-parallel embedding's output is all-reduced over TP (reduce-scattered under SP)."""
    msg = _activation_bytes(ctx)
    return np.where(ctx.sp, collective_time(ctx.cluster, Collective.REDUCE_SCATTER, msg, ctx.t, ctx.tp_domain),
                    collective_time(ctx.cluster, Collective.ALL_REDUCE, msg, ctx.t, ctx.tp_domain))


def tp_layer(ctx: Ctx, kind: LayerKind, gemm_f: np.ndarray, gemm_b: np.ndarray) -> tuple[Comm, Comm]:
    """TP communication of one layer per micro-batch: (forward, backward).

    Without SP: two all-reduces of s·b·h per direction (Shoeybi 2019 §3). With SP: each becomes an
    all-gather plus a reduce-scatter, and backward re-gathers the sharded inputs of the column-parallel
    GEMMs for their weight grads (Korthikanti §4; Megatron layers.py). An MoE layer with tp > 1 keeps
    its tokens sequence-sharded through the experts, so only attention (and shared experts) talk over TP.
    """
    model = ctx.model
    t, dom = ctx.t, ctx.tp_domain
    msg = _activation_bytes(ctx)
    a = model.attention
    # MLA gathers the compressed q/kv latents before the up-projections instead of the hidden states.
    gather = (ctx.tokens * (a.mla.q_lora_rank + a.mla.kv_lora_rank + a.mla.qk_rope_head_dim) * ACT_BYTES
              if a.mla and a.mla.q_lora_rank else msg)
    pairs = 2.0 if kind is LayerKind.DENSE else (1.0 + (model.moe.shared_experts > 0 if model.moe else 0))
    ar = collective_time(ctx.cluster, Collective.ALL_REDUCE, msg, t, dom)
    ag_attn = collective_time(ctx.cluster, Collective.ALL_GATHER, gather, t, dom)
    ag = collective_time(ctx.cluster, Collective.ALL_GATHER, msg, t, dom)
    rs = collective_time(ctx.cluster, Collective.REDUCE_SCATTER, msg, t, dom)
    sp_dir = ag_attn + rs + (pairs - 1) * (ag + rs)
    fwd = np.where(ctx.sp, sp_dir, pairs * ar)
    # Megatron re-gathers the SP input for the weight gradients and overlaps it with the data-gradient GEMM;
    # DTensor TP keeps the gathered input from forward instead, and each collective waits.
    dtensor = ctx.stack.communication.tp_style == "dtensor"
    regather = np.where(ctx.sp & (not dtensor), ag_attn + (pairs - 1) * ag, 0.0)
    bwd = fwd + regather
    cost = ctx.cluster.calibration.nvlink_overlap_cost
    overlap = ctx.lay.tp_overlap & ctx.sp
    fwd_exposed = np.where(overlap, _overlap(fwd, gemm_f, cost), fwd)
    bwd_exposed = np.where(overlap, _overlap(bwd, gemm_b, cost), fwd + _overlap(regather, gemm_b / 2, cost))
    on = t > 1
    return (Comm(np.where(on, fwd, 0.0), np.where(on, fwd_exposed, 0.0)),
            Comm(np.where(on, bwd, 0.0), np.where(on, bwd_exposed, 0.0)))


def cp_layer(ctx: Ctx, attn_f: np.ndarray, attn_b: np.ndarray) -> tuple[Comm, Comm]:
    """Ring attention: cp−1 passes of the local K/V block forward, K/V plus dK/dV backward
    (formulas.md §4.5); each pass overlaps the attention of one block (1/cp of the layer's)."""
    a = ctx.model.attention
    width = a.kv_cache_width / ctx.t
    block = ctx.tokens * width * ACT_BYTES
    inside = _in_domain(ctx.cp_domain, ctx.c)
    step = collective_time(ctx.cluster, Collective.SEND_RECV, block, 2, np.where(inside, 2.0, 1.0))
    steps = ctx.c - 1
    cost = _cost(ctx, inside)
    fwd_total = steps * step
    bwd_total = steps * 2 * step
    fwd = Comm(fwd_total, steps * _overlap(step, attn_f / ctx.c, cost))
    bwd = Comm(bwd_total, steps * _overlap(2 * step, attn_b / ctx.c, cost))
    return fwd, bwd


@dataclass(frozen=True, slots=True)
class ExpertTraffic:
    """Bytes one EP rank moves per MoE layer per micro-batch in one dispatch (or combine) of `bytes_per_elem`."""

    inter_node: np.ndarray
    """Over the NIC: every routed copy that leaves the node (alltoall), or one per remote node (DeepEP)."""
    intra_node: np.ndarray
    """Over NVLink: copies for other GPUs of the node, and DeepEP's forwarding inside the destination node."""


def remote_nodes_per_token(ctx: Ctx) -> np.ndarray:
    """Destination nodes other than its own a token's k copies reach (DeepEP sends one copy to each), over the EP
    group's nodes (planner.experts.remote_nodes_reached)."""
    moe = ctx.model.moe
    assert moe is not None
    return experts.per_size(ctx.ep_nodes, lambda n: experts.remote_nodes_reached(moe, n))


def dispatch_bytes(ctx: Ctx) -> np.ndarray:
    """Bytes per element of the forward dispatch: fp8 with DeepEP's fp8 dispatch, else bf16 (the combine and
    the backward all-to-alls stay bf16, DeepSeek-V3 §3.3)."""
    return np.where(ctx.lay.dispatch == DISPATCHERS.index("deepep-fp8"), 1.0, float(ACT_BYTES))


def expert_traffic(ctx: Ctx, bytes_per_elem: np.ndarray | float) -> ExpertTraffic:
    """Per-rank bytes of one dispatch or combine (formulas.md §4.4): the busiest EP rank (straggler) moves
    `straggler` times the average; k copies of each of the rank's tokens of `hidden` elements."""
    moe = ctx.model.moe
    assert moe is not None
    tokens = ctx.tokens_moe * ctx.straggler
    row = tokens * ctx.model.hidden * bytes_per_elem
    e = ctx.e.astype(float)
    copies = row * moe.top_k
    deepep = ctx.lay.dispatch != DISPATCHERS.index("alltoall")
    alltoall_intra, alltoall_inter = link_bytes(Collective.ALL_TO_ALL, copies, ctx.e, ctx.ep_domain)
    deepep_inter = row * np.where(ctx.ep_nodes > 1, remote_nodes_per_token(ctx), 0.0)
    deepep_intra = copies * (e - 1) / e
    return ExpertTraffic(inter_node=np.where(deepep, deepep_inter, alltoall_inter),
                         intra_node=np.where(deepep, deepep_intra, alltoall_intra))


def _a2a_time(ctx: Ctx, traffic: ExpertTraffic) -> np.ndarray:
    return link_time(ctx.cluster, Collective.ALL_TO_ALL, traffic.intra_node, traffic.inter_node, ctx.e,
                     ctx.ep_domain)


def ep_layer(ctx: Ctx, compute_f: np.ndarray, compute_b: np.ndarray, shared_f: np.ndarray,
             shared_b: np.ndarray, wgrad: np.ndarray) -> tuple[Comm, Comm]:
    """EP all-to-all of one MoE layer per micro-batch: dispatch and combine in each direction; with etp > 1
    the ETP group also gathers the routed tokens and reduce-scatters the expert outputs.

    What hides it, per schedule: DualPipe(V), and Megatron with --overlap-moe-expert-parallel-comm
    (ep_overlap), run another micro-batch's layer meanwhile (the whole layer compute); otherwise ZB-H1 hides
    the backward all-to-all behind the deferred weight-gradient GEMMs, and 1F1B/interleaved overlap only the
    shared experts' GEMMs (--moe-shared-expert-overlap).
    """
    moe = ctx.model.moe
    if moe is None:
        zero = np.zeros(len(ctx.lay))
        return Comm(zero, zero), Comm(zero, zero)
    dispatch_f = _a2a_time(ctx, expert_traffic(ctx, dispatch_bytes(ctx)))
    bf16 = _a2a_time(ctx, expert_traffic(ctx, float(ACT_BYTES)))
    gathered = ctx.tokens_moe * ctx.straggler * moe.top_k * ctx.model.hidden * ACT_BYTES * ctx.et
    etp_dom = np.minimum(ctx.et, ctx.cluster.scaleup_domain).astype(float)
    etp = (collective_time(ctx.cluster, Collective.ALL_GATHER, gathered, ctx.et, etp_dom)
           + collective_time(ctx.cluster, Collective.REDUCE_SCATTER, gathered, ctx.et, etp_dom))
    fwd_total = dispatch_f + bf16 + etp  # combine is bf16 (DeepSeek-V3 §3.3)
    bwd_total = 2 * bf16 + etp  # gradients travel in bf16
    sched = ctx.lay.schedule
    paired = (sched == S_DUALPIPE) | (sched == S_DUALPIPEV) | ctx.lay.ep_overlap
    window_f = np.where(paired, compute_f, shared_f)
    window_b = np.where(paired, compute_b, np.where(sched == S_ZBH1, np.maximum(wgrad, shared_b), shared_b))
    # DeepEP's kernels run on SMs (DeepSeek-V3 §3.2.2: 20 of the H800's 132 SMs) whether they feed NVLink or
    # the NIC, so overlapping them slows compute as NVLink traffic does; NCCL's cross-node all-to-all mostly
    # waits on the NIC.
    cost = _cost(ctx, (ctx.ep_nodes <= 1) | (ctx.lay.dispatch != DISPATCHERS.index("alltoall")))
    return (Comm(fwd_total, _overlap(fwd_total, window_f, cost)),
            Comm(bwd_total, _overlap(bwd_total, window_b, cost)))


def _p2p_one(ctx: Ctx) -> np.ndarray:
    """One activation (or gradient) transfer between adjacent stages: s·b·h per micro-batch, of which each
    TP rank sends 1/tp when sequence parallelism has sharded it (formulas.md §4.2). Without SP every TP rank
    sends the whole tensor, unless Megatron-LM's scatter-gather (Narayanan 2021 §4.1) sends 1/tp per rank
    over its own link and all-gathers the tensor inside the receiving node."""
    msg = _activation_bytes(ctx)
    send = collective_time(ctx.cluster, Collective.SEND_RECV, msg / np.where(ctx.sp | ctx.scatter_gather, ctx.t, 1),
                           2, np.where(ctx.pp_same_domain, 2.0, 1.0))
    gather = collective_time(ctx.cluster, Collective.ALL_GATHER, msg, ctx.t, ctx.tp_domain)
    return send + np.where(ctx.scatter_gather, gather, 0.0)


def _chunks(ctx: Ctx) -> np.ndarray:
    """Model chunks a micro-batch visits per rank: v interleaved, 2 for DualPipe(V), else 1."""
    dual = (ctx.lay.schedule == S_DUALPIPE) | (ctx.lay.schedule == S_DUALPIPEV)
    return np.where(dual, 2, ctx.v)


def pp_microbatch(ctx: Ctx) -> Comm:
    """Point-to-point traffic of one rank per micro-batch: a send forward and a send backward per model
    chunk it holds (an interleaved micro-batch crosses v·p − 1 boundaries instead of p − 1, formulas.md
    §4.2). 1F1B and ZB wait for their transfers; the interleaved and DualPipe schedules overlap them with
    compute but still pay each transfer's latency, unless the layout turns the overlap off (p2p_overlap, which
    Strategy and the search set off for 1F1B and ZB)."""
    one = _p2p_one(ctx)
    latency = collective_time(ctx.cluster, Collective.SEND_RECV, 0.0, 2, np.where(ctx.pp_same_domain, 2.0, 1.0))
    chunks = _chunks(ctx)
    total = np.where(ctx.p > 1, 2 * one * chunks, 0.0)
    exposed = np.where(ctx.p > 1, np.where(ctx.lay.p2p_overlap, 2 * chunks * latency, 2 * one * chunks), 0.0)
    return Comm(total, exposed)


def pp_bubble_transfers(ctx: Ctx) -> np.ndarray:
    """Fill and drain of the pipeline wait for a transfer at each of the v·p − 1 chunk boundaries, each way."""
    return np.where(ctx.p > 1, 2 * (ctx.p * _chunks(ctx) - 1) * _p2p_one(ctx), 0.0)


def reduces_every_microbatch(ctx: Ctx) -> np.ndarray:
    """ZeRO-2/3 reduce-scatter gradients after every micro-batch unless a pipeline defers the sync (the stack's
    memory.pipeline_grad_shards)."""
    return (ctx.lay.zero >= 2) & ((ctx.p == 1) | ctx.stack.memory.pipeline_grad_shards)


@dataclass(frozen=True, slots=True)
class DataParallel:
    """Per step: gradient reduction and parameter gathering over the data-parallel groups."""

    grad: Comm
    param: Comm


@dataclass(frozen=True, slots=True)
class DataParallelTraffic:
    """Seconds on the wire of each data-parallel collective pattern of one rank (before any overlap).

    Depends only on the parallel grid and the parameters a rank holds, so a search computes it once per
    distinct grid and reuses it for every batch setting."""

    all_reduce: np.ndarray
    """ZeRO-0: the gradients all-reduced over the whole cp·dp group."""
    reduce_scatter: np.ndarray
    """ZeRO-1/2: the gradients reduce-scattered over the shard group, then each shard all-reduced over the
    replicas (HSDP)."""
    gather: np.ndarray
    zero3_gather: np.ndarray
    """One pass of ZeRO-3 parameter all-gathers (per block or prefetch bucket) over the shard group."""
    zero3_reduce: np.ndarray
    """One pass of ZeRO-3 gradient reduce-scatters, and the all-reduce of the shards over the replicas."""
    last_bucket: np.ndarray
    """Share of the traffic in the last bucket, which nothing can overlap."""
    zero3_unit: np.ndarray
    """Share of a ZeRO-3 pass in one collective: the first block's gather of a forward and the last one's
    reduce-scatter of a backward have no compute to hide behind."""
    inside: np.ndarray
    """True where the dense gradient group stays inside one scale-up domain."""

    def take(self, index: np.ndarray) -> DataParallelTraffic:
        return DataParallelTraffic(*(getattr(self, f)[index] for f in self.__slots__))


def dp_traffic(ctx: Ctx, dense_params: np.ndarray, expert_params: np.ndarray,
               layers: np.ndarray) -> DataParallelTraffic:
    """Data-parallel collectives of one rank per step, without overlap.

    dense_params / expert_params: parameters this rank holds (before ZeRO sharding), in `layers` layers;
    each is reduced in Megatron's DDP buckets (one collective latency per bucket); dense gradients
    reduce over the cp·dp group (CP ranks hold the same weights), expert gradients over the expert-DP
    group (formulas.md §4.3). With replicas (HSDP) the sharded collectives run inside each shard group and
    the gradient shards are all-reduced across the replicas. Gradients travel in the stack's reduce dtype
    (StackSpec.communication.grad_reduce_bytes), parameters in bf16.
    """
    n_d, n_e = ctx.c * ctx.dp, ctx.edp
    cl = ctx.cluster
    grad_bytes = ctx.stack.communication.grad_reduce_bytes
    total_params = np.maximum(dense_params + expert_params, 1.0)
    buckets_d = np.ceil(dense_params / ddp_bucket_params(n_d))
    buckets_e = np.ceil(expert_params / ddp_bucket_params(n_e))
    # ZeRO-3 collectives per pass: one per block (FSDP's unit), or finer where the stack splits blocks into
    # prefetch buckets (DeepSpeed's stage3_prefetch_bucket_size).
    bucket = ctx.stack.communication.zero3_bucket_params
    z3_d, z3_e = layers, np.where(expert_params > 0, layers, 0)
    if bucket > 0:
        z3_d = np.maximum(z3_d, np.ceil(dense_params / bucket))
        z3_e = np.maximum(z3_e, np.ceil(expert_params / bucket))

    def sharded(kind: Collective, nbytes: int, count_d: np.ndarray, count_e: np.ndarray) -> np.ndarray:
        return (collective_time(cl, kind, dense_params * nbytes, ctx.shard, ctx.shard_domain, count_d)
                + collective_time(cl, kind, expert_params * nbytes, ctx.eshard, ctx.eshard_domain, count_e))

    def across_replicas(count_d: np.ndarray, count_e: np.ndarray) -> np.ndarray:
        """Each shard's gradients all-reduced over the replicas."""
        return (collective_time(cl, Collective.ALL_REDUCE, dense_params * grad_bytes / ctx.shard, ctx.replicas,
                                ctx.replica_domain, count_d)
                + collective_time(cl, Collective.ALL_REDUCE, expert_params * grad_bytes / ctx.eshard, ctx.replicas,
                                  ctx.ereplica_domain, count_e))

    all_reduce = (collective_time(cl, Collective.ALL_REDUCE, dense_params * grad_bytes, n_d, ctx.dp_domain, buckets_d)
                  + collective_time(cl, Collective.ALL_REDUCE, expert_params * grad_bytes, n_e, ctx.edp_domain,
                                    buckets_e))
    return DataParallelTraffic(
        all_reduce=all_reduce,
        reduce_scatter=sharded(Collective.REDUCE_SCATTER, grad_bytes, buckets_d, buckets_e)
        + across_replicas(buckets_d, buckets_e),
        gather=sharded(Collective.ALL_GATHER, PARAM_GATHER_BYTES, buckets_d, buckets_e),
        zero3_gather=sharded(Collective.ALL_GATHER, PARAM_GATHER_BYTES, z3_d, z3_e),
        zero3_reduce=sharded(Collective.REDUCE_SCATTER, grad_bytes, z3_d, z3_e) + across_replicas(z3_d, z3_e),
        last_bucket=np.minimum(1.0, ddp_bucket_params(n_d) / total_params),
        zero3_unit=1.0 / np.maximum(z3_d, 1.0),
        inside=_in_domain(ctx.shard_domain, ctx.shard),
    )


def zero3_gathers(ctx: Ctx) -> np.ndarray:
    """Passes of ZeRO-3 parameter all-gathers per micro-batch: two where the stack re-gathers for backward
    (FSDP reshard_after_forward), one where it keeps the gathered parameters (and under a pipeline unless the
    stack reshards there too)."""
    com = ctx.stack.communication
    reshard = com.reshard_after_forward & ((ctx.p == 1) | com.reshard_under_pp)
    return np.where(reshard, 2.0, 1.0)


def dp_step(ctx: Ctx, traffic: DataParallelTraffic, t_f: np.ndarray, t_b: np.ndarray, compute_f: np.ndarray,
            compute_b: np.ndarray) -> DataParallel:
    """What the step waits for of the data-parallel traffic of one rank.

    t_f / t_b: the rank's forward / backward time of one micro-batch (the overlap windows); compute_f /
    compute_b: its compute only (the window ZeRO-3 prefetch hides behind).
    """
    zero = ctx.lay.zero
    m = ctx.m.astype(float)
    reduce_once = np.where(zero == 0, traffic.all_reduce, traffic.reduce_scatter)
    gather_once = traffic.gather
    z3_ag, z3_rs, last_bucket = traffic.zero3_gather, traffic.zero3_reduce, traffic.last_bucket
    cost = _cost(ctx, traffic.inside)

    # ZeRO 0/1: one reduction per step, overlapped with the last micro-batch's backward.
    once_exposed = np.maximum(_overlap(reduce_once, t_b, cost), last_bucket * reduce_once)
    # ZeRO 1/2: updated parameters gathered once per step, overlapped with the first forward.
    param_exposed = np.maximum(_overlap(gather_once, t_f, cost), last_bucket * gather_once)
    every_mb = reduces_every_microbatch(ctx)
    # ZeRO-3: gather (once or twice, zero3_gathers) and, without pipelining, reduce-scatter every micro-batch,
    # each block's prefetched behind the compute of the block before; the first block's gather and the last
    # block's reduce-scatter wait. The exposure is split pro rata.
    gathers = zero3_gathers(ctx)
    z3_rs_mb = np.where(every_mb, z3_rs, 0.0)
    z3_comm = gathers * z3_ag + z3_rs_mb
    unhidden = traffic.zero3_unit * (z3_ag + z3_rs_mb)
    z3_exposed = m * (unhidden + _overlap(z3_comm - unhidden, compute_f + compute_b, cost))
    # A stack whose sharded data parallelism stops overlapping once TP is on waits for all of it.
    if not ctx.stack.communication.zero3_overlaps_tp:
        z3_exposed = np.where(ctx.t > 1, m * z3_comm, z3_exposed)
    z3_grad_share = z3_rs_mb / np.maximum(z3_comm, 1e-30)
    grad = Comm(
        np.select([(zero == 3) & every_mb, every_mb], [m * z3_rs, m * reduce_once], reduce_once),
        np.select([(zero == 3) & every_mb, every_mb], [z3_exposed * z3_grad_share, m * once_exposed],
                  once_exposed),
    )
    param = Comm(
        np.select([zero == 3, zero >= 1], [m * gathers * z3_ag, gather_once], 0.0),
        np.select([zero == 3, zero >= 1], [z3_exposed * (1 - z3_grad_share), param_exposed], 0.0),
    )
    return DataParallel(grad=grad, param=param)
