"""`parplan serve`: serving deployments (vLLM, SGLang, TensorRT-LLM): `explain` one, `plan` the best."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from parplan.cli._options import (
    ClusterOpt,
    GpuCountsOpt,
    JsonOpt,
    ModelOpt,
    number,
    parse_gpu_counts,
    usage_errors,
)
from parplan.cli._output import Column, console, fitted_table, kv_table, print_json, print_text
from parplan.errors import ConfigError
from parplan.limits import MAX_BATCH, MAX_BATCH_WAIT_ITERS, MAX_GPUS, MAX_MTP, MAX_SEQ
from parplan.models.spec import RANGES
from parplan.names import A2A_BACKENDS, ENGINES, KV_DTYPES

if TYPE_CHECKING:
    from parplan.serving.evaluate import ServingEstimate
    from parplan.serving.spec import Deployment, Pool, Precision, Workload

app = typer.Typer(help="Serving deployments: explain one, or plan the best under latency targets.",
                  no_args_is_help=True)

POOL_KEYS = ("tp", "pp", "dp", "moe_tp", "moe_ep", "workers", "batch", "redundant_experts", "a2a")

EngineOpt = Annotated[str, typer.Option(metavar="ENGINE", help="Serving engine: " + ", ".join(ENGINES) + ".")]
PrecisionOpt = Annotated[str, typer.Option(
    metavar="DTYPE|gemm=D,moe=D",
    help="Weights: bf16, fp8, fp4 or int4, or gemm=fp8,moe=fp4 for attention/dense and experts apart.")]
KvOpt = Annotated[str, typer.Option(
    "--kv-cache", metavar="DTYPE",
    help="KV-cache format: auto (the engine's default for these weights), " + ", ".join(KV_DTYPES) + ".")]
IslOpt = Annotated[int, typer.Option(min=1, max=MAX_SEQ, help="Input tokens per request.")]
OslOpt = Annotated[int, typer.Option(min=1, max=MAX_SEQ, help="Output tokens per request.")]
ConcurrencyOpt = Annotated[int | None, typer.Option(min=1, max=MAX_BATCH,
                                                    help="Requests in flight (closed loop), whole deployment.")]
RateOpt = Annotated[float | None, typer.Option(callback=number(above=0), metavar="NUMBER",
                                               help="Arriving requests per second (open loop), instead.")]
PrefixOpt = Annotated[float, typer.Option(callback=number(min=0, max=1), metavar="FRACTION",
                                          help="Share of input tokens found in the prefix cache, in [0, 1).")]
RangeRatioOpt = Annotated[float, typer.Option(
    callback=number(above=0, max=1), metavar="FRACTION",
    help="Requests' lengths drawn uniformly from [⌊ratio·ISL⌋, ISL] and [⌊ratio·OSL⌋, OSL], as "
         "benchmark_serving.py --random-range-ratio (InferenceX runs 0.8); 1 = fixed lengths.")]
MtpOpt = Annotated[int, typer.Option(min=0, max=MAX_MTP, help="Speculative (MTP) tokens drafted per step; 0 = off.")]
AcceptanceOpt = Annotated[float, typer.Option(callback=number(min=0, max=1), metavar="FRACTION",
                                              help="Chance each drafted token is accepted (with --mtp), in [0, 1).")]
ChunkOpt = Annotated[int | None, typer.Option(min=1, max=MAX_SEQ,
                                              help="Token budget per step (default: the engine's).")]
MemoryFractionOpt = Annotated[float | None, typer.Option(
    callback=number(above=0, max=1), metavar="FRACTION",
    help="Share of GPU memory the KV cache is sized from: vLLM --gpu-memory-utilization, SGLang "
         "--mem-fraction-static (of the whole GPU), TensorRT-LLM free_gpu_memory_fraction (of what the weights "
         "leave free). Default: the engine's.")]

_OPTIONS = {"precision": "--precision", "precision.gemm": "--precision", "precision.moe": "--precision",
            "precision.kv_cache": "--kv-cache", "engine": "--engine", "mode": "--mode"}
"""Option spelling of the serving fields whose name differs (the others are --field-name)."""


def _engine(name: str, option: str) -> str:
    """An engine name, else a usage error naming the option and the nearest engine."""
    if name not in ENGINES:
        close = difflib.get_close_matches(name, ENGINES, n=1, cutoff=0.4)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise typer.BadParameter(f"expected one of {', '.join(ENGINES)}, got {name!r}{hint}", param_hint=option)
    return name


def parse_pool(text: str, option: str) -> Pool:
    """A pool from 'tp=1,dp=8,moe_ep=8,workers=2,batch=64' (keys: POOL_KEYS)."""
    from parplan.serving.spec import Pool

    values: dict[str, object] = {}
    for item in text.split(","):
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in POOL_KEYS:
            raise typer.BadParameter(f"expected key=value pairs with keys {', '.join(POOL_KEYS)}; got {item!r}",
                                     param_hint=option)
        if key == "a2a":
            values[key] = raw.strip()
            continue
        try:
            values[key] = int(raw)
        except ValueError:
            raise typer.BadParameter(f"{key} must be an integer, got {raw!r}", param_hint=option) from None
    try:
        return Pool(**values)  # type: ignore[arg-type]
    except ConfigError as e:
        raise typer.BadParameter(str(e), param_hint=option) from None


def build_precision(text: str, kv: str, engine: str, model_has_moe: bool) -> Precision:
    """--precision and --kv-cache as a Precision; 'auto' KV is the engine's default for those weights."""
    from parplan.serving.engines import load_engine
    from parplan.serving.spec import Precision

    base = Precision.parse(text)
    if kv == "auto":
        kv = load_engine(engine).default_kv_dtype(base.moe if model_has_moe else base.gemm)
    return Precision(gemm=base.gemm, moe=base.moe, kv_cache=kv)


