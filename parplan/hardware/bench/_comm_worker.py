"""One rank of `parplan bench comm`, run under torchrun (``python -m torch.distributed.run ... -m
parplan.hardware.bench._comm_worker``); rank 0 writes the results as JSON to ``--output``.

Method (nccl-tests' BenchTime, ``reference/hardware.md`` §2.1 and §5): for each collective and size,
`--warmup` untimed calls (NCCL sets up channels and NVLS groups lazily on first use), a barrier, then
`--iters` calls back to back and one synchronisation; time per call = elapsed / iters, measured with
CUDA events on GPUs and ``time.perf_counter`` on CPUs, then the maximum over ranks (the collective is
done when the slowest rank is). Message sizes S follow nccl-tests (see `CollectiveSample.size_bytes`):
per-rank chunks are whole elements, so S is rounded down to a multiple of ranks × element size for
all_gather / reduce_scatter / all_to_all; sizes below one element per rank are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from parplan.hardware.bench import torch_dtype
from parplan.hardware.samples import busbw_factor


def _op(collective: str, size: int, elem: torch.dtype, device: torch.device) -> tuple[Callable[[], None], int] | None:
    """(one call of the collective, actual S in bytes) for requested size S; None if S is too small."""
    n, rank = dist.get_world_size(), dist.get_rank()
    width = torch.empty((), dtype=elem).element_size()
    chunk = size // (n * width)  # elements per rank for the split collectives
    count = size // width
    # Zeros stay zeros under repeated sums: no overflow to inf whatever the iteration count.
    if collective == "all_reduce" and count:
        buf = torch.zeros(count, dtype=elem, device=device)
        return (lambda: dist.all_reduce(buf)), count * width
    if collective == "all_gather" and chunk:
        # torch >= 2.13 names it all_gather_single; older releases all_gather_into_tensor.
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        inp, out = torch.zeros(chunk, dtype=elem, device=device), torch.empty(n * chunk, dtype=elem, device=device)
        return (lambda: gather(out, inp)), n * chunk * width
    if collective == "reduce_scatter" and chunk:
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        inp, out = torch.zeros(n * chunk, dtype=elem, device=device), torch.empty(chunk, dtype=elem, device=device)
        return (lambda: scatter(out, inp)), n * chunk * width
    if collective == "all_to_all" and chunk:
        # all_to_all_single works on gloo where the list form did not (pytorch#88245).
        inp, out = torch.zeros(n * chunk, dtype=elem, device=device), torch.empty(n * chunk, dtype=elem, device=device)
        return (lambda: dist.all_to_all_single(out, inp)), n * chunk * width
    if collective == "send_recv" and count:
        # nccl-tests sendrecv: a ring, every rank sends S to the next and receives S from the previous.
        send, recv = torch.zeros(count, dtype=elem, device=device), torch.empty(count, dtype=elem, device=device)

        def ring() -> None:
            ops = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return ring, count * width
    return None


def _seconds_per_call(fn: Callable[[], None], device: torch.device, iters: int, warmup: int) -> float:
    """Time of one call averaged over `iters` back-to-back calls, maximum over ranks."""
    cuda = device.type == "cuda"
    for _ in range(warmup):
        fn()
    dist.barrier()
    if cuda:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize(device)
        seconds = start.elapsed_time(end) * 1e-3 / iters
    else:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        seconds = (time.perf_counter() - t0) / iters
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def _measure(args: argparse.Namespace, device: torch.device) -> tuple[list[dict[str, Any]], list[str]]:
    """Result rows (CollectiveSample fields but source) and reasons for skipped collectives."""
    n = dist.get_world_size()
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", n))
    elem = torch_dtype(args.dtype)
    rows, skipped = [], []
    for collective in args.collectives:
        for size in args.sizes:
            op = _op(collective, size, elem, device)
            if op is None:
                continue
            fn, nbytes = op
            try:
                seconds = _seconds_per_call(fn, device, args.iters, args.warmup)
            except RuntimeError as e:  # a backend without this collective (older gloo): skip, say why
                skipped.append(f"{collective}: {e}")
                break
            algbw = nbytes / seconds / 1e9
            rows.append({"collective": collective, "size_bytes": nbytes, "ranks": n, "ranks_per_node": per_node,
                         "time_us": seconds * 1e6, "algbw_gbps": algbw,
                         "busbw_gbps": algbw * busbw_factor(collective, n), "dtype": args.dtype})
    return rows, skipped


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--collectives", nargs="+", required=True)
    parser.add_argument("--sizes", nargs="+", type=int, required=True, help="message sizes S, bytes")
    parser.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--output", required=True, help="JSON file rank 0 writes")
    args = parser.parse_args(argv)
    if args.backend == "nccl":
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device)  # eager init: communicators exist before timing
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    try:
        rows, skipped = _measure(args, device)
        if dist.get_rank() == 0:
            nccl = ".".join(map(str, torch.cuda.nccl.version())) if args.backend == "nccl" else None
            with open(args.output, "w") as f:
                json.dump({"backend": args.backend, "torch_version": torch.__version__, "nccl_version": nccl,
                           "results": rows, "skipped": skipped}, f)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
