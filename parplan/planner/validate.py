"""Compare predictions with published, measured training runs (`parplan validate`).

The default data set (parplan/data/runs/published_runs.yaml, see its SOURCES.md) holds runs on A100 and
H100, dense and MoE, with their published layouts normalised to tokens/s/GPU. Each run is evaluated with
the same `evaluate` users call; no per-run factor exists anywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from parplan._input import read_yaml
from parplan._mapping import dataclass_from_mapping
from parplan._resources import data_dir
from parplan.errors import ConfigError, InvalidStrategyError, ParplanError
from parplan.hardware import load_cluster
from parplan.models.presets import load_model_file
from parplan.models.spec import ModelSpec
from parplan.planner.device import MEMORY_KINDS
from parplan.planner.estimate import Estimate, evaluate
from parplan.planner.search import SearchSpace, plan
from parplan.planner.strategy import Strategy
from parplan.stacks.presets import DEFAULT_STACK, load_stack
from parplan.stacks.spec import COMPILE_SWITCHABLE, StackSpec

_BATCH_KEYS = {"gbs", "seq", "precision"}
"""Strategy fields a runs file gives outside `strategy` (under `batch`, and `precision` at the top)."""
_RUN_PRECISIONS = ("bf16", "fp16", "fp8")
"""A run's training precision; fp16 is costed as bf16 (same tensor-core rate on A100 and H100)."""
_STRATEGY_KEYS = {f.name for f in fields(Strategy)} - _BATCH_KEYS | {"dp"}
"""What a run's `strategy` may hold: the layout fields, and dp (checked against the GPU count)."""
PEAK_MEMORY_KINDS = (*MEMORY_KINDS, "unknown")
"""What a measured peak is (`measured.peak_memory_kind`): allocated (torch.cuda.max_memory_allocated), reserved
(torch.cuda.max_memory_reserved, torchtitan's logged memory), device (nvidia-smi), or unknown (the source does
not say which: compared as reserved, the middle of the three, and flagged)."""
UNKNOWN_KIND_COMPARED_AS = "reserved"
_MEMORY_RANKS = ("peak", "last")


@dataclass(frozen=True, slots=True)
class PublishedRun:
    id: str
    group: str
    tier: str
    source: str
    cluster: str
    gpus: int
    model_file: Path
    strategy: Strategy
    tokens_per_s_per_gpu: float
    """Measured throughput."""
    peak_memory_gib: float | None
    memory_rank: str
    """Which rank the measured memory is from: 'peak' (most loaded) or 'last' (last pipeline stage)."""
    peak_memory_kind: str | None
    """What the measured peak is (one of PEAK_MEMORY_KINDS); None without a measured peak."""
    unknown: tuple[str, ...]
    notes: str
    dropout: bool | None = None
    """The run's dropout setting where the model file does not carry it: a training flag (Megatron-LM
    --attention-dropout/--hidden-dropout, default 0.1), not an architecture fact. None: the model file's."""
    stack: str = DEFAULT_STACK
    """The software stack the run used: a preset name, or a stack file (one under stacks/ beside the runs file
    when the name is not a preset)."""
    compile: bool | None = None
    """torch.compile on or off in the run; None: the stack's default."""

    def stack_spec(self) -> StackSpec:
        """The run's stack, compiled or not as the run was."""
        return load_stack(self.stack, compile=self.compile)

    def model(self) -> ModelSpec:
        """The run's model: its model file, with the run's own training settings applied."""
        spec = load_model_file(self.model_file)
        return spec if self.dropout is None else replace(spec, dropout=self.dropout)


