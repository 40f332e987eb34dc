"""Evaluate serving deployments: TTFT, TPOT, request latency, tokens/s per GPU and per user, memory per GPU.

`evaluate_aggregated` and `evaluate_disaggregated` take layouts and workloads as arrays (one entry per
deployment) and are what `serve plan` and `validate --serving` call; `serve_evaluate` runs the same functions
on one deployment and returns a `ServingEstimate`, which `serve explain` prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parplan.hardware import load_cluster
from parplan.hardware.spec import ClusterSpec
from parplan.models import load_model
from parplan.models.spec import ModelSpec
from parplan.serving.batching import PhaseResult, aggregated
from parplan.serving.disagg import DisaggResult, disaggregated, kv_transfer_time
from parplan.serving.engines import Engine, load_engine
from parplan.serving.layout import PoolArrays
from parplan.serving.memory import ServingMemory, resident_tokens, serving_memory
from parplan.serving.spec import Deployment, Precision, Workload, check_deployment
from parplan.serving.step import StepModel


@dataclass(frozen=True, slots=True)
class Traffic:
    """Workload arrays (one entry per deployment)."""

    isl: np.ndarray
    """Input tokens of the average request (Workload.mean_isl)."""
    osl: np.ndarray
    """Output tokens of the average request (Workload.mean_osl)."""
    prompt: np.ndarray
    """Tokens the average request prefills (isl less the prefix-cache hits)."""
    concurrency: np.ndarray
    """Requests in flight over the whole deployment."""
    mtp: int = 0
    acceptance: float = 0.0
    longest: tuple[np.ndarray, np.ndarray] | None = None
    """Input and output tokens of the longest request (Workload.isl and osl: a client draws none longer); None:
    every request has isl and osl tokens."""

    @classmethod
    def of(cls, workload: Workload) -> Traffic:
        return cls.of_many([workload])

    @classmethod
    def of_many(cls, workloads: Sequence[Workload]) -> Traffic:
        """One entry per workload, each served at its mean lengths; they share their speculative decoding."""
        spec = {(w.mtp, w.acceptance) for w in workloads}
        if len(spec) != 1:
            raise ValueError(f"one speculative decoding per Traffic, got {sorted(spec)}")
        (mtp, acceptance), = spec

        def column(value: Callable[[Workload], float]) -> np.ndarray:
            return np.array([value(w) for w in workloads], dtype=float)

        return cls(isl=column(lambda w: w.mean_isl), osl=column(lambda w: w.mean_osl),
                   prompt=column(lambda w: w.prefill_tokens), concurrency=column(lambda w: w.concurrency or 0),
                   mtp=mtp, acceptance=acceptance, longest=(column(lambda w: w.isl), column(lambda w: w.osl)))

    @property
    def osl_spread(self) -> np.ndarray | float:
        """Output tokens between the shortest and the longest request (a client's uniform draw spans twice the
        distance from its mean to the longest): requests that start together finish over that many tokens."""
        return 0.0 if self.longest is None else 2.0 * np.maximum(self.longest[1] - self.osl, 0.0)

    def part(self, start: int, stop: int, size: int) -> Traffic:
        """Entries start:stop of a workload of `size` deployments (a one-entry workload serves them all)."""
        def cut(x: np.ndarray) -> np.ndarray:
            return np.broadcast_to(x, (size,))[start:stop]
        longest = None if self.longest is None else (cut(self.longest[0]), cut(self.longest[1]))
        return dataclasses.replace(self, isl=cut(self.isl), osl=cut(self.osl), prompt=cut(self.prompt),
                                   concurrency=cut(self.concurrency), longest=longest)

    @property
    def peak(self) -> tuple[np.ndarray, np.ndarray]:
        """Input and output tokens of the longest request: the KV cache it needs at its last token decides
        whether a GPU can serve the workload at all (the mean lengths decide how many requests it holds)."""
        return (self.isl, self.osl) if self.longest is None else self.longest

    @property
    def spec(self) -> float:
        """Tokens a decoding sequence adds to a step: itself and its drafts."""
        return 1.0 + self.mtp

    @property
    def tokens_per_step(self) -> float:
        return float(sum(self.acceptance**i for i in range(self.mtp + 1)))


CHUNK = 16_384
"""Deployments per numpy pass: arrays this long stay in the CPU caches, so many deployments run as passes of
this size (a single pass over 100,000 takes twice the CPU time; benchmarks/serving_speed.py)."""


def _joined(parts: list[Any], sizes: list[int]) -> Any:
    """The evaluations of consecutive slices joined into one: per-deployment arrays concatenated, nested
    dataclasses joined field by field, values common to all slices kept."""
    first = parts[0]
    if dataclasses.is_dataclass(first):
        return type(first)(**{f.name: _joined([getattr(p, f.name) for p in parts], sizes)
                              for f in dataclasses.fields(first)})
    if isinstance(first, np.ndarray) and first.ndim >= 1:
        return np.concatenate([np.broadcast_to(p, (n, *np.shape(p)[1:])) for p, n in zip(parts, sizes, strict=True)])
    return first


def _in_passes(evaluate: Callable[[int, int], Any], size: int) -> Any:
    """evaluate(start, stop) over consecutive slices of at most CHUNK deployments, joined."""
    if size <= CHUNK:
        return evaluate(0, size)
    bounds = [(s, min(s + CHUNK, size)) for s in range(0, size, CHUNK)]
    return _joined([evaluate(a, b) for a, b in bounds], [b - a for a, b in bounds])


def _max_running(engine: Engine, memory: ServingMemory, lay: PoolArrays) -> np.ndarray:
    cap = np.minimum(memory.max_batch, lay.batch)
    return np.minimum(cap, engine.max_running) if engine.max_running else cap


@dataclass(frozen=True, slots=True)
class AggregatedEval:
    lay: PoolArrays
    memory: ServingMemory
    phase: PhaseResult
    request_latency: np.ndarray
    output_tok_s_per_gpu: np.ndarray
    chunk: float


def evaluate_aggregated(model: ModelSpec, cluster: ClusterSpec, engine: Engine, precision: Precision,
                        lay: PoolArrays, traffic: Traffic, chunk: float | None = None,
                        open_loop: bool = False) -> AggregatedEval:
    """Aggregated deployments: each worker's attention ranks share the concurrency evenly."""
    size = len(lay)
    if size > CHUNK:
        return _in_passes(lambda a, b: evaluate_aggregated(
            model, cluster, engine, precision, lay.take(np.arange(a, b)), traffic.part(a, b, size), chunk,
            open_loop), size)
    k = float(chunk or engine.default_chunk_tokens(cluster.gpu))
    mem = serving_memory(model, cluster, engine, precision, lay, k, resident_tokens(engine, traffic.isl, traffic.osl),
                         peak_tokens=sum(traffic.peak), mtp=traffic.mtp > 0)
    sm = StepModel(model, cluster, engine, precision, lay)
    ranks = lay.workers * lay.dp
    phase = aggregated(sm, isl=traffic.isl, osl=traffic.osl, prompt=traffic.prompt,
                       concurrency=traffic.concurrency / ranks, max_running=_max_running(engine, mem, lay), chunk=k,
                       spec=traffic.spec, tokens_per_step=traffic.tokens_per_step, open_loop=open_loop,
                       osl_spread=traffic.osl_spread)
    latency = phase.ttft + np.maximum(traffic.osl - 1, 0) * phase.tpot
    per_gpu = phase.throughput * traffic.osl / (lay.tp * lay.pp)
    return AggregatedEval(lay=lay, memory=mem, phase=phase, request_latency=latency, output_tok_s_per_gpu=per_gpu,
                          chunk=k)


