"""The space a search covers and the grid of blocks it is cut into.

SearchSpace holds the user's restrictions. _grid turns them into cells, one per (tp, pp), each with the values
every other axis takes with it (_AXES): the first _BLOCK axes pick a block, the rest vary inside it. _Cells
stacks cells so that one numpy pass reads many of them; _fields, _block_fields and _fields_of give the fields
a block fixes, and _representatives one layout per block, the layout the bounds read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from parplan._arith import divisors
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.strategy import (
    DISPATCHERS,
    PRECISIONS,
    RECOMPUTE,
    SCHEDULES,
    Layouts,
    p2p_overlap_default,
    scatter_gather_acts,
)


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """Allowed values per dimension; None means every value the rules allow."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    etp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    zero: tuple[int, ...] = (0, 1, 2, 3)
    sp: tuple[bool, ...] = (False, True)
    recompute: tuple[str, ...] = RECOMPUTE
    mbs: tuple[int, ...] | None = None
    schedule: tuple[str, ...] = SCHEDULES
    precision: tuple[str, ...] = ("bf16",)
    tp_overlap: tuple[bool, ...] = (False, True)
    dispatch: tuple[str, ...] = DISPATCHERS
    """MoE token dispatch modes (dense models only take alltoall)."""
    redundant_experts: tuple[int, ...] = (0,)
    """EPLB redundant expert slots per MoE layer to consider (each a multiple of ep)."""
    ep_overlap: tuple[bool, ...] = (False, True)
    """Megatron's EP all-to-all overlap on or off (MoE only; the rules keep it where Megatron allows it)."""
    pp_scatter_gather: bool = False
    """The pipeline engine partitions stage tensors over TP without SP (DeepSpeed's does: `plan --framework
    deepspeed` sets this); Megatron-Core and torchtitan send them whole (Strategy.pp_scatter_gather)."""
    tp_in_domain: bool = True
    """Unless tp (etp) values are listed explicitly, keep tp and etp inside one scale-up domain: a TP group
    on the NIC all-reduces every layer's activations over it, which no published large run does."""
    max_memory_fraction: float = 1.0
    """A plan must need at most this share of GPU memory (after allocator headroom and CUDA context)."""

    def memory_cap_gib(self, cluster: ClusterSpec) -> float:
        """The most GiB a plan may need on `cluster`'s GPUs."""
        return cluster.gpu.hbm_gib * self.max_memory_fraction

    def allows(self, name: str, value: object) -> bool:
        allowed = getattr(self, name)
        return allowed is None or value in allowed


_AXES = ("cp", "expert", "schedule", "mbs", "precision", "redundant_experts", "sp",
         "zero", "tp_overlap", "recompute", "dispatch", "ep_overlap")
"""The axes of a grid cell's layouts: the first _BLOCK of them pick a block, the rest (estimate.BOUND_FREE)
vary inside it. expert holds (ep, etp) pairs and schedule (schedule, vpp) pairs."""
_BLOCK = 7


@dataclass(frozen=True, slots=True)
class _Cell:
    """One (tp, pp) of the grid and the values each axis takes with it (_AXES order). The values of an axis
    may not all go together (an mbs that does not divide one cp's batch): the rules count those out."""

    tp: int
    pp: int
    values: tuple[np.ndarray, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.values)

    @property
    def block_shape(self) -> tuple[int, ...]:
        return self.shape[:_BLOCK]


def _pair_ok(tp: np.ndarray, sp: np.ndarray, tp_overlap: np.ndarray) -> np.ndarray:
    """The search's own rule on SP and TP overlap: both are moot at tp = 1 (Strategy.__post_init__ normalises
    them off, so only the off setting is searched). That overlap needs SP is Strategy's rule tp_overlap_needs_sp,
    which every caller applies with the others."""
    return (tp > 1) | ~(sp | tp_overlap)


def _inner(model: ModelSpec, space: SearchSpace) -> tuple[np.ndarray, ...]:
    """The values of the inner axes (_AXES after _BLOCK), the same in every cell."""
    moe = model.moe is not None
    return (np.array(space.zero, dtype=np.int64), np.array(space.tp_overlap, dtype=bool),
            np.array([RECOMPUTE.index(r) for r in space.recompute], dtype=np.int8),
            np.array([DISPATCHERS.index(d) for d in space.dispatch] if moe else [0], dtype=np.int8),
            np.array(space.ep_overlap if moe else (False,), dtype=bool))


