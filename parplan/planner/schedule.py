"""Pipeline schedules: which layers each pipeline rank holds, how many micro-batches of activations it
keeps in flight, and the bubble (``reference/formulas.md`` §3.5 and §5).

Layer placement: the model is cut into pp·vpp virtual stages of equal layer counts; when the layers do
not divide, the last and first virtual stages give up the remainder (they also carry the loss and the
embedding; Megatron --decoder-first/last-pipeline-num-layers, and the zero-bubble README's advice of
L = k·p − 2). A stack whose `memory.pipeline_ends` is embedding_and_loss counts the embedding and the loss
as one layer each, so the first and last virtual stages hold one layer fewer (Llama 3 §3.3.2); one whose rule is
compute_cost cuts by cumulative compute cost, the LM head included (nanotron). Rank r
holds virtual stages r, r+p, ... (interleaved); DualPipe's rank r holds stages r and p−1−r of a p-stage cut
(micro-batches flow both ways, so each runs half of the time); DualPipeV's rank r holds chunks r and
2p−1−r of a 2p-stage cut (V shape, each micro-batch passes both).
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


def stage_layers(layers: int, stages: int, ends: str = "balanced") -> list[int]:
    """Layers of each virtual stage under a stack's pipeline_ends rule (stacks.spec.PIPELINE_ENDS): balanced is
    `virtual_stage_layers`; embedding_and_loss cuts layers + 2 and takes the embedding's and the loss's slot
    off the first and last stage (Megatron --account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split)."""
    if ends == "balanced" or stages == 1:
        return virtual_stage_layers(layers, stages)
    counts = virtual_stage_layers(layers + 2, stages)
    counts[0] -= 1
    counts[-1] -= 1
    return counts


def _block_cost(model: ModelSpec, kind: LayerKind) -> float:
    """A layer's compute cost as nanotron's get_block_compute_costs counts it: 4·heads·head_dim·hidden for the
    attention projections and 3·ffn·hidden for a gated MLP (2· ungated), an MoE layer's MLP over the routed
    experts a token visits and the shared experts."""
    m = model
    up = 3 if m.mlp.gated else 2
    ffn = m.mlp.ffn if kind is LayerKind.DENSE or m.moe is None else (
        m.moe.top_k * m.moe.expert_ffn + m.moe.shared_experts * m.moe.shared_ffn)
    return float(4 * m.attention.heads * m.attention.head_dim * m.hidden + up * ffn * m.hidden)


def cost_stage_layers(model: ModelSpec, stages: int) -> list[int]:
    """Layers of each stage under nanotron's cut (src/nanotron/models/base.py build_model): blocks in order (the
    embedding at no cost, the layers, the LM head at vocab·hidden) go to the current stage, which moves on once
    the cumulative cost passes (cost · (stage + 1) / stages); the block that passes stays, so the first stages
    hold the extra layers."""
    costs = [_block_cost(model, kind) for kind in model.layer_kinds()]
    total = sum(costs) + float(model.vocab * model.hidden)
    counts = [0] * stages
    stage, cumulative = 0, 0.0
    for cost in costs:
        counts[stage] += 1
        cumulative += cost
        if cumulative > total * (stage + 1) / stages:
            stage += 1
    return counts


@dataclass(frozen=True, slots=True)
class RankPattern:
    """What one pipeline rank holds; ranks with equal patterns are represented by the first of them."""

    rank: int
    """Index of the first rank with this pattern."""
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
    held_dense: float
    """Dense layer-micro-batches of activations held at the rank's peak with micro-batches to spare: each
    chunk's dense layers times the micro-batches in flight in that chunk (`chunk_inflight`)."""
    held_moe: float
    held_head: float
    """Micro-batches in flight in the chunk with the LM head and MTP layers (0 without it)."""
    held_embedding: float
    """Micro-batches in flight in the chunk with the embedding (its token ids)."""
    held_sets: float
    """The same peak in units of all the rank's layers (`inflight_share`): fewer micro-batches than this
    scale every chunk down alike."""


def chunks_per_rank(schedule: np.ndarray, vpp: np.ndarray) -> np.ndarray:
    """Model chunks (virtual stages) each rank holds, as `_assignment` gives them: two under DualPipe (one stage
    of each direction) and DualPipeV (both arms of the V), vpp under interleaving, one otherwise (vpp 1)."""
    return np.where((schedule == S_DUALPIPE) | (schedule == S_DUALPIPEV), 2, vpp)


def _assignment(pp: int, vpp: int, schedule: int) -> list[list[int]]:
    """Virtual-stage indices held by each rank."""
    if schedule == S_DUALPIPE:
        return [[r, pp - 1 - r] for r in range(pp)]
    if schedule == S_DUALPIPEV:
        return [[r, 2 * pp - 1 - r] for r in range(pp)]
    return [[r + j * pp for j in range(vpp)] for r in range(pp)]


