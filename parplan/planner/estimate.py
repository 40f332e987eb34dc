"""Step time, throughput, MFU and memory of layouts: `evaluate` for one, `evaluate_layouts` for millions.

Both run the same code: `evaluate` builds a batch of one layout. Per micro-batch, each pipeline rank
runs its layers' forward and backward (compute plus the communication it waits for); the pipeline takes
m times the slowest rank's micro-batch plus the schedule's bubble; then the exposed part of the
data-parallel traffic and the optimizer step (step_time_s).

MFU counts the model's FLOPs (ModelSpec.training_flops_per_token: every GEMM, the causal half of the
attention scores, MTP included, recompute excluded) against the dense peak of the GEMM dtype; HFU adds
the recomputed forward FLOPs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from parplan.hardware.efficiency import peak_flops
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import Block, LayerKind, Linear, ModelSpec
from parplan.planner import comm, compute, device, memory
from parplan.planner.context import Ctx
from parplan.planner.offload import offload_time
from parplan.planner.recompute import communication_share, layer_recompute_time, recompute_flops_per_token
from parplan.planner.schedule import bubble_time, chunks_per_rank, inflight_share, rank_patterns
from parplan.planner.strategy import RECOMPUTE, Layouts, Strategy
from parplan.planner.workload import UNIFORM, Workload
from parplan.stacks.presets import load_stack
from parplan.stacks.spec import RECOMPUTE_KINDS, StackSpec
from parplan.stacks.support import check_stack

TIME_COMPONENTS = ("gemm", "attention", "elementwise", "launch", "recompute", "tp_comm", "cp_comm", "ep_comm",
                   "pp_comm", "pipeline_bubble", "dp_grad_reduce", "dp_param_gather", "optimizer", "offload")
MEMORY_COMPONENTS = memory.MEMORY_COMPONENTS


@dataclass(frozen=True, slots=True)
class _Work:
    """Per micro-batch seconds of one unit of work (a layer kind, or the head) by component, plus the
    compute-only forward/backward and the weight-grad part."""

    parts: dict[str, np.ndarray]
    """Exposed seconds by time component (recompute included in 'recompute')."""
    total_comm: dict[str, np.ndarray]
    """Wire seconds by communication component (exposed or not)."""
    fwd: np.ndarray
    """Forward seconds on the critical path (compute + exposed communication)."""
    bwd: np.ndarray
    wgrad: np.ndarray
    compute_f: np.ndarray
    compute_b: np.ndarray

    def __add__(self, other: _Work) -> _Work:
        def merged(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in a.keys() | b.keys()}

        return _Work(merged(self.parts, other.parts), merged(self.total_comm, other.total_comm),
                     self.fwd + other.fwd, self.bwd + other.bwd, self.wgrad + other.wgrad,
                     self.compute_f + other.compute_f, self.compute_b + other.compute_b)

    def scaled(self, k: float) -> _Work:
        return _Work({n: k * v for n, v in self.parts.items()}, {n: k * v for n, v in self.total_comm.items()},
                     k * self.fwd, k * self.bwd, k * self.wgrad, k * self.compute_f, k * self.compute_b)


def _compute_work(lt: compute.LayerTime, tp_f: np.ndarray | float = 0.0, tp_b: np.ndarray | float = 0.0) -> _Work:
    """The work of a GEMM-and-element-wise unit (head, embedding, MTP projection) whose TP collectives take
    `tp_f` forward and `tp_b` backward and wait."""
    comm_parts = {"tp_comm": tp_f + tp_b}
    return _Work({"gemm": lt.gemm_f + lt.gemm_b, "elementwise": lt.elem_f + lt.elem_b, **comm_parts}, comm_parts,
                 lt.forward + tp_f, lt.backward + tp_b, lt.gemm_w, lt.forward, lt.backward)


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n)


@dataclass(frozen=True, slots=True)
class _ComputeRows:
    """A Ctx's distinct combinations of _COMPUTE_KEYS: the compute functions (compute.*), which read only those
    fields, run once per combination (and once per call) and are broadcast back to every layout. Many layouts
    of a batch differ only in how their communication overlaps or what they recompute."""

    ctx: Ctx
    """The distinct combinations."""
    inverse: np.ndarray
    cache: dict = field(default_factory=dict)

    @classmethod
    def of(cls, ctx: Ctx) -> _ComputeRows:
        first, inverse = _distinct(ctx.lay, _COMPUTE_KEYS)
        return cls(ctx.take(first), inverse)

    def _spread(self, value: np.ndarray | float) -> np.ndarray | float:
        """A per-combination array back on every layout; a scalar (a part the unit does not have, e.g. the
        head's host launch wait) as it is."""
        return value[self.inverse] if isinstance(value, np.ndarray) else value

    def __call__(self, fn: Callable, *args: object) -> Any:
        key = (fn, *args)
        if key not in self.cache:
            out = fn(self.ctx, *args)
            self.cache[key] = (out[self.inverse] if isinstance(out, np.ndarray) else dataclasses.replace(
                out, **{f.name: self._spread(getattr(out, f.name)) for f in dataclasses.fields(out)}))
        return self.cache[key]


def _is_shared_expert(lin: Linear) -> bool:
    return lin.block is Block.SHARED_EXPERTS


def _layer_work(ctx: Ctx, kind: LayerKind, rows: _ComputeRows) -> _Work:
    lt = rows(compute.layer_time, kind)
    tp_f, tp_b = comm.tp_layer(ctx, kind, lt.gemm_f, lt.gemm_b)
    cp_f, cp_b = comm.cp_layer(ctx, lt.attn_f, lt.attn_b)
    if kind is LayerKind.MOE:
        shared = rows(compute.gemm_work, kind, _is_shared_expert)
        ep_f, ep_b = comm.ep_layer(ctx, lt.forward, lt.backward, shared.forward, shared.backward, lt.gemm_w)
    else:
        zero = _zeros(len(ctx.lay))
        ep_f = ep_b = comm.Comm(zero, zero)
    exposed_f = tp_f.exposed + cp_f.exposed + ep_f.exposed
    # What the stack's recompute setting re-runs in backward (recompute.RECOMPUTED), on the share of layers
    # that recompute; its compute functions run once per compute combination (rows).
    recompute = layer_recompute_time(ctx, kind, lt, exposed_f, rows)
    rec_comm = communication_share(ctx)
    parts = {
        "gemm": lt.gemm_f + lt.gemm_b,
        "attention": lt.attn_f + lt.attn_b,
        "elementwise": lt.elem_f + lt.elem_b,
        "launch": lt.launch_f + lt.launch_b,
        "recompute": recompute,
        "tp_comm": tp_f.exposed + tp_b.exposed,
        "cp_comm": cp_f.exposed + cp_b.exposed,
        "ep_comm": ep_f.exposed + ep_b.exposed,
    }
    total_comm = {
        "tp_comm": (tp_f.total * (1 + rec_comm) + tp_b.total),
        "cp_comm": (cp_f.total * (1 + rec_comm) + cp_b.total),
        "ep_comm": (ep_f.total * (1 + rec_comm) + ep_b.total),
    }
    fwd = lt.forward + exposed_f
    bwd = lt.backward + tp_b.exposed + cp_b.exposed + ep_b.exposed + recompute
    return _Work(parts, total_comm, fwd, bwd, lt.gemm_w, lt.forward, lt.backward + recompute)


def _layer_compute(ctx: Ctx, kind: LayerKind, rows: _ComputeRows) -> _Work:
    """A layer's compute alone: what `_layer_work` adds communication and recompute to."""
    return _compute_work(rows(compute.layer_time, kind))


def _head_work(ctx: Ctx, rows: _ComputeRows, compute_only: bool = False) -> _Work:
    """LM head + loss on the last stage, its input gathered over TP under SP; each MTP module adds a
    transformer layer, its 2h -> h projection and another head. `compute_only` leaves out the communication
    and recompute (step_time_bound)."""
    gather = 0.0 if compute_only else comm.tp_head(ctx)
    head = _compute_work(rows(compute.head_time), gather, gather)
    if not ctx.model.mtp_layers:
        return head
    layer = (_layer_compute if compute_only else _layer_work)(ctx, ctx.model.mtp_layer_kind, rows)
    mtp = layer + _compute_work(rows(compute.mtp_extra_time)) + head
    return head + mtp.scaled(ctx.model.mtp_layers)


def _embedding_work(ctx: Ctx, rows: _ComputeRows, compute_only: bool = False) -> _Work:
    """Embedding lookup on the first stage; vocab-parallel over TP, so its output is reduced across the TP
    group forward (comm.tp_embedding), and its gradient passes back without a collective."""
    return _compute_work(rows(compute.embedding_time), 0.0 if compute_only else comm.tp_embedding(ctx))


_UNITS = ("dense", "moe", "head", "embedding")
"""What a pipeline rank holds, by its pattern's counts (schedule.RankPattern): dense and MoE layers, the head
(with the MTP modules) and the embedding."""


def _unit_works(ctx: Ctx, compute_only: bool = False) -> dict[str, _Work]:
    """The per-micro-batch work of each unit (_UNITS) on one rank; `compute_only` without communication and
    recompute (step_time_bound)."""
    layer = _layer_compute if compute_only else _layer_work
    rows = _ComputeRows.of(ctx)
    zero = _zeros(len(ctx.lay))
    return {
        "dense": layer(ctx, LayerKind.DENSE, rows),
        "moe": (layer(ctx, LayerKind.MOE, rows) if ctx.model.moe_layer_count
                else _Work({}, {}, zero, zero, zero, zero, zero)),
        "head": _head_work(ctx, rows, compute_only),
        "embedding": _embedding_work(ctx, rows, compute_only),
    }


def _per_rank(pat: dict[str, np.ndarray], units: dict[str, _Work], get: Callable[[_Work], np.ndarray]
              ) -> np.ndarray:
    """(N, K) seconds of one micro-batch's `get` part on each rank pattern: its units' work, times the share
    of its layers each micro-batch passes (DualPipe: half)."""
    return pat["work"] * sum(pat[u] * get(units[u])[:, None] for u in _UNITS)


def _pipeline(ctx: Ctx, pat: dict[str, np.ndarray], t_f: np.ndarray, t_b: np.ndarray, t_w: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pipeline seconds per step, the bubble, the critical rank pattern) from the (N, K) forward, backward
    and weight-grad seconds of one micro-batch per rank pattern: m times the slowest rank's micro-batch plus
    the schedule's bubble (over the ranks' mean times) and its fill-and-drain transfers."""
    real = pat["count"] > 0
    crit = np.argmax(np.where(real, t_f + t_b, -np.inf), axis=1)

    def mean(a: np.ndarray) -> np.ndarray:
        """Average over all p ranks (patterns weighted by how many ranks share them)."""
        return (np.where(real, a, 0.0) * pat["count"]).sum(axis=1) / ctx.p

    bubble = (bubble_time(ctx.p, ctx.v, ctx.lay.schedule, mean(t_f), mean(t_b), mean(t_w))
              + comm.pp_bubble_transfers(ctx))
    slowest = np.take_along_axis(t_f + t_b, crit[:, None], axis=1)[:, 0]
    return ctx.m * slowest + bubble, bubble, crit


_PATTERN_FIELDS = ("rank", "count", "dense", "moe", "embedding", "head", "work", "held_dense", "held_moe",
                   "held_head", "held_embedding", "held_sets")


@lru_cache(maxsize=4096)
def _pattern_table(model: ModelSpec, pp: int, vpp: int, schedule: int, ends: str) -> np.ndarray:
    """(fields, K) rank patterns of one pipeline (_PATTERN_FIELDS), as the columns `_patterns` gathers."""
    return np.array([[float(getattr(pat, f)) for pat in rank_patterns(model, pp, vpp, schedule, ends)]
                     for f in _PATTERN_FIELDS])


def _patterns(model: ModelSpec, lay: Layouts, stack: StackSpec) -> dict[str, np.ndarray]:
    """(N, K) arrays describing the distinct rank patterns of each layout's pipeline (count 0 = padding), with
    the layers cut into stages by the stack's pipeline_ends rule."""
    first, inverse = group_rows([lay.pp, lay.vpp, lay.schedule])
    uniq = zip(lay.pp[first], lay.vpp[first], lay.schedule[first], strict=True)
    ends = stack.memory.pipeline_ends
    tables = [_pattern_table(model, int(p), int(v), int(sc), ends) for p, v, sc in uniq]
    k = max(tb.shape[1] for tb in tables)
    table = np.zeros((len(_PATTERN_FIELDS), len(first), k))
    for i, tb in enumerate(tables):
        table[:, i, :tb.shape[1]] = tb
    rows = np.take(table, inverse, axis=1)  # one gather for all fields, each field's (N, K) block contiguous
    return dict(zip(_PATTERN_FIELDS, rows, strict=True))


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Results for a batch of N layouts (arrays of length N)."""

    model: ModelSpec
    cluster: ClusterSpec
    stack: StackSpec
    layouts: Layouts
    step_time_s: np.ndarray
    tokens_per_s_per_gpu: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    memory_gib: np.ndarray
    """Peak allocated memory of the most loaded rank, GiB (torch.cuda.max_memory_allocated)."""
    reserved_gib: np.ndarray
    """Peak reserved memory of the most loaded rank, GiB (torch.cuda.max_memory_reserved)."""
    device_gib: np.ndarray
    """Peak device memory of the most loaded rank, GiB (nvidia-smi): reserved plus the CUDA context and the
    communication buffers outside PyTorch's allocator."""
    required_gib: np.ndarray
    """What the layout needs of the GPU's memory: device_gib."""
    fits: np.ndarray
    host_gib: np.ndarray
    """Host memory per GPU of offloaded optimizer states and a host EMA, GiB (the most loaded rank)."""
    time_exposed: dict[str, np.ndarray]
    time_total: dict[str, np.ndarray]
    """Seconds on the wire (communication) or busy (compute), exposed or not."""
    memory_by_rank: dict[str, np.ndarray]
    """(N, K) GiB per memory component and distinct rank pattern."""
    memory_kinds_by_rank: dict[str, np.ndarray]
    """(N, K) GiB per memory kind (allocated, reserved, device) and host memory, per distinct rank pattern."""
    patterns: dict[str, np.ndarray]
    time_per_microbatch: np.ndarray
    """(N, K) seconds of one micro-batch (forward + backward) per rank pattern."""
    time_forward: np.ndarray
    """(N, K) forward seconds of one micro-batch per rank pattern (critical path, communication included)."""
    time_backward: np.ndarray
    time_wgrad: np.ndarray
    """(N, K) the weight-gradient GEMM part of time_backward (what zero-bubble schedules defer)."""

    def __len__(self) -> int:
        return len(self.step_time_s)

    def estimate(self, i: int) -> Estimate:
        return Estimate.from_evaluation(self, i)


