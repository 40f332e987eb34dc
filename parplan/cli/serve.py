"""`parplan serve`: serving deployments (vLLM, SGLang, TensorRT-LLM): `explain` one, `plan` the best."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from parplan.cli._options import ClusterOpt, JsonOpt, ModelOpt
from parplan.cli._output import console, kv_table, print_json
from parplan.errors import ConfigError
from parplan.serving.engines import load_engine
from parplan.serving.evaluate import ServingEstimate, serve_evaluate
from parplan.serving.spec import A2A_BACKENDS, ENGINES, KV_DTYPES, Deployment, Pool, Precision, Workload

app = typer.Typer(help="Serving deployments: explain one, or plan the best under latency targets.",
                  no_args_is_help=True)

POOL_KEYS = ("tp", "pp", "dp", "moe_tp", "moe_ep", "workers", "batch", "redundant_experts", "a2a")

EngineOpt = Annotated[str, typer.Option(help="Serving engine: " + ", ".join(ENGINES) + ".")]
PrecisionOpt = Annotated[str, typer.Option(
    help="Weights: bf16, fp8, fp4 or int4, or gemm=fp8,moe=fp4 for attention/dense and experts apart.")]
KvOpt = Annotated[str, typer.Option(
    "--kv-cache", help="KV-cache format: auto (the engine's default for these weights), " + ", ".join(KV_DTYPES) + ".")]
IslOpt = Annotated[int, typer.Option(help="Input tokens per request.")]
OslOpt = Annotated[int, typer.Option(help="Output tokens per request.")]
ConcurrencyOpt = Annotated[int | None, typer.Option(help="Requests in flight (closed loop), whole deployment.")]
RateOpt = Annotated[float | None, typer.Option(help="Arriving requests per second (open loop), instead.")]
PrefixOpt = Annotated[float, typer.Option(help="Share of input tokens found in the prefix cache.")]
MtpOpt = Annotated[int, typer.Option(help="Speculative (MTP) tokens drafted per step; 0 = off.")]
AcceptanceOpt = Annotated[float, typer.Option(help="Chance each drafted token is accepted (with --mtp).")]
ChunkOpt = Annotated[int | None, typer.Option(help="Token budget per step (default: the engine's).")]


def parse_pool(text: str, option: str) -> Pool:
    """A pool from 'tp=1,dp=8,moe_ep=8,workers=2,batch=64' (keys: POOL_KEYS)."""
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
    tp: Annotated[int, typer.Option(min=1, help="Attention tensor parallelism per worker.")] = 1,
    pp: Annotated[int, typer.Option(min=1, help="Pipeline stages per worker.")] = 1,
    dp: Annotated[int, typer.Option(min=1, help="Attention data-parallel ranks per worker (DP attention).")] = 1,
    moe_tp: Annotated[int | None, typer.Option(min=1, help="Tensor parallelism inside each expert.")] = None,
    moe_ep: Annotated[int, typer.Option(min=1, help="Expert parallelism over the worker's GPUs.")] = 1,
    workers: Annotated[int, typer.Option(min=1, help="Instances (replicas) of the worker.")] = 1,
    batch: Annotated[int | None, typer.Option(min=1, help="Max running requests per attention rank.")] = None,
    redundant_experts: Annotated[int, typer.Option(min=0, help="EPLB redundant expert replicas.")] = 0,
    a2a: Annotated[str, typer.Option(
        help="MoE exchange under DP attention: " + ", ".join(A2A_BACKENDS) + ".")] = "auto",
    prefill: Annotated[str | None, typer.Option(
        help="Disaggregated: the prefill pool, e.g. tp=1,dp=8,moe_ep=8,workers=2.")] = None,
    decode: Annotated[str | None, typer.Option(
        help="Disaggregated: the decode pool, e.g. tp=1,dp=32,moe_ep=32.")] = None,
    precision: PrecisionOpt = "bf16",
    kv_cache: KvOpt = "auto",
    prefix_hit: PrefixOpt = 0.0,
    mtp: MtpOpt = 0,
    acceptance: AcceptanceOpt = 0.0,
    chunk_tokens: ChunkOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """TTFT, TPOT, throughput per GPU and per user, and memory per GPU of one serving deployment."""
    from parplan.models import load_model

    spec = load_model(model)
    prec = build_precision(precision, kv_cache, engine, spec.moe is not None)
    if (prefill is None) != (decode is None):
        raise typer.BadParameter("give both --prefill and --decode for a disaggregated deployment",
                                 param_hint="--prefill")
    if prefill is not None:
        deployment = Deployment(engine=engine, precision=prec, mode="disaggregated",
                                prefill=parse_pool(prefill, "--prefill"), decode=parse_pool(decode, "--decode"),
                                chunk_tokens=chunk_tokens)
    else:
        pool = Pool(tp=tp, pp=pp, dp=dp, moe_tp=moe_tp, moe_ep=moe_ep, workers=workers, batch=batch,
                    redundant_experts=redundant_experts, a2a=a2a)
        deployment = Deployment(engine=engine, precision=prec, pool=pool, chunk_tokens=chunk_tokens)
    workload = Workload(isl=isl, osl=osl, concurrency=concurrency, rate=rate, prefix_hit=prefix_hit, mtp=mtp,
                        acceptance=acceptance)
    est = serve_evaluate(spec, cluster, deployment, workload)
    if json_out:
        print_json(est.as_dict())
        return
    show_serving(est)


def show_serving(est: ServingEstimate) -> None:
    d, w = est.deployment, est.workload
    load = f"{w.concurrency:,} requests in flight" if w.concurrency else f"{w.rate:g} requests/s arriving"
    console.print(kv_table(
        f"{est.model} on {est.gpus}× {est.cluster} ({d.engine}, {d.precision.describe()}), {d.describe()}", [
            ("workload", f"ISL {w.isl:,} / OSL {w.osl:,}, {load}"
             + (f", {w.prefix_hit:.0%} prefix hits" if w.prefix_hit else "")
             + (f", MTP {w.mtp} drafts at {w.acceptance:.0%} acceptance" if w.mtp else "")),
            ("TTFT", f"{est.ttft_ms:,.1f} ms"),
            ("TPOT", f"{est.tpot_ms:,.2f} ms  (inter-token latency: (latency − TTFT) / (OSL − 1))"),
            ("request latency", f"{est.request_latency_ms / 1e3:,.2f} s"),
            ("throughput", f"{est.output_tok_s_per_gpu:,.1f} output tokens/s per GPU, "
                           f"{est.output_tok_s_per_user:,.1f} per user, {est.requests_per_s:,.2f} requests/s"),
        ]), highlight=False)
    steps = Table(title="One step on one attention rank, ms", title_justify="left")
    kinds = list(est.steps)
    steps.add_column("part")
    for kind in kinds:
        steps.add_column(kind, justify="right")
    for part in next(iter(est.steps.values())):
        steps.add_row(part, *(f"{est.steps[k][part] * 1e3:,.3f}" for k in kinds))
    console.print(steps)
    mem = Table(title="Memory per GPU, GiB", title_justify="left")
    roles = list(est.memory)
    mem.add_column("part")
    for role in roles:
        mem.add_column(role, justify="right")
    for key in next(iter(est.memory.values())):
        if key == "hbm_gib":
            continue
        label = key.removesuffix("_gib").replace("_", " ")
        mem.add_row(label, *(f"{est.memory[r][key]:,.2f}" if key.endswith("_gib") else f"{est.memory[r][key]:,.0f}"
                             for r in roles))
    console.print(mem)
    console.print(kv_table("Steady state", [(k.replace("_", " "), f"{v:,.3g}") for k, v in est.state.items()]),
                  highlight=False)
    for note in est.notes:
        console.print(f"note: {note}", highlight=False)


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
        table = Table(title=f"Serving deployments, {title.lower()}: absolute percentage error", title_justify="left")
        for col in (key, "cases", "predicted", "metric", "n", "median", "p90", "mean"):
            table.add_column(col, justify="left" if col in (key, "metric") else "right")
        for row in rows:
            first = True
            for metric, stats in row["metrics"].items():
                table.add_row(str(row[key]) if first else "", str(row["cases"]) if first else "",
                              f"{row['predicted_share']:.1%}" if first else "", metric, str(stats["n"]),
                              f"{stats['median_ape']:.1%}", f"{stats['p90_ape']:.1%}", f"{stats['mean_ape']:.1%}")
                first = False
        console.print(table)
    refused = [r for r in results if r.error]
    if refused:
        reasons: dict[str, int] = {}
        for r in refused:
            reasons[r.error] = reasons.get(r.error, 0) + 1  # type: ignore[index]
        console.print(f"{len(refused)} of {len(results)} not predicted:", highlight=False)
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:12]:
            console.print(f"  {n:4d}  {reason}", highlight=False, markup=False)
