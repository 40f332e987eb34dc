"""Hardware profiles: measured samples fitted into a cluster file that `--cluster` reads.

A profile is a cluster YAML (preset schema, usually `base: <preset>` plus the fitted fields) with two more
sections: `fits` (each fit's parameters, residuals and which fields it set) and `measurements` (the raw
samples, samples.py). Running several `parplan bench ...` commands into the same file accumulates samples;
every write refits from all of them.

Where the fitted numbers go (fit.py docstrings):
- GEMM curve -> gpu.gemm_peak_fraction[dtype], gpu.gemm_tile_overhead_us, gpu.kernel_launch_us
- attention -> gpu.attention_fwd_fraction / attention_bwd_fraction / attention_half_seq
- memory copy -> gpu.hbm_efficiency
- collectives inside one node -> scaleup.busbw_gbps (ring: all-gather, reduce-scatter, all-to-all, and
  all-reduce on <= 4 GPUs) and scaleup.allreduce_busbw_gbps (all-reduce on > 4 GPUs of a switch: NVLS);
  the fitted latency -> scaleup.ring_step_us = (α − NCCL base) / ring steps
- collectives across nodes -> scaleout.busbw_gbps (per-GPU NIC rate, AlphaBetaFit.link_busbw_gbps)
Bandwidths are fitted on messages of at least 256 MiB (one α-β line cannot follow NCCL's protocol switches
over the whole sweep); the latency on the whole sweep.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any

from parplan._input import exists, read_yaml
from parplan.errors import ConfigError
from parplan.hardware.efficiency import NCCL_BASE_US, RING_PASSES, Collective, uses_nvls
from parplan.hardware.fit import fit_attention, fit_collectives, fit_gemm_curve, fit_memory
from parplan.hardware.presets import load_cluster
from parplan.hardware.samples import ProfileSamples, profile_from_dict, write_profile_samples
from parplan.hardware.spec import ClusterSpec

BANDWIDTH_MIN_BYTES = 256 * 2**20


def read_profile(path: str | Path) -> tuple[dict[str, Any], ProfileSamples | None]:
    """(cluster mapping without `measurements`, the samples) of an existing profile file."""
    path = Path(path)
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level", file=str(path))
    raw = data.pop("measurements", None)
    samples = profile_from_dict(raw, file=str(path)) if raw else None
    return data, samples


def merge_samples(old: ProfileSamples | None, new: ProfileSamples) -> ProfileSamples:
    """Samples of both, with the newer header (date, device, versions)."""
    if old is None:
        return new
    return dataclasses.replace(new, **{name: getattr(old, name) + getattr(new, name)
                                       for name in ("collectives", "gemm", "attention", "memory")})


def fit_profile(base: ClusterSpec, samples: ProfileSamples) -> tuple[dict[str, Any], dict[str, Any]]:
    """(fitted cluster fields by section, fit reports) from all samples against `base`."""
    fields: dict[str, dict[str, Any]] = {"gpu": {}, "scaleup": {}, "scaleout": {}}
    reports: dict[str, Any] = {}
    gpu = base.gpu
    # In order: the attention and memory fits take the fitted GEMM curve's kernel launch cost.
    for name, measured, fit_with in (("gemm", samples.gemm, fit_gemm_curve), ("attention", samples.attention,
                                                                            fit_attention),
                                     ("memory", samples.memory, fit_memory)):
        if not measured:
            continue
        fit = fit_with(measured, gpu)
        gpu = fit.apply(gpu)
        # gemm_peak_fraction lists the measured dtypes only: the cluster file merges it over the base's.
        fields["gpu"].update(fit.fields())
        reports[name] = {"samples": len(measured), "rms_rel_error": fit.rms_rel_error,
                         "sets": [f"gpu.{key}" for key in fit.fields()]}
    if samples.collectives:
        _fit_links(base, samples, fields, reports)
    return {k: v for k, v in fields.items() if v}, reports


def _fit_links(base: ClusterSpec, samples: ProfileSamples, fields: dict[str, dict[str, Any]],
               reports: dict[str, Any]) -> None:
    large = [s for s in samples.collectives if s.size_bytes >= BANDWIDTH_MIN_BYTES]
    bw_fits = fit_collectives(large) if len({s.size_bytes for s in large}) >= 2 else {}
    lat_fits = fit_collectives(samples.collectives)
    ring, nvls, nic, steps = [], [], [], []
    modelled = {c.value for c in Collective}
    for key, lat in lat_fits.items():
        collective, ranks, per_node = key
        bw = bw_fits.get(key, lat)
        inside = per_node >= ranks
        reports.setdefault("collectives", {})[f"{collective} {ranks} ranks, {per_node}/node"] = {
            "alpha_us": lat.alpha_us, "busbw_gbps": bw.busbw_gbps, "rms_rel_error": lat.rms_rel_error,
            "bandwidth_rms_rel_error": bw.rms_rel_error}
        if collective not in modelled:
            continue  # reported, but no link of the cost model runs it (nccl-tests' broadcast)
        if collective == "send_recv":
            (ring if inside else nic).append(bw.busbw_gbps)
        elif inside and uses_nvls(base.scaleup, Collective(collective), ranks):
            nvls.append(bw.busbw_gbps)
        elif inside:
            ring.append(bw.busbw_gbps)
            kind = Collective(collective)
            if kind in RING_PASSES and ranks > 1:
                # NCCL's intra-domain ring latency: base + passes·(n − 1) steps (efficiency._latency).
                steps.append(max(0.0, lat.alpha_us - NCCL_BASE_US) / (RING_PASSES[kind] * (ranks - 1)))
        else:
            nic.append(bw.link_busbw_gbps)
    sets = []
    for values, section, key in ((ring, "scaleup", "busbw_gbps"), (nvls, "scaleup", "allreduce_busbw_gbps"),
                                 (steps, "scaleup", "ring_step_us"), (nic, "scaleout", "busbw_gbps")):
        if values:
            fields[section][key] = statistics.median(values)
            sets.append(f"{section}.{key}")
    if "collectives" in reports:
        reports["collectives"]["sets"] = sets


def write_profile(path: str | Path, base: str, new: ProfileSamples, *, name: str | None = None) -> ClusterSpec:
    """Add `new` samples to the profile at `path` (created on `base` if absent), refit, write, and return the
    cluster it now describes."""
    path = Path(path)
    mapping: dict[str, Any] = {}
    old = None
    if exists(path):
        mapping, old = read_profile(path)
        base = mapping.get("base", base)
    samples = merge_samples(old, new)
    base_spec = load_cluster(base)
    fields, reports = fit_profile(base_spec, samples)
    mapping = {"name": name or mapping.get("name") or path.stem, "base": base,
               "description": f"{base_spec.description}; measured {samples.date} on {samples.device}",
               **{k: v for k, v in mapping.items() if k in ("calibration",)}, **fields, "fits": reports}
    write_profile_samples(path, samples, cluster=mapping)
    return load_cluster(str(path))
