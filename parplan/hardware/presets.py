"""Cluster presets and cluster YAML files.

A cluster file has the preset schema (see parplan/data/hardware/h100.yaml)::

    name: my-cluster
    base: h100                # optional: start from a preset and override what differs
    description: "..."
    gpu: {name, arch, sm_count, peak_tflops: {bf16, fp16, fp8, tf32}, hbm_gib, hbm_tbps,
          gemm_peak_fraction: {...}, attention_fwd_fraction, ...}
    node: {gpus_per_node, scaleup_domain}
    scaleup: {name, bandwidth_gbps, busbw_gbps, allreduce_busbw_gbps, ring_step_us, tree_step_us, nvls_us,
              per_peer_gbps}
    scaleout: {name, bandwidth_gbps, busbw_gbps, ring_step_us, tree_step_us}
    calibration: {compute_scale, nvlink_overlap_cost, nic_overlap_cost}   # optional, from parplan calibrate
    sources: {field.path: "where the number comes from"}
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from parplan._input import read_yaml
from parplan._mapping import dataclass_from_mapping
from parplan._resources import data_dir
from parplan.errors import ConfigError, UnknownPresetError
from parplan.hardware.spec import Calibration, ClusterSpec, GPUSpec, LinkSpec

_TOP = {"name", "base", "description", "gpu", "node", "scaleup", "scaleout", "calibration", "sources", "gpus",
        "fits", "measurements"}
"""`fits` and `measurements` belong to hardware profiles (profile.py): what was measured, and the samples."""


def preset_names() -> list[str]:
    return sorted(p.stem for p in data_dir("hardware").glob("*.yaml"))


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level", file=str(path))
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def cluster_from_dict(data: dict[str, Any], *, file: str, gpus: int | None = None) -> ClusterSpec:
    for key in data:
        if key not in _TOP:
            raise ConfigError(f"unknown field; allowed: {', '.join(sorted(_TOP))}", file=file, field=key)
    fits = data.get("fits") or {}
    if data.get("base") is not None:
        base_name = data["base"]
        if base_name not in preset_names():
            raise UnknownPresetError("cluster", str(base_name), preset_names())
        data = _merge(_read_yaml(data_dir("hardware") / f"{base_name}.yaml"),
                      {k: v for k, v in data.items() if k not in ("base", "fits", "measurements")})
    for key in ("name", "gpu", "node", "scaleup", "scaleout"):
        if data.get(key) is None:
            raise ConfigError("required field is missing", file=file, field=key)
    node = data["node"]
    if not isinstance(node, dict):
        raise ConfigError("expected a mapping", file=file, field="node")
    gpn = node.get("gpus_per_node")
    if not isinstance(gpn, int) or isinstance(gpn, bool) or gpn < 1:
        raise ConfigError(f"expected a positive integer, got {gpn!r}", file=file, field="node.gpus_per_node")
    domain = node.get("scaleup_domain", gpn)
    extra = set(node) - {"gpus_per_node", "scaleup_domain"}
    if extra:
        raise ConfigError("unknown field; allowed: gpus_per_node, scaleup_domain", file=file,
                          field=f"node.{sorted(extra)[0]}")
    total = gpus if gpus is not None else data.get("gpus", gpn)
    sources = data.get("sources") or {}
    if not isinstance(sources, dict):
        raise ConfigError("expected a mapping of field -> source", file=file, field="sources")
    return ClusterSpec(
        name=str(data["name"]),
        description=str(data.get("description", "")),
        gpu=dataclass_from_mapping(GPUSpec, data["gpu"], file, "gpu"),
        gpus=total,
        gpus_per_node=gpn,
        scaleup_domain=domain,
        scaleup=dataclass_from_mapping(LinkSpec, data["scaleup"], file, "scaleup"),
        scaleout=dataclass_from_mapping(LinkSpec, data["scaleout"], file, "scaleout"),
        calibration=dataclass_from_mapping(Calibration, data.get("calibration") or {}, file, "calibration"),
        sources={str(k): str(v) for k, v in sources.items()},
        measured=_measured(fits),
        source=file,
    )


def _measured(fits: Any) -> dict[str, str]:
    """field path -> what measured it, from a profile's `fits` section."""
    out: dict[str, str] = {}
    for kind, report in (fits.items() if isinstance(fits, dict) else ()):
        if not isinstance(report, dict):
            continue
        rms = report.get("rms_rel_error")
        note = f"measured ({kind} fit" + (f", rms error {rms:.1%})" if isinstance(rms, float) else ")")
        for path in report.get("sets", []):
            out[str(path)] = note
    return out


@lru_cache(maxsize=32)
def _preset(name: str) -> ClusterSpec:
    path = data_dir("hardware") / f"{name}.yaml"
    return cluster_from_dict(_read_yaml(path), file=str(path))


def load_cluster(name_or_path: str | Path | ClusterSpec, *, gpus: int | None = None) -> ClusterSpec:
    """Resolve a preset name (case-insensitive) or a cluster YAML file; `gpus` sets the total GPU count."""
    if isinstance(name_or_path, ClusterSpec):
        spec = name_or_path
    else:
        text = str(name_or_path)
        if text.lower() in preset_names():
            spec = _preset(text.lower())
        else:
            path = Path(text).expanduser()
            if path.is_file():
                spec = cluster_from_dict(_read_yaml(path), file=str(path))
            elif path.suffix in (".yaml", ".yml") or "/" in text:
                raise ConfigError("no such file", file=text)
            else:
                raise UnknownPresetError("cluster", text, preset_names())
    if gpus is not None:
        if gpus < 1:
            raise ConfigError(f"must be >= 1, got {gpus}", field="gpus")
        spec = spec.with_gpus(gpus)
    return spec
