"""Disaggregated serving: a prefill pool and a decode pool, the KV cache moving from one to the other.

A request is prefilled by one prefill attention rank, in steps that carry the prompts of its burst that reach
the rank with it (up to k per step, as many as the token budget holds),
its KV cache travels to a decode rank (each prefill GPU sends its shard over its own link: NVLink inside one
scale-up domain, its NIC otherwise, as NIXL and Mooncake do), and the decode rank generates the rest without
prefill interference. In a closed loop the two pools form a two-station network: throughput is the smallest of
what the prefill pool can prefill, what the decode slots can carry, and what the requests in flight allow
(Little's law at the light-load latency); requests beyond what the pools absorb queue, which shows in TTFT.
Requests that finish together are replaced together, as in the aggregated loop (batching.burst_size, with the
engine's pool_burst share: the pool takes the first-token requests of many decode ranks): the burst reaches the
prefill pool at once and is prefilled in rounds of the pool's slots, first come, first served (burst_wait).
The decode batch and TPOT are solved together (TPOT grows with the batch the throughput puts on each rank).
This is the rate matching of TensorRT-LLM's disaggregated methodology (``reference/serving.md`` §1.13).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.serving.batching import burst_share, burst_size, prefill_steps
from parplan.serving.kvcache import gpu_sequence_bytes
from parplan.serving.layout import PoolArrays
from parplan.serving.step import StepModel, StepTime

BATCH_GRID = (32, 16)
"""Decode batches at which the batch ↔ TPOT balance is evaluated, each round one vectorised step: geometric
from 10⁻⁴ of the largest possible batch to it, then inside the bracket found; the root is interpolated in the
last bracket (neighbours 1.35 apart, then 1.02)."""


def kv_transfer_time(model: ModelSpec, cluster: ClusterSpec, kv_dtype: str, tokens: np.ndarray,
                     prefill: PoolArrays, decode: PoolArrays) -> np.ndarray:
    """Seconds to move one request's KV cache of `tokens` from its prefill rank to its decode rank: the larger of
    what one prefill GPU sends and one decode GPU receives, over NVLink when both pools fit one scale-up domain,
    else over the NIC, plus one hop's latency."""
    send = gpu_sequence_bytes(model, kv_dtype, tokens, prefill.tp, prefill.pp)
    recv = gpu_sequence_bytes(model, kv_dtype, tokens, decode.tp, decode.pp)
    together = prefill.gpus * prefill.workers + decode.gpus * decode.workers
    return transfer_seconds(cluster, np.maximum(send, recv), together)


def transfer_seconds(cluster: ClusterSpec, nbytes: np.ndarray, together: np.ndarray) -> np.ndarray:
    """One transfer of `nbytes` per GPU between the pools: NVLink when all `together` GPUs share one scale-up
    domain, the NIC otherwise (its measured bus bandwidth and one hop's latency)."""
    inside = together <= cluster.scaleup_domain
    bw = np.where(inside, cluster.scaleup.busbw_gbps, cluster.scaleout.busbw_gbps) * 1e9
    hop = np.where(inside, cluster.scaleup.ring_step_us, cluster.scaleout.ring_step_us) * 1e-6
    return hop + nbytes / bw


def contention_wait(rate: np.ndarray, service: np.ndarray, servers: np.ndarray) -> np.ndarray:
    """Mean wait of independent arrivals at `servers` deterministic servers of `service` seconds (M/D/c):
    Sakasegawa's M/M/c approximation ρ^(√(2(c+1)) − 1) / (c(1 − ρ))·S, halved for deterministic service
    (Allen-Cunneen's (c_a² + c_s²)/2 with c_s = 0); unbounded as the load ρ = λS/c reaches 1."""
    rho = np.minimum(rate * service / servers, 0.999)
    return 0.5 * rho ** (np.sqrt(2.0 * (servers + 1.0)) - 1.0) / (servers * (1.0 - rho)) * service


@dataclass(frozen=True, slots=True)
class PrefillService:
    """What one prefill rank does for a request (arrays over prefill layouts)."""

    latency: np.ndarray
    """Seconds from a prompt's first prefill step to its last when each step is full (`prompts` prompts)."""
    alone: np.ndarray
    """Seconds from a prompt's first prefill step to its last on an idle rank, the prompt alone in its steps."""
    prompts: np.ndarray
    """Prompts one prefill step carries (as many as the token budget holds, at most the pool's batch)."""
    capacity: np.ndarray
    """Prompts one rank prefills per second."""
    step: StepTime
    """A full step."""

    def ride(self, together: np.ndarray) -> np.ndarray:
        """Seconds a prompt's prefill takes when `together` prompts reach its rank at once: its steps carry them
        all, up to a full step (more wait for the next round: burst_wait). A step's time grows about linearly
        with its prompts (the same weights stream once, each prompt adds its tokens' work), so it is
        interpolated between the prompt alone and a full step."""
        share = np.clip((together - 1.0) / np.maximum(self.prompts - 1.0, 1e-9), 0.0, 1.0)
        return self.alone + share * (self.latency - self.alone)

    def take(self, idx: np.ndarray) -> PrefillService:
        """The service of the layouts at `idx`."""
        return PrefillService(latency=self.latency[idx], alone=self.alone[idx], prompts=self.prompts[idx],
                              capacity=self.capacity[idx], step=self.step.take(idx))