def _grid(model: ModelSpec, cluster: ClusterSpec, gbs: int, seq: int, space: SearchSpace) -> Iterator[_Cell]:
    """Every (tp, pp) with the values each other axis may take with it (cp first: a cell holds every cp, so
    that the rules are evaluated over many layouts at once)."""
    g = cluster.gpus
    moe = model.moe
    dom = cluster.scaleup_domain
    inner = _inner(model, space)
    precision = np.array([PRECISIONS.index(p) for p in space.precision], dtype=np.int8)
    redundant = np.array(space.redundant_experts if moe else (0,), dtype=np.int64)
    sps = np.array(sorted(set(space.sp)), dtype=bool)
    for tp in divisors(g):
        if not space.allows("tp", tp) or model.attention.kv_heads % tp or model.attention.heads % tp:
            continue
        if space.tp is None and space.tp_in_domain and tp > dom:
            continue
        for pp in divisors(g // tp):
            if not space.allows("pp", pp) or pp > model.layers:
                continue
            cps = [cp for cp in divisors(g // (tp * pp)) if space.allows("cp", cp)
                   and not (cp > 1 and seq % (2 * cp)) and gbs % (g // (tp * pp * cp)) == 0]
            per_stage = g // pp
            eps = [1] if moe is None else [e for e in divisors(moe.experts) if space.allows("ep", e)]
            etps = [1] if moe is None else [x for x in divisors(moe.expert_ffn) if space.allows("etp", x)
                                            and (space.etp is not None or not space.tp_in_domain or x <= dom)]
            expert = [(e, x) for e in eps for x in etps if per_stage % (e * x) == 0]
            mbs = sorted({b for cp in cps for b in divisors(gbs // (g // (tp * pp * cp))) if space.allows("mbs", b)})
            sched = []
            for s in space.schedule:
                code = SCHEDULES.index(s)
                if s == "1f1b":
                    sched.append((code, 1))
                elif pp > 1 and s == "interleaved":
                    sched += [(code, v) for v in range(2, model.layers // pp + 1)]
                elif pp > 1 and s == "dualpipev" and 2 * pp <= model.layers:
                    sched.append((code, 2))
                elif pp > 1 and s in ("zb-h1", "dualpipe"):
                    sched.append((code, 1))
            sched = [(s, v) for s, v in sched if space.allows("vpp", v)]
            if not (cps and expert and mbs and sched):
                continue
            values = (np.array(cps, dtype=np.int64), np.array(expert, dtype=np.int64).reshape(-1, 2),
                      np.array(sched, dtype=np.int64), np.array(mbs, dtype=np.int64), precision, redundant, sps,
                      *inner)
            yield _Cell(tp, pp, values)


@dataclass(frozen=True, slots=True)
class _Cells:
    """Grid cells stacked along one axis, each axis's values padded to the longest with the cell's first value
    (the padding is counted out: _padding), so that the survey evaluates the rules over many cells in one pass
    instead of one numpy call per rule and cell."""

    ids: np.ndarray
    """The cells' indices in the search's list."""
    tp: np.ndarray
    pp: np.ndarray
    values: tuple[np.ndarray, ...]
    """Per axis (_AXES order): (C, L) values, (C, L, 2) for the expert and schedule pairs."""
    lengths: np.ndarray
    """(C, axes) how many of each axis's values are the cell's own (the rest is padding)."""

    @classmethod
    def of(cls, cells: list[_Cell], ids: list[int]) -> _Cells:
        picked = [cells[i] for i in ids]
        lengths = np.array([c.shape for c in picked], dtype=np.int64).reshape(len(picked), len(_AXES))
        values = []
        for axis, longest in enumerate(lengths.max(axis=0).tolist()):
            rows = [c.values[axis] for c in picked]
            if any(len(r) < longest for r in rows):
                rows = [np.concatenate([r, np.repeat(r[:1], longest - len(r), axis=0)]) for r in rows]
            values.append(np.stack(rows))
        return cls(np.array(ids, dtype=np.int64), np.array([c.tp for c in picked], dtype=np.int64),
                   np.array([c.pp for c in picked], dtype=np.int64), tuple(values), lengths)

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid the rules are evaluated over: a leading axis of one (a broadcast Layouts' length, which the
        filters' np.ones(len(lay)) broadcast from, is then 1), the cells, then the padded axes."""
        return (1, len(self.ids), *(v.shape[1] for v in self.values))

    def flat_index(self) -> np.ndarray:
        """(C, padded block axes...) each block's index in its own cell's (unpadded) block grid."""
        lengths = self.lengths[:, :_BLOCK]
        strides = np.ones_like(lengths)
        strides[:, :-1] = np.cumprod(lengths[:, :0:-1], axis=1)[:, ::-1]
        shape = self.shape[1:2 + _BLOCK]
        out = np.zeros(shape, dtype=np.int64)
        for axis in range(_BLOCK):
            along = [1] * len(shape)
            along[0], along[1 + axis] = len(self.ids), shape[1 + axis]
            out = out + (np.arange(shape[1 + axis]) * strides[:, axis, None]).reshape(along)
        return out

    def padding(self) -> list[np.ndarray]:
        """Factors that are False on the padded values of each axis some cell has fewer values of."""
        out = []
        for axis, longest in enumerate(self.shape[2:]):
            if (self.lengths[:, axis] < longest).any():
                shape = [1] * len(self.shape)
                shape[1], shape[2 + axis] = len(self.ids), longest
                out.append((np.arange(longest) < self.lengths[:, axis, None]).reshape(shape))
        return out


def _fields(tp: np.ndarray, pp: np.ndarray, picked: list[np.ndarray], gbs: int, seq: int, space: SearchSpace
            ) -> dict[str, np.ndarray]:
    """The fields fixed by blocks of (tp, pp) and the values `picked` of each block axis (_AXES[:_BLOCK])."""
    c, e, s, b, x, r, p = picked
    n = len(tp)

    def full(value: object, dtype: type = np.int64) -> np.ndarray:
        return np.full(n, value, dtype=dtype)

    return {"tp": tp, "pp": pp, "cp": c, "ep": e[:, 0], "etp": e[:, 1],
            "vpp": s[:, 1], "schedule": s[:, 0].astype(np.int8), "mbs": b, "gbs": full(gbs), "seq": full(seq),
            "precision": x, "redundant_experts": r, "sp": p, "flash_attention": full(True, bool),
            "recompute_blocks": full(1.0, float), "dp_replicate": full(1),
            "p2p_overlap": p2p_overlap_default(pp, s[:, 0]),
            "pp_scatter_gather": space.pp_scatter_gather & scatter_gather_acts(tp, pp, p)}


def _block_fields(cell: _Cell, flat: np.ndarray, gbs: int, seq: int, space: SearchSpace) -> dict[str, np.ndarray]:
    """The fields fixed by each of the cell's blocks `flat` (indices into its block grid)."""
    index = np.unravel_index(flat, cell.block_shape)
    n = len(flat)
    return _fields(np.full(n, cell.tp, dtype=np.int64), np.full(n, cell.pp, dtype=np.int64),
                   [cell.values[i][j] for i, j in enumerate(index)], gbs, seq, space)


def _fields_of(cells: list[_Cell], cell_of: np.ndarray, flat: np.ndarray, gbs: int, seq: int, space: SearchSpace
               ) -> dict[str, np.ndarray]:
    """_block_fields of blocks from several cells, in the order given: each block's index unravelled over its
    own cell's block grid, its values read from the cells stacked (_Cells) in one gather per axis."""
    table = _Cells.of(cells, list(range(len(cells))))
    lengths = table.lengths[cell_of, :_BLOCK]
    picked, rest = [], flat
    for axis in range(_BLOCK - 1, -1, -1):
        rest, index = np.divmod(rest, lengths[:, axis])
        picked.append(table.values[axis][cell_of, index])
    return _fields(table.tp[cell_of], table.pp[cell_of], picked[::-1], gbs, seq, space)


def _representatives(fields: dict[str, np.ndarray]) -> Layouts:
    """One layout per block (its fields), the inner choices at their base values: what the bounds read."""
    n = len(fields["tp"])
    return Layouts(**fields, zero=np.zeros(n, np.int64), recompute=np.zeros(n, np.int8), tp_overlap=np.zeros(n, bool),
                   dispatch=np.zeros(n, np.int8), ep_overlap=np.zeros(n, bool))
