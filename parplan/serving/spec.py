"""What is served and how: a serving deployment and the workload it serves, as typed, frozen values.

A deployment is a model on a cluster in some precision, run by an engine (vLLM, SGLang, TensorRT-LLM), either
*aggregated* (instances that prefill and decode, continuous batching with chunked prefill) or *disaggregated*
(a prefill pool and a decode pool, each with its own layout, batch and worker count, the KV cache moving
between them). One instance ("worker") of a pool is tp × pp × dp GPUs: dp attention data-parallel ranks of tp
tensor-parallel GPUs each, pp pipeline stages; its MoE layers run as moe_tp × moe_ep over the same tp × dp GPUs
(aiconfigurator's convention: GPUs per worker = tp·pp·dp = moe_tp·moe_ep·pp).

Conventions (``reference/serving.md`` §3): TTFT is the time from a request's arrival to its first output
token; TPOT is the mean time between its later tokens, (request latency − TTFT) / (OSL − 1), as aiperf and
aiconfigurator define it; request latency = TTFT + (OSL − 1)·TPOT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parplan.errors import ConfigError, InvalidStrategyError
from parplan.hardware.spec import ClusterSpec
from parplan.limits import MAX_BATCH, MAX_BATCH_WAIT_ITERS, MAX_GPUS, MAX_MTP, MAX_RATE, MAX_SEQ
from parplan.models.spec import ModelSpec
from parplan.names import A2A_BACKENDS, ENGINES, KV_DTYPES, MODES, WEIGHT_DTYPES

if TYPE_CHECKING:
    from parplan.serving.engines import Engine



@dataclass(frozen=True, slots=True, kw_only=True)
class Precision:
    """Number formats of a deployment."""

    gemm: str = "bf16"
    """Attention and dense-MLP linears (bf16, fp8, fp4, int4)."""
    moe: str = "bf16"
    """Routed experts (bf16, fp8, fp4, int4)."""
    kv_cache: str = "bf16"
    """KV cache elements (bf16, fp8, fp4)."""

    def __post_init__(self) -> None:
        for name, allowed in (("gemm", WEIGHT_DTYPES), ("moe", WEIGHT_DTYPES), ("kv_cache", KV_DTYPES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"unknown format {getattr(self, name)!r}; known: {', '.join(allowed)}",
                                  field=f"precision.{name}")

    @classmethod
    def parse(cls, text: str) -> Precision:
        """'fp8' (weights and KV cache), 'fp4' (fp4 weights, fp8 KV cache), or 'gemm=fp8,moe=fp4,kv_cache=fp8'."""
        if "=" not in text:
            kv = {"fp4": "fp8", "int4": "bf16"}.get(text, text)
            return cls(gemm=text, moe=text, kv_cache=kv)
        parts = {}
        for item in text.split(","):
            key, _, value = item.partition("=")
            if key.strip() not in ("gemm", "moe", "kv_cache"):
                raise ConfigError(f"unknown part {key!r}; use gemm=, moe= and kv_cache=", field="precision")
            parts[key.strip()] = value.strip()
        return cls(**parts)

    def describe(self) -> str:
        if self.gemm == self.moe:
            return f"{self.gemm} weights, {self.kv_cache} KV cache"
        return f"{self.gemm} linears, {self.moe} experts, {self.kv_cache} KV cache"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """The layout of one worker (instance) of a pool, and how many of them run."""

    tp: int = 1
    """Attention tensor parallelism (also dense-MLP and shared-expert TP)."""
    pp: int = 1
    """Pipeline stages."""
    dp: int = 1
    """Attention data-parallel ranks per worker (DP attention); each holds its own requests and KV cache."""
    moe_tp: int | None = None
    """Tensor parallelism inside each routed expert; default tp·dp / moe_ep."""
    moe_ep: int = 1
    """Expert parallelism: GPUs the routed experts are spread over."""
    workers: int = 1
    """Instances of this layout."""
    batch: int | None = None
    """Requests per attention rank the engine runs at once (max running requests); None = as many as the
    KV cache holds."""
    redundant_experts: int = 0
    """Extra expert replicas (EPLB) spread over the EP group."""
    a2a: str = "auto"
    """MoE token exchange under attention DP (A2A_BACKENDS)."""

    def __post_init__(self) -> None:
        # Sizes beyond any cluster are refused here, naming the field, before a GPU count is derived from them.
        for name in ("tp", "pp", "dp", "moe_ep", "workers"):
            if not 1 <= getattr(self, name) <= MAX_GPUS:
                raise ConfigError(f"must lie in 1..{MAX_GPUS:,}, got {getattr(self, name):,}", field=name)
        if self.moe_tp is not None and not 1 <= self.moe_tp <= MAX_GPUS:
            raise ConfigError(f"must lie in 1..{MAX_GPUS:,}, got {self.moe_tp:,}", field="moe_tp")
        if self.batch is not None and not 1 <= self.batch <= MAX_BATCH:
            raise ConfigError(f"must lie in 1..{MAX_BATCH:,}, got {self.batch:,}", field="batch")
        if not 0 <= self.redundant_experts <= MAX_GPUS:
            raise ConfigError(f"must lie in 0..{MAX_GPUS:,}", field="redundant_experts")
        if self.total_gpus > MAX_GPUS:
            raise ConfigError(f"tp·pp·dp·workers = {self.total_gpus:,} GPUs; at most {MAX_GPUS:,}", field="workers")
        if self.a2a not in A2A_BACKENDS:
            raise ConfigError(f"unknown backend {self.a2a!r}; known: {', '.join(A2A_BACKENDS)}", field="a2a")
        if self.moe_tp is None:
            if (self.tp * self.dp) % self.moe_ep:
                raise InvalidStrategyError(f"moe_ep {self.moe_ep} must divide the tp·dp = {self.tp * self.dp} GPUs "
                                           "of a pipeline stage")
            object.__setattr__(self, "moe_tp", self.tp * self.dp // self.moe_ep)
        elif self.moe_tp * self.moe_ep != self.tp * self.dp:
            raise InvalidStrategyError(f"moe_tp·moe_ep = {self.moe_tp}·{self.moe_ep} must equal the tp·dp = "
                                       f"{self.tp * self.dp} GPUs of a pipeline stage")

    @property
    def gpus(self) -> int:
        """GPUs of one worker."""
        return self.tp * self.pp * self.dp

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.workers

    @property
    def attention_ranks(self) -> int:
        """Attention DP ranks over all workers: the units that hold requests."""
        return self.dp * self.workers

    def describe(self) -> str:
        parts = [f"tp{self.tp}"]
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.dp > 1:
            parts.append(f"dp{self.dp}")
        if self.moe_ep > 1 or (self.moe_tp or 1) != self.tp * self.dp:
            parts.append(f"moe tp{self.moe_tp}×ep{self.moe_ep}")
        text = " ".join(parts)
        if self.workers > 1:
            text = f"{self.workers}× ({text})"
        return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """The requests a deployment serves."""

    isl: int
    """Input (prompt) tokens per request."""
    osl: int
    """Output tokens per request."""
    concurrency: int | None = None
    """Requests in flight (a closed loop: each finished request is replaced at once), over the whole deployment."""
    rate: float | None = None
    """Arriving requests per second (an open loop); exactly one of concurrency and rate."""
    prefix_hit: float = 0.0
    """Share of the input tokens found in the prefix cache (not prefilled again)."""
    mtp: int = 0
    """Speculative tokens drafted per step (MTP / EAGLE); 0 = off."""
    acceptance: float = 0.0
    """Chance that each drafted token is accepted (DeepSeek-V3 §5.4.3: 85-90% for the second token)."""
    range_ratio: float = 1.0
    """Shortest lengths as a share of isl and osl: each request's input and output lengths are drawn uniformly
    from the whole numbers in [⌊ratio·isl⌋, isl] and [⌊ratio·osl⌋, osl], as the random dataset of the
    benchmark_serving.py that InferenceX runs draws them (--random-range-ratio; 0.8 in every InferenceX run);
    1 = every request has exactly isl and osl tokens (aiperf's and trtllm-bench's fixed lengths)."""

    def __post_init__(self) -> None:
        checks = [
            ("isl", 1 <= self.isl <= MAX_SEQ, f"must lie in 1..{MAX_SEQ:,}, got {self.isl:,}"),
            ("osl", 1 <= self.osl <= MAX_SEQ, f"must lie in 1..{MAX_SEQ:,}, got {self.osl:,}"),
            ("range_ratio", 0.0 < self.range_ratio <= 1.0, f"must lie in (0, 1], got {self.range_ratio}"),
            ("range_ratio", not 0.0 < self.range_ratio <= 1.0
             or math.floor(self.range_ratio * min(self.isl, self.osl)) >= 1,
             f"{self.range_ratio} would draw requests without an input or output token (⌊ratio·length⌋ < 1)"),
            ("prefix_hit", 0.0 <= self.prefix_hit < 1.0, f"must lie in [0, 1), got {self.prefix_hit}"),
            ("mtp", 0 <= self.mtp <= MAX_MTP, f"must lie in 0..{MAX_MTP}, got {self.mtp:,}"),
            ("acceptance", 0.0 <= self.acceptance < 1.0, f"must lie in [0, 1), got {self.acceptance}"),
            ("concurrency", (self.concurrency is None) != (self.rate is None),
             "give exactly one of concurrency and rate"),
            ("concurrency", self.concurrency is None or 1 <= self.concurrency <= MAX_BATCH,
             f"must lie in 1..{MAX_BATCH:,}"),
            ("rate", self.rate is None or (math.isfinite(self.rate) and 0 < self.rate <= MAX_RATE),
             f"must be a positive finite number of at most {MAX_RATE:g} requests/s"),
        ]
        for name, ok, why in checks:
            if not ok:
                raise ConfigError(why, field=name)

    def _drawn_mean(self, length: int) -> float:
        """Mean of the whole numbers in [⌊ratio·length⌋, length], the client's uniform draw (range_ratio)."""
        return (math.floor(self.range_ratio * length) + length) / 2.0

    @property
    def mean_isl(self) -> float:
        """Input tokens of the average request (_drawn_mean of isl)."""
        return self._drawn_mean(self.isl)

    @property
    def mean_osl(self) -> float:
        """Output tokens of the average request (_drawn_mean of osl)."""
        return self._drawn_mean(self.osl)

    @property
    def prefill_tokens(self) -> float:
        """Input tokens the average request prefills after the prefix cache: at least the last one (it makes the
        first output token)."""
        return max(1.0, self.mean_isl * (1.0 - self.prefix_hit))

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a sequence gains per decode step with speculative decoding: the bonus token plus the
        accepted prefix of the drafts, 1 + a + a² + … + aⁿ (each draft kept only if all before it were)."""
        a = self.acceptance
        return float(sum(a**i for i in range(self.mtp + 1)))


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchWait:
    """TensorRT-LLM's batch waiting (llm_args batch_wait_timeout_iters and batch_wait_max_tokens_ratio, both 0 by
    default): while other requests decode and attention DP is off, new prompts are held back until the step's
    tokens (held prompts and decode tokens) reach ratio × max_num_tokens or `iters` iterations have passed, then
    go together (tensorrt_llm/_torch/pyexecutor/py_executor.py _schedule and _waiting_requests). Either at 0
    holds nothing: the timeout test `count >= iters` or the token test `tokens >= ratio × budget` passes at
    once. Nor does it hold anything in a disaggregated deployment: its prefill workers run no generation
    requests and its decode workers take no new prompts."""

    iters: int
    """Most iterations a prompt is held (batch_wait_timeout_iters)."""
    ratio: float
    """Share of the token budget the held prompts and the decode tokens must reach to go at once
    (batch_wait_max_tokens_ratio), in [0, 1]."""

    def __post_init__(self) -> None:
        if not 0 <= self.iters <= MAX_BATCH_WAIT_ITERS:
            raise ConfigError(f"must lie in 0..{MAX_BATCH_WAIT_ITERS:,}, got {self.iters:,}", field="batch_wait_iters")
        if not (math.isfinite(self.ratio) and 0.0 <= self.ratio <= 1.0):
            raise ConfigError(f"must lie in [0, 1], got {self.ratio}", field="batch_wait_ratio")

    @property
    def holds(self) -> bool:
        return self.iters > 0 and self.ratio > 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DpBalance:
    """TensorRT-LLM's attention-DP balance (llm_args AttentionDpConfig: enable_balance, off by default;
    timeout_iters, batching_wait_iters): under attention DP, new prompts are held on every rank until every rank
    has one, so that all ranks prefill in the same step instead of one rank's prefill stalling the others'
    decoding, or until `timeout_iters` iterations have passed; once every rank has one and all are decoding, they
    wait `batching_wait_iters` more iterations to gather more (tensorrt_llm/_torch/pyexecutor/py_executor.py
    _balance_adp_requests; NVIDIA blog "ADP Balance Strategy", tech_blog10). A timeout of 0 holds nothing (the
    test `count >= timeout_iters` passes at once); nor does it hold anything without attention DP, or in a
    disaggregated deployment, whose prefill workers run no generation requests."""

    timeout_iters: int
    """Most iterations the prompts are held while some rank has none (timeout_iters)."""
    batching_wait_iters: int = 0
    """Iterations every rank then waits to gather more prompts (batching_wait_iters)."""

    def __post_init__(self) -> None:
        # Named as the CSV columns and the command-line options name them.
        for value, name in ((self.timeout_iters, "dp_balance_timeout_iters"),
                            (self.batching_wait_iters, "dp_balance_wait_iters")):
            if not 0 <= value <= MAX_BATCH_WAIT_ITERS:
                raise ConfigError(f"must lie in 0..{MAX_BATCH_WAIT_ITERS:,}, got {value:,}", field=name)

    @property
    def holds(self) -> bool:
        return self.timeout_iters > 0


def check_memory_fraction(value: float | None) -> None:
    """A memory fraction (Deployment.memory_fraction) in (0, 1], or None; else a ConfigError."""
    if value is not None and not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise ConfigError(f"must lie in (0, 1], got {value}", field="memory_fraction")


def check_recv_interval(value: int | None) -> None:
    """Decode steps between polls for new requests (Deployment.recv_interval) in 1..MAX_BATCH_WAIT_ITERS, or
    None; else a ConfigError."""
    if value is not None and not 1 <= value <= MAX_BATCH_WAIT_ITERS:
        raise ConfigError(f"must lie in 1..{MAX_BATCH_WAIT_ITERS:,}, got {value:,}", field="recv_interval")


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """One serving deployment: engine, precision and the pools."""

    engine: str
    precision: Precision
    mode: str = "aggregated"
    pool: Pool | None = None
    """The aggregated instances."""
    prefill: Pool | None = None
    """Disaggregated prefill pool."""
    decode: Pool | None = None
    """Disaggregated decode pool."""
    chunk_tokens: int | None = None
    """Prefill tokens per step (vLLM max_num_batched_tokens, SGLang chunked_prefill_size, TensorRT-LLM
    max_num_tokens); None = the engine's default."""
    overlap_scheduler: bool | None = None
    """Whether the engine launches a step while the GPU runs the one before (TensorRT-LLM
    disable_overlap_scheduler false); None = the engine's default."""
    memory_fraction: float | None = None
    """Share of GPU memory the engine sizes its KV cache from (vLLM --gpu-memory-utilization and SGLang
    --mem-fraction-static: of the whole GPU; TensorRT-LLM free_gpu_memory_fraction: of what the weights leave
    free), in (0, 1]; None = the engine's default."""
    batch_wait: BatchWait | None = None
    """TensorRT-LLM's batch waiting (BatchWait); None = off, its default."""
    dp_balance: DpBalance | None = None
    """TensorRT-LLM's attention-DP balance (DpBalance); None = off, its default."""
    cuda_graph_max_batch: int | None = None
    """Largest step replayed as a CUDA graph: decode sequences (SGLang --cuda-graph-max-bs, TensorRT-LLM
    cuda_graph_config max_batch_size) or a step's tokens (vLLM --max-cudagraph-capture-size); None = the
    engine's default."""
    recv_interval: int | None = None
    """Decode steps between the scheduler's polls for new requests (SGLang --scheduler-recv-interval: a request
    that arrives while others decode waits for the next poll; a prefill step is followed by one at once);
    None = the engine's default, every step."""

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; known: {', '.join(ENGINES)}", field="engine")
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; known: {', '.join(MODES)}", field="mode")
        if self.mode == "aggregated" and (self.pool is None or self.prefill or self.decode):
            raise ConfigError("an aggregated deployment has one pool (and no prefill/decode pools)", field="pool")
        if self.mode == "disaggregated" and (self.prefill is None or self.decode is None or self.pool):
            raise ConfigError("a disaggregated deployment has a prefill and a decode pool", field="prefill")
        if self.chunk_tokens is not None and not 1 <= self.chunk_tokens <= MAX_SEQ:
            raise ConfigError(f"must lie in 1..{MAX_SEQ:,}", field="chunk_tokens")
        if self.cuda_graph_max_batch is not None and not 1 <= self.cuda_graph_max_batch <= MAX_SEQ:
            raise ConfigError(f"must lie in 1..{MAX_SEQ:,}", field="cuda_graph_max_batch")
        check_recv_interval(self.recv_interval)
        check_memory_fraction(self.memory_fraction)

    @property
    def pools(self) -> tuple[Pool, ...]:
        return (self.pool,) if self.pool else (self.prefill, self.decode)  # type: ignore[return-value]

    @property
    def gpus(self) -> int:
        return sum(p.total_gpus for p in self.pools)

    def describe(self) -> str:
        if self.pool:
            return f"aggregated {self.pool.describe()}"
        return f"prefill {self.prefill.describe()} + decode {self.decode.describe()}"  # type: ignore[union-attr]


