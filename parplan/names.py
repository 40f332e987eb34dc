"""The names users choose from: a layout's categorical settings, the frameworks plans are written for, and the
serving engines and formats.

Plain tuples with no imports, so that the command line can list them in its help without loading numpy or
the cost model; `parplan.planner.strategy` and `parplan.export` read them from here.
"""

RECOMPUTE = ("none", "selective", "modules", "full")
BLOCKS_PREFIX = "blocks:"
"""Recompute form "blocks:F": full recompute of a fraction F of the transformer blocks."""
SCHEDULES = ("1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev")
PRECISIONS = ("bf16", "fp8")
DISPATCHERS = ("alltoall", "deepep", "deepep-fp8")
"""How MoE tokens travel: alltoall sends every routed copy (Megatron's alltoall dispatcher); deepep sends
one copy per destination node and forwards it over NVLink there (DeepEP, Megatron's flex dispatcher);
deepep-fp8 also dispatches in fp8 (combine stays bf16), as DeepSeek-V3 trained."""
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan")
DEFAULT_STACK = "megatron-core"
"""The software stack a layout is costed as when none is named: Megatron-LM / NeMo with Transformer Engine
(parplan.stacks; presets in parplan/data/stacks)."""
"""Each is the module parplan.export.<name>, imported when first used."""
ENGINES = ("vllm", "sglang", "trtllm")
"""Serving engines (parplan.serving.engines holds what each runs and how)."""
MODES = ("aggregated", "disaggregated")
WEIGHT_DTYPES = ("bf16", "fp8", "fp4", "int4")
"""Weights of a group of linears: fp4 is NVFP4/MXFP4 (tensor cores on Blackwell, dequantised elsewhere), int4 is
weight-only (W4A16)."""
KV_DTYPES = ("bf16", "fp8", "fp4")
A2A_BACKENDS = ("auto", "allgather", "alltoall", "deepep")
"""How MoE tokens reach their experts under attention data parallelism: gather every rank's tokens and
reduce-scatter the outputs (vLLM's allgather_reducescatter, SGLang's DP gather), a NCCL/NVLink all-to-all
(TensorRT-LLM), DeepEP (normal kernels for prefill, low-latency kernels for decode), or the engine's default."""