@dataclass(frozen=True, slots=True)
class DisaggregatedEval:
    prefill: PoolArrays
    decode: PoolArrays
    prefill_memory: ServingMemory
    decode_memory: ServingMemory
    phase: DisaggResult
    request_latency: np.ndarray
    output_tok_s_per_gpu: np.ndarray
    chunk: float


def evaluate_disaggregated(model: ModelSpec, cluster: ClusterSpec, engine: Engine, precision: Precision,
                           prefill: PoolArrays, decode: PoolArrays, traffic: Traffic,
                           chunk: float | None = None, open_loop: bool = False) -> DisaggregatedEval:
    """Disaggregated deployments: a prefill pool and a decode pool sharing the concurrency (`open_loop`: the
    requests in flight of an arrival rate)."""
    k = float(chunk or engine.default_chunk_tokens(cluster.gpu))
    seq = resident_tokens(engine, traffic.isl, traffic.osl)
    p_mem = serving_memory(model, cluster, engine, precision, prefill, k, traffic.isl, peak_tokens=traffic.peak[0])
    d_mem = serving_memory(model, cluster, engine, precision, decode, k, seq, peak_tokens=sum(traffic.peak),
                           mtp=traffic.mtp > 0)
    xfer = kv_transfer_time(model, cluster, precision.kv_cache, traffic.isl, prefill, decode)
    slots = _max_running(engine, d_mem, decode)
    phase = disaggregated(StepModel(model, cluster, engine.prefill_pool(), precision, prefill),
                          StepModel(model, cluster, engine, precision, decode), isl=traffic.isl, osl=traffic.osl,
                          prompt=traffic.prompt, concurrency=traffic.concurrency, decode_slots=slots,
                          prefill_batch=prefill.batch, chunk=k, kv_transfer=xfer, spec=traffic.spec,
                          tokens_per_step=traffic.tokens_per_step, open_loop=open_loop)
    latency = phase.ttft + np.maximum(traffic.osl - 1, 0) * phase.tpot
    gpus = prefill.gpus * prefill.workers + decode.gpus * decode.workers
    per_gpu = phase.throughput * traffic.osl / gpus
    return DisaggregatedEval(prefill=prefill, decode=decode, prefill_memory=p_mem, decode_memory=d_mem, phase=phase,
                             request_latency=latency, output_tok_s_per_gpu=per_gpu, chunk=k)


