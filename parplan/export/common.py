"""Pieces every exporter shares: the `Launch` result, framework support rules and shell rendering.

A support rule says what a framework cannot express. It is written once, vectorised over
`parplan.planner.strategy.Layouts`, so the planner can filter a whole batch (`plan --framework F`) with the
very predicate that makes `export` refuse a single layout; the single layout is checked as a 1-element batch.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from parplan.hardware.spec import ClusterSpec
from parplan.models.spec import ModelSpec
from parplan.planner.strategy import DISPATCHERS, RECOMPUTE, SCHEDULES, Layouts, Strategy


@dataclass(frozen=True, slots=True)
class Launch:
    """Launch settings for one framework: the files to write and the caveats to read first."""

    framework: str
    """One of `parplan.export.FRAMEWORKS`."""
    files: dict[str, str]
    """File name -> text, in the order they should be read."""
    notes: tuple[str, ...] = ()
    """Caveats: what the files cannot say, or what must be set elsewhere."""

    def as_dict(self) -> dict[str, object]:
        return {"framework": self.framework, "files": self.files, "notes": list(self.notes)}

    @property
    def text(self) -> str:
        """All files with `==> name <==` headers (as `tail` prints them), then the notes."""
        parts = [f"==> {name} <==\n{body.rstrip()}\n" for name, body in self.files.items()]
        if self.notes:
            parts.append("==> notes <==\n" + "".join(f"- {note}\n" for note in self.notes))
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class Target:
    """One framework version an exporter writes launch settings for, each with its own support rules."""

    key: str
    """What follows '@' in a framework name (``torchtitan@0.3.0``), e.g. "core_v0.16.1", "0.3.0", "HEAD"."""
    label: str
    """The version as exported files' headers name it, with the release tag or commit checked."""


@dataclass(frozen=True, slots=True)
class Known:
    """What a support rule may read beside the layouts; None where the caller does not know it, and a rule
    that needs it then passes every layout."""

    model: ModelSpec | None = None
    gpus: int | None = None

    def microbatches(self, lay: Layouts) -> np.ndarray | None:
        """Micro-batches per pipeline and step, or None without the GPU count."""
        return None if self.gpus is None else lay.microbatches(self.gpus)


@dataclass(frozen=True, slots=True)
class Support:
    """One layout feature a framework cannot express."""

    name: str
    ok: Callable[[Layouts, Known], np.ndarray]
    """True where the framework can run the layout."""
    why: Callable[[Strategy], str]
    """Reason shown for a layout that fails `ok`."""
    targets: tuple[str, ...] = ()
    """Keys of the framework versions (`Target.key`) that refuse the layout; empty: every version."""

    def applies(self, targets: Iterable[Target]) -> bool:
        return not self.targets or any(t.key in self.targets for t in targets)


def is_dispatch(lay: Layouts, *names: str) -> np.ndarray:
    """True where the layout uses one of the named MoE dispatchers."""
    return np.isin(lay.dispatch, [DISPATCHERS.index(n) for n in names])


def is_recompute(lay: Layouts, *names: str) -> np.ndarray:
    return np.isin(lay.recompute, [RECOMPUTE.index(n) for n in names])


def megatron_recompute_flags(recompute: str, blocks: float | None = None) -> list[Flag]:
    """Megatron-LM's flags for selective (attention core) and full (every layer, one at a time) recompute, or
    full recompute of `blocks` layers per model chunk (blocks:F); Megatron-DeepSpeed kept the same names."""
    if recompute == "selective":
        return [("--recompute-granularity", "selective")]
    if recompute == "full" and blocks is not None:
        return [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                ("--recompute-num-layers", str(round(blocks)))]
    if recompute == "full":
        return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    return []


def no_redundant_experts(name: str) -> Support:
    """The rule every exporter shares: EPLB replicas exist in DeepSeek's own training stack and in inference
    engines, not in the frameworks parplan writes launch settings for."""
    return Support("no_redundant_experts", lambda lay, c: lay.redundant_experts == 0,
                   lambda s: "redundant experts (EPLB replicas) exist in DeepSeek's own training stack and in "
                             f"inference engines; {name} trains each expert once: set redundant_experts 0")


def recomputed_blocks(model: ModelSpec, s: Strategy) -> float:
    """Blocks per model chunk that a blocks:F recompute setting recomputes (F × layers / (pp·vpp))."""
    return s.recompute_blocks * model.layers / (s.pp * s.vpp)


def whole_block_count(name: str) -> Support:
    """Megatron's --recompute-method block recomputes a whole number of layers per model chunk: blocks:F must
    come to one."""
    def ok(lay: Layouts, c: Known) -> np.ndarray:
        if c.model is None:
            return np.ones(len(lay), dtype=bool)
        n = lay.recompute_blocks * c.model.layers / (lay.pp * lay.vpp)
        return (lay.recompute_blocks >= 1.0) | (np.abs(n - np.round(n)) < 1e-9)
    return Support("whole_block_count", ok,
                   lambda s: f"{name}'s --recompute-method block recomputes a whole number of layers per stage: "
                             f"recompute blocks:{s.recompute_blocks:g} must be a multiple of 1/(layers per stage)")


def is_schedule(lay: Layouts, *names: str) -> np.ndarray:
    """True where the layout uses one of the named pipeline schedules."""
    return np.isin(lay.schedule, [SCHEDULES.index(n) for n in names])


def supported_mask(rules: Iterable[Support], lay: Layouts, known: Known) -> np.ndarray:
    ok = np.ones(len(lay), dtype=bool)
    for rule in rules:
        # Not in place: the search passes Layouts whose fields broadcast against each other (one axis each),
        # and the mask then widens to the axes the rules read.
        ok = ok & np.asarray(rule.ok(lay, known), dtype=bool)
    return ok


def first_unsupported(rules: Iterable[Support], strategy: Strategy, known: Known) -> str | None:
    """Reason of the first rule the layout breaks, or None; a rule of some versions only names them."""
    lay = Layouts.from_strategies([strategy])
    for rule in rules:
        if not bool(np.asarray(rule.ok(lay, known))[0]):
            return rule.why(strategy) + (f" ({', '.join(rule.targets)})" if rule.targets else "")
    return None


def versions(targets: Iterable[Target]) -> str:
    """ "A, B and C": the versions a file is written for, as its header names them."""
    labels = [t.label for t in targets]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def describe(model: ModelSpec, cluster: ClusterSpec, s: Strategy) -> str:
    """One-line summary of the layout for file headers."""
    return (f"{model.name} on {cluster.gpus} x {cluster.gpu.name}: {s.describe(cluster.gpus)} "
            f"({s.microbatches(cluster.gpus)} micro-batches)")


Flag = tuple[str, ...]
"""One command-line argument: ("--flag",) or ("--flag", "value")."""


def shell_array(variable: str, flags: Iterable[Flag], header: Iterable[str], usage: str) -> str:
    """A bash array of arguments, one flag per line, values quoted for the shell."""
    lines = [f"# {line}" for line in header]
    lines.append(f"{variable}=(")
    lines += ["  " + " ".join(shlex.quote(token) for token in flag) for flag in flags]
    lines.append(")")
    lines.append(f"# {usage}")
    return "\n".join(lines) + "\n"
