"""Cluster presets and cluster YAML files.

A cluster file has the preset schema (see parplan/data/hardware/h100.yaml)::

    name: my-cluster
    base: h100                # optional: start from a preset and override what differs
    description: "..."
    gpu: {name, arch, sm_count, peak_tflops: {bf16, fp16, fp8, tf32}, hbm_gib, hbm_tbps,
          gemm_peak_fraction: {...}, attention_fwd_fraction, ...}
    node: {gpus_per_node, scaleup_domain}
    scaleup: {name, bandwidth_gbps, busbw_gbps, allreduce_busbw_gbps, ring_step_us, tree_step_us, nvls_us,
              per_peer_gbps, one_shot_allreduce, symmetric_memory}
    scaleout: {name, bandwidth_gbps, busbw_gbps, ring_step_us, tree_step_us}
    calibration: {compute_scale, nvlink_overlap_cost, nic_overlap_cost}   # optional, from parplan calibrate
    sources: {field.path: "where the number comes from"}
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from parplan._input import exists, read_yaml
from parplan._mapping import Fields, dataclass_from_mapping
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
    top = Fields(data, file).allow(_TOP)
    fits = data.get("fits") or {}
    if top.has("base"):
        base_name = top.str("base")
        if base_name.lower() not in preset_names():
            raise UnknownPresetError("cluster", base_name, preset_names())
        data = _merge(_read_yaml(data_dir("hardware") / f"{base_name.lower()}.yaml"),
                      {k: v for k, v in data.items() if k not in ("base", "fits", "measurements")})
        top = Fields(data, file)
    node = top.mapping("node").allow({"gpus_per_node", "scaleup_domain"})
    gpn = node.int("gpus_per_node", min=1)
    sources = top.mapping("sources", None)
    return ClusterSpec(
        name=top.str("name"),
        description=top.str("description", ""),
        gpu=dataclass_from_mapping(GPUSpec, top.mapping("gpu").data, file, "gpu"),
        gpus=gpus if gpus is not None else top.int("gpus", gpn, min=1),
        gpus_per_node=gpn,
        scaleup_domain=node.int("scaleup_domain", gpn, min=1),
        scaleup=dataclass_from_mapping(LinkSpec, top.mapping("scaleup").data, file, "scaleup"),
        scaleout=dataclass_from_mapping(LinkSpec, top.mapping("scaleout").data, file, "scaleout"),
        calibration=dataclass_from_mapping(Calibration, data.get("calibration") or {}, file, "calibration"),
        sources={key: sources.str(key) for key in sources.data} if sources else {},
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
        note = f"measured ({kind} fit" + (f", rms error {rms:.1%})" if isinstance(rms, float)
                                          and math.isfinite(rms) else ")")
        sets = report.get("sets")
        for path in sets if isinstance(sets, list) else ():
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
            if exists(path):  # the door reports a directory, a device or a binary file as such
                spec = cluster_from_dict(_read_yaml(path), file=str(path))
            elif path.suffix in (".yaml", ".yml") or "/" in text:
                raise ConfigError("no such file", file=text)
            else:
                raise UnknownPresetError("cluster", text, preset_names())
    if gpus is not None:
        spec = spec.with_gpus(gpus)
    return spec