def chunk_inflight(rank: int, pp: int, chunks: int, schedule: int) -> list[int]:
    """Micro-batches each chunk of a rank holds at its peak with micro-batches to spare, chunks in
    `_assignment` order.

    1F1B / ZB-H1: p − r (PipeDream-flush; Korthikanti §4, Megatron theoretical memory).
    Interleaved: the warm-up's 2(p − r − 1) + (v − 1)·p + 1 chunk forwards taken p micro-batches per chunk in
    chunk order (Megatron schedules.py, get_model_chunk_id); rank 0 gives the 1 + (p−1)/(p·v) factor.
    DualPipe: rank r is position r of one direction (stage r: p − r) and position p − 1 − r of the other
    (stage p − 1 − r: r + 1), PP + 1 stage-micro-batches in all (DualPipe README table). DualPipeV: chunk r
    of the V is position r of a 2p-chunk pipeline (2p − r) and chunk 2p − 1 − r position 2p − 1 − r (r + 1).
    """
    if schedule == S_DUALPIPE:
        return [pp - rank, rank + 1]
    if schedule == S_DUALPIPEV:
        return [2 * pp - rank, rank + 1]
    if schedule != S_INTERLEAVED:
        return [pp - rank]
    forwards = 2 * (pp - rank - 1) + (chunks - 1) * pp + 1
    # Forward k runs chunk (k // p) mod v: every full round of p·v forwards gives each chunk p, and the partial
    # round the first chunks in turn (counted in closed form: a search builds thousands of these).
    rounds, rest = divmod(forwards, pp * chunks)
    return [rounds * pp + min(max(rest - c * pp, 0), pp) for c in range(chunks)]


@lru_cache(maxsize=4096)
def rank_patterns(model: ModelSpec, pp: int, vpp: int, schedule: int, ends: str = "balanced"
                  ) -> tuple[RankPattern, ...]:
    """Distinct rank patterns of a pipeline, each with its first rank, its multiplicity and the in-flight
    activations of whichever of its ranks holds the most; `ends` is the stack's pipeline_ends rule."""
    stages = pp if schedule == S_DUALPIPE else (2 * pp if schedule == S_DUALPIPEV else pp * vpp)
    counts = cost_stage_layers(model, stages) if ends == "compute_cost" else stage_layers(model.layers, stages, ends)
    kinds = model.layer_kinds()
    starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
    # MoE layers before each layer index: a stage's MoE count is a difference of two (a search builds thousands
    # of these tables), over the layer range that slicing the stage out of `kinds` gives.
    moe_before = [0, *itertools.accumulate(k is LayerKind.MOE for k in kinds)]
    out: dict[tuple, dict] = {}
    for rank, held in enumerate(_assignment(pp, vpp, schedule)):
        flight = chunk_inflight(rank, pp, len(held), schedule)
        row = {"rank": rank, "count": 1, "held_dense": 0.0, "held_moe": 0.0, "held_head": 0.0,
               "held_embedding": 0.0}
        dense = moe = 0
        for st, w in zip(held, flight, strict=True):
            layer_range = range(len(kinds))[starts[st]:starts[st + 1]]
            n_moe = moe_before[layer_range.stop] - moe_before[layer_range.start] if layer_range else 0
            n_dense = len(layer_range) - n_moe
            dense, moe = dense + n_dense, moe + n_moe
            row["held_dense"] += w * n_dense
            row["held_moe"] += w * n_moe
            row["held_head"] += w * (st == stages - 1)
            row["held_embedding"] += w * (st == 0)
        layers = dense + moe
        row["held_sets"] = (row["held_dense"] + row["held_moe"]) / layers if layers else float(max(flight))
        key = (dense, moe, 0 in held, stages - 1 in held, tuple(counts[st] for st in held))
        if key in out:
            first = out[key]
            if row["held_sets"] > first["held_sets"]:
                out[key] = {**row, "rank": first["rank"], "count": first["count"]}
            out[key]["count"] += 1
        else:
            out[key] = row
    work = 0.5 if schedule == S_DUALPIPE else 1.0
    return tuple(RankPattern(dense=k[0], moe=k[1], embedding=k[2], head=k[3], work=work, **row)
                 for k, row in out.items())


def inflight_share(held_sets: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Share of a rank's peak with micro-batches to spare (RankPattern.held_sets, in units of its whole layer
    set) that m micro-batches keep in flight: all of it, or m of it when there are fewer."""
    return np.minimum(1.0, m / np.maximum(held_sets, 1.0))


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