def check_pool(model: ModelSpec, cluster: ClusterSpec, pool: Pool, precision: Precision, role: str = "") -> None:
    """A layout the engines can run on this model and cluster, else InvalidStrategyError naming the rule."""
    a = model.attention
    where = f"{role} pool: " if role else ""
    rules = [
        (a.heads % pool.tp == 0, f"tp {pool.tp} must divide the {a.heads} attention heads"),
        (a.mla is not None or a.kv_heads % pool.tp == 0 or pool.tp % a.kv_heads == 0,
         f"tp {pool.tp} and the {a.kv_heads} KV heads must divide one another (KV heads are split or replicated)"),
        (model.layers % pool.pp == 0, f"pp {pool.pp} must divide the {model.layers} layers"),
        (model.mlp.ffn % pool.tp == 0 or model.dense_layers == 0, f"tp {pool.tp} must divide the MLP width "
                                                                   f"{model.mlp.ffn}"),
    ]
    if a.linear is not None:
        rules.append((a.linear.value_heads % pool.tp == 0 and a.linear.key_heads % pool.tp == 0,
                      f"tp {pool.tp} must divide the linear-attention heads"))
    moe = model.moe
    if moe is None:
        rules.append((pool.moe_ep == 1, "a dense model has no experts to spread (moe_ep must be 1)"))
    else:
        slots = moe.experts + pool.redundant_experts
        rules += [
            (slots % pool.moe_ep == 0, f"moe_ep {pool.moe_ep} must divide the {moe.experts} experts"
                                       + (f" + {pool.redundant_experts} redundant" if pool.redundant_experts else "")),
            (moe.expert_ffn % (pool.moe_tp or 1) == 0, f"moe_tp {pool.moe_tp} must divide the expert width "
                                                       f"{moe.expert_ffn}"),
        ]
    if pool.redundant_experts and (moe is None or pool.moe_ep == 1):
        rules.append((False, "redundant experts need expert parallelism (moe_ep > 1)"))
    for dtype in {precision.gemm, precision.moe}:
        if dtype == "fp8" and not cluster.gpu.supports_fp8:
            rules.append((False, f"{cluster.gpu.name} has no fp8 tensor cores"))
    if precision.kv_cache == "fp4" and not cluster.gpu.supports_fp4:
        rules.append((False, f"{cluster.gpu.name} has no fp4 tensor cores for an fp4 KV cache"))
    for ok, why in rules:
        if not ok:
            raise InvalidStrategyError(where + why)


