"""Pool layouts as numpy arrays: the form every serving formula takes, one entry per deployment, so that
`serve explain` (one layout) and `serve plan` (millions) run the very same code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from parplan.names import A2A_BACKENDS
from parplan.serving.spec import Pool


@dataclass(frozen=True, slots=True)
class PoolArrays:
    """The layouts of one pool (one entry per deployment); integers stored as floats for the arithmetic."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    moe_tp: np.ndarray
    moe_ep: np.ndarray
    workers: np.ndarray
    batch: np.ndarray
    """Max running requests per attention rank; inf = as many as the KV cache holds."""
    redundant: np.ndarray
    a2a: np.ndarray
    """Index into A2A_BACKENDS."""

    @classmethod
    def from_pools(cls, pools: Sequence[Pool]) -> PoolArrays:
        def col(get) -> np.ndarray:  # type: ignore[no-untyped-def]
            return np.array([get(p) for p in pools], dtype=float)

        return cls(
            tp=col(lambda p: p.tp), pp=col(lambda p: p.pp), dp=col(lambda p: p.dp),
            moe_tp=col(lambda p: p.moe_tp), moe_ep=col(lambda p: p.moe_ep), workers=col(lambda p: p.workers),
            batch=col(lambda p: np.inf if p.batch is None else p.batch),
            redundant=col(lambda p: p.redundant_experts),
            a2a=np.array([A2A_BACKENDS.index(p.a2a) for p in pools]),
        )

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, index: np.ndarray) -> PoolArrays:
        return PoolArrays(*(getattr(self, f.name)[index] for f in fields(self)))

    @property
    def gpus(self) -> np.ndarray:
        """GPUs of one worker."""
        return self.tp * self.pp * self.dp

    @property
    def stage_gpus(self) -> np.ndarray:
        """GPUs of one pipeline stage of a worker: the MoE group."""
        return self.tp * self.dp

    def pool(self, i: int) -> Pool:
        """Entry i back as a Pool."""
        return Pool(tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]), moe_tp=int(self.moe_tp[i]),
                    moe_ep=int(self.moe_ep[i]), workers=int(self.workers[i]),
                    batch=None if np.isinf(self.batch[i]) else int(self.batch[i]),
                    redundant_experts=int(self.redundant[i]), a2a=A2A_BACKENDS[int(self.a2a[i])])
