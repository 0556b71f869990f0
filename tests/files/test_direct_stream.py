"""files/direct_stream.py: a file written front to back with O_DIRECT through an aligned buffer.

The bytes on disk are exactly what was put, in order, whatever the sizes (buffer boundaries, a
partial last block cut back to the size); the flag is set while the stream writes and cleared
after; a file system without O_DIRECT gives no stream (the caller writes the buffered way).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from amp_convert.files import direct_stream

pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="O_DIRECT is Linux's")


@pytest.fixture
def small_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct_stream, "BUFFER", 2 * direct_stream.ALIGN)


def _pieces(sizes: list[int], seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]


def _direct_file(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    return fd


@pytest.mark.parametrize(
    "sizes",
    [[1], [4095, 1, 4096], [3, 10000, 7, 8192, 5], [8192 * 3], [0, 17, 0]],
)
def test_what_was_put_is_what_is_on_disk(tmp_path: Path, small_buffer, sizes: list[int]) -> None:
    pieces = _pieces(sizes)
    total = sum(sizes)
    path = tmp_path / "out.data"
    fd = _direct_file(path)
    try:
        os.ftruncate(fd, total)
        with direct_stream.open_direct(fd, total) as stream:
            if stream is None:
                pytest.skip("this file system has no O_DIRECT")
            assert fcntl_flags(fd) & os.O_DIRECT
            at = 0
            for piece in pieces:
                stream.put(memoryview(piece), at)
                at += len(piece)
            stream.finish()
        assert not fcntl_flags(fd) & os.O_DIRECT  # cleared again
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(pieces)


def test_ranges_of_another_file_are_read_straight_in(tmp_path: Path, small_buffer) -> None:
    source = tmp_path / "src.data"
    body = _pieces([20000], seed=1)[0]
    source.write_bytes(body)
    head = b"head"
    path = tmp_path / "out.data"
    fd = _direct_file(path)
    src = os.open(source, os.O_RDONLY)
    try:
        with direct_stream.open_direct(fd, 4 + 12345 + 100) as stream:
            if stream is None:
                pytest.skip("this file system has no O_DIRECT")
            stream.put(memoryview(head), 0)
            assert stream.put_from(src, 3, 12345, 4) == 12345
            assert stream.put_from(src, 19950, 100, 4 + 12345) == 50  # the source ends first
            stream.put(memoryview(b"x" * 50), stream.at)
            stream.finish()
    finally:
        os.close(src)
        os.close(fd)
    assert path.read_bytes() == head + body[3:12348] + body[19950:] + b"x" * 50


def test_a_write_out_of_order_is_refused(tmp_path: Path) -> None:
    fd = _direct_file(tmp_path / "out.data")
    try:
        with direct_stream.open_direct(fd, 10) as stream:
            if stream is None:
                pytest.skip("this file system has no O_DIRECT")
            with pytest.raises(ValueError, match="a write at 5, expected at 0"):
                stream.put(memoryview(b"abcde"), 5)
    finally:
        os.close(fd)


def test_no_stream_where_the_file_system_has_no_o_direct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fcntl refuses O_DIRECT with EINVAL (tmpfs before Linux 6.6, network file systems): no
    stream, the flags as they were, and the data file is written the buffered way, the same."""
    import errno
    import fcntl

    real = fcntl.fcntl

    def refusing(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", refusing)
    fd = _direct_file(tmp_path / "out.data")
    try:
        flags = fcntl_flags(fd)
        with direct_stream.open_direct(fd, 10) as stream:
            assert stream is None
        assert fcntl_flags(fd) == flags
    finally:
        os.close(fd)


def fcntl_flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)
