"""Launch settings for a planned serving deployment (`serve plan --emit vllm|sglang|trtllm`): one command per
pool (prefill and decode apart when disaggregated), with the engine's own option names, read from the option
lists in parplan/data/serving/engine_options.yaml (each with the file and commit it was read from; the tests
check every emitted option against them). What the engine cannot run is refused with the reason."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from parplan._input import read_yaml
from parplan._resources import data_dir
from parplan.errors import ConfigError, InvalidStrategyError
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.names import ENGINES
from parplan.serving.engines import Engine
from parplan.serving.layout import PoolArrays
from parplan.serving.memory import sglang_reserve_gib
from parplan.serving.search import Candidate
from parplan.serving.spec import Pool, Precision, Workload
from parplan.serving.step import StepModel


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """The options of one engine's launcher that the export may write."""

    version: str
    command: str
    source: str
    options: tuple[str, ...]
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    yaml_keys: tuple[str, ...] = ()
    yaml_values: dict[str, tuple[str, ...]] = field(default_factory=dict)


def options_file() -> str:
    return str(data_dir("serving") / "engine_options.yaml")


@lru_cache(maxsize=1)
def engine_options() -> dict[str, EngineOptions]:
    path = options_file()
    raw = read_yaml(path)
    if not isinstance(raw, dict) or set(raw) != set(ENGINES):
        raise ConfigError(f"expected one entry per engine ({', '.join(ENGINES)})", file=path)
    out = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise ConfigError("expected a mapping", file=path, field=name)
        try:
            out[name] = EngineOptions(
                version=str(entry["version"]), command=str(entry["command"]), source=str(entry["source"]),
                options=tuple(entry["options"]),
                values={k: tuple(v) for k, v in (entry.get("values") or {}).items()},
                yaml_keys=tuple(entry.get("yaml_keys") or ()),
                yaml_values={k: tuple(v) for k, v in (entry.get("yaml_values") or {}).items()})
        except (KeyError, TypeError) as e:
            raise ConfigError(f"malformed entry ({e})", file=path, field=name) from None
    return out


@dataclass(frozen=True, slots=True)
class Launch:
    """One process group to start: its role, the command line, and the extra-options YAML it reads (if any)."""

    role: str
    argv: tuple[str, ...]
    """The launcher's words and its options with values, in order."""
    extra_yaml: dict[str, Any] | None = None
    nodes: int = 1


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def check_launch(engine: str, launch: Launch) -> None:
    """Every option (and closed-choice value) of `launch` is one the engine's source defines."""
    opts = engine_options()[engine]
    argv = list(launch.argv)
    for i, word in enumerate(argv):
        if not word.startswith("--"):
            continue
        if word not in opts.options:
            raise AssertionError(f"{engine}: {word} is not in the option list ({opts.source})")
        if word in opts.values and i + 1 < len(argv) and argv[i + 1] not in opts.values[word]:
            raise AssertionError(f"{engine}: {word} {argv[i + 1]} is not one of {opts.values[word]}")
    for key, value in _flatten(launch.extra_yaml or {}).items():
        if key not in opts.yaml_keys:
            raise AssertionError(f"{engine}: YAML key {key} is not in the list ({opts.source})")
        if key in opts.yaml_values and str(value) not in opts.yaml_values[key]:
            raise AssertionError(f"{engine}: {key}: {value} is not one of {opts.yaml_values[key]}")


def _a2a(sm: StepModel, role: str) -> str:
    """'deepep' where the layout's MoE exchange runs DeepEP (the search's choice), else 'default'."""
    from parplan.names import A2A_BACKENDS

    backend = int(sm.a2a_backend(role == "prefill")[0])
    return "deepep" if A2A_BACKENDS[backend] == "deepep" and sm.lay.dp[0] > 1 else "default"


