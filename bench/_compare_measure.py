"""Child side of bench/compare.py: time and peak RSS of file-to-file conversions, in one process.

Run as ``python -m bench._compare_measure SPEC.json``. SPEC names one tool and a list of jobs::

    {"tool": "amp" | "occ" | "occ_noinfer" | "floor", "level": "O2", "dtype": "fp16",
     "warmup": "tiny.onnx" | null, "sample": false,
     "jobs": [{"key": "...", "src": "in.onnx", "dst": "out/model.onnx", "external": false,
               "discard": false}]}

Tools (each timed from the source path to the written output, imports done before the timer;
the functions are bench/_measure.py's):

* ``amp``: ``amp_convert.convert_file(src, dst, level, dtype, force=True)``;
* ``occ``: ``onnx.load(src)`` + onnxconverter-common's
  ``float16.convert_float_to_float16(model, keep_io_types=True)`` + ``onnx.save`` (with
  ``save_as_external_data=True`` when the job says the source has external data);
* ``occ_noinfer``: the same with ``disable_shape_infer=True`` (for models the default call rejects,
  e.g. > 2 GB, where ONNX shape inference cannot serialize the proto);
* ``floor``: the I/O floor, ``onnx.load`` + ``onnx.save`` of the same model.

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
import warnings
from pathlib import Path

from bench._measure import RssSampler, measure_convert, measure_floor, measure_occ, peak_rss

TOOLS = ("amp", "occ", "occ_noinfer", "floor")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _remove_outputs(dst: str) -> None:
    """dst and dst.data: onnx appends to an existing external-data file, so start clean."""
    for p in (Path(dst), Path(dst + ".data")):
        p.unlink(missing_ok=True)


def run_job(spec: dict, src: str, dst: str, external: bool) -> dict:
    tool = spec["tool"]
    if tool == "amp":
        return measure_convert(src, dst, spec["level"], spec.get("dtype", "fp16"))
    if tool in ("occ", "occ_noinfer"):
        return measure_occ(src, dst, external, infer=tool == "occ")
    if tool == "floor":
        return measure_floor(src, dst, external)
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
            run_job(spec, spec["warmup"], scratch, external=False)
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
            result = run_job(spec, job["src"], dst, job["external"])
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