@dataclass(frozen=True, slots=True)
class RunResult:
    run: PublishedRun
    estimate: Estimate | None
    error: str | None
    """Why the run could not be evaluated (an invalid layout names its rule)."""

    @property
    def predicted(self) -> float | None:
        return self.estimate.tokens_per_s_per_gpu if self.estimate else None

    @property
    def throughput_error(self) -> float | None:
        """(predicted − measured) / measured."""
        if self.estimate is None:
            return None
        return self.estimate.tokens_per_s_per_gpu / self.run.tokens_per_s_per_gpu - 1

    @property
    def memory_kind(self) -> str | None:
        """The memory kind the prediction is compared in: the measured one, or reserved for an unknown one."""
        kind = self.run.peak_memory_kind
        return UNKNOWN_KIND_COMPARED_AS if kind == "unknown" else kind

    @property
    def memory_flag(self) -> str | None:
        """Why the memory comparison is less certain, or None."""
        if self.run.peak_memory_kind == "unknown":
            return f"the run does not say which memory it measured; compared as {UNKNOWN_KIND_COMPARED_AS}"
        return None

    @property
    def predicted_memory_gib(self) -> float | None:
        """The predicted peak in the kind the run measured, on the rank it measured."""
        if self.estimate is None or self.run.peak_memory_gib is None:
            return None
        kind = self.memory_kind
        if self.run.memory_rank == "last":
            key = {"allocated": "memory_total_gib", "reserved": "memory_reserved_gib",
                   "device": "memory_device_gib"}[kind]
            return float(max(st[key] for st in self.estimate.stages if st["head"]))
        return self.estimate.memory_kinds()[kind]

    @property
    def fits(self) -> bool | None:
        """The predicted device memory is within the GPU's capacity (every run in a runs file ran)."""
        return None if self.estimate is None else self.estimate.fits

    @property
    def memory_error(self) -> float | None:
        pred = self.predicted_memory_gib
        if pred is None or self.run.peak_memory_gib is None:
            return None
        return pred / self.run.peak_memory_gib - 1


def _field(entry: dict[str, Any], key: str, file: str, where: str, kind: type) -> Any:
    """entry[key] of type `kind` (an int or float is never a bool); errors name the field as `where.key`."""
    value = entry.get(key)
    numeric = (int, float) if kind is float else kind
    if value is None or isinstance(value, bool) is not (kind is bool) or not isinstance(value, numeric):
        raise ConfigError(f"expected {kind.__name__}, got {value!r}", file=file, field=f"{where}.{key}")
    return value


def _measured_memory(measured: dict[str, Any], file: str, where: str) -> tuple[float | None, str | None, str]:
    """(peak GiB, its kind, its rank) of a run's `measured` section: a peak needs its kind; a negative or
    non-numeric peak, an unknown kind or rank are errors naming the field."""
    peak = measured.get("peak_memory_gib")
    memory_rank = measured.get("memory_rank", "peak")
    if memory_rank not in _MEMORY_RANKS:
        raise ConfigError(f"expected one of {', '.join(_MEMORY_RANKS)}, got {memory_rank!r}", file=file,
                          field=f"{where}.memory_rank")
    if peak is None:
        return None, None, memory_rank
    peak = float(_field(measured, "peak_memory_gib", file, where, float))
    if not peak > 0:
        raise ConfigError(f"a measured peak must be a positive number of GiB, got {peak:g}", file=file,
                          field=f"{where}.peak_memory_gib")
    kind = measured.get("peak_memory_kind")
    if kind not in PEAK_MEMORY_KINDS:
        got = "it is missing" if kind is None else f"got {kind!r}"
        raise ConfigError(f"a measured peak needs its kind, one of {', '.join(PEAK_MEMORY_KINDS)}; {got}",
                          file=file, field=f"{where}.peak_memory_kind")
    return peak, kind, memory_rank


def _local_ref(name: str, runs_file: Path, folder: str) -> str:
    """A preset name, or a file under `folder`/ beside the runs file (a run's own network or stack)."""
    local = runs_file.parent / folder / f"{name}.yaml"
    return str(local) if local.is_file() else name


SHIPPED_RUNS = ("published_runs.yaml", "runs_stacks.yaml")
"""The runs files shipped in parplan/data/runs (see SOURCES.md there): Megatron-Core-era runs, and the runs of
the other stacks."""