_LAYER_KEYS = ("tp", "cp", "ep", "etp", "mbs", "seq", "sp", "precision", "flash_attention", "recompute",
               "recompute_blocks", "tp_overlap", "schedule", "dispatch", "redundant_experts", "ep_overlap")
"""The fields per-layer work depends on; pp, vpp, zero, gbs, p2p_overlap and pp_scatter_gather only change
how the work is combined (pipeline transfers and the step)."""
_COMPUTE_KEYS = ("tp", "cp", "ep", "etp", "mbs", "seq", "sp", "precision", "flash_attention", "redundant_experts")
"""The fields a unit's compute alone depends on (compute.layer_time, head_time, embedding_time,
mtp_extra_time, and what recompute.py re-runs of it): _LAYER_KEYS without the schedule (which only sets what
hides the EP all-to-all) and without BOUND_FREE. The stack is one per call (Ctx.stack)."""
_GRID_KEYS = ("tp", "pp", "cp", "ep", "etp", "vpp", "schedule", "redundant_experts", "dp_replicate")
"""The fields data-parallel traffic depends on (group sizes and the parameters a rank holds)."""


def group_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(index of one representative per distinct row of `columns`, inverse map from every row to its group).

    Rows are packed into one int64 (mixed radix over each column's value range) so that a single 1-D sort
    groups them; a column with a huge range, or of fractions (recompute_blocks), is first replaced by its rank
    among its distinct values.
    """
    code = np.zeros(len(columns[0]), dtype=np.int64)
    capacity = 1
    for col in columns:
        if col.dtype.kind == "f":
            col = np.unique(col, return_inverse=True)[1].ravel()
        col = col.astype(np.int64)
        lo, hi = int(col.min()), int(col.max())
        span = hi - lo + 1
        if span > 1 << 20:
            values, col = np.unique(col, return_inverse=True)
            lo, span = 0, len(values)
        capacity *= span
        if capacity >= 1 << 62:  # would overflow: compact what we have so far
            _, code = np.unique(code, return_inverse=True)
            capacity = (int(code.max()) + 1) * span
        code = code * span + (col - lo)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _distinct(lay: Layouts, fields: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(index of one representative per distinct combination of `fields`, inverse map to every layout)."""
    return group_rows([getattr(lay, name) for name in fields])


def _take_work(work: _Work, index: np.ndarray, breakdown: bool) -> _Work:
    parts = {k: v[index] for k, v in work.parts.items()} if breakdown else {}
    comm_totals = {k: v[index] for k, v in work.total_comm.items()} if breakdown else {}
    return _Work(parts, comm_totals, work.fwd[index], work.bwd[index], work.wgrad[index], work.compute_f[index],
                 work.compute_b[index])


@dataclass(frozen=True, slots=True)
class _RankParams:
    """(N, K) parameters per rank pattern: dense and expert (before ZeRO), and per-layer figures."""

    dense: np.ndarray
    expert: np.ndarray
    """(N, K), or (N, 1) zeros for a dense model."""
    linear: np.ndarray
    """Linear-layer parameters (what fp8 casts); (N, 1) zeros when no layout uses fp8."""
    largest_layer: np.ndarray
    """(N,) parameters of the largest layer on a rank (ZeRO-3 gathers one at a time)."""
    ends: np.ndarray
    """(N, K) parameters of the embedding and the head a rank holds (ZeRO-3 keeps them gathered)."""


def _rank_params(ctx: Ctx, pat: dict[str, np.ndarray]) -> _RankParams:
    n, model = len(ctx.lay), ctx.model
    dense_d, expert_d, lin_d = memory.layer_params(ctx, LayerKind.DENSE)
    emb, hd = memory.embedding_params(ctx), memory.head_params(ctx)
    dense, moe, head = pat["dense"], pat["moe"], pat["head"]
    ends = pat["embedding"] * emb[:, None] + head * hd[:, None]
    held_dense = dense * dense_d[:, None] + ends
    linear = dense * lin_d[:, None] if ctx.fp8.any() else np.zeros((n, 1))
    if not model.moe_layer_count and not model.mtp_layers:
        # Dense model: no expert parameters anywhere (a broadcastable zero keeps the arrays small).
        return _RankParams(dense=held_dense, expert=np.zeros((n, 1)), linear=linear,
                           largest_layer=dense_d + expert_d, ends=ends)
    dense_m, expert_m, lin_m = (memory.layer_params(ctx, LayerKind.MOE) if model.moe_layer_count
                                else (_zeros(n), _zeros(n), _zeros(n)))
    mtp_dense, mtp_expert, mtp_embedding = memory.mtp_params(ctx)
    # The MTP modules' embedding is a copy on a head rank without the input embedding (memory.mtp_params).
    mtp_held = head * (mtp_dense[:, None] + (1.0 - pat["embedding"]) * mtp_embedding[:, None])
    return _RankParams(
        dense=held_dense + moe * dense_m[:, None] + mtp_held,
        expert=dense * expert_d[:, None] + moe * expert_m[:, None] + head * mtp_expert[:, None],
        linear=linear + moe * lin_m[:, None] if ctx.fp8.any() else linear,
        largest_layer=np.maximum(dense_d + expert_d, dense_m + expert_m), ends=ends,
    )


def _reshards(ctx: Ctx) -> np.ndarray:
    """(N, 1) True where ZeRO-3 frees the gathered parameters after each block's forward (the stack's
    reshard_after_forward, and under a pipeline its reshard_under_pp)."""
    com = ctx.stack.communication
    return (com.reshard_after_forward & ((ctx.p == 1) | com.reshard_under_pp))[:, None]


def _model_states(ctx: Ctx, params: _RankParams) -> memory.StateBytes:
    """Model states per rank pattern: dense parameters sharded over the cp·dp shard group, expert parameters
    over the expert-DP one (each a 1/dp_replicate of the group with HSDP). The memory model and the optimizer
    step (which streams the states) both read them."""
    zero = ctx.lay.zero[:, None]
    sharded_grads = comm.reduces_every_microbatch(ctx)[:, None]
    mem, reshards = ctx.stack.memory, _reshards(ctx)
    dense, expert = (memory.model_state_bytes(held, shard, zero, mem, grads_sharded=sharded_grads, reshards=reshards)
                     for held, shard in ((params.dense, ctx.shard[:, None]), (params.expert, ctx.eshard[:, None])))
    return dense + expert


def _rank_memory(ctx: Ctx, pat: dict[str, np.ndarray], params: _RankParams) -> memory.RankMemory:
    """Bytes per rank pattern (N, K) by component (formulas.md §3)."""
    model, lay, n = ctx.model, ctx.lay, len(ctx.lay)
    states = _model_states(ctx, params)
    # Fewer micro-batches than a rank's peak in flight scale all its chunks down alike.
    scale = inflight_share(pat["held_sets"], ctx.m[:, None])
    act_d = memory.layer_activation_bytes(ctx, LayerKind.DENSE)
    act_m = memory.layer_activation_bytes(ctx, LayerKind.MOE) if model.moe_layer_count else _zeros(n)
    layers = pat["held_dense"] * act_d[:, None]
    if model.moe_layer_count:
        layers = layers + pat["held_moe"] * act_m[:, None]
    ends = pat["held_embedding"] * memory.token_id_bytes(ctx)[:, None]
    if model.mtp_layers:
        ends = ends + pat["held_head"] * memory.mtp_activation_bytes(ctx, act_d, act_m)[:, None]
    widest = np.maximum(act_d, act_m)[:, None]
    activations = memory.offloaded_activations(ctx, scale * layers, widest) + scale * ends
    gradients = states.gradients
    if ctx.stack.memory.backward_grad_copies:
        one = pat["dense"] * act_d[:, None] + pat["moe"] * act_m[:, None]
        chunks = chunks_per_rank(lay.schedule, lay.vpp)[:, None]
        gradients = gradients + memory.backward_copy_excess(
            states.backward_copies, memory.offloaded_activations(ctx, one, widest), chunks)
    z3_sharded = (lay.zero[:, None] == 3) & _reshards(ctx)
    # The loss's logits live between the last forward and the first backward, the blocks' ZeRO-3 buffers and the
    # backward's working set after them: the peak holds one of the two phases on top of what both keep.
    loss = pat["head"] * memory.logit_bytes(ctx)[:, None]
    backward = memory.zero3_block_bytes(ctx, params.largest_layer, z3_sharded) + memory.working_bytes(ctx)[:, None]
    buffers = (memory.zero3_ends_bytes(ctx, params.ends, z3_sharded)
               + memory.fp8_weight_bytes(ctx, params.linear, z3_sharded) + np.maximum(loss, backward))
    weights = states.weights
    if ctx.stack.memory.fp8_params:
        # fp8 parameters replace the bf16 linear weights (their transpose is in fp8_weight_bytes).
        weights = weights - np.where(ctx.fp8[:, None] & ~z3_sharded,
                                     (memory.COMPUTE_WEIGHT_BYTES - memory.FP8_BYTES) * params.linear, 0.0)
    return memory.RankMemory(weights=weights, gradients=gradients, optimizer=states.optimizer,
                             activations=activations, buffers=buffers, host=states.host)


@dataclass(frozen=True, slots=True)
class MemoryPeaks:
    """(N,) GiB of each layout's most loaded rank in each memory kind (device.MEMORY_KINDS) and in host memory."""

    allocated: np.ndarray
    reserved: np.ndarray
    device: np.ndarray
    host: np.ndarray

    def take(self, index: np.ndarray) -> MemoryPeaks:
        return MemoryPeaks(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))


