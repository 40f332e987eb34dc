"""Measured serving deployments to validate against, read from the two public formats:

- the CSV of measured rows (``serving_measured.csv``: aiconfigurator's silicon_sample.csv columns, one row per
  deployment with its full layout, TTFT and TPOT at the stated concurrency);
- the YAML of published deployments (``published_serving.yaml``), each entry of a kind the serving model can
  reproduce mapped to cases (see published.py).

A malformed file (a missing column, a value of the wrong type, non-finite or out of range) is a ConfigError
naming the file, the row and the field. A well-formed row the model cannot reproduce (an unknown GPU, a layout
that does not divide the model, a quantisation it does not know) becomes a case with a reason instead.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parplan._input import read_text
from parplan.errors import ConfigError, ParplanError
from parplan.names import KV_DTYPES
from parplan.serving.engines import load_engine
from parplan.serving.spec import (
    BatchWait,
    Deployment,
    DpBalance,
    Pool,
    Precision,
    Workload,
    check_memory_fraction,
    check_recv_interval,
)

SYSTEMS = {
    "h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72", "h800_sxm": "h800", "a100_80gb_sxm": "a100-80gb", "a100_40gb_sxm": "a100-40gb",
    "b200": "b200", "rtx_pro_6000_server": "rtx-pro-6000", "rtx_pro_6000_blackwell_server": "rtx-pro-6000",
}
"""GPU system names of the measured files -> cluster presets."""

QUANT = {"": "bf16", "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4",
         "mxfp4": "fp4", "fp4": "fp4", "int4_wo": "int4"}
"""Quantisation modes (aiconfigurator's gemm_quant_mode / moe_quant_mode) -> weight formats."""

ENGINE_NAMES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
MODE_NAMES = {"agg": "aggregated", "disagg": "disaggregated"}

MEASURED_OVERLAP = {"trtllm": False}
"""The overlap scheduler of aiconfigurator's measured deployments (GENERATED_SOURCE; its curated anchors in
published.py) where it differs from the engine's default:
aiconfigurator's templates write TensorRT-LLM launch configs with disable_overlap_scheduler true unless told
otherwise (ai-dynamo/aiconfigurator src/aiconfigurator/generator/config/backend_templates/trtllm/
extra_engine_args.1.3.0rc1.yaml.j2 @581e459: `disable_overlap_scheduler: {{ disable_overlap_scheduler |
default(true) }}`). Its current rules tell otherwise for aggregated and decode workers (rule_plugin/trtllm.rule
@17676b3 and rule_plugin/benchmark/trtllm.rule @581e459: `agg disable_overlap_scheduler = false`, `decode ...
= false`, `prefill ... = true`), but the rows do not say which generator wrote their configs, and they follow the
templates' default: with the overlap scheduler on for the aggregated rows and TensorRT-LLM's knobs refitted
(benchmarks/serving_fit.py, 120 evaluations), TPOT's median error grows from 12.3% to 13.8% while TTFT's moves
from 25.6% to 25.3%."""

GENERATED_SOURCE = "gap-analysis"
"""What the `silicon_data_source` of a row launched by aiconfigurator's generator contains: its gap-analysis files
(`.../aic-auto-gap-analysis/data/<system>/<engine>/<version>/<model>.csv`, `kimi-k2.5-gap-analysis.csv`). Only
those rows take the generator's settings (MEASURED_OVERLAP, and MEASURED_BUDGET_SPARE's token budget).
InferenceX's exports (`2026-03-25.csv`, `2026-04-06.csv`, `db-dump`) ran InferenceX's own scripts: where a row's
script was read it carries the launch columns (data/serving/SOURCES.md, rule 3), and the rest keep the engine's
defaults, as any other file's rows do: its single-node TensorRT-LLM scripts never disable the overlap scheduler,
and a disaggregated deployment's prefill workers run without it whatever the row says (Engine.prefill_pool)."""

MEASURED_BUDGET_ENGINES = ("vllm", "trtllm")
MEASURED_BUDGET_SPARE = 1500
"""The token budget of aiconfigurator's measured aggregated deployments: its generator sets max_num_tokens (vLLM
--max-num-batched-tokens, TensorRT-LLM max_num_tokens) to max_batch_size + ISL + 1500 for an aggregated worker
(ai-dynamo/aiconfigurator src/aiconfigurator/generator/rule_plugin/vllm.rule @11324a6 and trtllm.rule @17676b3:
`agg max_num_tokens = max_batch_size + SlaConfig.isl + 1500`; the parameter names per engine in
generator/config/backend_config_mapping.yaml), so a prompt always fits in one step beside the decode tokens.
SGLang's rule sets max_prefill_tokens = ISL + 1500 instead, keeps chunked_prefill_size at its default and turns on
--enable-mixed-chunk for aggregated workers (rule_plugin/sglang.rule @1089dfa; backend_config_mapping.yaml
@043c66c; backend_templates/sglang/cli_args.j2 @e1d216d). The SGLang rows follow neither: read with mixed chunks
(prefill joining the decode batch, its decode tokens taken from the budget as schedule_policy.py PrefillAdder
takes mixed_with_decode_tokens) and the smaller budget, SGLang's refitted TTFT error grows from 35.5% to 39.7%
(its rows are mostly DeepSeek, which phase-lock as prefill-first steps do; SGLang turns mixed chunks off under
speculative decoding, which the rows do not record), so they keep SGLang's defaults."""

LAUNCH_COLUMNS = ("kv_cache_dtype", "chunk_tokens", "memory_fraction", "overlap_scheduler", "batch_wait_iters",
                  "batch_wait_ratio", "dp_balance_timeout_iters", "dp_balance_wait_iters", "max_running", "mtp",
                  "mtp_acceptance", "cuda_graph_max_batch", "recv_interval")
"""Optional columns: the settings a row's engine was launched with, where the file knows them (aiconfigurator's
export carries none). A filled cell replaces what the reader otherwise assumes for the row: the engine's default
KV-cache format for the weights (`auto` keeps it), the engine's token budget (aiconfigurator's rows:
MEASURED_BUDGET_SPARE's), the engine's memory fraction (Deployment.memory_fraction), the engine's overlap scheduler
(aiconfigurator's rows: MEASURED_OVERLAP; true / false), no batch waiting (BatchWait: both
columns, TensorRT-LLM's batch_wait_timeout_iters and batch_wait_max_tokens_ratio), no attention-DP balance
(DpBalance: TensorRT-LLM's attention_dp_config with enable_balance, its timeout_iters and batching_wait_iters, the
latter 0 when empty), speculative decoding (mtp: tokens drafted a step, with mtp_acceptance the chance each
is accepted, Workload.mtp and acceptance; a row that drafted without a recorded acceptance is refused, since the
acceptance sets its TPOT), the largest step captured as a CUDA graph (Deployment.cuda_graph_max_batch), the decode
steps between the scheduler's polls for new requests (Deployment.recv_interval: SGLang --scheduler-recv-interval),
and the engine's cap on running requests (max_running: per attention rank of an aggregated worker, Pool.batch; vLLM
--max-num-seqs, SGLang --max-running-requests over its dp ranks, TensorRT-LLM max_batch_size)."""

CLIENT_COLUMNS = ("range_ratio",)
"""Optional columns: how the benchmark client drew a row's requests, where the file knows it. range_ratio: each
request's input and output lengths drawn uniformly from [⌊ratio·isl⌋, isl] and [⌊ratio·osl⌋, osl]
(Workload.range_ratio, benchmark_serving.py --random-range-ratio); empty: every request has isl and osl tokens,
as aiperf's fixed lengths do."""

POOL_COLUMNS = ("redundant_experts", "a2a")
"""Optional columns, named as the layout's are: unprefixed for an aggregated row's pool, prefill_ and decode_ for a
disaggregated row's (prefill_redundant_experts, decode_a2a, ...): how a pool's MoE layers were launched, where the
file knows it. redundant_experts: EPLB's extra expert replicas (Pool.redundant_experts; SGLang
--ep-num-redundant-experts, TensorRT-LLM's EPLB slots beyond the experts); a2a: the MoE token exchange under
attention DP (Pool.a2a: auto, allgather, alltoall, deepep; SGLang --moe-a2a-backend deepep). Empty: no redundant
experts, and `auto`, the engine's default exchange."""

WORKERS_COLUMN = "num_workers"
"""Optional column: the workers of an aggregated row (replicas of its layout behind a router, which splits the
concurrency evenly among them; Pool.workers), where the file knows them; empty: one. A disaggregated row states
its workers per role (prefill_num_workers, decode_num_workers)."""

METRICS = ("ttft_ms", "tpot_ms")
"""The metrics of a measured row, named as serve_evaluate names them."""


@dataclass(frozen=True, slots=True)
class Case:
    """One measured deployment: what to evaluate and what was measured, or why it cannot be evaluated."""

    id: str
    source: str
    model: str
    """Hugging Face id (resolved by load_model)."""
    system: str
    """The file's GPU system name."""
    cluster: str | None
    engine: str
    deployment: Deployment | None
    workload: Workload | None
    measured: dict[str, float]
    refused: str | None = None
    """Why the case is not evaluated (None: it is)."""
    tags: dict[str, str] = field(default_factory=dict)
    """Grouping labels for the summaries (model, system, engine, mode, ...)."""
    kind: str = "closed_loop"
    """What was measured: a closed loop at a concurrency (TTFT, TPOT), or one of published.py's other kinds."""
    params: dict[str, Any] = field(default_factory=dict)
    """Inputs of the other kinds (batch, lengths, EP size ...)."""


REQUIRED_COLUMNS = ("id", "silicon_data_source", "backend", "model_path", "system", "mode", "isl", "osl",
                    "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size",
                    "moe_tp_size", "moe_ep_size", "silicon_ttft_ms", "silicon_tpot_ms")
ROLE_COLUMNS = ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


class Row:
    """Typed access to one CSV row; errors name the file, the row (`where`: 'row 3', 1 = first data row) and the
    column. A mapping of another file reads the same way: `where` names it ('entry 'x''), and `prefix` leads its
    field names ('launch.')."""

    def __init__(self, data: dict[str, str], file: str, where: str, prefix: str = "") -> None:
        self.data = data
        self.file = file
        self.where = where
        self.prefix = prefix

    def error(self, column: str, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: {why}", file=self.file, field=self.prefix + column)

    def text(self, column: str) -> str:
        return (self.data.get(column) or "").strip()

    def finite(self, column: str, what: str | None = None) -> float | None:
        """A finite number, or None when the cell is empty (its range is the caller's rule); `what` names the
        value the errors say was expected (default: a number, a finite one)."""
        raw = self.text(column)
        if raw == "":
            return None
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"expected {what or 'a number'}, got {raw!r}") from None
        if not math.isfinite(value):
            raise self.error(column, f"expected {what or 'a finite number'}, got {raw!r}")
        return value

    def int(self, column: str, *, minimum: int = 0) -> int | None:
        """An integer >= minimum, or None when the cell is empty."""
        value = self.finite(column, "an integer")
        if value is None:
            return None
        if value != int(value):
            raise self.error(column, f"expected an integer, got {self.text(column)!r}")
        if value < minimum:
            raise self.error(column, f"must be >= {minimum}, got {self.text(column)}")
        return int(value)

    def positive(self, column: str) -> float:
        """A positive finite number (the cell is required)."""
        value = self.finite(column, "a positive finite number")
        if value is None or value <= 0:
            raise self.error(column, f"expected a positive finite number, got {self.text(column)!r}")
        return value

    def flag(self, column: str) -> bool | None:
        """true / false, or None when the cell is empty."""
        raw = self.text(column).lower()
        if raw == "":
            return None
        if raw not in ("true", "false"):
            raise self.error(column, f"expected true or false, got {self.text(column)!r}")
        return raw == "true"

    def choice(self, column: str, allowed: dict[str, str]) -> str:
        raw = self.text(column)
        if raw not in allowed:
            raise self.error(column, f"unknown value {raw!r}; known: {', '.join(sorted(k for k in allowed if k))}")
        return allowed[raw]


def _concurrency(row: Row) -> int | None:
    """The concurrency a row was measured at: silicon_concurrency=N in silicon_data_source."""
    match = re.search(r"silicon_concurrency=(\d+)", row.text("silicon_data_source"))
    return int(match.group(1)) if match else None


def _pool(row: Row, prefix: str, *, moe: bool) -> Pool:
    """A pool from the columns `prefix`tp_size etc.; 0 or empty means 'not applicable' where the file uses
    it so (attention DP 1; MoE sizes of dense models; one worker). Raises ParplanError for a layout a Pool
    rejects."""
    tp = row.int(prefix + "tp_size", minimum=1)
    pp = row.int(prefix + "pp_size", minimum=1) or 1
    dp = row.int(prefix + "attention_dp_size") or 1
    moe_tp, moe_ep = row.int(prefix + "moe_tp_size"), row.int(prefix + "moe_ep_size")
    if tp is None:
        raise row.error(prefix + "tp_size", "required value is missing")
    if moe and not (moe_tp and moe_ep):
        raise ParplanError("the MoE layout (moe_tp_size, moe_ep_size) is not recorded")
    if not moe:
        moe_tp, moe_ep = None, 1
    n = row.int(prefix + "num_workers", minimum=1) or 1
    row.int(prefix + "batch_size", minimum=1)  # checked; only the token budget reads it (_measured_budget)
    return launched_pool(lambda: Pool(tp=tp, pp=pp, dp=dp, moe_tp=moe_tp, moe_ep=moe_ep or 1, workers=n,
                                      redundant_experts=row.int(prefix + "redundant_experts") or 0,
                                      a2a=row.text(prefix + "a2a") or "auto"),
                         lambda field, why: row.error(prefix + field, why))


def _measured_budget(row: Row, engine: str, isl: int) -> int | None:
    """The token budget per step aiconfigurator gave an aggregated deployment of `engine` (None: the engine's
    default): max_batch_size (the row's batch_size) + ISL + 1500."""
    if engine not in MEASURED_BUDGET_ENGINES:
        return None
    return (row.int("batch_size", minimum=1) or 0) + isl + MEASURED_BUDGET_SPARE


def launch_settings(row: Row) -> dict[str, Any]:
    """The row's LAUNCH_COLUMNS, checked (None where a cell is empty or the file has no such column); a published
    deployment's `launch:` section reads the same way (published.py)."""
    kv = row.text("kv_cache_dtype")
    if kv and kv != "auto":
        kv = row.choice("kv_cache_dtype", {k: k for k in KV_DTYPES})
    iters, ratio = row.int("batch_wait_iters"), row.finite("batch_wait_ratio")
    if (iters is None) != (ratio is None):
        raise row.error("batch_wait_iters" if iters is None else "batch_wait_ratio",
                        "batch waiting needs both batch_wait_iters and batch_wait_ratio")
    timeout, gather = row.int("dp_balance_timeout_iters"), row.int("dp_balance_wait_iters")
    if timeout is None and gather is not None:
        raise row.error("dp_balance_timeout_iters", "attention-DP balance needs dp_balance_timeout_iters")
    mtp, acceptance = row.int("mtp") or 0, row.finite("mtp_acceptance")
    if acceptance is not None and not mtp:
        raise row.error("mtp", "an acceptance rate (mtp_acceptance) needs the tokens drafted a step")
    fraction = row.finite("memory_fraction")
    recv = row.int("recv_interval")
    try:  # the ranges are the deployment's own rules, named here with the row
        check_memory_fraction(fraction)
        check_recv_interval(recv)
        wait = None if iters is None or ratio is None else BatchWait(iters=iters, ratio=ratio)
        balance = None if timeout is None else DpBalance(timeout_iters=timeout, batching_wait_iters=gather or 0)
    except ConfigError as e:
        raise row.error(e.field or "", e.rule) from None
    return {"kv_cache_dtype": None if kv in ("", "auto") else kv, "chunk_tokens": row.int("chunk_tokens", minimum=1),
            "memory_fraction": fraction, "overlap_scheduler": row.flag("overlap_scheduler"),
            "batch_wait": wait, "dp_balance": balance, "max_running": row.int("max_running", minimum=1),
            "mtp": mtp, "acceptance": acceptance, "cuda_graph_max_batch": row.int("cuda_graph_max_batch", minimum=1),
            "recv_interval": recv}


LaunchError = Callable[[str, str], ConfigError]
"""How a reader names a bad launch setting: its field (a CSV column; a published entry's `launch.` key) and why."""


def launched_pool(build: Callable[[], Pool], error: LaunchError) -> Pool:
    """The pool `build` makes, where a POOL_COLUMNS value Pool rejects is a malformed cell or field: Pool's own rule,
    named by `error(field, why)` with the file (both readers); a layout Pool rejects stays Pool's error, which
    refuses the case with its reason."""
    try:
        return build()
    except ConfigError as e:
        if e.field not in POOL_COLUMNS:
            raise
        raise error(e.field, e.rule) from None


def launched_deployment(engine: str, precision: Precision, launch: dict[str, Any], overlap: bool | None,
                        chunk: int | None, error: LaunchError, *, pool: Pool | None = None,
                        prefill: Pool | None = None, decode: Pool | None = None) -> Deployment:
    """The deployment a row or a published entry describes, with its launch_settings: aggregated over `pool`, else
    disaggregated over `prefill` and `decode` (whose decode batch a file states per role, so a cap on running
    requests is an error there); `overlap` and `chunk` as the reader decided them (the launch's, else its
    default)."""
    settings = dict(overlap_scheduler=overlap, memory_fraction=launch["memory_fraction"],
                    batch_wait=launch["batch_wait"], dp_balance=launch["dp_balance"],
                    cuda_graph_max_batch=launch["cuda_graph_max_batch"], recv_interval=launch["recv_interval"],
                    chunk_tokens=chunk)
    if pool is None:
        if launch["max_running"] is not None:
            raise error("max_running", "applies to an aggregated deployment (a disaggregated one states its decode "
                                       "batch per role)")
        return Deployment(engine=engine, precision=precision, mode="disaggregated", prefill=prefill, decode=decode,
                          **settings)
    if launch["max_running"] is not None:
        pool = dataclasses.replace(pool, batch=launch["max_running"])
    return Deployment(engine=engine, precision=precision, mode="aggregated", pool=pool, **settings)


def launched_workload(isl: int, osl: int, concurrency: int, range_ratio: float, launch: dict[str, Any],
                      error: LaunchError, ratio_field: str) -> Workload:
    """The closed loop a row or a published entry measured, with its speculative decoding (launch_settings) and
    the client's length draw (`range_ratio`, named `ratio_field` in the errors). A deployment that drafted tokens
    at an acceptance it does not record is refused: the acceptance sets its TPOT."""
    if launch["mtp"] and launch["acceptance"] is None:
        drafts = f"{launch['mtp']} token{'s' if launch['mtp'] > 1 else ''} drafted a step"
        raise ParplanError(f"ran with speculative decoding ({drafts}) at an acceptance rate it does not "
                           "record (mtp_acceptance), which sets its TPOT")
    try:  # the ranges are the workload's own rules, named here with the row or entry
        return Workload(isl=isl, osl=osl, concurrency=concurrency, mtp=launch["mtp"],
                        acceptance=launch["acceptance"] or 0.0, range_ratio=range_ratio)
    except ConfigError as e:
        fields = {"mtp": "mtp", "acceptance": "mtp_acceptance", "range_ratio": ratio_field}
        if e.field not in fields:
            raise
        raise error(fields[e.field], e.rule) from None


def read_measured_csv(path: str | Path, text: str | None = None) -> list[Case]:
    """Cases of a measured-rows CSV (columns as serving_measured.csv)."""
    from parplan.models import load_model  # models import the serving-free part of parplan only

    file = str(path)
    text = read_text(path) if text is None else text
    try:  # read whole: a malformed row (a field over the csv module's 128 KiB limit) fails here, named
        reader = csv.DictReader(io.StringIO(text))
        columns = reader.fieldnames or []
        records = list(reader)
    except csv.Error as e:
        raise ConfigError(f"not valid CSV: {e}", file=file) from None
    for column in REQUIRED_COLUMNS:
        if column not in columns:
            raise ConfigError("required column is missing", file=file, field=column)
    cases = []
    for number, data in enumerate(records, start=1):
        row = Row(data, file, f"row {number}")
        engine = row.choice("backend", ENGINE_NAMES)
        mode = row.choice("mode", MODE_NAMES)
        isl, osl = row.int("isl", minimum=1), row.int("osl", minimum=1)
        if isl is None or osl is None:
            raise row.error("isl" if isl is None else "osl", "required value is missing")
        measured = {"ttft_ms": row.positive("silicon_ttft_ms"), "tpot_ms": row.positive("silicon_tpot_ms")}
        gemm, moe_q = row.choice("gemm_quant_mode", QUANT), row.choice("moe_quant_mode", QUANT)
        model_id, system = row.text("model_path"), row.text("system")
        if not model_id:
            raise row.error("model_path", "required value is missing")
        launch = launch_settings(row)
        case_id = row.text("id") or f"row {number}"
        tags = {"model": model_id, "system": system, "engine": engine, "mode": mode, "set": "measured rows"}
        base = dict(id=case_id, source=row.text("silicon_data_source"), model=model_id, system=system,
                    cluster=SYSTEMS.get(system), engine=engine, measured=measured, tags=tags)
        try:
            if system not in SYSTEMS:
                raise ParplanError(f"no cluster preset for the GPU system {system!r}")
            model = load_model(model_id)
            kv = launch["kv_cache_dtype"] or load_engine(engine).default_kv_dtype(moe_q if model.moe else gemm)
            precision = Precision(gemm=gemm, moe=moe_q, kv_cache=kv)
            overlap = launch["overlap_scheduler"]
            generated = GENERATED_SOURCE in row.text("silicon_data_source")
            if overlap is None and generated:
                overlap = MEASURED_OVERLAP.get(engine)
            if mode == "aggregated":
                chunk = launch["chunk_tokens"] or (_measured_budget(row, engine, isl) if generated else None)
                deployment = launched_deployment(engine, precision, launch, overlap, chunk, row.error,
                                                 pool=_pool(row, "", moe=model.moe is not None))
            else:
                if row.text(WORKERS_COLUMN):
                    raise row.error(WORKERS_COLUMN, "applies to an aggregated row (a disaggregated row states "
                                                    "prefill_num_workers and decode_num_workers)")
                for column in POOL_COLUMNS:
                    if row.text(column):
                        raise row.error(column, f"applies to an aggregated row (a disaggregated row states "
                                                f"prefill_{column} and decode_{column})")
                for role in ("prefill_", "decode_"):
                    for column in ROLE_COLUMNS:
                        if role + column not in columns:
                            raise ConfigError("required column is missing", file=file, field=role + column)
                deployment = launched_deployment(engine, precision, launch, overlap, launch["chunk_tokens"],
                                                 row.error, prefill=_pool(row, "prefill_", moe=model.moe is not None),
                                                 decode=_pool(row, "decode_", moe=model.moe is not None))
            concurrency = _concurrency(row)
            if concurrency is None:
                raise ParplanError("the concurrency it was measured at is not recorded (silicon_concurrency=N in "
                                   "silicon_data_source): TTFT depends on it")
            ratio = row.finite("range_ratio")
            workload = launched_workload(isl, osl, concurrency, 1.0 if ratio is None else ratio, launch, row.error,
                                         "range_ratio")
            cases.append(Case(deployment=deployment, workload=workload, **base))
        except ConfigError as e:
            if e.file:  # the file itself is malformed
                raise
            cases.append(Case(deployment=None, workload=None, refused=str(e), **base))
        except ParplanError as e:
            cases.append(Case(deployment=None, workload=None, refused=str(e), **base))
    return cases
