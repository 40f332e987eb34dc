"""Where a search's tasks run: forked workers for large spaces, else in-process.

A worker inherits the search it runs at fork (_STATE), so that only small arrays travel back and forth.
Workers ignore Ctrl-C: the parent, waiting for results in short slices so that Ctrl-C reaches it at once,
stops them and reports the interruption once (_Runner). _split shares the survey's cells among the workers.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import threading
from collections.abc import Callable

import numpy as np

PARALLEL_MIN = 1 << 25
"""Below this many candidate layouts (before the rules), the search runs in-process: forking workers, and each
evaluating its own share of the compute, costs more than it saves (llama3.1-405b on 16,384 GPUs, 2.6 M
candidates, is faster in-process on 2 cores; DeepSeek-V3 on 2,048, 860 M, is not)."""


TEARDOWN_SECONDS = 2.0
"""Longest wait for the pool's teardown (_Runner.close): far above the milliseconds it takes when it ends."""

_STATE: dict[str, object] = {}
"""The search a forked worker runs (inherited at fork; only small arrays travel back and forth)."""


def _split(weights: np.ndarray, parts: int) -> list[list[int]]:
    """Indices split into `parts` groups of about equal weight (heaviest first, greedily)."""
    out: list[list[int]] = [[] for _ in range(parts)]
    load = [0.0] * parts
    for i in np.argsort(-weights, kind="stable"):
        j = load.index(min(load))
        out[j].append(int(i))
        load[j] += float(weights[i])
    return [g for g in out if g]


class _Runner:
    """Runs survey and costing tasks in forked workers (or in-process) and hands back results as they come."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool = None
        self.slots = 1
        """Tasks in flight: one per worker (or in-process), so that every task starts from the latest limit;
        the parent merges a result and hands out the next task in far less time than a task takes."""
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.pending = 0

    def start(self) -> None:
        """Fork the workers (where there are several and the platform forks); call it inside the try whose
        finally calls close(). Ctrl-C is held back while the pool is built: one landing there interrupted a
        multiprocessing finaliser half-made (CPython's Pool cleans up after Exception, not KeyboardInterrupt),
        which printed 'Exception ignored in: <Finalize object, dead>' with a traceback under load; held, it
        arrives once the pool exists, and close() stops it."""
        if self.workers <= 1 or "fork" not in mp.get_all_start_methods():
            return
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            # Workers ignore Ctrl-C: the parent stops them (terminate) and reports the interruption once.
            self.pool = mp.get_context("fork").Pool(self.workers, initializer=signal.signal,
                                                    initargs=(signal.SIGINT, signal.SIG_IGN))
            self.slots = self.workers
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def submit(self, fn: Callable, arg: object) -> None:
        self.pending += 1
        if self.pool is None:
            self.results.put(fn(arg))
        else:
            self.pool.apply_async(fn, (arg,), callback=self.results.put, error_callback=self.results.put)

    def next(self) -> object:
        """The next finished task's result (re-raising a worker's exception)."""
        while True:
            try:
                out = self.results.get(timeout=0.1)  # a short wait keeps Ctrl-C responsive
            except queue.Empty:
                continue
            self.pending -= 1
            if isinstance(out, BaseException):
                raise out
            return out

    def close(self) -> None:
        """Stop the workers. Pool.terminate() kills them, then joins the thread that reads their results; a worker
        killed while it was writing a result (Ctrl-C mid-search) leaves that thread waiting for good for the rest
        of the message (CPython's Pool: one Ctrl-C in about fifty near a search's end hung so). The workers are
        gone by then, so the wait is bounded, and the reader, a daemon thread, goes with the process."""
        if self.pool is None:
            return
        closer = threading.Thread(target=self.pool.terminate, daemon=True)
        closer.start()
        closer.join(TEARDOWN_SECONDS)
        if not closer.is_alive():
            self.pool.join()
