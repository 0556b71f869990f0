"""Conversion time and peak memory of amp-convert against the I/O floor, in one run.

Models: the realistic blocks (models/blocks.py, written to a temp dir), the backend models shipped
in the onnx wheel (onnx/backend/test/data/light/*.onnx) and a generated > 2 GB FP32 model with
external data (models/big.py, built in a temp dir on the same disk and removed at the end).

For each model, each measurement runs in a FRESH subprocess (bench/_measure.py), so its peak RSS
(VmHWM of the child at its end; see bench/_measure.py) is that operation's own:
  * conversion: ``amp_convert.convert_file(src, dst, level, dtype, force=True)``;
  * I/O floor:  ``onnx.load(src)`` (external data included) + ``onnx.save`` of the same model
    (``save_as_external_data=True`` for an external-data model).
  * dd floor (the generated big model only): ``dd`` reading the input model's files to /dev/null
    plus ``dd`` writing as many bytes as the conversion's output, timed here: the disk's own
    read+write time, against which conversion time is given as a ratio (issue 24: within 1.3x).
The runs are interleaved (conv, floor, floor, conv, ...; dd after conv, before floor) ``--repeat``
times; times are medians, peak RSS the maximum over the repeats. While a child runs, the parent
also samples /proc/PID/status, splitting the peak into anonymous memory (heap, copies) and
file-backed pages (memory-mapped weights, which the kernel can drop) - sampled, so a lower bound.

Run from the repository root:
    PYTHONPATH=. python bench/convert_bench.py [--repeat 3] [--level O2] [--dtype fp16]
        [--big-bytes 2200000000 | --no-big] [--only REGEX] [--markdown] [--json PATH]
        [--no-floor]  (big model: conversion and dd only; onnx.load holds the whole model)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # models/ and amp_convert/ importable without PYTHONPATH
    sys.path.insert(0, str(REPO))

from bench import _corpus as corpus  # noqa: E402
from bench._measure import RssSampler  # noqa: E402
from bench._table import (  # noqa: E402
    Wide,
    columns,
    markdown_table,
    secs_text,
    size_text,
    text_table,
)

MiB = 2**20
GB = 10**9
BIG_ENOUGH = 10**7  # below this, peak RSS is the interpreter's, and RSS/size means nothing


# ----------------------------------------------------------------------------------------------
# one measurement in a child process
# ----------------------------------------------------------------------------------------------
#: dd counts bytes, says nothing
DD_QUIET = ("iflag=count_bytes", "status=none")


def run_child(args: list[str], timeout: float) -> dict:
    """Run `python -m bench._measure ARGS` in a fresh interpreter; its JSON result + samples."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "bench._measure", *args]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    sampler = RssSampler(proc.pid)
    sampler.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        stdout, stderr = "", f"timed out after {timeout:.0f} s"
    finally:
        peaks = sampler.stop()
    wall = time.perf_counter() - start
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        result = {"error": f"child failed (rc {proc.returncode}): {tail}"}
    result["wall"] = wall
    result.update(peaks)
    return result


# ----------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------
@dataclass
class Target:
    name: str
    group: str  # block | onnx-light | big
    path: Path
    size: int  # bytes on disk, external data included
    conv: list[dict] = field(default_factory=list)
    floor: list[dict] = field(default_factory=list)
    dd: list[dict] = field(default_factory=list)

    @property
    def error(self) -> str | None:
        for r in self.conv + self.floor + self.dd:
            if "error" in r:
                return r["error"]
        return None


def collect_targets(
    workdir: Path, wanted: Callable[[str], bool], big_bytes: int | None, big_width: int = 1024
) -> list:
    """The blocks and the wheel's light models `wanted` by name; the generated big model too."""
    blocks = corpus.write_blocks(workdir, wanted)
    targets = [Target(n, "block", p, corpus.disk_size(p)) for n, p in blocks]
    targets += [
        Target(n, "onnx-light", p, corpus.disk_size(p))
        for _, n, p in corpus.wheel_models(("light",))
        if wanted(n)
    ]
    if big_bytes is not None and wanted("big_external"):
        free = shutil.disk_usage(workdir).free
        need = int(2.6 * big_bytes)  # model + floor output (same size) + margin
        if free < need:
            print(
                f"# SKIPPED big model: {size_text(free)} free in {workdir}, need {size_text(need)}"
            )
        else:
            path, what = corpus.write_big(workdir / "big.onnx", big_bytes, big_width)
            print(f"# {what}", flush=True)
            size = corpus.disk_size(path)
            targets.append(Target(f"big_external_{size / GB:.1f}GB", "big", path, size))
    return targets