def prefill_service(pre: StepModel, isl: np.ndarray, prompt: np.ndarray, chunk: float,
                    prefill_batch: np.ndarray) -> PrefillService:
    """A prefill rank's latency and capacity: k prompts per step (the budget's worth, at most prefill_batch),
    a prompt longer than the budget over ⌈P / K⌉ steps when the engine chunks; and one prompt's latency alone."""
    n_p = prefill_steps(prompt, np.full_like(prompt, chunk), pre.engine.chunked_prefill)
    per_step = np.where(prompt >= chunk, 1.0, np.maximum(1.0, np.floor(chunk / prompt)))
    k = np.minimum(per_step, prefill_batch)
    pp = pre.lay.pp
    keys = (isl - prompt) + prompt / 2.0
    step = pre.step(0.0, 0.0, np.where(n_p > 1, chunk, k * prompt) / pp, keys, k / pp, mixed=True)
    alone = pre.step(0.0, 0.0, np.where(n_p > 1, chunk, prompt) / pp, keys, 1.0 / pp, mixed=True)
    latency = n_p * step.total
    return PrefillService(latency=latency, alone=n_p * alone.total, prompts=k, capacity=k / latency, step=step)


def decode_state(dec: StepModel, batch: np.ndarray, isl: np.ndarray, osl: np.ndarray, spec: float,
                 tokens_per_step: float) -> tuple[StepTime, np.ndarray, np.ndarray]:
    """(step, TPOT, seconds a request spends decoding) of a decode rank running `batch` sequences."""
    step = dec.step(batch / dec.lay.pp, isl + (osl - 1) / 2.0, 0.0, 0.0, 0.0, spec=spec)
    tpot = step.total / tokens_per_step
    return step, tpot, np.maximum(osl - 1, 0) * tpot


FULL_BATCH_TOLERANCE = 1e-9
"""Relative shortfall of the balance at the top of the decode batch bracket still read as a full batch: the
search's candidates put exactly that batch on each decode rank, which the balance returns to within its
closed-loop bisection (2⁻⁴⁰ ≈ 1e-12 relative; 7e-16 found at a batch of 128)."""

CLOSED_LOOP_ROUNDS = 40
"""Bisection steps on the closed loop's throughput (relative precision 2⁻⁴⁰ of its bound)."""


def closed_loop_rate(concurrency: np.ndarray, fixed: np.ndarray, latency: np.ndarray, slots: np.ndarray,
                     cap: np.ndarray) -> np.ndarray:
    """Requests/s a closed loop of `concurrency` requests sustains when each spends `fixed` seconds plus the
    wait for one of `slots` prefill slots of `latency` seconds (contention_wait at that throughput), at most
    `cap`: the X with X·(fixed + wait(X)) = C (Little's law), by bisection (the left side grows with X)."""
    hi = np.minimum(concurrency / fixed, cap)
    lo = np.zeros_like(hi)
    for _ in range(CLOSED_LOOP_ROUNDS):
        mid = 0.5 * (lo + hi)
        over = mid * (fixed + contention_wait(mid, latency, slots)) > concurrency
        lo, hi = np.where(over, lo, mid), np.where(over, mid, hi)
    full = hi * (fixed + contention_wait(hi, latency, slots)) <= concurrency
    return np.where(full, hi, lo)


def light_first_token(request_ms: float, ride: np.ndarray, kv_transfer: np.ndarray) -> np.ndarray:
    """TTFT on an idle prefill pool: the request's time outside the steps (the engine's request_ms), its own
    prefill (`ride`: PrefillService.ride) and its KV transfer."""
    return request_ms * 1e-3 + ride + kv_transfer


def first_token(request_ms: float, ride: np.ndarray, latency: np.ndarray, slots: np.ndarray,
                kv_transfer: np.ndarray, throughput: np.ndarray) -> np.ndarray:
    """TTFT without a closed-loop queue: light_first_token, and the wait for one of the prefill pool's `slots`
    (ranks × prompts per step, each full step `latency`; M/D/c at the throughput)."""
    return light_first_token(request_ms, ride, kv_transfer) + contention_wait(throughput, latency, slots)


