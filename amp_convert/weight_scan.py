"""The range stats of many weights at once, a chunk at a time on every core.

weight_range.scan sums a weight's stats chunk by chunk in order; here each chunk of
SCAN_CHUNK elements is scanned apart, on the chunk pool, and the chunks of a weight are summed in
the same order, so the stats (and every verdict and report line built from them) are the ones a
single scan gives. An external weight is read a chunk at a time (pread), never mapped whole:
memory holds a few chunks whatever the size of the weights.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import onnx_ir as ir

from amp_convert import chunk_pool
from amp_convert.tensors import chunkable, read, read_chunk, release
from amp_convert.weight_range import LIMITS, SCAN_CHUNK, RangeStats, scan

#: one job: (index of the weight, first element, end element); (i, 0, -1) reads it whole
_Job = tuple[int, int, int]


def range_stats(tensors: Sequence[ir.TensorProtocol], low: ir.DataType) -> list[RangeStats]:
    """weight_range.scan of each tensor's values against `low`'s limits, in tensor order.

    A read that fails raises read()'s one-line error of the first such tensor in order.
    """
    limits = LIMITS[low]
    local = threading.local()

    def run(job: _Job) -> RangeStats:
        index, start, stop = job
        tensor = tensors[index]
        if stop < 0:  # not rangeable (a lazy tensor...): read whole, as check_weight is given
            stats = scan(read(tensor), limits)
            release(tensor)
            return stats
        buffer = getattr(local, "buffer", None)
        if buffer is None:
            buffer = local.buffer = bytearray(SCAN_CHUNK * 4)
        return scan(read_chunk(tensor, start, stop, buffer), limits)

    def run_batch(batch: list[_Job]) -> list[tuple[int, RangeStats]]:
        return [(job[0], run(job)) for job in batch]

    totals = [RangeStats() for _ in tensors]
    work = chunk_pool.batches(_jobs(tensors), lambda job: _elements(tensors, job), SCAN_CHUNK)
    for results in chunk_pool.ordered_map(run_batch, work, threads=chunk_pool.workers()):
        for index, stats in results:  # each weight's chunks in order: scan's own sum
            totals[index] = totals[index] + stats
    return totals


def _elements(tensors: Sequence[ir.TensorProtocol], job: _Job) -> int:
    index, start, stop = job
    return tensors[index].size if stop < 0 else stop - start


def _jobs(tensors: Sequence[ir.TensorProtocol]) -> Iterator[_Job]:
    for index, tensor in enumerate(tensors):
        if not chunkable(tensor):
            yield index, 0, -1
            continue
        size = tensor.size
        for start in range(0, max(size, 1), SCAN_CHUNK):
            yield index, start, min(start + SCAN_CHUNK, size)