def device_gib(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, reserved_gib: np.ndarray) -> np.ndarray:
    """Device memory (nvidia-smi) of each layout's ranks, GiB: reserved plus the same bytes outside PyTorch's
    allocator on every rank (device.outside_allocator_bytes); `reserved_gib` is (N,) or (N, K)."""
    outside = device.outside_allocator_bytes(model, cluster, lay) / 2**30
    return reserved_gib + (outside[:, None] if reserved_gib.ndim == 2 else outside)


def _kinds(ctx: Ctx, rank_mem: memory.RankMemory) -> dict[str, np.ndarray]:
    """(N, K) GiB per rank pattern in each memory kind."""
    reserved = device.reserved_bytes(rank_mem.total, rank_mem.transient, ctx.stack) / 2**30
    return {"allocated": rank_mem.total / 2**30, "reserved": reserved,
            "device": device_gib(ctx.model, ctx.cluster, ctx.lay, reserved)}


def _peaks(ctx: Ctx, rank_mem: memory.RankMemory, pat: dict[str, np.ndarray]) -> MemoryPeaks:
    """Each kind's peak over the ranks (_kinds) and the host memory of the most loaded rank."""
    real = pat["count"] > 0
    kinds = _kinds(ctx, rank_mem)

    def peak(gib: np.ndarray, padding: float = -np.inf) -> np.ndarray:
        return np.where(real, gib, padding).max(axis=1)

    return MemoryPeaks(allocated=peak(kinds["allocated"]), reserved=peak(kinds["reserved"]),
                       device=peak(kinds["device"]), host=peak(rank_mem.host / 2**30, 0.0))


