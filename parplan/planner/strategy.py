"""How the model is split: one parallel layout (`Strategy`) and a batch of them (`Layouts`).

Degrees follow Megatron-Core: ranks are ordered tp (innermost), cp, dp, pp (outermost) for the dense
part; ``dp = gpus / (tp·pp·cp)``. Expert parallelism is carved out of the same ranks, not multiplied in
("parallel folding"): the expert grid is etp (innermost), ep, edp, pp with ``edp = gpus / (etp·ep·pp)``
(``reference/ecosystem.md`` A2, rule 6).

Validation rules are written once, vectorised over `Layouts`; a single `Strategy` is checked by the very
same rules and the first one it breaks is reported with its reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parplan.errors import InvalidStrategyError
from parplan.hardware.spec import ClusterSpec
from parplan.limits import MAX_BATCH, MAX_GPUS, MAX_SEQ
from parplan.models.spec import RANGES, ModelSpec
from parplan.names import BLOCKS_PREFIX, DISPATCHERS, PRECISIONS, RECOMPUTE, SCHEDULES

__all__ = ["BLOCKS_PREFIX", "DISPATCHERS", "PRECISIONS", "RECOMPUTE", "SCHEDULES", "Layouts", "Rule", "Strategy",
           "parse_blocks", "recompute_label", "valid_mask"]


def parse_blocks(text: str) -> float:
    """The fraction F of a "blocks:F" recompute setting (a decimal or a ratio such as 1/3), in (0, 1]."""
    value = text[len(BLOCKS_PREFIX):].strip()
    try:
        num, _, den = value.partition("/")
        fraction = float(num) / float(den) if den else float(num)
    except (ValueError, ZeroDivisionError):
        raise InvalidStrategyError(f"recompute {text!r}: F must be a number or a ratio such as 1/3") from None
    if not 0.0 < fraction <= 1.0:
        raise InvalidStrategyError(f"recompute {text!r}: the fraction of blocks must be in (0, 1], got {fraction:g}")
    return fraction


def recompute_label(recompute: str, blocks: float) -> str:
    """How a recompute setting reads: its name, or blocks:F for full recompute of a fraction of the blocks."""
    if recompute != "full" or blocks >= 1.0:
        return recompute
    n = round(1.0 / blocks)
    return f"{BLOCKS_PREFIX}1/{n}" if abs(1.0 / n - blocks) < 1e-12 else f"{BLOCKS_PREFIX}{blocks!r}"


def scatter_gather_acts(tp: np.ndarray | int, pp: np.ndarray | int, sp: np.ndarray | bool) -> np.ndarray:
    """Where scatter-gathering stage tensors has anything to do: a stage boundary (pp > 1) between TP groups
    (tp > 1) whose tensor SP has not already sharded. Strategy normalises the flag with it, the search sets
    it with it, and the cost model reads it through it."""
    return (np.asarray(tp) > 1) & (np.asarray(pp) > 1) & ~np.asarray(sp, dtype=bool)


def p2p_overlap_acts(pp: np.ndarray | int, schedule: np.ndarray | int) -> np.ndarray:
    """Where overlapping stage-to-stage transfers with compute is a choice: the interleaved schedule (a code
    into SCHEDULES) with pp > 1 (--no-overlap-p2p-communication turns Megatron-Core's overlap off)."""
    return (np.asarray(pp) > 1) & (np.asarray(schedule) == SCHEDULES.index("interleaved"))


def p2p_overlap_default(pp: np.ndarray | int, schedule: np.ndarray | int) -> np.ndarray:
    """Whether a schedule overlaps its transfers: the interleaved one by default (`p2p_overlap_acts`),
    DualPipe(V) always (it is built around it); 1F1B and ZB-H1 wait for each transfer (Megatron's
    validate_args sets overlap_p2p_comm False without virtual stages, megatron/training/arguments.py) and
    pp = 1 has none. Strategy normalises the flag with it where it is no choice, the search sets it, and the
    cost model reads the flag alone."""
    schedule = np.asarray(schedule)
    overlapping = ((schedule == SCHEDULES.index("interleaved")) | (schedule == SCHEDULES.index("dualpipe"))
                   | (schedule == SCHEDULES.index("dualpipev")))
    return (np.asarray(pp) > 1) & overlapping


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """One parallel layout and batch setting of a training run."""

    tp: int = 1
    """Tensor-parallel degree (Megatron --tensor-model-parallel-size)."""
    pp: int = 1
    """Pipeline stages."""
    cp: int = 1
    """Context-parallel degree: the sequence is split over cp ranks (ring attention)."""
    ep: int = 1
    """Expert-parallel degree: routed experts are split over ep ranks carved from tp·cp·dp."""
    etp: int = 1
    """Tensor parallelism inside each expert."""
    vpp: int = 1
    """Model chunks per pipeline rank (Megatron's interleaved schedule; DualPipeV holds 2)."""
    zero: int = 1
    """ZeRO stage over the data-parallel group: 0 plain DDP, 1 optimizer states (Megatron distributed
    optimizer), 2 + gradients, 3 + parameters (FSDP full shard)."""
    dp_replicate: int = 1
    """Replicas of the sharded data-parallel group: ZeRO shards over cp·dp/dp_replicate ranks and each shard's
    gradients are then all-reduced over the dp_replicate replicas (HSDP: torchtitan
    data_parallel_replicate_degree, FSDP HYBRID_SHARD, MaxText dcn_data_parallelism; Megatron
    --num-distributed-optimizer-instances). 1: one group over all of cp·dp."""
    sp: bool = True
    """Megatron sequence parallelism on the TP group (ignored when tp = 1)."""
    recompute: str = "none"
    """Activation recomputation, from light to heavy: none; selective (Megatron: the attention core,
    Korthikanti 2022); modules (also the norms, the MoE activation function and MLA's up-projections: Megatron
    --recompute-modules core_attn layernorm moe_act mla_up_proj, what DeepSeek-V3 recomputes); full (each
    layer from its input). What a name recomputes is the stack's (StackSpec.recompute: torchtitan's
    selective is per-op SAC). "blocks:F" is full recompute of a fraction F of the transformer blocks
    (torchtitan selective_ac_option N = blocks:1/N, fms-fsdp selective_checkpointing p, Megatron
    --recompute-method block --recompute-num-layers): it sets recompute full and recompute_blocks F."""
    recompute_blocks: float = 1.0
    """Fraction of the transformer blocks `recompute` applies to (0 < F <= 1); the other blocks keep their
    activations. 1.0 with recompute none."""
    mbs: int = 1
    """Micro-batch size, sequences per pipeline micro-batch per data-parallel rank."""
    gbs: int = 1
    """Global batch, sequences per optimizer step."""
    seq: int = 4096
    """Sequence length, tokens."""
    schedule: str = "1f1b"
    """Pipeline schedule: 1f1b, interleaved, zb-h1, dualpipe or dualpipev."""
    precision: str = "bf16"
    """GEMM precision: bf16, or fp8 (Transformer Engine style; attention and states stay bf16/fp32)."""
    flash_attention: bool = True
    """Fused flash attention; False means the unfused kernels that materialise the s×s scores
    (Megatron before 2023)."""
    tp_overlap: bool = False
    """Overlap TP communication with GEMMs (Megatron --tp-comm-overlap; needs sp)."""
    dispatch: str = "alltoall"
    """MoE token dispatch: alltoall, deepep or deepep-fp8 (see DISPATCHERS)."""
    redundant_experts: int = 0
    """Extra physical expert slots per MoE layer over the EP group, filled by EPLB with copies of the
    busiest experts (a multiple of ep)."""
    ep_overlap: bool = False
    """Overlap each micro-batch's EP all-to-all with another micro-batch's compute (Megatron
    --overlap-moe-expert-parallel-comm: interleaved schedule or pp = 1). DualPipe(V) always does this and
    leaves the flag off."""
    p2p_overlap: bool = True
    """Stage-to-stage transfers overlap compute. A choice only for the interleaved schedule with pp > 1
    (Megatron-Core's default; --no-overlap-p2p-communication turns it off, and Megatron-LM before 2023 had
    no such overlap); normalised to what the schedule does elsewhere: off for 1F1B, ZB-H1 and pp = 1 (they
    wait for each transfer), on for DualPipe(V)."""
    pp_scatter_gather: bool = False
    """Scatter-gather of stage-boundary tensors without SP: each TP rank sends 1/tp of the tensor and the
    receiving ranks all-gather it over NVLink. Megatron-LM did this before Megatron-Core (Narayanan 2021 §4.1,
    on unless --no-scatter-gather-tensors-in-pipeline) and DeepSpeed's pipeline engine does it
    (PartitionedTensor over the model-parallel group); Megatron-Core dropped it (SP shards the tensor
    already), so plans leave it off. Ignored, and normalised off, where tp = 1, pp = 1 or SP is on."""

    def __post_init__(self) -> None:
        if isinstance(self.recompute, str) and self.recompute.startswith(BLOCKS_PREFIX):
            object.__setattr__(self, "recompute_blocks", parse_blocks(self.recompute))
            object.__setattr__(self, "recompute", "full")
        if not 0.0 < self.recompute_blocks <= 1.0:
            raise InvalidStrategyError(f"recompute_blocks must be in (0, 1], got {self.recompute_blocks}")
        for name, options in _CATEGORIES.items():
            _code(options, getattr(self, name), name)  # an unknown name fails here, not at first use
        # Counts out of range fail here rather than as a division by zero in dp() or an int64 overflow in
        # Layouts; the search meets the same lower bounds as the vectorised "positive" and "zero_stage" rules.
        for name, (least, most) in _LIMITS.items():
            if not least <= getattr(self, name) <= most:
                raise InvalidStrategyError(f"{name} must lie in {least}..{most:,}, got {getattr(self, name):,}",
                                           field=name)
        if self.tp == 1:
            # Megatron silently turns SP off at tp=1 (ecosystem.md A2), and TP overlap has nothing to overlap;
            # normalise so equal layouts compare equal.
            object.__setattr__(self, "sp", False)
            object.__setattr__(self, "tp_overlap", False)
        if self.zero == 0:
            object.__setattr__(self, "dp_replicate", 1)  # nothing is sharded: one all-reduce over all of dp
        if self.recompute == "none":
            object.__setattr__(self, "recompute_blocks", 1.0)  # nothing to apply to a fraction of
        schedule = SCHEDULES.index(self.schedule)
        if not p2p_overlap_acts(self.pp, schedule):
            object.__setattr__(self, "p2p_overlap", bool(p2p_overlap_default(self.pp, schedule)))
        if not scatter_gather_acts(self.tp, self.pp, self.sp):
            object.__setattr__(self, "pp_scatter_gather", False)

    def dp(self, gpus: int) -> int:
        return gpus // (self.tp * self.pp * self.cp)

    def microbatches(self, gpus: int) -> int:
        """Micro-batches each pipeline runs per step: gbs / (dp·mbs)."""
        return self.gbs // max(1, self.dp(gpus) * self.mbs)

    def describe(self, gpus: int) -> str:
        """The layout in one line: parallel degrees (those that are not 1 beyond tp, pp, dp), then the batch,
        the sequence and every switch that is not its default."""
        parts = [f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp(gpus)}"]
        parts += [f"{name}={value}" for name, value in (("cp", self.cp), ("ep", self.ep), ("etp", self.etp),
                                                          ("vpp", self.vpp), ("dp_replicate", self.dp_replicate))
                  if value != 1]
        parts += [f"zero={self.zero}", "sp" if self.sp else "no-sp",
                  f"recompute={recompute_label(self.recompute, self.recompute_blocks)}",
                  f"mbs={self.mbs}", f"gbs={self.gbs}", f"seq={self.seq}", self.schedule, self.precision]
        flags = (("unfused-attention", not self.flash_attention), ("tp-overlap", self.tp_overlap),
                 (self.dispatch, self.dispatch != "alltoall"),
                 (f"redundant-experts={self.redundant_experts}", self.redundant_experts > 0),
                 ("ep-overlap", self.ep_overlap),
                 ("no-p2p-overlap", self.p2p_overlap != p2p_overlap_default(self.pp, SCHEDULES.index(self.schedule))),
                 ("pp-scatter-gather", self.pp_scatter_gather))
        return " ".join(parts + [text for text, on in flags if on])

    def as_dict(self, gpus: int | None = None) -> dict[str, object]:
        d = dataclasses.asdict(self)
        if gpus is not None:
            d["dp"] = self.dp(gpus)
            d["microbatches"] = self.microbatches(gpus)
        return d

    def check(self, model: ModelSpec, cluster: ClusterSpec) -> None:
        """Raise InvalidStrategyError naming the first rule this layout breaks."""
        lay = Layouts.from_strategies([self])
        for rule in RULES:
            if not bool(rule.ok(lay, model, cluster)[0]):
                raise InvalidStrategyError(rule.message(self, model, cluster))


_LIMITS = {"tp": (1, MAX_GPUS), "pp": (1, MAX_GPUS), "cp": (1, MAX_GPUS), "ep": (1, MAX_GPUS), "etp": (1, MAX_GPUS),
           "vpp": (1, RANGES["layers"][1]), "mbs": (1, MAX_BATCH), "gbs": (1, MAX_BATCH), "seq": (1, MAX_SEQ),
           "zero": (0, 3), "redundant_experts": (0, MAX_GPUS)}
"""Range of each count of a Strategy: a degree beyond the largest cluster, a batch or sequence beyond any
run, are refused when the Strategy is built (the rules then see only sane numbers)."""

_CATEGORIES: dict[str, tuple[str, ...]] = {"recompute": RECOMPUTE, "schedule": SCHEDULES, "precision": PRECISIONS,
                                           "dispatch": DISPATCHERS}
"""Strategy fields that take one of a list of names; Layouts holds their index in it. The other fields are
ints and bools, held as such."""


@dataclass(frozen=True, slots=True)
class Layouts:
    """A batch of N layouts as parallel numpy arrays (struct of arrays), one per Strategy field; categorical
    fields are codes into their _CATEGORIES tuple."""

    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    vpp: np.ndarray
    zero: np.ndarray
    dp_replicate: np.ndarray
    mbs: np.ndarray
    gbs: np.ndarray
    seq: np.ndarray
    sp: np.ndarray
    recompute: np.ndarray
    recompute_blocks: np.ndarray
    schedule: np.ndarray
    precision: np.ndarray
    flash_attention: np.ndarray
    tp_overlap: np.ndarray
    dispatch: np.ndarray
    redundant_experts: np.ndarray
    ep_overlap: np.ndarray
    p2p_overlap: np.ndarray
    pp_scatter_gather: np.ndarray

    @classmethod
    def from_strategies(cls, strategies: list[Strategy]) -> Layouts:
        cols = {}
        for f in dataclasses.fields(Strategy):
            values = [getattr(s, f.name) for s in strategies]
            if f.name in _CATEGORIES:
                cols[f.name] = np.array([_code(_CATEGORIES[f.name], v, f.name) for v in values], dtype=np.int8)
            else:
                cols[f.name] = np.array(values, dtype={"bool": bool, "float": float}.get(f.type, np.int64))
        return cls(**cols)

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, index: np.ndarray) -> Layouts:
        return Layouts(**{f.name: getattr(self, f.name)[index] for f in dataclasses.fields(self)})

    def strategy(self, i: int) -> Strategy:
        kw: dict[str, object] = {}
        for f in dataclasses.fields(Strategy):
            value = getattr(self, f.name)[i]
            kw[f.name] = (_CATEGORIES[f.name][int(value)] if f.name in _CATEGORIES
                          else {"bool": bool, "float": float}.get(f.type, int)(value))
        return Strategy(**kw)

    def dp(self, gpus: int) -> np.ndarray:
        return gpus // (self.tp * self.pp * self.cp)

    def microbatches(self, gpus: int) -> np.ndarray:
        return self.gbs // np.maximum(1, self.dp(gpus) * self.mbs)


