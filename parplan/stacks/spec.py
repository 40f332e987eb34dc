"""What the user runs: a training stack (framework and the settings of it that change cost).

A `StackSpec` is a set of physical facts about how a framework executes a layout, each with its source in
that framework's code or documentation (`StackSpec.sources`, keyed by the fact's path such as
``kernels.attention``). The cost model reads them through `Ctx.stack`; nothing in a stack is a per-run
factor. Presets live in parplan/data/stacks/ (one YAML file each); a user's stack file names a preset as
`base` and overrides what differs, like a cluster file (presets.py).

The sections:

- `kernels`: how the layer's work becomes GPU kernels (fused or eager element-wise ops, the attention
  kernel generation, torch.compile, CUDA graphs, the host time per launched kernel);
- `communication`: what the collectives carry and what hides them (gradient reduce dtype, parameter
  passes of a sharded data-parallel group, prefetch depth, whether TP communication can overlap);
- `recompute`: what each recompute name of `Strategy.recompute` means in this stack;
- `runs`: which layouts the stack can run at all (the planner searches only those);
- `memory`: the stack's memory facts (optimizer state dtypes, master weights, gradient buffers, allocator,
  offload) for the memory model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

ATTENTION_KERNELS = ("fa2", "fa3", "cudnn")
"""Flash-attention kernel generations: fa2 (FlashAttention-2 and PyTorch SDPA's flash backend, one design
for every GPU since Ampere), fa3 (FlashAttention-3, Hopper warp-specialised), cudnn (cuDNN's fused
attention, what Transformer Engine and XLA pick on Hopper and Blackwell)."""

FUSED_OPS = ("norm", "rope", "activation", "loss")
"""The element-wise ops whose kernels a stack may fuse: the norms (RMSNorm/LayerNorm), the rotary embedding of
q and k, the MLP activation function (SwiGLU's silu·up, GeLU) and the cross entropy over the logits."""

COMPILE_SCOPES = ("none", "block", "model", "program")
"""What torch.compile (or XLA) covers when compilation is on: none (the stack has no compile path), block
(each transformer block compiled on its own; everything between blocks stays eager), model (the whole
model forward), program (XLA: the whole training step is one compiled program, always on)."""

COMPILE_SWITCHABLE = ("block", "model")
"""Compile scopes a user can switch on and off (torch.compile); "none" has nothing to compile and XLA's
"program" always compiles."""

TP_STYLES = ("megatron", "dtensor")
"""How a stack runs tensor parallelism: megatron (Megatron-Core/TE: the backward re-gathers the
sequence-parallel input and overlaps it with the data-gradient GEMM; --tp-comm-overlap hides the rest),
dtensor (PyTorch DTensor TP: each collective sits between dependent ops and nothing overlaps, unless async
TP is on, which is `Strategy.tp_overlap`)."""

RECOMPUTE_KINDS = ("none", "core_attention", "modules", "full", "op_sac", "save_dot_except_mlpwi", "save_qkv_proj")
"""What a recompute setting recomputes in backward (planner/recompute.py writes each one out): none;
core_attention (the attention core, Megatron's selective, Korthikanti 2022); modules (Megatron
--recompute-modules: core attention, norms, the MoE activation and MLA's up-projections); full (every layer
from its input, its communication included); op_sac (torchtitan's per-op selective checkpointing: every
second matmul of a block and its element-wise ops; the attention core is saved); save_dot_except_mlpwi and
save_qkv_proj (MaxText remat policies: everything but the named projections' outputs is recomputed). The
first four keep the codes of `strategy.RECOMPUTE` so that Megatron-Core's names map onto themselves."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Kernels:
    """How a layer's work becomes GPU kernels."""

    fused_ops: tuple[str, ...]
    """Element-wise ops (of FUSED_OPS) that run as fused kernels without compilation (Transformer Engine,
    Apex, Triton, flash-attn's rotary): one HBM read and write per tensor. The others run as eager PyTorch
    ops, one kernel and one HBM round trip each (fp32 upcasts included), unless compilation covers them."""
    attention: str
    """Flash-attention kernel generation the stack calls (one of ATTENTION_KERNELS)."""
    compile_scope: str
    """What compilation covers when it is on (one of COMPILE_SCOPES)."""
    compile: bool
    """Whether compilation is on (the stack's default; `--compile/--no-compile` sets it). Compiled regions
    fuse their element-wise ops into the neighbouring kernels."""
    cuda_graphs: bool
    """Kernels are replayed from captured CUDA graphs: the host launches a graph, not each kernel."""
    deterministic: bool
    """The stack runs in deterministic mode: PyTorch's torch.use_deterministic_algorithms(True) fills every newly
    allocated tensor before the op writes it (torch.utils.deterministic.fill_uninitialized_memory, on by
    default in that mode: one more HBM write of each tensor a layer allocates, in its own kernel), and the
    flash-attention backward accumulates dQ in a fixed order instead of atomically
    (compute.DETERMINISTIC_FLASH_BACKWARD)."""
    host_us_per_kernel: float
    """CPU time to dispatch one kernel from eager Python, microseconds (PyTorch op dispatch plus the
    launch); the GPU starves when its work per kernel is shorter. A calibrated knob."""
    compute_scale: float
    """Throughput of the stack's GEMM and attention kernels relative to the GPU's measured curves (cuBLAS and
    the attention kernel's own figures), 1.0 = as measured. A calibrated knob: the stack's residual kernel
    efficiency its public runs show."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Communication:
    """What the collectives of a step carry and what hides them."""

    grad_reduce_bytes: int
    """Bytes per gradient element in the data-parallel reduction: 4 (fp32) or 2 (bf16)."""
    reshard_after_forward: bool
    """A fully sharded (ZeRO-3) data-parallel group frees the gathered parameters after each block's
    forward and gathers them again for its backward: three passes over the parameters per step (gather,
    gather, reduce-scatter) instead of two."""
    reshard_under_pp: bool
    """Whether that re-gather also happens with a pipeline (False: the gathered parameters stay for the
    micro-batches' backward, ZeRO-2-like)."""
    zero3_bucket_params: float
    """ZeRO-3 splits each pass over the parameters into collectives of at most this many parameters (and at
    least one per transformer block); 0: one collective per block, the unit FSDP wraps and prefetches one
    ahead of the block computing."""
    tp_style: str
    """How tensor parallelism communicates (one of TP_STYLES)."""
    zero3_overlaps_tp: bool
    """ZeRO-3's gathers and reduce-scatters still overlap compute when the layer is also tensor-parallel
    (False: they are exposed, as in FSDP2 composed with DTensor TP)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Runs:
    """Which layouts the stack can run (the planner searches only these; `explain` refuses the rest)."""

    exporter: str | None
    """The launch-settings writer of parplan.export whose support rules also apply (None: none): a framework
    name, whose every version's rules apply (what all the versions parplan writes for can run), or
    "name@version" for one version's (export.targets)."""
    parallelism: tuple[str, ...]
    """Parallel dimensions that may exceed 1, of tp, pp, cp, ep (data parallelism always may)."""
    zero: tuple[int, ...]
    """ZeRO stages (0 DDP, 1 sharded optimizer states, 2 + gradients, 3 + parameters)."""
    schedules: tuple[str, ...]
    """Pipeline schedules (strategy.SCHEDULES)."""
    precisions: tuple[str, ...]
    """GEMM precisions (strategy.PRECISIONS)."""


ALLOCATORS = ("caching", "expandable_segments", "xla")
"""How device memory is allocated: PyTorch's CUDA caching allocator as configured by PYTORCH_CUDA_ALLOC_CONF,
caching (the default: fixed-size segments from cudaMalloc, split and cached per size class) or
expandable_segments (one segment per stream grown page by page, so freed blocks can be remapped instead of
stranded); or xla (XLA places every buffer of the compiled step at compile time, reusing memory by liveness, in
a pool it preallocates)."""

ZERO3_UNITS = ("block", "module")
"""What a fully sharded (ZeRO-3) data-parallel group gathers at a time: block (one transformer block, FSDP and
Megatron-FSDP wrapping policies) or module (each leaf module, DeepSpeed ZeRO-3's parameter coordinator)."""

PIPELINE_ENDS = ("balanced", "embedding_and_loss", "compute_cost")
"""How the layers are cut into pipeline stages: balanced (equal stages, the remainder taken off the ends);
embedding_and_loss (the embedding and the loss count as one layer each, so the first and last stages hold one
layer fewer: Megatron --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split, Llama 3);
or compute_cost (each stage takes blocks until their cumulative compute cost passes its equal share, the block
that passes it included, the LM head costed like the layers: nanotron's build_model)."""

FP8_ATTENTION_OUTPUTS = ("copy", "e5m6")
"""What fp8 training keeps of the attention output for backward: copy (the attention kernel keeps its bf16
output and the out-projection its own copy at fp8_activation_bytes, the same tensor when that is bf16) or e5m6
(one 12-bit copy serves both: DeepSeek-V3 §3.3.3)."""

EMA_PLACES = ("none", "gpu", "cpu")
"""Where an exponential moving average of the weights lives: none, gpu (an fp32 copy beside the optimizer
states) or cpu (host memory, updated asynchronously after each step: DeepSeek-V3 §3.2.3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    """The stack's memory facts, read by the memory model (planner/memory.py). Each is a fact of the framework or
    recipe with its source; a user stack file or `--memory KEY=VALUE` sets any of them on its own."""

    weight_bytes: int
    """Bytes per parameter as the framework stores the parameters: 2 (bf16 parameters, a separate fp32 master
    copy in the optimizer: Megatron, DeepSpeed, nanotron) or 4 (fp32 parameters cast to bf16 for compute:
    PyTorch FSDP mixed precision, MaxText weight_dtype float32)."""
    master_weight_bytes: int
    """Bytes per parameter of the optimizer's master copy: 4 (fp32 master weights) or 0 (none: the parameters
    are fp32 already)."""
    grad_bytes: int
    """Bytes per element of the gradient accumulation buffer: 4 (fp32 main grads) or 2 (bf16)."""
    grad_copies: int
    """Copies of every gradient in the parameter dtype (2 B) held besides the accumulation buffer through the
    whole step, the activations' peak included: 0 (the weight-gradient GEMM accumulates straight into the
    buffer: Megatron's gradient-accumulation fusion), 1 (DeepSpeed's bf16 param.grad, cleared only when the next
    backward starts; torch DDP's bucket copy, allocated once)."""
    backward_grad_copies: int
    """Copies of every gradient in the parameter dtype (2 B) that exist only within each micro-batch's backward:
    autograd's param.grad, made as that micro-batch's activations are freed and dropped when its backward ends
    (nanotron's FP32GradientAccumulator.backward), so the peak holds whichever of the two is larger."""
    moment_bytes: int
    """Bytes per element of each of Adam's two moments: 4 (fp32), 2 (bf16: Megatron --exp-avg-dtype bf16,
    DeepSeek-V3 §3.3.3) or 1 (8-bit Adam)."""
    fp8_params: bool
    """Under fp8, linear weights are stored in fp8 (1 B, plus a 1 B transpose for the backward GEMMs) instead of
    bf16 (Transformer Engine fp8_model_init, Megatron --fp8-param-gather)."""
    fp8_weight_cache_bytes: int
    """Under fp8 without fp8 parameters: bytes per linear weight of the fp8 copies kept for the whole step (2:
    Transformer Engine caches the fp8 weight and its transpose across micro-batches; 0: the cast is redone at
    every use, torchao float8)."""
    fp8_activation_bytes: int
    """Under fp8, bytes per element of the input a linear layer keeps for its weight gradient: 1 (the fp8-cast
    input: Transformer Engine, DeepSeek-V3 §3.3.3) or 2 (the bf16 input, cast again in backward: torchao float8's
    matmul_with_hp_or_float8_args)."""
    fp8_attention_output: str
    """What fp8 training keeps of the attention output (one of FP8_ATTENTION_OUTPUTS)."""
    fp8_swiglu_input: bool
    """Under fp8, the MoE experts' SwiGLU inputs are cached in fp8 and its output recomputed in backward
    (DeepSeek-V3 §3.3.3); otherwise the inputs stay bf16 and the output is kept for the down-projection."""
    logit_bytes: float
    """Bytes per logit (token × vocabulary entry) alive at the loss's peak: the bf16 logits and whatever copies
    the cross entropy keeps (an fp32 upcast, its softmax, the gradient)."""
    loss_compiled: bool
    """When compilation is on, the loss is compiled too (torchtitan since pytorch/torchtitan#1033): the compiled
    cross entropy keeps the bf16 logits and recomputes the softmax in backward (memory.COMPILED_LOGIT_BYTES)
    instead of logit_bytes."""
    loss_chunks: int
    """The head and loss run over this many chunks of the tokens at a time (a chunked or fused linear cross
    entropy), so only one chunk's logits exist at once; 1: all at once."""
    vocab_parallel_loss: bool
    """The logits stay split over the tensor-parallel group for the loss (Megatron's vocab-parallel cross
    entropy, torchtitan loss_parallel); False: every TP rank holds all of them."""
    zero3_unit: str
    """What ZeRO-3 gathers at a time (one of ZERO3_UNITS)."""
    pipeline_grad_shards: bool
    """Under a pipeline, ZeRO-2/3 reduce-scatter every micro-batch's gradients and accumulate them in shards
    (Meta's FSDP for Llama 3); False: they accumulate unsharded until the last micro-batch, then reduce once
    (Megatron; torchtitan turns gradient sync off until the last micro-batch). Without a pipeline ZeRO-2/3
    always reduce each micro-batch."""
    pipeline_ends: str
    """How layers are cut into pipeline stages (one of PIPELINE_ENDS)."""
    allocator: str
    """The CUDA caching allocator's configuration (one of ALLOCATORS)."""
    optimizer_offload: float
    """Share of the optimizer states (master weights and moments) kept in host memory and stepped by the CPU
    (Megatron --optimizer-cpu-offload --optimizer-offload-fraction, DeepSpeed ZeRO-Offload); 0: none."""
    activation_offload: float
    """Share of the transformer layers whose saved activations are copied to host memory after their forward
    and back before their backward (Megatron --cpu-offloading-num-layers, activation offloading); 0: none."""
    ema: str
    """Where an EMA of the weights is kept (one of EMA_PLACES)."""


FACT_SECTIONS = ("kernels", "communication", "runs")
"""Sections whose every field is a fact that needs a source."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSpec:
    """A training stack: the facts of a framework that change the cost of a layout."""

    name: str
    description: str
    kernels: Kernels
    communication: Communication
    recompute: dict[str, str]
    """Recompute name (strategy.RECOMPUTE) -> what it recomputes in this stack (one of RECOMPUTE_KINDS); a
    name the stack lacks cannot be run."""
    runs: Runs
    memory: Memory
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    """Fact path (``kernels.attention``, ``recompute.selective``, ...) -> where its value comes from."""
    fit: dict[str, object] = field(default_factory=dict, compare=False)
    """What `parplan calibrate` fitted into this stack: the knobs, the runs and their residuals."""
    source: str = field(default="", compare=False)
    """Preset name or file path."""

    def with_compile(self, on: bool | None) -> StackSpec:
        """The stack with compilation switched on or off (None: its default)."""
        if on is None or on == self.kernels.compile:
            return self
        return dataclasses.replace(self, kernels=dataclasses.replace(self.kernels, compile=on))

    @property
    def compiled(self) -> bool:
        """Compilation is on and the stack has something to compile."""
        return self.kernels.compile and self.kernels.compile_scope != "none"

    def facts(self) -> list[tuple[str, object, str]]:
        """(path, value, source) of every fact, in file order."""
        out: list[tuple[str, object, str]] = []
        for section in ("kernels", "communication", "runs"):
            for f in dataclasses.fields(getattr(self, section)):
                path = f"{section}.{f.name}"
                out.append((path, getattr(getattr(self, section), f.name), self.sources.get(path, "")))
        for name, kind in self.recompute.items():
            path = f"recompute.{name}"
            out.append((path, kind, self.sources.get(path, "")))
        for f in dataclasses.fields(self.memory):
            path = f"memory.{f.name}"
            out.append((path, getattr(self.memory, f.name), self.sources.get(path, "")))
        return out

    def summary(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "facts": {path: {"value": value, "source": source} for path, value, source in self.facts()},
            "fit": dict(self.fit),
        }
