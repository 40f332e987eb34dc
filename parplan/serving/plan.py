"""`parplan serve plan` as a library call: the inputs checked, the search run on each GPU count, the best
deployment chosen (for a rate, the fewest GPUs that carry it within the targets), why it wins, and the
`serve explain` command that reproduces it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from parplan.errors import ConfigError, NoFeasiblePlanError, ParplanError
from parplan.hardware import load_cluster
from parplan.hardware.spec import ClusterSpec
from parplan.limits import MAX_SERVE_GPUS
from parplan.models import load_model
from parplan.models.spec import ModelSpec
from parplan.names import MODES
from parplan.serving.engines import Engine, load_engine
from parplan.serving.evaluate import Traffic
from parplan.serving.search import Candidate, SearchResult, Targets, binding_constraint, check_targets, search
from parplan.serving.spec import Precision, Workload, check_memory_fraction


@dataclass(frozen=True, slots=True)
class GpuCountResult:
    """The search on one GPU count: its result, or why nothing fits there."""

    gpus: int
    result: SearchResult | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ServePlan:
    """What `serve plan` found."""

    model: str
    model_ref: str
    """How the model was named (preset, Hugging Face id or file): what the reproducing command passes."""
    cluster: str
    engine: str
    workload: Workload
    targets: Targets
    counts: list[GpuCountResult]
    chosen: GpuCountResult
    """The GPU count whose best deployment is the answer (the fewest GPUs meeting the targets for a rate,
    else the count searched)."""
    evaluated: int
    seconds: float
    notes: tuple[str, ...] = field(default=())
    chunk_tokens: int | None = None
    """The token budget per step the plan was searched with (None: the engine's default)."""
    memory_fraction: float | None = None
    """The share of GPU memory the KV cache was sized from (None: the engine's default)."""

    @property
    def result(self) -> SearchResult:
        assert self.chosen.result is not None
        return self.chosen.result

    @property
    def best(self) -> Candidate:
        return self.result.best[0]


def _precisions(model: ModelSpec, cluster: ClusterSpec, engine: Engine, texts: Sequence[str],
                kv: str) -> tuple[list[Precision], list[str]]:
    """The precisions to search and, for the ones the GPU cannot run, why they were left out."""
    out, skipped = [], []
    for text in texts:
        base = Precision.parse(text)
        cache = kv if kv != "auto" else engine.default_kv_dtype(base.moe if model.moe else base.gemm)
        prec = Precision(gemm=base.gemm, moe=base.moe, kv_cache=cache)
        gpu = cluster.gpu
        if "fp8" in (prec.gemm, prec.moe) and not gpu.supports_fp8:
            skipped.append(f"{text}: {gpu.name} has no fp8 tensor cores")
        elif prec.kv_cache == "fp4" and not gpu.supports_fp4:
            skipped.append(f"{text}: {gpu.name} has no fp4 tensor cores for an fp4 KV cache")
        else:
            out.append(prec)
    return out, skipped


def serve_plan(model: str | ModelSpec, cluster: str | ClusterSpec, gpus: int | Sequence[int], *, isl: int,
               osl: int, concurrency: int | None = None, rate: float | None = None, prefix_hit: float = 0.0,
               range_ratio: float = 1.0, mtp: int = 0, acceptance: float = 0.0, engine: str = "vllm",
               ttft_ms: float | None = None, tpot_ms: float | None = None, modes: Sequence[str] = MODES,
               precisions: Sequence[str] = ("bf16",), kv_cache: str = "auto", max_pp: int = 1,
               redundant_experts: Sequence[int] = (0,),
               chunk_tokens: int | None = None, memory_fraction: float | None = None, top: int = 5) -> ServePlan:
    """The best serving deployments of `model` on each of `gpus` (one count, or several for sizing), under
    the latency targets; `chunk_tokens` and `memory_fraction` are launch settings (Deployment's fields) every
    deployment searched runs with. NoFeasiblePlanError (exit 3) names the binding constraint when none meets
    them."""
    m = load_model(model)
    check_memory_fraction(memory_fraction)
    engine_spec = load_engine(engine).configured(memory_fraction=memory_fraction)
    counts = [gpus] if isinstance(gpus, int) else list(gpus)
    if not counts or min(counts) < 1:
        raise ConfigError("GPU counts must be >= 1", field="gpus")
    if max(counts) > MAX_SERVE_GPUS:
        raise ConfigError(f"{max(counts):,} GPUs: serve plan searches at most {MAX_SERVE_GPUS:,} (a larger fleet is "
                          "replicas of a smaller deployment: plan one and multiply)", field="gpus")
    for mode in modes:
        if mode not in MODES:
            raise ConfigError(f"unknown mode {mode!r}; known: {', '.join(MODES)}", field="mode")
    if concurrency is not None and rate is not None:
        raise ConfigError("give at most one of concurrency and rate", field="concurrency")
    # checked as serve explain checks it; without a concurrency or rate the search tries a grid of
    # concurrencies, and 1 stands in here for the lengths' sake
    load = {"rate": rate} if rate is not None else {"concurrency": concurrency or 1}
    workload = Workload(isl=isl, osl=osl, prefix_hit=prefix_hit, mtp=mtp, acceptance=acceptance,
                        range_ratio=range_ratio, **load)
    if isl + osl > m.max_position:
        raise ConfigError(f"isl + osl = {isl + osl} exceeds the model's context of {m.max_position} tokens",
                          field="isl")
    targets = Targets(ttft_ms=float("inf") if ttft_ms is None else ttft_ms,
                      tpot_ms=float("inf") if tpot_ms is None else tpot_ms)
    check_targets(targets)
    traffic = Traffic.of(workload)
    results: list[GpuCountResult] = []
    evaluated, seconds = 0, 0.0
    notes: list[str] = []
    cluster_name = ""
    for n in counts:
        cl = load_cluster(cluster, gpus=n) if not isinstance(cluster, ClusterSpec) else cluster
        cluster_name = cl.name
        precs, skipped = _precisions(m, cl, engine_spec, precisions, kv_cache)
        for why in skipped:
            if why not in notes:
                notes.append(why)
        if not precs:
            raise ParplanError("no precision left to search: " + "; ".join(skipped))
        try:
            res = search(m, cl, engine_spec, precs, n, traffic, targets, modes=tuple(modes),
                         concurrency=concurrency, rate=rate, max_pp=max_pp, redundant=tuple(redundant_experts),
                         chunk=chunk_tokens, top=top)
        except NoFeasiblePlanError as e:
            results.append(GpuCountResult(n, None, str(e)))
            continue
        evaluated += res.evaluated
        seconds += res.seconds
        results.append(GpuCountResult(n, res))
    found = [r for r in results if r.result is not None]
    if not found:
        raise NoFeasiblePlanError(results[-1].reason or "no deployment fits")
    meeting = [r for r in found if r.result.meeting]  # type: ignore[union-attr]
    if not meeting:
        best = found[-1]
        raise NoFeasiblePlanError(f"no deployment on {', '.join(str(r.gpus) for r in found)} GPUs meets the "
                                  f"targets: {binding_constraint(best.result, targets)}")  # type: ignore[arg-type]
    if rate is not None:
        chosen = min(meeting, key=lambda r: r.gpus)
    else:
        chosen = max(meeting, key=lambda r: r.result.best[0].tokens_per_s_per_gpu)  # type: ignore[union-attr]
    model_ref = model if isinstance(model, str) else m.name
    return ServePlan(model=m.name, model_ref=model_ref, cluster=cluster_name if isinstance(cluster, ClusterSpec)
                     else str(cluster), engine=engine, workload=workload, targets=targets, counts=results,
                     chosen=chosen, evaluated=evaluated, seconds=seconds, notes=tuple(notes),
                     chunk_tokens=chunk_tokens, memory_fraction=memory_fraction)


def _share(part: float, total: float) -> str:
    return f"{part / total:.0%}" if total > 0 else "0%"


def why_it_wins(plan: ServePlan) -> str:
    """One paragraph from the breakdown: what limits the winner, and what the best of the other mode gives."""
    res = plan.result
    best = plan.best
    d = best.detail
    step = d.get("decode_step_ms", 0.0)
    parts = {"expert GEMMs": d.get("experts_ms", 0.0), "MoE token exchange": d.get("moe_comm_ms", 0.0),
             "attention (KV-cache reads)": d.get("attention_ms", 0.0)}
    top = max(parts, key=parts.get)  # type: ignore[arg-type]
    layout = best.pool.describe() if best.pool else (
        f"prefill {best.prefill.describe()} + decode {best.decode.describe()}")  # type: ignore[union-attr]
    text = (f"{best.mode} {layout} on {best.gpus} GPUs gives {best.tokens_per_s_per_gpu:,.0f} output tokens/s per "
            f"GPU at {best.tokens_per_s_per_user:,.1f} tokens/s per user ({best.concurrency:,} requests in flight). "
            f"A decode step takes {step:.1f} ms, {top} the largest part ({_share(parts[top], step)})")
    if best.mode == "disaggregated":
        text += (f"; the prefill pool runs at {d.get('prefill_utilisation', 0.0):.0%} of its capacity and a KV "
                 f"transfer takes {d.get('kv_transfer_ms', 0.0):.1f} ms, so decode steps never wait for a prefill")
    else:
        text += f"; prefill chunks share {d.get('mixed_step_ms', 0.0):.1f} ms steps with the decodes"
    text += "."
    for mode, other in res.best_per_mode.items():
        if mode != best.mode:
            text += (f" The best {mode} deployment gives {other.tokens_per_s_per_gpu:,.0f} tokens/s per GPU "
                     f"(TTFT {other.ttft_ms:,.0f} ms, TPOT {other.tpot_ms:.1f} ms"
                     + ("" if other.meets else ", missing the targets") + ").")
    return text


def explain_command(plan: ServePlan, cand: Candidate) -> str:
    """The `parplan serve explain` command that reproduces a candidate."""
    w = plan.workload
    prec = cand.precision
    words = ["parplan serve explain", f"--model {plan.model_ref}", f"--cluster {plan.cluster}",
             f"--engine {plan.engine}", f"--isl {w.isl}", f"--osl {w.osl}"]
    words.append(f"--rate {w.rate:g}" if w.rate is not None else f"--concurrency {cand.concurrency}")
    if prec.gemm == prec.moe:
        words.append(f"--precision {prec.gemm}")
    else:
        words.append(f"--precision gemm={prec.gemm},moe={prec.moe}")
    words.append(f"--kv-cache {prec.kv_cache}")
    if w.prefix_hit:
        words.append(f"--prefix-hit {w.prefix_hit:g}")
    if w.range_ratio < 1:
        words.append(f"--range-ratio {w.range_ratio!r}")
    if w.mtp:
        words.append(f"--mtp {w.mtp} --acceptance {w.acceptance:g}")
    if plan.chunk_tokens is not None:
        words.append(f"--chunk-tokens {plan.chunk_tokens}")
    if plan.memory_fraction is not None:
        words.append(f"--memory-fraction {plan.memory_fraction:g}")
    if cand.pool is not None:
        p = cand.pool
        words += [f"--tp {p.tp}", f"--pp {p.pp}", f"--dp {p.dp}", f"--moe-tp {p.moe_tp}", f"--moe-ep {p.moe_ep}",
                  f"--workers {p.workers}"]
        if p.batch:
            words.append(f"--batch {p.batch}")
        if p.redundant_experts:
            words.append(f"--redundant-experts {p.redundant_experts}")
    else:
        for role, p in (("prefill", cand.prefill), ("decode", cand.decode)):
            assert p is not None
            spec = f"tp={p.tp},pp={p.pp},dp={p.dp},moe_tp={p.moe_tp},moe_ep={p.moe_ep},workers={p.workers}"
            if p.batch:
                spec += f",batch={p.batch}"
            if p.redundant_experts:
                spec += f",redundant_experts={p.redundant_experts}"
            words.append(f"--{role} {spec}")
    return " ".join(words)


def per_gpu_count_rows(plan: ServePlan) -> list[dict[str, float | int | str | bool]]:
    """One row per GPU count searched: the best deployment there (the sizing table)."""
    rows: list[dict[str, float | int | str | bool]] = []
    for r in plan.counts:
        if r.result is None:
            rows.append({"gpus": r.gpus, "fits": False, "reason": r.reason or ""})
            continue
        b = r.result.best[0]
        rows.append({"gpus": r.gpus, "fits": True, "mode": b.mode, "meets_slo": b.meets,
                     "tokens_per_s_per_gpu": b.tokens_per_s_per_gpu, "tokens_per_s_per_user": b.tokens_per_s_per_user,
                     "ttft_ms": b.ttft_ms, "tpot_ms": b.tpot_ms, "requests_per_s": b.requests_per_s,
                     "layout": str(b.layout())})
    return rows
