"""What the data does to the router: the per-expert token load, and the EP straggler factor it causes.

A balanced router (Megatron's aux-loss or force-balanced routing, DeepSeek's bias balancing) spreads a
layer's tokens evenly: every EP rank receives the same share. A skewed load makes the busiest EP rank the
straggler of every MoE layer: its expert GEMMs and its all-to-all volume scale with max/mean per-GPU load
(formulas.md §3.4, §6), which EPLB's redundant experts reduce.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from parplan._input import exists
from parplan._mapping import as_float
from parplan.errors import ConfigError
from parplan.models.spec import ModelSpec
from parplan.planner import experts


@dataclass(frozen=True, slots=True)
class Workload:
    expert_load: np.ndarray | None = field(default=None, compare=False)
    """[layers or 1, experts] share of each expert in a layer's routed tokens; None = balanced."""
    name: str = "uniform"
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def straggler(self, model: ModelSpec, ep: int, redundant: int, nodes: int) -> float:
        """Max/mean per-GPU expert load over an EP group of `ep` ranks on `nodes` nodes, with `redundant` extra
        slots placed by EPLB (hierarchical policy when the expert groups map onto the nodes)."""
        if self.expert_load is None or model.moe is None or ep <= 1:
            return 1.0
        key = (ep, redundant, nodes)
        if key not in self._cache:
            groups = model.moe.n_group if model.moe.n_group % max(nodes, 1) == 0 else 1
            report = experts.imbalance(self.expert_load, ep, num_replicas=model.moe.experts + redundant if redundant
                                       else None, num_groups=groups, num_nodes=nodes if groups > 1 else 1)
            self._cache[key] = report.factor
        return self._cache[key]


UNIFORM = Workload()


def parse_expert_load(spec: str | None, model: ModelSpec) -> Workload:
    """'uniform', 'zipf' or 'zipf:1.4' (Zipf exponent), or a counts file (CSV/JSON/YAML, one row per layer)."""
    if spec is None or spec == "uniform":
        return UNIFORM
    if model.moe is None:
        raise ConfigError(f"{model.name} has no experts to load", field="expert_load")
    kind, _, arg = spec.partition(":")
    if kind == "zipf":
        try:
            a = float(arg) if arg else 1.2
        except ValueError:
            a = None
        a, rule = as_float(a, min=0, max=100)
        if rule:
            raise ConfigError(f"expected zipf:<exponent>, an exponent in 0..100, got {spec!r}", field="expert_load")
        return Workload(experts.expert_load("zipf", model.moe.experts, zipf_a=a), name=f"zipf({a:g})")
    path = Path(spec)
    if not exists(path):
        raise ConfigError("no such file (expected uniform, zipf[:a] or a counts file)", file=spec,
                          field="expert_load")
    counts = experts.load_counts_file(path)
    if counts.shape[1] != model.moe.experts:
        raise ConfigError(f"has {counts.shape[1]} experts per row; {model.name} has {model.moe.experts}",
                          file=spec, field="expert_load")
    try:
        load = experts.expert_load("counts", model.moe.experts, counts=counts, layers=len(counts))
    except ValueError as e:  # a layer whose counts are all 0
        raise ConfigError(str(e), file=spec, field="expert_load") from None
    return Workload(load, name=path.name)
