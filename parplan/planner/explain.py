"""One sentence naming what limits a layout and the lever that would help, read off its breakdown."""

from __future__ import annotations

from parplan.hardware.spec import ClusterSpec
from parplan.planner.estimate import Estimate
from parplan.stacks.presets import EXPANDABLE_SEGMENTS


def _share(est: Estimate, name: str) -> float:
    return est.time_breakdown[name]["exposed"] / est.step_time_s


def _nodes(ranks: int, cluster: ClusterSpec) -> int:
    return -(-ranks // cluster.scaleup_domain)


def bottleneck(est: Estimate, cluster: ClusterSpec, expandable: Estimate | None = None) -> str:
    """The main bottleneck of `est` and what to change, in one sentence; `expandable` is the same layout launched
    with expandable segments, where the stack's allocator could be (stacks.presets.with_expandable_segments)."""
    s = est.strategy
    dp = s.dp(est.gpus)
    m = s.microbatches(est.gpus)
    dom = cluster.scaleup_domain
    if not est.fits:
        allocator = "" if expandable is None else (
            f" Launched with {EXPANDABLE_SEGMENTS} (--memory allocator=expandable_segments) the allocator strands "
            f"less: it needs {expandable.required_gib:.1f} GiB"
            + (", which fits." if expandable.fits else ", still too much."))
        return (f"Does not fit: the most loaded GPU needs {est.required_gib:.1f} GiB of {est.capacity_gib:g} GiB "
                f"({est.memory_breakdown['activations']:.1f} GiB activations, "
                f"{sum(v for k, v in est.memory_breakdown.items() if k != 'activations'):.1f} GiB states and buffers); "
                "recompute, a higher ZeRO stage, more pipeline stages, a smaller micro-batch or offloading the "
                "optimizer states to the host (--memory optimizer_offload=1.0) reduce it." + allocator)
    ranked = sorted(((_share(est, k), k) for k in est.time_breakdown if k not in ("gemm",)), reverse=True)
    share, name = ranked[0]
    gemm = _share(est, "gemm")
    pct = f"{share:.0%} of the step"
    if name == "tp_comm" and share > 0.05:
        if s.tp > dom:  # tp is the innermost group: cp, dp and pp go across domains, tp only beyond one
            return (f"{pct} is tensor-parallel communication across nodes: tp={s.tp} spans "
                    f"{_nodes(s.tp, cluster)} scale-up domains of {dom} GPUs; tp≤{dom} keeps it on NVLink.")
        lever = "overlap it with --tp-comm-overlap" if s.sp and not s.tp_overlap else (
            "sequence parallelism (sp) turns it into cheaper all-gather/reduce-scatter" if not s.sp
            else "a smaller tp with more pp or dp reduces it")
        return f"{pct} is tensor-parallel communication on NVLink (tp={s.tp}); {lever}."
    if name == "pipeline_bubble" and share > 0.05:
        return (f"{pct} is pipeline bubble: pp={s.pp} stages with m={m} micro-batches per step; more "
                "micro-batches (larger gbs or smaller mbs), interleaving (vpp>1) or fewer stages shrink it.")
    if name in ("dp_grad_reduce", "dp_param_gather") and share > 0.05:
        what = "gradient reduction" if name == "dp_grad_reduce" else "parameter gathering"
        lever = ("ZeRO-3 gathers parameters every micro-batch: ZeRO-1 or 2 with more pipeline or tensor "
                 "parallelism avoids it" if s.zero == 3 else
                 "more micro-batches per step give the reduction more backward to hide behind, and fewer "
                 "parameters per GPU (more tp/pp) shrink it")
        return f"{pct} is exposed data-parallel {what} over {dp * s.cp} ranks; {lever}."
    if name == "ep_comm" and share > 0.05:
        span = _nodes(s.ep * s.etp, cluster)
        where = f"ep={s.ep} spans {span} scale-up domains" if span > 1 else f"ep={s.ep} stays inside one domain"
        return (f"{pct} is expert-parallel all-to-all ({where}); a smaller ep, or a schedule that overlaps it "
                "(DualPipe), hides it.")
    if name == "cp_comm" and share > 0.05:
        return (f"{pct} is context-parallel K/V exchange that attention cannot hide (cp={s.cp}); a smaller cp or "
                "keeping the cp group inside a node helps.")
    if name == "recompute" and share > 0.1:
        free = est.capacity_gib - est.required_gib
        return (f"{pct} is activation recomputation ({s.recompute}); with {free:.1f} GiB free, a lighter "
                "recompute setting or more pipeline stages trade memory for it.")
    if name == "elementwise" and share > 0.15 and s.tp > 1 and not s.sp:
        return (f"{pct} is memory-bound element-wise work replicated on all {s.tp} TP ranks; sequence "
                "parallelism divides it by tp.")
    if name == "attention" and share > gemm:
        return (f"{pct} is the attention core at seq={s.seq}: context parallelism splits it; flash attention "
                "and a larger head dimension raise its efficiency.")
    return (f"Compute-bound: GEMMs take {gemm:.0%} of the step at {est.mfu:.0%} MFU; the next largest item is "
            f"{name.replace('_', ' ')} at {share:.0%}.")