def explain(
    model: ModelOpt,
    cluster: ClusterOpt,
    engine: EngineOpt = "vllm",
    isl: IslOpt = 1024,
    osl: OslOpt = 1024,
    concurrency: ConcurrencyOpt = None,
    rate: RateOpt = None,
    tp: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Attention tensor parallelism per worker.")] = 1,
    pp: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Pipeline stages per worker.")] = 1,
    dp: Annotated[int, typer.Option(min=1, max=MAX_GPUS,
                                    help="Attention data-parallel ranks per worker (DP attention).")] = 1,
    moe_tp: Annotated[int | None, typer.Option(min=1, max=MAX_GPUS,
                                               help="Tensor parallelism inside each expert.")] = None,
    moe_ep: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Expert parallelism over the worker's GPUs.")] = 1,
    workers: Annotated[int, typer.Option(min=1, max=MAX_GPUS, help="Instances (replicas) of the worker.")] = 1,
    batch: Annotated[int | None, typer.Option(min=1, max=MAX_BATCH,
                                              help="Max running requests per attention rank (SGLang and "
                                                   "TensorRT-LLM: also the largest CUDA-graph batch, as parplan "
                                                   "launches them).")] = None,
    redundant_experts: Annotated[int, typer.Option(min=0, max=MAX_GPUS, help="EPLB redundant expert replicas.")] = 0,
    a2a: Annotated[str, typer.Option(
        metavar="BACKEND", help="MoE exchange under DP attention: " + ", ".join(A2A_BACKENDS) + ".")] = "auto",
    prefill: Annotated[str | None, typer.Option(
        metavar="KEY=N,...", help="Disaggregated: the prefill pool, e.g. tp=1,dp=8,moe_ep=8,workers=2.")] = None,
    decode: Annotated[str | None, typer.Option(
        metavar="KEY=N,...", help="Disaggregated: the decode pool, e.g. tp=1,dp=32,moe_ep=32.")] = None,
    precision: PrecisionOpt = "bf16",
    kv_cache: KvOpt = "auto",
    prefix_hit: PrefixOpt = 0.0,
    range_ratio: RangeRatioOpt = 1.0,
    mtp: MtpOpt = 0,
    acceptance: AcceptanceOpt = 0.0,
    chunk_tokens: ChunkOpt = None,
    memory_fraction: MemoryFractionOpt = None,
    batch_wait_iters: Annotated[int, typer.Option(
        min=0, max=MAX_BATCH_WAIT_ITERS,
        help="TensorRT-LLM batch_wait_timeout_iters: most steps a new prompt is held to batch it (0 = off).")] = 0,
    batch_wait_ratio: Annotated[float, typer.Option(
        callback=number(min=0, max=1), metavar="FRACTION",
        help="TensorRT-LLM batch_wait_max_tokens_ratio: share of the token budget that releases held prompts "
             "at once (0 = off).")] = 0.0,
    dp_balance_timeout_iters: Annotated[int, typer.Option(
        min=0, max=MAX_BATCH_WAIT_ITERS,
        help="TensorRT-LLM attention_dp_config enable_balance with this timeout_iters: under attention DP, most "
             "steps new prompts are held until every rank has one (0 = off).")] = 0,
    dp_balance_wait_iters: Annotated[int, typer.Option(
        min=0, max=MAX_BATCH_WAIT_ITERS,
        help="TensorRT-LLM attention_dp_config batching_wait_iters: steps balanced ranks then wait to gather "
             "more prompts (with --dp-balance-timeout-iters).")] = 0,
    cuda_graph_max_batch: Annotated[int | None, typer.Option(
        min=1, max=MAX_SEQ,
        help="Largest step replayed as a CUDA graph: vLLM --max-cudagraph-capture-size (a step's tokens), SGLang "
             "--cuda-graph-max-bs, TensorRT-LLM cuda_graph_config max_batch_size (decode sequences). Default: "
             "the engine's.")] = None,
    recv_interval: Annotated[int | None, typer.Option(
        min=1, max=MAX_BATCH_WAIT_ITERS,
        help="SGLang --scheduler-recv-interval: decode steps between the scheduler's polls for new requests "
             "(default 1: every step).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """TTFT, TPOT, throughput per GPU and per user, and memory per GPU of one serving deployment."""
    from parplan.models import load_model
    from parplan.serving.evaluate import serve_evaluate
    from parplan.serving.spec import BatchWait, Deployment, DpBalance, Pool, Workload

    _engine(engine, "--engine")
    if (prefill is None) != (decode is None):
        raise typer.BadParameter("give both --prefill and --decode for a disaggregated deployment",
                                 param_hint="--prefill")
    with usage_errors(_OPTIONS):  # option values first, before the model is read
        workload = Workload(isl=isl, osl=osl, concurrency=concurrency, rate=rate, prefix_hit=prefix_hit, mtp=mtp,
                            acceptance=acceptance, range_ratio=range_ratio)
        wait = BatchWait(iters=batch_wait_iters, ratio=batch_wait_ratio) if batch_wait_iters or batch_wait_ratio \
            else None
        if dp_balance_wait_iters and not dp_balance_timeout_iters:
            raise typer.BadParameter("needs --dp-balance-timeout-iters (TensorRT-LLM waits to gather more prompts "
                                     "only once balance is on)", param_hint="--dp-balance-wait-iters")
        balance = DpBalance(timeout_iters=dp_balance_timeout_iters, batching_wait_iters=dp_balance_wait_iters) \
            if dp_balance_timeout_iters else None
        pool = None if prefill is not None else Pool(
            tp=tp, pp=pp, dp=dp, moe_tp=moe_tp, moe_ep=moe_ep, workers=workers, batch=batch,
            redundant_experts=redundant_experts, a2a=a2a)
    spec = load_model(model)
    with usage_errors(_OPTIONS):
        prec = build_precision(precision, kv_cache, engine, spec.moe is not None)
        if prefill is not None:
            deployment = Deployment(engine=engine, precision=prec, mode="disaggregated",
                                    prefill=parse_pool(prefill, "--prefill"), decode=parse_pool(decode, "--decode"),
                                    chunk_tokens=chunk_tokens, memory_fraction=memory_fraction, batch_wait=wait,
                                    dp_balance=balance, cuda_graph_max_batch=cuda_graph_max_batch,
                                    recv_interval=recv_interval)
        else:
            deployment = Deployment(engine=engine, precision=prec, pool=pool, chunk_tokens=chunk_tokens,
                                    memory_fraction=memory_fraction, batch_wait=wait, dp_balance=balance,
                                    cuda_graph_max_batch=cuda_graph_max_batch, recv_interval=recv_interval)
    with usage_errors(_OPTIONS):  # the workload against the model's context
        est = serve_evaluate(spec, cluster, deployment, workload)
    if json_out:
        print_json(est.as_dict())
        return
    show_serving(est)


def _lengths(w: Workload) -> str:
    """ISL / OSL as stated, and the mean the requests have where the client draws their lengths."""
    drawn = (f" drawn from {w.range_ratio:g}-1× (mean {w.mean_isl:,.1f} / {w.mean_osl:,.1f})"
             if w.range_ratio < 1 else "")
    return f"ISL {w.isl:,} / OSL {w.osl:,}{drawn}"


def show_serving(est: ServingEstimate) -> None:
    d, w = est.deployment, est.workload
    load = f"{w.concurrency:,} requests in flight" if w.concurrency else f"{w.rate:g} requests/s arriving"
    console.print(kv_table(
        f"{est.model} on {est.gpus}× {est.cluster} ({d.engine}, {d.precision.describe()}), {d.describe()}", [
            ("workload", f"{_lengths(w)}, {load}"
             + (f", {w.prefix_hit:.0%} prefix hits" if w.prefix_hit else "")
             + (f", MTP {w.mtp} drafts at {w.acceptance:.0%} acceptance" if w.mtp else "")),
            *([("launch", launch)] if (launch := _launch_settings(d)) else []),
            ("TTFT", f"{est.ttft_ms:,.1f} ms"),
            ("TPOT", f"{est.tpot_ms:,.2f} ms  (inter-token latency: (latency − TTFT) / (OSL − 1))"),
            ("request latency", f"{est.request_latency_ms / 1e3:,.2f} s"),
            ("throughput", f"{est.output_tok_s_per_gpu:,.1f} output tokens/s per GPU, "
                           f"{est.output_tok_s_per_user:,.1f} per user, {est.requests_per_s:,.2f} requests/s"),
        ]), highlight=False)
    console.print(_by_column("One step on one attention rank, ms", est.steps, lambda part, v: f"{v * 1e3:,.3f}"))
    memory = {role: {k: v for k, v in parts.items() if k != "hbm_gib"} for role, parts in est.memory.items()}
    console.print(_by_column("Memory per GPU, GiB", memory,
                             lambda key, v: f"{v:,.2f}" if key.endswith("_gib") else f"{v:,.0f}",
                             lambda key: key.removesuffix("_gib").replace("_", " ")))
    console.print(kv_table("Steady state", [(k.replace("_", " "), f"{v:,.3g}") for k, v in est.state.items()]),
                  highlight=False)
    for note in est.notes:
        console.print(f"note: {note}", highlight=False)


def _launch_settings(d: Deployment) -> str:
    """The launch settings a deployment states beyond the engine's defaults, in words."""
    parts = []
    if d.chunk_tokens:
        parts.append(f"{d.chunk_tokens:,}-token budget")
    if d.memory_fraction is not None:
        parts.append(f"memory fraction {d.memory_fraction:g}")
    if d.cuda_graph_max_batch is not None:
        parts.append(f"CUDA graphs up to {d.cuda_graph_max_batch:,}")
    if d.overlap_scheduler is not None:
        parts.append(f"overlap scheduler {'on' if d.overlap_scheduler else 'off'}")
    if d.recv_interval is not None and d.recv_interval > 1:
        parts.append(f"new requests polled every {d.recv_interval} decode steps")
    if d.batch_wait is not None and d.batch_wait.holds:
        parts.append(f"batch waiting up to {d.batch_wait.iters} steps or {d.batch_wait.ratio:g} of the budget")
    if d.dp_balance is not None and d.dp_balance.holds:
        parts.append(f"attention-DP balance: prompts held up to {d.dp_balance.timeout_iters} steps until every rank "
                     f"has one" + (f", then {d.dp_balance.batching_wait_iters} more" if d.dp_balance.batching_wait_iters
                                   else ""))
    return ", ".join(parts)


def _by_column(title: str, columns: dict[str, dict[str, float]], fmt: Any,
               label: Any = lambda key: key) -> Table:
    """A table with one column per key of `columns` and one row per key of its inner dicts."""
    cols = [Column("part", left=True, wrap=True), *(Column(name) for name in columns)]
    rows = [[label(key), *(fmt(key, columns[c][key]) for c in columns)] for key in next(iter(columns.values()))]
    return fitted_table(title, [(cols, rows)])


def validate_serving(file: str | None, json_out: bool) -> None:
    """`parplan validate --serving [FILE]`: predicted against measured TTFT, TPOT and throughput of serving
    deployments (the shipped public data, or a CSV / YAML file in the same formats)."""
    from parplan.serving.validate import evaluate_cases, load_serving_cases, summarize

    results = evaluate_cases(load_serving_cases(file))
    by_set, by_engine = summarize(results, "set"), summarize(results, "engine")
    if json_out:
        print_json({
            "rows": [{
                "id": r.case.id, "set": r.case.tags.get("set"), "source": r.case.source, "error": r.error,
                "metrics": {m: {"measured": v, "predicted": r.predicted.get(m)} for m, v in r.case.measured.items()},
            } for r in results],
            "summary": {"by_set": by_set, "by_engine": by_engine},
        })
        return
    for title, rows, key in (("By data set", by_set, "set"), ("By engine", by_engine, "engine")):
        columns = [Column(key, left=True, wrap=True), Column("cases", drop=2), Column("predicted", "pred", drop=1),
                   Column("metric", left=True), Column("n"), Column("median"), Column("p90"), Column("mean", drop=3)]
        cells = []
        for row in rows:
            first = True
            for metric, stats in row["metrics"].items():
                cells.append([str(row[key]) if first else "", str(row["cases"]) if first else "",
                              f"{row['predicted_share']:.1%}" if first else "", metric, str(stats["n"]),
                              f"{stats['median_ape']:.1%}", f"{stats['p90_ape']:.1%}", f"{stats['mean_ape']:.1%}"])
                first = False
        console.print(fitted_table(f"Serving deployments, {title.lower()}: absolute percentage error",
                                   [(columns, cells)]))
    refused = [r for r in results if r.error]
    if refused:
        reasons: dict[str, int] = {}
        for r in refused:
            reasons[r.error] = reasons.get(r.error, 0) + 1  # type: ignore[index]
        console.print(f"{len(refused)} of {len(results)} not predicted:", highlight=False)
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:12]:
            console.print(f"  {n:4d}  {reason}", highlight=False, markup=False)


def plan(
    model: ModelOpt,
    cluster: ClusterOpt,
    gpus: GpuCountsOpt,
    isl: IslOpt = 1024,
    osl: OslOpt = 1024,
    ttft_ms: Annotated[float | None, typer.Option(callback=number(above=0), metavar="MS",
                                                  help="TTFT target, ms (mean).")] = None,
    tpot_ms: Annotated[float | None, typer.Option(callback=number(above=0), metavar="MS",
                                                  help="TPOT target, ms (mean).")] = None,
    concurrency: ConcurrencyOpt = None,
    rate: Annotated[float | None, typer.Option(
        callback=number(above=0), metavar="NUMBER",
        help="Arriving requests per second; with a GPU range, the fewest GPUs that serve it within the targets.")
    ] = None,
    engine: Annotated[str | None, typer.Option(
        metavar="ENGINE",
        help="Serving engine: " + ", ".join(ENGINES) + " (default: the --emit engine, else vllm).")] = None,
    mode: Annotated[str, typer.Option(help="aggregated, disaggregated or both.")] = "both",
    precision: Annotated[list[str] | None, typer.Option(
        metavar="DTYPE|gemm=D,moe=D",
        help="Weights to try (repeat for several): bf16, fp8, fp4, int4 or gemm=fp8,moe=fp4. Default bf16.")] = None,
    kv_cache: KvOpt = "auto",
    prefix_hit: PrefixOpt = 0.0,
    range_ratio: RangeRatioOpt = 1.0,
    mtp: MtpOpt = 0,
    acceptance: AcceptanceOpt = 0.0,
    max_pp: Annotated[int, typer.Option(min=1, max=RANGES["layers"][1],
                                        help="Most pipeline stages per worker to try.")] = 1,
    redundant_experts: Annotated[list[int] | None, typer.Option(
        min=0, max=MAX_GPUS, help="EPLB redundant experts to try (repeat for several). Default 0.")] = None,
    chunk_tokens: ChunkOpt = None,
    memory_fraction: MemoryFractionOpt = None,
    top: Annotated[int, typer.Option(min=1, max=1000, help="Deployments to list.")] = 5,
    emit: Annotated[str | None, typer.Option(
        metavar="ENGINE",
        help="Write the winner's launch settings for this engine: " + ", ".join(ENGINES) + ".")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The best serving deployments under latency targets, aggregated against disaggregated: the Pareto front of
    tokens/s per GPU against tokens/s per user, why the winner wins, and the command that reproduces it."""
    from parplan.serving.plan import serve_plan

    if emit is not None:
        _engine(emit, "--emit")
    if engine is not None and emit is not None and engine != emit:
        raise typer.BadParameter(f"the plan is for {engine}; emit its settings with --emit {engine}, or plan "
                                 f"with --engine {emit}", param_hint="--emit")
    if mode not in ("aggregated", "disaggregated", "both"):
        raise typer.BadParameter("expected aggregated, disaggregated or both", param_hint="--mode")
    if concurrency is not None and rate is not None:
        raise typer.BadParameter("give at most one of --concurrency and --rate", param_hint="--rate")
    name = _engine(engine or emit or "vllm", "--engine")
    counts = parse_gpu_counts(gpus)
    modes = ("aggregated", "disaggregated") if mode == "both" else (mode,)
    with usage_errors(_OPTIONS):  # serve_plan checks the option values before it searches
        result = serve_plan(model, cluster, counts, isl=isl, osl=osl, concurrency=concurrency, rate=rate,
                            prefix_hit=prefix_hit, range_ratio=range_ratio, mtp=mtp, acceptance=acceptance,
                            engine=name,
                            ttft_ms=ttft_ms, tpot_ms=tpot_ms, modes=modes,
                            precisions=tuple(precision or ("bf16",)), kv_cache=kv_cache, max_pp=max_pp,
                            redundant_experts=tuple(redundant_experts or (0,)), chunk_tokens=chunk_tokens,
                            memory_fraction=memory_fraction, top=top)
    script = _emit(result, model) if emit else None
    if json_out:
        print_json(_plan_json(result, script))
        return
    show_plan(result)
    if script is not None:
        console.rule("Launch settings")
        print_text(script)


def _emit(result: Any, model_ref: str) -> str:
    from parplan.hardware import load_cluster
    from parplan.models import load_model
    from parplan.serving.engines import load_engine
    from parplan.serving.export import launches, render

    best = result.best
    m = load_model(model_ref)
    cl = load_cluster(result.cluster, gpus=result.chosen.gpus)
    eng = load_engine(result.engine).configured(memory_fraction=result.memory_fraction)
    path = model_ref if "/" in model_ref or model_ref.endswith((".json", ".yaml")) else "$MODEL"
    chunk = result.chunk_tokens or eng.default_chunk_tokens(cl.gpu)
    items = launches(m, cl, eng, best, result.workload, path, chunk)
    header = (f"parplan serve plan: {result.model} on {best.gpus}× {cl.name}, {best.mode}; "
              f"{best.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, TTFT {best.ttft_ms:,.0f} ms, "
              f"TPOT {best.tpot_ms:.1f} ms" + ("" if path != "$MODEL" else
                                               f"; set MODEL to the {result.model} checkpoint"))
    return render(header, eng, best, items)


def _candidate_json(result: Any, c: Any) -> dict[str, Any]:
    from parplan.serving.plan import explain_command

    return {"mode": c.mode, "gpus": c.gpus, "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu,
            "tokens_per_s_per_user": c.tokens_per_s_per_user, "ttft_ms": c.ttft_ms, "tpot_ms": c.tpot_ms,
            "meets_slo": c.meets, "requests_per_s": c.requests_per_s, "concurrency": c.concurrency,
            "precision": {"gemm": c.precision.gemm, "moe": c.precision.moe, "kv_cache": c.precision.kv_cache},
            "layout": c.layout(), "detail": c.detail, "explain": explain_command(result, c)}


def _plan_json(result: Any, script: str | None) -> dict[str, Any]:
    from parplan.serving.plan import per_gpu_count_rows, why_it_wins

    res = result.result
    return {
        "model": result.model, "cluster": result.cluster, "engine": result.engine, "gpus": result.chosen.gpus,
        "evaluated": result.evaluated, "search_seconds": result.seconds,
        "targets": {"ttft_ms": result.targets.ttft_ms, "tpot_ms": result.targets.tpot_ms},
        "plans": [_candidate_json(result, c) for c in res.best],
        "best_per_mode": {m: _candidate_json(result, c) for m, c in res.best_per_mode.items()},
        "pareto": [_candidate_json(result, c) for c in res.pareto],
        "feasible": res.feasible, "meeting": res.meeting, "why": why_it_wins(result),
        "gpu_counts": per_gpu_count_rows(result), "notes": list(result.notes), "launch": script,
    }


def _layout(c: Any) -> str:
    if c.pool is not None:
        return c.pool.describe()
    return f"P {c.prefill.describe()} | D {c.decode.describe()} b{c.decode.batch}"


def _candidates_table(title: str, rows: list[Any]) -> Table:
    columns = [Column("mode", left=True), Column("GPUs"), Column("precision", "prec", left=True, wrap=True),
               Column("layout", left=True, wrap=True), Column("tok/s/GPU", "tok/s"), Column("tok/s/user", "/user"),
               Column("TTFT ms", "TTFT"), Column("TPOT ms", "TPOT"), Column("in flight", "reqs", drop=1),
               Column("meets", "ok")]
    cells = []
    for c in rows:
        prec = c.precision
        weights = prec.gemm if prec.gemm == prec.moe else f"{prec.gemm}/{prec.moe}"
        cells.append([c.mode[:5] + ".", str(c.gpus), f"{weights}, kv {prec.kv_cache}", _layout(c),
                      f"{c.tokens_per_s_per_gpu:,.0f}", f"{c.tokens_per_s_per_user:,.1f}", f"{c.ttft_ms:,.0f}",
                      f"{c.tpot_ms:,.1f}", f"{c.concurrency:,}", "yes" if c.meets else "no"])
    return fitted_table(title, [(columns, cells)])


def show_plan(result: Any) -> None:
    from parplan.serving.plan import explain_command, why_it_wins

    res = result.result
    w, t = result.workload, result.targets
    targets = ", ".join(x for x in (f"TTFT <= {t.ttft_ms:g} ms" if t.ttft_ms != float("inf") else "",
                                    f"TPOT <= {t.tpot_ms:g} ms" if t.tpot_ms != float("inf") else "") if x)
    load = f", {w.rate:g} requests/s" if w.rate is not None else ""
    if len(result.counts) > 1:
        columns = [Column("GPUs"), Column("mode", left=True), Column("layout", left=True, wrap=True),
                   Column("tok/s/GPU", "tok/s"), Column("tok/s/user", "/user"), Column("TTFT ms", "TTFT"),
                   Column("TPOT ms", "TPOT"), Column("meets", "ok")]
        cells = []
        for r in result.counts:
            if r.result is None:
                cells.append([str(r.gpus), "-", "does not fit", "-", "-", "-", "-", "-"])
                continue
            b = r.result.best[0]
            cells.append([str(r.gpus), b.mode, _layout(b), f"{b.tokens_per_s_per_gpu:,.0f}",
                          f"{b.tokens_per_s_per_user:,.1f}", f"{b.ttft_ms:,.0f}", f"{b.tpot_ms:,.1f}",
                          "yes" if b.meets else "no"])
        console.print(fitted_table("Best deployment per GPU count", [(columns, cells)]))
        if w.rate is not None:
            console.print(f"Fewest GPUs serving {w.rate:g} requests/s within the targets: {result.chosen.gpus}",
                          highlight=False)
    console.print(_candidates_table(
        f"{result.model} on {result.chosen.gpus}× {result.cluster}, {result.engine}, {_lengths(w)}"
        f"{load}{'; ' + targets if targets else ''}: best deployments (meeting the targets first, then most output "
        "tokens/s per GPU, then fewest GPUs)", res.best))
    for mode, c in res.best_per_mode.items():
        console.print(f"best {mode}: {_layout(c)}, {c.tokens_per_s_per_gpu:,.0f} tok/s/GPU, "
                      f"TTFT {c.ttft_ms:,.0f} ms, TPOT {c.tpot_ms:,.1f} ms", highlight=False)
    console.print(_candidates_table("Pareto front: tokens/s per GPU against tokens/s per user", res.pareto[:12]))
    console.print(f"Why: {why_it_wins(result)}", highlight=False)
    console.print(f"Reproduce: {explain_command(result, result.best)}", highlight=False, soft_wrap=True)
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)
    console.print(f"{result.evaluated:,} deployments evaluated in {result.seconds:.2f} s ({res.feasible:,} fit in "
                  f"memory, {res.meeting:,} meet the targets)", highlight=False)
