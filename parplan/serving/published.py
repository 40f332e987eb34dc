"""Published deployments (``published_serving.yaml``) as validation cases.

Each entry states a kind of measurement; the kinds the serving model can reproduce become cases, one metric
per measured figure, named as the file names it:

- e2e_serving_fixed_concurrency (aiconfigurator's curated rows): TTFT and TPOT of a closed loop, with the launch
  settings (`launch:`, the measured CSV's launch columns), each pool's MoE exchange and redundant experts
  (`layout.<pool>.a2a`, `.redundant_experts`, as the CSV's POOL_COLUMNS) and length draw (workload.range_ratio) the
  entry states;
- e2e_offline (TensorRT-LLM perf overview and best-practice blogs): output tokens/s per GPU with every
  request queued (throughput at the batch the engine holds) or at a stated concurrency;
- e2e_static_batch: output tokens/s per GPU of a static batch (one prefill of the batch, then its decode);
- prefill_latency: first-token latency of one prompt;
- phase_latency_profile (Splitwise's profiling database): one prefill step of b prompts, one decode step of b
  sequences;
- phase_isolated / profile_derived (SGLang and DeepSeek EP deployments): prefill tokens/s per GPU of a prefill
  step, decode tokens/s per GPU of a decode step at the stated batch and context;
- kernel_comm (DeepEP V1 tables, TensorRT-LLM's one-sided NVLink all-to-all table): one dispatch or combine.

Everything else (production averages, headlines, layout-only entries, MLPerf runs whose input lengths the
dataset defines) is kept as a case refused with the reason, as are entries on GPUs without a preset, engines
other than vLLM / SGLang / TensorRT-LLM (and TensorRT-LLM before 1.0: the shipped static-batch and
first-token tables, v0.5/v0.6.1, ran compiled TensorRT engines, not the PyTorch backend the engine facts
describe), and figures whose unit the source leaves ambiguous.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from parplan._input import read_yaml
from parplan.errors import ConfigError, ParplanError
from parplan.hardware import deepep, load_cluster, nvlink_alltoall
from parplan.limits import MAX_BATCH, MAX_SEQ
from parplan.models import ModelSpec, load_model
from parplan.planner import experts
from parplan.serving.cases import (
    LAUNCH_COLUMNS,
    MEASURED_OVERLAP,
    QUANT,
    SYSTEMS,
    Case,
    Row,
    launch_settings,
    launched_deployment,
    launched_pool,
    launched_workload,
)
from parplan.serving.engines import Engine, load_engine
from parplan.serving.evaluate import Traffic, evaluate_aggregated
from parplan.serving.layout import PoolArrays
from parplan.serving.spec import Deployment, Pool, Precision
from parplan.serving.step import StepModel

ENGINE_WORDS = (("sglang", "sglang"), ("tensorrt", "trtllm"), ("trtllm", "trtllm"), ("vllm", "vllm"))
"""Engine names as the published entries spell them (lower-cased substrings) -> engines."""

QUEUED = 100_000
"""Requests in flight for 'infinite request rate' benchmarks: every request queued, the engine's batch full."""

LAUNCHED_KINDS = ("e2e_serving_fixed_concurrency",)
"""Kinds of entries whose `launch:` section is read (the measured CSV's launch columns); on another kind it is an
error, as a setting the reader would drop."""

PERF_OVERVIEW_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500,
                          (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000,
                          (500, 2000): 3000, (20000, 2000): 1000}
"""Requests per trtllm-bench run of TensorRT-LLM's perf overview, by ISL/OSL (NVIDIA/TensorRT-LLM
docs/source/performance/perf-overview.md @00f3768, '$num_requests' table)."""


class _Entry:
    """Typed access to one published entry; errors name the file, the entry id and the field."""

    def __init__(self, raw: Any, file: str, index: int) -> None:
        if not isinstance(raw, dict):
            raise ConfigError(f"entry {index}: expected a mapping", file=file)
        self.raw = raw
        self.file = file
        self.id = raw.get("id")
        if not isinstance(self.id, str) or not self.id:
            raise ConfigError(f"entry {index}: required text field is missing", file=file, field="id")

    def error(self, path: str, why: str) -> ConfigError:
        return ConfigError(f"entry {self.id!r}: {why}", file=self.file, field=path)

    def section(self, name: str) -> dict[str, Any]:
        value = self.raw.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(name, f"expected a mapping, got {value!r}")
        return value

    def text(self, name: str) -> str:
        value = self.raw.get(name)
        if not isinstance(value, str):
            raise self.error(name, f"expected text, got {value!r}")
        return value


