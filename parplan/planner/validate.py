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

from parplan._input import exists, read_yaml
from parplan._mapping import Fields, dataclass_from_mapping, shown
from parplan._resources import data_dir
from parplan.errors import ConfigError, ParplanError
from parplan.hardware import load_cluster
from parplan.limits import MAX_GPUS
from parplan.models.presets import load_model
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
    base_model: ModelSpec
    """The model as its file or preset describes it (see `model` for the run's own settings)."""
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
    file: str
    """The runs file the run was read from."""
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
        """The run's model: its model file or preset, with the run's own training settings applied."""
        return self.base_model if self.dropout is None else replace(self.base_model, dropout=self.dropout)


@dataclass(frozen=True, slots=True)
class RunResult:
    run: PublishedRun
    estimate: Estimate

    @property
    def predicted(self) -> float:
        return self.estimate.tokens_per_s_per_gpu

    @property
    def throughput_error(self) -> float:
        """(predicted − measured) / measured."""
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
        if self.run.peak_memory_gib is None:
            return None
        kind = self.memory_kind
        if self.run.memory_rank == "last":
            key = {"allocated": "memory_total_gib", "reserved": "memory_reserved_gib",
                   "device": "memory_device_gib"}[kind]
            return float(max(st[key] for st in self.estimate.stages if st["head"]))
        return self.estimate.memory_kinds()[kind]

    @property
    def fits(self) -> bool:
        """The predicted device memory is within the GPU's capacity (every run in a runs file ran)."""
        return self.estimate.fits

    @property
    def memory_error(self) -> float | None:
        pred = self.predicted_memory_gib
        if pred is None or self.run.peak_memory_gib is None:
            return None
        return pred / self.run.peak_memory_gib - 1


def _measured_memory(measured: Fields) -> tuple[float | None, str | None, str]:
    """(peak GiB, its kind, its rank) of a run's `measured` section: a peak needs its kind; a negative or
    non-numeric peak, an unknown kind or rank are errors naming the field."""
    memory_rank = measured.str("memory_rank", "peak", choices=_MEMORY_RANKS)
    peak = measured.float("peak_memory_gib", None, above=0)
    if peak is None:
        return None, None, memory_rank
    kind = measured.data.get("peak_memory_kind")
    if kind not in PEAK_MEMORY_KINDS:
        got = "it is missing" if kind is None else f"got {shown(kind)}"
        raise measured.error("peak_memory_kind", f"a measured peak needs its kind, one of "
                                                 f"{', '.join(PEAK_MEMORY_KINDS)}; {got}")
    return peak, kind, memory_rank


def _local_ref(name: str, runs_file: Path, folder: str) -> str:
    """A preset name, or a file under `folder`/ beside the runs file (a run's own network or stack)."""
    local = runs_file.parent / folder / f"{name}.yaml"
    return str(local) if exists(local) else name


def _model_ref(name: str, runs_file: Path) -> str:
    """A model file under models/ beside the runs file, a path (relative to the runs file or absolute), or
    else a preset name, as --model takes."""
    for candidate in (runs_file.parent / "models" / name, runs_file.parent / name, Path(name).expanduser()):
        if exists(candidate):
            return str(candidate)
    return name


_RUN_KEYS = {"id", "group", "tier", "source", "cluster", "gpus", "gpus_per_node", "model", "strategy", "batch",
             "precision", "measured", "derived_how", "unknown", "notes", "dropout", "stack", "compile"}
"""What a run entry may hold; gpus_per_node, derived_how and notes document the run and are not read."""


SHIPPED_RUNS = ("published_runs.yaml", "runs_stacks.yaml")
"""The runs files shipped in parplan/data/runs (see SOURCES.md there): Megatron-Core-era runs, and the runs of
the other stacks."""