def burst_wait(share: float, in_flight: np.ndarray, slots: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Seconds a request waits for the rounds of its burst before its own: burst_size(share, in_flight) prompts
    reach the prefill pool together and are taken `slots` at a time, first come, first served, each round one
    prefill `latency`: (rounds − 1)/2 rounds on average."""
    rounds = burst_size(share, in_flight) / np.maximum(slots, 1e-9)
    return np.maximum(rounds - 1.0, 0.0) / 2.0 * latency


SETTLE_ROUNDS = 4
"""Rounds of settled_first_token's fixed point on the prompt's own prefill, which grows with t up to a full step
and stops there: 4 rounds settle t to within 1e-4 of itself (4 against 200 rounds on the 89 disaggregated Pareto
candidates of four searches, DeepSeek-V3, Llama 3.1 70B and Qwen3-30B-A3B at 1,024/1,024: at most 2.5e-5)."""


def settled_first_token(request_ms: float, service: PrefillService, ranks: np.ndarray, share: float,
                        throughput: np.ndarray, decode_time: np.ndarray, slots: np.ndarray,
                        kv_transfer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(t, ride): the TTFT t a closed loop settles at when it completes `throughput` requests/s, with
    throughput·(t + decode_time) requests in flight (Little's law), and the prompt's own prefill in it.

    t = own + burst_wait, own = first_token with the prompt's prefill (its burst spread over the `ranks` prefill
    ranks: PrefillService.ride). Once a burst outgrows the slots, burst_wait grows linearly in the requests in
    flight, by a = share·throughput·latency / (2·slots) per second of t, so t = own + w / (1 − a), w the wait at
    t = own (nothing where the bursts fit the slots there); as a nears 1 the bursts grow as fast as the pool
    drains them, and t, like contention_wait, is held at a = 0.999. The prompt's prefill grows with t, so t is
    settled by SETTLE_ROUNDS rounds of the same."""
    a = np.minimum(share * throughput * service.latency / (2.0 * np.maximum(slots, 1e-9)), 0.999)
    ride = service.alone
    for _ in range(SETTLE_ROUNDS):
        own = first_token(request_ms, ride, service.latency, slots, kv_transfer, throughput)
        t = own + burst_wait(share, throughput * (own + decode_time), slots, service.latency) / (1.0 - a)
        ride = service.ride(burst_size(share, throughput * (t + decode_time)) / ranks)
    own = first_token(request_ms, ride, service.latency, slots, kv_transfer, throughput)
    return own + burst_wait(share, throughput * (own + decode_time), slots, service.latency) / (1.0 - a), ride


@dataclass(frozen=True, slots=True)
class DisaggResult:
    """Steady state of a disaggregated deployment (arrays), seconds unless noted."""

    ttft: np.ndarray
    tpot: np.ndarray
    throughput: np.ndarray
    """Requests completed per second by the whole deployment."""
    decode_batch: np.ndarray
    """Sequences per decode rank."""
    prefill_utilisation: np.ndarray
    """Share of the prefill pool's capacity in use."""
    prefill_latency: np.ndarray
    """A prompt's prefill on its prefill rank, beside the prompts of its burst that share its steps."""
    kv_transfer: np.ndarray
    queue: np.ndarray
    prefill_step: StepTime
    decode_step: StepTime


def disaggregated(pre: StepModel, dec: StepModel, *, isl: np.ndarray, osl: np.ndarray, prompt: np.ndarray,
                  concurrency: np.ndarray, decode_slots: np.ndarray, prefill_batch: np.ndarray, chunk: float,
                  kv_transfer: np.ndarray, spec: float = 1.0, tokens_per_step: float = 1.0,
                  open_loop: bool = False) -> DisaggResult:
    """Closed-loop steady state with `concurrency` requests over the whole deployment (`open_loop`: the requests
    in flight of an arrival rate, which arrive one at a time: no bursts).

    decode_slots: requests one decode rank holds at most (its batch cap, or its KV cache); prefill_batch: most
    prompts one prefill step takes (inf: as many as the token budget holds). Throughput is the smallest of what
    the requests in flight allow at the light-load latency, what the prefill pool prefills and what the decode
    slots carry; the decode batch it puts on each rank sets TPOT, the two solved together (the batch's root)."""
    p_lay, d_lay = pre.lay, dec.lay
    service = prefill_service(pre, isl, prompt, chunk, prefill_batch)
    prefill_capacity = p_lay.workers * p_lay.dp * service.capacity
    decode_ranks = d_lay.workers * d_lay.dp
    slots = p_lay.workers * p_lay.dp * service.prompts
    # Requests that finish together are replaced together: a burst arrives at the prefill pool, spread over its
    # ranks, whose steps carry its prompts (ride), `slots` prompts per round; a request waits for the rounds
    # before its own, (rounds − 1)/2 on average.
    share = burst_share(pre.engine.knobs.pool_burst, open_loop)
    ride = service.ride(burst_size(share, concurrency) / (p_lay.workers * p_lay.dp))
    waited = burst_wait(share, concurrency, slots, service.latency)
    light = light_first_token(pre.engine.knobs.request_ms, ride, kv_transfer) + waited

    def balance(b: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(throughput, batch it puts on a decode rank) when each decode rank runs b sequences; arrays of
        the deployments' shape with a trailing axis of n batches."""
        def ext(x: np.ndarray) -> np.ndarray:
            return np.repeat(col(x), n, axis=1).ravel()
        rows = np.broadcast_to(np.arange(len(d_lay)), np.shape(light))
        sub = StepModel(dec.model, dec.cluster, dec.engine, dec.precision, d_lay.take(np.repeat(rows, n)))
        _, _, t_dec = decode_state(sub, b.ravel(), ext(isl), ext(osl), spec, tokens_per_step)
        t_dec = t_dec.reshape(-1, n)
        cap = np.minimum(col(prefill_capacity), col(decode_ranks * decode_slots) / np.maximum(t_dec, 1e-12))
        x = closed_loop_rate(col(concurrency), col(light) + t_dec, col(service.latency), col(slots), cap)
        return x, np.minimum(col(decode_slots), x * t_dec / col(decode_ranks))

    def col(x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(x, dtype=float), np.shape(light)).reshape(-1, 1)

    # The batch b a decode rank settles at is where the balance returns it: g(b) − b mostly falls as b grows
    # (TPOT grows with b), from above 0 at a tiny batch. Evaluate g on a geometric grid in one step, interpolate
    # the root in log b, and evaluate there. Beside a nearly saturated prefill pool g(b) − b can come back to 0
    # at the largest batch: with more requests in flight than decode slots, the slots' cap binds and each slot
    # is refilled as it empties, while at a smaller batch the faster decode sends requests back sooner to queue
    # at the prefill pool, a second root. Where g keeps the largest batch full to within rounding
    # (FULL_BATCH_TOLERANCE), the full batch is taken, as the search's candidates have it.
    top = np.maximum(np.minimum(decode_slots, concurrency / decode_ranks), 1e-9) * np.ones_like(light)
    lo, hi = col(top)[:, 0] * 1e-4, col(top)[:, 0]
    for points in BATCH_GRID:  # a coarse grid over the whole range, then a fine one inside the bracket
        grid = np.exp(np.log(lo)[:, None] + np.linspace(0.0, 1.0, points)[None, :] * np.log(hi / lo)[:, None])
        _, g = balance(grid, points)
        gap = g - grid
        above = gap > 0
        k = np.clip(np.where(above.any(axis=1), points - 1 - np.argmax(above[:, ::-1], axis=1), 0), 0, points - 2)
        rows = np.arange(len(grid))
        lo, hi, f_lo, f_hi = grid[rows, k], grid[rows, k + 1], gap[rows, k], gap[rows, k + 1]
        settled = gap[:, -1] >= -FULL_BATCH_TOLERANCE * grid[:, -1]  # even the largest batch is kept full
        lo, hi = np.where(settled, grid[:, -1], lo), np.where(settled, grid[:, -1], hi)
    w = np.where(f_lo > f_hi, np.clip(f_lo / np.maximum(f_lo - f_hi, 1e-30), 0.0, 1.0), 1.0)
    # exp(log b) rounds the largest batch a few ulps above it, past the decode slots and the CUDA-graph batch
    batch = np.minimum(np.exp(np.log(lo) + w * (np.log(hi) - np.log(lo))).reshape(np.shape(light)), top)
    step, tpot, decode_time = decode_state(dec, batch, isl, osl, spec, tokens_per_step)
    throughput = closed_loop_rate(concurrency, light + decode_time, service.latency, slots,
                                  np.minimum(prefill_capacity, decode_ranks * decode_slots / np.maximum(decode_time,
                                                                                                      1e-12)))
    own = first_token(pre.engine.knobs.request_ms, ride, service.latency, slots, kv_transfer, throughput) + waited
    in_flight_time = np.divide(concurrency, throughput, out=np.full_like(throughput, np.inf), where=throughput > 0)
    ttft = np.maximum(own, in_flight_time - decode_time)
    return DisaggResult(ttft=ttft, tpot=tpot, throughput=throughput, decode_batch=batch,
                        prefill_utilisation=throughput / prefill_capacity, prefill_latency=ride,
                        kv_transfer=kv_transfer, queue=ttft - light, prefill_step=service.step, decode_step=step)
