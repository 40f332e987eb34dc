"""Which layouts a stack can run: its `runs` facts and its recompute names, plus the support rules of the
exporter it names (parplan.export: "torchtitan" applies the rules of every version parplan writes for,
"torchtitan@0.3.0" that version's), written once over `Layouts` for the search and applied to one layout
for `explain`/`validate` (the same predicates, as the exporters do)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from parplan.errors import InvalidStrategyError
from parplan.models.spec import ModelSpec
from parplan.planner.strategy import PRECISIONS, RECOMPUTE, SCHEDULES, Layouts, Strategy
from parplan.stacks.spec import StackSpec

_DEGREES = (("tp", "tensor parallelism", lambda lay: lay.tp), ("pp", "pipeline parallelism", lambda lay: lay.pp),
            ("cp", "context parallelism", lambda lay: lay.cp),
            ("ep", "expert parallelism", lambda lay: np.maximum(lay.ep, lay.etp)))


def _rules(stack: StackSpec) -> list[tuple[Callable[[Layouts], np.ndarray], Callable[[Strategy], str]]]:
    """(ok over a batch, reason for one layout) per `runs` fact and the recompute table."""
    runs, name = stack.runs, stack.name
    out = []
    for key, words, degree in _DEGREES:
        if key not in runs.parallelism:
            out.append((lambda lay, d=degree: d(lay) == 1,
                        lambda s, k=key, w=words: f"{name} has no {w} ({k}={getattr(s, k)}); "
                                                  f"it runs {', '.join(runs.parallelism) or 'data parallelism only'}"))
    codes = {
        "zero": ([int(z) for z in runs.zero], lambda lay: lay.zero, "ZeRO stage"),
        "schedule": ([SCHEDULES.index(x) for x in runs.schedules], lambda lay: lay.schedule, "pipeline schedule"),
        "precision": ([PRECISIONS.index(x) for x in runs.precisions], lambda lay: lay.precision, "precision"),
        "recompute": ([RECOMPUTE.index(x) for x in stack.recompute], lambda lay: lay.recompute, "recompute setting"),
    }
    for field, (allowed, column, words) in codes.items():
        listed = {"zero": runs.zero, "schedule": runs.schedules, "precision": runs.precisions,
                  "recompute": tuple(stack.recompute)}[field]
        out.append((lambda lay, a=allowed, c=column: np.isin(c(lay), a),
                    lambda s, f=field, w=words, ls=listed: f"{name} has no {w} {getattr(s, f)}; it runs "
                                                           f"{', '.join(map(str, ls))}"))
    return out


def stack_filter(stack: StackSpec, model: ModelSpec | None = None,
                 gpus: int | None = None) -> Callable[[Layouts], np.ndarray]:
    """True where `stack` can run a layout: its own rules and its exporter's support rules
    (export.framework_filter, with the model and GPU count where given). Elementwise over the Layouts fields,
    as the search needs of a layout filter."""
    rules = _rules(stack)
    exporter = None
    if stack.runs.exporter is not None:
        from parplan.export import framework_filter

        exporter = framework_filter(stack.runs.exporter, model, gpus)

    def mask(lay: Layouts) -> np.ndarray:
        ok = np.ones(len(lay), dtype=bool)
        for rule, _ in rules:
            # Not in place: the search passes Layouts whose fields broadcast against each other.
            ok = ok & np.asarray(rule(lay), dtype=bool)
        return ok & exporter(lay) if exporter is not None else ok

    return mask


def unsupported_reason(stack: StackSpec, strategy: Strategy, model: ModelSpec | None = None,
                       gpus: int | None = None) -> str | None:
    """Why `stack` cannot run `strategy`, or None when it can (the predicates of stack_filter)."""
    lay = Layouts.from_strategies([strategy])
    for rule, why in _rules(stack):
        if not bool(np.asarray(rule(lay))[0]):
            return why(strategy)
    if stack.runs.exporter is not None:
        from parplan.export import unsupported_reason as exporter_reason

        return exporter_reason(stack.runs.exporter, strategy, model=model, gpus=gpus)
    return None


def check_stack(stack: StackSpec, strategy: Strategy, model: ModelSpec | None = None, gpus: int | None = None
                ) -> None:
    """Raise InvalidStrategyError naming why `stack` cannot run `strategy`."""
    reason = unsupported_reason(stack, strategy, model, gpus)
    if reason is not None:
        raise InvalidStrategyError(f"stack {stack.name} cannot run this layout: {reason}")


def restrict_space(space, stack: StackSpec):
    """A SearchSpace narrowed to the degrees, ZeRO stages, schedules, precisions and recompute names the stack
    runs (the search then enumerates only those; stack_filter applies the finer rules)."""
    runs = stack.runs
    fields: dict[str, object] = {
        "zero": tuple(z for z in space.zero if z in runs.zero),
        "schedule": tuple(x for x in space.schedule if x in runs.schedules),
        "precision": tuple(x for x in space.precision if x in runs.precisions),
        "recompute": tuple(x for x in space.recompute if x in stack.recompute),
    }
    for key, _, _ in _DEGREES:
        if key not in runs.parallelism:
            fields[key] = (1,)
            if key == "ep":
                fields["etp"] = (1,)
    return dataclasses.replace(space, **fields)


def stack_for_framework(framework: str) -> str:
    """The preset that runs the layouts `framework` (a name, optionally @version) exports for: the stack whose
    exporter is that framework (megatron -> megatron-core, deepspeed -> megatron-deepspeed, torchtitan ->
    torchtitan), so that a plan for a framework is costed and restricted as that framework runs it."""
    from parplan.stacks.presets import DEFAULT_STACK, load_stack, stack_names

    base = framework.partition("@")[0].lower()
    for name in stack_names():
        exporter = load_stack(name).runs.exporter
        if exporter is not None and exporter.partition("@")[0] == base:
            return name
    return DEFAULT_STACK