_RECOMPUTE_NONE = RECOMPUTE.index("none")


def _units(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, workload: Workload, stack: StackSpec | None, *,
           compute_only: bool = False) -> tuple[dict[str, _Work], np.ndarray]:
    """Each unit's work as `stack` runs it, computed once per distinct combination of the fields it depends on
    (_LAYER_KEYS; _COMPUTE_KEYS for compute alone), and the map from every layout to its combination."""
    first, inverse = _distinct(lay, _COMPUTE_KEYS if compute_only else _LAYER_KEYS)
    return _unit_works(Ctx.build(model, cluster, lay.take(first), workload, stack), compute_only), inverse


def _rank_times(ctx: Ctx, pat: dict[str, np.ndarray], units: dict[str, _Work]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, comm.Comm]:
    """(N, K) forward, backward (with the exposed stage-to-stage transfers) and weight-grad seconds of one
    micro-batch per rank pattern, and the transfers."""
    pp_mb = comm.pp_microbatch(ctx)
    t_f = _per_rank(pat, units, lambda x: x.fwd)
    t_b = _per_rank(pat, units, lambda x: x.bwd) + pp_mb.exposed[:, None]
    return t_f, t_b, _per_rank(pat, units, lambda x: x.wgrad), pp_mb


_PIPELINE_BATCH = 1 << 16
"""Layouts per batch when only the pipeline term is wanted (each holds (N, K, 7) pattern arrays)."""


