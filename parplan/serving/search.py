"""`serve plan`: every serving deployment of a model on N GPUs, evaluated as arrays, and the best under
latency targets.

Aggregated: worker layouts (tp, pp, attention DP, moe_tp × moe_ep over the worker's GPUs) replicated to fill the
GPUs, each at every concurrency of a grid (or the one asked for, or the one that carries the asked rate),
evaluated with evaluate_aggregated. Disaggregated: prefill layouts × decode layouts × decode batch × decode
workers, with the fewest prefill workers whose capacity matches what the decode pool emits (rate matching;
a little headroom is enumerated too, since a prefill pool run at full load queues), evaluated with the very
functions of disagg.py that `serve explain` iterates to a fixed point: at a decode batch b the steady state is
closed-form, and `serve explain` at the reported concurrency lands on the same b. Every candidate is checked
against memory (weights, KV cache of its batch), and against the targets; the Pareto front of tokens/s per
GPU against tokens/s per user and the best per mode are returned with the command that reproduces each.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parplan._arith import divisors
from parplan.errors import InvalidStrategyError, NoFeasiblePlanError, ParplanError
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.serving.batching import burst_share
from parplan.serving.disagg import (
    decode_state,
    kv_transfer_time,
    light_first_token,
    prefill_service,
    settled_first_token,
)
from parplan.serving.engines import Engine
from parplan.serving.evaluate import AggregatedEval, Traffic, evaluate_aggregated, for_rate
from parplan.serving.layout import PoolArrays
from parplan.serving.memory import resident_tokens, serving_memory
from parplan.serving.spec import Pool, Precision, check_pool
from parplan.serving.step import StepModel

RANK_CONCURRENCY = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
"""Requests in flight per attention rank the aggregated search tries (per decode rank for disaggregated)."""

PREFILL_HEADROOM = (0, 1, 2)
"""Prefill workers beyond the fewest that match the decode pool's rate: a pool at full load queues."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Targets:
    """Latency targets a deployment must meet (inf: none)."""

    ttft_ms: float = float("inf")
    tpot_ms: float = float("inf")


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One evaluated deployment of the search, in the units `serve plan` prints."""

    mode: str
    gpus: int
    precision: Precision
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    ttft_ms: float
    tpot_ms: float
    requests_per_s: float
    concurrency: int
    """Requests in flight the deployment runs at (whole deployment)."""
    meets: bool
    pool: Pool | None = None
    prefill: Pool | None = None
    decode: Pool | None = None
    detail: dict[str, float] = field(default_factory=dict)
    """Breakdown behind the numbers (step parts, memory, utilisation)."""

    def layout(self) -> dict[str, Any]:
        def as_dict(p: Pool) -> dict[str, Any]:
            return {"tp": p.tp, "pp": p.pp, "dp": p.dp, "moe_tp": p.moe_tp, "moe_ep": p.moe_ep,
                    "workers": p.workers, "batch": p.batch, "redundant_experts": p.redundant_experts}
        if self.pool is not None:
            return {"aggregated": as_dict(self.pool)}
        return {"prefill": as_dict(self.prefill), "decode": as_dict(self.decode)}  # type: ignore[arg-type]


def worker_layouts(model: ModelSpec, cluster: ClusterSpec, engine: Engine, precision: Precision, gpus: int, *,
                   max_pp: int = 1, redundant: tuple[int, ...] = (0,)) -> list[Pool]:
    """Every layout of a worker of `gpus` GPUs the engine can run: tp inside one NVLink domain, pp up to
    max_pp, the rest attention DP, and each split of the stage's GPUs into moe_tp × moe_ep."""
    out = []
    for tp in divisors(gpus):
        if tp > cluster.scaleup_domain:
            continue
        for pp in divisors(gpus // tp):
            if pp > max_pp:
                continue
            dp = gpus // (tp * pp)
            for ep in (divisors(tp * dp) if model.moe else [1]):
                for extra in redundant:
                    if extra and ep == 1:
                        continue
                    pool = Pool(tp=tp, pp=pp, dp=dp, moe_ep=ep, moe_tp=tp * dp // ep, redundant_experts=extra)
                    try:
                        check_pool(model, cluster, pool, precision)
                        engine.check_pool(pool)
                    except InvalidStrategyError:
                        continue
                    out.append(pool)
    return out


def worker_sizes(cluster: ClusterSpec, gpus: int) -> list[int]:
    """GPUs per worker to try: powers of two up to the job (and the job itself)."""
    sizes = [2**i for i in range(int(np.log2(gpus)) + 1)]
    return sorted({*sizes, gpus})


def matched_workers(demand: np.ndarray, capacity: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """Prefill workers for a demand (requests/s the decode pool emits): the fewest whose capacity
    (requests/s per worker) covers it, plus `extra` spares (rate matching)."""
    return np.ceil(demand / capacity * (1.0 - 1e-12)) + extra


def _meets(targets: Targets, ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    return (ttft <= targets.ttft_ms) & (tpot <= targets.tpot_ms)


@dataclass(frozen=True, slots=True)
class Found:
    """The feasible deployments of one mode and precision as arrays, and how to build entry i as a Candidate
    (only the ones shown are built)."""

    per_gpu: np.ndarray
    per_user: np.ndarray
    gpus: np.ndarray
    meets: np.ndarray
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    build: Any
    """i -> Candidate."""

    def __len__(self) -> int:
        return len(self.per_gpu)


def search_aggregated(model: ModelSpec, cluster: ClusterSpec, engine: Engine, precision: Precision, gpus: int,
                      traffic: Traffic, targets: Targets, *, concurrency: int | None = None,
                      rate: float | None = None, max_pp: int = 1, redundant: tuple[int, ...] = (0,),
                      chunk: int | None = None) -> tuple[Found | None, int]:
    """Aggregated deployments filling `gpus`: every worker layout × replicas × concurrency."""
    pools: list[Pool] = []
    for size in worker_sizes(cluster, gpus):
        for p in worker_layouts(model, cluster, engine, precision, size, max_pp=max_pp, redundant=redundant):
            pools.append(Pool(tp=p.tp, pp=p.pp, dp=p.dp, moe_tp=p.moe_tp, moe_ep=p.moe_ep, workers=gpus // size,
                              redundant_experts=p.redundant_experts))
    if not pools:
        return None, 0
    lay = PoolArrays.from_pools(pools)
    ranks = lay.dp * lay.workers
    if rate is not None:
        big = lay
    else:
        grid = np.array([float(concurrency)]) if concurrency is not None else np.array(RANK_CONCURRENCY, float)
        per_rank = grid[None, :] / ranks[:, None] if concurrency is not None else np.broadcast_to(
            grid[None, :], (len(pools), len(grid)))
        big = lay.take(np.repeat(np.arange(len(pools)), per_rank.shape[1]))
        # the engine runs at most the requests it is given per rank (max running requests, CUDA-graph batch)
        big = dataclasses.replace(big, batch=np.ceil(per_rank.ravel() - 1e-9))

    def run(c: np.ndarray) -> AggregatedEval:
        t = dataclasses.replace(traffic.part(0, len(big), len(big)), concurrency=c)
        return evaluate_aggregated(model, cluster, engine, precision, big, t, chunk, open_loop=rate is not None)

    if rate is not None:  # the concurrency that carries the rate, per layout
        ev, overloaded, total = for_rate(run, np.full(len(big), float(rate)))
        ok = ev.memory.fits & ~overloaded
    else:
        total = per_rank.ravel() * big.dp * big.workers
        ev = run(total)
        ok = ev.memory.fits & (ev.phase.running >= per_rank.ravel() - 1e-9)
    ph = ev.phase  # type: ignore[union-attr]
    requests = ph.throughput * big.workers * big.dp
    ttft, tpot = ph.ttft * 1e3, ph.tpot * 1e3
    ok = ok & np.isfinite(ttft)
    meets = _meets(targets, ttft, tpot)
    sel = np.flatnonzero(ok)
    per_gpu = ev.output_tok_s_per_gpu

    def build(j: int) -> Candidate:
        i = int(sel[j])
        pool = big.pool(i)
        return Candidate(
            mode="aggregated", gpus=int(pool.total_gpus), precision=precision,
            tokens_per_s_per_gpu=float(per_gpu[i]), tokens_per_s_per_user=float(1e3 / tpot[i]),
            ttft_ms=float(ttft[i]), tpot_ms=float(tpot[i]),
            requests_per_s=float(requests[i]), concurrency=round(float(total[i])),
            meets=bool(meets[i]), pool=pool,
            detail={"decode_step_ms": float(ph.decode_step.total[i] * 1e3),
                    "mixed_step_ms": float(ph.mixed_step.total[i] * 1e3),
                    "weights_gib": float(ev.memory.weights_gib[i]), "kv_cache_gib": float(ev.memory.kv_gib[i]),
                    "max_batch_per_rank": float(ev.memory.max_batch[i]),
                    "experts_ms": float(ph.decode_step.experts[i] * 1e3),
                    "moe_comm_ms": float(ph.decode_step.moe_comm[i] * 1e3),
                    "attention_ms": float(ph.decode_step.attention[i] * 1e3)})
    found = Found(per_gpu=per_gpu[sel], per_user=1e3 / tpot[sel], gpus=(big.gpus * big.workers)[sel],
                  meets=meets[sel], ttft_ms=ttft[sel], tpot_ms=tpot[sel], build=build)
    return found, len(big)


def search_disaggregated(model: ModelSpec, cluster: ClusterSpec, engine: Engine, precision: Precision, gpus: int,
                         traffic: Traffic, targets: Targets, *, rate: float | None = None, max_pp: int = 1,
                         redundant: tuple[int, ...] = (0,), chunk: int | None = None
                         ) -> tuple[Found | None, int]:
    """Disaggregated deployments within `gpus`: prefill layout × decode layout × decode batch × decode workers,
    with the prefill workers that match the decode pool's rate (plus headroom)."""
    k = float(chunk or engine.default_chunk_tokens(cluster.gpu))
    isl, osl, prompt = (float(traffic.isl[0]), float(traffic.osl[0]), float(traffic.prompt[0]))
    max_isl, max_osl = (float(traffic.peak[0][0]), float(traffic.peak[1][0]))
    sizes = [s for s in worker_sizes(cluster, gpus) if s < gpus]
    pre_pools = [p for s in sizes for p in worker_layouts(model, cluster, engine, precision, s, max_pp=max_pp,
                                                          redundant=redundant)]
    dec_pools = [p for s in sizes for p in worker_layouts(model, cluster, engine, precision, s, max_pp=max_pp,
                                                          redundant=redundant)]
    if not pre_pools or not dec_pools:
        return None, 0
    # --- prefill: one evaluation per layout
    p_lay = PoolArrays.from_pools(pre_pools)
    ones_p = np.ones(len(p_lay))
    p_mem = serving_memory(model, cluster, engine, precision, p_lay, k, isl * ones_p, peak_tokens=max_isl)
    pre = StepModel(model, cluster, engine.prefill_pool(), precision, p_lay)
    service = prefill_service(pre, isl * ones_p, prompt * ones_p, k, p_lay.batch)
    p_fits = (p_mem.max_batch >= service.prompts) & p_mem.fits
    # --- decode: one evaluation per layout and batch
    grid = np.array(RANK_CONCURRENCY, float)
    d_idx = np.repeat(np.arange(len(dec_pools)), len(grid))
    batch = np.tile(grid, len(dec_pools))
    d_lay = dataclasses.replace(PoolArrays.from_pools(dec_pools).take(d_idx), batch=batch)
    ones_d = np.ones(len(d_lay))
    d_mem = serving_memory(model, cluster, engine, precision, d_lay, k,
                           resident_tokens(engine, isl * ones_d, osl * ones_d), peak_tokens=max_isl + max_osl,
                           mtp=traffic.mtp > 0)
    dec = StepModel(model, cluster, engine, precision, d_lay)
    step, tpot, decode_time = decode_state(dec, batch, isl * ones_d, osl * ones_d, traffic.spec,
                                           traffic.tokens_per_step)
    d_fits = (d_mem.max_batch >= batch) & d_mem.fits
    per_worker_rate = d_lay.dp * batch / decode_time  # requests/s one decode worker emits at this batch
    # --- combinations: decode candidate × decode workers × prefill layout × headroom, within the GPUs
    p_keep = np.flatnonzero(p_fits)
    d_gpus = d_lay.gpus
    if rate is None:
        parts = []
        for size in np.unique(d_gpus):
            cand = np.flatnonzero(d_fits & (d_gpus == size))
            n = np.arange(1.0, gpus // size + 1)
            parts.append(np.stack(np.meshgrid(cand, n, p_keep, PREFILL_HEADROOM, indexing="ij"), -1).reshape(-1, 4))
        combos = np.concatenate(parts) if parts else np.zeros((0, 4))
        di, dw, pi, extra = (combos[:, 0].astype(int), combos[:, 1], combos[:, 2].astype(int), combos[:, 3])
        demand = dw * per_worker_rate[di]
    else:
        combos = np.stack(np.meshgrid(np.flatnonzero(d_fits), p_keep, PREFILL_HEADROOM, indexing="ij"),
                          -1).reshape(-1, 3)
        di, pi, extra = combos[:, 0].astype(int), combos[:, 1].astype(int), combos[:, 2]
        demand = np.full(len(di), float(rate))
        dw = np.ceil(demand / per_worker_rate[di])
    evaluated = len(di)
    pw = matched_workers(demand, p_lay.dp[pi] * service.capacity[pi], extra)
    used = pw * p_lay.gpus[pi] + dw * d_gpus[di]
    keep = (used <= gpus) & (pw >= 1)
    di, pi, dw, pw, demand, used = di[keep], pi[keep], dw[keep], pw[keep], demand[keep], used[keep]
    # Each combination's KV transfer, as serve explain costs it (its workers set whether the pools share a domain).
    xfer = kv_transfer_time(model, cluster, precision.kv_cache, isl, dataclasses.replace(p_lay.take(pi), workers=pw),
                            dataclasses.replace(d_lay.take(di), workers=dw))
    slots = pw * p_lay.dp[pi] * service.prompts[pi]
    # The closed loop's bursts reach the prefill pool as disaggregated() has them, at the requests in flight the
    # TTFT itself sets (Little's law), so that the plan and its reproducing `serve explain` agree.
    chosen = service.take(pi)
    share = burst_share(engine.knobs.pool_burst, rate is not None)
    settled, ride = settled_first_token(engine.knobs.request_ms, chosen, pw * p_lay.dp[pi], share, demand,
                                        decode_time[di], slots, xfer)
    ttft = settled * 1e3
    tp_ms = tpot[di] * 1e3
    light = light_first_token(engine.knobs.request_ms, chosen.alone, xfer)  # one prompt alone, an idle pool
    in_flight = demand * (ttft / 1e3 + decode_time[di])
    meets = _meets(targets, ttft, tp_ms) & np.isfinite(ttft)
    per_gpu = demand * osl / used

    def build(j: int) -> Candidate:
        pb = pre_pools[int(pi[j])]
        db = dec_pools[int(d_idx[di[j]])]
        prefill = Pool(tp=pb.tp, pp=pb.pp, dp=pb.dp, moe_tp=pb.moe_tp, moe_ep=pb.moe_ep, workers=int(pw[j]),
                       redundant_experts=pb.redundant_experts)
        decode = Pool(tp=db.tp, pp=db.pp, dp=db.dp, moe_tp=db.moe_tp, moe_ep=db.moe_ep, workers=int(dw[j]),
                      batch=int(batch[di[j]]), redundant_experts=db.redundant_experts)
        # The requests in flight rounded down: one more than the loop holds at this rate would queue for
        # 1/throughput seconds, which the reproducing `serve explain` would then charge.
        return Candidate(
            mode="disaggregated", gpus=int(used[j]), precision=precision,
            tokens_per_s_per_gpu=float(per_gpu[j]), tokens_per_s_per_user=float(1e3 / tp_ms[j]),
            ttft_ms=float(ttft[j]), tpot_ms=float(tp_ms[j]), requests_per_s=float(demand[j]),
            concurrency=max(1, int(in_flight[j])), meets=bool(meets[j]), prefill=prefill, decode=decode,
            detail={"prefill_ms": float(ride[j] * 1e3), "kv_transfer_ms": float(xfer[j] * 1e3),
                    "prefill_utilisation": float(demand[j] / (pw[j] * p_lay.dp[pi[j]] * chosen.capacity[j])),
                    "prefill_slots": float(slots[j]),
                    "decode_step_ms": float(step.total[di[j]] * 1e3),
                    "experts_ms": float(step.experts[di[j]] * 1e3), "moe_comm_ms": float(step.moe_comm[di[j]] * 1e3),
                    "attention_ms": float(step.attention[di[j]] * 1e3),
                    "light_ttft_ms": float(light[j] * 1e3)})
    found = Found(per_gpu=per_gpu, per_user=1e3 / tp_ms, gpus=used, meets=meets, ttft_ms=ttft, tpot_ms=tp_ms,
                  build=build)
    return found, evaluated


def pareto_indices(per_gpu: np.ndarray, per_user: np.ndarray) -> np.ndarray:
    """Indices of the deployments no other beats on both tokens/s per GPU and tokens/s per user, fastest per
    user first."""
    order = np.lexsort((-per_gpu, -per_user))
    best = np.maximum.accumulate(per_gpu[order])
    keep = np.concatenate([[True], best[1:] > best[:-1]]) & (per_gpu[order] >= best)
    return order[keep]


def ranking(meets: np.ndarray, per_gpu: np.ndarray, gpus: np.ndarray, per_user: np.ndarray,
            top: int) -> np.ndarray:
    """The `top` best, best first: meeting the targets, then tokens/s per GPU, then fewer GPUs, then tokens/s
    per user (the candidates past the top are never ordered)."""
    score = np.where(meets, per_gpu, per_gpu - np.inf)
    pool = np.flatnonzero(meets) if meets.any() else np.arange(len(meets))
    if len(pool) > 4 * top:
        cut = np.partition(score[pool], len(pool) - 4 * top)[len(pool) - 4 * top]
        pool = pool[score[pool] >= cut]
    order = pool[np.lexsort((-per_user[pool], gpus[pool], -np.round(per_gpu[pool], 6)))]
    return order[:top]


@dataclass(frozen=True, slots=True)
class SearchResult:
    best: list[Candidate]
    """The best deployments, best first (up to `top`)."""
    best_per_mode: dict[str, Candidate]
    """The best deployment of each mode searched."""
    pareto: list[Candidate]
    """The Pareto front of tokens/s per GPU against tokens/s per user (all deployments, targets or not)."""
    feasible: int
    """Deployments that fit in memory."""
    meeting: int
    """Of those, deployments that meet the targets."""
    evaluated: int
    seconds: float
    best_ttft_ms: float
    best_tpot_ms: float


def search(model: ModelSpec, cluster: ClusterSpec, engine: Engine, precisions: list[Precision], gpus: int,
           traffic: Traffic, targets: Targets, *, modes: tuple[str, ...] = ("aggregated", "disaggregated"),
           concurrency: int | None = None, rate: float | None = None, max_pp: int = 1,
           redundant: tuple[int, ...] = (0,), chunk: int | None = None, top: int = 5) -> SearchResult:
    """Every deployment of `modes` × `precisions` on `gpus` GPUs; NoFeasiblePlanError when none fits."""
    t0 = time.perf_counter()
    batches: list[tuple[str, Found]] = []
    evaluated = 0
    for precision, mode in itertools.product(precisions, modes):
        if mode == "aggregated":
            found, n = search_aggregated(model, cluster, engine, precision, gpus, traffic, targets,
                                         concurrency=concurrency, rate=rate, max_pp=max_pp, redundant=redundant,
                                         chunk=chunk)
        else:
            found, n = search_disaggregated(model, cluster, engine, precision, gpus, traffic, targets, rate=rate,
                                            max_pp=max_pp, redundant=redundant, chunk=chunk)
        evaluated += n
        if found is not None and len(found):
            batches.append((mode, found))
    if not batches:
        raise NoFeasiblePlanError(f"no deployment of {model.name} fits {gpus}× {cluster.name}: the weights and "
                                  "one request's KV cache exceed the memory of every layout searched; more GPUs "
                                  "or 4/8-bit weights and KV cache would relax it")
    cat = {f: np.concatenate([getattr(b, f) for _, b in batches]) for f in ("per_gpu", "per_user", "gpus", "meets",
                                                                          "ttft_ms", "tpot_ms")}
    owner = np.concatenate([np.full(len(b), i) for i, (_, b) in enumerate(batches)])
    local = np.concatenate([np.arange(len(b)) for _, b in batches])

    def build(i: int) -> Candidate:
        return batches[int(owner[i])][1].build(int(local[i]))

    order = ranking(cat["meets"], cat["per_gpu"], cat["gpus"], cat["per_user"], top)
    per_mode = {}
    for mode in modes:
        sel = np.flatnonzero(np.isin(owner, [k for k, (m, _) in enumerate(batches) if m == mode]))
        if len(sel):
            mine = sel[ranking(cat["meets"][sel], cat["per_gpu"][sel], cat["gpus"][sel], cat["per_user"][sel], 1)]
            per_mode[mode] = build(int(mine[0]))
    return SearchResult(best=[build(int(i)) for i in order[:top]], best_per_mode=per_mode,
                        pareto=[build(int(i)) for i in pareto_indices(cat["per_gpu"], cat["per_user"])],
                        feasible=len(cat["meets"]), meeting=int(cat["meets"].sum()), evaluated=evaluated,
                        seconds=time.perf_counter() - t0, best_ttft_ms=float(cat["ttft_ms"].min()),
                        best_tpot_ms=float(cat["tpot_ms"].min()))


def binding_constraint(result: SearchResult, targets: Targets) -> str:
    """Why nothing meets the targets: which target no deployment reaches, its best value, and what relaxes it."""
    best_ttft, best_tpot = result.best_ttft_ms, result.best_tpot_ms
    parts = []
    if best_ttft > targets.ttft_ms:
        parts.append(f"TTFT: the fastest deployment takes {best_ttft:,.0f} ms against {targets.ttft_ms:,.0f} ms "
                     "(a shorter prompt, prefix-cache hits, more or wider prefill workers would relax it)")
    if best_tpot > targets.tpot_ms:
        parts.append(f"TPOT: the fastest deployment takes {best_tpot:,.1f} ms against {targets.tpot_ms:,.1f} ms "
                     "(more tensor parallelism per worker, fewer requests in flight, fp8/fp4 weights or a faster GPU "
                     "would relax it)")
    if not parts:
        parts.append("no single deployment meets both targets together: each is met alone; relax one of them")
    return "; ".join(parts)


def check_targets(targets: Targets) -> None:
    for name, value in (("ttft_ms", targets.ttft_ms), ("tpot_ms", targets.tpot_ms)):
        if not value > 0:
            raise ParplanError(f"--{name.replace('_', '-')} must be > 0, got {value}")
