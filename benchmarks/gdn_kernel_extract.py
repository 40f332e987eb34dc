"""Rebuild data/serving/gdn_kernels.csv from aiconfigurator's kernel database.

    pip install pyarrow      # not a parplan dependency: only this script reads parquet
    python benchmarks/gdn_kernel_extract.py AICONFIGURATOR_CHECKOUT > parplan/data/serving/gdn_kernels.csv

Reads `aic-core/src/aiconfigurator_core/systems/data/<gpu>/linear_attention/<engine>/<version>/gdn_perf.parquet` of a
checkout (ai-dynamo/aiconfigurator @ 095f58a for the shipped file) and keeps what benchmarks/gdn_kernel_fit.py fits
the engines' chunked Gated DeltaNet prefill rate to: per GPU system of FITTED_SYSTEMS (the measured rows' systems
but the RTX PRO 6000) the first of each engine's VERSIONS with chunked-kernel rows, the `chunk_gated_delta_rule`
context kernel at 1,024 tokens and more (batch x sequence length), every head shape the collector timed (the Qwen3.5
models' GDN heads over 1-16 GPUs); configurations collected twice are averaged. Seconds.
"""

from __future__ import annotations

from pathlib import Path

from _aiconfigurator import FITTED_SYSTEMS, collect, rebuild  # benchmarks/, beside this script

VERSIONS = {"vllm": ("0.22.0",), "sglang": ("0.5.14",), "trtllm": ("1.3.0rc10",)}
"""The first collector of each engine that timed the chunked prefill kernel: FLA's Triton chunk_gated_delta_rule in
all three (vLLM 0.24's collector times FlashInfer's GDN prefill kernel instead, which parplan's vLLM 0.11-0.19 did
not run; SGLang's 0.5.9 and 0.5.10 collectors timed only the convolution and the decode kernels)."""
KERNEL = "chunk_gated_delta_rule"
MIN_TOKENS = 1024
"""Below this a launch, not the heads' work, sets the time (about 20 µs on every GPU)."""
COLUMNS = ("engine", "version", "system", "batch", "seq_len", "key_heads", "value_heads", "key_head_dim",
           "value_head_dim", "latency_ms")


def rows(root: Path) -> list[dict[str, object]]:
    def key_of(engine: str, version: str, system: str, r: dict) -> tuple | None:
        if r["kernel_source"] != KERNEL or r["phase"] != "context" or r["num_tokens"] < MIN_TOKENS:
            return None
        return (engine, version, system, r["batch_size"], r["seq_len"], r["num_k_heads"], r["num_v_heads"],
                r["head_k_dim"], r["head_v_dim"])

    return collect(root, "linear_attention/gdn", VERSIONS, FITTED_SYSTEMS, key_of, COLUMNS)


def main() -> None:
    rebuild("gdn_kernel_extract.py", COLUMNS, rows)


if __name__ == "__main__":
    main()
