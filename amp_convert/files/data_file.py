"""The external data file of a saved model, written a chunk at a time on every core.

The file is byte for byte the one onnx-ir's ir.save(external_data=...) writes (its layout: the
initializers over the size threshold in model.graphs() order, packed densely); only the way it
is written differs. Each job reads one chunk of a weight (pread of the input's data file) and
rounds it when the weight is stored low (tensors.LowCopy); jobs run on the chunk pool, so every
core rounds and at most a few chunks are in memory whatever the model's size
(chunk_pool.ordered_map). One thread, the caller's, writes them at their offsets (pwrite) in
order, and copies the kept FP32 ranges inside the kernel (copy_file_range): a write holds the
file's inode lock, so writers on several threads only spin on it (13% of the CPU of a 1 GB
conversion on 2 cores went to that spin), while one writer keeps the disk as busy. Only a
tensor that is not read by range and is bigger than a chunk is written by its worker, under the
writer's lock, rather than held until its turn. A failed job stops the others before its error
propagates; the caller (io.save_model) then removes the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from amp_convert.core import chunk_pool, walk
from amp_convert.core.tensors import LowCopy, low_chunks_are_bytes, read_error, release
from amp_convert.files import direct_stream

#: errors after which copy_file_range is replaced by pread + pwrite (another filesystem...)
_NO_KERNEL_COPY = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM, errno.EXDEV}


@dataclass(frozen=True)
class Placed:
    """An initializer whose bytes go to the data file at `offset` (onnx-ir's layout)."""

    value: ir.Value
    tensor: ir.TensorProtocol
    offset: int


@dataclass(frozen=True)
class Job:
    """One write: `tensor`'s elements [start, stop) (bytes for a kept external tensor) at
    file offset `at`; stop < 0: the whole tensor's tobytes()."""

    tensor: ir.TensorProtocol
    at: int
    start: int = 0
    stop: int = -1


def layout(model: ir.Model, threshold: int) -> tuple[list[Placed], list[ir.Value]]:
    """Where ir.save(external_data=..., size_threshold_bytes=threshold) puts each initializer:
    those over `threshold` bytes packed in model.graphs() order, and the smaller external ones
    it reads into memory instead."""
    placed: list[Placed] = []
    inline: list[ir.Value] = []
    offset = 0
    for graph in walk.graphs(model):
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None:
                continue
            if tensor.nbytes > threshold:
                placed.append(Placed(value, tensor, offset))
                offset += tensor.nbytes
            elif isinstance(tensor, ir.ExternalTensor):
                inline.append(value)
    return placed, inline


def jobs(placed: Sequence[Placed]) -> Iterator[Job]:
    """The writes of `placed`, a chunk each where the tensor can be read a range at a time."""
    for p in placed:
        tensor = p.tensor
        if isinstance(tensor, LowCopy) and low_chunks_are_bytes(tensor):
            step, itemsize = chunk_pool.CHUNK, int(tensor.dtype.itemsize)
            for start in range(0, tensor.size, step):
                stop = min(start + step, tensor.size)
                yield Job(tensor, p.offset + start * itemsize, start, stop)
        elif isinstance(tensor, ir.ExternalTensor) and hasattr(os, "pread"):  # bytes as stored
            step = _copy_bytes()
            for start in range(0, tensor.nbytes, step):
                yield Job(tensor, p.offset + start, start, min(start + step, tensor.nbytes))
        else:
            yield Job(tensor, p.offset)


def write(placed: Sequence[Placed], fd: int, threads: int | None = None) -> None:
    """Write the bytes of `placed` into the open file `fd` (sized to fit first): with O_DIRECT
    in file order where the platform allows it and every weight can be read by range
    (direct_stream), else through the page cache."""
    end = max((p.offset + p.tensor.nbytes for p in placed), default=0)
    os.ftruncate(fd, end)
    if threads is None:
        threads = chunk_pool.workers_for(sum(p.tensor.size for p in placed))
    if _dense(placed) and all(_streamable(p.tensor) for p in placed):
        with direct_stream.open_direct(fd, end) as stream:
            if stream is not None:
                _write_direct(placed, stream, threads)
                return
    _write_buffered(placed, fd, threads)


def _dense(placed: Sequence[Placed]) -> bool:
    """Whether the weights follow one another in offset order with no gap (ir.save's layout)."""
    at = 0
    for p in placed:
        if p.offset != at:
            return False
        at += p.tensor.nbytes
    return True


def _streamable(tensor: ir.TensorProtocol) -> bool:
    """Whether the weight's jobs are ranges or a whole tensor small enough to wait its turn."""
    if isinstance(tensor, LowCopy) and low_chunks_are_bytes(tensor):
        return True
    if isinstance(tensor, ir.ExternalTensor) and hasattr(os, "pread"):
        return True
    return tensor.nbytes <= _copy_bytes()


def _write_direct(
    placed: Sequence[Placed], stream: direct_stream.DirectStream, threads: int
) -> None:
    """The jobs' results appended to `stream` in file order by this thread (kept ranges read
    straight into its buffer); rounding buffers handed back for the next chunks."""
    local = threading.local()
    spare: list[bytearray] = []

    def run(batch: list[Job]) -> list[Ready]:
        return [write_chunk(job, local, spare) for job in batch]

    work = chunk_pool.batches(jobs(placed), _source_bytes, _copy_bytes())
    results = chunk_pool.ordered_map(run, work, threads=threads)
    with contextlib.closing(results):  # a failed job stops the workers before it propagates
        for ready in results:
            for item in ready:
                if item.data is None:
                    _stream_range(item.job, stream)
                else:
                    stream.put(item.data, item.job.at)
                if item.buffer is not None:
                    spare.append(item.buffer)
    stream.finish()


def _stream_range(job: Job, stream: direct_stream.DirectStream) -> None:
    """A kept range of an external tensor read into the stream (what _copy_range copies)."""
    tensor = job.tensor
    assert isinstance(tensor, ir.ExternalTensor)
    src = _open_source(tensor)
    try:
        count = job.stop - job.start
        if stream.put_from(src, (tensor.offset or 0) + job.start, count, job.at) < count:
            read_error(tensor)  # the data file shrank
    finally:
        os.close(src)


def _write_buffered(placed: Sequence[Placed], fd: int, threads: int) -> None:
    """The page-cache way: this thread writes the jobs' results at their offsets (pwrite) and
    copies kept ranges inside the kernel; a whole tensor bigger than a chunk, its worker."""
    local = threading.local()
    spare: list[bytearray] = []  # rounding buffers written out, for the next chunks (see Ready)
    writing = threading.Lock()

    def run(batch: list[Job]) -> list[Ready]:
        ready = [write_chunk(job, local, spare) for job in batch]
        if sum(len(r.data) for r in ready if r.data is not None) > _copy_bytes():
            # a whole tensor (one that cannot be read by range) is written by its worker, not
            # held until its turn: results waiting in the pool would hold several at once
            with writing:
                for r in ready:
                    r.write(fd)
            return []
        return ready

    work = chunk_pool.batches(jobs(placed), _source_bytes, _copy_bytes())
    results = chunk_pool.ordered_map(run, work, threads=threads)
    with contextlib.closing(results):  # a failed write stops the workers before it propagates
        for ready in results:
            for item in ready:
                with writing:
                    item.write(fd)
                if item.buffer is not None:
                    spare.append(item.buffer)


@dataclass(frozen=True)
class Ready:
    """A job's result for the writer: `data` to write at `job.at`, or (data None) a kept range
    of an external tensor to copy. `buffer`, when set, holds `data` and is handed back to the
    pool once written: reusing a few buffers spares the kernel zeroing fresh pages per chunk."""

    job: Job
    data: memoryview | None
    buffer: bytearray | None = None

    def write(self, fd: int) -> None:
        if self.data is None:
            _copy_range(self.job.tensor, fd, self.job)
        else:
            _pwrite_all(fd, self.data, self.job.at)


def _source_bytes(job: Job) -> int:
    """About what a job reads: a low chunk's FP32 source, a copied range, a whole tensor."""
    if job.stop < 0:
        return job.tensor.nbytes
    if isinstance(job.tensor, LowCopy):
        return (job.stop - job.start) * 4
    return job.stop - job.start


def write_chunk(job: Job, local: threading.local, spare: list[bytearray]) -> Ready:
    """Do one job's reading and rounding (`local`: the worker's reusable read buffer; `spare`:
    rounding buffers already written out)."""
    tensor = job.tensor
    if job.stop < 0:
        data = tensor.tobytes()
        if isinstance(tensor, ir.ExternalTensor):
            release(tensor)
        return Ready(job, memoryview(data))
    if not isinstance(tensor, LowCopy):
        return Ready(job, None)  # a kept range: the writer copies it
    # the worker's own read buffer (the source's bytes), reused chunk to chunk
    nbytes = (job.stop - job.start) * int(tensor.source.dtype.itemsize)
    buffer = chunk_pool.thread_buffer(local, nbytes, chunk_pool.CHUNK * 4)
    if job.stop - job.start < chunk_pool.CHUNK // 4:
        # a small weight: rounded into memory of its own size. A chunk-sized buffer each would
        # hold 8 MiB per weight of a batch until the writer is done with it (600 small weights
        # of a 48-layer export held 1.7 GB)
        array = np.ascontiguousarray(tensor.chunk(job.start, job.stop, buffer))
        return Ready(job, array.view(np.uint8).data)
    try:
        out = spare.pop()  # list.pop is atomic: no two workers get the same buffer
    except IndexError:
        out = bytearray(chunk_pool.CHUNK * 2)  # a 16-bit chunk: what the low types need
    array = np.ascontiguousarray(tensor.chunk(job.start, job.stop, buffer, out))
    return Ready(job, array.view(np.uint8).data, out)


def _copy_range(tensor: ir.TensorProtocol, fd: int, job: Job) -> None:
    """Bytes [start, stop) of an external tensor copied to `at`, inside the kernel if it can."""
    assert isinstance(tensor, ir.ExternalTensor)
    count = job.stop - job.start
    source = (tensor.offset or 0) + job.start
    src = _open_source(tensor)
    try:
        done = 0
        kernel = getattr(os, "copy_file_range", None)
        while done < count and kernel is not None:
            try:
                got = kernel(src, fd, count - done, source + done, job.at + done)
            except OSError as e:
                if e.errno not in _NO_KERNEL_COPY:
                    raise
                break
            if got == 0:
                break
            done += got
        while done < count:
            data = os.pread(src, min(count - done, _copy_bytes()), source + done)
            if not data:  # the data file shrank
                read_error(tensor)
            _pwrite_all(fd, memoryview(data), job.at + done)
            done += len(data)
    finally:
        os.close(src)


def _open_source(tensor: ir.ExternalTensor) -> int:
    """The tensor's data file opened for reading; read()'s one-line error when it cannot be."""
    try:
        check = getattr(tensor, "_check_path_containment", None)
        if check is not None:  # what onnx-ir checks before it copies
            check()
        return os.open(tensor.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        read_error(tensor)


def _copy_bytes() -> int:
    """Bytes a kept FP32 range moves per job: as many as a low chunk reads."""
    return chunk_pool.CHUNK * 4


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


@contextlib.contextmanager
def externalized(
    model: ir.Model,
    folder: str,
    data_name: str,
    threshold: int,
    dir_fd: int | None = None,
    location: str | None = None,
) -> Iterator[None]:
    """Write `model`'s data file `data_name` (an existing file in `folder`, opened through
    `dir_fd` when given) and, inside the block, have its initializers refer to it as ir.save
    would: the big ones as external tensors at their offsets, the small external ones in
    memory. The initializers are put back afterwards. `location` is the name they refer to
    it by (default `data_name`): the file is written under a temporary name, renamed later."""
    placed, inline = layout(model, threshold)
    originals: list[tuple[ir.Value, ir.TensorProtocol | None]] = [
        (p.value, p.tensor) for p in placed
    ] + [(v, v.const_value) for v in inline]
    path = data_name if dir_fd is not None else os.path.join(folder, data_name)
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    try:
        write(placed, fd)
    finally:
        os.close(fd)
    try:
        loaded = ir.external_data.convert_tensors_from_external(
            [v.const_value for v in inline]  # type: ignore[misc]
        )
        for value, memory in zip(inline, loaded, strict=True):
            value.const_value = memory
        base_dir = os.path.normpath(folder)
        for p in placed:
            p.value.const_value = ir.ExternalTensor(
                os.path.normpath(location or data_name),
                p.offset,
                p.tensor.nbytes,
                p.tensor.dtype,
                shape=p.tensor.shape,  # type: ignore[arg-type]
                name=p.tensor.name,  # type: ignore[arg-type]
                base_dir=base_dir,
            )
        yield
    finally:
        for value, original in originals:
            value.const_value = original
