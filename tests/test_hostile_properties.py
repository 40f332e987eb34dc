"""Property test: model, cluster, runs, stack and serving files with random types and values in random fields
never reach the CLI's catch-all. Whatever the values, the exit code is one the README promises (0, 1, 2, 3)
and stderr holds no traceback and no "internal error". Runs in-process, a bounded number of examples per input kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hostile_corpus import PLAN, RUN, STACK, YAML_MODEL, _hf, _preset_stack, _published, set_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.cli import main

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-3, max_value=70_000), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=0.001, max_value=1e6),
    st.text(max_size=6), st.sampled_from(["llama", "h100", "bf16", "1f1b", "rmsnorm", "yes", "1e3", "[/]", "$\\x$"]),
    st.lists(st.integers(min_value=-2, max_value=64), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
"""Values of every JSON/YAML type, valid-looking and absurd."""

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _leaves(doc: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the scalar and list fields of a mapping (where mutations go), plus one new key per
    mapping (an unknown field)."""
    out = [f"{prefix}unknown_field"]
    for key, value in doc.items():
        if isinstance(value, dict):
            out += _leaves(value, f"{prefix}{key}.")
        out.append(f"{prefix}{key}")
    return out


def _mutated(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    paths = _leaves(base)

    def apply(changes: dict[str, Any]) -> dict[str, Any]:
        doc = base
        # Deepest first: a field inside a section is set before the section itself may be replaced.
        for path, value in sorted(changes.items(), key=lambda kv: -kv[0].count(".")):
            doc = set_path(doc, path, value)
        return doc

    return st.dictionaries(st.sampled_from(paths), VALUES, min_size=1, max_size=3).map(apply)


def _check(args: list[str], capsys) -> None:
    code = main(args)
    _, err = capsys.readouterr()
    assert code in (0, 1, 2, 3), err
    assert "internal error" not in err and "Traceback" not in err, err


HF_BASE = _hf("qwen3-30b-a3b")
CLUSTER_BASE = {"name": "mine", "base": "h100", "gpu": {"hbm_gib": 80, "hbm_tbps": 3.35},
                "scaleout": {"bandwidth_gbps": 50, "busbw_gbps": 40}, "calibration": {"compute_scale": 1.0}}


@SETTINGS
@given(doc=_mutated(HF_BASE))
def test_random_hf_configs_never_reach_the_catch_all(doc, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    _check(["explain", "-m", str(path), "-c", "h100", "-n", "8", "--ep", "8"], capsys)


@SETTINGS
@given(doc=_mutated(YAML_MODEL))
def test_random_model_yaml_never_reaches_the_catch_all(doc, tmp_path, capsys):
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(doc))
    _check(["explain", "-m", str(path), "-c", "h100", "-n", "8"], capsys)


@SETTINGS
@given(doc=_mutated(CLUSTER_BASE))
def test_random_cluster_files_never_reach_the_catch_all(doc, tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    _check(["explain", "-m", "llama3.1-8b", "-c", str(path), "-n", "16", "--tp", "8"], capsys)


@SETTINGS
@given(doc=_mutated(RUN))
def test_random_runs_files_never_reach_the_catch_all(doc, tmp_path, capsys):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([doc]))
    _check(["validate", "--data", str(path)], capsys)


@SETTINGS
@given(text=st.text(max_size=300))
def test_random_nccl_logs_never_reach_the_catch_all(text, tmp_path, capsys):
    path = Path(tmp_path) / "log.txt"
    path.write_text("# Collective test starting: all_reduce_perf\n" + text)
    _check(["hardware", "import-nccl-tests", str(path)], capsys)


@SETTINGS
@given(doc=_mutated(PLAN))
def test_random_saved_plans_never_reach_the_catch_all(doc, tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    _check(["export", str(path), "-f", "megatron"], capsys)


@SETTINGS
@given(rows=st.lists(st.lists(VALUES, min_size=1, max_size=9), min_size=1, max_size=3))
def test_random_expert_counts_never_reach_the_catch_all(rows, tmp_path, capsys):
    path = tmp_path / "counts.json"
    path.write_text(json.dumps({"counts": rows}))
    _check(["explain", "-m", "mixtral-8x7b", "-c", "h100", "-n", "8", "--ep", "8", "--expert-load", str(path)], capsys)


@SETTINGS
@given(doc=_mutated(STACK))
def test_random_stack_files_never_reach_the_catch_all(doc, tmp_path, capsys):
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(doc))
    _check(["explain", "-m", "llama3.1-8b", "-c", "h100", "-n", "8", "--tp", "8", "--zero", "2", "--stack", str(path)],
           capsys)


@SETTINGS
@given(doc=_mutated(_preset_stack()))
def test_random_full_stack_files_never_reach_the_catch_all(doc, tmp_path, capsys):
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(doc))
    _check(["stacks", "show", str(path), "--json"], capsys)


@SETTINGS
@given(doc=_mutated(_published()))
def test_random_published_serving_entries_never_reach_the_catch_all(doc, tmp_path, capsys):
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump([doc]))
    _check(["validate", "--serving", str(path), "--json"], capsys)