def load_runs(path: str | Path | None = None) -> list[PublishedRun]:
    """Read a runs file (every shipped runs file by default); model files resolve beside it."""
    if path is None:
        runs = [run for name in SHIPPED_RUNS for run in load_runs(data_dir("runs") / name)]
        ids = [r.id for r in runs]
        assert len(set(ids)) == len(ids), "run ids repeat across the shipped runs files"
        return runs
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, list):
        raise ConfigError("expected a list of runs", file=str(path))
    runs = []
    file = str(path)
    for n, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ConfigError(f"entry {n} is not a mapping", file=file)
        rid = str(entry.get("id", f"#{n}"))
        strat = _field(entry, "strategy", file, rid, dict)
        batch = _field(entry, "batch", file, rid, dict)
        measured = _field(entry, "measured", file, rid, dict)
        misplaced = set(strat) & _BATCH_KEYS
        if misplaced:
            raise ConfigError(f"{', '.join(sorted(misplaced))} belong(s) under batch or precision", file=file,
                              field=f"{rid}.strategy")
        unknown_keys = set(strat) - _STRATEGY_KEYS
        if unknown_keys:
            raise ConfigError(f"unknown field; allowed: {', '.join(sorted(_STRATEGY_KEYS))}", file=file,
                              field=f"{rid}.strategy.{sorted(unknown_keys)[0]}")
        precision = _field(entry, "precision", file, rid, str) if "precision" in entry else "bf16"
        if precision not in _RUN_PRECISIONS:
            raise ConfigError(f"expected one of {', '.join(_RUN_PRECISIONS)}, got {precision!r}", file=file,
                              field=f"{rid}.precision")
        dropout = entry.get("dropout")
        if dropout is not None:
            dropout = _field(entry, "dropout", file, rid, bool)
        gpus = _field(entry, "gpus", file, rid, int)
        stack = (_local_ref(_field(entry, "stack", file, rid, str), path, "stacks") if "stack" in entry
                 else DEFAULT_STACK)
        compiled = _field(entry, "compile", file, rid, bool) if entry.get("compile") is not None else None
        try:
            load_stack(stack, compile=compiled)
        except ParplanError as e:
            raise ConfigError(str(e), file=file, field=f"{rid}.stack") from None
        layout = {k: v for k, v in strat.items() if k != "dp"}
        layout.update(gbs=_field(batch, "gbs", file, f"{rid}.batch", int),
                      seq=_field(batch, "seq", file, f"{rid}.batch", int),
                      precision="fp8" if precision == "fp8" else "bf16")
        try:
            strategy = dataclass_from_mapping(Strategy, layout, file, f"{rid}.strategy")
        except InvalidStrategyError as e:  # a recompute, schedule, precision or dispatch it does not know
            raise ConfigError(str(e), file=file, field=f"{rid}.strategy") from None
        if "dp" in strat and (_field(strat, "dp", file, f"{rid}.strategy", int) != strategy.dp(gpus)):
            raise ConfigError(f"dp={strat['dp']}, but {gpus} GPUs / (tp·pp·cp = "
                              f"{strategy.tp * strategy.pp * strategy.cp}) = {strategy.dp(gpus)}", file=file,
                              field=f"{rid}.strategy.dp")
        model_file = path.parent / "models" / str(_field(entry, "model", file, rid, str))
        peak, kind, memory_rank = _measured_memory(measured, file, f"{rid}.measured")
        runs.append(PublishedRun(
            id=rid, group=str(entry.get("group", "")), tier=str(entry.get("tier", "")),
            source=str(entry.get("source", "")),
            cluster=_local_ref(_field(entry, "cluster", file, rid, str), path, "clusters"),
            gpus=gpus, model_file=model_file, strategy=strategy,
            tokens_per_s_per_gpu=float(_field(measured, "tokens_per_s_per_gpu", file, f"{rid}.measured", float)),
            peak_memory_gib=peak, memory_rank=memory_rank, peak_memory_kind=kind,
            unknown=tuple(entry.get("unknown") or ()), notes=str(entry.get("notes", "")), dropout=dropout,
            stack=stack, compile=compiled,
        ))
    return runs


def with_compile(runs: list[PublishedRun], compile: bool | None) -> list[PublishedRun]:
    """The runs with torch.compile switched on or off wherever their stack can switch it (a stack without a
    compile path, or XLA, keeps its own); None leaves every run's own `compile:`."""
    if compile is None:
        return runs
    return [dataclasses.replace(r, compile=compile)
            if load_stack(r.stack).kernels.compile_scope in COMPILE_SWITCHABLE else r for r in runs]


