"""The KV cache: bytes each token (and each sequence) keeps, per attention kind, and how a layout shards it.

Per layer and token (``reference/serving.md`` goal table, aiconfigurator PR #1537 for the sliding-window case):
- MHA / GQA / MQA: K and V of the KV heads, 2·kv_heads·head_dim elements;
- MLA (DeepSeek-V2/V3): the compressed latent and the shared rotary key, kv_lora_rank + qk_rope_head_dim
  elements (512 + 64), the same for every head;
- sparse attention (DSA) adds the indexer's key, index_head_dim fp8 elements plus one fp32 scale (DeepSeek-V3.2
  inference/model.py keeps it in fp8 with per-128 scales);
- sliding-window and chunked local layers keep at most the window;
- linear-attention layers (Gated DeltaNet) keep a constant state per sequence instead: value_heads·dk·dv in
  fp32 (Qwen3.5 mamba_ssm_dtype) plus the last kernel − 1 inputs of the convolution.
Paged engines allocate whole blocks of `block_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.hardware.efficiency import DTYPE_BYTES, ArrayLike
from parplan.models.spec import ModelSpec

STATE_BYTES = 4.0
"""Bytes per element of a linear-attention recurrent state (float32: Qwen3.5 config mamba_ssm_dtype)."""

INDEXER_KEY_BYTES_EXTRA = 4.0
"""The DSA indexer key's fp32 scale per token (one 128-element group)."""


def kv_dtype_bytes(kv_dtype: str) -> float:
    """Bytes per KV-cache element: bf16 2, fp8 1, fp4 (NVFP4) 0.5625."""
    return DTYPE_BYTES[kv_dtype]


@dataclass(frozen=True, slots=True)
class KVShape:
    """What one sequence keeps in one pipeline stage's worth of layers, before any TP split (scalars)."""

    full_layers: int
    """Layers whose cache grows with the whole context."""
    window_layers: int
    window: int
    """Tokens a windowed layer keeps (0 when there are none)."""
    linear_layers: int
    bytes_per_token: float
    """One full or windowed layer's bytes per token."""
    state_bytes: float
    """One linear-attention layer's bytes per sequence."""
    split_by_tp: bool
    """Whether tensor parallelism splits the cache (GQA heads, linear-attention heads) or every TP rank keeps
    all of it (MLA's latent)."""


def kv_shape(model: ModelSpec, kv_dtype: str) -> KVShape:
    a = model.attention
    b = kv_dtype_bytes(kv_dtype)
    if a.mla is not None:
        per_token = (a.mla.kv_lora_rank + a.mla.qk_rope_head_dim) * b
    else:
        per_token = 2 * a.kv_heads * a.head_dim * b
    if a.indexer is not None:
        per_token += a.indexer.head_dim * DTYPE_BYTES["fp8"] + INDEXER_KEY_BYTES_EXTRA
    state = 0.0
    if a.linear is not None:
        la = a.linear
        state = la.value_heads * la.key_head_dim * la.value_head_dim * STATE_BYTES
        state += la.conv_dim * (la.conv_kernel - 1) * DTYPE_BYTES["bf16"]
    return KVShape(full_layers=model.softmax_layers - a.sliding_layers, window_layers=a.sliding_layers,
                   window=a.sliding_window or 0, linear_layers=a.linear_layers, bytes_per_token=per_token,
                   state_bytes=state, split_by_tp=a.mla is None)


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str) -> float:
    """Bytes of KV cache one token adds over all layers of the model (full-context layers only; windowed
    layers stop growing at the window, linear layers never grow)."""
    s = kv_shape(model, kv_dtype)
    return s.full_layers * s.bytes_per_token


def sequence_bytes(model: ModelSpec, kv_dtype: str, tokens: ArrayLike) -> np.ndarray:
    """Bytes one sequence of `tokens` keeps over all layers, unsharded."""
    s = kv_shape(model, kv_dtype)
    t = np.asarray(tokens, dtype=float)
    return (s.full_layers * t + s.window_layers * np.minimum(t, s.window)) * s.bytes_per_token + (
        s.linear_layers * s.state_bytes)


def tp_share(model: ModelSpec, tp: ArrayLike) -> np.ndarray:
    """Fraction of a layer's cache one TP rank keeps: 1/tp of the KV heads (at least one head: vLLM and
    SGLang replicate a head over tp/kv_heads ranks when tp > kv_heads), all of MLA's latent."""
    a = model.attention
    tp = np.asarray(tp, dtype=float)
    if a.mla is not None:
        return np.ones_like(tp)
    return np.maximum(1.0 / tp, 1.0 / a.kv_heads)


def gpu_sequence_bytes(model: ModelSpec, kv_dtype: str, tokens: ArrayLike, tp: ArrayLike, pp: ArrayLike,
                       block_tokens: int = 1) -> np.ndarray:
    """Bytes one sequence of `tokens` keeps on each GPU of its attention rank: its pipeline stage's layers,
    this TP rank's share, whole blocks of `block_tokens` (the last block of a sequence is allocated whole)."""
    t = np.ceil(np.asarray(tokens, dtype=float) / block_tokens) * block_tokens
    s = kv_shape(model, kv_dtype)
    layers_share = 1.0 / np.asarray(pp, dtype=float)
    grow = (s.full_layers * t + s.window_layers * np.minimum(t, s.window)) * s.bytes_per_token
    linear = s.linear_layers * s.state_bytes
    return layers_share * (grow * tp_share(model, tp) + linear / np.asarray(tp, dtype=float))
