"""Child side of bench/compare.py: time and peak RSS of file-to-file conversions, in one process.

Run as ``python -m bench._compare_measure SPEC.json``. SPEC names one tool and a list of jobs::

    {"tool": "amp" | "occ" | "occ_noinfer" | "floor", "level": "O2", "dtype": "fp16",
     "warmup": "tiny.onnx" | null, "sample": false,
     "jobs": [{"key": "...", "src": "in.onnx", "dst": "out/model.onnx", "discard": false}]}

Tools (each timed from the source path to the written output, imports done before the timer):

* ``amp``: ``amp_convert.convert_file(src, dst, level, dtype, force=True)`` (via bench/_measure.py);
* ``occ``: ``onnx.load(src)`` + onnxconverter-common's
  ``float16.convert_float_to_float16(model, keep_io_types=True)`` + ``onnx.save`` (with
  ``save_as_external_data=True`` when the source has external data);
* ``occ_noinfer``: the same with ``disable_shape_infer=True`` (for models the default call rejects,
  e.g. > 2 GB, where ONNX shape inference cannot serialize the proto);
* ``floor``: the I/O floor, ``onnx.load`` + ``onnx.save`` of the same model (bench/_measure.py).

Only the tool's own library is imported, so each process's baseline is that tool's. An unmeasured
warm-up conversion of a tiny model runs first, so every job is timed warm (lazy schema tables and
caches already built), the same way for every tool. Before each job the kernel's peak-RSS counter
is reset (``echo 5 > /proc/self/clear_refs``, Linux >= 4.0), so each job's VmHWM is its own even
when many small models share one process; ``hwm_reset`` says whether that worked. With
``"sample": true`` a thread also samples RssAnon/RssFile every 10 ms (anonymous memory vs
memory-mapped file pages; a lower bound). One JSON line per job on stdout.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
import warnings
from pathlib import Path

from bench._measure import measure_convert, measure_floor, peak_rss, rss_now

TOOLS = ("amp", "occ", "occ_noinfer", "floor")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class RssSampler(threading.Thread):
    """Peaks of RssAnon / RssFile of this process, polled every `interval` seconds."""

    def __init__(self, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peaks = {"RssAnon": 0, "RssFile": 0}
        self.done = threading.Event()

    def poll(self) -> None:
        try:
            with open("/proc/self/status") as f:
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
        self.done.set()
        self.join()
        self.poll()
        return {"anon_peak": self.peaks["RssAnon"], "file_peak": self.peaks["RssFile"]}


def _has_external_data(path: str) -> bool:
    import onnx

    proto = onnx.load(path, load_external_data=False)
    graphs = [proto.graph]
    while graphs:
        g = graphs.pop()
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in g.initializer):
            return True
        for node in g.node:
            for a in node.attribute:
                graphs.extend([a.g] if a.HasField("g") else list(a.graphs))
    return False


def measure_occ(src: str, dst: str, infer: bool = True) -> dict:
    """onnx.load + onnxconverter-common float16 (keep_io_types=True) + onnx.save, timed."""
    import onnx
    from onnxconverter_common import float16

    external = _has_external_data(src)  # a header read, before the timer
    kwargs = {} if infer else {"disable_shape_infer": True}
    base = rss_now()
    start = time.perf_counter()
    model = onnx.load(src)
    model = float16.convert_float_to_float16(model, keep_io_types=True, **kwargs)
    if external:
        onnx.save(model, dst, save_as_external_data=True, location=Path(dst).name + ".data")
    else:
        onnx.save(model, dst)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "base_rss": base, "peak_rss": peak_rss()}


def _remove_outputs(dst: str) -> None:
    """dst and dst.data: onnx appends to an existing external-data file, so start clean."""
    for p in (Path(dst), Path(dst + ".data")):
        p.unlink(missing_ok=True)


def run_job(spec: dict, src: str, dst: str) -> dict:
    tool = spec["tool"]
    if tool == "amp":
        return measure_convert(src, dst, spec["level"], spec.get("dtype", "fp16"))
    if tool == "occ":
        return measure_occ(src, dst)
    if tool == "occ_noinfer":
        return measure_occ(src, dst, infer=False)
    if tool == "floor":
        return measure_floor(src, dst)
    raise ValueError(f"unknown tool {tool!r}")


def _import_tool(tool: str) -> None:
    """Import the tool's library before any timer (what a user's process would have loaded)."""
    import onnx  # noqa: F401

    if tool == "amp":
        import amp_convert  # noqa: F401
    elif tool in ("occ", "occ_noinfer"):
        from onnxconverter_common import float16  # noqa: F401


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    if spec["tool"] not in TOOLS:
        raise SystemExit(f"unknown tool {spec['tool']!r}")
    warnings.simplefilter("ignore")  # onnxconverter-common warns once per clamped constant
    _import_tool(spec["tool"])
    if spec.get("warmup"):
        scratch = str(Path(spec["warmup"]).with_name(f"warmup_{spec['tool']}_out.onnx"))
        try:
            run_job(spec, spec["warmup"], scratch)
        finally:
            _remove_outputs(scratch)
    for job in spec["jobs"]:
        dst = job["dst"]
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        _remove_outputs(dst)
        gc.collect()
        hwm_reset = reset_peak_rss()
        sampler = RssSampler() if spec.get("sample") else None
        if sampler:
            sampler.start()
        try:
            result = run_job(spec, job["src"], dst)
        except Exception as e:  # reported in the table
            first = (str(e).strip().splitlines() or [""])[0]
            result = {"error": f"{type(e).__name__}: {first}"[:500], "peak_rss": peak_rss()}
        if sampler:
            result.update(sampler.stop())
        result.pop("external_out", None)  # measure_convert's view of a shared folder
        if job.get("discard"):
            _remove_outputs(dst)
        result.update(key=job["key"], hwm_reset=hwm_reset)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