def load_runs(path: str | Path | None = None) -> list[PublishedRun]:
    """Read a runs file (every shipped runs file by default); model files resolve beside it, else as presets.
    A run whose model, cluster or stack cannot be read is a ConfigError naming the run and the field."""
    if path is None:
        runs = [run for name in SHIPPED_RUNS for run in load_runs(data_dir("runs") / name)]
        ids = [r.id for r in runs]
        assert len(set(ids)) == len(ids), "run ids repeat across the shipped runs files"
        return runs
    path = Path(path)
    data = read_yaml(path)
    file = str(path)
    if not isinstance(data, list):
        raise ConfigError("expected a list of runs", file=file)
    runs = []
    for n, entry in enumerate(data):
        raw_id = entry.get("id") if isinstance(entry, dict) else None
        rid = raw_id if isinstance(raw_id, str) and raw_id else f"#{n}"
        f = Fields(entry, file, rid).allow(_RUN_KEYS)
        if raw_id is not None:
            Fields(entry, file, f"#{n}").str("id")  # an id that is not a string is named by position
        strat = f.mapping("strategy").allow(_STRATEGY_KEYS | _BATCH_KEYS)
        misplaced = set(strat.data) & _BATCH_KEYS
        if misplaced:
            raise strat.error(None, f"{', '.join(sorted(misplaced))} belong(s) under batch or precision")
        batch = f.mapping("batch").allow({"gbs", "seq"})
        measured = f.mapping("measured").allow({"tokens_per_s_per_gpu", "step_time_s", "peak_memory_gib",
                                                "memory_rank", "peak_memory_kind"})
        peak, kind, memory_rank = _measured_memory(measured)
        precision = f.str("precision", "bf16", choices=_RUN_PRECISIONS)
        gpus = f.int("gpus", min=1, max=MAX_GPUS)
        layout = {k: v for k, v in strat.data.items() if k != "dp"}
        layout.update(gbs=batch.int("gbs", min=1), seq=batch.int("seq", min=1),
                      precision="fp8" if precision == "fp8" else "bf16")
        strategy = dataclass_from_mapping(Strategy, layout, file, strat.section)
        if strat.has("dp") and strat.int("dp") != strategy.dp(gpus):
            raise strat.error("dp", f"dp={strat.data['dp']}, but {gpus} GPUs / (tp·pp·cp = "
                                    f"{strategy.tp * strategy.pp * strategy.cp}) = {strategy.dp(gpus)}")
        model_name, cluster_name = f.str("model"), f.str("cluster")
        try:
            model = load_model(_model_ref(model_name, path))
        except ParplanError as e:
            raise f.error("model", f"cannot read the model: {e}") from None
        try:
            cluster = _local_ref(cluster_name, path, "clusters")
            load_cluster(cluster, gpus=gpus)
        except ParplanError as e:
            raise f.error("cluster", f"cannot read the cluster: {e}") from None
        stack = _local_ref(f.str("stack"), path, "stacks") if f.has("stack") else DEFAULT_STACK
        compiled = f.bool("compile", None)
        try:
            load_stack(stack, compile=compiled)
        except ParplanError as e:
            raise f.error("stack", f"cannot read the stack: {e}") from None
        for i, item in enumerate(f.list("unknown", [])):
            if not isinstance(item, str):
                raise f.error(f"unknown[{i}]", f"expected a field name, got {shown(item)}")
        runs.append(PublishedRun(
            id=rid, group=f.str("group", ""), tier=f.str("tier", ""), source=f.str("source", ""), file=file,
            cluster=cluster, gpus=gpus, base_model=model, strategy=strategy,
            tokens_per_s_per_gpu=measured.float("tokens_per_s_per_gpu", above=0),
            peak_memory_gib=peak, memory_rank=memory_rank, peak_memory_kind=kind,
            unknown=tuple(f.list("unknown", [])), notes=f.str("notes", ""), dropout=f.bool("dropout", None),
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
    """Evaluate each run as its own stack runs it (or every run as `stack`); a run that cannot be evaluated (a
    layout that breaks a rule) is a ConfigError naming its file and id, never a silent gap in the report."""
    out = []
    for run in runs:
        try:
            model = run.model()
            cluster = load_cluster(run.cluster, gpus=run.gpus)
            spec = stack if stack is not None else run.stack_spec()
            out.append(RunResult(run, evaluate(model, cluster, run.strategy, stack=spec)))
        except ParplanError as e:
            raise ConfigError(f"the run cannot be evaluated: {e}", file=run.file, field=run.id) from None
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
        if self.best is None:
            return None
        return self.best.tokens_per_s_per_gpu / self.result.estimate.tokens_per_s_per_gpu - 1


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