RATE_ROUNDS = 30
"""Bisection steps on the concurrency that carries a given arrival rate (log scale, ~1e-9 relative)."""

MAX_IN_FLIGHT = 1e7
"""Largest concurrency the bisection tries: beyond it a deployment is overloaded at any rate it reaches."""


def requests_per_s(ev: AggregatedEval | DisaggregatedEval) -> np.ndarray:
    """Requests the whole deployment completes per second."""
    if isinstance(ev, AggregatedEval):
        return ev.phase.throughput * ev.lay.workers * ev.lay.dp
    return ev.phase.throughput


def for_rate(evaluate: Callable[[np.ndarray], Any], rate: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray]:
    """An open loop of `rate` requests/s as the closed loop carrying it: Little's law puts C = rate × latency
    requests in flight, and the closed loop's throughput grows with C until the deployment saturates, so the
    C whose throughput is the rate is found by bisection. Returns the evaluation there, where the rate exceeds
    what the deployment can carry at all (overloaded: the queue grows without bound), and that C."""
    lo = np.full(np.shape(rate), 1e-3)
    hi = np.full(np.shape(rate), MAX_IN_FLIGHT)
    for _ in range(RATE_ROUNDS):
        mid = np.sqrt(lo * hi)
        below = requests_per_s(evaluate(mid)) < rate
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    ev = evaluate(hi)
    return ev, requests_per_s(ev) < rate * (1 - 1e-6), hi


# ------------------------------------------------------------------------------------------- one deployment