def _pipeline_of(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, units: dict[str, _Work],
                 inverse: np.ndarray, workload: Workload, stack: StackSpec | None) -> np.ndarray:
    """The pipeline seconds of each layout, its units' work being units[...][inverse[i]]."""
    out = np.empty(len(lay))
    for lo in range(0, len(lay), _PIPELINE_BATCH):
        rows = np.arange(lo, min(lo + _PIPELINE_BATCH, len(lay)))
        part = lay.take(rows)
        ctx = Ctx.build(model, cluster, part, workload, stack)
        pat = _patterns(model, part, ctx.stack)
        t_f, t_b, t_w, _ = _rank_times(ctx, pat, {u: _take_work(w, inverse[rows], False) for u, w in units.items()})
        out[rows] = _pipeline(ctx, pat, t_f, t_b, t_w)[0]
    return out


def pipeline_seconds(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, workload: Workload = UNIFORM,
                     stack: StackSpec | None = None, *, compute_only: bool = False) -> np.ndarray:
    """The pipeline term of each layout's step as `stack` runs it (evaluate_layouts: m times the slowest rank's
    micro-batch plus the bubble), without the data-parallel traffic and the optimizer that the step adds to
    it. `compute_only` leaves each unit's communication and recompute out (step_time_bound)."""
    stack = load_stack(stack)
    units, inverse = _units(model, cluster, lay, workload, stack, compute_only=compute_only)
    return _pipeline_of(model, cluster, lay, units, inverse, workload, stack)


BOUND_FREE = ("zero", "dp_replicate", "recompute", "recompute_blocks", "tp_overlap", "dispatch", "ep_overlap")
"""The fields `step_time_bound` holds across: the choices a search block leaves open (zero, recompute and the
time-only ones), and the HSDP replicas and the share of blocks recomputed, which the search holds at 1."""


def step_time_bound(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, workload: Workload = UNIFORM,
                    stack: StackSpec | None = None) -> np.ndarray:
    """A lower bound on the step time of every valid layout that equals lay[i] except in BOUND_FREE fields
    (whatever values lay holds in them), run on `stack`: the pipeline term of `evaluate_layouts`, through the
    same functions, with each unit's communication and recompute left out (pipeline_seconds, compute_only).

    A search skips whole blocks of layouts on it, so it must never exceed a step time. It holds because
    (each is a property tested in tests/test_bound.py under several stacks, so that a cost-model change that
    breaks one fails a test instead of losing the best layout):
      1. on every rank, a unit's forward (backward) seconds on the critical path are at least its compute
         alone (exposed communication and whatever the stack's recompute kind re-runs, on any share of the
         blocks, are >= 0), and its weight-grad part equals it;
      2. compute alone (the compute_only unit works: the stack's kernel throughput, attention kernel, eager
         element-wise traffic and host launch waits included), the stage-to-stage transfers
         (comm.pp_microbatch and comm.pp_bubble_transfers) and the pipeline shape read none of BOUND_FREE,
         and compute alone not the schedule either (_COMPUTE_KEYS);
      3. schedule.bubble_time never falls when the ranks' t_f or t_b grows (t_w held);
      4. what the step adds to the pipeline (exposed data-parallel traffic, the stack's ZeRO-3 passes and HSDP
         replica reduction among it, and the optimizer) is >= 0.
    """
    return pipeline_seconds(model, cluster, lay, workload, stack, compute_only=True)


def model_units(model: ModelSpec) -> dict[str, int]:
    """How many of each unit (_UNITS) one micro-batch passes through in the whole pipeline: every layer, the
    head and the embedding once. Summed over a pipeline's ranks, each rank's units times its work share are
    these, whatever the schedule (tested over schedule.rank_patterns)."""
    return {"dense": model.layers - model.moe_layer_count, "moe": model.moe_layer_count, "head": 1, "embedding": 1}


