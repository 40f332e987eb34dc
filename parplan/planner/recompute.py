"""What each recompute kind re-runs in backward (stacks.spec.RECOMPUTE_KINDS), written once as a table, and its
time per layer and its FLOPs.

A kind recomputes the forward of some of the layer's linears (a share of each one's GEMM work), possibly the
attention core, none / the norms / all of the element-wise ops, and a share of the forward communication the
layer waited for. A stack says which kind each recompute name is (StackSpec.recompute).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from parplan.models.spec import Block, LayerKind, Linear, ModelSpec
from parplan.planner import compute
from parplan.planner.context import Ctx
from parplan.stacks.spec import RECOMPUTE_KINDS

LinearShare = Callable[[ModelSpec, LayerKind, bool], Callable[[Linear], float]]
"""(model, layer kind, fp8 on) -> the share of each linear's forward GEMM work a kind recomputes."""


def _none(model: ModelSpec, kind: LayerKind, fp8: bool) -> Callable[[Linear], float]:
    return lambda lin: 0.0


def _all(model: ModelSpec, kind: LayerKind, fp8: bool) -> Callable[[Linear], float]:
    return lambda lin: 1.0


def _named(*names: str) -> LinearShare:
    def share(model: ModelSpec, kind: LayerKind, fp8: bool) -> Callable[[Linear], float]:
        return lambda lin: float(lin.name in names)
    return share


def _all_but(*names: str) -> LinearShare:
    def share(model: ModelSpec, kind: LayerKind, fp8: bool) -> Callable[[Linear], float]:
        return lambda lin: float(lin.name not in names)
    return share