def _memory_dict(mem: ServingMemory) -> dict[str, float]:
    w = mem.weights
    gib = 2**30
    return {
        "hbm_gib": mem.hbm_gib,
        "weights_gib": float(mem.weights_gib[0]),
        "weights_attention_gib": float(w.attention[0] / gib),
        "weights_mlp_gib": float(w.dense_mlp[0] / gib),
        "weights_experts_gib": float(w.experts[0] / gib),
        "weights_embeddings_gib": float(w.embeddings[0] / gib),
        "activations_gib": float(mem.activations_gib[0]),
        "reserved_gib": float(mem.reserved_gib[0]),
        "kv_cache_gib": float(mem.kv_gib[0]),
        "kv_per_request_gib": float(np.ravel(mem.sequence_gib)[0]),
        "kv_longest_request_gib": float(np.ravel(mem.peak_gib)[0]),
        "max_batch_per_rank": float(mem.max_batch[0]),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingEstimate:
    """Everything `serve explain` reports about one deployment (times in ms, rates per second)."""

    model: str
    cluster: str
    deployment: Deployment
    workload: Workload
    gpus: int
    ttft_ms: float
    tpot_ms: float
    request_latency_ms: float
    output_tok_s_per_gpu: float
    output_tok_s_per_user: float
    requests_per_s: float
    memory: dict[str, dict[str, float]]
    """Per pool role ('aggregated', 'prefill', 'decode'): memory per GPU."""
    steps: dict[str, dict[str, float]]
    """Per step kind: seconds by part of one step on one attention rank."""
    state: dict[str, float]
    """Steady state: batch, shares, queueing."""
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "cluster": self.cluster, "gpus": self.gpus,
            "deployment": _deployment_dict(self.deployment),
            "workload": {"isl": self.workload.isl, "osl": self.workload.osl,
                         "concurrency": self.workload.concurrency, "rate": self.workload.rate,
                         "prefix_hit": self.workload.prefix_hit, "mtp": self.workload.mtp,
                         "acceptance": self.workload.acceptance, "range_ratio": self.workload.range_ratio},
            "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "request_latency_ms": self.request_latency_ms,
            "output_tok_s_per_gpu": self.output_tok_s_per_gpu, "output_tok_s_per_user": self.output_tok_s_per_user,
            "requests_per_s": self.requests_per_s, "memory": self.memory, "steps": self.steps,
            "state": self.state, "notes": list(self.notes),
            "definitions": {"tpot": "(request latency - TTFT) / (OSL - 1), as aiperf and aiconfigurator",
                            "request_latency": "TTFT + (OSL - 1) x TPOT"},
        }


def _pool_dict(pool: Any) -> dict[str, Any]:
    return {"tp": pool.tp, "pp": pool.pp, "dp": pool.dp, "moe_tp": pool.moe_tp, "moe_ep": pool.moe_ep,
            "workers": pool.workers, "batch": pool.batch, "redundant_experts": pool.redundant_experts,
            "a2a": pool.a2a}


def _deployment_dict(d: Deployment) -> dict[str, Any]:
    out: dict[str, Any] = {"engine": d.engine, "mode": d.mode, "chunk_tokens": d.chunk_tokens,
                           "overlap_scheduler": d.overlap_scheduler, "memory_fraction": d.memory_fraction,
                           "batch_wait": None if d.batch_wait is None else {"iters": d.batch_wait.iters,
                                                                             "ratio": d.batch_wait.ratio},
                           "dp_balance": None if d.dp_balance is None else {
                               "timeout_iters": d.dp_balance.timeout_iters,
                               "batching_wait_iters": d.dp_balance.batching_wait_iters},
                           "cuda_graph_max_batch": d.cuda_graph_max_batch, "recv_interval": d.recv_interval,
                           "precision": {"gemm": d.precision.gemm, "moe": d.precision.moe,
                                         "kv_cache": d.precision.kv_cache}}
    for role in ("pool", "prefill", "decode"):
        pool = getattr(d, role)
        if pool is not None:
            out[role] = _pool_dict(pool)
    return out


