"""Megatron-LM: the chosen layout as `pretrain_gpt.py` arguments (a bash array).

Targets (`TARGETS`): Megatron-LM core_v0.16.1, core_v0.19.0 and HEAD d98e8a6; every flag, its type and
choices are checked against the parser of each (tests/data/frameworks/megatron-*.txt, read off
``megatron/training/arguments.py``), and the cross-option rules of their validate_args and TransformerConfig
are the support rules below or are kept by construction (checked in tests/framework_options.py).

Sources: flag names and meanings from ``reference/ecosystem.md`` §A2 and §0 items 3-7; the Megatron-FSDP
flag set from Megatron-LM's ``docs/discussions/megatron-fsdp-user-guide``; the
`--pipeline-model-parallel-layout` grammar (E embedding, t layer, m MTP layer, L loss, `|` between virtual
stages, `x*n` repeats) from ``megatron/core/transformer/pipeline_parallel_layer_layout.py`` (core_v0.13+);
`--use-rope-scaling` and `--attention-backend` from ``megatron/training/arguments.py``.
"""

from __future__ import annotations

from parplan.export.common import (
    Flag,
    Launch,
    Support,
    Target,
    describe,
    is_dispatch,
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
from parplan.planner.schedule import virtual_stage_layers
from parplan.planner.strategy import Strategy

NAME = "Megatron-LM"
FILE = "pretrain_gpt_args.sh"

TARGETS = (Target("core_v0.16.1", "Megatron-LM core_v0.16.1 (55ac708)"),
           Target("core_v0.19.0", "Megatron-LM core_v0.19.0 (5be9626)"),
           Target("HEAD", "Megatron-LM HEAD d98e8a6"))
"""The releases whose megatron/training/arguments.py, validate_args and TransformerConfig the flags were
checked against (tests/data/frameworks/megatron-*.txt); one file serves all three."""

def fp8_recipe(s: Strategy) -> str:
    """Megatron's default, delayed scaling, unless the layout recomputes layernorm and moe_act, which
    TransformerConfig.__post_init__ refuses with it ("Delayed scaling does not support moe_act and layernorm
    recompute for fp8", megatron/core/transformer/transformer_config.py): then per-tensor current scaling,
    which runs on Hopper and Blackwell. parplan costs delayed scaling's single-pass cast."""
    return "tensorwise" if s.recompute == "modules" else "delayed"


RULES: tuple[Support, ...] = (
    Support("no_zero_bubble", lambda lay, c: ~is_schedule(lay, "zb-h1"),
            lambda s: "Megatron-LM has no zero-bubble (ZB-H1) schedule (it lives in the sail-sg zero-bubble "
                      "fork and in Megatron-DeepSpeed); use schedule 1f1b or interleaved"),
    Support("no_dualpipe", lambda lay, c: ~is_schedule(lay, "dualpipe", "dualpipev"),
            lambda s: f"{s.schedule} is DeepSeek's schedule (deepseek-ai/DualPipe, torchtitan), not part of "
                      f"Megatron-LM; use schedule 1f1b or interleaved"),
    Support("fsdp_without_pp", lambda lay, c: (lay.zero <= 1) | (lay.pp == 1),
            lambda s: f"zero={s.zero} maps to Megatron-FSDP (--use-megatron-fsdp), which cannot be combined with "
                      f"pipeline parallelism (pp={s.pp}); use zero 0/1 (1 = --use-distributed-optimizer) with "
                      f"pp > 1, or pp = 1"),
    Support("no_fp8_dispatch", lambda lay, c: ~is_dispatch(lay, "deepep-fp8"),
            lambda s: "Megatron's flex dispatcher sends bf16 tokens through DeepEP; use dispatch deepep"),
    Support("waiting_interleaved_pp_above_2", lambda lay, c: lay.p2p_overlap | ~is_schedule(lay, "interleaved")
            | (lay.pp > 2),
            lambda s: f"validate_args asserts pp > 2 for an interleaved schedule without p2p overlap "
                      f"(two ranks would send and receive twice in one batch), got pp={s.pp}"),
    no_redundant_experts("Megatron-LM"),
    whole_block_count("Megatron-LM"),
)

# ZeRO stage -> Megatron-FSDP sharding strategy (ecosystem.md A2: --data-parallel-sharding-strategy).
_FSDP_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}


