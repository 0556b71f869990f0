"""The range stats of many weights at once, a chunk at a time on every core.

weight_range.scan sums a weight's stats chunk by chunk in order; here each chunk of
SCAN_CHUNK elements is scanned apart, on the chunk pool, and the chunks of a weight are summed in
the same order, so the stats (and every verdict and report line built from them) are the ones a
single scan gives. An external weight is read a chunk at a time (pread), never mapped whole:
memory holds a few chunks whatever the size of the weights.

The weights are scanned last to first: the save then reads them first to last, so a model bigger
than the page cache finds its first part still cached (scanned first to last, the save would meet
the part the scan read longest ago, evicted). A failed read does not stop the scan: the error
raised is that of the first failing weight in order, as a scan first to last would meet it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import numpy as np
import onnx_ir as ir

from amp_convert.core import chunk_pool
from amp_convert.core.dtypes import low_type_of
from amp_convert.core.tensors import chunkable, read, read_chunk, release
from amp_convert.core.weight_range import SCAN_CHUNK, RangeStats, scan
from amp_convert.errors import AmpConvertError

#: one job: (index of the weight, first element, end element); (i, 0, -1) reads it whole
_Job = tuple[int, int, int]


def range_stats(tensors: Sequence[ir.TensorProtocol], low: ir.DataType) -> list[RangeStats]:
    """weight_range.scan of each tensor's values against `low`'s limits, in tensor order.

    A read that fails raises read()'s one-line error of the first such tensor in order (once
    every tensor was tried).
    """
    limits = low_type_of(low)
    local = threading.local()

    def run(job: _Job) -> RangeStats:
        index, start, stop = job
        tensor = tensors[index]
        if stop < 0:  # not rangeable (a lazy tensor...): read whole, as check_weight is given
            stats = scan(read(tensor), limits)
            release(tensor)
            return stats
        nbytes = (stop - start) * int(tensor.dtype.itemsize)
        buffer = chunk_pool.thread_buffer(local, nbytes, SCAN_CHUNK * 4)
        values = read_chunk(tensor, start, stop, buffer)
        # a range read into the worker's buffer may be overwritten; a mapped one is the page
        # cache's (read-only): its magnitudes go into the buffer
        scratch = isinstance(tensor, ir.ExternalTensor) and values.flags.writeable
        fits = not scratch and len(buffer) >= values.nbytes
        work = np.frombuffer(buffer, values.dtype, count=values.size) if fits else None
        return scan(values, limits, scratch=scratch, work=work)

    def run_batch(batch: list[_Job]) -> list[tuple[int, RangeStats | AmpConvertError]]:
        results: list[tuple[int, RangeStats | AmpConvertError]] = []
        for job in batch:
            try:
                results.append((job[0], run(job)))
            except AmpConvertError as e:  # kept: an earlier weight may fail too (see module)
                results.append((job[0], e))
        return results

    totals = [RangeStats() for _ in tensors]
    failed: dict[int, AmpConvertError] = {}
    work = chunk_pool.batches(_jobs(tensors), lambda job: _elements(tensors, job), SCAN_CHUNK)
    threads = chunk_pool.workers_for(sum(t.size for t in tensors))
    for results in chunk_pool.ordered_map(run_batch, work, threads=threads):
        for index, stats in results:  # each weight's chunks in order: scan's own sum
            if isinstance(stats, AmpConvertError):
                failed.setdefault(index, stats)
            else:
                totals[index] = totals[index] + stats
    if failed:
        raise failed[min(failed)]
    return totals


def _elements(tensors: Sequence[ir.TensorProtocol], job: _Job) -> int:
    index, start, stop = job
    return tensors[index].size if stop < 0 else stop - start


def _jobs(tensors: Sequence[ir.TensorProtocol]) -> Iterator[_Job]:
    """The chunks of the weights, last weight first (each weight's own chunks in order)."""
    for index in reversed(range(len(tensors))):
        tensor = tensors[index]
        if not chunkable(tensor):
            yield index, 0, -1
            continue
        size = tensor.size
        for start in range(0, max(size, 1), SCAN_CHUNK):
            yield index, start, min(start + SCAN_CHUNK, size)
