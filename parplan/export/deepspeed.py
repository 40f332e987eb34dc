"""DeepSpeed (Megatron-DeepSpeed style): a `ds_config.json` plus the launcher's parallel arguments.

Sources: JSON keys and the batch identity ``train_batch_size = micro x grad_accum x dp`` from
``reference/ecosystem.md`` §A3 and §0 item 9 (DeepSpeed ``runtime/zero/config.py``, ``runtime/config.py``,
``docs/_pages/config-json.md``); launcher flags (`--deepspeed_config`, `--zero-stage`, `--no-pipeline-parallel`,
`--moe-expert-parallel-size`, `--enable-expert-tensor-parallelism`, `--enable-zbh1-pipeline`,
`--use-flash-attn-v2`, `--sequence-parallel`, recompute flags) from deepspeedai/Megatron-DeepSpeed
``megatron/arguments.py``; "no pipeline parallelism for MoE" from its ``examples_deepspeed/MoE`` scripts.
"""

from __future__ import annotations

import json

import numpy as np

from parplan.export.common import (
    Flag,
    Known,
    Launch,
    Support,
    Target,
    describe,
    is_dispatch,
    is_recompute,
    is_schedule,
    megatron_recompute_flags,
    no_redundant_experts,
    recomputed_blocks,
    shell_array,
    versions,
    whole_block_count,
)
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.strategy import PRECISIONS, Layouts, Strategy

NAME = "DeepSpeed"
CONFIG = "ds_config.json"
ARGS = "megatron_deepspeed_args.sh"

TARGETS = (Target("0.19.8", "DeepSpeed 0.19.8 with Megatron-DeepSpeed 4efb479"),)
"""The DeepSpeedConfig and Megatron-DeepSpeed argument parser the files were checked against
(tests/data/frameworks/deepspeed-0.19.8.txt, megatron-deepspeed-HEAD.txt)."""

_BUCKET = 500_000_000
"""DeepSpeed's default reduce/allgather bucket, elements (ecosystem.md A3), written out so it can be tuned."""


def _dense_or_pp1(lay: Layouts, c: Known) -> np.ndarray:
    # Needs the model: without one every layout passes (see common.Known).
    return np.full(len(lay), True) if c.model is None or c.model.moe is None else lay.pp == 1


RULES: tuple[Support, ...] = (
    Support("no_context_parallel", lambda lay, c: lay.cp == 1,
            lambda s: f"DeepSpeed has no ring-attention context parallelism (cp={s.cp}); its sequence parallelism "
                      f"(Ulysses, --ds-sequence-parallel-size) splits attention heads with all-to-alls, a "
                      f"different scheme parplan does not model"),
    Support("pipeline_zero_0_1", lambda lay, c: (lay.pp == 1) | (lay.zero <= 1),
            lambda s: f"DeepSpeed's PipelineEngine supports only ZeRO stage 0 or 1, not zero={s.zero} with "
                      f"pp={s.pp}"),
    Support("one_chunk_schedules", lambda lay, c: ~is_schedule(lay, "interleaved", "dualpipe", "dualpipev"),
            lambda s: f"DeepSpeed's PipelineEngine holds one stage per rank and runs 1F1B (or ZB-H1 via "
                      f"Megatron-DeepSpeed --enable-zbh1-pipeline); it has no {s.schedule} schedule"),
    Support("zbh1_without_sp", lambda lay, c: ~is_schedule(lay, "zb-h1") | ~lay.sp,
            lambda s: "Megatron-DeepSpeed asserts --sequence-parallel is off with --enable-zbh1-pipeline; "
                      "set sp off or use schedule 1f1b"),
    Support("no_fp8", lambda lay, c: lay.precision != PRECISIONS.index("fp8"),
            lambda s: "the DeepSpeed config has no fp8 training mode (Megatron-DeepSpeed's --fp8-hybrid path "
                      "needs Transformer Engine layers parplan does not emit); use precision bf16"),
    Support("no_tp_overlap", lambda lay, c: ~lay.tp_overlap,
            lambda s: "Megatron-DeepSpeed has no --tp-comm-overlap; set tp_overlap off"),
    Support("expert_tp", lambda lay, c: (lay.etp == lay.tp) | ((lay.etp == 1) & (lay.ep == 1)),
            lambda s: f"DeepSpeed MoE carves expert parallelism out of the data-parallel ranks only, and experts "
                      f"are either replicated over TP or split over all of it (--enable-expert-tensor-"
                      f"parallelism): etp must equal tp={s.tp}" + ("" if s.ep > 1 else " or be 1")),
    Support("moe_without_pp", _dense_or_pp1,
            lambda s: f"Megatron-DeepSpeed does not support pipeline parallelism for MoE models (pp={s.pp}); "
                      f"use pp=1"),
    Support("alltoall_dispatch", lambda lay, c: is_dispatch(lay, "alltoall") & ~lay.ep_overlap,
            lambda s: "DeepSpeed MoE dispatches with a plain all-to-all and does not overlap it with another "
                      "micro-batch: use dispatch alltoall without ep_overlap"),
    Support("no_module_recompute", lambda lay, c: ~is_recompute(lay, "modules"),
            lambda s: "Megatron-DeepSpeed has no --recompute-modules; use recompute selective or full"),
    no_redundant_experts("DeepSpeed"),
    whole_block_count("Megatron-DeepSpeed"),
)


