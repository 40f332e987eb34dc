"""Rebuild data/serving/moe_kernels.csv from aiconfigurator's kernel database.

    pip install pyarrow      # not a parplan dependency: only this script reads parquet
    python benchmarks/moe_kernel_extract.py AICONFIGURATOR_CHECKOUT > parplan/data/serving/moe_kernels.csv

Reads `aic-core/src/aiconfigurator_core/systems/data/<gpu>/moe/<engine>/<version>/moe_perf.parquet` of a checkout
(ai-dynamo/aiconfigurator @ 095f58a for the shipped file) and keeps what benchmarks/moe_kernel_fit.py fits the
engines' routed-expert ceilings to: per GPU system of FITTED_SYSTEMS (the measured rows' systems but the RTX PRO
6000) the first of each engine's VERSIONS with such rows, balanced routing, the routed-expert shapes of MODELS, the
formats of FORMATS, moe_tp × moe_ep ≤ 8 and the token counts of TOKENS; configurations collected more than once
are averaged. Seconds.
"""

from __future__ import annotations

from pathlib import Path

from _aiconfigurator import FITTED_SYSTEMS, collect, rebuild  # benchmarks/, beside this script

from parplan.hardware.presets import load_cluster
from parplan.models import load_model
from parplan.serving.cases import SYSTEMS

MODELS = ("deepseek-ai/DeepSeek-R1", "moonshotai/Kimi-K2.5", "MiniMaxAI/MiniMax-M2.5", "Qwen/Qwen3-235B-A22B-FP8",
          "openai/gpt-oss-120b")
"""The shipped MoE models whose routed-expert layer shapes are kept."""
VERSIONS = {"vllm": ("0.24.0",), "sglang": ("0.5.14", "0.5.9", "0.5.10"), "trtllm": ("1.2.0rc5", "1.3.0rc10")}
"""vLLM's 0.24 collector builds FusedMoE, which picks the kernel as the engine does (its 0.19 one timed the Triton
kernel directly); SGLang's and TensorRT-LLM's versions nearest the measured rows', except SGLang on Blackwell
(SGLANG_RUNNER)."""
SGLANG_RUNNER = {"blackwell": ("0.5.14", "sglang_flashinfer_trtllm_moe")}
"""The SGLang collector and MoE runner of each architecture whose deployments launch another runner than its own
default: every InferenceX script that runs an MoE model on SGLang on Blackwell passes `--moe-runner-backend
flashinfer_trtllm` (`--enable-flashinfer-trtllm-moe` before 2025-11-09; SemiAnalysisAI/InferenceX
benchmarks/single_node/fixed_seq_len/{dsr1,qwen3.5,glm5}_*_b{2,3}00*.sh @843c6254f, dsr1_fp8_b200_docker.sh since
425f74d51, 2025-09-12), which only SGLang 0.5.14's collector times; elsewhere the first version with rows, whose
runner is SGLang's Triton fused MoE (cutedsl for NVFP4)."""
FORMATS = {"bfloat16": "bf16", "fp8_block": "fp8", "nvfp4": "fp4", "w4a16_mxfp4": "fp4"}
"""aiconfigurator's MoE dtypes -> parplan's expert weight formats: fp4 is NVFP4 where the GPU has fp4 tensor cores,
MXFP4 with 16-bit activations (W4A16) where it has not (serving.step.compute_format)."""
TOKENS = (1024, 2048, 4096, 8192, 16384)
COLUMNS = ("engine", "version", "kernel_source", "system", "format", "model", "tokens", "moe_tp", "moe_ep",
           "latency_ms")


def rows(root: Path) -> list[dict[str, object]]:
    shapes = {}
    for name in MODELS:
        model = load_model(name)
        assert model.moe is not None
        shapes[(model.hidden, model.moe.expert_ffn, model.moe.top_k, model.moe.experts)] = name
    gpus = {system: load_cluster(cluster).gpu for system, cluster in SYSTEMS.items()}
    fp4_cores = {system: gpu.supports_fp4 for system, gpu in gpus.items()}

    def runs(engine: str, version: str, system: str, kernel: str) -> bool:
        """Whether the row's collector and kernel are the ones kept for its engine and GPU (SGLANG_RUNNER)."""
        if engine != "sglang":
            return True
        wanted = SGLANG_RUNNER.get(gpus[system].arch)
        return (version, kernel) == wanted if wanted else version != "0.5.14"

    def key_of(engine: str, version: str, system: str, r: dict) -> tuple | None:
        model = shapes.get((r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"]))
        fmt = FORMATS.get(r["moe_dtype"])
        if (model is None or fmt is None or not runs(engine, version, system, r["kernel_source"])
                or r["distribution"] != "balanced" or r["num_tokens"] not in TOKENS
                or r["moe_tp_size"] * r["moe_ep_size"] > 8
                or (fmt == "fp4" and fp4_cores[system] == (r["moe_dtype"] == "w4a16_mxfp4"))):
            return None
        return (engine, version, r["kernel_source"], system, fmt, model, r["num_tokens"], r["moe_tp_size"],
                r["moe_ep_size"])

    return collect(root, "moe/moe", VERSIONS, FITTED_SYSTEMS, key_of, COLUMNS)


def main() -> None:
    rebuild("moe_kernel_extract.py", COLUMNS, rows)


if __name__ == "__main__":
    main()
