"""The model types the serving configs need (minimax_m2, kimi_k2/k25, glm_moe_dsa, qwen3_5_moe, llama4, falcon,
bloom, opt), read from the shipped Hugging Face configs (parplan/data/models/hub, provenance in its SOURCES.md).

Expected counts: BLOOM's published 176,247,271,424 parameters (BigScience model card); the others are the totals
SOURCES.md records for each file, or hand calculations written out below.
"""

from __future__ import annotations

import pytest

from parplan.errors import ConfigError, UnknownPresetError, UnsupportedModelError
from parplan.models import load_model, model_from_hf_dict

# (hub id, total params in billions, active params in billions): hub/SOURCES.md "Model -> model_type" table.
SOURCES_TOTALS = [
    ("MiniMaxAI/MiniMax-M2.5", 228.7, 11.0),
    ("moonshotai/Kimi-K2-Instruct", 1026.4, 32.9),
    ("moonshotai/Kimi-K2.5", 1026.4, 32.9),
    ("zai-org/GLM-5", 743.9, 41.8),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 107.8, 17.2),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", 400.7, 17.2),
    ("openai/gpt-oss-20b", 20.9, 4.2),
    ("deepseek-ai/DeepSeek-R1", 671.0, 37.6),
    ("tiiuae/falcon-180B", 178.6, 178.6),
]


@pytest.mark.parametrize(("hub_id", "total", "active"), SOURCES_TOTALS)
def test_serving_model_counts(hub_id, total, active):
    m = load_model(hub_id)
    assert m.params_total / 1e9 == pytest.approx(total, abs=0.05)
    assert m.params_active / 1e9 == pytest.approx(active, abs=0.05)


def test_bloom_exact_published_count():
    """BigScience BLOOM model card: 176,247,271,424 parameters (tied embeddings, ALiBi, embedding LayerNorm)."""
    m = load_model("bigscience/bloom")
    assert m.params_total == 176_247_271_424
    assert m.position == "alibi" and m.embedding_norm and m.tied_embeddings


def test_falcon_180b_by_hand():
    """h=14848, 80 layers, 232 q / 8 kv heads of 64, 4h GeLU MLP, no biases, tied embeddings (vocab 65024):
    per layer qkv 14848·(232+16)·64 + out 14848² + MLP 2·14848·59392 + 2 LayerNorms of 2·14848."""
    h = 14848
    layer = h * 248 * 64 + h * h + 2 * h * 4 * h + 2 * 2 * h
    total = 80 * layer + 65024 * h + 2 * h
    assert load_model("tiiuae/falcon-180B").params_total == total


def test_falcon_single_norm_blocks_refused():
    cfg = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
           "vocab_size": 65024, "parallel_attn": True, "new_decoder_architecture": False}
    with pytest.raises(ConfigError, match="new_decoder_architecture"):
        model_from_hf_dict(cfg, name="falcon-7b")


def test_qwen3_5_hybrid_layers_by_hand():
    """Qwen3.5-397B-A17B: 45 Gated DeltaNet layers and 15 full GQA layers (full_attention_interval 4).
    DeltaNet layer (transformers Qwen3NextGatedDeltaNet shapes): qkvz 4096·(2·16·128 + 2·64·128), ba 4096·128,
    out 64·128·4096, conv (2·2048 + 8192)·4, A_log and dt_bias 64 each, gated norm 128.
    Full layer: q 4096·(32·256·2) (output gate), k and v 4096·(2·256) each, o 8192·4096, q/k norms 256 each."""
    m = load_model("Qwen/Qwen3.5-397B-A17B")
    a = m.attention
    assert (a.linear_layers, m.softmax_layers, a.output_gate, m.mtp_layers) == (45, 15, True, 1)
    delta = 4096 * 20480 + 4096 * 128 + 8192 * 4096 + 12288 * 4 + 64 + 64 + 128
    full = 4096 * 16384 + 2 * 4096 * 512 + 8192 * 4096 + 2 * 256
    assert sum(x.params for x in m.linear_attention_linears()) + m.attention_other_params(linear=True) == delta
    assert sum(x.params for x in m.attention_linears()) + m.attention_other_params() == full
    moe = 512 * 3 * 4096 * 1024 + 3 * 4096 * 1024 + 4096 + 4096 * 512  # experts, shared, its gate, router
    total = 45 * delta + 15 * full + 60 * (moe + 2 * 4096) + 4096 + 2 * 248320 * 4096
    assert m.params_total == total


def test_llama4_chunked_local_layers():
    """Llama 4 (transformers Llama4TextConfig): no_rope_layers [] -> a NoPE (global) layer every 4th, the RoPE
    layers attend within chunks of attention_chunk_size 8192; Maverick is MoE on every 2nd layer only."""
    scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert (scout.attention.sliding_layers, scout.attention.sliding_window, scout.attention.chunked) == (36, 8192, True)
    maverick = load_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert maverick.moe_layer_count == 24 and maverick.moe.layers[:2] == (False, True)
    # A query at position 10,000 of a chunked layer sees 10,000 - 8192 = 1,808 keys of its own chunk: over a
    # 10,000-token sequence the mean is (8192·8193/2 + 1808·1809/2) / 10,000.
    expected = (8192 * 8193 / 2 + 1808 * 1809 / 2) / 10_000
    assert scout.attention_kv_tokens(10_000, sliding=True) == pytest.approx(expected)


def test_glm5_sparse_attention_indexer():
    """GLM-5 config: index_n_heads 32, index_head_dim 128, index_topk 2048: a query reads at most 2048 keys."""
    m = load_model("zai-org/GLM-5")
    assert (m.attention.indexer.heads, m.attention.indexer.head_dim, m.attention.indexer.topk) == (32, 128, 2048)
    # causal 8192-token prefill: positions beyond 2048 read 2048 keys each
    assert m.attention_kv_tokens(8192) == pytest.approx((2048 * 2049 / 2 + (8192 - 2048) * 2048) / 8192)


def test_kimi_k25_wrapper_unwraps_text_config():
    m = load_model("moonshotai/Kimi-K2.5")
    assert m.family == "kimi_k2" and m.moe.experts == 384 and m.attention.mla.kv_lora_rank == 512


def test_quantised_checkpoint_aliases_and_unknown_ids():
    assert load_model("nvidia/DeepSeek-R1-NVFP4").params_total == load_model("deepseek-ai/DeepSeek-R1").params_total
    with pytest.raises(UnknownPresetError):
        load_model("deepseek-v9")


def test_unknown_model_type_and_minimax_linear_layers_refused():
    with pytest.raises(UnsupportedModelError, match="mamba"):
        model_from_hf_dict({"model_type": "mamba"}, name="x")
    cfg = {"model_type": "minimax_m2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
           "vocab_size": 100, "intermediate_size": 32, "num_local_experts": 4, "num_experts_per_tok": 2,
           "attn_type_list": [0, 1]}
    with pytest.raises(ConfigError, match="attn_type_list"):
        model_from_hf_dict(cfg, name="x")