def _run(char: str, n: int) -> str:
    return "" if n == 0 else char if n == 1 else f"{char}*{n}"


def _layout(counts: list[int], mtp_layers: int) -> str:
    """`--pipeline-model-parallel-layout` string placing counts[i] layers on virtual stage i."""
    stages = [_run("t", n) for n in counts]
    stages[0] = "E" + stages[0]
    # Megatron requires the MTP layers after every decoder layer, in the last virtual stage of a rank.
    stages[-1] += _run("m", mtp_layers) + "L"
    return "|".join(stages)


def _pipeline(model: ModelSpec, s: Strategy) -> list[Flag]:
    """Layer placement flags reproducing parplan's `virtual_stage_layers`; never two VPP selectors.

    Even cut: `--num-layers-per-virtual-pipeline-stage` (VPP) or nothing. Uneven cut without VPP whose middle
    stages are equal: `--decoder-first/last-pipeline-num-layers`. Anything else needs the layout string:
    Megatron's first/last flags with `--num-virtual-stages-per-pipeline-rank` count layers per pipeline
    *rank* and split them evenly over its chunks, which cannot give the first or last *virtual stage* alone
    fewer layers.
    """
    if s.pp == 1:
        return []
    counts = virtual_stage_layers(model.layers, s.pp * s.vpp)
    if len(set(counts)) == 1:
        return [("--num-layers-per-virtual-pipeline-stage", str(counts[0]))] if s.vpp > 1 else []
    full = max(counts)
    if s.vpp == 1 and all(c == full for c in counts[1:-1]):
        flags: list[Flag] = []
        if counts[0] < full:
            flags.append(("--decoder-first-pipeline-num-layers", str(counts[0])))
        if counts[-1] < full:
            flags.append(("--decoder-last-pipeline-num-layers", str(counts[-1])))
        return flags
    return [("--pipeline-model-parallel-layout", _layout(counts, model.mtp_layers))]


def _parallel(model: ModelSpec, s: Strategy) -> list[Flag]:
    flags: list[Flag] = [
        ("--tensor-model-parallel-size", str(s.tp)),
        ("--pipeline-model-parallel-size", str(s.pp)),
        ("--context-parallel-size", str(s.cp)),
    ]
    if model.moe:
        # Explicit ETP: unset it defaults to TP (ecosystem.md §0 item 6).
        flags += [("--expert-model-parallel-size", str(s.ep)), ("--expert-tensor-parallel-size", str(s.etp))]
    flags += _pipeline(model, s)
    if s.sp:
        flags.append(("--sequence-parallel",))
    if s.tp_overlap:
        flags.append(("--tp-comm-overlap",))
    if s.zero in _FSDP_SHARDING:
        # Required set from the Megatron-FSDP user guide; validate_args asserts the checkpoint format.
        flags += [("--use-megatron-fsdp",), ("--data-parallel-sharding-strategy", _FSDP_SHARDING[s.zero]),
                  ("--use-distributed-optimizer",), ("--no-gradient-accumulation-fusion",),
                  ("--ckpt-format", "fsdp_dtensor")]
    elif s.zero == 1:
        flags.append(("--use-distributed-optimizer",))
    flags.append(("--overlap-grad-reduce",))
    if s.zero >= 1:
        # --overlap-param-gather asserts the distributed optimizer (or Megatron-FSDP) and --overlap-grad-reduce.
        flags.append(("--overlap-param-gather",))
    if s.recompute == "modules":
        modules = ["core_attn", "layernorm"] + (["moe_act"] if model.moe else []) + (
            ["mla_up_proj"] if model.attention.mla else [])
        flags += [("--recompute-granularity", "selective"), ("--recompute-modules", *modules)]
    else:
        flags += megatron_recompute_flags(s.recompute, recomputed_blocks(model, s) if s.recompute_blocks < 1 else None)
    if s.ep_overlap:
        flags.append(("--overlap-moe-expert-parallel-comm",))
    return flags


