"""Parameter and FLOP counts against published figures.

Expected values: reference/formulas.md §8 (param_check.py output) and hf_configs/SOURCES.md, which
reproduce the model cards (8.03B, 70.6B, 405.9B, 46.7B/12.9B, 141B, 30.5B, 235B, 671B/37B, 117B, 124M).
"""

from __future__ import annotations

import pytest

from parplan.models import LayerKind, load_model

# (preset, total params, active params) — formulas.md §8 and hf_configs/SOURCES.md, exact integers.
PUBLISHED = [
    ("llama3.1-8b", 8_030_261_248, None),
    ("llama3.1-70b", 70_553_706_496, None),
    ("llama3.1-405b", 405_853_388_800, None),
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    ("mixtral-8x22b", 140_620_634_112, 39_152_031_744),
    ("qwen3-30b-a3b", 30_532_122_624, 3_353_032_704),
    ("qwen3-235b-a22b", 235_093_634_560, 22_190_763_520),
    ("deepseek-v3", 671_026_419_200, 37_552_297_472),
    ("gpt-oss-120b", 116_829_156_672, 5_711_982_912),
    ("gpt2", 124_439_808, None),
    # ecosystem.md A1.3 table (computed from the real config files, matching the model cards)
    ("mistral-7b", 7_248_023_552, None),
    ("qwen2.5-7b", 7_615_616_512, None),
    ("qwen3-8b", 8_190_735_360, None),
    ("qwen3-32b", 32_762_123_264, None),
    ("qwen1.5-moe-a2.7b", 14_315_784_192, 2_689_173_504),
    ("deepseek-v2-lite", 15_706_484_224, 2_661_150_208),
]


@pytest.mark.parametrize(("name", "total", "active"), PUBLISHED)
def test_published_parameter_counts(name, total, active):
    model = load_model(name)
    assert model.params_total == total
    if active is not None:
        assert round(model.params_active) == active


def test_llama3_8b_per_layer_split():
    """formulas.md §8: Llama-3-8B per layer attn 41,943,040, mlp 176,160,768, norms 8,192."""
    m = load_model("llama3.1-8b")
    attn = sum(lin.params for lin in m.attention_linears())
    mlp = sum(lin.params for lin in m.mlp_linears(LayerKind.DENSE))
    assert (attn, mlp, m.layer_norm_params(LayerKind.DENSE)) == (41_943_040, 176_160_768, 8_192)


def test_deepseek_v3_mla_and_mtp():
    """formulas.md §8: MLA 187.11M per layer; MTP module 11.61B own params; one expert 44.04M."""
    m = load_model("deepseek-v3")
    mla = sum(lin.params for lin in m.attention_linears()) + 1536 + 512  # + the two latent norms
    assert mla / 1e6 == pytest.approx(187.11, abs=0.01)
    assert m.mtp_params_per_layer / 1e9 == pytest.approx(11.61, abs=0.01)
    expert = next(lin for lin in m.mlp_linears(LayerKind.MOE) if lin.name == "expert_up")
    down = next(lin for lin in m.mlp_linears(LayerKind.MOE) if lin.name == "expert_down")
    assert (expert.params + down.params) / expert.instances / 1e6 == pytest.approx(44.04, abs=0.01)
    assert m.moe.layers[:4] == (False, False, False, True)  # first_k_dense_replace = 3


def test_gpt3_175b_flops_match_korthikanti_closed_form():
    """Korthikanti et al. 2022 App. A: F = 72·B·s·L·h²·(1 + s/(6h) + V/(12·h·L)), full s² attention.

    formulas.md §8 checks it equals the per-GEMM sum for GPT-3 175B at B=1, s=2048 (2.2046e15).
    """
    m = load_model("gpt3-175b")
    s, h, L, V = 2048, 12288, 96, 51200
    closed = 72 * s * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    ours = m.training_flops_per_token(s, causal=False) * s
    assert ours == pytest.approx(closed, rel=1e-12)
    assert closed == pytest.approx(2.2046e15, rel=1e-4)


def test_deepseek_v3_flops_per_token():
    """DeepSeek ISCA'25 (arXiv 2505.09343): ~250 GFLOP per training token at s=4096;
    formulas.md §2.3 Megatron formula: 250.5 GF (router excluded there, 0.6 GF here)."""
    m = load_model("deepseek-v3")
    assert m.training_flops_per_token(4096, mtp=False) / 1e9 == pytest.approx(250.5, rel=0.005)


@pytest.mark.parametrize(("name", "gflops"), [
    ("llama3.1-8b", 48.2), ("llama3.1-70b", 433.1), ("llama3.1-405b", 2473.2), ("mixtral-8x7b", 79.7)])
def test_megatron_flops_per_token(name, gflops):
    """formulas.md §8: Megatron-style training FLOPs/token at s=4096 (causal-halved attention)."""
    assert load_model(name).training_flops_per_token(4096) / 1e9 == pytest.approx(gflops, abs=0.05)


def test_causal_convention_halves_attention():
    m = load_model("llama3.1-8b")
    full = m.attention_core_flops_per_token(8192, causal=False)
    assert m.attention_core_flops_per_token(8192, causal=True) == pytest.approx(full / 2)
    # Korthikanti per layer forward: 4·s²·h per sequence = 4·s·h per token (a·d_h = h here).
    assert full / m.layers == pytest.approx(4 * 8192 * 4096)


def test_sliding_window_layers_attend_to_window():
    """gpt-oss: 18 of 36 layers use a 128-token window (HF layer_types)."""
    m = load_model("gpt-oss-120b")
    assert (m.attention.sliding_window, m.attention.sliding_layers) == (128, 18)
    s = 4096
    w = 128
    expected_sliding = (w * (w + 1) / 2 + (s - w) * w) / s  # causal keys per query with a window
    assert m.attention_kv_tokens(s, sliding=True) == pytest.approx(expected_sliding)