def _number(entry: _Entry, section: str, key: str, value: Any, *, integer: bool = False,
            most: float = MAX_SEQ) -> float:
    """A positive finite number of at most `most` (by default the longest context a model may declare: a token
    count, batch or width past it overflows the cost model)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise entry.error(f"{section}.{key}", f"expected a positive finite number, got {value!r}")
    if integer and value != int(value):
        raise entry.error(f"{section}.{key}", f"expected an integer, got {value!r}")
    if value > most:
        raise entry.error(f"{section}.{key}", f"must be at most {most:,}, got {value:,}")
    return float(value)


def _measured(entry: _Entry) -> dict[str, float]:
    """Every numeric measured figure (non-numeric ones, such as ranges, are left out)."""
    out = {}
    for key, value in entry.section("measured").items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[str(key)] = _number(entry, "measured", str(key), value, most=math.inf)
    return out


def _engine(entry: _Entry) -> str:
    text = str(entry.raw.get("engine", "")).lower()
    if text.startswith("not stated"):
        raise ParplanError("the engine is not stated")
    for word, name in ENGINE_WORDS:
        if word in text:
            if name == "trtllm" and re.search(r"\bv0\.\d", text):
                raise ParplanError("TensorRT-LLM before 1.0 ran compiled TensorRT engines (gptSessionBenchmark); the "
                                   "engine facts describe the PyTorch backend of 1.0 and later")
            return name
    raise ParplanError(f"engine {entry.raw.get('engine')!r} is not one of vLLM, SGLang, TensorRT-LLM")


def _cluster(entry: _Entry) -> str:
    gpu = entry.section("gpu").get("type")
    if not isinstance(gpu, str) or gpu not in SYSTEMS:
        raise ParplanError(f"no cluster preset for the GPU {gpu!r}")
    return SYSTEMS[gpu]


def _format(text: Any) -> str | None:
    """A weight or KV format from the entry's free text ('fp8 (block-scaled ...)', 'nvfp4', '16-bit ...')."""
    if not isinstance(text, str) or not text.split():
        return None  # not stated (an empty or blank text states no format)
    word = text.split()[0].strip(",;").lower()
    if word.startswith("16-bit"):
        return "bf16"
    return QUANT.get(word)


def _precision(entry: _Entry, engine: Engine, model: ModelSpec | None = None) -> Precision:
    """The entry's formats; where it states none for the weights, a checkpoint served as it is (its own 16-bit
    dtype), when the model is known."""
    p = entry.section("precision")
    weights = next((f for key in ("gemm_and_moe", "weights_activations", "weights_gemm")
                    if (f := _format(p.get(key))) is not None), None)
    if weights is None and model is not None and model.dtype in ("bfloat16", "float16"):
        weights = "bf16"
    if weights is None:
        raise ParplanError("the weights' precision is not stated")
    kv = _format(p.get("kv_cache")) or _format(p.get("kv_cache_and_attention")) or engine.default_kv_dtype(weights)
    return Precision(gemm=weights, moe=weights, kv_cache=kv)


def _int(section: dict[str, Any], path: str, key: str, default: int | None = None) -> int:
    value = section.get(key)
    if value is None:
        value = default
    if value is None:
        raise ParplanError(f"{path}.{key} is not stated")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParplanError(f"{path}.{key} is not a number of GPUs: {value!r}")
    return value


