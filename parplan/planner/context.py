"""Per-layout quantities every cost formula needs, computed once per batch of layouts.

Rank placement (Megatron-Core default order, ``reference/ecosystem.md`` A2): tp is innermost, then cp,
then dp, then pp; the expert grid on the same ranks is etp, ep, edp, pp. Consecutive ranks fill a
scale-up domain (8 GPUs of an HGX node, 72 of a GB200 NVL72), so a group of n ranks spaced `stride`
apart has min(n, domain // stride) members per domain (1 when stride >= domain).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.strategy import PRECISIONS, RECOMPUTE, Layouts, scatter_gather_acts
from parplan.planner.workload import UNIFORM, Workload
from parplan.stacks.presets import load_stack
from parplan.stacks.spec import RECOMPUTE_KINDS, StackSpec

FP8 = PRECISIONS.index("fp8")
RC_NONE, RC_SELECTIVE, RC_MODULES, RC_FULL, RC_OP_SAC = (
    RECOMPUTE_KINDS.index(x) for x in ("none", "core_attention", "modules", "full", "op_sac"))
"""Codes of `Ctx.recompute`: what the layouts' recompute setting recomputes in the stack (RECOMPUTE_KINDS)."""

ACT_BYTES = 2
"""bf16/fp16 activations (formulas.md conventions)."""