def ds_config(cluster: ClusterSpec, s: Strategy) -> dict[str, object]:
    """The DeepSpeed JSON (its data-parallel world, gpus / (tp·pp), comes from Megatron's mpu)."""
    zero: dict[str, object] = {"stage": s.zero}
    if s.zero >= 1:
        zero.update(contiguous_gradients=True, overlap_comm=True, reduce_scatter=True, reduce_bucket_size=_BUCKET)
    if s.zero in (1, 2):
        zero["allgather_bucket_size"] = _BUCKET
    if s.zero == 3:
        # DeepSpeed's stage-3 defaults, explicit so they can be tuned (ecosystem.md A3).
        zero.update(stage3_prefetch_bucket_size=50_000_000, stage3_param_persistence_threshold=100_000,
                    stage3_max_live_parameters=1_000_000_000, stage3_max_reuse_distance=1_000_000_000,
                    stage3_gather_16bit_weights_on_model_save=True)
    return {
        "train_batch_size": s.gbs,
        "train_micro_batch_size_per_gpu": s.mbs,
        "gradient_accumulation_steps": s.microbatches(cluster.gpus),
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
    }


def launcher_args(model: ModelSpec, s: Strategy) -> list[Flag]:
    flags: list[Flag] = [
        ("--deepspeed",), ("--deepspeed_config", CONFIG), ("--zero-stage", str(s.zero)),
        ("--tensor-model-parallel-size", str(s.tp)), ("--pipeline-model-parallel-size", str(s.pp)),
    ]
    if s.pp == 1:
        # Without it Megatron-DeepSpeed builds a PipelineModule even for one stage, capping ZeRO at stage 1.
        flags.append(("--no-pipeline-parallel",))
    if s.schedule == "zb-h1":
        flags.append(("--enable-zbh1-pipeline",))
    if s.sp:
        flags.append(("--sequence-parallel",))
    if model.moe:
        flags.append(("--moe-expert-parallel-size", str(s.ep)))
        if s.etp > 1:
            flags.append(("--enable-expert-tensor-parallelism",))
    flags += [("--micro-batch-size", str(s.mbs)), ("--global-batch-size", str(s.gbs)),
              ("--seq-length", str(s.seq))]
    flags += megatron_recompute_flags(s.recompute, recomputed_blocks(model, s) if s.recompute_blocks < 1 else None)
    if s.flash_attention:
        flags.append(("--use-flash-attn-v2",))
    flags.append(("--bf16",))
    return flags


def launch(model: ModelSpec, cluster: ClusterSpec, s: Strategy, targets: tuple[Target, ...] = TARGETS) -> Launch:
    config = json.dumps(ds_config(cluster, s), indent=2) + "\n"
    args = shell_array(
        "DS_ARGS", launcher_args(model, s),
        header=[f"parplan: Megatron-DeepSpeed pretrain_gpt.py parallel and batch arguments for {versions(targets)}",
                describe(model, cluster, s)],
        usage='deepspeed pretrain_gpt.py "${DS_ARGS[@]}" <model, data, tokenizer and optimizer arguments>',
    )
    notes = [
        f"train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp = {s.mbs} x "
        f"{s.microbatches(cluster.gpus)} x {s.dp(cluster.gpus)}, dp = gpus / (tp·pp)",
        "the tensor- and pipeline-parallel degrees are launcher arguments (Megatron's mpu, PipelineModule "
        "num_stages), not JSON keys",
        "model-definition arguments differ from Megatron-LM's (e.g. --num-key-value-heads); take them from "
        "your Megatron-DeepSpeed model script",
    ]
    if s.pp > 1:
        notes.append("DeepSpeed's PipelineModule places layers itself (partition_method 'type:transformer'), "
                     "which may differ from parplan's placement")
    if model.moe:
        notes.append(f"ep_size is an argument of deepspeed.moe.layer.MoE(..., ep_size={s.ep}) "
                     f"(--moe-expert-parallel-size here), not a ds_config.json key")
        notes.append(f"check that your DeepSpeed gate supports top-{model.moe.top_k} routing and "
                     f"{model.moe.experts} fine-grained experts"
                     + (" plus shared experts" if model.moe.shared_experts else ""))
    if not s.flash_attention:
        notes.append("the plan assumed unfused attention, so --use-flash-attn-v2 is left out")
    return Launch(framework="deepspeed", files={CONFIG: config, ARGS: args}, notes=tuple(notes))