def _pool(entry: _Entry, layout: Any, path: str, moe: bool, batch_key: str | None = None) -> Pool:
    if not isinstance(layout, dict):
        raise entry.error(path, f"expected a mapping, got {layout!r}")
    tp = _int(layout, path, "tp", 1)
    dp = _int(layout, path, "attention_dp", 1) or 1
    ep = _int(layout, path, "moe_ep", 1) if moe else 1
    moe_tp = _int(layout, path, "moe_tp", tp * dp // max(ep, 1)) if moe else None
    batch = layout.get(batch_key) if batch_key else None
    # how the pool's MoE layers ran, as the measured CSV's POOL_COLUMNS state it, checked by Pool's own rules
    return launched_pool(lambda: Pool(tp=tp, pp=_int(layout, path, "pp", 1), dp=dp, moe_tp=moe_tp, moe_ep=ep,
                                      workers=_int(layout, path, "workers", 1),
                                      batch=batch if isinstance(batch, int) and not isinstance(batch, bool) else None,
                                      redundant_experts=_int(layout, path, "redundant_experts", 0),
                                      a2a=str(layout.get("a2a", "auto"))),
                         lambda field, why: entry.error(f"{path}.{field}", why))


def _base(entry: _Entry) -> dict[str, Any]:
    model = str(entry.raw.get("model", ""))
    return dict(id=entry.id, source=str(entry.section("source").get("doc", "")), model=model,
                system=str(entry.section("gpu").get("type")), measured=_measured(entry),
                tags={"model": model, "system": str(entry.section("gpu").get("type")),
                      "kind": str(entry.raw.get("kind")), "tier": str(entry.raw.get("tier")), "set": "published"})


def _launch(entry: _Entry) -> dict[str, Any]:
    """The entry's `launch:` section, keyed and checked as the measured rows' LAUNCH_COLUMNS (cases.py
    launch_settings; every setting None where the section leaves it out)."""
    section = entry.section("launch")
    for key in section:
        if key not in LAUNCH_COLUMNS:
            raise entry.error(f"launch.{key}", f"unknown launch setting; known: {', '.join(LAUNCH_COLUMNS)}")
    # The CSV reader's cells are text (its flags take any case, so YAML's booleans read as written); a null is an
    # empty cell, a setting left out.
    cells = {str(k): "" if v is None else str(v) for k, v in section.items()}
    return launch_settings(Row(cells, entry.file, f"entry {entry.id!r}", prefix="launch."))


def _closed_loop(entry: _Entry, engine: str) -> Case:
    """aiconfigurator's curated rows: TTFT and TPOT at a stated concurrency, aggregated or disaggregated, with
    the launch settings and client (workload.range_ratio) the entry states."""
    model = load_model(entry.text("model"))
    layout, work = entry.section("layout"), entry.section("workload")
    launch = _launch(entry)
    precision = _precision(entry, load_engine(engine), model)
    if launch["kv_cache_dtype"] is not None:
        p = entry.section("precision")
        stated = _format(p.get("kv_cache")) or _format(p.get("kv_cache_and_attention"))
        if stated is not None and stated != launch["kv_cache_dtype"]:
            raise entry.error("launch.kv_cache_dtype",
                              f"{launch['kv_cache_dtype']} where the precision states {stated}")
        precision = dataclasses.replace(precision, kv_cache=launch["kv_cache_dtype"])
    moe = model.moe is not None
    # Where the entry does not say, aiconfigurator's generated configs (its curated rows' default).
    overlap = MEASURED_OVERLAP.get(engine) if launch["overlap_scheduler"] is None else launch["overlap_scheduler"]

    def error(field: str, why: str) -> ConfigError:
        return entry.error(field if field.startswith("workload.") else f"launch.{field}", why)

    if "prefill" in layout:
        deployment = launched_deployment(engine, precision, launch, overlap, launch["chunk_tokens"], error,
                                         prefill=_pool(entry, layout["prefill"], "layout.prefill", moe),
                                         decode=_pool(entry, layout["decode"], "layout.decode", moe))
    else:
        deployment = launched_deployment(engine, precision, launch, overlap, launch["chunk_tokens"], error,
                                         pool=_pool(entry, layout, "layout", moe))
    workload = launched_workload(int(_number(entry, "workload", "isl", work.get("isl"), integer=True)),
                                 int(_number(entry, "workload", "osl", work.get("osl"), integer=True)),
                                 int(_number(entry, "workload", "concurrency", work.get("concurrency"), integer=True)),
                                 _number(entry, "workload", "range_ratio", work.get("range_ratio", 1.0), most=1.0),
                                 launch, error, "workload.range_ratio")
    measured = {k: v for k, v in _measured(entry).items() if k in ("ttft_ms", "tpot_ms")}
    base = _base(entry) | {"measured": measured}
    return Case(cluster=_cluster(entry), engine=engine, deployment=deployment, workload=workload, **base)


def _special(entry: _Entry, engine: str, kind: str, params: dict[str, Any], metrics: tuple[str, ...],
             deployment: Deployment | None = None) -> Case:
    measured = {k: v for k, v in _measured(entry).items() if k in metrics}
    if not measured:
        raise ParplanError("none of its figures is one the model reproduces")
    base = _base(entry) | {"measured": measured}
    return Case(cluster=_cluster(entry), engine=engine, deployment=deployment, workload=None, kind=kind,
                params=params, **base)


def _offline(entry: _Entry, engine: str) -> Case:
    """Max-throughput runs: output tokens/s per GPU per ISL/OSL pair (figures named ..._<isl>_<osl>), or at a
    stated concurrency and per-rank batch."""
    model = load_model(entry.text("model"))
    layout, work = entry.section("layout"), entry.section("workload")
    if "speculative" in layout:
        raise ParplanError("speculative decoding with an acceptance the source does not state")
    tp = _int(layout, "layout", "tp", 1)
    dp_on = layout.get("attention_dp") is True or (isinstance(layout.get("attention_dp"), str)
                                                    and "true" in layout["attention_dp"])
    moe = model.moe is not None
    # An MoE model with attention DP runs DP over the TP GPUs and EP over all of them (the perf-overview
    # configs set enable_attention_dp with ep_size = tp).
    pool = Pool(tp=1 if dp_on else tp, dp=tp if dp_on else 1, pp=_int(layout, "layout", "pp", 1),
                moe_ep=tp if (moe and dp_on) else (_int(layout, "layout", "moe_ep", 1) if moe else 1),
                batch=layout.get("max_batch_per_rank") if isinstance(layout.get("max_batch_per_rank"), int) else None)
    # The run's token budget per step (trtllm-bench --max_num_tokens), where the entry states it.
    budget = layout.get("max_num_tokens")
    deployment = Deployment(engine=engine, precision=_precision(entry, load_engine(engine)), pool=pool,
                            chunk_tokens=budget if isinstance(budget, int) and not isinstance(budget, bool) else None)
    pairs = {}
    for key in _measured(entry):
        match = re.fullmatch(r"total_output_tok_s_(\d+)_(\d+)", key)
        if match:
            pairs[key] = (int(match.group(1)), int(match.group(2)))
    if not pairs and "isl" in work:
        isl = int(_number(entry, "workload", "isl", work.get("isl"), integer=True))
        osl = int(_number(entry, "workload", "osl", work.get("osl"), integer=True))
        pairs["output_tok_s_per_gpu"] = (isl, osl)
    concurrency = work.get("concurrency", QUEUED)
    if not isinstance(concurrency, (int, float)) or isinstance(concurrency, bool):
        concurrency = QUEUED
    concurrency = _number(entry, "workload", "concurrency", concurrency, most=MAX_BATCH)
    stated = work.get("num_requests")
    if stated is not None:
        stated = _number(entry, "workload", "num_requests", stated, integer=True, most=MAX_BATCH)
    perf_overview = "perf-overview.md" in str(entry.section("source").get("doc", ""))
    requests = {name: stated if stated is not None
                else float(PERF_OVERVIEW_REQUESTS.get(pair, 0)) if perf_overview else 0.0
                for name, pair in pairs.items()}
    return _special(entry, engine, "offline", {"pairs": pairs, "concurrency": concurrency,
                                               "requests": requests}, tuple(pairs), deployment)


def _static(entry: _Entry, engine: str) -> Case:
    work, layout = entry.section("workload"), entry.section("layout")
    deployment = Deployment(engine=engine, precision=_precision(entry, load_engine(engine)),
                            pool=Pool(tp=_int(layout, "layout", "tp", 1), pp=_int(layout, "layout",
                                                                                          "pp", 1)))
    params = {k: _number(entry, "workload", k, work.get(k), integer=True) for k in ("batch", "isl", "osl")}
    return _special(entry, engine, "static", params, ("output_tok_s_per_gpu", "first_token_latency_ms"),
                    deployment)


def _profile(entry: _Entry, engine: str) -> Case:
    """Splitwise's per-phase latencies: prefill_ms_b<b>_isl<s> and tpot_ms_b<b>_isl<s>."""
    layout = entry.section("layout")
    deployment = Deployment(engine=engine, precision=_precision(entry, load_engine(engine)),
                            pool=Pool(tp=_int(layout, "layout", "tp", 1)))
    metrics = tuple(k for k in _measured(entry) if re.fullmatch(r"(prefill|tpot)_ms_b\d+_isl\d+", k))
    return _special(entry, engine, "profile", {}, metrics, deployment)


def _phase(entry: _Entry, engine: str) -> Case:
    """SGLang / DeepSeek EP phases: prefill throughput at a stated prompt length and tokens per GPU, decode
    throughput at a stated batch per GPU and context."""
    model = load_model(entry.text("model"))
    work, layout = entry.section("workload"), entry.section("layout")
    ep = _int(layout, "layout", "moe_ep", 1)
    redundant = 32 if "redundant" in str(layout.get("eplb", "")) and model.moe else 0
    if model.moe is not None and (model.moe.experts + redundant) % ep:
        redundant = (-model.moe.experts) % ep
    pool = Pool(tp=1, dp=ep, moe_ep=ep, redundant_experts=redundant)
    deployment = Deployment(engine=engine, precision=_precision(entry, load_engine(engine)), pool=pool)
    if entry.raw.get("phase") == "prefill":
        isl = _number(entry, "workload", "isl", work.get("isl"), integer=True)
        tokens = work.get("tokens_per_gpu")
        if not isinstance(tokens, (int, float)) or isinstance(tokens, bool):
            raise ParplanError("the prefill tokens per GPU are not stated")
        tokens = _number(entry, "workload", "tokens_per_gpu", tokens)
        return _special(entry, engine, "prefill_rate", {"isl": isl, "tokens": tokens},
                        ("input_tok_s_per_node", "input_tok_s_per_gpu"), deployment)
    batch = work.get("batch_per_gpu")
    ctx = work.get("kv_len")
    if not isinstance(batch, (int, float)) or not isinstance(ctx, (int, float)):
        raise ParplanError("the decode batch per GPU or its context is not stated")
    batch = _number(entry, "workload", "batch_per_gpu", batch, most=MAX_BATCH)
    ctx = _number(entry, "workload", "kv_len", ctx)
    return _special(entry, engine, "decode_rate", {"batch": batch, "ctx": ctx},
                    ("output_tok_s_per_node", "output_tok_s_per_gpu", "output_tok_s_per_node_derived_by_sglang"),
                    deployment)


def _kernel_comm(entry: _Entry) -> Case:
    """MoE all-to-all kernel tables at DeepSeek-V3 shapes: TensorRT-LLM's one-sided NVLink kernel (dispatch and
    combine µs on GB200), DeepEP V1's low-latency dispatch/combine µs (NVLink-assisted kernels) and normal-kernel
    bottleneck bandwidth on H800."""
    work, layout = entry.section("workload"), entry.section("layout")
    params = {k: _number(entry, "workload", k, work.get(k), integer=True) for k in ("tokens_per_batch", "hidden",
                                                                                    "topk")}
    params["ep"] = float(_int(layout, "layout", "ep"))
    if "NVLinkOneSided" in str(entry.raw.get("engine", "")):
        return _special(entry, "trtllm", "nvlink_one_sided", params, ("dispatch_us", "combine_us"))
    if "V1" not in str(entry.raw.get("engine", "")):
        raise ParplanError("DeepEP V2 (NCCL Gin) kernels are not modelled: the kernel model follows the V1 tables")
    low_latency = "low-latency" in str(entry.raw.get("phase", ""))
    metrics = (("dispatch_us_with_nvlink", "combine_us_with_nvlink") if low_latency
               else ("dispatch_bottleneck_GBps", "combine_bottleneck_GBps"))
    return _special(entry, "trtllm", "deepep_ll" if low_latency else "deepep_normal", params, metrics)


ADAPTERS = {
    "e2e_serving_fixed_concurrency": _closed_loop,
    "e2e_offline": _offline,
    "e2e_static_batch": _static,
    "prefill_latency": _static,
    "phase_latency_profile": _profile,
    "phase_isolated": _phase,
    "profile_derived": _phase,
}
REFUSED_KINDS = {
    "production_average": "a production average over a day's load (troughs included), not a controlled run",
    "layout_only": "a layout without measured figures",
    "headline": "a headline figure without its workload",
    "mlperf_offline": "the input and output lengths follow the MLPerf dataset, which the entry does not give",
    "mlperf_server": "the input and output lengths follow the MLPerf dataset, which the entry does not give",
    "pd_cluster": "the decode batch's unit is not stated",
    "latency_b1": "the engine (FasterTransformer) is not one of vLLM, SGLang, TensorRT-LLM",
}


def read_published_yaml(path: str | Path) -> list[Case]:
    """Cases of a published-deployments YAML file (the format of published_serving.yaml)."""
    file = str(path)
    data = read_yaml(path)
    if not isinstance(data, list):
        raise ConfigError("expected a list of entries", file=file)
    cases = []
    for index, raw in enumerate(data, start=1):
        entry = _Entry(raw, file, index)
        kind = entry.text("kind")
        if "launch" in entry.raw and kind not in LAUNCHED_KINDS:
            raise entry.error("launch", f"launch settings apply to {', '.join(LAUNCHED_KINDS)} entries only")
        base = _base(entry)
        try:
            if any("unit_ambiguous" in k for k in base["measured"]):
                raise ParplanError("the source leaves the unit of its figure ambiguous")
            if kind == "kernel_comm":
                cases.append(_kernel_comm(entry))
                continue
            if kind in REFUSED_KINDS:
                raise ParplanError(REFUSED_KINDS[kind])
            if kind not in ADAPTERS:
                raise ParplanError(f"a kind of measurement ({kind!r}) the serving model does not reproduce")
            case = ADAPTERS[kind](entry, _engine(entry))
            cases.append(dataclasses.replace(case, tags={**case.tags, "engine": case.engine}))
        except ConfigError as e:
            if e.file:
                raise
            cases.append(Case(cluster=None, engine="", deployment=None, workload=None, refused=str(e), **base))
        except ParplanError as e:
            cases.append(Case(cluster=None, engine="", deployment=None, workload=None, refused=str(e), **base))
    return cases


# ------------------------------------------------------------------------------------------------ evaluation


def _one_step(case: Case, engine: Engine, n_dec: float, ctx: float, n_pf: float, pf_keys: float, pf_seqs: float,
              mixed: bool) -> float:
    d = case.deployment
    assert d is not None and d.pool is not None and case.cluster is not None
    sm = StepModel(load_model(case.model), load_cluster(case.cluster), engine, d.precision,
                   PoolArrays.from_pools([d.pool]))
    step = sm.step(np.array([n_dec]), np.array([ctx]), np.array([n_pf]), np.array([pf_keys]), np.array([pf_seqs]),
                   mixed=mixed)
    return float(step.total[0])


def _whole_waves(requests: float, batch: float) -> float:
    """Share of the steady-state throughput a run of `requests` equal requests keeps when `batch` of them run at
    once: they go through in ⌈requests / batch⌉ waves (equal lengths keep each wave together), and the last,
    partial wave decodes for as long as a full one (a decode step's time is mostly the weights it reads).
    1 where the run's request count is not stated."""
    if requests <= 0 or batch <= 0:
        return 1.0
    return requests / batch / math.ceil(requests / batch - 1e-9)


def evaluate_special(case: Case, engine: Engine) -> dict[str, float]:
    """Predicted figures of a case that is not a closed loop (kinds above)."""
    p = case.params
    out: dict[str, float] = {}
    if case.kind == "nvlink_one_sided":
        cluster = load_cluster(case.cluster, gpus=int(p["ep"]))  # type: ignore[arg-type]
        logical = nvlink_alltoall.benchmark_bytes(p["tokens_per_batch"], p["ep"], p["topk"], 2.0 * p["hidden"])
        out["dispatch_us"] = float(nvlink_alltoall.dispatch_time(cluster, logical, p["ep"])) * 1e6
        out["combine_us"] = float(nvlink_alltoall.combine_time(cluster, logical, p["ep"])) * 1e6
        return out
    if case.kind in ("deepep_ll", "deepep_normal"):
        cluster = load_cluster(case.cluster, gpus=int(p["ep"]))  # type: ignore[arg-type]
        per_node = cluster.gpus_per_node
        tokens, hidden, k, ep = p["tokens_per_batch"], p["hidden"], p["topk"], p["ep"]
        if case.kind == "deepep_ll":
            out["dispatch_us_with_nvlink"] = float(deepep.low_latency_time(
                cluster, tokens * k * deepep.token_bytes(hidden, True), ep, per_node)) * 1e6
            out["combine_us_with_nvlink"] = float(deepep.low_latency_time(
                cluster, tokens * k * deepep.token_bytes(hidden, False), ep, per_node)) * 1e6
            return out
        nodes = int(max(ep // per_node, 1))
        remote = 0.0 if nodes == 1 else experts.node_limited(int(k), nodes, min(4, nodes))
        for name, fp8 in (("dispatch", True), ("combine", False)):
            b = float(deepep.token_bytes(hidden, fp8))
            rdma, nvl = tokens * remote * b, tokens * k * (min(ep, per_node) - 1) / ep * b
            t = float(deepep.normal_time(cluster, nvl, rdma, ep, per_node))
            out[f"{name}_bottleneck_GBps"] = (rdma if nodes > 1 else nvl) / t / 1e9
        return out
    d = case.deployment
    assert d is not None and d.pool is not None
    gpus_per_rank = d.pool.tp * d.pool.pp
    if case.kind == "offline":
        model, cluster = load_model(case.model), load_cluster(case.cluster)  # type: ignore[arg-type]
        for name, (isl, osl) in p["pairs"].items():
            traffic = Traffic(isl=np.array([float(isl)]), osl=np.array([float(osl)]), prompt=np.array([float(isl)]),
                              concurrency=np.array([p["concurrency"]]))
            ev = evaluate_aggregated(model, cluster, engine, d.precision, PoolArrays.from_pools([d.pool]), traffic,
                                     d.chunk_tokens)
            if ev.memory.fits[0]:
                per_gpu = float(ev.output_tok_s_per_gpu[0]) * _whole_waves(
                    p["requests"][name], float(ev.phase.running[0]) * d.pool.dp * d.pool.workers)
                out[name] = per_gpu * d.gpus if name.startswith("total_") else per_gpu
        return out
    if case.kind == "static":
        b, isl, osl = p["batch"], p["isl"], p["osl"]
        prefill = _one_step(case, engine, 0.0, 0.0, b * isl, isl / 2, b, mixed=True)
        decode = _one_step(case, engine, b, isl + osl / 2, 0.0, 0.0, 0.0, mixed=False) * max(osl - 1, 0)
        out["first_token_latency_ms"] = prefill * 1e3
        out["output_tok_s_per_gpu"] = b * osl / (prefill + decode) / gpus_per_rank
        return out
    if case.kind == "profile":
        for name in case.measured:
            match = re.fullmatch(r"(prefill|tpot)_ms_b(\d+)_isl(\d+)", name)
            assert match is not None
            b, isl = float(match.group(2)), float(match.group(3))
            if match.group(1) == "prefill":
                out[name] = _one_step(case, engine, 0.0, 0.0, b * isl, isl / 2, b, mixed=True) * 1e3
            else:
                out[name] = _one_step(case, engine, b, isl, 0.0, 0.0, 0.0, mixed=False) * 1e3
        return out
    if case.kind == "prefill_rate":
        t = _one_step(case, engine, 0.0, 0.0, p["tokens"], p["isl"] / 2, p["tokens"] / p["isl"], mixed=True)
        node = load_cluster(case.cluster).gpus_per_node  # type: ignore[arg-type]
        out["input_tok_s_per_gpu"] = p["tokens"] / t
        out["input_tok_s_per_node"] = out["input_tok_s_per_gpu"] * node
        return out
    if case.kind == "decode_rate":
        node = load_cluster(case.cluster).gpus_per_node  # type: ignore[arg-type]
        t = _one_step(case, engine, p["batch"], p["ctx"], 0.0, 0.0, 0.0, mixed=False)
        out["output_tok_s_per_gpu"] = p["batch"] / t
        out["output_tok_s_per_node"] = out["output_tok_s_per_node_derived_by_sglang"] = p["batch"] / t * node
        return out
    raise ValueError(f"unknown case kind {case.kind!r}")
