"""One timed operation, file to file, and the memory figures of the process that runs it.

The measuring children of both benchmarks call these: bench/_compare_measure.py (compare.py) and
this module's own command line (convert_bench.py)::

    python -m bench._measure convert SRC DST LEVEL DTYPE
    python -m bench._measure floor SRC DST EXTERNAL        (EXTERNAL: 1 or 0)
    python -m bench._measure read_round SRC                (numpy reads and rounds its weights)

which prints one JSON line on stdout (the last line): the timed seconds, the RSS right before the
timed work (interpreter + imports) and the process's peak RSS (VmHWM, see peak_rss) at the end,
so the peak is this one operation's own. Imports happen before the timer starts; this module
imports nothing heavy itself, so a child's baseline is its tool's alone. Whether the source keeps
its weights in external data is decided by the parent (a header read), not inside the timer.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def rss_now() -> int:
    """Current resident set size in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux
        import psutil

        return psutil.Process().memory_info().rss


def peak_rss() -> int:
    """Peak resident set size of this process so far, in bytes.

    On Linux, VmHWM from /proc/self/status: the high-water mark of THIS program's memory. Not
    ru_maxrss there: Linux carries the parent's RSS at fork time into the child's ru_maxrss across
    exec, so a 10 MiB child of a 400 MiB parent reports 400 MiB. Elsewhere, ru_maxrss.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class RssSampler(threading.Thread):
    """Peaks of RssAnon / RssFile of a process (this one by default), polled every `interval` s.

    Anonymous memory (heap, copies) vs memory-mapped file pages (weights the kernel can drop);
    sampled, so a lower bound.
    """

    def __init__(self, pid: int | str = "self", interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.status = f"/proc/{pid}/status"
        self.interval = interval
        self.peaks = {"RssAnon": 0, "RssFile": 0}
        self.done = threading.Event()

    def poll(self) -> None:
        try:
            with open(self.status) as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    if key in self.peaks:
                        self.peaks[key] = max(self.peaks[key], int(rest.split()[0]) * 1024)
        except (OSError, ValueError, IndexError):
            pass

    def run(self) -> None:
        while not self.done.is_set():
            self.poll()
            self.done.wait(self.interval)

    def stop(self) -> dict[str, int]:
        """Stop polling; the peaks as anon_peak / file_peak."""
        self.done.set()
        self.join()
        self.poll()
        return {"anon_peak": self.peaks["RssAnon"], "file_peak": self.peaks["RssFile"]}


def _timed(work: Callable[[], Any]) -> tuple[dict[str, Any], Any]:
    """Seconds of `work()` (wall and CPU), the RSS before it and the peak after; what it returned.

    That value is freed by the caller, after the clock stopped: no tool pays for freeing its model.
    """
    base = rss_now()
    cpu = time.process_time()
    start = time.perf_counter()
    kept = work()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu  # every thread's user + system time
    return {"seconds": seconds, "cpu": cpu, "base_rss": base, "peak_rss": peak_rss()}, kept


def _save(model: Any, dst: str, external: bool) -> Any:
    """onnx.save; the weights in DST.data when the source kept them in external data."""
    import onnx

    if external:
        onnx.save(model, dst, save_as_external_data=True, location=Path(dst).name + ".data")
    else:
        onnx.save(model, dst)
    return model


def measure_convert(src: str, dst: str, level: str, dtype: str) -> dict:
    """amp_convert.convert_file(src, dst, level, dtype, force=True), timed; its report's figures."""
    import amp_convert

    result, report = _timed(
        lambda: amp_convert.convert_file(src, dst, level=level, dtype=dtype, force=True)
    )
    return {
        **result,
        "report_seconds": report.seconds,
        "casts_inserted": report.casts_inserted,
        "nodes_low": report.nodes_low,
        "nodes_fp32": report.nodes_fp32,
        "size_before": report.size_before,
        "size_after": report.size_after,
        # did the output get its weights in a separate file (external data)?
        "external_out": any(f.name != Path(dst).name for f in Path(dst).parent.iterdir()),
    }


def measure_occ(src: str, dst: str, external: bool, infer: bool = True) -> dict:
    """onnx.load + onnxconverter-common float16 (keep_io_types=True) + onnx.save, timed."""
    import onnx
    from onnxconverter_common import float16

    kwargs = {} if infer else {"disable_shape_infer": True}

    def work() -> Any:
        model = float16.convert_float_to_float16(onnx.load(src), keep_io_types=True, **kwargs)
        return _save(model, dst, external)

    return _timed(work)[0]


def measure_floor(src: str, dst: str, external: bool) -> dict:
    """The I/O floor: onnx.load (external data included) + onnx.save of the same model."""
    import onnx

    return _timed(lambda: _save(onnx.load(src), dst, external))[0]


def measure_read_round(src: str) -> dict:
    """The host's own cost of one read-and-round pass over a model's weights: every external
    data file read in 64 MiB pieces (readinto one buffer) and each piece cast to float16 by
    numpy (astype), nothing written. What a converter cannot do with less work."""
    import numpy as np

    from bench._corpus import external_data_files

    folder = Path(src).parent
    files = [folder / loc for loc in sorted(external_data_files(src))]
    piece = bytearray(64 << 20)

    def work() -> int:
        total = 0
        for path in files:
            with open(path, "rb", buffering=0) as f:
                while n := f.readinto(piece):
                    usable = n - n % 4
                    np.frombuffer(piece, np.float32, usable // 4).astype(np.float16)
                    total += n
        return total

    result, total = _timed(work)
    return {**result, "bytes": total}


def main(argv: list[str]) -> int:
    kind, *args = argv
    try:
        if kind == "convert":
            result = measure_convert(*args)
        elif kind == "read_round":
            result = measure_read_round(*args)
        elif kind == "floor":
            src, dst, external = args
            result = measure_floor(src, dst, external == "1")
        else:
            raise SystemExit(f"unknown measurement {kind!r}")
    except Exception as e:  # reported to the parent, which prints it in the table
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "peak_rss": peak_rss()}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
