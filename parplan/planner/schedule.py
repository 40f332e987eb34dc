"""Pipeline schedules: which layers each pipeline rank holds, how many micro-batches of activations it
keeps in flight, and the bubble (``reference/formulas.md`` §3.5 and §5).

Layer placement: the model is cut into pp·vpp virtual stages of equal layer counts; when the layers do
not divide, the last and first virtual stages give up the remainder (they also carry the loss and the
embedding; Megatron --decoder-first/last-pipeline-num-layers, and the zero-bubble README's advice of
L = k·p − 2). Rank r holds virtual stages r, r+p, ... (interleaved); DualPipe's rank r holds stages r and
p−1−r of a p-stage cut (micro-batches flow both ways, so each runs half of the time); DualPipeV's rank r
holds chunks r and 2p−1−r of a 2p-stage cut (V shape, each micro-batch passes both).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from parplan.models.spec import LayerKind, ModelSpec
from parplan.planner.strategy import SCHEDULES

S_1F1B, S_INTERLEAVED, S_ZBH1, S_DUALPIPE, S_DUALPIPEV = range(len(SCHEDULES))


def virtual_stage_layers(layers: int, stages: int) -> list[int]:
    """Layers of each of `stages` consecutive virtual stages (sums to `layers`)."""
    per = -(-layers // stages)
    counts = [per] * stages
    deficit = per * stages - layers
    order = [i for pair in zip(range(stages - 1, -1, -1), range(stages), strict=True) for i in pair]
    for i in list(dict.fromkeys(order))[:deficit]:  # last, first, second last, second, ... each once
        counts[i] -= 1
    return counts


@dataclass(frozen=True, slots=True)
class RankPattern:
    """What one pipeline rank holds; ranks with equal patterns are represented by the first of them."""

    rank: int
    """Index of the first rank with this pattern (it keeps the most micro-batches in flight)."""
    count: int
    """How many ranks share the pattern."""
    dense: int
    """Dense layers held (parameters)."""
    moe: int
    """MoE layers held."""
    embedding: bool
    """Holds the input embedding (first virtual stage)."""
    head: bool
    """Holds the LM head, loss and MTP layers (last virtual stage)."""
    work: float
    """Share of its held layers each micro-batch passes through (0.5 for DualPipe, else 1)."""


def _assignment(pp: int, vpp: int, schedule: int) -> list[list[int]]:
    """Virtual-stage indices held by each rank."""
    if schedule == S_DUALPIPE:
        return [[r, pp - 1 - r] for r in range(pp)]
    if schedule == S_DUALPIPEV:
        return [[r, 2 * pp - 1 - r] for r in range(pp)]
    return [[r + j * pp for j in range(vpp)] for r in range(pp)]


@lru_cache(maxsize=4096)
def rank_patterns(model: ModelSpec, pp: int, vpp: int, schedule: int) -> tuple[RankPattern, ...]:
    """Distinct rank patterns of a pipeline, each with its first rank and multiplicity."""
    stages = pp if schedule == S_DUALPIPE else (2 * pp if schedule == S_DUALPIPEV else pp * vpp)
    counts = virtual_stage_layers(model.layers, stages)
    starts = [0, *itertools.accumulate(counts)]
    moe_before = [0, *itertools.accumulate(k is LayerKind.MOE for k in model.layer_kinds())]  # MoE layers before i
    out: dict[tuple, list] = {}
    for rank, held in enumerate(_assignment(pp, vpp, schedule)):
        moe = sum(moe_before[starts[st + 1]] - moe_before[starts[st]] for st in held)
        dense = sum(counts[st] for st in held) - moe
        key = (dense, moe, 0 in held, stages - 1 in held)
        if key in out:
            out[key][1] += 1
        else:
            out[key] = [rank, 1]
    work = 0.5 if schedule == S_DUALPIPE else 1.0
    return tuple(RankPattern(rank=r, count=c, dense=k[0], moe=k[1], embedding=k[2], head=k[3], work=work)
                 for k, (r, c) in out.items())


def inflight_microbatches(rank: np.ndarray, pp: np.ndarray, vpp: np.ndarray, m: np.ndarray,
                          schedule: np.ndarray) -> np.ndarray:
    """Micro-batches of activations a rank holds at its peak, in units of its whole layer set.

    1F1B / ZB-H1: min(p − r, m) (PipeDream-flush; Korthikanti §4, Megatron theoretical memory).
    Interleaved: warm-up of 2(p − r − 1) + (v − 1)·p + 1 chunk-micro-batches, each 1/v of the rank's
    layers (Megatron schedules.py); rank 0 gives the 1 + (p−1)/(p·v) factor.
    DualPipe / DualPipeV: PP+1 stage-micro-batches (DualPipe README table), a stage being half of the
    rank's layers.
    """
    r, p, v = rank, pp, vpp
    one_f_one_b = np.minimum(p - r, m)
    interleaved = np.minimum(2 * (p - r - 1) + (v - 1) * p + 1, m * v) / v
    dualpipe = np.minimum(p + 1, 2 * m) / 2
    dualpipev = np.minimum(2 * p + 1, 2 * m) / 2
    return np.select(
        [schedule == S_INTERLEAVED, schedule == S_DUALPIPE, schedule == S_DUALPIPEV],
        [interleaved, dualpipe, dualpipev],
        one_f_one_b,
    ).astype(float)


def bubble_time(pp: np.ndarray, vpp: np.ndarray, schedule: np.ndarray, t_f: np.ndarray, t_b: np.ndarray,
                t_w: np.ndarray) -> np.ndarray:
    """Idle time of a pipeline per step, from per-micro-batch forward, backward and weight-grad times of
    one rank (formulas.md §5), with B = t_b the full backward and T_B = t_b − t_w its input-grad part:

    1F1B (p−1)(F+B); interleaved (p−1)(F+B)/v; ZB-H1 (p−1)·max(T_F + T_B − T_W, T_F, T_B);
    DualPipe (p/2 − 1)(F&B + max(T_F, T_B) − 2W) with F&B = F + B (overlap hides communication, not
    compute); DualPipeV the same over its 2p half-size stages.

    The published closed forms (p−1)(T_F + T_B − T_W) and (PP/2 − 1)(F&B + B − 3W) assume W ≤ T_F = T_B; a
    discrete-event replay of the reference schedules (planner/timeline.py: Megatron-DeepSpeed
    ZeroBubbleH1Pipeline, DualPipe.step) shows the max() forms above outside that case.
    """
    p = pp.astype(float)
    full = t_f + t_b
    t_bi = t_b - t_w
    zb = np.maximum(np.maximum(t_f + t_bi - t_w, t_f), t_bi)
    dual = t_f + t_b + np.maximum(t_f, t_bi) - 2 * t_w
    bubble = np.select(
        [schedule == S_INTERLEAVED, schedule == S_ZBH1, schedule == S_DUALPIPE, schedule == S_DUALPIPEV],
        [(p - 1) * full / vpp, (p - 1) * zb, (p / 2 - 1) * dual, (p - 1) * dual / 2],
        (p - 1) * full,
    )
    # The DualPipe forms go negative when the weight-grad part outweighs forward and input-grad together
    # (2W > F + B + max(F, B − W)); no pipeline finishes before its slowest rank has run its micro-batches.
    return np.maximum(bubble, 0.0)
