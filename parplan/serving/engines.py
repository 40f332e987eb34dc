"""Serving engines (vLLM, SGLang, TensorRT-LLM) as sourced facts, like the training stacks: how each schedules
(chunked prefill, its token budget, max running requests), how it sizes the KV cache, how MoE tokens move under
attention DP, and the few global knobs fitted to measured deployments (parplan/data/serving/engines.yaml)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from parplan._input import read_yaml
from parplan._mapping import dataclass_from_mapping
from parplan._resources import data_dir
from parplan.errors import ConfigError, InvalidStrategyError, UnknownPresetError
from parplan.hardware.efficiency import gemm_ceiling
from parplan.hardware.spec import GPU_ARCHES, ClusterSpec, GPUSpec
from parplan.names import A2A_BACKENDS, ENGINES, WEIGHT_DTYPES
from parplan.serving.spec import BatchWait, DpBalance, Pool

if TYPE_CHECKING:
    from parplan.serving.spec import Deployment

MEMORY_MODES = ("total", "free", "reserve", "static")
"""How an engine sizes its KV cache (serving/memory.py): `total`, a fraction of the whole GPU holds weights,
activations and the KV cache (vLLM --gpu-memory-utilization); `free`, a fraction of what is free after weights and
activations (TensorRT-LLM free_gpu_memory_fraction); `reserve`, everything but a reserve (SGLang's default);
`static`, a fraction of the whole GPU holds weights and the KV cache, the rest activations and CUDA graphs (SGLang
launched with --mem-fraction-static: sglang@v0.5.8 python/sglang/srt/model_executor/
model_runner_kv_cache_mixin.py profile_max_num_token, rest_memory = available_gpu_memory − total_gpu_memory ×
(1 − mem_fraction_static), the available memory measured after the weights load)."""
MOE_LAYOUTS = ("any", "ep_or_tp")
DP_ATTENTION_TP = ("any", "one")
NCCL_NVLS = ("on", "multi_node", "off")
"""Where an engine's NCCL all-reduces may run as NVLS (in-switch reduction): wherever the switch offers it, only in
a multi-node NVLink domain (an NVL72 rack), or nowhere (the engine turns NCCL's NVLS or its cuMem allocator off)."""
GIB = 2**30
SMALL_WORKER_GPUS = 4
"""A worker of fewer GPUs per stage (SGLang's --tp-size) takes the small tier of cuda_graph_tiers
(server_args.py: `cuda_graph_max_bs = 256 if tp_size < 4 else 512` on H100- and H200-class GPUs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineKnobs:
    """The global knobs of an engine, fitted to measured deployments (benchmarks/serving_fit.py); never per
    deployment."""

    decode_step_ms: float
    """Host time of a step outside the GPU kernels: scheduling, sampling, launching the CUDA graph, ms."""
    launch_us: float
    """Host time to launch one kernel outside CUDA graphs (PyTorch eager dispatch), µs, added to an eager
    step's GPU work."""
    graph_kernel_us: float
    """GPU time lost at each kernel boundary of a replayed CUDA graph (tail, ramp-up; programmatic dependent
    launch overlaps part of it), µs: the kernel_launch_us of decode steps."""
    request_ms: float
    """Time a request spends outside the engine's steps before its first token: HTTP, tokenisation, admission,
    detokenisation and streaming, ms."""
    allreduce_us: float
    """Latency of the engine's small-message all-reduce inside one NVLink domain (custom one-shot kernels, far
    below NCCL's ring latency), µs. Kept at the published prior, not fitted: SGLang's quick all-reduce takes
    ~7.2 µs for 2-32 KiB (sglang PR #6619, hardware.md §2.2)."""
    burst: float
    """Share of the other requests in flight on a rank that arrive in the same scheduling step as a request and
    are prefilled with it. A closed loop with equal output lengths stays phase-locked (requests that start
    together finish together and are replaced together); how tightly depends on the engine's scheduling and
    streaming jitter. It applies where steps mix prefill and decode and where the client draws the output lengths
    (requests that start together then end apart); an aggregated engine that runs prefill first and pauses
    decoding keeps a set of equal lengths wholly locked (batching.py)."""
    pool_burst: float
    """The same share for a disaggregated prefill pool, of the requests in flight over the whole deployment: their
    first tokens come from many decode ranks, whose steps and completions do not line up as one rank's do."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Engine:
    name: str
    label: str
    versions: str
    """Engine versions the facts and knobs describe."""
    chunked_prefill: bool
    """Whether long prompts are split over several steps (else a prompt is prefilled in one step)."""
    chunk_tokens: tuple[tuple[float, int], ...]
    """(GPU memory GiB below which it applies, token budget per step), first match."""
    budget_counts_decode: bool
    """Whether the step's token budget includes the decode tokens (vLLM max_num_batched_tokens, TensorRT-LLM
    max_num_tokens) or covers prefill tokens only (SGLang chunked_prefill_size)."""
    mixed_batches: bool
    """Whether one step carries prefill and decode tokens together (else a prefill batch runs alone and the
    decoding requests wait for it)."""
    kv_on_demand: bool
    """Whether KV pages are taken as sequences grow (a resident request holds isl + osl/2 tokens on average) or
    reserved for the full isl + osl when it is admitted."""
    max_running: int | None
    """Default cap on the requests an attention rank runs at once (None: the KV cache decides)."""
    kv_block_tokens: int
    """Tokens per KV-cache page."""
    quantized_kv: bool
    """Whether the KV cache is fp8 by default when the weights are fp8 or fp4 (TensorRT-LLM takes
    kv_cache_quant_algo from ModelOpt checkpoints), else it keeps the model's 16-bit type."""
    kv_dequant: bool
    """Whether its decode attention converts an 8-bit KV cache to 16 bits as it loads it, at a cost that leaves
    the kernel as slow as with a 16-bit cache (the cache still holds twice the tokens), rather than reading it
    natively."""
    memory: str
    """How the KV cache is sized (MEMORY_MODES)."""
    memory_fraction: float
    reserve_gib: float
    cuda_graph_max_batch: int
    """Largest decode batch replayed as a CUDA graph (where no tier of cuda_graph_tiers applies)."""
    cuda_graph_tiers: tuple[tuple[float, int, int], ...]
    """(GPU memory GiB below which it applies, largest graph batch of a worker of fewer than SMALL_WORKER_GPUS
    GPUs per stage, of a larger one), first match; empty where the default does not follow the GPU."""
    graphs_to_batch: bool
    """Whether a pool's batch cap (Pool.batch) also sets the largest graph batch: parplan launches a capped pool
    with both (export.py: SGLang --max-running-requests and --cuda-graph-max-bs, TensorRT-LLM max_batch_size and
    cuda_graph_config max_batch_size), so its predictions describe that launch."""
    eager_prefill: bool
    """Whether steps that carry prefill run eagerly (every kernel launched from Python) or as piecewise CUDA
    graphs with only attention launched in between (vLLM)."""
    overlap_scheduler: bool
    """Whether the host prepares and launches a step while the GPU still runs the one before (TensorRT-LLM's
    overlap scheduler), so an eager step takes the longer of its launches and its GPU work, not their sum."""
    batch_waiting: bool
    """Whether the engine can hold new prompts back to batch them (TensorRT-LLM's batch waiting, BatchWait)."""
    dp_balancing: bool
    """Whether the engine can hold new prompts until every attention-DP rank has one (TensorRT-LLM's
    attention-DP balance, DpBalance)."""
    recv_skipping: bool
    """Whether its scheduler can poll for new requests only every few decode steps (SGLang's
    --scheduler-recv-interval; Deployment.recv_interval)."""
    a2a: str
    """MoE token exchange under attention DP by default."""
    a2a_needs_mnnvl: bool
    """Whether its default all-to-all runs only where every GPU of the expert group shares one multi-node NVLink
    domain (an NVL72 rack), each rank holds fewer routed experts than a token's top-k (moe_ep > top_k) and no
    expert is tensor-sharded; elsewhere it gathers (allgather, reduce-scatter)."""
    fp4_gather: bool
    """Whether its attention-DP allgather carries NVFP4 experts' inputs already quantised (half a byte and one
    scale per 16 elements), not 16-bit activations; the reduce-scatter of their outputs stays 16-bit."""
    deepep: bool
    """Whether DeepEP's kernels are available for multi-node expert parallelism."""
    moe_layout: str
    """Expert layouts it runs (MOE_LAYOUTS): any moe_tp × moe_ep, or only all-EP or all-TP experts."""
    dp_attention_tp: str
    """Attention TP inside a DP-attention rank (DP_ATTENTION_TP): any, or only one GPU per rank."""
    nccl_nvls: str
    """Where the all-reduces it hands to NCCL (messages too large for its own one-shot kernels) may run as NVLS,
    NCCL's in-switch reduction at the link's all-reduce bus bandwidth (NCCL_NVLS; LinkSpec.allreduce_busbw_gbps)."""
    pipeline: bool
    """Whether it runs pipeline parallelism."""
    knobs: EngineKnobs
    moe_gemm_fraction: tuple[tuple[str, str, float], ...] = ()
    """(GPU architecture, expert weight format, fraction): the share of the GPU's measured dense GEMM rate in the
    kernels' tensor-core dtype (efficiency.gemm_ceiling) at which the engine's routed-expert (grouped MoE) op takes
    the time its micro-benchmarks measure (benchmarks/moe_kernel_fit.py on data/serving/moe_kernels.csv); where
    listed, the experts' GEMMs run at it (expert_ceiling)."""
    gdn_prefill_fraction: tuple[tuple[str, float], ...] = ()
    """(GPU architecture, fraction): the share of the GPU's bf16 peak at which the engine's chunked Gated DeltaNet
    prefill kernel runs the recurrence's FLOPs (benchmarks/gdn_kernel_fit.py on data/serving/gdn_kernels.csv); where
    not listed, the lowest listed share (no collector timed it there, and the flash-attention rate would be an order
    of magnitude fast), or the flash-attention fraction where none is."""
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    batch_wait: BatchWait | None = None
    """The batch waiting a deployment launches it with (configured); None = off."""
    dp_balance: DpBalance | None = None
    """The attention-DP balance a deployment launches it with (configured); None = off."""
    recv_interval: int = 1
    """Decode steps between its polls for new requests, as a deployment launches it (configured)."""

    def launched(self, deployment: Deployment) -> Engine:
        """The engine with a deployment's launch settings (configured)."""
        return self.configured(overlap_scheduler=deployment.overlap_scheduler,
                               memory_fraction=deployment.memory_fraction, batch_wait=deployment.batch_wait,
                               dp_balance=deployment.dp_balance, cuda_graph_max_batch=deployment.cuda_graph_max_batch,
                               recv_interval=deployment.recv_interval)

    def prefill_pool(self) -> Engine:
        """The engine as a disaggregated prefill worker runs it: without the overlap scheduler, whatever the
        deployment's setting (which applies to aggregated and decode workers). Every public recipe disables it
        there: srt-slurm's TensorRT-LLM recipes (NVIDIA/srt-slurm recipes/trtllm @75f6e32a, in force when the
        shipped disaggregated rows were measured: disable_overlap_scheduler true in all 297 prefill sections;
        decode sections false or unset) and aiconfigurator's generator (rule_plugin/trtllm.rule @17676b3:
        `prefill disable_overlap_scheduler = true`, `decode ... = false`)."""
        return self.configured(overlap_scheduler=False)

    def configured(self, *, overlap_scheduler: bool | None = None, memory_fraction: float | None = None,
                   batch_wait: BatchWait | None = None, dp_balance: DpBalance | None = None,
                   cuda_graph_max_batch: int | None = None, recv_interval: int | None = None) -> Engine:
        """The engine as a deployment launches it (None: the default): its overlap scheduler switched, the share
        of GPU memory its KV cache is sized from, its batch waiting, its attention-DP balance, the largest step
        it captures as a CUDA graph and the decode steps between its polls for new requests. A fraction is of
        the memory free after the weights where the engine sizes it so (TensorRT-LLM free_gpu_memory_fraction),
        else of the whole GPU: vLLM's --gpu-memory-utilization (weights, activations and KV cache), and SGLang's
        --mem-fraction-static (weights and KV cache; MEMORY_MODES `static`), which replaces its reserve rule
        (python/sglang/srt/server_args.py computes mem_fraction_static from the reserve only when not given)."""
        out = self
        if overlap_scheduler is not None and overlap_scheduler != self.overlap_scheduler:
            out = dataclasses.replace(out, overlap_scheduler=overlap_scheduler)
        if memory_fraction is not None:
            mode = {"free": "free", "reserve": "static"}.get(self.memory, "total")
            out = dataclasses.replace(out, memory=mode, memory_fraction=memory_fraction)
        if batch_wait is not None and batch_wait.holds:
            out = dataclasses.replace(out, batch_wait=batch_wait)
        if dp_balance is not None and dp_balance.holds:
            out = dataclasses.replace(out, dp_balance=dp_balance)
        if recv_interval is not None:
            out = dataclasses.replace(out, recv_interval=recv_interval)
        if cuda_graph_max_batch is not None:  # a launch setting replaces the default on every GPU and pool
            out = dataclasses.replace(out, cuda_graph_max_batch=cuda_graph_max_batch, cuda_graph_tiers=(),
                                      graphs_to_batch=False)
        return out

    def graph_batch(self, hbm_gib: float, gpus: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Largest decode batch replayed as a CUDA graph by a worker of `gpus` GPUs per pipeline stage, capped at
        `batch` requests per rank (inf: no cap), on a GPU of `hbm_gib` GiB: the cap where the launch captures up to
        it (graphs_to_batch), else the first tier below the GPU's memory (SGLang's --cuda-graph-max-bs default
        follows both), else cuda_graph_max_batch (or the launch setting that replaced it)."""
        gpus = np.asarray(gpus, dtype=float)
        default = np.full_like(gpus, float(self.cuda_graph_max_batch))
        for limit, small, large in self.cuda_graph_tiers:
            if hbm_gib < limit:
                default = np.where(gpus < SMALL_WORKER_GPUS, float(small), float(large))
                break
        return np.where(self.graphs_to_batch & np.isfinite(batch), batch, default)

    def expert_ceiling(self, gpu: GPUSpec, weights: str, dtype: str) -> float | None:
        """The GEMM ceiling of the engine's routed-expert kernels for `weights` running on `dtype` tensor cores
        (efficiency.gemm_time's `ceiling`, a fraction of the dtype's peak), or None where the dense GEMM's applies:
        the listed moe_gemm_fraction of the dense GEMM's measured ceiling. A fused MoE op routes, permutes and
        scales tokens around variable-size grouped GEMMs, so it reaches a share of what a dense GEMM reaches on the
        same GPU, not of the datasheet peak: B300's and GB300's fp4 peaks are 1.46x and 1.67x B200's, while the
        best NVFP4 GEMM the engines' collectors measure on them is 1.12x and 1.22x (gemm_best.csv), and
        TensorRT-LLM's measured MoE ops on them follow the measured GEMM (moe_kernels.csv)."""
        fraction = self.moe_fraction(gpu.arch, weights)
        return None if fraction is None else fraction * gemm_ceiling(gpu, dtype)

    def moe_fraction(self, arch: str, weights: str) -> float | None:
        """The moe_gemm_fraction entry of a GPU architecture and expert weight format, None where not listed."""
        return next((f for a, w, f in self.moe_gemm_fraction if (a, w) == (arch, weights)), None)

    def nccl_cluster(self, cluster: ClusterSpec) -> ClusterSpec:
        """`cluster` as the engine's NCCL sees it: without the link's NVLS all-reduce bandwidth where the engine
        turns NVLS off there (nccl_nvls: off, or multi_node outside a multi-node NVLink domain), so its NCCL
        all-reduces run as rings and trees."""
        if self.nccl_nvls == "on" or (self.nccl_nvls == "multi_node" and cluster.multi_node_nvlink):
            return cluster
        return dataclasses.replace(cluster, scaleup=dataclasses.replace(cluster.scaleup, allreduce_busbw_gbps=None))

    def gdn_fraction(self, gpu: GPUSpec) -> float:
        """The share of `gpu`'s bf16 peak its chunked Gated DeltaNet prefill runs at (gdn_prefill_fraction)."""
        listed = dict(self.gdn_prefill_fraction)
        return listed.get(gpu.arch, min(listed.values(), default=gpu.attention_fwd_fraction))

    def default_kv_dtype(self, weights: str) -> str:
        """The KV-cache format the engine picks when not told, for weights stored as `weights`."""
        return "fp8" if self.quantized_kv and weights in ("fp8", "fp4") else "bf16"

    def check_pool(self, pool: Pool, role: str = "") -> None:
        """InvalidStrategyError, naming the rule and the engine, for a layout this engine cannot run."""
        where = f"{role} pool: " if role else ""
        gpus = pool.tp * pool.dp
        if self.moe_layout == "ep_or_tp" and pool.moe_ep not in (1, gpus):
            raise InvalidStrategyError(
                f"{where}{self.label} spreads experts over all {gpus} GPUs of a stage (expert parallel) or "
                f"tensor-shards every expert over them, nothing in between: moe_ep must be 1 or {gpus}, "
                f"got {pool.moe_ep}")
        if self.dp_attention_tp == "one" and pool.dp > 1 and pool.tp > 1:
            raise InvalidStrategyError(
                f"{where}{self.label}'s attention data parallelism runs one GPU per attention rank: with dp "
                f"{pool.dp}, tp must be 1 (got {pool.tp})")
        if not self.pipeline and pool.pp > 1:
            raise InvalidStrategyError(f"{where}{self.label} does not run pipeline parallelism (pp {pool.pp})")

    def default_chunk_tokens(self, gpu: GPUSpec) -> int:
        for limit, tokens in self.chunk_tokens:
            if gpu.hbm_gib < limit:
                return tokens
        return self.chunk_tokens[-1][1]


def _engine_from(name: str, raw: Any, file: str) -> Engine:
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping, got {raw!r}", file=file, field=name)
    data = dict(raw)
    knobs = dataclass_from_mapping(EngineKnobs, data.pop("knobs", None), file, f"{name}.knobs")
    chunks = data.pop("chunk_tokens", None)
    if (not isinstance(chunks, list) or not chunks
            or not all(isinstance(c, list) and len(c) == 2 and all(isinstance(v, (int, float)) for v in c)
                       for c in chunks)):
        raise ConfigError("expected a list of [GiB limit, tokens] pairs", file=file, field=f"{name}.chunk_tokens")
    tiers = data.pop("cuda_graph_tiers", []) or []
    if (not isinstance(tiers, list)
            or not all(isinstance(t, list) and len(t) == 3 and all(isinstance(v, (int, float)) for v in t)
                       and t[1] >= 1 and t[2] >= 1 for t in tiers)):
        raise ConfigError(f"expected a list of [GiB limit, batch below {SMALL_WORKER_GPUS} GPUs, batch from "
                          f"{SMALL_WORKER_GPUS} GPUs] triples", file=file, field=f"{name}.cuda_graph_tiers")
    sources = data.pop("sources", {}) or {}
    moe_fraction = _moe_fractions(data.pop("moe_gemm_fraction", {}), file, f"{name}.moe_gemm_fraction")
    gdn_fraction = _gdn_fractions(data.pop("gdn_prefill_fraction", {}), file, f"{name}.gdn_prefill_fraction")
    max_running = data.pop("max_running", None)
    if max_running is not None and (not isinstance(max_running, int) or max_running < 1):
        raise ConfigError("expected a positive integer or null", file=file, field=f"{name}.max_running")
    spec = dataclass_from_mapping(_EngineFields, data, file, name)
    if spec.memory not in MEMORY_MODES:
        raise ConfigError(f"expected one of {', '.join(MEMORY_MODES)}", file=file, field=f"{name}.memory")
    for key, allowed in (("moe_layout", MOE_LAYOUTS), ("dp_attention_tp", DP_ATTENTION_TP), ("nccl_nvls", NCCL_NVLS)):
        if getattr(spec, key) not in allowed:
            raise ConfigError(f"expected one of {', '.join(allowed)}", file=file, field=f"{name}.{key}")
    if spec.a2a not in A2A_BACKENDS[1:]:
        raise ConfigError(f"expected one of {', '.join(A2A_BACKENDS[1:])}", file=file, field=f"{name}.a2a")
    return Engine(name=name, chunk_tokens=tuple((float(a), int(b)) for a, b in chunks), max_running=max_running,
                  cuda_graph_tiers=tuple((float(a), int(b), int(c)) for a, b, c in tiers),
                  knobs=knobs, moe_gemm_fraction=moe_fraction, gdn_prefill_fraction=gdn_fraction,
                  sources={str(k): str(v) for k, v in sources.items()},
                  **{f: getattr(spec, f) for f in _EngineFields.__dataclass_fields__})


def _fraction(value: Any, file: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"expected a fraction in (0, 1], got {value!r}", file=file, field=where)
    return float(value)


def _gdn_fractions(raw: Any, file: str, where: str) -> tuple[tuple[str, float], ...]:
    """gdn_prefill_fraction {architecture: fraction in (0, 1]} checked, as Engine holds it."""
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping of GPU architecture -> fraction, got {raw!r}", file=file, field=where)
    for arch in raw:
        if arch not in GPU_ARCHES:
            raise ConfigError(f"expected one of {', '.join(GPU_ARCHES)}", file=file, field=f"{where}.{arch}")
    return tuple((str(a), _fraction(v, file, f"{where}.{a}")) for a, v in raw.items())


def _moe_fractions(raw: Any, file: str, where: str) -> tuple[tuple[str, str, float], ...]:
    """moe_gemm_fraction {architecture: {weight format: fraction in (0, 1]}} checked, as Engine holds it."""
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping of GPU architecture -> {{weight format: fraction}}, got {raw!r}",
                          file=file, field=where)
    out = []
    for arch, formats in raw.items():
        if arch not in GPU_ARCHES:
            raise ConfigError(f"expected one of {', '.join(GPU_ARCHES)}", file=file, field=f"{where}.{arch}")
        if not isinstance(formats, dict) or not formats:
            raise ConfigError(f"expected a mapping of weight format -> fraction, got {formats!r}", file=file,
                              field=f"{where}.{arch}")
        for fmt, value in formats.items():
            if fmt not in WEIGHT_DTYPES:
                raise ConfigError(f"expected one of {', '.join(WEIGHT_DTYPES)}", file=file,
                                  field=f"{where}.{arch}.{fmt}")
            out.append((str(arch), str(fmt), _fraction(value, file, f"{where}.{arch}.{fmt}")))
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class _EngineFields:
    """The scalar fields of an engine entry, typed for the mapping reader."""

    label: str
    versions: str
    chunked_prefill: bool
    budget_counts_decode: bool
    mixed_batches: bool
    kv_on_demand: bool
    kv_block_tokens: int
    quantized_kv: bool
    kv_dequant: bool
    memory: str
    memory_fraction: float
    reserve_gib: float
    cuda_graph_max_batch: int
    graphs_to_batch: bool
    eager_prefill: bool
    overlap_scheduler: bool
    batch_waiting: bool
    dp_balancing: bool
    recv_skipping: bool
    a2a: str
    a2a_needs_mnnvl: bool
    fp4_gather: bool
    deepep: bool
    moe_layout: str
    dp_attention_tp: str
    nccl_nvls: str
    pipeline: bool


def engines_file() -> Path:
    return data_dir("serving") / "engines.yaml"


def read_engines(path: str | Path) -> dict[str, Engine]:
    """Every engine of an engines file (the shipped one, or a calibrated copy)."""
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping of engine name -> facts", file=str(path))
    return {str(name): _engine_from(str(name), entry, str(path)) for name, entry in raw.items()}


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Engine]:
    return read_engines(engines_file())


def load_engine(name: str | Engine) -> Engine:
    if isinstance(name, Engine):
        return name
    engines = _shipped()
    if name not in engines:
        raise UnknownPresetError("engine", name, ENGINES)
    return engines[name]
