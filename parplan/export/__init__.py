"""Launch settings: the chosen layout written for Megatron-LM, DeepSpeed or torchtitan.

`export` turns a validated `Strategy` into the files a framework reads (`Launch`). What a framework cannot
express is a list of support rules per framework (`megatron.RULES`, `deepspeed.RULES`, `torchtitan.RULES`),
each written once over `Layouts`: `framework_mask` filters a batch for the planner (`plan --framework F`) and
`unsupported_reason` / `export` apply the same predicates to one layout. Flag and key names follow
``reference/ecosystem.md`` (sections cited in each module).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from types import ModuleType

import numpy as np

from parplan.errors import ConfigError, InvalidStrategyError
from parplan.export.common import Launch, first_unsupported, supported_mask
from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.names import FRAMEWORKS
from parplan.planner.strategy import Layouts, Strategy

__all__ = ["FRAMEWORKS", "Launch", "export", "framework_filter", "framework_mask", "unsupported_reason"]


def _module(framework: str) -> ModuleType:
    if framework not in FRAMEWORKS:
        close = difflib.get_close_matches(framework, FRAMEWORKS, n=1, cutoff=0.4)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"unknown framework '{framework}'{hint} Known frameworks: {', '.join(FRAMEWORKS)}",
                          field="framework")
    return importlib.import_module(f"parplan.export.{framework}")


def unsupported_reason(framework: str, strategy: Strategy, *, model: ModelSpec | None = None) -> str | None:
    """Why `framework` cannot run `strategy`, or None when it can.

    Rules that depend on the model (e.g. DeepSpeed's "no pipeline parallelism for MoE") are checked only when
    `model` is given.
    """
    return first_unsupported(_module(framework).RULES, strategy, model)


def framework_mask(framework: str, lay: Layouts, *, model: ModelSpec | None = None) -> np.ndarray:
    """Boolean array over `lay`: True where `framework` can run the layout (same rules as `unsupported_reason`)."""
    return supported_mask(_module(framework).RULES, lay, model)


def framework_filter(framework: str, model: ModelSpec | None = None) -> Callable[[Layouts], np.ndarray]:
    """`framework_mask` bound to a framework and model, for a search's layout filter; an unknown framework
    name fails here, before any search."""
    rules = _module(framework).RULES
    return lambda lay: supported_mask(rules, lay, model)


def export(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, framework: str) -> Launch:
    """Launch settings for `strategy`; raises InvalidStrategyError for an invalid layout or one the framework
    cannot express, ConfigError for an unknown framework."""
    module = _module(framework)
    strategy.check(model, cluster)
    reason = unsupported_reason(framework, strategy, model=model)
    if reason is not None:
        raise InvalidStrategyError(f"{module.NAME} cannot run this layout: {reason}")
    return module.launch(model, cluster, strategy)
