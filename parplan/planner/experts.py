"""Expert load and its balance across the expert-parallel GPUs.

- **EPLB** (``reference/formulas.md`` §6): :func:`rebalance_experts` reproduces deepseek-ai/EPLB
  ``eplb.py`` (hierarchical policy when the expert groups split evenly over the nodes, else the global
  policy) in numpy: the same greedy choices, physical-slot order and replica ranks. Equal loads are taken
  in index order; eplb.py leaves their order to torch's unstable sort, so on exact ties (replicas of one
  expert included) the slots may be ordered differently.
- **Load models**: :func:`expert_load` gives each expert's share of a layer's routed tokens (uniform, Zipf,
  or measured counts, e.g. from :func:`load_counts_file`).
- **Imbalance**: :func:`imbalance` turns a load into the max/mean per-GPU load before EPLB (experts
  placed contiguously, as Megatron does) and after it; the MoE layers run at the pace of the busiest GPU,
  so max/mean is the straggler factor on their compute and all-to-all time.
- **Node-limited routing** (formulas.md §4.4): how many inter-node copies of a token the EP dispatch sends
  (:func:`remote_nodes_reached`), and how many EP ranks a token's experts sit on (:func:`ranks_reached`), for a
  model's routing over each distinct group size of a batch of layouts (:func:`per_size`).
"""

from __future__ import annotations

import csv
import heapq
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from parplan._input import parse_json, parse_yaml, read_text
from parplan.errors import ConfigError

if TYPE_CHECKING:
    from parplan.models.spec import MoESpec

# ---------------------------------------------------------------------------------------------- EPLB


class Placement(NamedTuple):
    """Where EPLB puts each expert's replicas, for every MoE layer (the three outputs of ``eplb.py``)."""

    phy2log: np.ndarray
    """[layers, num_replicas] int64: the logical expert each physical slot holds. GPU-major: slot j lives on
    GPU j // (num_replicas / num_gpus), and GPUs are numbered node-major."""
    log2phy: np.ndarray
    """[layers, experts, max replicas] int64: the physical slots of each expert, in replica-rank order,
    padded with -1."""
    logcnt: np.ndarray
    """[layers, experts] int64: how many replicas each expert has (>= 1)."""


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def _check_weight(weight: np.ndarray) -> np.ndarray:
    """The load matrix as float64 [layers, experts]: finite, non-negative, at least one layer and expert."""
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] < 1 or w.shape[1] < 1:
        raise ValueError(f"weight must be a [layers, experts] array with both >= 1, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weight must be finite and >= 0 (a load per expert)")
    return w


def _check_layout(experts: int, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int) -> None:
    """The divisibility rules ``eplb.py`` asserts, as readable errors."""
    _check_positive(num_replicas=num_replicas, num_groups=num_groups, num_nodes=num_nodes, num_gpus=num_gpus)
    if num_replicas % num_gpus:
        raise ValueError(f"num_replicas ({num_replicas}) must be a multiple of num_gpus ({num_gpus}): "
                         "every GPU holds the same number of expert slots")
    if num_gpus % num_nodes:
        raise ValueError(f"num_gpus ({num_gpus}) must be a multiple of num_nodes ({num_nodes})")
    if experts % num_groups:
        raise ValueError(f"the number of experts ({experts}) must be a multiple of num_groups ({num_groups})")
    if num_replicas < experts:
        raise ValueError(f"num_replicas ({num_replicas}) must be >= the number of experts ({experts}): "
                         "every expert needs at least one slot")


