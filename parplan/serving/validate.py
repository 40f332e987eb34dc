"""Predicted against measured: evaluate validation cases in groups (one vectorised call per model, cluster,
engine, precision and mode) and summarise the absolute percentage errors per metric."""

from __future__ import annotations

import collections
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from parplan._input import check_input
from parplan._resources import data_dir
from parplan.errors import ConfigError, ParplanError
from parplan.hardware import load_cluster
from parplan.hardware.spec import ClusterSpec
from parplan.models import ModelSpec, load_model
from parplan.serving.cases import Case, read_measured_csv
from parplan.serving.engines import Engine, load_engine
from parplan.serving.evaluate import Traffic, evaluate_aggregated, evaluate_disaggregated
from parplan.serving.layout import PoolArrays
from parplan.serving.published import evaluate_special, read_published_yaml
from parplan.serving.spec import check_deployment


@dataclass(frozen=True, slots=True)
class CaseResult:
    case: Case
    predicted: dict[str, float]
    error: str | None
    """Why the case was not predicted (None: it was)."""

    def ape(self, metric: str) -> float | None:
        """|predicted / measured − 1| of one metric, None where either is missing."""
        m, p = self.case.measured.get(metric), self.predicted.get(metric)
        if self.error or m is None or p is None or not np.isfinite(p):
            return None
        return abs(p / m - 1.0)


_LAYOUT_FIELDS = ("pool", "prefill", "decode")
"""Deployment fields a group of cases may differ in (evaluated together as arrays); every other field (engine,
precision, mode and each launch setting) is the group's."""


def _group_key(case: Case) -> tuple:
    d = case.deployment
    assert d is not None
    w = case.workload
    assert w is not None
    # one Traffic per group: its speculative decoding is one for all (Traffic.of_many)
    return (case.model, case.cluster, w.mtp, w.acceptance, *(getattr(d, f.name) for f in fields(d)
                                                             if f.name not in _LAYOUT_FIELDS))


@functools.lru_cache(maxsize=256)
def _model(name: str) -> ModelSpec:
    return load_model(name)


@functools.lru_cache(maxsize=64)
def _cluster(name: str) -> ClusterSpec:
    return load_cluster(name)


def _evaluate_group(cases: list[Case], engine: Engine) -> list[dict[str, float]]:
    first = cases[0]
    d0 = first.deployment
    assert d0 is not None and first.cluster is not None
    model, cluster = _model(first.model), _cluster(first.cluster)
    traffic = Traffic.of_many([c.workload for c in cases])  # type: ignore[misc]
    if d0.mode == "aggregated":
        lay = PoolArrays.from_pools([c.deployment.pool for c in cases])  # type: ignore[union-attr,misc]
        ev = evaluate_aggregated(model, cluster, engine, d0.precision, lay, traffic, d0.chunk_tokens)
        fits = ev.memory.fits
    else:
        pre = PoolArrays.from_pools([c.deployment.prefill for c in cases])  # type: ignore[union-attr,misc]
        dec = PoolArrays.from_pools([c.deployment.decode for c in cases])  # type: ignore[union-attr,misc]
        ev = evaluate_disaggregated(model, cluster, engine, d0.precision, pre, dec, traffic, d0.chunk_tokens)
        fits = ev.prefill_memory.fits & ev.decode_memory.fits
    out = []
    for i in range(len(cases)):
        if not fits[i]:
            out.append({})
            continue
        out.append({"ttft_ms": float(ev.phase.ttft[i] * 1e3), "tpot_ms": float(ev.phase.tpot[i] * 1e3),
                    "request_latency_ms": float(ev.request_latency[i] * 1e3),
                    "output_tok_s_per_gpu": float(ev.output_tok_s_per_gpu[i])})
    return out


def shipped_files() -> tuple[Path, Path]:
    """The public serving data shipped with parplan (sources in data/serving/SOURCES.md)."""
    return data_dir("serving") / "serving_measured.csv", data_dir("serving") / "published_serving.yaml"