def compute_floor(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, workload: Workload = UNIFORM,
                  stack: StackSpec | None = None) -> np.ndarray:
    """A lower bound on `step_time_bound` itself, so on every step time that covers, that needs no pipeline
    shape and therefore holds across schedules too: m times one micro-batch's compute over the whole model
    (model_units) spread evenly over the p ranks, i.e. the mean rank, which the slowest is not below; no
    bubble (bubble_time and the fill-and-drain transfers are >= 0 for every valid pipeline, tested)."""
    units, inverse = _units(model, cluster, lay, workload, load_stack(stack), compute_only=True)
    counts = model_units(model)
    total = sum(counts[u] * (w.compute_f + w.compute_b) for u, w in units.items())
    return lay.microbatches(cluster.gpus) * total[inverse] / lay.pp


def time_options_bound(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, options: Layouts, owner: np.ndarray,
                       workload: Workload = UNIFORM, stack: StackSpec | None = None) -> np.ndarray:
    """A tighter lower bound than `step_time_bound`, communication included: for each layout lay[i], one on the
    step time of every valid layout equal to one of its `options` (the rows whose `owner` is i: lay[i] with
    each setting of the time-only fields it may take) except in zero, dp_replicate, recompute and
    recompute_blocks, run on `stack`.

    The pipeline of lay[i] with each unit's forward and backward seconds the least over the options at
    recompute none, and its weight-grad part the largest. It holds because (tested in tests/test_bound.py
    under several stacks):
      1. no unit's work, stage-to-stage transfer nor the pipeline shape reads zero or dp_replicate;
      2. recompute, whatever the stack makes a name re-run (recompute.RECOMPUTED) and on whatever share of the
         blocks, leaves a unit's forward seconds and weight-grad part unchanged and only adds to its backward
         seconds (recompute none, which recomputes nothing in every stack, is the least);
      3. the pipeline never falls when a rank's t_f or t_b grows or its t_w shrinks (schedule.bubble_time;
         the slowest rank and the ranks' mean are monotone);
      4. what the step adds to the pipeline (exposed data-parallel traffic, the optimizer) is >= 0.
    A layout without options gets no bound (-inf).
    """
    stack = load_stack(stack)
    options = dataclasses.replace(options, recompute=np.full(len(options), _RECOMPUTE_NONE,
                                                             dtype=options.recompute.dtype))
    works, inverse = _units(model, cluster, options, workload, stack)
    n = len(lay)
    has = np.bincount(owner, minlength=n) > 0
    least: dict[str, _Work] = {}
    for u, w in works.items():
        fwd, bwd, wgrad = np.full(n, np.inf), np.full(n, np.inf), np.full(n, -np.inf)
        np.minimum.at(fwd, owner, w.fwd[inverse])
        np.minimum.at(bwd, owner, w.bwd[inverse])
        np.maximum.at(wgrad, owner, w.wgrad[inverse])
        fwd, bwd, wgrad = (np.where(has, x, 0.0) for x in (fwd, bwd, wgrad))
        least[u] = _Work({}, {}, fwd, bwd, wgrad, fwd, bwd)
    bound = _pipeline_of(model, cluster, lay, least, np.arange(n), workload, stack)
    return np.where(has, bound, -np.inf)


def peak_memory(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, workload: Workload = UNIFORM,
                stack: StackSpec | None = None) -> MemoryPeaks:
    """Peak GiB of each layout's most loaded rank in every memory kind, without its time: what a search checks
    first, since a layout that cannot fit needs no step time."""
    stack = load_stack(stack)
    ctx = Ctx.build(model, cluster, lay, workload, stack)
    pat = _patterns(model, lay, stack)
    return _peaks(ctx, _rank_memory(ctx, pat, _rank_params(ctx, pat)), pat)


