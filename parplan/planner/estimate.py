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

from dataclasses import dataclass, field

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import LayerKind, ModelSpec
from parplan.planner import comm, compute, memory
from parplan.planner.context import ACT_BYTES, RC_FULL, RC_SELECTIVE, Ctx
from parplan.planner.schedule import bubble_time, inflight_microbatches, rank_patterns
from parplan.planner.strategy import Layouts, Strategy

TIME_COMPONENTS = ("gemm", "attention", "elementwise", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
                   "pipeline_bubble", "dp_grad_reduce", "dp_param_gather", "optimizer")
COMM_COMPONENTS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_grad_reduce", "dp_param_gather")
MEMORY_COMPONENTS = ("weights", "gradients", "optimizer", "activations", "buffers")


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


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n)


def _layer_work(ctx: Ctx, kind: LayerKind) -> _Work:
    lt = compute.layer_time(ctx, kind)
    tp_f, tp_b = comm.tp_layer(ctx, kind, lt.gemm_f, lt.gemm_b)
    cp_f, cp_b = comm.cp_layer(ctx, lt.attn_f, lt.attn_b)
    if kind is LayerKind.MOE:
        ep_f, ep_b = comm.ep_layer(ctx, lt.forward, lt.backward)
    else:
        zero = _zeros(len(ctx.lay))
        ep_f = ep_b = comm.Comm(zero, zero)
    exposed_f = tp_f.exposed + cp_f.exposed + ep_f.exposed
    # Selective recompute re-runs the attention core in backward; full recompute the whole forward,
    # its communication included.
    recompute = np.select([ctx.recompute == RC_FULL, ctx.recompute == RC_SELECTIVE],
                          [lt.forward + exposed_f, lt.attn_f], 0.0)
    rec_comm = np.where(ctx.recompute == RC_FULL, 1.0, 0.0)
    parts = {
        "gemm": lt.gemm_f + lt.gemm_b,
        "attention": lt.attn_f + lt.attn_b,
        "elementwise": lt.elem_f + lt.elem_b,
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


def _head_work(ctx: Ctx) -> _Work:
    """LM head + loss (and MTP modules) on the last stage; with SP its input is gathered over TP."""
    n = len(ctx.lay)
    ht = compute.head_time(ctx)
    msg = ctx.tokens * ctx.model.hidden * ACT_BYTES
    gather = np.where(ctx.sp, comm.collective_time(ctx.cluster, comm.Collective.ALL_GATHER, msg, ctx.t,
                                                   ctx.tp_domain), 0.0)
    fwd, bwd = ht.forward + gather, ht.backward + gather
    parts = {"gemm": ht.gemm_f + ht.gemm_b, "elementwise": ht.elem_f + ht.elem_b, "tp_comm": 2 * gather}
    total_comm = {"tp_comm": 2 * gather}
    wgrad, cf, cb = ht.gemm_w, ht.forward, ht.backward
    if ctx.model.mtp_layers:
        k = ctx.model.mtp_layers
        layer = _layer_work(ctx, ctx.model.mtp_layer_kind)
        extra = compute.mtp_extra_time(ctx)
        fwd = fwd + k * (layer.fwd + extra.forward + ht.forward + gather)
        bwd = bwd + k * (layer.bwd + extra.backward + ht.backward + gather)
        for key, val in layer.parts.items():
            parts[key] = parts.get(key, _zeros(n)) + k * val
        parts["gemm"] = parts["gemm"] + k * (extra.gemm_f + extra.gemm_b + ht.gemm_f + ht.gemm_b)
        parts["elementwise"] = parts["elementwise"] + k * (extra.elem_f + extra.elem_b + ht.elem_f + ht.elem_b)
        parts["tp_comm"] = parts["tp_comm"] + k * 2 * gather
        for key, val in layer.total_comm.items():
            total_comm[key] = total_comm.get(key, _zeros(n)) + k * val
        wgrad = wgrad + k * (layer.wgrad + extra.gemm_w + ht.gemm_w)
        cf = cf + k * (layer.compute_f + extra.forward + ht.forward)
        cb = cb + k * (layer.compute_b + extra.backward + ht.backward)
    return _Work(parts, total_comm, fwd, bwd, wgrad, cf, cb)


def _embedding_work(ctx: Ctx) -> _Work:
    """Embedding lookup on the first stage; vocab-parallel over TP, so its output is all-reduced (or
    reduce-scattered under SP) across the TP group forward, and its gradient passes back the same way."""
    et = compute.embedding_time(ctx)
    msg = ctx.tokens * ctx.model.hidden * ACT_BYTES
    reduce = np.where(ctx.sp, comm.collective_time(ctx.cluster, comm.Collective.REDUCE_SCATTER, msg, ctx.t,
                                                   ctx.tp_domain),
                      comm.collective_time(ctx.cluster, comm.Collective.ALL_REDUCE, msg, ctx.t, ctx.tp_domain))
    return _Work({"elementwise": et.elem_f + et.elem_b, "tp_comm": reduce}, {"tp_comm": reduce},
                 et.forward + reduce, et.backward, et.gemm_w, et.forward, et.backward)


def _patterns(model: ModelSpec, lay: Layouts) -> dict[str, np.ndarray]:
    """(N, K) arrays describing the distinct rank patterns of each layout's pipeline (count 0 = padding)."""
    keys = np.stack([lay.pp, lay.vpp, lay.schedule.astype(np.int64)], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    tables = [rank_patterns(model, int(p), int(v), int(sc)) for p, v, sc in uniq]
    k = max(len(tb) for tb in tables)
    fields = ("rank", "count", "dense", "moe", "embedding", "head", "work")
    arr = {f: np.zeros((len(uniq), k)) for f in fields}
    for i, tb in enumerate(tables):
        for j, pat in enumerate(tb):
            for f in fields:
                arr[f][i, j] = float(getattr(pat, f))
    return {f: a[inverse.ravel()] for f, a in arr.items()}


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Results for a batch of N layouts (arrays of length N)."""

    model: ModelSpec
    cluster: ClusterSpec
    layouts: Layouts
    step_time_s: np.ndarray
    tokens_per_s_per_gpu: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    memory_gib: np.ndarray
    """Peak allocated memory of the most loaded rank, GiB."""
    required_gib: np.ndarray
    """memory_gib plus allocator headroom and CUDA context."""
    fits: np.ndarray
    time_exposed: dict[str, np.ndarray]
    time_total: dict[str, np.ndarray]
    """Seconds on the wire (communication) or busy (compute), exposed or not."""
    memory_by_rank: dict[str, np.ndarray]
    """(N, K) GiB per memory component and distinct rank pattern."""
    patterns: dict[str, np.ndarray]
    time_per_microbatch: np.ndarray
    """(N, K) seconds of one micro-batch (forward + backward) per rank pattern."""

    def __len__(self) -> int:
        return len(self.step_time_s)

    def estimate(self, i: int) -> Estimate:
        return Estimate.from_evaluation(self, i)


def evaluate_layouts(model: ModelSpec, cluster: ClusterSpec, lay: Layouts) -> Evaluation:
    """Evaluate a batch of (valid) layouts with numpy; the same formulas as `evaluate`."""
    n = len(lay)
    ctx = Ctx.build(model, cluster, lay)
    kinds = [LayerKind.DENSE] + ([LayerKind.MOE] if model.moe_layer_count else [])
    work = {kind: _layer_work(ctx, kind) for kind in kinds}
    if LayerKind.MOE not in work:
        work[LayerKind.MOE] = _Work({}, {}, _zeros(n), _zeros(n), _zeros(n), _zeros(n), _zeros(n))
    head = _head_work(ctx)
    embedding = _embedding_work(ctx)
    pat = _patterns(model, lay)

    def col(x: np.ndarray) -> np.ndarray:
        return x[:, None]

    dense, moe, w, has_head, has_emb = pat["dense"], pat["moe"], pat["work"], pat["head"], pat["embedding"]
    real = pat["count"] > 0

    def per_rank(get) -> np.ndarray:
        d, mo, hd, em = get(work[LayerKind.DENSE]), get(work[LayerKind.MOE]), get(head), get(embedding)
        return w * (dense * col(d) + moe * col(mo) + has_head * col(hd) + has_emb * col(em))

    pp_mb = comm.pp_microbatch(ctx)
    t_f = per_rank(lambda x: x.fwd)
    t_b = per_rank(lambda x: x.bwd) + col(pp_mb.exposed)
    t_w = per_rank(lambda x: x.wgrad)
    c_f = per_rank(lambda x: x.compute_f)
    c_b = per_rank(lambda x: x.compute_b)
    t_mb = np.where(real, t_f + t_b, -np.inf)
    crit = np.argmax(t_mb, axis=1)

    def pick(a: np.ndarray) -> np.ndarray:
        """The critical (slowest) rank's value."""
        return np.take_along_axis(a, crit[:, None], axis=1)[:, 0]

    m = ctx.m.astype(float)
    p = ctx.p.astype(float)

    def mean(a: np.ndarray) -> np.ndarray:
        """Average over all p ranks (patterns weighted by how many ranks share them)."""
        return (np.where(real, a, 0.0) * pat["count"]).sum(axis=1) / p

    bubble = bubble_time(ctx.p, ctx.v, lay.schedule, mean(t_f), mean(t_b), mean(t_w)) + comm.pp_bubble_transfers(ctx)
    pipeline = m * pick(t_mb) + bubble

    # Parameters held per rank pattern, then data-parallel traffic and the optimizer.
    dense_d, expert_d, lin_d = memory.layer_params(ctx, LayerKind.DENSE)
    dense_m, expert_m, lin_m = (memory.layer_params(ctx, LayerKind.MOE) if model.moe_layer_count
                                else (_zeros(n), _zeros(n), _zeros(n)))
    mtp_dense, mtp_expert = memory.mtp_params(ctx)
    emb, hd = memory.embedding_params(ctx), memory.head_params(ctx)
    p_dense = dense * col(dense_d) + moe * col(dense_m) + pat["embedding"] * col(emb) + has_head * col(hd + mtp_dense)
    p_expert = dense * col(expert_d) + moe * col(expert_m) + has_head * col(mtp_expert)
    # Data-parallel exposure of rank 0 (pattern 0): the first stage finishes the pipeline last.
    layers0 = dense[:, 0] + moe[:, 0]
    dp = comm.dp_step(ctx, p_dense[:, 0], p_expert[:, 0], layers0, t_f[:, 0], t_b[:, 0], c_f[:, 0], c_b[:, 0])
    shard_d = (ctx.c * ctx.dp).astype(float)
    shard_e = ctx.edp.astype(float)
    zero = lay.zero
    local = (p_dense / np.where(col(zero) >= 1, col(shard_d), 1)
             + p_expert / np.where(col(zero) >= 1, col(shard_e), 1))
    optimizer = np.max(np.where(real, compute.optimizer_time(ctx, local), 0.0), axis=1)
    step = pipeline + dp.grad.exposed + dp.param.exposed + optimizer

    # Memory per rank pattern.
    sharded_grads = col(comm.reduces_every_microbatch(ctx))
    wd, gd, od = memory.model_state_bytes(p_dense, col(shard_d), col(zero), grads_sharded=sharded_grads)
    we, ge, oe = memory.model_state_bytes(p_expert, col(shard_e), col(zero), grads_sharded=sharded_grads)
    inflight = inflight_microbatches(pat["rank"], col(ctx.p), col(ctx.v), col(ctx.m), col(lay.schedule))
    act_d = memory.layer_activation_bytes(ctx, LayerKind.DENSE)
    act_m = memory.layer_activation_bytes(ctx, LayerKind.MOE) if model.moe_layer_count else _zeros(n)
    act_mtp = (model.mtp_layers * (act_m if model.mtp_layer_kind is LayerKind.MOE else act_d)
               + model.mtp_layers * 4 * ACT_BYTES * ctx.tokens_sp * model.hidden)
    token_ids = memory.TOKEN_ID_BYTES * ctx.b * ctx.s / ctx.c
    activations = inflight * (dense * col(act_d) + moe * col(act_m) + has_head * col(act_mtp)
                              + pat["embedding"] * col(token_ids))
    largest_layer = np.maximum(dense_d + expert_d, dense_m + expert_m)
    zero3_buffers = np.where(zero == 3, 2 * (memory.WEIGHT_BYTES + memory.WEIGHT_BYTES) * largest_layer, 0.0)
    fp8_cache = np.where(col(ctx.fp8), memory.FP8_WEIGHT_CACHE_BYTES
                         * (dense * col(lin_d) + moe * col(lin_m)), 0.0)
    logits, working = memory.transient_bytes(ctx)
    buffers = col(zero3_buffers) + fp8_cache + has_head * col(logits) + col(working)
    rank_mem = memory.RankMemory(weights=wd + we, gradients=gd + ge, optimizer=od + oe, activations=activations,
                                 buffers=buffers)
    mem_gib = {k: np.where(real, v, 0.0) for k, v in rank_mem.as_gib().items()}
    total_gib = np.where(real, rank_mem.total / 2**30, -np.inf)
    peak = total_gib.max(axis=1)
    required = memory.required_gib(peak)

    tokens_per_s_per_gpu = lay.gbs * lay.seq / (step * cluster.gpus)
    model_flops = np.array([model.training_flops_per_token(float(s)) for s in np.unique(lay.seq)])
    model_flops = model_flops[np.searchsorted(np.unique(lay.seq), lay.seq)]
    peak_flops = np.where(ctx.fp8, cluster.gpu.peak_tflops.get("fp8", np.nan), cluster.gpu.peak_tflops["bf16"])
    mfu = tokens_per_s_per_gpu * model_flops / (peak_flops * 1e12)
    layers_fwd = np.array([model.forward_flops_per_token(float(s)) - 2.0 * model.hidden * model.vocab
                           * (1 + model.mtp_layers) for s in np.unique(lay.seq)])
    layers_fwd = layers_fwd[np.searchsorted(np.unique(lay.seq), lay.seq)]
    attn_fwd = np.array([model.attention_core_flops_per_token(float(s)) for s in np.unique(lay.seq)])
    attn_fwd = attn_fwd[np.searchsorted(np.unique(lay.seq), lay.seq)]
    extra = np.select([lay.recompute == RC_FULL, lay.recompute == RC_SELECTIVE], [layers_fwd, attn_fwd], 0.0)
    hfu = mfu * (model_flops + extra) / model_flops

    # Time breakdown on the critical rank.
    exposed: dict[str, np.ndarray] = {}
    total: dict[str, np.ndarray] = {}
    for name in ("gemm", "attention", "elementwise", "recompute", "tp_comm", "cp_comm", "ep_comm"):
        rank_val = per_rank(lambda x, name=name: x.parts.get(name, _zeros(n)))
        exposed[name] = m * pick(rank_val)
    for name in ("tp_comm", "cp_comm", "ep_comm"):
        rank_val = per_rank(lambda x, name=name: x.total_comm.get(name, _zeros(n)))
        total[name] = m * pick(rank_val)
    exposed["pp_comm"] = m * pp_mb.exposed
    total["pp_comm"] = m * pp_mb.total
    exposed["pipeline_bubble"] = bubble
    exposed["dp_grad_reduce"], total["dp_grad_reduce"] = dp.grad.exposed, dp.grad.total
    exposed["dp_param_gather"], total["dp_param_gather"] = dp.param.exposed, dp.param.total
    exposed["optimizer"] = optimizer
    for name in TIME_COMPONENTS:
        total.setdefault(name, exposed[name])
    return Evaluation(
        model=model, cluster=cluster, layouts=lay, step_time_s=step, tokens_per_s_per_gpu=tokens_per_s_per_gpu,
        mfu=mfu, hfu=hfu, memory_gib=peak, required_gib=required, fits=required <= cluster.gpu.hbm_gib,
        time_exposed=exposed, time_total=total, memory_by_rank=mem_gib, patterns=pat,
        time_per_microbatch=np.where(real, t_f + t_b, 0.0),
    )


@dataclass(frozen=True, slots=True)
class Estimate:
    """Prediction for one layout (immutable)."""

    model: str
    cluster: str
    gpus: int
    strategy: Strategy
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    memory_gib: float
    required_gib: float
    capacity_gib: float
    fits: bool
    time_breakdown: dict[str, dict[str, float]]
    """component -> {'seconds': busy or on-the-wire seconds per step, 'exposed': seconds the step waits,
    'overlapped': seconds hidden behind compute}."""
    memory_breakdown: dict[str, float]
    """component -> GiB on the most loaded rank."""
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
        k_peak = int(np.argmax([sum(float(ev.memory_by_rank[c][i, j]) for c in MEMORY_COMPONENTS)
                                if ev.patterns["count"][i, j] > 0 else -1.0
                                for j in range(ev.patterns["count"].shape[1])]))
        mem = {c: float(ev.memory_by_rank[c][i, k_peak]) for c in MEMORY_COMPONENTS}
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
                "memory_gib": {c: float(ev.memory_by_rank[c][i, j]) for c in MEMORY_COMPONENTS},
                "memory_total_gib": sum(float(ev.memory_by_rank[c][i, j]) for c in MEMORY_COMPONENTS),
            })
        stages.sort(key=lambda st: st["first_rank"])
        return cls(
            model=model.name, cluster=ev.cluster.name, gpus=ev.cluster.gpus, strategy=strategy,
            step_time_s=float(ev.step_time_s[i]), tokens_per_s_per_gpu=float(ev.tokens_per_s_per_gpu[i]),
            mfu=float(ev.mfu[i]), hfu=float(ev.hfu[i]), memory_gib=float(ev.memory_gib[i]),
            required_gib=float(ev.required_gib[i]), capacity_gib=ev.cluster.gpu.hbm_gib, fits=bool(ev.fits[i]),
            time_breakdown=time, memory_breakdown=mem, stages=stages,
        )

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_s_per_gpu * self.gpus

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "cluster": self.cluster,
            "gpus": self.gpus,
            "strategy": self.strategy.as_dict(self.gpus),
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "memory_gib": self.memory_gib,
            "required_gib": self.required_gib,
            "capacity_gib": self.capacity_gib,
            "fits": self.fits,
            "time_breakdown": self.time_breakdown,
            "memory_breakdown": self.memory_breakdown,
            "stages": self.stages,
            "conventions": {
                "mfu": "model FLOPs (all GEMMs, causal-half attention scores, no recompute) / dense peak of "
                       "the GEMM dtype",
                "memory_gib": "peak allocated bytes of the most loaded rank (what torch.cuda.max_memory_allocated "
                              "reports); required_gib adds allocator headroom and the CUDA context",
            },
        }


def evaluate(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy) -> Estimate:
    """Predict one layout; raises InvalidStrategyError if it cannot run."""
    strategy.check(model, cluster)
    return evaluate_layouts(model, cluster, Layouts.from_strategies([strategy])).estimate(0)