def members_per_domain(domain: int, stride: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Members of a group (size `ranks`, spacing `stride`) that share one scale-up domain."""
    return np.clip(domain // np.maximum(stride, 1), 1, np.maximum(ranks, 1)).astype(float)


def recompute_kinds(stack: StackSpec) -> np.ndarray:
    """Code (RECOMPUTE_KINDS) of what each recompute name (strategy.RECOMPUTE, by index) means in `stack`."""
    return np.array([RECOMPUTE_KINDS.index(stack.recompute.get(name, "none")) for name in RECOMPUTE],
                    dtype=np.int8)


@dataclass(frozen=True, slots=True)
class Ctx:
    model: ModelSpec
    cluster: ClusterSpec
    lay: Layouts
    t: np.ndarray
    """tp degree."""
    p: np.ndarray
    c: np.ndarray
    e: np.ndarray
    et: np.ndarray
    v: np.ndarray
    b: np.ndarray
    """micro-batch size (sequences)."""
    s: np.ndarray
    """sequence length (tokens)."""
    dp: np.ndarray
    edp: np.ndarray
    """expert data-parallel size = gpus / (etp·ep·pp)."""
    m: np.ndarray
    """micro-batches per step per pipeline."""
    tokens: np.ndarray
    """Tokens of one micro-batch on one rank: b·s/cp (what the TP-split GEMMs see)."""
    tokens_sp: np.ndarray
    """Tokens of the norm/residual regions on one rank: tokens/tp with sequence parallelism."""
    tokens_moe: np.ndarray
    """Tokens entering an MoE layer on one rank (sequence-parallel shard when tp > 1)."""
    sp: np.ndarray
    scatter_gather: np.ndarray
    """Stage tensors scatter-gathered over TP (Strategy.pp_scatter_gather, where it acts: no SP, tp > 1)."""
    fp8: np.ndarray
    flash: np.ndarray
    recompute: np.ndarray
    """What each layout's recompute setting recomputes in this stack: codes of stacks.spec.RECOMPUTE_KINDS
    (RC_*); a name the stack does not define recomputes nothing here (the stack's rules refuse it)."""
    recompute_blocks: np.ndarray
    """Fraction of the transformer blocks that recompute applies to (Strategy.recompute_blocks)."""
    stack: StackSpec
    """The software stack the layouts run on: every stack fact the cost formulas read."""
    vocab_padded: np.ndarray
    """Vocabulary padded to a multiple of 128·tp (Megatron --make-vocab-size-divisible-by 128)."""
    tp_domain: np.ndarray
    cp_domain: np.ndarray
    dp_domain: np.ndarray
    """Members per scale-up domain of the dense gradient group (cp·dp ranks, stride tp)."""
    replicas: np.ndarray
    """Replicas of the sharded data-parallel group (Strategy.dp_replicate)."""
    shard: np.ndarray
    """Ranks of the dense ZeRO shard group: cp·dp/replicas (innermost, stride tp)."""
    shard_domain: np.ndarray
    """Members per scale-up domain of the dense shard group."""
    replica_domain: np.ndarray
    """Members per scale-up domain of the dense replica group (replicas ranks, stride tp·shard)."""
    eshard: np.ndarray
    """Ranks of the expert ZeRO shard group: edp/replicas."""
    eshard_domain: np.ndarray
    ereplica_domain: np.ndarray
    ep_domain: np.ndarray
    edp_domain: np.ndarray
    pp_same_domain: np.ndarray
    """True where adjacent pipeline stages share a scale-up domain."""
    redundant: np.ndarray
    """Redundant expert slots per MoE layer over the EP group."""
    ep_nodes: np.ndarray
    """Scale-up domains one EP group spans."""
    straggler: np.ndarray
    """Max/mean per-GPU expert load of the EP group (1 with a balanced router); workload.py."""

    def take(self, index: np.ndarray) -> Ctx:
        """The quantities of the layouts `index` picks (no recomputation)."""
        return dataclasses.replace(self, lay=self.lay.take(index), **{
            f.name: getattr(self, f.name)[index] for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), np.ndarray)})

    @classmethod
    def build(cls, model: ModelSpec, cluster: ClusterSpec, lay: Layouts, workload: Workload = UNIFORM,
              stack: StackSpec | None = None) -> Ctx:
        stack = stack if stack is not None else load_stack()
        f = np.asarray
        t, p, c, e, et = (f(x, dtype=np.int64) for x in (lay.tp, lay.pp, lay.cp, lay.ep, lay.etp))
        gpus = cluster.gpus
        dp = gpus // (t * p * c)
        edp = gpus // (et * e * p)
        r = np.maximum(f(lay.dp_replicate, dtype=np.int64), 1)
        b = lay.mbs.astype(float)
        s = lay.seq.astype(float)
        tokens = b * s / c
        sp = lay.sp & (t > 1)
        tokens_sp = np.where(sp, tokens / t, tokens)
        tokens_moe = np.where(t > 1, tokens / t, tokens)
        d = cluster.scaleup_domain
        stage_stride = t * c * dp
        ep_domain = members_per_domain(d, et, e)
        ep_nodes = np.ceil(e / ep_domain)
        straggler = np.ones(len(lay))
        if workload.expert_load is not None and model.moe is not None:
            keys = np.stack([e, lay.redundant_experts, ep_nodes.astype(np.int64)], axis=1)
            uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
            factors = np.array([workload.straggler(model, int(a), int(r), int(nd)) for a, r, nd in uniq])
            straggler = factors[inverse.ravel()]
        return cls(
            model=model, cluster=cluster, lay=lay, t=t, p=p, c=c, e=e, et=et, v=lay.vpp.astype(np.int64),
            b=b, s=s, dp=dp, edp=edp, m=lay.gbs // np.maximum(1, dp * lay.mbs),
            tokens=tokens, tokens_sp=tokens_sp, tokens_moe=tokens_moe, sp=sp,
            scatter_gather=lay.pp_scatter_gather & scatter_gather_acts(t, p, sp),
            fp8=lay.precision == FP8, flash=lay.flash_attention.astype(bool),
            recompute=recompute_kinds(stack)[lay.recompute], recompute_blocks=lay.recompute_blocks.astype(float),
            stack=stack,
            vocab_padded=np.ceil(model.vocab / (128 * t)) * 128 * t,
            tp_domain=members_per_domain(d, np.ones_like(t), t),
            cp_domain=members_per_domain(d, t, c),
            dp_domain=members_per_domain(d, t, c * dp),
            replicas=r.astype(float), shard=(c * dp // r).astype(float),
            shard_domain=members_per_domain(d, t, c * dp // r),
            replica_domain=members_per_domain(d, t * c * dp // r, r),
            eshard=(edp // r).astype(float),
            eshard_domain=members_per_domain(d, et * e, edp // r),
            ereplica_domain=members_per_domain(d, et * e * (edp // r), r),
            ep_domain=ep_domain,
            edp_domain=members_per_domain(d, et * e, edp),
            pp_same_domain=stage_stride * 2 <= d,
            redundant=lay.redundant_experts.astype(float), ep_nodes=ep_nodes, straggler=straggler,
        )