def evaluate_layouts(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, *, breakdown: bool = True,
                     workload: Workload = UNIFORM, peaks: MemoryPeaks | None = None,
                     stack: StackSpec | None = None) -> Evaluation:
    """Evaluate a batch of (valid) layouts with numpy; the same formulas as `evaluate`.

    Per-layer work is computed once per distinct combination of the fields it depends on and broadcast
    back, which keeps a search over millions of layouts fast without a second copy of any formula.
    breakdown=False skips assembling the per-component arrays (a search ranks first and then asks for the
    breakdown of its winners); `peaks`, the layouts' peak_memory when the caller has it already, skips the
    memory pass (and with breakdown=False leaves memory_by_rank empty). `stack` is the software stack the
    layouts run on (default: megatron-core).
    """
    n = len(lay)
    stack = load_stack(stack)
    ctx = Ctx.build(model, cluster, lay, workload, stack)
    works, inverse = _units(model, cluster, lay, workload, stack)
    units = {u: _take_work(w, inverse, breakdown) for u, w in works.items()}
    pat = _patterns(model, lay, stack)
    dense, moe = pat["dense"], pat["moe"]
    real = pat["count"] > 0

    def per_rank(get: Callable[[_Work], np.ndarray]) -> np.ndarray:
        return _per_rank(pat, units, get)

    t_f, t_b, t_w, pp_mb = _rank_times(ctx, pat, units)
    c_f = per_rank(lambda x: x.compute_f)
    c_b = per_rank(lambda x: x.compute_b)
    pipeline, bubble, crit = _pipeline(ctx, pat, t_f, t_b, t_w)

    def pick(a: np.ndarray) -> np.ndarray:
        """The critical (slowest) rank's value."""
        return np.take_along_axis(a, crit[:, None], axis=1)[:, 0]

    m = ctx.m.astype(float)

    # Data-parallel traffic of rank 0 (pattern 0: the first stage finishes the pipeline last), computed
    # once per distinct parallel grid, then the optimizer over the parameters each rank updates.
    params = _rank_params(ctx, pat)
    g_first, g_inverse = _distinct(lay, _GRID_KEYS)
    g_ctx = Ctx.build(model, cluster, lay.take(g_first), workload, stack)
    traffic = comm.dp_traffic(g_ctx, params.dense[g_first, 0], params.expert[g_first, 0],
                              (dense[:, 0] + moe[:, 0])[g_first]).take(g_inverse)
    dp = comm.dp_step(ctx, traffic, t_f[:, 0], t_b[:, 0], c_f[:, 0], c_b[:, 0])
    states = _model_states(ctx, params)
    # The step updates the parameters whose optimizer states the rank holds on the GPU and zeroes its gradient
    # buffer; the offloaded share is stepped by the host (offload.py).
    mem = stack.memory
    on_gpu = states.updated * (1.0 - mem.optimizer_offload)
    step_time = compute.optimizer_time(ctx, on_gpu, states.grad_elements)
    optimizer = np.max(np.where(real, step_time, 0.0), axis=1)
    step = pipeline + dp.grad.exposed + dp.param.exposed + optimizer
    offloaded_acts = _zeros(n)
    if mem.activation_offload:
        stored = (dense * memory.layer_activation_bytes(ctx, LayerKind.DENSE)[:, None]
                  + (moe * memory.layer_activation_bytes(ctx, LayerKind.MOE)[:, None] if model.moe_layer_count
                     else 0.0))
        offloaded_acts = mem.activation_offload * pick(stored)
    ema_params = states.updated if mem.ema == "cpu" else np.zeros_like(states.updated)
    offload = offload_time(ctx, pick(np.broadcast_to(states.updated * mem.optimizer_offload, real.shape)),
                           pick(np.broadcast_to(states.grad_elements * mem.optimizer_offload, real.shape)),
                           pick(np.broadcast_to(ema_params, real.shape)), offloaded_acts, pick(c_f), pick(c_b), step)
    step = step + offload.exposed

    mem_gib: dict[str, np.ndarray] = {}
    kinds_gib: dict[str, np.ndarray] = {}
    if peaks is None or breakdown:
        rank_mem = _rank_memory(ctx, pat, params)
        if breakdown:
            mem_gib = {k: np.where(real, v, 0.0) for k, v in rank_mem.as_gib().items()}
            kinds_gib = {k: np.where(real, v, 0.0) for k, v in _kinds(ctx, rank_mem).items()}
            kinds_gib["host"] = np.where(real, rank_mem.host / 2**30, 0.0)
        peaks = _peaks(ctx, rank_mem, pat)

    tokens_per_s_per_gpu = lay.gbs * lay.seq / (step * cluster.gpus)
    seqs, seq_index = np.unique(lay.seq, return_inverse=True)

    def per_seq(flops_of: Callable[[float], float]) -> np.ndarray:
        """A per-token FLOP count of the model at each layout's sequence length."""
        return np.array([flops_of(float(x)) for x in seqs])[seq_index.ravel()]

    model_flops = per_seq(model.training_flops_per_token)
    mfu = tokens_per_s_per_gpu * model_flops / peak_flops(cluster.gpu, ctx.fp8)
    # HFU adds the forward FLOPs the recompute setting repeats (per distinct seq, kind and precision).
    keys = np.stack([lay.seq, ctx.recompute, ctx.fp8], axis=1)
    uniq, which = np.unique(keys, axis=0, return_inverse=True)
    repeated = np.array([recompute_flops_per_token(model, float(x), RECOMPUTE_KINDS[int(k)], bool(f))
                         for x, k, f in uniq])[which.ravel()]
    hfu = mfu * (model_flops + ctx.recompute_blocks * repeated) / model_flops

    # Time breakdown on the critical rank.
    exposed: dict[str, np.ndarray] = {}
    total: dict[str, np.ndarray] = {}
    if breakdown:
        for name in ("gemm", "attention", "elementwise", "launch", "recompute", "tp_comm", "cp_comm", "ep_comm"):
            exposed[name] = m * pick(per_rank(lambda x, name=name: x.parts.get(name, _zeros(n))))
        for name in ("tp_comm", "cp_comm", "ep_comm"):
            total[name] = m * pick(per_rank(lambda x, name=name: x.total_comm.get(name, _zeros(n))))
        exposed["pp_comm"], total["pp_comm"] = m * pp_mb.exposed, m * pp_mb.total
        exposed["pipeline_bubble"] = bubble
        exposed["dp_grad_reduce"], total["dp_grad_reduce"] = dp.grad.exposed, dp.grad.total
        exposed["dp_param_gather"], total["dp_param_gather"] = dp.param.exposed, dp.param.total
        exposed["optimizer"] = optimizer
        exposed["offload"], total["offload"] = offload.exposed, offload.seconds
        for name in TIME_COMPONENTS:
            total.setdefault(name, exposed[name])
    return Evaluation(
        model=model, cluster=cluster, stack=stack, layouts=lay, step_time_s=step,
        tokens_per_s_per_gpu=tokens_per_s_per_gpu,
        mfu=mfu, hfu=hfu, memory_gib=peaks.allocated, reserved_gib=peaks.reserved, device_gib=peaks.device,
        required_gib=peaks.device, fits=peaks.device <= cluster.gpu.hbm_gib, host_gib=peaks.host,
        time_exposed=exposed, time_total=total, memory_by_rank=mem_gib, memory_kinds_by_rank=kinds_gib, patterns=pat,
        time_per_microbatch=np.where(real, t_f + t_b, 0.0), time_forward=np.where(real, t_f, 0.0),
        time_backward=np.where(real, t_b, 0.0), time_wgrad=np.where(real, t_w, 0.0),
    )