def serve_evaluate(model: str | ModelSpec, cluster: str | ClusterSpec, deployment: Deployment,
                   workload: Workload) -> ServingEstimate:
    """Predict one serving deployment (the library call behind `parplan serve explain`)."""
    m = load_model(model)
    cl = load_cluster(cluster, gpus=deployment.gpus) if not isinstance(cluster, ClusterSpec) else cluster
    engine = load_engine(deployment.engine).launched(deployment)
    check_deployment(m, cl, deployment, workload, engine)
    traffic = Traffic.of(workload)
    notes: list[str] = []
    open_loop = workload.rate is not None
    if deployment.mode == "aggregated":
        lay = PoolArrays.from_pools([deployment.pool])  # type: ignore[list-item]

        def run(c: np.ndarray) -> AggregatedEval:
            return evaluate_aggregated(m, cl, engine, deployment.precision, lay, dataclasses.replace(
                traffic, concurrency=c), deployment.chunk_tokens, open_loop=open_loop)
        if open_loop:
            ev, overloaded, _ = for_rate(run, np.array([workload.rate]))
        else:
            ev, overloaded = run(traffic.concurrency), np.array([False])
        ph = ev.phase
        memory = {"aggregated": _memory_dict(ev.memory)}
        steps = {"decode": ph.decode_step.as_dict(), "mixed": ph.mixed_step.as_dict()}
        state = {"running_per_rank": float(ph.running[0]), "decode_batch_per_rank": float(ph.decode_batch[0]),
                 "mixed_step_share": float(ph.mixed_share[0]), "queue_ms": float(ph.queue[0] * 1e3),
                 "chunk_tokens": ev.chunk}
        mems = [ev.memory]
        requests = float(ph.throughput[0] * lay.workers[0] * lay.dp[0])
    else:
        p_lay = PoolArrays.from_pools([deployment.prefill])  # type: ignore[list-item]
        d_lay = PoolArrays.from_pools([deployment.decode])  # type: ignore[list-item]
        def run_d(c: np.ndarray) -> DisaggregatedEval:
            return evaluate_disaggregated(m, cl, engine, deployment.precision, p_lay, d_lay, dataclasses.replace(
                traffic, concurrency=c), deployment.chunk_tokens, open_loop=open_loop)
        if open_loop:
            ev, overloaded, _ = for_rate(run_d, np.array([workload.rate]))
        else:
            ev, overloaded = run_d(traffic.concurrency), np.array([False])
        ph = ev.phase
        memory = {"prefill": _memory_dict(ev.prefill_memory), "decode": _memory_dict(ev.decode_memory)}
        steps = {"prefill": ph.prefill_step.as_dict(), "decode": ph.decode_step.as_dict()}
        state = {"decode_batch_per_rank": float(ph.decode_batch[0]),
                 "prefill_utilisation": float(ph.prefill_utilisation[0]),
                 "prefill_latency_ms": float(ph.prefill_latency[0] * 1e3),
                 "kv_transfer_ms": float(ph.kv_transfer[0] * 1e3), "queue_ms": float(ph.queue[0] * 1e3),
                 "chunk_tokens": ev.chunk}
        mems = [ev.prefill_memory, ev.decode_memory]
        requests = float(ph.throughput[0])
    for mem, role in zip(mems, memory, strict=True):
        if not mem.fits[0] and mem.max_batch[0] >= 1:
            notes.append(f"{role}: does not fit: the longest request needs {float(mem.peak_gib[0]):.2f} GiB of KV "
                         f"cache per GPU at its last token, more than the {float(mem.kv_gib[0]):.2f} GiB left")
        elif not mem.fits[0]:
            notes.append(f"{role}: does not fit: {float(mem.weights_gib[0]):.1f} GiB of weights leave no room for "
                         f"one request's KV cache on a {mem.hbm_gib:.0f} GiB GPU")
    if overloaded[0]:
        notes.append(f"overloaded: it completes at most {requests:,.2f} requests/s, below the {workload.rate:g} "
                     "arriving, so the queue grows without bound")
    if state.get("queue_ms", 0.0) > 1.0 and not overloaded[0]:
        notes.append(f"requests queue {state['queue_ms']:.0f} ms before they are admitted")
    tpot = float(ph.tpot[0])
    ttft = np.inf if overloaded[0] else float(ph.ttft[0] * 1e3)
    latency = np.inf if overloaded[0] else float(ev.request_latency[0] * 1e3)
    return ServingEstimate(
        model=m.name, cluster=cl.name, deployment=deployment, workload=workload, gpus=deployment.gpus,
        ttft_ms=ttft, tpot_ms=tpot * 1e3, request_latency_ms=latency,
        output_tok_s_per_gpu=float(ev.output_tok_s_per_gpu[0]), output_tok_s_per_user=1.0 / tpot,
        requests_per_s=requests, memory=memory, steps=steps, state=state, notes=tuple(notes))
