"""CLI: models and hardware commands, JSON output, and every error path with its exit code."""

from __future__ import annotations

import json


def test_models_show_json_has_the_documented_keys(run_json):
    doc = run_json("models", "show", "mixtral-8x7b")
    for key in ("name", "params", "active_params", "layers", "hidden", "heads", "kv_heads", "experts", "top_k"):
        assert key in doc
    # Mixtral-8x7B: 46,702,792,704 total / 12,879,925,248 active (hf_configs/SOURCES.md)
    assert (doc["params"], doc["active_params"], doc["experts"], doc["top_k"]) == (
        46_702_792_704, 12_879_925_248, 8, 2)


def test_models_show_hf_file(run_json, tmp_path):
    from parplan._resources import data_dir

    p = tmp_path / "config.json"
    p.write_text((data_dir("models") / "qwen3-8b.json").read_text())
    assert run_json("models", "show", str(p))["params"] == 8_190_735_360


def test_models_list_json(run_json):
    names = [m["name"] for m in run_json("models", "list")["models"]]
    assert "deepseek-v3" in names and "gpt3-175b" in names


def test_models_show_human(run_cli):
    code, out, _ = run_cli("models", "show", "deepseek-v3")
    assert code == 0 and "671,026,419,200" in out and "MTP" in out


def test_hardware_list_and_show(run_json, run_cli):
    assert "h100" in [c["name"] for c in run_json("hardware", "list")["clusters"]]
    doc = run_json("hardware", "show", "h800", "--gpus", "2048")
    assert doc["gpus"] == 2048 and doc["scaleup"]["bandwidth_gbps"] == 200
    code, out, _ = run_cli("hardware", "show", "mi300x")
    assert code == 0 and "Sources" in out


def test_unknown_preset_exit_1_with_suggestion(run_cli):
    code, out, err = run_cli("models", "show", "llama3.1-8bb")
    assert code == 1 and out == ""
    assert "did you mean 'llama3.1-8b'" in err and "Traceback" not in err


def test_unknown_cluster_exit_1(run_cli):
    code, _, err = run_cli("hardware", "show", "h1000")
    assert code == 1 and "h100" in err


def test_malformed_model_file_exit_1(run_cli, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    code, _, err = run_cli("models", "show", str(p))
    assert code == 1 and "bad.json" in err and "not valid JSON" in err


def test_missing_field_named(run_cli, tmp_path):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    code, _, err = run_cli("models", "show", str(p))
    assert code == 1 and "field 'num_attention_heads'" in err


def test_unsupported_model_type(run_cli, tmp_path):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"model_type": "bert"}))
    code, _, err = run_cli("models", "show", str(p))
    assert code == 1 and "unsupported model_type 'bert'" in err and "qwen3_moe" in err


def test_usage_errors_exit_2(run_cli):
    assert run_cli("models", "shw", "x")[0] == 2
    assert run_cli("hardware", "show", "h100", "--gpus", "0")[0] == 2
    assert run_cli("nonsense")[0] == 2


def test_no_args_shows_help(run_cli):
    _, out, err = run_cli()
    assert "models" in out + err


def test_console_script_entry_point():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "parplan", "models", "show", "gpt2", "--json"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["params"] == 124_439_808
