"""Chunks of weights worked on every core, with a bound on how many are in flight.

Reading a chunk (pread), rounding it (numpy) and writing it (pwrite) all release the GIL, so
plain threads use every core and overlap the disk with the arithmetic. `ordered_map` hands the
results back in job order with at most `in_flight` jobs submitted and not yet handed back: memory
stays at a few chunks whatever the model's size, and an error is the one a serial loop would
meet first (the first failing job in order), raised only after every running job has stopped.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from amp_convert.errors import OptionError

J = TypeVar("J")
R = TypeVar("R")

#: more threads than this would hold more chunks in memory than the 1 GB the save promises
MAX_WORKERS = 8
#: elements per chunk (16 MiB of FP32): big enough for numpy to run at memory speed
CHUNK = 1 << 22


def workers() -> int:
    """Threads for the weight work: AMP_CONVERT_THREADS when set, else the usable cores (<= 8)."""
    text = os.environ.get("AMP_CONVERT_THREADS")
    if text:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise OptionError(f"AMP_CONVERT_THREADS={text!r}: expected a whole number >= 1")
        return value
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def workers_for(elements: int) -> int:
    """Threads for `elements` of weight work: one when it all fits in a chunk (a pool's threads
    would cost more than they save: most models under 20 MB), else `workers()`."""
    threads = workers()  # an AMP_CONVERT_THREADS mistake is said whatever the size
    return 1 if elements <= CHUNK else threads


def thread_buffer(local: threading.local, nbytes: int, cap: int) -> bytearray:
    """The calling worker's reusable buffer (``local.buffer``), at least ``min(nbytes, cap)``
    bytes: grown on demand (doubling, up to `cap`), never shrunk.

    Made chunk-sized up front, it cost every conversion 12-16 ms: ``bytearray`` zero-fills, and
    16 MiB is 4096 pages touched, for models whose weights are a few KB.
    """
    buffer: bytearray | None = getattr(local, "buffer", None)
    have = 0 if buffer is None else len(buffer)
    if buffer is None or have < min(nbytes, cap):
        buffer = local.buffer = bytearray(min(cap, max(nbytes, 2 * have)))
    return buffer


def batches(items: Iterable[J], size: Callable[[J], int], limit: int) -> Iterator[list[J]]:
    """Consecutive `items` grouped while their sizes add up to less than `limit` (an item of
    `limit` or more is a batch of its own): one pool job per batch spares small weights the
    pool's per-job cost, and a batch holds about a chunk's worth at most."""
    batch: list[J] = []
    total = 0
    for item in items:
        n = size(item)
        if batch and total + n > limit:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += n
    if batch:
        yield batch


def ordered_map(
    fn: Callable[[J], R], jobs: Iterable[J], *, threads: int, in_flight: int | None = None
) -> Generator[R, None, None]:
    """fn(job) for every job on `threads` threads, yielded in job order.

    At most `in_flight` (default 2 x threads) jobs are submitted and not yet yielded; the next
    job is taken from `jobs` only when one is handed back. With one thread nothing is threaded.
    On an error, or when the caller stops iterating, the jobs not started are cancelled and
    the running ones finished before the error propagates, so no worker outlives the call.
    """
    if threads <= 1:
        for job in jobs:
            yield fn(job)
        return
    limit = max(1, in_flight if in_flight is not None else 2 * threads)
    pending: collections.deque[Future[R]] = collections.deque()
    source = iter(jobs)
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="amp-chunk")
    try:
        for job in source:
            pending.append(pool.submit(fn, job))
            if len(pending) >= limit:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