@dataclass(frozen=True, slots=True)
class Estimate:
    """Prediction for one layout (immutable)."""

    model: str
    cluster: str
    gpus: int
    strategy: Strategy
    stack: str
    """The software stack the layout is costed as (StackSpec.name)."""
    compile: bool
    """Whether the stack ran it compiled (torch.compile or XLA)."""
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    memory_gib: float
    """Peak allocated GiB of the most loaded rank (torch.cuda.max_memory_allocated)."""
    reserved_gib: float
    """Peak reserved GiB (torch.cuda.max_memory_reserved): allocated plus the allocator's headroom."""
    device_gib: float
    """Peak device GiB (nvidia-smi): reserved plus the CUDA context and communication buffers."""
    required_gib: float
    """What the layout needs of the GPU: device_gib."""
    capacity_gib: float
    fits: bool
    host_gib: float
    """Host memory per GPU of offloaded optimizer states and a host EMA."""
    outside_allocator_gib: dict[str, float]
    """The device bytes outside PyTorch's allocator by part: cuda_context, nccl, deepep."""
    time_breakdown: dict[str, dict[str, float]]
    """component -> {'seconds': busy or on-the-wire seconds per step, 'exposed': seconds the step waits,
    'overlapped': seconds hidden behind compute}."""
    memory_breakdown: dict[str, float]
    """component -> GiB allocated on the rank needing the most device memory."""
    stages: list[dict[str, object]] = field(default_factory=list)
    """One entry per distinct pipeline-rank pattern: ranks, layers held, memory by component, time."""

    @classmethod
    def from_evaluation(cls, ev: Evaluation, i: int) -> Estimate:
        lay, model = ev.layouts, ev.model
        strategy = lay.strategy(i)
        time = {}
        for name in TIME_COMPONENTS:
            exp = float(ev.time_exposed[name][i])
            tot = float(ev.time_total[name][i])
            time[name] = {"seconds": tot, "exposed": exp, "overlapped": max(tot - exp, 0.0)}
        kinds = ev.memory_kinds_by_rank
        k_peak = int(np.argmax(np.where(ev.patterns["count"][i] > 0, kinds["device"][i], -np.inf)))
        mem = {c: float(ev.memory_by_rank[c][i, k_peak]) for c in MEMORY_COMPONENTS}
        outside = device.outside_allocator_parts(model, ev.cluster, lay.take(np.array([i])))
        stages = []
        for j in range(ev.patterns["count"].shape[1]):
            if ev.patterns["count"][i, j] == 0:
                continue
            first = int(ev.patterns["rank"][i, j])
            stages.append({
                "first_rank": first,
                "ranks": int(ev.patterns["count"][i, j]),
                "dense_layers": int(ev.patterns["dense"][i, j]),
                "moe_layers": int(ev.patterns["moe"][i, j]),
                "embedding": bool(ev.patterns["embedding"][i, j]),
                "head": bool(ev.patterns["head"][i, j]),
                "microbatch_s": float(ev.time_per_microbatch[i, j]),
                "forward_s": float(ev.time_forward[i, j]),
                "backward_s": float(ev.time_backward[i, j]),
                "wgrad_s": float(ev.time_wgrad[i, j]),
                "memory_gib": {c: float(ev.memory_by_rank[c][i, j]) for c in MEMORY_COMPONENTS},
                "memory_total_gib": sum(float(ev.memory_by_rank[c][i, j]) for c in MEMORY_COMPONENTS),
                "memory_reserved_gib": float(kinds["reserved"][i, j]),
                "memory_device_gib": float(kinds["device"][i, j]),
                "memory_host_gib": float(kinds["host"][i, j]),
            })
        stages.sort(key=lambda st: st["first_rank"])
        return cls(
            model=model.name, cluster=ev.cluster.name, gpus=ev.cluster.gpus, strategy=strategy,
            stack=ev.stack.name, compile=ev.stack.compiled,
            step_time_s=float(ev.step_time_s[i]), tokens_per_s_per_gpu=float(ev.tokens_per_s_per_gpu[i]),
            mfu=float(ev.mfu[i]), hfu=float(ev.hfu[i]), memory_gib=float(ev.memory_gib[i]),
            reserved_gib=float(ev.reserved_gib[i]), device_gib=float(ev.device_gib[i]),
            required_gib=float(ev.required_gib[i]), capacity_gib=ev.cluster.gpu.hbm_gib, fits=bool(ev.fits[i]),
            host_gib=float(ev.host_gib[i]), outside_allocator_gib={k: float(v[0]) / 2**30 for k, v in outside.items()},
            time_breakdown=time, memory_breakdown=mem, stages=stages,
        )

    def memory_kinds(self) -> dict[str, float]:
        """Peak GiB in each memory kind (device.MEMORY_KINDS)."""
        return {"allocated": self.memory_gib, "reserved": self.reserved_gib, "device": self.device_gib}

    def days_for(self, tokens: float) -> float:
        """Days of training `tokens` at this throughput."""
        return tokens / self.tokens_per_s / 86400

    def gpu_hours_for(self, tokens: float) -> float:
        """GPU-hours of training `tokens` at this throughput."""
        return tokens / self.tokens_per_s_per_gpu / 3600

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_s_per_gpu * self.gpus

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "cluster": self.cluster,
            "gpus": self.gpus,
            "strategy": self.strategy.as_dict(self.gpus),
            "stack": self.stack,
            "compile": self.compile,
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "memory_gib": self.memory_gib,
            "reserved_gib": self.reserved_gib,
            "device_gib": self.device_gib,
            "required_gib": self.required_gib,
            "capacity_gib": self.capacity_gib,
            "fits": self.fits,
            "memory_kinds_gib": self.memory_kinds(),
            "outside_allocator_gib": self.outside_allocator_gib,
            "host_gib": self.host_gib,
            "time_breakdown": self.time_breakdown,
            "memory_breakdown": self.memory_breakdown,
            "stages": self.stages,
            "conventions": {
                "mfu": "model FLOPs (all GEMMs, causal-half attention scores, no recompute) / dense peak of "
                       "the GEMM dtype",
                "memory_gib": "peak allocated bytes of the most loaded rank (what torch.cuda.max_memory_allocated "
                              "reports)",
                "reserved_gib": "peak reserved bytes (torch.cuda.max_memory_reserved): allocated plus the caching "
                                "allocator's headroom on the bytes allocated and freed within a step",
                "device_gib": "peak device bytes (nvidia-smi): reserved plus the CUDA context and the NCCL and "
                              "DeepEP buffers; required_gib is device_gib, and fits compares it with capacity_gib",
            },
        }


def evaluate(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, *, workload: Workload = UNIFORM,
             stack: StackSpec | str | Path | None = None, compile: bool | None = None) -> Estimate:
    """Predict one layout as `stack` runs it (a preset name, a stack file or a StackSpec; default
    megatron-core), with torch.compile on or off (`compile`; None: the stack's default); raises
    InvalidStrategyError if the layout cannot run, or the stack cannot run it. `workload` sets the expert
    load (default: a balanced router)."""
    spec = load_stack(stack, compile=compile)
    strategy.check(model, cluster)
    check_stack(spec, strategy, model, cluster.gpus)
    lay = Layouts.from_strategies([strategy])
    return evaluate_layouts(model, cluster, lay, workload=workload, stack=spec).estimate(0)
