"""Library entry points around the search: `plan(...)`, option parsing and plan comparison."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from parplan.errors import ConfigError
from parplan.hardware import ClusterSpec, load_cluster
from parplan.limits import MAX_GPUS, SPEC_VALUES
from parplan.models import ModelSpec, load_model
from parplan.planner.estimate import TIME_COMPONENTS, Estimate
from parplan.planner.search import SearchSpace, plan_or_raise
from parplan.planner.strategy import DISPATCHERS, PRECISIONS, RECOMPUTE, SCHEDULES
from parplan.stacks import StackSpec, load_stack


def parse_int_spec(text: str | int | tuple[int, ...] | None, name: str, least: int = 1,
                   most: int = MAX_GPUS) -> tuple[int, ...] | None:
    """'8' -> (8,), '1,3' -> (1, 3), '1..16' -> every integer 1..16; an int or tuple passes through. Every
    value must lie in least..most and a range may hold at most SPEC_VALUES values: a ConfigError naming
    `name` otherwise."""
    if text is None:
        return None
    if isinstance(text, int | tuple):
        values = (text,) if isinstance(text, int) else text
    else:
        try:
            if ".." in text:
                lo, hi = (int(x) for x in text.split("..", 1))
                if hi - lo >= SPEC_VALUES:
                    raise ConfigError(f"the range {text} holds {hi - lo + 1:,} values; at most {SPEC_VALUES:,}",
                                      field=name)
                values = tuple(range(lo, hi + 1))
            else:
                values = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise ConfigError(f"expected a value, a list (1,2,4) or a range (1..16), got {text!r}",
                              field=name) from None
    if not values:
        raise ConfigError(f"no value in {text!r}", field=name)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not least <= v <= most:
            raise ConfigError(f"every value must be an integer in {least}..{most:,}, got {v!r}", field=name)
    return values


def parse_doubling_spec(text: str, parse: Callable[[str], int] = int) -> list[int]:
    """'256..4096' (the first value doubled until the last), '8,16,64', or '512'; `parse` reads one value.
    Raises ValueError on a malformed value or a range that does not start at a positive value."""
    if ".." in text:
        lo, hi = (parse(x) for x in text.split("..", 1))
        if lo < 1:
            raise ValueError(f"a doubling range starts at a positive value, got {lo}")
        out = []
        while lo <= hi:
            out.append(lo)
            lo *= 2
        return out
    return [parse(x) for x in text.split(",") if x.strip()]


def _choices(text: str | tuple[str, ...] | None, options: tuple[str, ...], name: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    values = tuple(x.strip() for x in text.split(",")) if isinstance(text, str) else tuple(text)
    for v in values:
        if v not in options:
            raise ConfigError(f"unknown value {v!r}; choose from {', '.join(options)}", field=name)
    return values


def _cap(values: tuple[int, ...] | None, bound: int | None, name: str) -> tuple[int, ...] | None:
    """`values` (every value when None) up to `bound`, which may be at most SPEC_VALUES."""
    if bound is None:
        return values
    if not 1 <= bound <= SPEC_VALUES:
        raise ConfigError(f"must lie in 1..{SPEC_VALUES:,}, got {bound}", field=f"max_{name}")
    return tuple(v for v in (values or range(1, bound + 1)) if v <= bound)


def space_from_options(*, tp=None, pp=None, cp=None, ep=None, etp=None, vpp=None, zero=None, mbs=None, max_tp=None,
                       max_pp=None, max_cp=None, max_ep=None, sp=None, recompute=None, schedule=None,
                       precision="bf16", dispatch=None, redundant_experts=None,
                       ep_overlap=None, max_memory_fraction: float = 1.0) -> SearchSpace:
    """A SearchSpace from CLI-style values: ints, lists '1,2' or ranges '1..16', and max_* bounds; a value out
    of range is a ConfigError naming the option (the CLI reports it as a usage error)."""
    if not (isinstance(max_memory_fraction, int | float) and 0.1 <= max_memory_fraction <= 1):
        raise ConfigError(f"must lie in 0.1..1, got {max_memory_fraction!r}", field="max_memory_fraction")
    fields: dict[str, object] = {
        "tp": _cap(parse_int_spec(tp, "tp"), max_tp, "tp"), "pp": _cap(parse_int_spec(pp, "pp"), max_pp, "pp"),
        "cp": _cap(parse_int_spec(cp, "cp"), max_cp, "cp"), "ep": _cap(parse_int_spec(ep, "ep"), max_ep, "ep"),
        "etp": parse_int_spec(etp, "etp"), "vpp": parse_int_spec(vpp, "vpp"), "mbs": parse_int_spec(mbs, "mbs"),
        "max_memory_fraction": max_memory_fraction,
    }
    z = parse_int_spec(zero, "zero", least=0, most=3)
    if z is not None:
        fields["zero"] = z
    for name, value in (("sp", sp), ("ep_overlap", ep_overlap)):
        if value is None:
            continue
        if value not in ("on", "off", True, False):
            raise ConfigError("expected on or off", field=name)
        fields[name] = (value in ("on", True),)
    r = parse_int_spec(redundant_experts, "redundant_experts", least=0)
    if r is not None:
        fields["redundant_experts"] = r
    for key, text, options in (("recompute", recompute, RECOMPUTE), ("schedule", schedule, SCHEDULES),
                               ("precision", precision, PRECISIONS), ("dispatch", dispatch, DISPATCHERS)):
        values = _choices(text, options, key)
        if values is not None:
            fields[key] = values
    return SearchSpace(**fields)


def plan(model: ModelSpec | str | Path, cluster: ClusterSpec | str | Path, *, gpus: int, gbs: int, seq: int = 4096,
         objective: str = "throughput", top: int = 5, stack: StackSpec | str | Path | None = None,
         compile: bool | None = None, **constraints) -> list[Estimate]:
    """Ranked plans (best first) for `model` on `gpus` GPUs of `cluster`, as the estimates `evaluate` returns:
    only the layouts `stack` can run (a preset name, a stack file or a StackSpec; default megatron-core),
    costed as it runs them, with torch.compile on or off (`compile`; None: the stack's default).

    constraints: any SearchSpace restriction in CLI form, e.g. tp=8, pp="1..16", max_tp=8, zero="1,3",
    schedule="1f1b,interleaved", precision="bf16,fp8", max_memory_fraction=0.9.
    Raises NoFeasiblePlanError when nothing fits.
    """
    space = space_from_options(**constraints)
    result = plan_or_raise(load_model(model), load_cluster(cluster, gpus=gpus), gbs=gbs, seq=seq, space=space,
                           objective=objective, top=top, stack=load_stack(stack, compile=compile))
    return result.plans


def why_better(best: Estimate, other: Estimate, other_name: str = "the runner-up") -> str:
    """One or two sentences on why `best` beats `other` (called `other_name`), from their breakdowns."""
    gain = best.tokens_per_s_per_gpu / other.tokens_per_s_per_gpu - 1
    deltas = sorted(((other.time_breakdown[c]["exposed"] - best.time_breakdown[c]["exposed"], c)
                     for c in TIME_COMPONENTS), reverse=True)
    diff = [f"{k}: {getattr(best.strategy, k)} vs {getattr(other.strategy, k)}"
            for k in (f.name for f in dataclasses.fields(best.strategy))
            if getattr(best.strategy, k) != getattr(other.strategy, k)]
    if gain < 1e-3:
        return (f"The top layouts tie within 0.1% ({', '.join(diff) or 'same layout'}); the first is listed first "
                "for needing less memory or fewer parallel dimensions.")
    saved, comp = deltas[0]
    text = (f"The winner is {gain:.1%} faster than {other_name} ({', '.join(diff) or 'same layout'}): "
            f"its {comp.replace('_', ' ')} is {saved:.3f} s shorter per step "
            f"({best.time_breakdown[comp]['exposed']:.3f} vs {other.time_breakdown[comp]['exposed']:.3f} s)")
    lost, worse = deltas[-1]
    if lost < -1e-6:
        text += (f", while its {worse.replace('_', ' ')} is {-lost:.3f} s longer")
    if abs(best.required_gib - other.required_gib) > 0.05:
        text += f"; it needs {best.required_gib:.1f} GiB against {other.required_gib:.1f}"
    return text + "."