# ----------------------------------------------------------------------------------------------
# measuring
# ----------------------------------------------------------------------------------------------
def measure_dd(src: Path, out: Path, out_bytes: int) -> dict:
    """dd reading the model's files to /dev/null, then dd writing `out_bytes` to `out`: seconds."""
    files = [src, *(src.parent / loc for loc in corpus.external_data_files(src))]
    start = time.perf_counter()
    for f in files:
        subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=16M", "status=none"], check=True)
    read = time.perf_counter() - start
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={out}", "bs=16M", f"count={out_bytes}", *DD_QUIET],
        check=True,
    )
    write = time.perf_counter() - start - read
    return {"seconds": read + write, "read": read, "write": write, "bytes_read": t_size(files)}


def t_size(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def measure(t: Target, args: argparse.Namespace, outdir: Path) -> None:
    """Interleave conversion and floor `repeat` times (ABBA order); outputs removed each time.

    The big model also gets the dd floor, after a conversion has said how big the output is."""
    for i in range(args.repeat):
        order = ["conv", "floor"] if i % 2 == 0 else ["floor", "conv"]
        if t.group == "big":
            order.insert(1, "dd")
            if args.no_floor:
                order.remove("floor")
        for kind in order:
            out = outdir / f"{kind}_{i}"
            out.mkdir()
            dst = str(out / "out.onnx")
            if kind == "conv":
                res = run_child(["convert", str(t.path), dst, args.level, args.dtype], args.timeout)
                t.conv.append(res)
            elif kind == "dd":
                res = measure_dd(t.path, out / "dd.out", t.conv[0]["size_after"])
                t.dd.append(res)
            else:
                external = "1" if corpus.external_data_files(t.path) else "0"
                res = run_child(["floor", str(t.path), dst, external], args.timeout)
                t.floor.append(res)
            shutil.rmtree(out)
            if "error" in res:
                return
        if args.verbose:
            c = t.conv[-1]
            f = t.floor[-1] if t.floor else {"seconds": 0.0, "peak_rss": 0}
            print(
                f"#   {t.name} rep {i + 1}: conv {c['seconds']:.3f} s "
                f"{c['peak_rss'] / MiB:.0f} MiB, floor {f['seconds']:.3f} s "
                f"{f['peak_rss'] / MiB:.0f} MiB"
                + (f", dd {t.dd[-1]['seconds']:.3f} s" if t.dd else ""),
                file=sys.stderr,
                flush=True,
            )


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def _max(rows: list[dict], key: str) -> float:
    return max(r[key] for r in rows)


COLUMNS = columns(
    "model",
    "group",
    "size",
    "size after",
    "casts",
    "low",
    "fp32",
    "conv",
    "floor",
    "conv/floor",
    "conv RSS MiB",
    "(anon/file)",
    "conv dRSS",
    "floor RSS MiB",
    "conv RSS/size",
    right_from=2,
)


def row(t: Target) -> list[str]:
    if t.error:
        error = Wide(f"ERROR: {t.error}")
        return [t.name, t.group, size_text(t.size), error] + [""] * (len(COLUMNS) - 4)
    c, f = t.conv, t.floor or [{"seconds": math.nan, "peak_rss": math.nan}]
    conv_s, floor_s = _median(c, "seconds"), _median(f, "seconds")
    peak = _max(c, "peak_rss")
    skipped = not t.floor  # --no-floor
    return [
        t.name,
        t.group,
        size_text(t.size),
        size_text(c[0]["size_after"]),
        str(c[0]["casts_inserted"]),
        str(c[0]["nodes_low"]),
        str(c[0]["nodes_fp32"]),
        secs_text(conv_s),
        "-" if skipped else secs_text(floor_s),
        "-" if skipped else f"{conv_s / floor_s:.2f}x",
        f"{peak / MiB:.0f}",
        f"{_max(c, 'anon_peak') / MiB:.0f}/{_max(c, 'file_peak') / MiB:.0f}",
        f"{max(r['peak_rss'] - r['base_rss'] for r in c) / MiB:.0f}",
        "-" if skipped else f"{_max(f, 'peak_rss') / MiB:.0f}",
        f"{100 * peak / t.size:.0f}%" if t.size >= BIG_ENOUGH else "-",
    ]


def target_lines(targets: list[Target]) -> list[str]:
    lines = []
    for t in targets:
        if t.group != "big" or t.error:
            continue
        label = ">2 GB model" if t.size > 2**31 else f"big model ({size_text(t.size)})"
        peak = _max(t.conv, "peak_rss")
        conv_s = _median(t.conv, "seconds")
        lines.append(
            f"{label}: peak RSS {peak / MiB:.0f} MiB = {100 * peak / t.size:.1f}% of model "
            f"size ({size_text(t.size)}); anonymous {_max(t.conv, 'anon_peak') / MiB:.0f} MiB, "
            f"file-backed {_max(t.conv, 'file_peak') / MiB:.0f} MiB (sampled)"
        )
        if not t.conv[0].get("external_out", True):
            lines.append(
                f"{label}: NOTE the converted model was written as a single "
                f"{size_text(t.conv[0]['size_after'])} protobuf, without external data"
            )
        if t.floor:
            floor_s = _median(t.floor, "seconds")
            lines.append(
                f"{label}: conversion {conv_s:.2f} s = {conv_s / floor_s:.2f}x the I/O floor "
                f"({floor_s:.2f} s, peak RSS {_max(t.floor, 'peak_rss') / MiB:.0f} MiB)"
            )
        if t.dd:
            dd_s, d = _median(t.dd, "seconds"), t.dd[0]
            lines.append(
                f"{label}: conversion {conv_s:.2f} s = {conv_s / dd_s:.2f}x dd's read+write "
                f"({dd_s:.2f} s: read {_median(t.dd, 'read'):.2f} s of "
                f"{size_text(d['bytes_read'])}, write {_median(t.dd, 'write'):.2f} s of "
                f"{size_text(t.conv[0]['size_after'])}); peak RSS {peak / MiB:.0f} MiB"
            )
            cpu = _median(t.conv, "cpu")
            lines.append(
                f"{label}: conversion CPU {cpu:.2f} s (user + system, all threads) = "
                f"{cpu / conv_s:.2f} cores busy on average, {cpu / (t.size / GB):.2f} CPU s per "
                f"GB of input; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
                f"(other processes included)"
            )
    return lines


# ----------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="measurements per model (median time)")
    p.add_argument("--level", default="O2", help="conversion level O0..O3 (default O2)")
    p.add_argument("--dtype", default="fp16", help="fp16 or bf16 (default fp16)")
    p.add_argument(
        "--big-bytes",
        type=float,
        default=2.2e9,
        help="weight bytes of the generated external-data model (default 2.2e9)",
    )
    p.add_argument("--no-big", action="store_true", help="skip the generated > 2 GB model")
    p.add_argument(
        "--no-floor",
        action="store_true",
        help="big model: skip the onnx.load+onnx.save floor (conversion and dd only)",
    )
    p.add_argument(
        "--big-width", type=int, default=1024, help="width of the big model's square weights"
    )
    p.add_argument("--only", help="measure only models whose name matches this regex")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--json", type=Path, help="also write every raw measurement to this file")
    p.add_argument(
        "--tmpdir", type=Path, help="where temp models go (default: the system temp dir)"
    )
    p.add_argument("--timeout", type=float, default=900, help="seconds per child process")
    p.add_argument("-v", "--verbose", action="store_true", help="each measurement on stderr")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wall = time.perf_counter()
    tmp_root = args.tmpdir or Path(tempfile.gettempdir())
    workdir = Path(tempfile.mkdtemp(prefix="amp_bench_", dir=tmp_root))
    try:
        import platform

        import onnx
        import onnx_ir

        import amp_convert

        print(
            f"# amp-convert {amp_convert.__version__} (onnx {onnx.__version__}, onnx-ir "
            f"{onnx_ir.__version__}, Python {platform.python_version()}), level {args.level} "
            f"{args.dtype}, {args.repeat} repeats interleaved, {os.cpu_count()} CPUs, "
            f"temp dir {workdir}",
            flush=True,
        )
        only = re.compile(args.only) if args.only else None

        def wanted(name: str) -> bool:
            return only is None or bool(only.search(name))

        big = None if args.no_big else int(args.big_bytes)
        targets = collect_targets(workdir, wanted, big, args.big_width)

        outdir = workdir / "out"
        outdir.mkdir()
        for t in targets:
            print(f"# measuring {t.name} ({size_text(t.size)})", file=sys.stderr, flush=True)
            measure(t, args, outdir)

        print()
        print(
            "conv/floor: median time of convert_file vs onnx.load+onnx.save of the same model, "
            "each in a fresh process;"
        )
        print(
            "RSS: peak (VmHWM) of that process, max over repeats; dRSS = peak minus the RSS "
            "after imports, before the timed work; RSS/size only for models >= 10 MB;"
        )
        print("(anon/file): sampled peaks of anonymous vs file-backed (mmapped) resident memory.")
        print()
        table = markdown_table if args.markdown else text_table
        print(table(COLUMNS, [row(t) for t in targets]))
        print()
        for line in target_lines(targets):
            print(line)
        print(f"# total wall time {time.perf_counter() - wall:.0f} s")
        if args.json:
            raw = [
                {k: v for k, v in vars(t).items() if k != "path"} | {"path": str(t.path)}
                for t in targets
            ]
            args.json.write_text(json.dumps(raw, indent=2) + "\n")
        return 1 if any(t.error for t in targets) else 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