def _moe_layer_freq(pattern: tuple[bool, ...]) -> str:
    """Python-list expression of the MoE pattern, e.g. "([0]*3+[1]*58)" (ecosystem.md A2)."""
    runs: list[list[int]] = []
    for bit in (int(b) for b in pattern):
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([bit, 1])
    return "(" + "+".join(f"[{bit}]*{n}" for bit, n in runs) + ")"


def _model(model: ModelSpec, s: Strategy) -> tuple[list[Flag], list[str]]:
    """Model-dimension flags, and notes on what they cannot carry."""
    a = model.attention
    notes: list[str] = []
    flags: list[Flag] = [
        ("--num-layers", str(model.layers)),
        ("--hidden-size", str(model.hidden)),
        ("--ffn-hidden-size", str(model.mlp.ffn)),
        ("--num-attention-heads", str(a.heads)),
        ("--seq-length", str(s.seq)),
        # Megatron asserts max_position_embeddings >= seq_length.
        ("--max-position-embeddings", str(max(model.max_position, s.seq))),
    ]
    if a.mla:
        m = a.mla
        flags.append(("--multi-latent-attention",))
        if m.q_lora_rank:
            flags.append(("--q-lora-rank", str(m.q_lora_rank)))
        # Naming trap (ecosystem.md §0 item 7): --qk-head-dim is HF qk_nope_head_dim.
        flags += [("--kv-lora-rank", str(m.kv_lora_rank)), ("--qk-head-dim", str(m.qk_nope_head_dim)),
                  ("--qk-pos-emb-head-dim", str(m.qk_rope_head_dim)), ("--v-head-dim", str(m.v_head_dim))]
    else:
        if a.kv_heads < a.heads:
            flags += [("--group-query-attention",), ("--num-query-groups", str(a.kv_heads))]
        if a.head_dim * a.heads != model.hidden:
            flags.append(("--kv-channels", str(a.head_dim)))
    if a.qk_norm:
        flags.append(("--qk-layernorm",))
    if model.mlp.gated:
        flags.append(("--swiglu",))
    if model.norm == "rmsnorm":
        flags.append(("--normalization", "RMSNorm"))
    if not (model.mlp.bias or a.out_bias):
        flags.append(("--disable-bias-linear",))
        if a.qkv_bias:
            flags.append(("--add-qkv-bias",))
    if not model.tied_embeddings:
        flags.append(("--untie-embeddings-and-output-weights",))
    if model.position == "rope":
        flags.append(("--position-embedding-type", "rope"))
        if model.rope_theta is not None and float(model.rope_theta).is_integer():
            flags.append(("--rotary-base", str(int(model.rope_theta))))
        elif model.rope_theta is not None:
            notes.append(f"--rotary-base takes an integer; set the rotary base {model.rope_theta} by hand")
        if model.rope_scaling == "llama3":
            flags.append(("--use-rope-scaling",))
            notes.append("--use-rope-scaling applies Llama 3.x rope scaling with Megatron's default "
                         "--rope-scaling-factor 8.0 (Llama 3.1's); change it if yours differs")
        elif model.rope_scaling:
            notes.append(f"rope scaling '{model.rope_scaling}' is not exported: add Megatron's rotary scaling "
                         f"flags for it by hand")
    elif model.position == "learned":
        flags.append(("--position-embedding-type", "learned_absolute"))
    else:
        notes.append(f"Megatron-LM has no '{model.position}' position embedding; none is set")
    if not model.dropout:
        # Megatron's defaults are 0.1; modern models train without dropout (and parplan counts no masks).
        flags += [("--attention-dropout", "0.0"), ("--hidden-dropout", "0.0")]
    if a.sliding_window or a.sinks:
        notes.append("sliding-window attention and attention sinks are not exported")
    if model.moe:
        moe = model.moe
        flags += [("--num-experts", str(moe.experts)), ("--moe-router-topk", str(moe.top_k)),
                  ("--moe-ffn-hidden-size", str(moe.expert_ffn))]
        if moe.shared_experts:
            # Megatron builds the shared experts as one MLP of width n_shared x size.
            flags.append(("--moe-shared-expert-intermediate-size", str(moe.shared_experts * moe.shared_ffn)))
        flags += [("--moe-layer-freq", _moe_layer_freq(moe.layers)), ("--moe-grouped-gemm",)]
        if s.dispatch == "deepep":
            flags += [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep")]
            notes.append("releases before core_v0.15 spell the DeepEP backend --moe-enable-deepep")
        else:
            flags.append(("--moe-token-dispatcher-type", "alltoall"))
        if moe.n_group > 1:
            flags += [("--moe-router-num-groups", str(moe.n_group)),
                      ("--moe-router-group-topk", str(moe.topk_group))]
        if moe.score_correction_bias:
            # DeepSeek-V3 routing: sigmoid scores with a per-expert bias (aux-loss-free balancing).
            flags += [("--moe-router-score-function", "sigmoid"), ("--moe-router-enable-expert-bias",)]
        notes.append("MoE routing hyper-parameters (top-k scaling factor, aux-loss coefficient, load-balancing "
                     "type) are not part of the layout: set them for your model")
    if model.mtp_layers:
        flags.append(("--mtp-num-layers", str(model.mtp_layers)))
    return flags, notes


def launch(model: ModelSpec, cluster: ClusterSpec, s: Strategy, targets: tuple[Target, ...] = TARGETS) -> Launch:
    model_flags, notes = _model(model, s)
    flags = _parallel(model, s) + model_flags
    flags += [("--micro-batch-size", str(s.mbs)), ("--global-batch-size", str(s.gbs)), ("--bf16",)]
    if s.precision == "fp8":
        flags += [("--fp8-format", "hybrid"), ("--fp8-recipe", fp8_recipe(s))]
        if s.recompute == "modules":
            notes.append("--fp8-recipe tensorwise: delayed scaling refuses layernorm/moe_act recompute; current "
                         "scaling reads each bf16 operand once more for its amax than the delayed-scaling cast "
                         "parplan costs, and this recompute needs Transformer Engine >= 2.6")
        notes.append("mxfp8 (Blackwell) and blockwise (DeepSeek-V3's 1x128 tiles) are the other --fp8-recipe "
                     "choices")
    if s.zero >= 2:
        notes.append("Megatron-FSDP wants CUDA_DEVICE_MAX_CONNECTIONS unset and an fsdp_dtensor checkpoint")
    elif s.tp > 1 or s.cp > 1:
        notes.append("with tp or cp > 1 set CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM asserts or warns, by release)")
    if not s.flash_attention:
        # The plan costed attention that materialises the scores; run what was costed.
        flags.append(("--attention-backend", "unfused"))
    # The megatron-core stack costs the fused cross entropy (its kernels.fused_ops); Megatron-LM's is off by default.
    flags.append(("--cross-entropy-loss-fusion",))
    if not s.p2p_overlap and s.schedule == "interleaved":
        # Only the interleaved schedule overlaps (validate_args turns overlap_p2p_comm off for the others).
        flags.append(("--no-overlap-p2p-communication",))
    if s.pp_scatter_gather:
        notes.append("the plan costed legacy Megatron-LM's scatter-gather of stage tensors; Megatron-Core sends "
                     "whole tensors without --sequence-parallel, so its pipeline transfers take longer")
    notes.append("data, tokenizer, optimizer, learning-rate, logging and checkpoint arguments are yours to add")
    text = shell_array(
        "MEGATRON_ARGS", flags,
        header=[f"parplan: pretrain_gpt.py arguments for {versions(targets)}", describe(model, cluster, s)],
        usage='torchrun ... pretrain_gpt.py "${MEGATRON_ARGS[@]}" <data, tokenizer and optimizer arguments>',
    )
    return Launch(framework="megatron", files={FILE: text}, notes=tuple(notes))
