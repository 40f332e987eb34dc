"""Launch settings: the chosen layout written for Megatron-LM, DeepSpeed or torchtitan.

`export` turns a validated `Strategy` into the files a framework reads (`Launch`). What a framework cannot
express is a list of support rules per framework (`megatron.RULES`, `deepspeed.RULES`, `torchtitan.RULES`),
each written once over `Layouts`: `framework_mask` filters a batch for the planner (`plan --framework F`) and
`unsupported_reason` / `export` apply the same predicates to one layout. Each exporter writes for a few
framework versions (`TARGETS`: Megatron-LM core_v0.16.1, core_v0.19.0 and HEAD; torchtitan 0.2.2, 0.3.0 and
HEAD; ...), and a rule may hold for some of them only: "torchtitan" means every version, "torchtitan@0.3.0"
one. Flag and key names, types and choices are the ones those versions' code defines; the tests check every
export against lists read off that code (tests/data/frameworks).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from types import ModuleType

import numpy as np

from parplan.errors import ConfigError, InvalidStrategyError
from parplan.export.common import Known, Launch, Support, Target, first_unsupported, supported_mask
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.names import FRAMEWORKS
from parplan.planner.strategy import Layouts, Strategy

__all__ = ["FRAMEWORKS", "Launch", "Target", "export", "framework_filter", "framework_mask", "targets",
           "unsupported_reason"]


def _resolve(framework: str) -> tuple[ModuleType, tuple[Target, ...]]:
    """The exporter and the versions `framework` names: "torchtitan" every version it writes for,
    "torchtitan@0.3.0" that one."""
    name, _, key = framework.partition("@")
    if name not in FRAMEWORKS:
        close = difflib.get_close_matches(name, FRAMEWORKS, n=1, cutoff=0.4)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"unknown framework '{name}'{hint} Known frameworks: {', '.join(FRAMEWORKS)}",
                          field="framework")
    module = importlib.import_module(f"parplan.export.{name}")
    if not key:
        return module, module.TARGETS
    chosen = tuple(t for t in module.TARGETS if t.key == key)
    if not chosen:
        keys = ", ".join(f"{name}@{t.key}" for t in module.TARGETS)
        raise ConfigError(f"unknown {module.NAME} version '{key}'; known: {keys} (or '{name}' for all of them)",
                          field="framework")
    return module, chosen


def _rules(framework: str) -> tuple[ModuleType, tuple[Target, ...], tuple[Support, ...]]:
    module, targets = _resolve(framework)
    return module, targets, tuple(rule for rule in module.RULES if rule.applies(targets))


def targets(framework: str) -> tuple[Target, ...]:
    """The framework versions `framework` ("torchtitan" or "torchtitan@0.3.0") exports for."""
    return _resolve(framework)[1]


def unsupported_reason(framework: str, strategy: Strategy, *, model: ModelSpec | None = None,
                       gpus: int | None = None) -> str | None:
    """Why `framework` cannot run `strategy`, or None when it can. A bare framework name means every version
    it exports for; "name@version" one of them (see `targets`).

    Rules that depend on the model (e.g. DeepSpeed's "no pipeline parallelism for MoE") or on the GPU count
    (the micro-batches a pipeline schedule needs) are checked only when `model` / `gpus` are given.
    """
    return first_unsupported(_rules(framework)[2], strategy, Known(model, gpus))


def framework_mask(framework: str, lay: Layouts, *, model: ModelSpec | None = None,
                   gpus: int | None = None) -> np.ndarray:
    """Boolean array over `lay`: True where `framework` can run the layout (same rules as `unsupported_reason`)."""
    return supported_mask(_rules(framework)[2], lay, Known(model, gpus))


def framework_filter(framework: str, model: ModelSpec | None = None,
                     gpus: int | None = None) -> Callable[[Layouts], np.ndarray]:
    """`framework_mask` bound to a framework, model and GPU count, for a search's layout filter; an unknown
    framework name or version fails here, before any search."""
    rules, known = _rules(framework)[2], Known(model, gpus)
    return lambda lay: supported_mask(rules, lay, known)


def export(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, framework: str) -> Launch:
    """Launch settings for `strategy`, for every version `framework` names; raises InvalidStrategyError for an
    invalid layout or one a version cannot run, ConfigError for an unknown framework or version."""
    module, chosen, rules = _rules(framework)
    strategy.check(model, cluster)
    reason = first_unsupported(rules, strategy, Known(model, cluster.gpus))
    if reason is not None:
        raise InvalidStrategyError(f"{module.NAME} cannot run this layout: {reason}")
    return module.launch(model, cluster, strategy, chosen)