def _balanced_packing(weight: np.ndarray, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack each row's items into `num_packs` packs of equal item count, heaviest item first into the
    lightest pack that still has room (ties: the lowest pack). Returns (pack, rank in pack), both [rows, items].
    """
    rows, items = weight.shape
    per_pack = items // num_packs
    if per_pack == 1:
        # eplb.py skips the sort here and puts item i in pack i; kept so the slot order matches it.
        pack = np.broadcast_to(np.arange(items, dtype=np.int64), weight.shape).copy()
        return pack, np.zeros_like(pack)
    # Stable descending sort, so equal loads keep index order (eplb.py's unstable torch.sort may not).
    order = np.argsort(-weight, axis=1, kind="stable")
    pack = np.empty(weight.shape, dtype=np.int64)
    rank = np.empty(weight.shape, dtype=np.int64)
    for r in range(rows):
        loads = weight[r].tolist()
        # A heap of (load, pack) pops the lightest pack, lowest index first on ties, like eplb.py's min();
        # a full pack is simply not pushed back.
        open_packs = [(0.0, p) for p in range(num_packs)]
        filled = [0] * num_packs
        for item in order[r].tolist():
            load, p = heapq.heappop(open_packs)
            pack[r, item] = p
            rank[r, item] = filled[p]
            filled[p] += 1
            if filled[p] < per_pack:
                heapq.heappush(open_packs, (load + loads[item], p))
    return pack, rank


def _replicate(weight: np.ndarray, num_phy: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Give each row's experts `num_phy` slots: one each, then one more at a time to the expert with the
    largest load per replica (ties: the lowest id). Returns (phy2log, replica rank) [rows, num_phy] and
    logcnt [rows, experts]; slot i < experts holds expert i."""
    rows, num_log = weight.shape
    phy2log = np.empty((rows, num_phy), dtype=np.int64)
    phy2log[:, :num_log] = np.arange(num_log)
    rank = np.zeros((rows, num_phy), dtype=np.int64)
    logcnt = np.ones((rows, num_log), dtype=np.int64)
    row = np.arange(rows)
    for slot in range(num_log, num_phy):
        hottest = np.argmax(weight / logcnt, axis=1)
        phy2log[:, slot] = hottest
        rank[:, slot] = logcnt[row, hottest]
        logcnt[row, hottest] += 1
    return phy2log, rank, logcnt


def _inverse(perm: np.ndarray) -> np.ndarray:
    """Row-wise inverse of a permutation matrix."""
    inv = np.empty_like(perm)
    np.put_along_axis(inv, perm, np.broadcast_to(np.arange(perm.shape[1]), perm.shape), axis=1)
    return inv


def _hierarchical(weight: np.ndarray, num_phy: int, num_groups: int, num_nodes: int,
                  num_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """eplb.py's hierarchical policy: (phy2log, replica rank) [layers, num_phy] and logcnt [layers, experts].

    "mlog" numbers experts node-major after step 1 (a node's experts are contiguous), so steps 2 and 3
    can run on each node's block independently, as rows of a [layers·nodes, ...] matrix.
    """
    layers, experts = weight.shape
    group_size = experts // num_groups
    groups_per_node = num_groups // num_nodes
    slots_per_gpu = num_phy // num_gpus

    # Step 1: whole groups onto nodes, so group-limited routing stays node-limited.
    group_load = weight.reshape(layers, num_groups, group_size).sum(axis=2)
    node, rank_in_node = _balanced_packing(group_load, num_nodes)
    group_start = (node * groups_per_node + rank_in_node) * group_size
    log2mlog = (group_start[:, :, None] + np.arange(group_size)).reshape(layers, experts)
    mlog2log = _inverse(log2mlog)

    # Step 2: replicate inside each node, num_phy / num_nodes slots per node.
    node_load = np.take_along_axis(weight, mlog2log, axis=1).reshape(layers * num_nodes, experts // num_nodes)
    phy2mlog, phy_rank, mlogcnt = _replicate(node_load, num_phy // num_nodes)

    # Step 3: the node's replicas onto its GPUs, each replica carrying load / replica count.
    replica_load = np.take_along_axis(node_load / mlogcnt, phy2mlog, axis=1)
    gpu, rank_on_gpu = _balanced_packing(replica_load, num_gpus // num_nodes)
    pphy2phy = _inverse(gpu * slots_per_gpu + rank_on_gpu)

    # Step 4: back to global ids: slots in GPU order, experts from node-local mlog to logical.
    pphy2mlog = np.take_along_axis(phy2mlog, pphy2phy, axis=1).reshape(layers, num_nodes, -1)
    pphy2mlog = (pphy2mlog + (np.arange(num_nodes) * (experts // num_nodes))[None, :, None]).reshape(layers, -1)
    phy2log = np.take_along_axis(mlog2log, pphy2mlog, axis=1)
    rank = np.take_along_axis(phy_rank, pphy2phy, axis=1).reshape(layers, -1)
    logcnt = np.take_along_axis(mlogcnt.reshape(layers, experts), log2mlog, axis=1)
    return phy2log, rank, logcnt


def rebalance_experts(weight: np.ndarray, num_replicas: int, num_groups: int, num_nodes: int,
                      num_gpus: int) -> Placement:
    """DeepSeek EPLB: replicate and place experts so the per-GPU load is as even as the greedy gets it.

    weight: [layers, experts] load per expert (token counts or shares; only ratios matter).
    num_replicas: physical expert slots in all, a multiple of num_gpus and >= experts.
    num_groups: expert groups of group-limited routing (1 if none); must divide the experts.
    num_nodes, num_gpus: the EP group's nodes and GPUs (num_gpus a multiple of num_nodes).

    Hierarchical policy when num_groups % num_nodes == 0 (each group's experts stay on one node), else
    the global policy: the same routine with one group and one node.
    """
    w = _check_weight(weight)
    layers, experts = w.shape
    _check_layout(experts, num_replicas, num_groups, num_nodes, num_gpus)
    if num_groups % num_nodes == 0:
        phy2log, rank, logcnt = _hierarchical(w, num_replicas, num_groups, num_nodes, num_gpus)
    else:
        phy2log, rank, logcnt = _hierarchical(w, num_replicas, 1, 1, num_gpus)
    log2phy = np.full((layers, experts, int(logcnt.max())), -1, dtype=np.int64)
    log2phy[np.arange(layers)[:, None], phy2log, rank] = np.arange(num_replicas)
    return Placement(phy2log, log2phy, logcnt)


def extra_replicas_per_gpu(num_replicas: int, experts: int, num_gpus: int) -> float:
    """Redundant expert copies each GPU holds per MoE layer, (num_replicas − experts) / num_gpus
    (formulas.md §6); times one expert's parameter count, it is EPLB's extra memory per GPU per layer."""
    _check_positive(num_gpus=num_gpus)
    if num_replicas < experts:
        raise ValueError(f"num_replicas ({num_replicas}) must be >= the number of experts ({experts})")
    return (num_replicas - experts) / num_gpus


# ---------------------------------------------------------------------------------------------- loads

LOAD_KINDS = ("uniform", "zipf", "counts")


def _zipf(experts: int, a: float, layers: int, seed: int | None) -> np.ndarray:
    """Load ∝ 1 / rank^a; expert i has rank i + 1, or a seeded random order drawn afresh for each layer."""
    by_rank = np.arange(1, experts + 1, dtype=np.float64) ** -a
    if seed is None:
        return np.tile(by_rank, (layers, 1))
    rng = np.random.default_rng(seed)
    load = np.empty((layers, experts))
    for layer in range(layers):
        load[layer, rng.permutation(experts)] = by_rank
    return load


def _counts(counts: np.ndarray, experts: int, layers: int) -> np.ndarray:
    """Per-layer [layers, experts] counts as given, or global [experts] / [1, experts] ones repeated."""
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim == 1:
        c = c[None, :]
    if c.ndim != 2 or c.shape[1] != experts:
        raise ValueError(f"counts must be [experts] or [layers, experts] with experts = {experts}, "
                         f"got shape {np.shape(counts)}")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError("counts must be finite and >= 0")
    if c.shape[0] == 1:
        return np.tile(c, (layers, 1))
    if c.shape[0] != layers:
        raise ValueError(f"counts has {c.shape[0]} rows (one per layer) but layers = {layers}")
    return c


def expert_load(kind: str, experts: int, *, zipf_a: float = 1.2, counts: np.ndarray | None = None,
                layers: int = 1, seed: int | None = None) -> np.ndarray:
    """Each expert's share of a layer's routed token copies, [layers, experts], every row summing to 1.

    kind "uniform": 1/experts each. "zipf": ∝ 1/rank^zipf_a, deterministic: expert i has rank i + 1 when
    seed is None, else each layer ranks its experts in a random order drawn from `seed`. "counts": the
    measured `counts`, [experts] (repeated for every layer) or [layers, experts].
    """
    _check_positive(experts=experts, layers=layers)
    if kind not in LOAD_KINDS:
        raise ValueError(f"unknown load kind '{kind}'; known: {', '.join(LOAD_KINDS)}")
    if (counts is not None) != (kind == "counts"):
        raise ValueError("counts is required with kind 'counts' and only used there")
    if kind == "uniform":
        load = np.ones((layers, experts))
    elif kind == "zipf":
        if not (math.isfinite(zipf_a) and zipf_a >= 0):
            raise ValueError(f"zipf_a must be finite and >= 0, got {zipf_a}")
        load = _zipf(experts, zipf_a, layers, seed)
    else:
        load = _counts(counts, experts, layers)
    totals = load.sum(axis=1, keepdims=True)
    if np.any(totals == 0):
        raise ValueError(f"layer {int(np.argmin(totals[:, 0]))} has no load: all its counts are 0")
    return load / totals


def _csv_rows(text: str, file: str) -> list[tuple[str, list[object]]]:
    """(where, cells) for each CSV line that is neither blank nor a '#' comment; malformed CSV (a field over
    the csv module's 128 KiB limit) is a ConfigError naming `file`."""
    rows: list[tuple[str, list[object]]] = []
    try:
        for line_no, cells in enumerate(csv.reader(io.StringIO(text)), start=1):
            if not cells or all(not c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
                continue
            rows.append((f"line {line_no}", list(cells)))
    except csv.Error as e:
        raise ConfigError(f"not valid CSV: {e}", file=file) from None
    return rows


def _tree_rows(data: object, file: str) -> list[tuple[str, list[object]]]:
    """(where, cells) from parsed JSON/YAML: a list of counts, a list of such lists, or either under a
    'counts' key (other keys, e.g. provenance notes, are ignored)."""
    name = ""
    if isinstance(data, dict):
        if "counts" not in data:
            raise ConfigError("required field is missing", file=file, field="counts")
        data, name = data["counts"], "counts"
    if not isinstance(data, list) or not data:
        raise ConfigError("expected a non-empty list of counts, or a list of such lists (one per layer)",
                          file=file, field=name or None)
    if not any(isinstance(row, list) for row in data):
        return [(name, data)]
    rows = []
    for i, row in enumerate(data):
        if not isinstance(row, list):
            raise ConfigError(f"expected a list of counts, got {row!r}", file=file, field=f"{name}[{i}]")
        rows.append((f"{name}[{i}]", row))
    return rows


def _count(value: object, file: str, where: str) -> float:
    """One count: a finite number >= 0 (numeric strings too: YAML reads 1e3 as a string)."""
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        number = float(value)
    except ValueError:
        raise ConfigError(f"{value!r} is not a number", file=file, field=where) from None
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"a count must be finite and >= 0, got {value!r}", file=file, field=where)
    return number


def _matrix(rows: list[tuple[str, list[object]]], file: str) -> np.ndarray:
    """The (where, cells) rows as a [rows, experts] array; `where` ('' for a lone top-level row) names the
    row in errors."""
    if not rows:
        raise ConfigError("no counts found", file=file)
    width = len(rows[0][1])
    out = np.empty((len(rows), width))
    for r, (where, cells) in enumerate(rows):
        if len(cells) != width:
            raise ConfigError(f"{len(cells)} counts, but the first row has {width}", file=file, field=where or None)
        out[r] = [_count(c, file, f"{where}, expert {e}" if where else f"expert {e}") for e, c in enumerate(cells)]
    return out


_TREE_PARSERS: dict[str, Callable[[str, str], object]] = {".json": parse_json, ".yaml": parse_yaml,
                                                          ".yml": parse_yaml}


def load_counts_file(path: str | Path) -> np.ndarray:
    """Read measured expert counts, [rows, experts] float64: one row per MoE layer, or a single row for all.

    .csv: one row of counts per line ('#' lines and blank lines skipped, no header). .json/.yaml/.yml: a list
    of counts or a list of lists, at the top level or under a 'counts' key. Errors are ConfigError naming
    the file and the line or field.
    """
    path = Path(path)
    file = str(path)
    suffix = path.suffix.lower()
    text = read_text(path)  # first: a directory or a device is reported as such
    if suffix != ".csv" and suffix not in _TREE_PARSERS:
        raise ConfigError("expected a .csv, .json, .yaml or .yml file of expert counts", file=file)
    rows = _csv_rows(text, file) if suffix == ".csv" else _tree_rows(_TREE_PARSERS[suffix](text, file), file)
    return _matrix(rows, file)


# ---------------------------------------------------------------------------------------------- imbalance


def gpu_loads(weight: np.ndarray, phy2log: np.ndarray, logcnt: np.ndarray, num_gpus: int) -> np.ndarray:
    """[layers, num_gpus] load per GPU when each replica carries its expert's load / replica count and the
    slots are GPU-major (as :func:`rebalance_experts` lays them out)."""
    w = _check_weight(weight)
    _check_positive(num_gpus=num_gpus)
    if phy2log.shape[0] != w.shape[0] or logcnt.shape != w.shape:
        raise ValueError(f"phy2log {phy2log.shape} and logcnt {logcnt.shape} do not match weight {w.shape}")
    if phy2log.shape[1] % num_gpus:
        raise ValueError(f"{phy2log.shape[1]} slots do not split evenly over {num_gpus} GPUs")
    per_slot = np.take_along_axis(w / logcnt, phy2log, axis=1)
    return per_slot.reshape(w.shape[0], num_gpus, -1).sum(axis=2)


def _contiguous_gpu_loads(weight: np.ndarray, num_gpus: int) -> np.ndarray:
    """Per-GPU load with no EPLB: experts E/num_gpus at a time in id order (Megatron's EP layout)."""
    layers, experts = weight.shape
    if experts % num_gpus:
        raise ValueError(f"the number of experts ({experts}) must be a multiple of num_gpus ({num_gpus})")
    phy2log = np.tile(np.arange(experts), (layers, 1))
    return gpu_loads(weight, phy2log, np.ones((layers, experts), dtype=np.int64), num_gpus)


def _max_over_mean(loads: np.ndarray) -> tuple[tuple[float, ...], float]:
    """(per layer, over all layers) max/mean of [layers, gpus] loads. The overall figure is
    Σ max / Σ mean: the MoE layers' total time over what perfect balance would take."""
    peak, mean = loads.max(axis=1), loads.mean(axis=1)
    return tuple((peak / mean).tolist()), float(peak.sum() / mean.sum())


@dataclass(frozen=True, slots=True)
class ImbalanceReport:
    """Per-GPU expert load, max over mean, before and after EPLB (1.0 = perfectly even)."""

    num_gpus: int
    """GPUs of the expert-parallel group the experts are spread over."""
    num_replicas: int | None
    """Physical expert slots EPLB had (None: EPLB not applied)."""
    before_per_layer: tuple[float, ...]
    """max/mean per-GPU load of each layer, experts placed contiguously E/num_gpus per GPU (Megatron)."""
    before: float
    """Σ max / Σ mean over the layers before EPLB: the straggler factor on the MoE layers' time."""
    after_per_layer: tuple[float, ...] | None
    """max/mean per-GPU load of each layer after EPLB (None without num_replicas)."""
    after: float | None
    """Σ max / Σ mean over the layers after EPLB (None without num_replicas)."""
    extra_replicas_per_gpu: float
    """Redundant expert copies per GPU per MoE layer, (num_replicas − experts) / num_gpus; 0 without EPLB."""

    @property
    def factor(self) -> float:
        """The straggler factor that applies: after EPLB when it ran, else before."""
        return self.before if self.after is None else self.after


def imbalance(weight: np.ndarray, num_gpus: int, *, num_replicas: int | None = None, num_groups: int = 1,
              num_nodes: int = 1) -> ImbalanceReport:
    """Max/mean per-GPU load of `weight` [layers, experts] over `num_gpus` GPUs: contiguous placement, and
    after EPLB with `num_replicas` slots when given (num_groups, num_nodes as in :func:`rebalance_experts`)."""
    w = _check_weight(weight)
    _check_positive(num_gpus=num_gpus)
    if np.any(w.sum(axis=1) == 0):
        raise ValueError("every layer needs some load: a layer's counts are all 0")
    before_per_layer, before = _max_over_mean(_contiguous_gpu_loads(w, num_gpus))
    if num_replicas is None:
        return ImbalanceReport(num_gpus, None, before_per_layer, before, None, None, 0.0)
    placement = rebalance_experts(w, num_replicas, num_groups, num_nodes, num_gpus)
    after_per_layer, after = _max_over_mean(gpu_loads(w, placement.phy2log, placement.logcnt, num_gpus))
    extra = extra_replicas_per_gpu(num_replicas, w.shape[1], num_gpus)
    return ImbalanceReport(num_gpus, num_replicas, before_per_layer, before, after_per_layer, after, extra)


# ---------------------------------------------------------------------------------------------- routing


def _check_routing(experts: int, top_k: int, nodes: int) -> None:
    _check_positive(experts=experts, top_k=top_k, nodes=nodes)
    if experts % nodes:
        raise ValueError(f"the number of experts ({experts}) must be a multiple of nodes ({nodes})")
    if top_k > experts:
        raise ValueError(f"top_k ({top_k}) must be <= the number of experts ({experts})")


def _p_node_touched(experts: int, top_k: int, nodes: int) -> float:
    """Chance that a given node holds at least one of a token's top_k experts (uniform routing, E/N per
    node): 1 − C(E − E/N, k) / C(E, k)."""
    _check_routing(experts, top_k, nodes)
    return 1.0 - math.comb(experts - experts // nodes, top_k) / math.comb(experts, top_k)


def expected_remote_nodes(experts: int, top_k: int, nodes: int) -> float:
    """Expected nodes other than its own that a token's experts are on (uniform routing), i.e. the
    inter-node sends per token when the dispatch sends once per node (formulas.md §4.4)."""
    return (nodes - 1) * _p_node_touched(experts, top_k, nodes)


def expected_nodes_touched(experts: int, top_k: int, nodes: int) -> float:
    """Expected distinct nodes holding a token's top_k experts, its own included (uniform routing)."""
    return nodes * _p_node_touched(experts, top_k, nodes)


def remote_copies(top_k: int, nodes: int) -> float:
    """Expert copies per token that leave its node without per-node dedup, k·(N−1)/N (formulas.md §4.4)."""
    _check_positive(top_k=top_k, nodes=nodes)
    return top_k * (nodes - 1) / nodes


def max_nodes_per_token(n_group: int, topk_group: int, nodes: int) -> int:
    """The most nodes group-limited routing lets a token reach (DeepSeek's M), given n_group expert
    groups of which each token uses topk_group, laid contiguously over `nodes` nodes.

    A group spans nodes/n_group nodes; one that straddles a node boundary (neither count divides the
    other) touches one more. DeepSeek-V3: n_group = 8 = nodes, topk_group = 4 → M = 4.
    """
    _check_positive(n_group=n_group, topk_group=topk_group, nodes=nodes)
    if topk_group > n_group:
        raise ValueError(f"topk_group ({topk_group}) must be <= n_group ({n_group})")
    if n_group % nodes == 0:
        per_group = 1
    elif nodes % n_group == 0:
        per_group = nodes // n_group
    else:
        per_group = math.ceil(nodes / n_group) + 1
    return min(topk_group * per_group, nodes)


def node_limited(top_k: int, nodes: int, max_nodes: int) -> float:
    """Inter-node copies per token when the dispatch sends once per destination node (then forwards over
    NVLink, as DeepEP does) and routing reaches at most `max_nodes` nodes: min(k, M, N)·(N−1)/N.

    It assumes each reachable node gets one of the token's experts (the bound behind DeepSeek's "IB traffic
    ≤ M·h per token") and that each is the token's own node with chance 1/N. Where the limit does not bind
    (M >= N), :func:`expected_remote_nodes` is the sharper, uniform-routing expectation.
    """
    _check_positive(top_k=top_k, nodes=nodes, max_nodes=max_nodes)
    return min(top_k, max_nodes, nodes) * (nodes - 1) / nodes


def remote_nodes_reached(moe: MoESpec, nodes: int) -> float:
    """Nodes other than its own a token's experts sit on, over an EP group of `nodes` nodes holding all experts
    (DeepEP's normal dispatch sends one copy to each): uniform routing where the experts spread evenly, else the
    copies without per-node dedup; capped by group-limited routing (DeepSeek-V3: n_group 8, topk_group 4 → at most
    4 nodes; formulas.md §4.4)."""
    r = (expected_remote_nodes(moe.experts, moe.top_k, nodes) if moe.experts % nodes == 0
         else remote_copies(moe.top_k, nodes))
    if moe.group_limited:
        r = min(r, node_limited(moe.top_k, nodes, max_nodes_per_token(moe.n_group, moe.topk_group, nodes)))
    return r


def ranks_reached(moe: MoESpec, ranks: int) -> float:
    """EP ranks a token's experts sit on, its own included (a one-sided all-to-all sends it once to each): uniform
    routing over whole experts evenly spread, else min(top_k, ranks); at most the ranks group-limited routing lets it
    reach (its topk_group groups laid contiguously: 4 of DeepSeek-V3's 8 at EP 8, where uniform routing gives 5.29).
    Redundant experts are not counted: a token takes one replica of each of its experts, so replicas change which
    ranks it reaches, not how many under uniform routing."""
    r = (expected_nodes_touched(moe.experts, moe.top_k, ranks) if moe.experts % ranks == 0
         else float(min(moe.top_k, ranks)))
    if moe.group_limited:
        r = min(r, float(max_nodes_per_token(moe.n_group, moe.topk_group, ranks)))
    return r


def per_size(sizes: np.ndarray, value: Callable[[int], float]) -> np.ndarray:
    """value(n) for every whole group size n of `sizes` (an array over layouts), computed once per distinct size:
    the routing figures above are combinatorial sums, and a search holds few distinct sizes."""
    whole = np.asarray(sizes).astype(np.int64)
    out = np.zeros(np.shape(whole))
    for n in np.unique(whole):
        out = np.where(whole == n, value(int(n)), out)
    return out
