"""Disaggregated serving: a prefill pool and a decode pool, the KV cache moving from one to the other.

A request is prefilled by one prefill attention rank (with k prompts per step when they fit the token budget),
its KV cache travels to a decode rank (each prefill GPU sends its shard over its own link: NVLink inside one
scale-up domain, its NIC otherwise, as NIXL and Mooncake do), and the decode rank generates the rest without
prefill interference. In a closed loop the two pools form a two-station network: throughput is the smallest of
what the prefill pool can prefill, what the decode slots can carry, and what the requests in flight allow
(Little's law at the light-load latency); requests beyond what the pools absorb queue, which shows in TTFT.
The decode batch and TPOT are solved together (TPOT grows with the batch the throughput puts on each rank).
This is the rate matching of TensorRT-LLM's disaggregated methodology (``reference/serving.md`` §1.13).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.serving.batching import prefill_steps
from parplan.serving.kvcache import gpu_sequence_bytes
from parplan.serving.layout import PoolArrays
from parplan.serving.step import StepModel, StepTime

FIXED_POINT_ROUNDS = 12
"""Damped iterations of the decode batch ↔ TPOT fixed point (the change is below 0.1% after ~8)."""


def kv_transfer_time(model: ModelSpec, cluster: ClusterSpec, kv_dtype: str, tokens: np.ndarray,
                     prefill: PoolArrays, decode: PoolArrays) -> np.ndarray:
    """Seconds to move one request's KV cache of `tokens` from its prefill rank to its decode rank: the larger of
    what one prefill GPU sends and one decode GPU receives, over NVLink when both pools fit one scale-up domain,
    else over the NIC, plus one hop's latency."""
    send = gpu_sequence_bytes(model, kv_dtype, tokens, prefill.tp, prefill.pp)
    recv = gpu_sequence_bytes(model, kv_dtype, tokens, decode.tp, decode.pp)
    together = prefill.gpus * prefill.workers + decode.gpus * decode.workers
    inside = together <= cluster.scaleup_domain
    bw = np.where(inside, cluster.scaleup.busbw_gbps, cluster.scaleout.busbw_gbps) * 1e9
    hop = np.where(inside, cluster.scaleup.ring_step_us, cluster.scaleout.ring_step_us) * 1e-6
    return hop + np.maximum(send, recv) / bw


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
    """One prompt's prefill on an idle prefill rank."""
    kv_transfer: np.ndarray
    queue: np.ndarray
    prefill_step: StepTime
    decode_step: StepTime


def disaggregated(pre: StepModel, dec: StepModel, *, isl: np.ndarray, osl: np.ndarray, prompt: np.ndarray,
                  concurrency: np.ndarray, decode_slots: np.ndarray, prefill_batch: np.ndarray, chunk: float,
                  kv_transfer: np.ndarray, spec: float = 1.0, tokens_per_step: float = 1.0) -> DisaggResult:
    """Closed-loop steady state with `concurrency` requests over the whole deployment.

    decode_slots: requests one decode rank holds at most (its batch cap, or its KV cache); prefill_batch: most
    prompts one prefill step takes (None-like inf: as many as the token budget holds)."""
    p_lay, d_lay = pre.lay, dec.lay
    chunked = pre.engine.chunked_prefill
    n_p = prefill_steps(prompt, np.full_like(prompt, chunk), chunked)
    per_step = np.where(prompt >= chunk, 1.0, np.maximum(1.0, np.floor(chunk / prompt)))
    k = np.minimum(per_step, prefill_batch)
    tokens = np.where(n_p > 1, chunk, k * prompt)
    prefix = isl - prompt
    pf = pre.step(0.0, 0.0, tokens / p_lay.pp, prefix + prompt / 2.0, k / p_lay.pp, mixed=True)
    prefill_latency = n_p * pf.total
    prefill_ranks = p_lay.workers * p_lay.dp
    decode_ranks = d_lay.workers * d_lay.dp
    prefill_capacity = prefill_ranks * k / prefill_latency
    overhead = pre.engine.knobs.request_ms * 1e-3
    light = prefill_latency + kv_transfer + overhead
    steps = np.maximum(osl - 1, 0) / tokens_per_step
    ctx = isl + (osl - 1) / 2.0
    batch = np.minimum(decode_slots, concurrency / decode_ranks)
    for _ in range(FIXED_POINT_ROUNDS):
        step = dec.step(batch / d_lay.pp, ctx, 0.0, 0.0, 0.0, spec=spec)
        decode_time = steps * step.total
        throughput = np.minimum.reduce([concurrency / (light + decode_time), prefill_capacity,
                                        decode_ranks * decode_slots / np.maximum(decode_time, 1e-12)])
        batch = 0.5 * batch + 0.5 * np.minimum(decode_slots, throughput * decode_time / decode_ranks)
    step = dec.step(batch / d_lay.pp, ctx, 0.0, 0.0, 0.0, spec=spec)
    tpot = step.total / tokens_per_step
    decode_time = np.maximum(osl - 1, 0) * tpot
    throughput = np.minimum.reduce([concurrency / (light + decode_time), prefill_capacity,
                                    decode_ranks * decode_slots / np.maximum(decode_time, 1e-12)])
    in_flight_time = np.divide(concurrency, throughput, out=np.full_like(throughput, np.inf), where=throughput > 0)
    ttft = np.maximum(light, in_flight_time - decode_time)
    return DisaggResult(ttft=ttft, tpot=tpot, throughput=throughput, decode_batch=batch,
                        prefill_utilisation=throughput / prefill_capacity, prefill_latency=prefill_latency,
                        kv_transfer=kv_transfer, queue=ttft - light, prefill_step=pf, decode_step=step)