def validate_runs(runs: list[PublishedRun], stack: StackSpec | None = None) -> list[RunResult]:
    """Evaluate each run as its own stack runs it (or every run as `stack`)."""
    out = []
    for run in runs:
        try:
            model = run.model()
            cluster = load_cluster(run.cluster, gpus=run.gpus)
            spec = stack if stack is not None else run.stack_spec()
            out.append(RunResult(run, evaluate(model, cluster, run.strategy, stack=spec), None))
        except ParplanError as e:
            out.append(RunResult(run, None, str(e)))
    return out


@dataclass(frozen=True, slots=True)
class RankResult:
    """Where a published layout stands among every layout the planner searches for the same job."""

    result: RunResult
    best: Estimate | None
    """The planner's best layout for the run's model, GPUs, batch, sequence and precision."""
    rank: int | None
    """1 when no fitting layout is predicted faster than the published one; None when it does not fit."""
    searched: int
    """Valid layouts searched (costed, or proved slower by a bound)."""
    left: int = 0
    """Valid layouts the deadline left unsearched (0: the rank and the best are the exhaustive search's)."""

    @property
    def gap(self) -> float | None:
        """Predicted throughput of the planner's best over the published layout's, minus 1."""
        est = self.result.estimate
        if est is None or self.best is None:
            return None
        return self.best.tokens_per_s_per_gpu / est.tokens_per_s_per_gpu - 1


def rank_runs(results: list[RunResult], deadline: float | None = None,
              progress: Callable[[int, int], None] | None = None, stack: StackSpec | None = None
              ) -> list[RankResult]:
    """For each evaluated run, search its job's whole layout space under the run's stack (or `stack`; only
    what the stack can run, costed as it runs it; precision fixed to the run's; tp and etp beyond one NVLink
    domain allowed when the run used them) and count the fitting layouts predicted faster. `deadline` and
    `progress` go to each search (search.plan)."""
    out = []
    for r in results:
        est = r.estimate
        if est is None:
            continue
        s = r.run.strategy
        model = r.run.model()
        cluster = load_cluster(r.run.cluster, gpus=r.run.gpus)
        beyond = max(s.tp, s.etp) > cluster.scaleup_domain
        space = SearchSpace(precision=(s.precision,), tp_in_domain=not beyond)
        try:
            found = plan(model, cluster, gbs=s.gbs, seq=s.seq, space=space, top=1,
                         faster_than=est.tokens_per_s_per_gpu, deadline=deadline, progress=progress,
                         stack=stack if stack is not None else r.run.stack_spec())
        except ParplanError:
            out.append(RankResult(r, None, None, 0))
            continue
        best = found.plans[0] if found.plans else None
        rank = int(found.extra["faster"]) + 1 if est.fits else None
        out.append(RankResult(r, best, rank, found.evaluated, found.left))
    return out


def summarize(results: list[RunResult], key: str = "group") -> list[dict[str, Any]]:
    """Median, 90th percentile and mean absolute throughput error per group (or tier), and overall; the same
    for peak memory (like with like), and how many runs are predicted not to fit."""
    buckets: dict[str, list[float]] = {}
    mem: dict[str, list[float]] = {}
    misfits: dict[str, int] = {}
    for r in results:
        label = getattr(r.run, key)
        if r.throughput_error is not None:
            buckets.setdefault(label, []).append(abs(r.throughput_error))
        if r.memory_error is not None:
            mem.setdefault(label, []).append(abs(r.memory_error))
        if r.fits is False:
            misfits[label] = misfits.get(label, 0) + 1
    rows = []
    for label in [*sorted(buckets), "all"]:
        errs = [e for v in buckets.values() for e in v] if label == "all" else buckets[label]
        mems = [e for v in mem.values() for e in v] if label == "all" else mem.get(label, [])
        rows.append({
            key: label,
            "runs": len(errs),
            "median_abs_error": float(np.median(errs)) if errs else None,
            "p90_abs_error": float(np.percentile(errs, 90)) if errs else None,
            "mean_abs_error": float(np.mean(errs)) if errs else None,
            "max_abs_error": float(np.max(errs)) if errs else None,
            "memory_runs": len(mems),
            "memory_median_abs_error": float(np.median(mems)) if mems else None,
            "memory_p90_abs_error": float(np.percentile(mems, 90)) if mems else None,
            "predicted_not_to_fit": sum(misfits.values()) if label == "all" else misfits.get(label, 0),
        })
    return rows