def _nodes(cluster: ClusterSpec, pool: Pool) -> int:
    return max(1, -(-pool.gpus // cluster.gpus_per_node))


def _vllm(pool: Pool, role: str, a2a: str, prec: Precision, chunk: int, engine: Engine) -> list[str]:
    args = ["--tensor-parallel-size", str(pool.tp)]
    if pool.pp > 1:
        args += ["--pipeline-parallel-size", str(pool.pp)]
    if pool.dp > 1:
        args += ["--data-parallel-size", str(pool.dp)]
    if pool.moe_ep > 1:
        args.append("--enable-expert-parallel")
        if pool.dp > 1:
            mode = {"prefill": "deepep_high_throughput", "decode": "deepep_low_latency"}.get(
                role, "deepep_high_throughput") if a2a == "deepep" else "allgather_reducescatter"
            args += ["--all2all-backend", mode]
    if pool.redundant_experts:
        args += ["--enable-eplb", "--num-redundant-experts", str(pool.redundant_experts)]
    args += ["--kv-cache-dtype", "fp8" if prec.kv_cache == "fp8" else "auto",
             "--gpu-memory-utilization", f"{engine.memory_fraction:g}", "--max-num-batched-tokens", str(chunk)]
    if pool.batch:
        args += ["--max-num-seqs", str(pool.batch), "--max-cudagraph-capture-size", str(pool.batch)]
    if role in ("prefill", "decode"):
        args += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
    return args


def _sglang(pool: Pool, role: str, a2a: str, prec: Precision, chunk: int, engine: Engine, cluster: ClusterSpec,
            workload: Workload) -> list[str]:
    args = ["--tp-size", str(pool.tp * pool.dp)]
    if pool.dp > 1:
        args += ["--dp-size", str(pool.dp), "--enable-dp-attention"]
    if pool.pp > 1:
        args += ["--pp-size", str(pool.pp)]
    if pool.moe_ep > 1:
        args += ["--ep-size", str(pool.moe_ep)]
    if a2a == "deepep":
        args += ["--moe-a2a-backend", "deepep", "--deepep-mode",
                 {"prefill": "normal", "decode": "low_latency"}.get(role, "auto")]
    if pool.redundant_experts:
        args += ["--enable-eplb", "--ep-num-redundant-experts", str(pool.redundant_experts)]
    hbm = cluster.gpu.hbm_gib
    if engine.memory == "static":  # a stated --mem-fraction-static (Engine.configured)
        fraction = engine.memory_fraction
    else:
        fraction = (hbm - float(sglang_reserve_gib(engine, hbm, chunk, PoolArrays.from_pools([pool]))[0])) / hbm
    args += ["--kv-cache-dtype", "fp8_e4m3" if prec.kv_cache == "fp8" else "auto",
             "--mem-fraction-static", f"{fraction:.3f}", "--chunked-prefill-size", str(chunk)]
    if pool.batch:
        args += ["--max-running-requests", str(pool.batch * pool.dp), "--cuda-graph-max-bs", str(pool.batch)]
    if workload.mtp:
        args += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(workload.mtp),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(workload.mtp + 1)]
    if role in ("prefill", "decode"):
        args += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "mooncake"]
    nodes = _nodes(cluster, pool)
    if nodes > 1:
        args += ["--nnodes", str(nodes), "--node-rank", "$NODE_RANK", "--dist-init-addr", "$HEAD_NODE:5000"]
    return args


def _trtllm(pool: Pool, role: str, prec: Precision, chunk: int, engine: Engine,
            workload: Workload) -> tuple[list[str], dict[str, Any]]:
    args = ["--backend", "pytorch", "--tp_size", str(pool.tp * pool.dp)]
    if pool.pp > 1:
        args += ["--pp_size", str(pool.pp)]
    if pool.moe_ep > 1:
        args += ["--ep_size", str(pool.moe_ep)]
    args += ["--max_num_tokens", str(chunk), "--kv_cache_free_gpu_memory_fraction", f"{engine.memory_fraction:g}"]
    if pool.batch:
        args += ["--max_batch_size", str(pool.batch)]
    extra: dict[str, Any] = {"kv_cache_config": {"dtype": "fp8" if prec.kv_cache == "fp8" else "auto"}}
    if pool.dp > 1:
        extra["enable_attention_dp"] = True
    if pool.moe_tp and pool.moe_tp > 1 and pool.moe_ep > 1:
        extra["moe_tensor_parallel_size"] = pool.moe_tp
    if pool.batch:
        extra["cuda_graph_config"] = {"max_batch_size": pool.batch}
    if workload.mtp:
        extra["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": workload.mtp}
    if role in ("prefill", "decode"):
        extra["cache_transceiver_config"] = {"backend": "UCX"}
        args += ["--server_role", "context" if role == "prefill" else "generation"]
    args += ["--extra_llm_api_options", f"{role or 'aggregated'}.yaml"]
    return args, extra


