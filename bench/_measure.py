"""Child side of bench/convert_bench.py: ONE measurement in a fresh interpreter.

Run as ``python -m bench._measure convert SRC DST LEVEL DTYPE`` or
``python -m bench._measure floor SRC DST``. Prints one JSON line on stdout (the last line):
the timed seconds, the RSS right before the timed work (interpreter + imports) and the process's
peak RSS (VmHWM, see peak_rss) at the end, so the peak is this one operation's own. Imports happen
before the timer starts; nothing else is loaded, so the baseline stays small.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path


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


def _uses_external_data(path: str) -> bool:
    import onnx

    proto = onnx.load(path, load_external_data=False)
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


def measure_convert(src: str, dst: str, level: str, dtype: str) -> dict:
    import amp_convert

    base = rss_now()
    start = time.perf_counter()
    report = amp_convert.convert_file(src, dst, level=level, dtype=dtype, force=True)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "base_rss": base,
        "peak_rss": peak_rss(),
        "report_seconds": report.seconds,
        "casts_inserted": report.casts_inserted,
        "nodes_low": report.nodes_low,
        "nodes_fp32": report.nodes_fp32,
        "size_before": report.size_before,
        "size_after": report.size_after,
        # did the output get its weights in a separate file (external data)?
        "external_out": any(f.name != Path(dst).name for f in Path(dst).parent.iterdir()),
    }


def measure_floor(src: str, dst: str) -> dict:
    """The I/O floor: onnx.load (external data included) + onnx.save of the same model."""
    import onnx

    external = _uses_external_data(src)  # decided before the timer: a header read only
    base = rss_now()
    start = time.perf_counter()
    model = onnx.load(src)
    if external:
        onnx.save_model(model, dst, save_as_external_data=True, location=Path(dst).name + ".data")
    else:
        onnx.save(model, dst)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "base_rss": base, "peak_rss": peak_rss()}


def main(argv: list[str]) -> int:
    kind, *args = argv
    try:
        if kind == "convert":
            result = measure_convert(*args)
        elif kind == "floor":
            result = measure_floor(*args)
        else:
            raise SystemExit(f"unknown measurement {kind!r}")
    except Exception as e:  # reported to the parent, which prints it in the table
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "peak_rss": peak_rss()}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
