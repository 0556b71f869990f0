"""The chunk pool's per-worker buffer: as big as the work needs, never a chunk up front."""

from __future__ import annotations

import threading

from amp_convert.core.chunk_pool import thread_buffer

CAP = 1 << 20


def test_the_buffer_is_the_size_asked_for_not_the_cap() -> None:
    local = threading.local()
    first = thread_buffer(local, 40, CAP)
    assert len(first) == 40  # a small model's weights: no zero-filled MiBs
    assert thread_buffer(local, 12, CAP) is first  # smaller needs reuse it


def test_the_buffer_grows_by_doubling_up_to_the_cap() -> None:
    local = threading.local()
    thread_buffer(local, 1000, CAP)
    assert len(thread_buffer(local, 1001, CAP)) == 2000
    assert len(thread_buffer(local, 5000, CAP)) == 5000
    assert len(thread_buffer(local, 3 * CAP, CAP)) == CAP  # the caller reads into its own
    assert len(thread_buffer(local, CAP, CAP)) == CAP


def test_each_thread_has_its_own() -> None:
    local = threading.local()
    mine = thread_buffer(local, 64, CAP)
    theirs: list[bytearray] = []
    worker = threading.Thread(target=lambda: theirs.append(thread_buffer(local, 64, CAP)))
    worker.start()
    worker.join()
    assert theirs[0] is not mine and len(theirs[0]) == 64