def launches(model: ModelSpec, cluster: ClusterSpec, engine: Engine, cand: Candidate, workload: Workload,
             model_path: str, chunk: int) -> list[Launch]:
    """The processes to start for `cand`, one per pool role."""
    roles = (("", cand.pool),) if cand.pool is not None else (("prefill", cand.prefill), ("decode", cand.decode))
    opts = engine_options()[engine.name]
    out = []
    for role, pool in roles:
        assert pool is not None
        engine.check_pool(pool, role)
        if workload.mtp and engine.name == "vllm":
            raise InvalidStrategyError("vLLM takes speculative decoding as --speculative-config with the draft "
                                       "method of the checkpoint; parplan does not choose it: emit without --mtp")
        sm = StepModel(model, cluster, engine, cand.precision, PoolArrays.from_pools([pool]))
        a2a = _a2a(sm, role) if model.moe is not None else "default"
        launcher = shlex.split(opts.command)
        extra = None
        if engine.name == "vllm":
            argv = [*launcher, model_path, *_vllm(pool, role, a2a, cand.precision, chunk, engine)]
        elif engine.name == "sglang":
            argv = [*launcher, "--model-path", model_path,
                    *_sglang(pool, role, a2a, cand.precision, chunk, engine, cluster, workload)]
        else:
            args, extra = _trtllm(pool, role, cand.precision, chunk, engine, workload)
            argv = [*launcher, model_path, *args]
        out.append(Launch(role=role or "aggregated", argv=tuple(argv), extra_yaml=extra, nodes=_nodes(cluster, pool)))
    return out


def render(plan_header: str, engine: Engine, cand: Candidate, items: list[Launch]) -> str:
    """A shell script: a header naming the engine version and the option source, then per role the YAML it
    reads (TensorRT-LLM) and the command, with how many workers and nodes to start it on."""
    import yaml

    opts = engine_options()[engine.name]
    lines = [f"# {plan_header}", f"# {engine.label}: {opts.version}; options as in {opts.source}"]
    pools = {"aggregated": cand.pool, "prefill": cand.prefill, "decode": cand.decode}
    for launch in items:
        pool = pools[launch.role]
        assert pool is not None
        lines.append("")
        where = f"{launch.nodes} nodes each" if launch.nodes > 1 else "one node each"
        lines.append(f"# {launch.role}: {pool.workers} worker(s) of {pool.gpus} GPUs ({where})")
        if launch.extra_yaml is not None:
            name = f"{launch.role}.yaml"
            body = yaml.safe_dump(launch.extra_yaml, sort_keys=False).rstrip()
            lines.append(f"cat > {name} <<'EOF'\n{body}\nEOF")
        lines.append(" ".join(w if w.startswith("$") else shlex.quote(w) for w in launch.argv))
    if cand.pool is None:
        router = {"vllm": "a proxy that sends each request to a prefill worker, then to a decode worker (vLLM's "
                          "disaggregated-serving proxy, or Dynamo / llm-d)",
                  "sglang": "python -m sglang_router.launch_router --pd-disaggregation with the prefill and decode "
                            "URLs",
                  "trtllm": "trtllm-serve disaggregated -c disagg.yaml listing the context and generation servers"}
        lines += ["", f"# route requests with {router[engine.name]}"]
    return "\n".join(lines) + "\n"