def _code(options: tuple[str, ...], value: str, name: str) -> int:
    if value not in options:
        raise InvalidStrategyError(f"{name} must be one of {', '.join(options)}, got '{value}'")
    return options.index(value)


# ------------------------------------------------------------------------------------------------ rules

@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    ok: Callable[[Layouts, ModelSpec, ClusterSpec], np.ndarray]
    message: Callable[[Strategy, ModelSpec, ClusterSpec], str]
    time_only: bool = False
    """Reads a field that changes the step time but not memory (tp_overlap, dispatch, ep_overlap): the search
    checks it when it expands those fields after the memory check."""


def _experts(m: ModelSpec) -> int:
    return m.moe.experts if m.moe else 1


def _sched(lay: Layouts, name: str) -> np.ndarray:
    return lay.schedule == SCHEDULES.index(name)


RULES: tuple[Rule, ...] = (
    Rule("positive",
         lambda lay, m, c: (lay.tp >= 1) & (lay.pp >= 1) & (lay.cp >= 1) & (lay.ep >= 1) & (lay.etp >= 1)
         & (lay.vpp >= 1) & (lay.mbs >= 1) & (lay.gbs >= 1) & (lay.seq >= 1),
         lambda s, m, c: "every degree, mbs, gbs and seq must be >= 1"),
    Rule("recompute_blocks", lambda lay, m, c: (lay.recompute_blocks > 0) & (lay.recompute_blocks <= 1),
         lambda s, m, c: f"recompute_blocks must be in (0, 1], got {s.recompute_blocks}"),
    Rule("zero_stage", lambda lay, m, c: (lay.zero >= 0) & (lay.zero <= 3),
         lambda s, m, c: f"zero must be 0, 1, 2 or 3, got {s.zero}"),
    Rule("grid_divides_gpus", lambda lay, m, c: c.gpus % (lay.tp * lay.pp * lay.cp) == 0,
         lambda s, m, c: f"tp·pp·cp = {s.tp}·{s.pp}·{s.cp} = {s.tp * s.pp * s.cp} does not divide the "
                         f"{c.gpus} GPUs (dp = gpus / (tp·pp·cp) must be a whole number)"),
    Rule("dp_replicate", lambda lay, m, c: (lay.dp_replicate >= 1) & (lay.dp(c.gpus) % lay.dp_replicate == 0)
         & ((lay.dp_replicate == 1) | ((c.gpus // lay.pp) % (lay.ep * lay.etp * lay.dp_replicate) == 0)),
         lambda s, m, c: f"dp_replicate={s.dp_replicate} must divide dp = {s.dp(c.gpus)} and the expert data-"
                         f"parallel size {c.gpus // s.pp // (s.ep * s.etp)} (each replica holds whole shards)"),
    Rule("tp_divides_heads", lambda lay, m, c: m.attention.heads % lay.tp == 0,
         lambda s, m, c: f"tp={s.tp} must divide the {m.attention.heads} attention heads"),
    Rule("tp_divides_kv_heads", lambda lay, m, c: m.attention.kv_heads % lay.tp == 0,
         lambda s, m, c: f"tp={s.tp} must divide the {m.attention.kv_heads} key/value heads "
                         f"(Megatron: num_query_groups % tp == 0)"),
    Rule("tp_divides_ffn", lambda lay, m, c: m.mlp.ffn % lay.tp == 0,
         lambda s, m, c: f"tp={s.tp} must divide the MLP width {m.mlp.ffn}"),
    Rule("ep_needs_moe", lambda lay, m, c: (lay.ep == 1) | (m.moe is not None),
         lambda s, m, c: f"ep={s.ep} needs a mixture-of-experts model; {m.name} is dense"),
    Rule("ep_divides_experts", lambda lay, m, c: _experts(m) % lay.ep == 0,
         lambda s, m, c: f"ep={s.ep} must divide the {_experts(m)} routed experts"),
    Rule("etp_divides_expert_ffn",
         lambda lay, m, c: (m.moe.expert_ffn if m.moe else 1) % lay.etp == 0,
         lambda s, m, c: f"etp={s.etp} must divide the expert width {m.moe.expert_ffn if m.moe else 1}"),
    Rule("expert_grid_divides_gpus", lambda lay, m, c: (c.gpus // lay.pp) % (lay.ep * lay.etp) == 0,
         lambda s, m, c: f"ep·etp = {s.ep * s.etp} must divide the {c.gpus // s.pp} GPUs of a pipeline "
                         f"stage (edp = gpus / (etp·ep·pp) must be a whole number)"),
    Rule("moe_tp_needs_sp", lambda lay, m, c: (m.moe is None) | (lay.tp == 1) | lay.sp,
         lambda s, m, c: "MoE with tp > 1 needs sequence parallelism (Megatron asserts it); set sp"),
    Rule("gbs_multiple", lambda lay, m, c: lay.gbs % np.maximum(1, lay.dp(c.gpus) * lay.mbs) == 0,
         lambda s, m, c: f"gbs={s.gbs} must be a multiple of dp·mbs = {s.dp(c.gpus)}·{s.mbs} = "
                         f"{s.dp(c.gpus) * s.mbs}"),
    Rule("cp_divides_seq", lambda lay, m, c: (lay.cp == 1) | (lay.seq % (2 * lay.cp) == 0),
         lambda s, m, c: f"seq={s.seq} must be a multiple of 2·cp = {2 * s.cp} (causal load-balanced "
                         f"context parallelism splits it into 2·cp chunks)"),
    Rule("sp_divides_seq", lambda lay, m, c: ~lay.sp | ((lay.seq // lay.cp) % lay.tp == 0),
         lambda s, m, c: f"with sequence parallelism tp={s.tp} must divide the {s.seq // s.cp} tokens per "
                         f"context-parallel rank"),
    Rule("tp_overlap_needs_sp", lambda lay, m, c: ~lay.tp_overlap | lay.sp,
         lambda s, m, c: "tp_overlap needs sequence parallelism (Megatron --tp-comm-overlap asserts it)",
         time_only=True),
    # The first and last virtual stages may hold only the embedding and the loss (Llama 3 §3.3.2: 126 layers on
    # 128 virtual stages), so pp·vpp may exceed the layers by two.
    Rule("pp_layers", lambda lay, m, c: lay.pp * lay.vpp <= m.layers + 2,
         lambda s, m, c: f"pp·vpp = {s.pp * s.vpp} virtual stages exceed the {m.layers} layers plus the embedding's "
                         f"and the loss's stages"),
    Rule("schedule_needs_pp", lambda lay, m, c: _sched(lay, "1f1b") | (lay.pp > 1),
         lambda s, m, c: f"schedule {s.schedule} needs pp > 1"),
    Rule("interleaved_vpp",
         lambda lay, m, c: np.where(_sched(lay, "interleaved"), lay.vpp >= 2,
                                    np.where(_sched(lay, "dualpipev"), lay.vpp == 2, lay.vpp == 1)),
         lambda s, m, c: ("the interleaved schedule needs vpp >= 2" if s.schedule == "interleaved" else
                          "DualPipeV holds two stages per rank: vpp must be 2" if s.schedule == "dualpipev"
                          else f"vpp={s.vpp} needs the interleaved schedule (or dualpipev with vpp=2)")),
    Rule("interleaved_microbatches",
         lambda lay, m, c: ~_sched(lay, "interleaved") | (lay.microbatches(c.gpus) % lay.pp == 0),
         lambda s, m, c: f"the interleaved schedule needs the micro-batch count to be a multiple of pp={s.pp} "
                         f"(Megatron groups micro-batches by pp; a partial group adds bubble), got "
                         f"{s.microbatches(c.gpus)}"),
    Rule("dualpipe_even_pp", lambda lay, m, c: ~_sched(lay, "dualpipe") | (lay.pp % 2 == 0),
         lambda s, m, c: f"DualPipe needs an even pp, got {s.pp}"),
    Rule("dualpipe_microbatches",
         lambda lay, m, c: ~(_sched(lay, "dualpipe") | _sched(lay, "dualpipev"))
         | ((lay.microbatches(c.gpus) >= 2 * lay.pp)
            & (~_sched(lay, "dualpipe") | (lay.microbatches(c.gpus) % 2 == 0))),
         lambda s, m, c: f"{s.schedule} needs at least 2·pp = {2 * s.pp} micro-batches"
                         f"{' (an even number)' if s.schedule == 'dualpipe' else ''}, got "
                         f"{s.microbatches(c.gpus)}"),
    Rule("fp8_supported", lambda lay, m, c: (lay.precision != PRECISIONS.index("fp8")) | c.gpu.supports_fp8,
         lambda s, m, c: f"{c.gpu.name} has no fp8 tensor cores; use precision bf16"),
    Rule("dispatch_needs_moe", lambda lay, m, c: (lay.dispatch == 0) | (m.moe is not None),
         lambda s, m, c: f"dispatch={s.dispatch} applies to mixture-of-experts models; {m.name} is dense",
         time_only=True),
    # DeepSeek-V3 dispatches in fp8 because its expert GEMMs take fp8 inputs anyway (§3.3); under bf16
    # GEMMs an fp8 dispatch would change the numerics, so it goes with fp8 training only.
    Rule("fp8_dispatch_needs_fp8",
         lambda lay, m, c: (lay.dispatch != DISPATCHERS.index("deepep-fp8"))
         | (lay.precision == PRECISIONS.index("fp8")),
         lambda s, m, c: "dispatch deepep-fp8 goes with precision fp8 (the expert GEMMs quantise their inputs "
                         "anyway); use deepep with bf16", time_only=True),
    Rule("redundant_experts",
         lambda lay, m, c: (lay.redundant_experts == 0) | ((m.moe is not None) & (lay.redundant_experts > 0)
                                                           & (lay.redundant_experts % lay.ep == 0)),
         lambda s, m, c: ("redundant experts need a mixture-of-experts model" if m.moe is None else
                          f"redundant_experts={s.redundant_experts} must be a non-negative multiple of ep={s.ep} "
                          "(every EP rank holds the same number of expert slots; EPLB)")),
    # Megatron-LM's checks for --overlap-moe-expert-parallel-comm (megatron/training/arguments.py): it pairs
    # the forward of one micro-batch with the backward of another, so it needs ep > 1, a virtual pipeline
    # when pp > 1 (or no pipeline and two micro-batches), and no full recompute.
    Rule("ep_overlap",
         lambda lay, m, c: ~lay.ep_overlap | ((m.moe is not None) & (lay.ep > 1)
                                              & (lay.recompute != RECOMPUTE.index("full"))
                                              & (_sched(lay, "interleaved")
                                                 | ((lay.pp == 1) & (lay.microbatches(c.gpus) >= 2)))),
         lambda s, m, c: ("ep_overlap needs a mixture-of-experts model" if m.moe is None else
                          "ep_overlap needs ep > 1" if s.ep == 1 else
                          "ep_overlap cannot be combined with full recompute (Megatron asserts it)"
                          if s.recompute == "full" else
                          "DualPipe overlaps the all-to-all by construction: leave ep_overlap off"
                          if s.schedule.startswith("dualpipe") else
                          "ep_overlap needs the interleaved schedule (vpp > 1) when pp > 1, or pp = 1 with at least "
                          "two micro-batches"), time_only=True),
)


def valid_mask(lay: Layouts, model: ModelSpec, cluster: ClusterSpec,
               rules: tuple[Rule, ...] = RULES) -> np.ndarray:
    """True where a layout passes every rule (or every one of `rules`)."""
    ok = np.ones(len(lay), dtype=bool)
    for rule in rules:
        ok &= np.asarray(rule.ok(lay, model, cluster), dtype=bool)
    return ok