def mm_parts(model: ModelSpec, lin: Linear) -> tuple[int, ...]:
    """Output widths of the separate matmuls a PyTorch-native model (torchtitan's Llama) runs for one of
    parplan's linears: the fused qkv is wq, wk, wv; a gated MLP's up-projection is w1 (gate) then w3 (up)."""
    a = model.attention
    if lin.name == "qkv":
        q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
        return (q, kv, kv)
    if lin.name.endswith("_up") and model.mlp.gated and lin.block is not Block.ATTENTION:
        return (lin.d_out // 2, lin.d_out // 2)
    return (lin.d_out,)


def _every_second_mm(model: ModelSpec, kind: LayerKind, fp8: bool) -> Callable[[Linear], float]:
    """torchtitan's per-op SAC (parallelize_llama.py @820504e): a block's aten.mm calls are counted in forward
    order and every second one is recomputed; the routed experts run as grouped GEMMs, which the save list does
    not name, so they are recomputed. Under float8 the same holds: torchao's Float8Linear calls torch.mm on its
    float8 tensor subclass (torchao/float8/float8_linear.py matmul_with_hp_or_float8_args), and the policy's
    dispatch mode sees that aten.mm before the subclass turns it into torch._scaled_mm; the torchao e2e tables
    measure the same peak memory with float8 as with bf16 under per-op SAC (47.6 vs 47.8 GiB on H100)."""
    shares: dict[str, float] = {}
    count = 0
    for lin in model.layer_linears(kind):
        if lin.block is Block.EXPERTS:
            shares[lin.name] = 1.0
            continue
        parts = mm_parts(model, lin)
        recomputed = 0
        for width in parts:
            count += 1
            recomputed += width if count % 2 == 0 else 0
        shares[lin.name] = recomputed / sum(parts)
    return lambda lin: shares.get(lin.name, 0.0)


@dataclass(frozen=True, slots=True)
class Recomputed:
    """What one recompute kind re-runs in backward, per recomputed layer."""

    linears: LinearShare = _none
    attention: bool = False
    """The attention core (QKᵀ, softmax, P·V)."""
    elementwise: str = "none"
    """none, norms (the norms and the MoE activation: Megatron's layernorm and moe_act modules) or all."""
    communication: float = 0.0
    """Share of the layer's exposed forward communication repeated (full recompute: all of it)."""


RECOMPUTED: dict[str, Recomputed] = {
    "none": Recomputed(),
    # Korthikanti et al. 2022 §5: only the attention core.
    "core_attention": Recomputed(attention=True),
    # Megatron --recompute-modules core_attn layernorm moe_act mla_up_proj (transformer_config.py).
    "modules": Recomputed(linears=_named(*compute.MLA_UP_PROJECTIONS), attention=True, elementwise="norms"),
    "full": Recomputed(linears=_all, attention=True, elementwise="all", communication=1.0),
    # The SAC save list keeps SDPA outputs and reduce_scatter results; the all-gathers (half of the SP
    # collectives) and every element-wise op are recomputed.
    "op_sac": Recomputed(linears=_every_second_mm, elementwise="all", communication=0.5),
    # MaxText remat policies (layers/decoders.py): save_dot_except_mlpwi keeps q/k/v/out-proj and mlpwo outputs;
    # save_qkv_proj keeps only the q/k/v projections.
    "save_dot_except_mlpwi": Recomputed(linears=_named("mlp_up", "expert_up", "shared_up"), attention=True,
                                        elementwise="all"),
    "save_qkv_proj": Recomputed(linears=_all_but("qkv", "q_down", "kv_down", "q_proj", "q_up", "kv_up"),
                                attention=True, elementwise="all", communication=1.0),
}
assert tuple(RECOMPUTED) == RECOMPUTE_KINDS


def layer_recompute_time(ctx: Ctx, kind: LayerKind, lt: compute.LayerTime, exposed_f: np.ndarray,
                         run: Callable[..., Any]) -> np.ndarray:
    """Seconds one layer's recomputation adds to its backward, averaged over the layers (a fraction
    recompute_blocks of them recompute, the others keep their activations). `run(fn, *args)` is fn(ctx, *args)
    for a compute function (estimate._ComputeRows: once per distinct compute combination)."""
    out = np.zeros(len(ctx.lay))
    for code in np.unique(ctx.recompute):
        what = RECOMPUTED[RECOMPUTE_KINDS[int(code)]]
        where = ctx.recompute == code
        t = np.zeros(len(ctx.lay))
        if what.linears is _all:
            t = t + lt.gemm_f
        elif what.linears is not _none:
            for fp8 in (False, True):
                share = what.linears(ctx.model, kind, fp8)
                t = t + np.where(ctx.fp8 == fp8, run(compute.gemm_work, kind, share).forward, 0.0)
        if what.attention:
            t = t + lt.attn_f
        if what.elementwise == "all":
            t = t + lt.elem_f + lt.launch_f
        elif what.elementwise == "norms":
            t = t + run(compute.norm_recompute_time, kind)
        t = t + what.communication * exposed_f
        out = np.where(where, t, out)
    return ctx.recompute_blocks * out


def communication_share(ctx: Ctx) -> np.ndarray:
    """Share of each layout's forward communication its recomputation repeats (for the wire totals)."""
    shares = np.array([RECOMPUTED[k].communication for k in RECOMPUTE_KINDS])
    return ctx.recompute_blocks * shares[ctx.recompute]


@functools.lru_cache(maxsize=1024)
def recompute_flops_per_token(model: ModelSpec, seq: float, kind_name: str, fp8: bool) -> float:
    """Forward FLOPs per token that recompute kind `kind_name` repeats over all layers (HFU's extra work).
    Memoised: every batch of layouts asks for it, and it walks every layer's linears."""
    what = RECOMPUTED[kind_name]
    flops = model.attention_core_flops_per_token(seq) if what.attention else 0.0
    for kind in model.layer_kinds():
        share = what.linears(model, kind, fp8)
        flops += sum(share(lin) * lin.flops_per_token for lin in model.layer_linears(kind))
    return flops


_ELEMENTWISE_ORDER = ("none", "norms", "all")


def recomputes_no_more(model: ModelSpec, a: str, b: str) -> bool:
    """Whether recompute kind `a` re-runs no more than kind `b` in every layer of `model`, under either
    precision: no linear's share larger, the attention core only if b re-runs it, no more element-wise ops
    (none < norms < all) and no larger share of the communication. Each term of layer_recompute_time then
    grows from a to b, so a layout recomputing `a` is never slower than the same layout recomputing `b` (the
    search's dominance pruning relies on it; tests/test_costs.py checks it against the step time)."""
    x, y = RECOMPUTED[a], RECOMPUTED[b]
    if ((x.attention and not y.attention) or x.communication > y.communication
            or _ELEMENTWISE_ORDER.index(x.elementwise) > _ELEMENTWISE_ORDER.index(y.elementwise)):
        return False
    for kind in set(model.layer_kinds()):
        for fp8 in (False, True):
            share_x, share_y = x.linears(model, kind, fp8), y.linears(model, kind, fp8)
            if any(share_x(lin) > share_y(lin) for lin in model.layer_linears(kind)):
                return False
    return True
