"""`parplan explain`: step time, throughput, MFU and memory of one layout, with a breakdown."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from parplan.cli._options import (
    ClusterOpt,
    CompileOpt,
    ExpertLoadOpt,
    GpusOpt,
    JsonOpt,
    MemoryOpt,
    ModelOpt,
    PlotOpt,
    SeqOpt,
    StackOpt,
    usage_errors,
)
from parplan.cli._output import Column, console, fitted_table, kv_table, print_json
from parplan.errors import InvalidStrategyError
from parplan.limits import MAX_BATCH, MAX_GPUS
from parplan.names import BLOCKS_PREFIX, DEFAULT_STACK, DISPATCHERS, PRECISIONS, RECOMPUTE, SCHEDULES

if TYPE_CHECKING:
    from parplan.planner.estimate import Estimate
    from parplan.planner.moe import MoESection
    from parplan.planner.strategy import Strategy
    from parplan.planner.timeline import Timeline


def _choice(value: str, options: tuple[str, ...], name: str) -> str:
    if value not in options:
        raise typer.BadParameter(f"must be one of {', '.join(options)}", param_hint=f"--{name}")
    return value


_ALWAYS = ("tp", "pp", "zero", "sp", "recompute", "mbs", "gbs", "seq", "schedule", "precision")
"""Strategy fields an explain command line always states, for a reader; the others only when not default."""


def explain_args(s: Strategy) -> list[str]:
    """The `parplan explain` options that reproduce layout `s`: one option per Strategy field, so a field
    added to Strategy (and to explain) cannot be left out of the commands plan prints."""
    from parplan.planner.strategy import Strategy, recompute_label

    args: list[str] = []
    for field in dataclasses.fields(Strategy):
        value = getattr(s, field.name)
        # What explain derives for this layout without the option (a default's normal form can depend on the
        # other fields: p2p_overlap on the schedule, sp on tp).
        implied = getattr(dataclasses.replace(s, **{field.name: field.default}), field.name)
        if field.name not in _ALWAYS and value == implied:
            continue
        option = "--" + field.name.replace("_", "-")
        if field.name == "recompute_blocks":
            continue  # written with recompute, as blocks:F
        if field.name == "recompute":
            args += [option, recompute_label(s.recompute, s.recompute_blocks)]
        elif field.name == "flash_attention":
            args += ["--attention", "flash" if value else "unfused"]
        elif isinstance(value, bool):
            args.append(option if value else option.replace("--", "--no-", 1))
        else:
            args += [option, str(value)]
    return args


def explain(
    model: ModelOpt,
    cluster: ClusterOpt,
    gpus: GpusOpt,
    tp: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Pipeline stages.")] = 1,
    cp: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Context-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Expert-parallel degree (carved from tp·cp·dp).")] = 1,
    etp: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Tensor parallelism inside each expert.")] = 1,
    vpp: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Model chunks per pipeline rank (interleaving).")] = 1,
    zero: Annotated[int, typer.Option(min=0, max=3, help="ZeRO stage (1 = Megatron distributed optimizer).")] = 1,
    dp_replicate: Annotated[int, typer.Option(
        min=1, max=MAX_GPUS,
        help="Replicas of the ZeRO shard group (HSDP): shard over dp/N ranks, all-reduce over N.")] = 1,
    sp: Annotated[bool, typer.Option("--sp/--no-sp", help="Megatron sequence parallelism.")] = True,
    recompute: Annotated[str, typer.Option(
        help=", ".join(RECOMPUTE) + ", or blocks:F (full recompute of a fraction F of the blocks).")] = "none",
    mbs: Annotated[int, typer.Option(min=1, max=MAX_BATCH, help="Micro-batch size (sequences).")] = 1,
    gbs: Annotated[int | None, typer.Option(min=1, max=MAX_BATCH,
                                            help="Global batch (sequences); default dp·mbs.")] = None,
    seq: SeqOpt = 4096,
    schedule: Annotated[str | None, typer.Option(
        help=", ".join(SCHEDULES) + " (default: interleaved when vpp>1).")] = None,
    precision: Annotated[str, typer.Option(help="GEMM precision: " + ", ".join(PRECISIONS) + ".")] = "bf16",
    attention: Annotated[str, typer.Option(help="flash or unfused (materialised s×s scores).")] = "flash",
    tp_overlap: Annotated[bool, typer.Option("--tp-overlap/--no-tp-overlap",
                                             help="Overlap TP communication (--tp-comm-overlap).")] = False,
    dispatch: Annotated[str, typer.Option(help="MoE token dispatch: " + ", ".join(DISPATCHERS) + ".")] = "alltoall",
    redundant_experts: Annotated[int, typer.Option(
        min=0, max=MAX_GPUS, help="EPLB redundant expert slots per MoE layer (a multiple of ep).")] = 0,
    ep_overlap: Annotated[bool, typer.Option(
        "--ep-overlap/--no-ep-overlap",
        help="Overlap the EP all-to-all with another micro-batch (--overlap-moe-expert-parallel-comm).")] = False,
    p2p_overlap: Annotated[bool, typer.Option(
        "--p2p-overlap/--no-p2p-overlap",
        help="Interleaved schedule: overlap stage-to-stage transfers with compute (Megatron-Core default).")] = True,
    pp_scatter_gather: Annotated[bool, typer.Option(
        "--pp-scatter-gather/--no-pp-scatter-gather",
        help="Without SP, send 1/tp of each stage-boundary tensor per TP rank and all-gather it "
             "(Megatron-LM before Megatron-Core, DeepSpeed's pipeline engine).")] = False,
    expert_load: ExpertLoadOpt = None,
    stack: StackOpt = DEFAULT_STACK,
    compile: CompileOpt = None,
    memory: MemoryOpt = None,
    timeline: Annotated[bool, typer.Option("--timeline", help="Draw the pipeline schedule.")] = False,
    plot: PlotOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Predict one layout: step time, tokens/s/GPU, MFU, memory per GPU, and where the time goes."""
    from parplan.hardware.presets import load_cluster
    from parplan.models.presets import load_model
    from parplan.planner.estimate import evaluate
    from parplan.planner.explain import bottleneck
    from parplan.planner.moe import moe_section
    from parplan.planner.strategy import Strategy, p2p_overlap_acts, parse_blocks
    from parplan.planner.timeline import MAX_BLOCKS, render
    from parplan.planner.workload import parse_expert_load
    from parplan.plots import check_plot_path, plot_estimate
    from parplan.stacks import load_stack
    from parplan.stacks.presets import with_expandable_segments, with_memory

    if recompute.startswith(BLOCKS_PREFIX):
        try:
            parse_blocks(recompute)
        except InvalidStrategyError as e:
            raise typer.BadParameter(str(e), param_hint="--recompute") from None
    else:
        _choice(recompute, RECOMPUTE, "recompute")
    _choice(precision, PRECISIONS, "precision")
    _choice(attention, ("flash", "unfused"), "attention")
    _choice(dispatch, DISPATCHERS, "dispatch")
    if schedule is not None:
        _choice(schedule, SCHEDULES, "schedule")
    if plot:
        check_plot_path(plot)
    model_spec = load_model(model)
    cluster_spec = load_cluster(cluster, gpus=gpus)
    with usage_errors():
        workload = parse_expert_load(expert_load, model_spec)
    dp = max(1, gpus // (tp * pp * cp))
    strategy = Strategy(
        tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, zero=zero, dp_replicate=dp_replicate, sp=sp, recompute=recompute,
        mbs=mbs,
        gbs=gbs if gbs is not None else dp * mbs, seq=seq,
        schedule=schedule or ("interleaved" if vpp > 1 else "1f1b"), precision=precision,
        flash_attention=attention == "flash", tp_overlap=tp_overlap, dispatch=dispatch,
        redundant_experts=redundant_experts, ep_overlap=ep_overlap, p2p_overlap=p2p_overlap,
        pp_scatter_gather=pp_scatter_gather,
    )
    blocks = strategy.pp * strategy.microbatches(gpus) * max(strategy.vpp, 2 if strategy.schedule == "dualpipev" else 1)
    if timeline and blocks > MAX_BLOCKS:
        raise typer.BadParameter(f"the schedule has {blocks:,} operations (pp · micro-batches · chunks); --timeline "
                                 f"draws at most {MAX_BLOCKS:,}: a smaller --gbs shows the same pattern",
                                 param_hint="--timeline")
    # A switch the layout cannot use is a usage error rather than a silent no-op.
    if pp_scatter_gather and not strategy.pp_scatter_gather:
        raise typer.BadParameter("acts only on a pipeline (pp > 1) with tp > 1 and --no-sp (SP already shards "
                                 "the stage tensor)", param_hint="--pp-scatter-gather")
    if not p2p_overlap and not p2p_overlap_acts(strategy.pp, SCHEDULES.index(strategy.schedule)):
        raise typer.BadParameter("acts only on the interleaved schedule with pp > 1 (1F1B and ZB wait for their "
                                 "transfers, DualPipe always overlaps them)", param_hint="--no-p2p-overlap")
    with usage_errors():  # --compile or --memory the stack cannot take (a stack file's own errors name it)
        stack_spec = with_memory(load_stack(stack, compile=compile), memory or [])
    est = evaluate(model_spec, cluster_spec, strategy, workload=workload, stack=stack_spec)
    moe = moe_section(model_spec, cluster_spec, est, workload, stack_spec)
    expandable = None if est.fits else with_expandable_segments(stack_spec)
    relieved = None if expandable is None else evaluate(model_spec, cluster_spec, strategy, workload=workload,
                                                        stack=expandable)
    sentence = bottleneck(est, cluster_spec, relieved)
    if plot:
        plot_estimate(est, plot)
    if json_out:
        doc = est.as_dict()
        doc["model_source"] = model
        doc["cluster_source"] = cluster
        doc["stack_source"] = stack
        doc["memory_settings"] = list(memory or [])
        doc["bottleneck"] = sentence
        doc["moe"] = moe.as_dict() if moe else None
        if timeline:
            tl = schedule_timeline(est)
            doc["timeline"] = {"makespan_s": tl.makespan, "bubble_s": tl.bubble,
                               "bubble_fraction": tl.bubble_fraction} if tl else None
        print_json(doc)
        return
    show_estimate(est, sentence, moe)
    if timeline:
        tl = schedule_timeline(est)
        if tl is None:
            console.print("No pipeline (pp = 1): nothing to draw.", highlight=False)
        else:
            console.print(render(tl, width=min(console.width, 140), plain=console.color_system is None, unit="s"))
    if plot:
        console.print(f"wrote {plot}", highlight=False, markup=False)


def schedule_timeline(est: Estimate) -> Timeline | None:
    """The pipeline schedule of an estimate replayed with its slowest rank's per-micro-batch times."""
    from parplan.planner.timeline import simulate

    s = est.strategy
    if s.pp == 1:
        return None
    slowest = max(est.stages, key=lambda st: st["microbatch_s"])
    # A stage's per-micro-batch times are what one micro-batch costs the rank, the simulator's t_f, t_b, t_w:
    # for DualPipe that is one of the rank's two stages (the cost model's work share of 1/2 of both).
    return simulate(s.schedule, s.pp, s.microbatches(est.gpus), v=s.vpp if s.schedule == "interleaved" else 1,
                    t_f=slowest["forward_s"], t_b=slowest["backward_s"], t_w=slowest["wgrad_s"])


def show_estimate(est: Estimate, sentence: str, moe: MoESection | None = None) -> None:
    """Rich tables for one estimate."""
    from parplan.planner.estimate import MEMORY_COMPONENTS, TIME_COMPONENTS
    from parplan.plots import memory_bars, stage_label

    console.print(kv_table(
        f"{est.model} on {est.gpus}× {est.cluster}",
        [
            ("layout", est.strategy.describe(est.gpus)),
            ("stack", est.stack + (" (compiled)" if est.compile else "")),
            ("step time", f"{est.step_time_s:.3f} s"),
            ("throughput", f"{est.tokens_per_s_per_gpu:,.0f} tokens/s/GPU ({est.tokens_per_s:,.0f} tokens/s)"),
            ("MFU / HFU", f"{est.mfu:.1%} / {est.hfu:.1%}"),
            ("memory", memory_line(est)),
            *([("host memory", f"{est.host_gib:.1f} GiB per GPU (offloaded optimizer states, EMA)")]
              if est.host_gib > 0 else []),
        ],
    ))
    rows = [[name.replace("_", " "), f"{row['seconds']:.3f}", f"{row['exposed']:.3f}", f"{row['overlapped']:.3f}",
             f"{row['exposed'] / est.step_time_s:.1%}"]
            for name, row in ((n, est.time_breakdown[n]) for n in TIME_COMPONENTS)
            if row["seconds"] > 0 or row["exposed"] > 0]
    columns = [Column("component", left=True, wrap=True), Column("seconds", "s"), Column("exposed", "exp"),
               Column("overlapped", "ovl"), Column("share")]
    console.print(fitted_table("Time per step (critical path), seconds", [(columns, rows)]))
    if moe is not None:
        console.print(moe_table(moe))
    columns = [Column("pipeline ranks", "ranks", left=True, wrap=True), Column("layers", drop=2),
               *(Column(name, _SHORT.get(name, "")) for name in MEMORY_COMPONENTS),
               Column("allocated", "alloc"), Column("reserved", "resv", drop=1), Column("device", "dev")]
    rows = [[stage_label(st), str(st["dense_layers"] + st["moe_layers"]),
             *(f"{st['memory_gib'][c]:.1f}" for c in MEMORY_COMPONENTS), f"{st['memory_total_gib']:.1f}",
             f"{st['memory_reserved_gib']:.1f}", f"{st['memory_device_gib']:.1f}"] for st in est.stages]
    console.print(fitted_table("Memory per pipeline rank, GiB", [(columns, rows)]))
    console.print(memory_bars(est, width=min(60, console.width - 40)))
    console.print(sentence, highlight=False)


_SHORT = {"weights": "wts", "gradients": "grads", "optimizer": "optim", "activations": "act", "buffers": "buf"}
"""Short memory-component headers for narrow consoles."""


def memory_line(est: Estimate) -> str:
    """The three memory kinds of the most loaded rank, what lies outside PyTorch's allocator, and the verdict."""
    out = est.outside_allocator_gib
    parts = ", ".join(f"{name} {out[key]:.1f}" for key, name in (("cuda_context", "CUDA context"), ("nccl", "NCCL"),
                                                                   ("deepep", "DeepEP")) if out[key] > 0)
    return (f"{est.memory_gib:.1f} GiB peak allocated, {est.reserved_gib:.1f} reserved, {est.device_gib:.1f} on the "
            f"device ({parts}) of {est.capacity_gib:g} GiB: {'fits' if est.fits else 'DOES NOT FIT'}")


def moe_table(moe: MoESection) -> Table:
    """The MoE section: all-to-all inside and across nodes, imbalance, expert GEMM efficiency, replicas."""
    span = f"{moe.ep_nodes} node{'s' if moe.ep_nodes > 1 else ''}"
    limit = (f"; node-limited routing: at most {moe.max_nodes_per_token} nodes per token"
             if moe.max_nodes_per_token else "")
    rows = [
        ("expert grid", f"ep={moe.ep} etp={moe.etp} over {span}, {moe.expert_slots_per_gpu:g} expert slots per GPU"),
        ("dispatch", f"{moe.dispatch}: {moe.dispatch_intra_mib:,.1f} MiB over NVLink + {moe.dispatch_inter_mib:,.1f} "
                     f"MiB over the NIC per GPU per layer and micro-batch ({moe.inter_node_share:.0%} leaves the "
                     f"node); combine {moe.combine_intra_mib:,.1f} + {moe.combine_inter_mib:,.1f} MiB"),
        ("routing", f"{moe.remote_nodes_per_token:.2f} other nodes per token on average{limit}"),
        ("all-to-all", f"{moe.a2a_step_seconds:.3f} s per step on the wire, {moe.a2a_exposed_seconds:.3f} s exposed"),
        ("imbalance", f"max/mean GPU load {moe.imbalance_without_eplb:.2f} without EPLB, {moe.imbalance:.2f} with "
                      f"this layout ({moe.workload} load)"),
        ("expert GEMMs", f"{moe.tokens_per_expert:,.0f} rows per expert: {moe.expert_gemm_tflops:,.0f} TFLOP/s, "
                         f"{moe.expert_gemm_efficiency:.0%} of peak (other GEMMs {moe.dense_gemm_efficiency:.0%})"),
        ("replica memory", f"{moe.replica_memory_gib:.2f} GiB for the redundant experts"),
    ]
    return kv_table("Mixture of experts (per MoE layer and micro-batch unless noted)", rows)
