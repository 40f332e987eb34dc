"""Collective benchmark: launches `_comm_worker` under torchrun and reads rank 0's results.

One node: ``run_comm(...)`` starts ``--nproc_per_node`` local processes (``--standalone`` rendezvous).
Several nodes: call it on every node with the same arguments and torchrun's multi-node options in
`launcher_args` (e.g. ``["--nnodes=2", "--node_rank=0", "--rdzv_backend=c10d",
"--rdzv_endpoint=host0:29500"]``); the node that holds global rank 0 gets the samples, the others [].

Backends: NCCL on GPUs; gloo on CPUs, for functional checks only (its timings describe the host's
loopback, never a GPU fabric, ``reference/hardware.md`` §5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import parplan
from parplan.hardware.bench import BenchmarkError, require_torch
from parplan.hardware.efficiency import Collective
from parplan.hardware.samples import CollectiveSample

COMM_COLLECTIVES = tuple(c.value for c in Collective)
"""What `run_comm` measures: the cost model's `Collective` values."""
GPU_SIZES = tuple(1 << p for p in range(10, 31))
"""1 KiB .. 1 GiB in powers of two, the nccl-tests sweep the fits expect."""
CPU_SIZES = (1 << 10, 1 << 13, 1 << 16, 1 << 19)
"""1 KiB .. 512 KiB: gloo on a small host; enough to exercise every code path."""


def run_comm(collectives: Sequence[str] = ("all_reduce", "all_gather"), sizes: Sequence[int] | None = None, *,
             nproc_per_node: int | None = None, backend: str | None = None, dtype: str = "fp32",
             iters: int = 20, warmup: int = 5, launcher_args: Sequence[str] = (),
             timeout_s: float = 600.0) -> list[CollectiveSample]:
    """Measure `collectives` at message `sizes` (nccl-tests S convention) over torchrun processes.

    backend: 'nccl' when a GPU is visible, else 'gloo'; nproc_per_node: the visible GPUs with NCCL, 2 with
    gloo; sizes: `GPU_SIZES` / `CPU_SIZES`. Raises BenchmarkError when torchrun fails or times out.
    """
    torch = require_torch()
    unknown = [c for c in collectives if c not in COMM_COLLECTIVES]
    if unknown:
        raise BenchmarkError(f"unknown collective(s) {', '.join(unknown)}; known: {', '.join(COMM_COLLECTIVES)}")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    nproc = nproc_per_node or (torch.cuda.device_count() if backend == "nccl" else 2)
    if nproc < 2 and not launcher_args:
        raise BenchmarkError(f"a collective needs 2 or more ranks; this node would start {nproc}")
    sizes = sizes or (GPU_SIZES if backend == "nccl" else CPU_SIZES)
    with tempfile.TemporaryDirectory(prefix="parplan-comm-") as tmp:
        output = Path(tmp) / "results.json"
        command = [sys.executable, "-m", "torch.distributed.run", *(launcher_args or ["--standalone"]),
                   "--nproc_per_node", str(nproc), "-m", "parplan.hardware.bench._comm_worker",
                   "--backend", backend, "--dtype", dtype, "--iters", str(iters), "--warmup", str(warmup),
                   "--output", str(output), "--collectives", *collectives, "--sizes", *map(str, sizes)]
        _launch(command, timeout_s)
        if not output.exists():
            return []  # global rank 0 ran on another node
        data = json.loads(output.read_text())
    if data["skipped"]:
        # A collective the backend lacks does not spoil the others' measurements.
        warnings.warn("parplan bench comm skipped " + "; ".join(data["skipped"]), stacklevel=2)
    source = f"parplan bench comm ({backend}, torch {data['torch_version']})"
    return [CollectiveSample(**row, source=source) for row in data["results"]]


def _launch(command: list[str], timeout_s: float) -> None:
    """Run torchrun; the workers import the same parplan as this process, installed or not."""
    env = dict(os.environ)
    root = str(Path(parplan.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    # One thread per rank: ranks share the host's cores (torchrun would set it too, with a warning).
    env.setdefault("OMP_NUM_THREADS", "1")
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"torchrun did not finish within {timeout_s:.0f} s: {' '.join(command)}") from None
    if proc.returncode:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise BenchmarkError(f"torchrun exited with {proc.returncode}: {' '.join(command)}\n{tail}")
