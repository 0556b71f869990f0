"""Reading weights without holding them: range scans in chunks, lazy low-precision copies.

A 2 GB model's weights are memory-mapped by onnx-ir; these helpers read them a chunk at a time and
drop the mapping afterwards, so peak memory stays near one chunk, and the low-precision copy of a
weight is only made when the save streams it to disk (`LowCopy`, a chunk at a time there:
`read_chunk` reads a range of an external weight with pread, never mapping the whole tensor).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
from typing import NoReturn

import numpy as np
import onnx_ir as ir

from amp_convert.core import half_cast
from amp_convert.core.precision import NUMPY_TYPES, low_array, numpy_type
from amp_convert.errors import InputError

_CHUNK = 1 << 22
#: bit widths numpy stores packed (int4, float6...): never read a range of these by bytes
_PACKED_BITS = (2, 4, 6)


def read(tensor: ir.TensorProtocol) -> np.ndarray:
    """The tensor's values; a data file that changed or vanished since load is an InputError."""
    try:
        return np.asarray(tensor.numpy())
    except (OSError, ValueError, BufferError) as e:
        what = getattr(tensor, "path", None) or "its data"
        raise InputError(
            f"weight {tensor.name!r}: cannot read {what} ({e}); was the external data file "
            "changed or truncated during the conversion?"
        ) from None


def release(tensor: ir.TensorProtocol) -> None:
    """Drop the memory map of an external tensor (it is mapped again if read again)."""
    if isinstance(tensor, ir.ExternalTensor):
        # someone may still hold a view: then it stays mapped, which is only slower
        with contextlib.suppress(BufferError):
            tensor.release()


def to_low(
    tensor: ir.TensorProtocol, low: ir.DataType, lazy: bool = True, saturate: bool = False
) -> ir.TensorProtocol:
    """The tensor rounded to the low type; lazy so big weights stream at save time."""
    copy = LowCopy(tensor, low, saturate)
    return copy if lazy else copy.evaluate()


class LowCopy(ir.LazyTensor):
    """A weight rounded to the low type when read: whole (`numpy()`, like any lazy tensor) or
    a range of its elements at a time (`chunk`), which is how the save streams it to disk.

    Rounding is elementwise, so the chunks put together are byte for byte the whole copy.
    """

    __slots__ = ("saturate", "source")

    def __init__(self, source: ir.TensorProtocol, low: ir.DataType, saturate: bool) -> None:
        self.source = source
        self.saturate = saturate
        shape = ir.Shape(source.shape.numpy())
        super().__init__(self.evaluate, dtype=low, shape=shape, name=source.name)

    def evaluate(self) -> ir.Tensor:
        """The whole low copy (the source's memory map is dropped afterwards)."""
        array = low_array(read(self.source), self.dtype, self.saturate)
        release(self.source)  # the converted copy is all the save needs
        return ir.Tensor(array, dtype=self.dtype, name=self.name)

    def chunk(
        self,
        start: int,
        stop: int,
        buffer: bytearray | None = None,
        out: bytearray | None = None,
    ) -> np.ndarray:
        """Elements [start, stop) of the flattened low copy (`buffer`: see read_chunk).

        Rounded into `out` when it is big enough (the result is then a view of it): reusing
        one buffer spares the kernel zeroing fresh pages for every chunk.
        """
        values = read_chunk(self.source, start, stop, buffer)
        nbytes = values.size * int(self.dtype.itemsize)
        if out is None or len(out) < nbytes or self.saturate or self.dtype not in NUMPY_TYPES:
            return low_array(values, self.dtype, self.saturate)
        rounded = np.frombuffer(out, dtype=numpy_type(self.dtype), count=values.size)
        if self.dtype == ir.DataType.FLOAT16 and values.dtype == np.float32:
            return half_cast.to_float16(values, rounded)  # astype's bits, faster
        np.copyto(rounded, values, casting="unsafe")  # astype's rounding, into `out`
        return rounded


