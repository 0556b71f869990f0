"""A large external-data model converted against the disk and the host's own rounding, one run.

    PYTHONPATH=. python bench/large_models.py [--bytes 4.2e9] [--width 4096] [--repeat 3]
        [--tmpdir DIR] [--keep]

Writes models/big.py's FP32 model (``--bytes`` of weights in a .data file, MatMul layers of
``--width``) in ``--tmpdir`` (it needs about 1.5x ``--bytes`` free), then runs, in rotated order
each round, three things one after the other:

* ``convert``: ``amp_convert.convert_file(src, dst, level=O2, dtype=fp16)`` in a fresh process
  (bench/_measure.py: wall, CPU of every thread, peak RSS (VmHWM));
* ``dd``: ``dd`` reading the model's files to /dev/null, then ``dd`` writing as many bytes as the
  conversion's output: the disk's (or page cache's) own read-and-write time, and its CPU;
* ``read+round``: numpy reading the weights in 64 MiB pieces and casting each to float16
  (bench/_measure.py read_round): the host's own CPU cost of one read-and-round pass.

Prints the medians and, from the same rounds, conversion wall / dd wall (target <= 1.5 on >= 4 GB),
conversion CPU / read+round CPU (target <= 1.5), CPU-s per GB of input, and the peak RSS
(target < 1 GB). Outputs are removed after each round, the model at the end (unless --keep).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import _corpus as corpus  # noqa: E402
from bench.convert_bench import run_child  # noqa: E402

GB = 10**9
MiB = 2**20


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure_dd(src: Path, out: Path, out_bytes: int) -> dict:
    """dd reading the model's files to /dev/null, then dd writing `out_bytes`: wall and CPU."""
    files = [src, *(src.parent / loc for loc in sorted(corpus.external_data_files(src)))]
    cpu, start = _children_cpu(), time.perf_counter()
    for f in files:
        subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=16M", "status=none"], check=True)
    subprocess.run(
        [
            "dd",
            "if=/dev/zero",
            f"of={out}",
            "bs=16M",
            f"count={out_bytes}",
            "iflag=count_bytes",
            "status=none",
        ],
        check=True,
    )
    return {"seconds": time.perf_counter() - start, "cpu": _children_cpu() - cpu}


def one_round(src: Path, work: Path, order: list[str], out_bytes: int) -> dict[str, dict]:
    got: dict[str, dict] = {}
    for kind in order:
        out = work / kind
        out.mkdir()
        if kind == "convert":
            got[kind] = run_child(["convert", str(src), str(out / "out.onnx"), "O2", "fp16"], 3600)
        elif kind == "dd":
            got[kind] = measure_dd(src, out / "dd.out", out_bytes)
        else:
            got[kind] = run_child(["read_round", str(src)], 3600)
        shutil.rmtree(out)
        if "error" in got[kind]:
            raise SystemExit(f"{kind} failed: {got[kind]['error']}")
    return got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--bytes", type=float, default=4.2e9, help="weights (default 4.2e9)")
    p.add_argument("--width", type=int, default=4096, help="MatMul width (default 4096)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tmpdir", type=Path, help="where the model is written (default: system tmp)")
    p.add_argument("--keep", action="store_true", help="leave the model in --tmpdir")
    args = p.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="amp_large_", dir=args.tmpdir))
    try:
        src, what = corpus.write_big(folder / "big.onnx", int(args.bytes), args.width)
        size = corpus.disk_size(src)
        print(what, flush=True)
        work = folder / "work"
        work.mkdir()
        first = run_child(["convert", str(src), str(work / "warm.onnx"), "O2", "fp16"], 3600)
        if "error" in first:
            raise SystemExit(f"convert failed: {first['error']}")
        out_bytes = int(first["size_after"])
        for f in work.iterdir():
            f.unlink()
        kinds = ["convert", "dd", "read+round"]
        rounds = []
        for r in range(args.repeat):
            order = kinds[r % 3 :] + kinds[: r % 3]
            got = one_round(src, work, order, out_bytes)
            rounds.append(got)
            cells = [f"{k} {got[k]['seconds']:.2f} s ({got[k]['cpu']:.2f} CPU-s)" for k in order]
            rss = got["convert"]["peak_rss"] / MiB
            print(f"  round {r + 1}: {', '.join(cells)}, convert peak {rss:.0f} MiB", flush=True)
        med = {
            k: {x: statistics.median(r[k][x] for r in rounds) for x in ("seconds", "cpu")}
            for k in kinds
        }
        wall_ratio = statistics.median(r["convert"]["seconds"] / r["dd"]["seconds"] for r in rounds)
        cpu_ratio = statistics.median(r["convert"]["cpu"] / r["read+round"]["cpu"] for r in rounds)
        peak = max(r["convert"]["peak_rss"] for r in rounds)
        print(f"model {size / GB:.2f} GB in, {out_bytes / GB:.2f} GB out; medians of {args.repeat}")
        for k in kinds:
            print(f"  {k:11s} {med[k]['seconds']:7.2f} s  {med[k]['cpu']:7.2f} CPU-s")
        print(f"conversion / dd wall:          {wall_ratio:.2f}x (target <= 1.5)")
        print(f"conversion / read+round CPU:   {cpu_ratio:.2f}x (target <= 1.5)")
        print(f"conversion CPU per GB in:      {med['convert']['cpu'] / (size / GB):.2f} CPU-s/GB")
        print(f"conversion peak RSS:           {peak / MiB:.0f} MiB (target < 1024)")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
