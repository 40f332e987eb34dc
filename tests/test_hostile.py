"""Hostile input: the corpus of tests/hostile_corpus.py run through the CLI in-process, and the rules that
hold for every case (exit code as promised, the message fragment, no traceback or internal error, --json
output pure, no partial output after a failure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_corpus import Case, all_cases

from parplan.cli import main

CASES = all_cases()


def test_the_corpus_is_large_and_covers_every_kind():
    kinds = {c.kind for c in CASES}
    assert len(CASES) >= 300
    assert {"hf", "model-yaml", "cluster", "runs", "plan", "expert-counts", "nccl-log", "cli", "output", "stack",
            "serving-csv", "serving-yaml", "serve-cli"} <= kinds
    assert {0, 1, 2, 3} <= {c.code for c in CASES}


def _write(folder: Path, case: Case) -> None:
    files = dict(case.files)
    if case.content is not None:
        files[f"input{case.suffix}"] = case.content
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", newline="")


def run_case(case: Case, folder: Path, capsys) -> tuple[int, str, str]:
    _write(folder, case)
    fill = {"{f}": str(folder / f"input{case.suffix}"), "{tmp}": str(folder)}
    args = []
    for arg in case.args:
        for key, value in fill.items():
            arg = arg.replace(key, value)
        args.append(arg)
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_case(case: Case, tmp_path, capsys):
    if case.requires:
        pytest.importorskip(case.requires)
    folder = tmp_path / "case"
    folder.mkdir()
    code, out, err = run_case(case, folder, capsys)
    assert "Traceback" not in err and "internal error" not in err, err
    assert code == case.code, f"exit {code}, expected {case.code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    if case.code != 0:
        assert case.fragment in err, err
        assert err.strip(), "a failure says why"
    elif case.fragment:
        assert case.fragment in out, out[-3000:]
    if "--json" in case.args:
        if code == 0:
            json.loads(out)  # exactly one document: anything else beside it fails to parse
        else:
            assert out == ""
    for path in case.absent:
        assert not Path(path.replace("{tmp}", str(folder))).exists(), path