def chunkable(tensor: ir.TensorProtocol) -> bool:
    """Whether read_chunk reads ranges of `tensor` without materialising it whole: an external
    tensor of a whole-byte type, or an in-memory numpy-backed one."""
    if tensor.dtype.bitwidth in _PACKED_BITS or tensor.dtype == ir.DataType.STRING:
        return False
    if isinstance(tensor, ir.ExternalTensor):
        return hasattr(os, "preadv")
    return isinstance(tensor, ir.Tensor) and isinstance(tensor.raw, np.ndarray)


def low_chunks_are_bytes(copy: LowCopy) -> bool:
    """Whether the chunks of `copy` are its stored bytes as they are: a little-endian machine
    and a source read_chunk can range over (else the save writes the whole copy's tobytes())."""
    return sys.byteorder == "little" and chunkable(copy.source)


def read_chunk(
    tensor: ir.TensorProtocol, start: int, stop: int, buffer: bytearray | None = None
) -> np.ndarray:
    """Elements [start, stop) of the flattened tensor.

    An external tensor's range of a MiB or more is mapped alone (read-only: the page cache's
    pages, `_map_range`), a smaller one read with pread (into `buffer` when it is big enough;
    the result is then a view of it, valid until the buffer is reused), so memory holds the
    range only; any other tensor is read whole and sliced. A failed read raises read()'s error.
    """
    if not isinstance(tensor, ir.ExternalTensor) or not chunkable(tensor):
        return read(tensor).reshape(-1)[start:stop]
    dtype = np.dtype(tensor.dtype.numpy()).newbyteorder("<")
    nbytes = (stop - start) * dtype.itemsize
    try:
        check = getattr(tensor, "_check_path_containment", None)
        if check is not None:  # what onnx-ir checks before it maps the file
            check()
        at = (tensor.offset or 0) + start * dtype.itemsize
        if MAP_RANGES and nbytes >= _MAP_MIN:
            return np.frombuffer(_map_range(tensor.path, at, nbytes), dtype=dtype)
        if buffer is None or len(buffer) < nbytes:
            buffer = bytearray(nbytes)
        _pread_into(tensor.path, memoryview(buffer)[:nbytes], at)
    except (OSError, ValueError, EOFError):
        read_error(tensor)
    return np.frombuffer(buffer, dtype=dtype, count=stop - start)


#: read big ranges through a mapping of that range alone (no copy into a buffer; POSIX)
MAP_RANGES = hasattr(mmap, "MAP_SHARED")
_MAP_MIN = 1 << 20


def _map_range(path: str, offset: int, nbytes: int) -> memoryview:
    """Bytes [offset, offset + nbytes) of a file, mapped read-only and populated at once: the
    page cache's own pages, not a copy (the kernel's copy into a read buffer was a fifth of a
    large conversion's CPU). The mapping goes when the last view of it does."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if os.fstat(fd).st_size < offset + nbytes:
            raise EOFError(path)
        base = offset - offset % mmap.ALLOCATIONGRANULARITY
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        mapped = mmap.mmap(
            fd, offset + nbytes - base, flags=flags, prot=mmap.PROT_READ, offset=base
        )
    finally:
        os.close(fd)
    return memoryview(mapped)[offset - base : offset - base + nbytes]


def read_error(tensor: ir.TensorProtocol) -> NoReturn:
    """Raise the one-line InputError a whole read() of `tensor` gives, after a ranged read of it
    failed (read() itself meets the same problem; if it does not, the same words)."""
    read(tensor)
    release(tensor)
    raise InputError(
        f"weight {tensor.name!r}: cannot read {getattr(tensor, 'path', None) or 'its data'} "
        "(short read); was the external data file changed or truncated during the conversion?"
    )


def _pread_into(path: str, view: memoryview, offset: int) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        done = 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], offset + done)
            if got == 0:
                raise EOFError(path)
            done += got
    finally:
        os.close(fd)