def check_deployment(model: ModelSpec, cluster: ClusterSpec, deployment: Deployment, workload: Workload,
                     engine: Engine | None = None) -> None:
    """Every pool runnable (by the engine too, when given) and the workload within the model's context."""
    roles = (("", deployment.pool),) if deployment.mode == "aggregated" else (
        ("prefill", deployment.prefill), ("decode", deployment.decode))
    for role, pool in roles:
        check_pool(model, cluster, pool, deployment.precision, role)  # type: ignore[arg-type]
        if engine is not None:
            engine.check_pool(pool, role)  # type: ignore[arg-type]
    if engine is not None and deployment.batch_wait is not None and deployment.batch_wait.holds \
            and not engine.batch_waiting:
        raise InvalidStrategyError(f"{engine.label} has no batch waiting (TensorRT-LLM's batch_wait_timeout_iters "
                                   "and batch_wait_max_tokens_ratio)")
    if engine is not None and deployment.dp_balance is not None and deployment.dp_balance.holds \
            and not engine.dp_balancing:
        raise InvalidStrategyError(f"{engine.label} has no attention-DP balance (TensorRT-LLM's attention_dp_config "
                                   "enable_balance)")
    if engine is not None and (deployment.recv_interval or 1) > 1:
        if not engine.recv_skipping:
            raise InvalidStrategyError(f"{engine.label} polls for new requests every step (SGLang's "
                                       "--scheduler-recv-interval has no counterpart)")
        if deployment.mode == "disaggregated":
            raise InvalidStrategyError("a spaced poll is modelled for aggregated workers only: in a disaggregated "
                                       "deployment the decode pool's poll also gates the prefill's KV handshake")
        if any(pool.dp > 1 for pool in deployment.pools):
            raise InvalidStrategyError(f"{engine.label} {engine.versions} refuses --scheduler-recv-interval with "
                                       "DP attention (scheduler_recv_skipper.py asserts not enable_dp_attention)")
    if workload.isl + workload.osl > model.max_position:
        raise ConfigError(f"isl + osl = {workload.isl + workload.osl} exceeds the model's context of "
                          f"{model.max_position} tokens", field="isl")
