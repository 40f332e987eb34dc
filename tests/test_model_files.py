"""Reading models from Hugging Face config.json files and parplan YAML files, and their errors."""

from __future__ import annotations

import json

import pytest

from parplan.errors import ConfigError, UnknownPresetError, UnsupportedModelError
from parplan.models import load_model, model_from_hf_dict, model_from_yaml_dict
from parplan.models.presets import _load_preset


def _hf(name: str) -> dict:
    from parplan._resources import data_dir

    return json.loads((data_dir("models") / f"{name}.json").read_text())


def test_old_and_new_rope_and_dtype_keys_read_the_same():
    """transformers v5 renamed rope_scaling -> rope_parameters (with rope_theta inside), torch_dtype -> dtype."""
    old = _hf("llama3.1-8b")
    new = dict(old)
    new["rope_parameters"] = dict(new.pop("rope_scaling"), rope_theta=new.pop("rope_theta"))
    new["dtype"] = new.pop("torch_dtype")
    a = model_from_hf_dict(old, name="x")
    b = model_from_hf_dict(new, name="x")
    assert a == b
    assert (b.rope_theta, b.rope_scaling, b.dtype) == (500000.0, "llama3", "bfloat16")


def test_text_config_is_unwrapped():
    wrapped = {"model_type": "llava", "text_config": _hf("qwen3-8b")}
    assert model_from_hf_dict(wrapped, name="q").params_total == 8_190_735_360


def test_head_dim_independent_of_hidden():
    """Qwen3-32B: 64 heads × 128 = 8192 != hidden 5120 (ecosystem.md trap 7)."""
    m = load_model("qwen3-32b")
    assert (m.hidden, m.attention.heads, m.attention.head_dim) == (5120, 64, 128)


def test_gpt2_type_extension_keys():
    """data/runs/models/README.md: num_key_value_heads in a gpt2-type file means GQA (Nemotron-4 340B);
    ignoring it overcounts by about 62B parameters (hand count below: 59.8B of K/V weights and biases)."""
    from parplan._resources import data_dir
    from parplan.models.presets import load_model_file

    m = load_model_file(data_dir("runs", "models") / "nemotron4-340b.json")
    assert m.attention.kv_heads == 8
    mha = model_from_hf_dict({**json.loads((data_dir("runs", "models") / "nemotron4-340b.json").read_text()),
                              "num_key_value_heads": None}, name="mha")
    h, layers, heads, kv, d = 18432, 96, 96, 8, 192
    extra_kv = layers * (2 * h * (heads - kv) * d + 2 * (heads - kv) * d)  # K and V weights + biases
    assert mha.params_total - m.params_total == extra_kv


def test_unsupported_model_type_lists_supported(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    with pytest.raises(UnsupportedModelError) as e:
        load_model(str(p))
    assert "t5" in str(e.value) and "llama" in str(e.value) and str(p) in str(e.value)


def test_malformed_json_names_file_and_line(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama",\n "hidden_size": }')
    with pytest.raises(ConfigError) as e:
        load_model(str(p))
    assert str(p) in str(e.value) and "line 2" in str(e.value)


def test_missing_and_mistyped_fields_are_named(tmp_path):
    cfg = _hf("llama3.1-8b")
    del cfg["hidden_size"]
    with pytest.raises(ConfigError, match="field 'hidden_size'"):
        model_from_hf_dict(cfg, name="x", file="cfg.json")
    cfg = _hf("llama3.1-8b")
    cfg["num_attention_heads"] = "32"
    with pytest.raises(ConfigError, match="cfg.json: field 'num_attention_heads': expected an integer"):
        model_from_hf_dict(cfg, name="x", file="cfg.json")


def test_kv_heads_must_divide_heads():
    cfg = _hf("llama3.1-8b")
    cfg["num_key_value_heads"] = 5
    with pytest.raises(ConfigError, match="attention.kv_heads"):
        model_from_hf_dict(cfg, name="x", file="cfg.json")


def test_unknown_preset_suggests_nearest():
    with pytest.raises(UnknownPresetError) as e:
        load_model("llama-3.1-8b")
    assert e.value.suggestions[0] == "llama3.1-8b"


def test_missing_file_path():
    with pytest.raises(ConfigError, match="no such file"):
        load_model("./nope/config.json")


LLAMA_YAML = """
name: my-llama
hidden: 4096
layers: 32
vocab: 128256
max_position: 131072
rope_theta: 500000
attention: {heads: 32, kv_heads: 8}
mlp: {ffn: 14336}
"""


def test_yaml_model_matches_hf_config(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(LLAMA_YAML)
    m = load_model(str(p))
    assert m.name == "my-llama"
    assert m.params_total == 8_030_261_248  # same model as the HF Llama-3.1-8B config


def test_yaml_moe_first_k_dense_and_frequency():
    import yaml

    data = yaml.safe_load(LLAMA_YAML)
    data["moe"] = {"experts": 8, "top_k": 2, "expert_ffn": 14336, "first_k_dense": 2, "layer_freq": 2}
    m = model_from_yaml_dict(data, name="x", file="m.yaml")
    assert m.moe.layers[:6] == (False, False, True, False, True, False)
    assert m.moe_layer_count == 15


@pytest.mark.parametrize(("patch", "field"), [
    ({"hiden": 1}, "hiden"),
    ({"attention": {"heads": 32, "kv_head": 8}}, "attention.kv_head"),
    ({"mlp": {"ffn": "big"}}, "mlp.ffn"),
    ({"attention": {"heads": 32}, "layers": None}, "layers"),
    ({"moe": {"experts": 8, "top_k": 2}}, "moe.expert_ffn"),
])
def test_yaml_errors_name_the_field(patch, field):
    import yaml

    data = yaml.safe_load(LLAMA_YAML)
    data.update(patch)
    with pytest.raises(ConfigError) as e:
        model_from_yaml_dict(data, name="x", file="m.yaml")
    assert e.value.file == "m.yaml" and e.value.field == field


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("hidden: 4096\nattention: {heads: 32\n")
    with pytest.raises(ConfigError) as e:
        load_model(str(p))
    assert str(p) in str(e.value) and "line" in str(e.value)


def test_every_preset_loads():
    from parplan.models import preset_names

    names = preset_names()
    for required in ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "mixtral-8x7b", "mixtral-8x22b",
                     "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b", "gpt3-175b"):
        assert required in names
    for name in names:
        assert _load_preset(name).params_total > 0