def load_serving_cases(path: str | Path | None = None) -> list[Case]:
    """Cases of a measured-rows CSV (.csv) or a published-deployments YAML (.yaml/.yml); both shipped files when
    no path is given."""
    if path is None:
        csv_file, yaml_file = shipped_files()
        return read_measured_csv(csv_file) + read_published_yaml(yaml_file)
    check_input(path)  # a missing file or a directory is named as such, whatever its suffix
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return read_measured_csv(path)
    if suffix in (".yaml", ".yml"):
        return read_published_yaml(path)
    raise ConfigError("expected a .csv of measured rows or a .yaml of published deployments", file=str(path))


def evaluate_cases(cases: Iterable[Case], engines: Mapping[str, Engine] | None = None) -> list[CaseResult]:
    """Predict every case (refused ones keep their reason); `engines` overrides the shipped engines (a
    calibration in progress)."""
    cases = list(cases)
    results: dict[int, CaseResult] = {}
    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, case in enumerate(cases):
        if case.refused:
            results[i] = CaseResult(case, {}, case.refused)
            continue
        if case.kind != "closed_loop":
            engine = engines[case.engine] if engines and case.engine in engines else load_engine(case.engine)
            if case.deployment is not None:
                engine = engine.launched(case.deployment)
            try:
                predicted = evaluate_special(case, engine)
                results[i] = CaseResult(case, predicted, None if predicted else
                                        "the model predicts it does not fit in GPU memory")
            except ParplanError as e:
                results[i] = CaseResult(case, {}, str(e))
            continue
        try:
            check_deployment(_model(case.model), _cluster(case.cluster), case.deployment,  # type: ignore[arg-type]
                             case.workload, load_engine(case.engine))  # type: ignore[arg-type]
        except ParplanError as e:
            results[i] = CaseResult(case, {}, str(e))
            continue
        groups[_group_key(case)].append(i)
    for members in groups.values():
        group = [cases[i] for i in members]
        name = group[0].deployment.engine  # type: ignore[union-attr]
        engine = engines[name] if engines and name in engines else load_engine(name)
        engine = engine.launched(group[0].deployment)  # type: ignore[arg-type]
        for i, predicted in zip(members, _evaluate_group(group, engine), strict=True):
            error = None if predicted else "the model predicts it does not fit in GPU memory"
            results[i] = CaseResult(cases[i], predicted, error)
    return [results[i] for i in range(len(cases))]


def metric_family(name: str) -> str:
    """A metric's family, its name without the workload the file appends (per ISL/OSL pair, per batch and
    prompt length): total_output_tok_s_1000_1000 -> total_output_tok_s, prefill_ms_b1_isl512 -> prefill_ms."""
    return re.sub(r"_\d+_\d+$", "", re.sub(r"_b\d+_isl\d+$", "", name))


def summarize(results: list[CaseResult], by: str | None = None) -> list[dict[str, Any]]:
    """Per group (a case tag, or all cases): cases, predicted share, and per metric family the median, p90 and
    mean absolute percentage error."""
    groups: dict[str, list[CaseResult]] = collections.defaultdict(list)
    for r in results:
        groups[r.case.tags.get(by, "?") if by else "all"].append(r)
    rows = []
    for name, members in sorted(groups.items()):
        metrics: dict[str, dict[str, float | int]] = {}
        families: dict[str, list[float]] = collections.defaultdict(list)
        for r in members:
            for metric in r.case.measured:
                if (e := r.ape(metric)) is not None:
                    families[metric_family(metric)].append(e)
        for metric, values in sorted(families.items()):
            errs = np.array(values)
            if len(errs):
                metrics[metric] = {"n": len(errs), "median_ape": float(np.median(errs)),
                                   "p90_ape": float(np.percentile(errs, 90)), "mean_ape": float(errs.mean())}
        predicted = sum(1 for r in members if r.error is None)
        rows.append({(by or "group"): name, "cases": len(members), "predicted": predicted,
                     "predicted_share": predicted / len(members), "metrics": metrics})
    return rows
