"""amp-convert (O1, O2, O3) against onnxconverter-common's float16 converter, in one run.

Models: every model in the onnx wheel's backend test data (light, pytorch-converted,
pytorch-operator, simple), the generated blocks (models/blocks.py: BERT-style encoder, GPT-style
decoder with causal mask, ResNet-style CNN with BatchNorm, YOLO-style head with Resize + NMS,
LSTM, Loop and Scan RNNs) and a generated > 2 GB FP32 model with external data (models/big.py).
Generated models go to a temporary folder that is removed at the end.

Converters, each timed file to file (load + convert + save):
  * amp-convert ``convert_file(src, dst, level=O1|O2|O3, dtype="fp16")``;
  * onnxconverter-common ``float16.convert_float_to_float16(onnx.load(src), keep_io_types=True)``
    then ``onnx.save`` (``save_as_external_data=True`` when the source has external data);
    where that call fails, also with ``disable_shape_infer=True`` (a separate row);
  * the I/O floor: ``onnx.load`` + ``onnx.save`` of the same model.

Measuring (bench/_compare_measure.py): every figure comes from a fresh interpreter that imported
only the tool being measured and did one unmeasured warm-up conversion of a tiny model. Models of
``--isolate-mb`` or more (the > 2 GB model) get a fresh process per conversion; the small ones
share one process per tool and round (the kernel's peak-RSS counter is reset before each model, so
each peak is still that conversion's own). Dirty pages are flushed (os.sync) before each process
starts, so a run never pays for the previous run's writeback; outputs are not fsynced (the figures
are page-cache figures, the same for every tool). ``--repeat`` rounds (``--big-repeat`` for isolated
models), tool order rotated per round; times are medians, peak RSS the maximum.

Checks (bench/_compare_analyze.py, in worker processes after all timing is done): loads in ONNX
Runtime CPU; ``onnx.checker.check_model(path, full_check=True)``; Cast nodes added (subgraphs
included); FP32 nodes by one definition applied to every output; output size on disk; accuracy
against the FP32 original with ``amp_convert.validate(..., provider="emulate", runs=0)``, skipped
where the original does not load in ORT.

Run from the repository root:
    PYTHONPATH=. python bench/compare.py [--no-big] [--only REGEX ...] [--markdown FILE]
        [--json FILE] [--repeat 3] [--big-repeat 3] [--jobs 2] [--tmpdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import glob
import json
import math
import multiprocessing
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # models/, bench/ and amp_convert/ importable without PYTHONPATH
    sys.path.insert(0, str(REPO))

from bench import _compare_analyze as analyze  # noqa: E402

MiB = 2**20
GB = 10**9
WHEEL_GROUPS = ("light", "pytorch-converted", "pytorch-operator", "simple")
LARGE = 100 * 10**6  # target 3: models over 100 MB convert within 1.3x the I/O floor
FLOOR_LIMIT = 1.3
# converter key -> (tool, level, label)
CONVERTERS: dict[str, tuple[str, str | None, str]] = {
    "amp_O1": ("amp", "O1", "amp-convert O1"),
    "amp_O2": ("amp", "O2", "amp-convert O2"),
    "amp_O3": ("amp", "O3", "amp-convert O3"),
    "occ": ("occ", None, "onnxconverter-common"),
    "occ_noinfer": ("occ_noinfer", None, "onnxconverter-common, disable_shape_infer=True"),
}
AMP = ("amp_O1", "amp_O2", "amp_O3")


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------
@dataclass
class Model:
    key: str  # group/name
    group: str
    path: Path
    size: int
    isolated: bool = False  # own fresh process per conversion
    runs: dict[str, list[dict]] = field(default_factory=dict)  # converter or "floor" -> results
    original: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)  # converter -> analysis

    def dst(self, workdir: Path, conv: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.key)
        return workdir / "out" / conv / safe / "model.onnx"

    def error(self, conv: str) -> str | None:
        return next((r["error"] for r in self.runs.get(conv, []) if "error" in r), None)

    def converted(self, conv: str) -> bool:
        return bool(self.runs.get(conv)) and self.error(conv) is None

    def median(self, conv: str) -> float | None:
        runs = [r["seconds"] for r in self.runs.get(conv, []) if "seconds" in r]
        return statistics.median(runs) if runs and not self.error(conv) else None

    def fastest(self, conv: str) -> float | None:
        runs = [r["seconds"] for r in self.runs.get(conv, []) if "seconds" in r]
        return min(runs) if runs and not self.error(conv) else None

    def peak(self, conv: str) -> int | None:
        runs = [r["peak_rss"] for r in self.runs.get(conv, []) if "peak_rss" in r]
        return max(runs) if runs and not self.error(conv) else None

    def io_changed(self, conv: str) -> list[str]:
        """Model inputs/outputs whose element type differs from the original's (keep_io_types)."""
        before = self.original.get("io_types") or {}
        after = self.checks.get(conv, {}).get("io_types") or {}
        return [n for n, t in before.items() if n in after and after[n] != t]

    def valid(self, conv: str) -> bool:
        c = self.checks.get(conv)
        return bool(c) and c.get("ort_error") is None and c.get("checker_error") is None


def wheel_models() -> list[Model]:
    import onnx

    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    out = []
    for group in WHEEL_GROUPS:
        if group == "light":
            paths = sorted(Path(p) for p in glob.glob(str(root / group / "*.onnx")))
            named = [(p.stem, p) for p in paths]
        else:
            paths = sorted(Path(p) for p in glob.glob(str(root / group / "*" / "model.onnx")))
            named = [(p.parent.name, p) for p in paths]
        out += [Model(f"{group}/{n}", group, p, 0) for n, p in named]
    return out


def block_models(workdir: Path, wanted) -> list[Model]:
    import onnx

    from models.blocks import ALL_BLOCKS

    out = []
    for name, build in ALL_BLOCKS.items():
        key = f"generated/{name}"
        if not wanted(key):
            continue
        path = workdir / "models" / f"{name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(build(), str(path))
        out.append(Model(key, "generated", path, 0))
    return out


def big_model(workdir: Path, target_bytes: int) -> Model:
    from models.big import write_big_model

    start = time.perf_counter()
    info = write_big_model(workdir / "models" / "big" / "big.onnx", target_bytes=target_bytes)
    log(
        f"wrote {info.path.name} + {info.data_path.name}: {info.layers} x MatMul "
        f"{info.width}x{info.width} + Add + Relu, {info.data_bytes / GB:.2f} GB external data, "
        f"{time.perf_counter() - start:.1f} s"
    )
    size = analyze.disk_size(info.path)
    return Model(f"generated/big_external_{size / GB:.1f}GB", "generated", info.path, size)


def write_warmup(workdir: Path) -> Path:
    """A tiny MatMul+Add+Relu model every measuring process converts once, unmeasured."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "warmup",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = workdir / "warmup" / "warmup.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


# ----------------------------------------------------------------------------------------------
# phase 1: timing and peak RSS in fresh processes
# ----------------------------------------------------------------------------------------------
def run_child(spec: dict, workdir: Path, timeout: float) -> list[dict]:
    """Run bench/_compare_measure.py on `spec`; one result per job, in order.

    A child that dies mid-batch (a crash in native code) costs only the job it was on: that job
    gets the error and the rest run again in a new child.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    pending = list(spec["jobs"])
    results: list[dict] = []
    while pending:
        fd, spec_path = tempfile.mkstemp(suffix=".json", dir=workdir)
        with os.fdopen(fd, "w") as f:
            json.dump({**spec, "jobs": pending}, f)
        cmd = [sys.executable, "-m", "bench._compare_measure", spec_path]
        # flush the dirty pages earlier runs left (GBs after the big model), so no measurement
        # pays for another's writeback: each one starts from the same clean page cache
        if hasattr(os, "sync"):
            os.sync()
        try:
            proc = subprocess.run(
                cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
            )
            stdout, why = proc.stdout, f"child failed (rc {proc.returncode})"
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        except subprocess.TimeoutExpired as e:
            out = e.stdout or b""
            stdout = out.decode() if isinstance(out, bytes) else out
            why, tail = "child timed out", f"after {timeout:.0f} s"
        finally:
            os.unlink(spec_path)
        got = {}
        for line in stdout.splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(r, dict) and "key" in r:
                got[r["key"]] = r
        done = [j for j in pending if j["key"] in got]
        results += [got[j["key"]] for j in done]
        rest = [j for j in pending if j["key"] not in got]
        if rest:  # the first unanswered job is the one that killed the child
            results.append({"key": rest[0]["key"], "error": f"{why}: {tail}"[:500]})
            rest = rest[1:]
        pending = rest
    return results


def measure_unit(
    conv: str, models: list[Model], args: argparse.Namespace, workdir: Path, warmup: Path
) -> None:
    """One round of converter `conv` (or "floor") over `models`: batched or isolated."""
    tool, level = ("floor", None) if conv == "floor" else CONVERTERS[conv][:2]
    base = {"tool": tool, "level": level, "dtype": "fp16", "warmup": str(warmup)}

    def job(m: Model) -> dict:
        # floor outputs are thrown away at once; converted models are kept for the checks
        return {"key": m.key, "src": str(m.path), "dst": str(m.dst(workdir, conv)),
                "discard": conv == "floor"}  # fmt: skip

    todo = [m for m in models if not any("error" in r for r in m.runs.get(conv, []))]
    batched = [m for m in todo if not m.isolated]
    by_key = {m.key: m for m in todo}
    if batched:
        spec = {**base, "sample": False, "jobs": [job(m) for m in batched]}
        for r in run_child(spec, workdir, args.timeout):
            r["batched"] = True
            by_key[r["key"]].runs.setdefault(conv, []).append(r)
    for m in todo:
        if m.isolated:
            spec = {**base, "sample": True, "jobs": [job(m)]}
            (r,) = run_child(spec, workdir, args.timeout)
            r["batched"] = False
            m.runs.setdefault(conv, []).append(r)
            msg = r.get("error") or f"{r['seconds']:.2f} s, peak RSS {r['peak_rss'] / MiB:.0f} MiB"
            log(f"  {m.key} {conv}: {msg}")


def measure_all(models: list[Model], args: argparse.Namespace, workdir: Path, warmup: Path) -> None:
    units = ["amp_O1", "amp_O2", "amp_O3", "occ", "floor"]
    small = [m for m in models if not m.isolated]
    big = [m for m in models if m.isolated]
    rounds = max(args.repeat if small else 0, args.big_repeat if big else 0)
    for i in range(rounds):
        members = (small if i < args.repeat else []) + (big if i < args.big_repeat else [])
        order = units[i % len(units) :] + units[: i % len(units)]
        start = time.perf_counter()
        for conv in order:
            measure_unit(conv, members, args, workdir, warmup)
        log(f"round {i + 1}/{rounds}: {len(members)} models, {time.perf_counter() - start:.0f} s")
    failed = [m for m in models if m.error("occ")]
    if failed:
        log(f"onnxconverter-common failed on {len(failed)} models; again with disable_shape_infer")
        for i in range(rounds):
            members = [m for m in failed if i < (args.big_repeat if m.isolated else args.repeat)]
            measure_unit("occ_noinfer", members, args, workdir, warmup)


# ----------------------------------------------------------------------------------------------
# phase 2: checks and accuracy in worker processes
# ----------------------------------------------------------------------------------------------
def check_all(models: list[Model], args: argparse.Namespace, workdir: Path) -> None:
    quiet = {"initializer": analyze.quiet_worker, "initargs": (str(workdir / "ort.log"),)}
    small_pool = cf.ProcessPoolExecutor(
        args.jobs, mp_context=multiprocessing.get_context("fork"), **quiet
    )
    # the big model's checks hold GBs: one at a time, each in a fresh process
    recycle = {"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {}
    big_pool = cf.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"), **recycle, **quiet
    )
    try:
        pool = {False: small_pool, True: big_pool}
        futures = {pool[m.isolated].submit(analyze.analyze_file, str(m.path)): m for m in models}
        for fut in cf.as_completed(futures):
            m = futures[fut]
            m.original = _result(fut)
            m.size = m.original.get("size") or m.size
        log("originals checked")
        futures2 = {}
        for m in models:
            loads = m.original.get("ort_error") is None and "error" not in m.original
            for conv in CONVERTERS:
                if m.converted(conv):
                    args_ = (str(m.path), str(m.dst(workdir, conv)), loads, args.seed)
                    fut = pool[m.isolated].submit(analyze.analyze_converted, *args_)
                    futures2[fut] = (m, conv)
        for n, fut in enumerate(cf.as_completed(futures2), 1):
            m, conv = futures2[fut]
            m.checks[conv] = _result(fut)
            if m.isolated:
                log(f"  checked {m.key} {conv}")
            if n % 200 == 0:
                log(f"  {n}/{len(futures2)} converted models checked")
    finally:
        small_pool.shutdown(cancel_futures=True)
        big_pool.shutdown(cancel_futures=True)


def _result(fut: cf.Future) -> dict[str, Any]:
    try:
        return fut.result()
    except Exception as e:  # a worker died (native crash) or the check itself raised
        msg = analyze.first_line(e)
        return {"error": msg, "ort_error": msg, "checker_error": msg, "accuracy": {"error": msg}}


# ----------------------------------------------------------------------------------------------
# table
# ----------------------------------------------------------------------------------------------
COLUMNS = [
    "model",
    "converter",
    "loads in ORT",
    "full checker",
    "casts added",
    "FP32 nodes",
    "time",
    "x floor",
    "peak RSS MiB",
    "size",
    "max rel err",
    "min cosine",
    "NaN/Inf",
]


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    if n >= GB:
        return f"{n / GB:.2f} GB"
    if n >= 10**6:
        return f"{n / 10**6:.1f} MB"
    return f"{n / 10**3:.1f} kB"


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.2f} s" if s >= 1 else f"{s * 1000:.0f} ms"


def _io_note(m: Model, conv: str) -> str:
    changed = m.io_changed(conv)
    return f" (I/O types changed: {', '.join(changed)})" if changed else ""


def _time_cell(m: Model, conv: str) -> str:
    """Median; for an isolated (large) model also the range over its runs."""
    t = m.median(conv)
    runs = [r["seconds"] for r in m.runs.get(conv, []) if "seconds" in r]
    if t is None or not m.isolated or len(runs) < 2:
        return _secs(t)
    return f"{_secs(t)} ({min(runs):.2f}-{max(runs):.2f})"


def _yes(err: str | None, width: int) -> str:
    if err is None:
        return "yes"
    return "no: " + (err if len(err) <= width else err[: width - 3] + "...")


def _float(v: Any, fmt: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):  # "nan" / "inf" from the JSON-safe report
        return v
    return format(v, fmt)


def _nodes(c: dict[str, Any]) -> str:
    if "fp32_nodes" not in c:
        return "-"
    return f"{c['fp32_nodes']}/{c['float_nodes']}"


def rows(m: Model, width: int) -> list[list[str]]:
    o = m.original
    floor_s, floor_peak = m.median("floor"), m.peak("floor")
    head = [
        m.key,
        "original FP32 (time = I/O floor)",
        _yes(o.get("ort_error"), width) if o else "-",
        _yes(o.get("checker_error"), width) if o else "-",
        f"({o['casts']} casts)" if "casts" in o else "-",
        _nodes(o),
        _time_cell(m, "floor") if floor_s is not None else f"floor failed: {m.error('floor')}",
        "1.00",
        f"{floor_peak / MiB:.0f}" if floor_peak else "-",
        _size(m.size),
        "",
        "",
        "",
    ]
    out = [head]
    for conv, (_, _, label) in CONVERTERS.items():
        if conv not in m.runs:
            continue
        err = m.error(conv)
        if err:
            out.append([m.key, label, _yes("conversion failed: " + err, width)] + [""] * 10)
            continue
        c = m.checks.get(conv, {})
        t, peak = m.median(conv), m.peak(conv)
        acc = c.get("accuracy", {})
        if "skipped" in acc:
            accs = [f"skipped: {acc['skipped']}", "", ""]
        elif "error" in acc:
            accs = [_yes(acc["error"], width), "", ""]
        elif acc:
            nan = str(acc["nan_inf"])
            if acc["ref_nan_inf"]:
                nan += f" (orig {acc['ref_nan_inf']})"
            if acc["exact_mismatches"]:
                nan += f"; {acc['exact_mismatches']} int mismatches"
            accs = [_float(acc["max_rel"], ".2e"), _float(acc["min_cosine"], ".6f"), nan]
        else:
            accs = ["-", "-", "-"]
        casts = c["casts"] - o["casts"] if "casts" in c and "casts" in o else None
        out.append(
            [
                m.key,
                label,
                _yes(c.get("ort_error"), width) if c else "-",
                _yes(c.get("checker_error"), width) + _io_note(m, conv) if c else "-",
                "-" if casts is None else f"{casts:+d}",
                _nodes(c),
                _time_cell(m, conv),
                f"{t / floor_s:.2f}" if t and floor_s else "-",
                f"{peak / MiB:.0f}" if peak else "-",
                _size(c.get("size")),
                *accs,
            ]
        )
    return out


def format_text(all_rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [COLUMNS, *all_rows]) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    prev = None
    for r in all_rows:
        cells = [("" if r[0] == prev else r[0]), *r[1:]]
        prev = r[0]
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(lines)


def format_markdown(all_rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    head = [c.replace("x floor", "× floor") for c in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---|" * 4 + "---:|" * 7]
    prev = None
    for r in all_rows:
        cells = [("" if r[0] == prev else f"`{r[0]}`"), *r[1:]]
        prev = r[0]
        lines.append("| " + " | ".join(esc(c) for c in cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# summary per converter
# ----------------------------------------------------------------------------------------------
SUMMARY_COLUMNS = [
    "converter",
    "converted",
    "loads in ORT",
    "full checker",
    "casts added",
    "FP32 nodes",
    "median x floor",
    "total time",
    "median max rel err",
    "models with NaN/Inf",
]


def summary(models: list[Model]) -> dict[str, Any]:
    """Per converter: validity over all models; casts, nodes, time and accuracy on a common set.

    The common set: models whose original loads in ORT and where amp-convert (O1/O2/O3) and
    onnxconverter-common all produced an output that loads and passes the full checker, so
    sums compare the same models.
    """
    loads = [m for m in models if m.original.get("ort_error") is None and "error" not in m.original]
    common = [m for m in loads if all(m.valid(c) for c in (*AMP, "occ"))]
    out: dict[str, Any] = {
        "models": len(models),
        "originals_loading": len(loads),
        "common": [m.key for m in common],
    }
    for conv in (*AMP, "occ"):
        ran = [m for m in models if conv in m.runs]
        ok = [m for m in ran if m.converted(conv)]
        times = [(m.median(conv), m.median("floor")) for m in common]
        accs = [m.checks[conv].get("accuracy", {}) for m in common]
        rels = [a["max_rel"] for a in accs if isinstance(a.get("max_rel"), float)]
        out[conv] = {
            "ran": len(ran),
            "converted": len(ok),
            "loads": sum(1 for m in loads if m.converted(conv) and not m.checks[conv]["ort_error"]),
            "checker": sum(1 for m in ok if not m.checks.get(conv, {}).get("checker_error", "?")),
            "casts_added": sum(_casts_added(m, conv) or 0 for m in common),
            "fp32_nodes": sum(m.checks[conv].get("fp32_nodes", 0) for m in common),
            "float_nodes": sum(m.checks[conv].get("float_nodes", 0) for m in common),
            "median_x_floor": statistics.median(a / f for a, f in times) if times else None,
            "total_s": sum(a for a, _ in times),
            "median_max_rel": statistics.median(rels) if rels else None,
            "nonfinite_models": sum(1 for a in accs if a.get("nan_inf")),
            "accuracy_models": len(accs),
        }
    return out


def summary_rows(s: dict[str, Any]) -> list[list[str]]:
    n_common = len(s["common"])
    rows_ = []
    for conv in (*AMP, "occ"):
        v = s[conv]
        rows_.append(
            [
                CONVERTERS[conv][2],
                f"{v['converted']}/{v['ran']}",
                f"{v['loads']}/{s['originals_loading']}",
                f"{v['checker']}/{v['ran']}",
                f"+{v['casts_added']}",
                f"{v['fp32_nodes']}/{v['float_nodes']}",
                _float(v["median_x_floor"], ".1f"),
                f"{v['total_s']:.2f} s",
                _float(v["median_max_rel"], ".2e"),
                f"{v['nonfinite_models']}/{n_common}",
            ]
        )
    return rows_


SUMMARY_NOTE = """\
converted / full checker: over all models; loads in ORT: over the models whose FP32
original loads. The other columns are over the {n} models where all four outputs load and pass the
checker: casts added and FP32 nodes summed, time summed, median of time / I/O floor, median of
the worst max rel error per model, models with NaN/Inf in an output (emulated FP16)."""


def format_plain(head: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join(lines)


def format_md(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(h.replace("x floor", "× floor") for h in head) + " |"]
    lines.append("|---|" + "---:|" * (len(head) - 1))
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# targets
# ----------------------------------------------------------------------------------------------
def _casts_added(m: Model, conv: str) -> int | None:
    c, o = m.checks.get(conv, {}), m.original
    return c["casts"] - o["casts"] if "casts" in c and "casts" in o else None


def targets(models: list[Model]) -> dict[str, Any]:
    """The four targets of project issue 4, with the figures behind each verdict."""
    loads = [m for m in models if m.original.get("ort_error") is None and "error" not in m.original]
    broken = [m for m in models if m not in loads]
    t1_fail = [
        {
            "model": m.key,
            "converter": conv,
            "problem": m.error(conv)
            or m.checks.get(conv, {}).get("ort_error")
            or m.checks.get(conv, {}).get("checker_error"),
        }
        for m in loads
        for conv in AMP
        if not (m.converted(conv) and m.valid(conv))
    ]
    t1_io = [{"model": m.key, "converter": conv, "changed": m.io_changed(conv)}
             for m in models for conv in AMP if m.io_changed(conv)]  # fmt: skip
    t1_broken = [
        {
            "model": m.key,
            "original_ort_error": m.original.get("ort_error"),
            "original_checker_error": m.original.get("checker_error"),
            "amp": {conv: _outcome(m, conv) for conv in AMP},
        }
        for m in broken
    ]

    def casts_vs_occ(conv: str) -> dict[str, Any]:
        both = [m for m in models if m.valid(conv) and m.valid("occ") and not m.io_changed("occ")]
        pairs = [(m, _casts_added(m, conv), _casts_added(m, "occ")) for m in both]
        more = [{"model": m.key, "amp": a, "occ": b} for m, a, b in pairs if a is None or a > b]
        fewer = sum(1 for _, a, b in pairs if a is not None and a < b)
        invalid = [m.key for m in models if m.valid(conv) and not m.valid("occ")]
        io_changed = [
            m.key for m in models if m.valid(conv) and m.valid("occ") and m.io_changed("occ")
        ]
        return {"met": not more, "compared": len(both), "more": more, "fewer": fewer,
                "occ_invalid": invalid, "occ_io_changed": io_changed}  # fmt: skip

    t3 = {}
    for conv in AMP:
        pairs = [(m, m.median(conv), m.median("occ")) for m in models]
        pairs = [(m, a, b) for m, a, b in pairs if a is not None and b is not None]
        slower = sorted(
            ({"model": m.key, "amp_s": a, "occ_s": b, "ratio": a / b} for m, a, b in pairs
             if a > b),
            key=lambda d: -d["ratio"],
        )  # fmt: skip
        ratios = [a / b for _, a, b in pairs]
        t3[conv] = {
            "compared": len(pairs),
            "slower": len(slower),
            "median_ratio": statistics.median(ratios) if ratios else None,
            "total_amp_s": sum(a for _, a, _ in pairs),
            "total_occ_s": sum(b for _, _, b in pairs),
            "worst": slower[:10],
            "noinfer": [
                {"model": m.key, "amp_s": m.median(conv), "occ_noinfer_s": m.median("occ_noinfer")}
                for m in models
                if m.median("occ") is None and m.median("occ_noinfer") and m.median(conv)
            ],
        }
    large = [m for m in models if m.size > LARGE]
    t3_floor = [
        {
            "model": m.key,
            "converter": conv,
            "seconds": m.median(conv),
            "floor_s": m.median("floor"),
            "floor_min_s": m.fastest("floor"),
            "ratio": (m.median(conv) or math.nan) / (m.median("floor") or math.nan),
            # the verdict's figure: against the floor's best run (the floor's spread is the
            # machine's, e.g. first-touch of GBs of fresh memory in a VM)
            "ratio_vs_fastest": (m.median(conv) or math.nan) / (m.fastest("floor") or math.nan),
        }
        for m in large
        for conv in AMP
    ]
    t4 = [
        {
            "model": m.key,
            "converter": conv,
            "size": m.size,
            "peak_rss": m.peak(conv),
            "limit": m.size / 2,
            "ratio": (m.peak(conv) or math.nan) / m.size,
            "anon_peak": max((r.get("anon_peak", 0) for r in m.runs.get(conv, [])), default=0),
            "file_peak": max((r.get("file_peak", 0) for r in m.runs.get(conv, [])), default=0),
            "occ_peak": m.peak("occ") or m.peak("occ_noinfer"),
        }
        for m in models
        if m.size > 2 * GB
        for conv in AMP
    ]
    return {
        "1": {
            "met": not t1_fail,
            "models_loading": len(loads),
            "failures": t1_fail,
            "io_types_changed": t1_io,
            "original_does_not_load": t1_broken,
        },
        "2": {**casts_vs_occ("amp_O2"), "context_O3": casts_vs_occ("amp_O3")},
        "3": {
            "met_vs_occ": all(v["slower"] == 0 for v in t3.values()),
            "vs_occ": t3,
            "met_vs_floor": (
                all(r["ratio_vs_fastest"] <= FLOOR_LIMIT for r in t3_floor) if t3_floor else None
            ),
            "vs_floor": t3_floor,
        },
        "4": {
            "met": all(r["peak_rss"] and r["peak_rss"] <= r["limit"] for r in t4) if t4 else None,
            "figures": t4,
        },
    }


def _verdict(met: bool | None) -> str:
    return (
        "not evaluated (no such model in this run)" if met is None else ("MET" if met else "MISSED")
    )


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _outcome(m: Model, conv: str) -> dict[str, Any]:
    c = m.checks.get(conv, {})
    return {
        "conversion_error": m.error(conv),
        "checker_error": c.get("checker_error"),
        "ort_error": c.get("ort_error"),
    }


def _short_outcome(o: dict[str, Any], original_error: str) -> str:
    """amp's outcome on a model whose original does not load: a few words."""
    if o["conversion_error"]:
        return "conversion failed: " + _clip(o["conversion_error"], 60)
    checker = "checker ok" if o["checker_error"] is None else "checker FAILS"
    if o["ort_error"] is None:
        return f"{checker}, loads"
    if o["ort_error"] == original_error:
        return f"{checker}, same ORT error"
    return f"{checker}, ORT: " + _clip(o["ort_error"], 70)


def target_lines(t: dict[str, Any]) -> list[str]:
    out = []
    t1 = t["1"]
    out.append(
        f"1. amp-convert output loads in ORT and passes the full checker at O1/O2/O3: "
        f"{_verdict(t1['met'])} ({t1['models_loading']} models whose original loads; "
        f"{len(t1['failures'])} failures)"
    )
    out += [f"   - {f['model']} {f['converter']}: {f['problem']}" for f in t1["failures"]]
    out.append(
        f"   amp-convert outputs whose input/output types differ from the original "
        f"(keep_io_types=True): {len(t1['io_types_changed'])}"
    )
    out += [
        f"   - {f['model']} {f['converter']}: {', '.join(f['changed'])}"
        for f in t1["io_types_changed"]
    ]
    if t1["original_does_not_load"]:
        out.append(
            f"   originals that do not load in ORT ({len(t1['original_does_not_load'])}; "
            "amp-convert's O1/O2/O3 outputs: full checker, ORT):"
        )
        for b in t1["original_does_not_load"]:
            orig = b["original_ort_error"] or ""
            outcomes = [_short_outcome(v, orig) for v in b["amp"].values()]
            if len(set(outcomes)) == 1:
                amp = f"O1/O2/O3: {outcomes[0]}"
            else:
                amp = "; ".join(f"O{i}: {o}" for i, o in enumerate(outcomes, 1))
            out.append(f"   - {b['model']}: {_clip(orig, 90)} -> {amp}")
    t2 = t["2"]
    out.append(
        f"2. casts added at O2 <= onnxconverter-common's: {_verdict(t2['met'])} "
        f"({t2['compared']} models where both outputs load and pass the checker: "
        f"{len(t2['more'])} with more casts, {t2['fewer']} with fewer)"
    )
    out += [f"   - {f['model']}: amp O2 {f['amp']:+d}, occ {f['occ']:+d}" for f in t2["more"]]
    o3 = t2["context_O3"]
    out.append(
        f"   context, O3 (everything the schemas allow, closest to what onnxconverter-common "
        f"does): {len(o3['more'])} of {o3['compared']} with more casts, {o3['fewer']} with fewer"
    )
    out += [f"   - {f['model']}: amp O3 {f['amp']:+d}, occ {f['occ']:+d}" for f in o3["more"]]
    if t2["occ_io_changed"]:
        out.append(
            "   not compared, onnxconverter-common changed the model's input/output types "
            f"despite keep_io_types=True ({len(t2['occ_io_changed'])}): "
            + ", ".join(t2["occ_io_changed"])
        )
    if t2["occ_invalid"]:
        out.append(
            f"   not compared, onnxconverter-common's output fails ORT or the checker "
            f"({len(t2['occ_invalid'])}): {', '.join(t2['occ_invalid'])}"
        )
    t3 = t["3"]
    out.append(f"3a. conversion time <= onnxconverter-common's: {_verdict(t3['met_vs_occ'])}")
    for conv, v in t3["vs_occ"].items():
        med = v["median_ratio"]
        out.append(
            f"   - {conv}: slower on {v['slower']}/{v['compared']} models; median time ratio "
            f"amp/occ {med:.2f}; totals {v['total_amp_s']:.2f} s vs {v['total_occ_s']:.2f} s"
            if med is not None
            else f"   - {conv}: nothing to compare"
        )
        worst = ", ".join(
            f"{w['model']} {w['ratio']:.1f}x ({_secs(w['amp_s'])} vs {_secs(w['occ_s'])})"
            for w in v["worst"][:3]
        )
        if worst:
            out.append(f"     worst: {worst}")
        for n in v["noinfer"]:
            out.append(
                f"     {n['model']}: default occ failed; vs disable_shape_infer: "
                f"{_secs(n['amp_s'])} vs {_secs(n['occ_noinfer_s'])}"
            )
    out.append(
        f"3b. models over 100 MB convert within {FLOOR_LIMIT}x the I/O floor (median conversion vs "
        f"the floor's fastest run): "
        f"{_verdict(t3['met_vs_floor'])}"
    )
    for r in t3["vs_floor"]:
        out.append(
            f"   - {r['model']} {r['converter']}: {_secs(r['seconds'])} = "
            f"{r['ratio_vs_fastest']:.2f}x the floor's fastest run ({_secs(r['floor_min_s'])}), "
            f"{r['ratio']:.2f}x its median ({_secs(r['floor_s'])})"
        )
    t4 = t["4"]
    out.append(f"4. peak RSS on the > 2 GB model <= half its size: {_verdict(t4['met'])}")
    for r in t4["figures"]:
        peak = r["peak_rss"]
        occ = f"; onnxconverter-common {r['occ_peak'] / MiB:.0f} MiB" if r["occ_peak"] else ""
        out.append(
            f"   - {r['model']} {r['converter']}: peak {peak / MiB:.0f} MiB = "
            f"{100 * r['ratio']:.0f}% of {_size(r['size'])} (limit {r['limit'] / MiB:.0f} MiB; "
            f"sampled anonymous {r['anon_peak'] / MiB:.0f} MiB, file-backed "
            f"{r['file_peak'] / MiB:.0f} MiB){occ}"
            if peak
            else f"   - {r['model']} {r['converter']}: no figure"
        )
    return out


# ----------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-big", action="store_true", help="skip the generated > 2 GB model")
    p.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="only models whose GROUP/NAME matches this regex (repeatable), e.g. bert, light/",
    )
    p.add_argument("--markdown", type=Path, metavar="FILE", help="write the table as Markdown")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the raw figures as JSON")
    p.add_argument(
        "--compact", type=Path, metavar="FILE", help="write a one-row-per-model Markdown table"
    )
    p.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="measure nothing: print the tables again from an earlier --json file",
    )
    p.add_argument("--repeat", type=int, default=3, help="rounds for batched models (median)")
    p.add_argument("--big-repeat", type=int, default=3, help="rounds for isolated models")
    p.add_argument(
        "--isolate-mb",
        type=float,
        default=10.0,
        help="models of this many MB or more get a fresh process per conversion (default 10)",
    )
    p.add_argument("--big-bytes", type=float, default=2.2e9, help="size of the generated model")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="check workers")
    p.add_argument("--seed", type=int, default=0, help="seed of the validation inputs")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per measuring process")
    p.add_argument("--tmpdir", type=Path, help="where temporary models go (default system temp)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--width", type=int, default=80, help="error text width in table cells")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.big_repeat < 1 or args.jobs < 1:
        p.error("--repeat, --big-repeat and --jobs must be >= 1")
    return args


def _git_commit() -> str:
    """HEAD of the repository, with "+dirty" when amp_convert/ has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "amp_convert"], cwd=REPO, capture_output=True,
            text=True,
        ).stdout.strip()  # fmt: skip
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        raw = json.loads(args.from_json.read_text())
        models = [model_from_json(d) for d in raw["models"]]
        print("# from " + str(args.from_json) + ": " + _meta_line(raw["meta"]))
        report(models, raw["meta"], args)
        return 0
    wall = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="amp_compare_", dir=args.tmpdir))
    try:
        import onnx
        import onnx_ir
        import onnxconverter_common
        import onnxruntime

        import amp_convert

        meta: dict[str, Any] = {
            "amp_convert": amp_convert.__version__,
            "commit": _git_commit(),
            "onnxconverter_common": onnxconverter_common.__version__,
            "onnx": onnx.__version__,
            "onnx_ir": onnx_ir.__version__,
            "onnxruntime": onnxruntime.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "repeat": args.repeat,
            "big_repeat": args.big_repeat,
            "workdir": str(workdir),
        }
        print("# " + _meta_line(meta), flush=True)
        patterns = [re.compile(p) for p in args.only or []]

        def wanted(key: str) -> bool:
            return not patterns or any(p.search(key) for p in patterns)

        models = block_models(workdir, wanted) + [m for m in wheel_models() if wanted(m.key)]
        big_key = f"generated/big_external_{args.big_bytes / GB:.1f}GB"
        if not args.no_big and wanted(big_key):
            free = shutil.disk_usage(workdir).free
            need = int(6 * args.big_bytes)  # model, 5 converted copies (half size), floor, temp
            if free < need:
                print(
                    f"# SKIPPED the big model: {_size(free)} free in {workdir}, need {_size(need)}"
                )
            else:
                models.append(big_model(workdir, int(args.big_bytes)))
        for m in models:
            m.size = m.size or analyze.disk_size(m.path)
            m.isolated = m.size >= args.isolate_mb * 10**6
        if not models:
            print("no model matches --only", file=sys.stderr)
            return 2
        log(f"{len(models)} models ({sum(m.isolated for m in models)} isolated)")
        warmup = write_warmup(workdir)

        start = time.perf_counter()
        measure_all(models, args, workdir, warmup)
        meta["measure_s"] = time.perf_counter() - start
        start = time.perf_counter()
        check_all(models, args, workdir)
        meta["check_s"] = time.perf_counter() - start
        meta["wall_s"] = time.perf_counter() - wall
        report(models, meta, args)
        print(
            f"# measuring {meta['measure_s']:.0f} s, checks {meta['check_s']:.0f} s, "
            f"total {meta['wall_s']:.0f} s"
        )
        return 0
    finally:
        if args.keep:
            print(f"# kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _meta_line(meta: dict[str, Any]) -> str:
    keys = ("amp_convert", "commit", "onnxconverter_common", "onnx", "onnx_ir", "onnxruntime",
            "python", "cpus", "repeat", "big_repeat")  # fmt: skip
    return ", ".join(f"{k} {meta[k]}" for k in keys if k in meta)


def model_from_json(d: dict[str, Any]) -> Model:
    return Model(
        key=d["key"], group=d["group"], path=Path(d["path"]), size=d["size"],
        isolated=d["isolated"], runs=d["runs"], original=d["original"], checks=d["checks"],
    )  # fmt: skip


def report(models: list[Model], meta: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the table, the summary and the targets; write --markdown / --compact / --json."""
    all_rows = [r for m in models for r in rows(m, args.width)]
    print()
    print(LEGEND)
    print()
    print(format_text(all_rows))
    summ = summary(models)
    note = SUMMARY_NOTE.format(n=len(summ["common"]))
    print()
    print("Summary per converter")
    print(note)
    print(format_plain(SUMMARY_COLUMNS, summary_rows(summ)))
    t = targets(models)
    lines = target_lines(t)
    print()
    print("Targets (project issue 4):")
    print("\n".join(lines))
    head = f"Measured with {_meta_line(meta)}.\n\n"
    if args.markdown:
        args.markdown.write_text(
            head
            + "Summary per converter\n\n"
            + format_md(SUMMARY_COLUMNS, summary_rows(summ))
            + "\n\n"
            + note
            + "\n\n"
            + LEGEND_MD
            + "\n\n"
            + format_markdown(all_rows)
            + "\n\nTargets (project issue 4):\n\n```\n"
            + "\n".join(lines)
            + "\n```\n"
        )
    if args.compact:
        args.compact.write_text(
            head + COMPACT_NOTE + "\n\n" + format_md(COMPACT_COLUMNS, compact_rows(models)) + "\n"
        )
    if args.json:
        raw = {
            "meta": meta,
            "models": [
                {
                    "key": m.key,
                    "group": m.group,
                    "path": str(m.path),
                    "size": m.size,
                    "isolated": m.isolated,
                    "original": m.original,
                    "runs": m.runs,
                    "checks": m.checks,
                    "median_s": {c: m.median(c) for c in m.runs},
                    "peak_rss": {c: m.peak(c) for c in m.runs},
                }
                for m in models
            ],
            "summary": summ,
            "targets": t,
        }
        args.json.write_text(json.dumps(raw, indent=1, default=str) + "\n")


# ----------------------------------------------------------------------------------------------
# compact table: one row per model
# ----------------------------------------------------------------------------------------------
COMPACT_COLUMNS = [
    "model",
    "original loads",
    "valid O1/O2/O3/occ",
    "casts added O1/O2/O3/occ",
    "FP32 nodes O2/occ",
    "time O2/occ/floor",
    "max rel err O2/occ",
]
COMPACT_NOTE = """\
One row per model. valid: the output loads in ORT and passes the full checker (y), passes the
checker only (c), neither (n), conversion failed (E), * = model input/output types changed
despite keep_io_types=True; occ = onnxconverter-common
(keep_io_types=True; its disable_shape_infer=True retry in brackets where the default failed).
casts added: Cast nodes minus the original's. time: medians, file to file; floor: onnx.load +
onnx.save. max rel err: emulated FP16 against the FP32 original, worst output ("-": not
measured, e.g. the original or the output does not load)."""


def _valid_mark(m: Model, conv: str) -> str:
    if conv not in m.runs:
        return "-"
    if m.error(conv):
        return "E"
    c = m.checks.get(conv, {})
    if c.get("checker_error") is not None:
        return "n"
    return "y" if c.get("ort_error") is None else "c"


def _rel(m: Model, conv: str) -> str:
    acc = m.checks.get(conv, {}).get("accuracy", {})
    return _float(acc.get("max_rel"), ".1e") if "max_rel" in acc else "-"


def compact_rows(models: list[Model]) -> list[list[str]]:
    out = []
    for m in models:
        occ = "occ"
        retry = m.error("occ") and "occ_noinfer" in m.runs
        if retry:
            occ = "occ_noinfer"

        def wrap(conv: str, text: str, retry: bool = bool(retry), occ: str = occ) -> str:
            return f"[{text}]" if retry and conv == occ else text

        casts = []
        for conv in (*AMP, "occ"):
            c = conv if conv != "occ" else occ
            n = _casts_added(m, c)
            casts.append(wrap(c, "-" if n is None else f"{n:+d}"))
        o2, oc = m.checks.get("amp_O2", {}), m.checks.get(occ, {})
        nodes = [
            f"{x['fp32_nodes']}/{x['float_nodes']}" if "fp32_nodes" in x else "-" for x in (o2, oc)
        ]
        marks = [_valid_mark(m, c) + ("*" if m.io_changed(c) else "") for c in (*AMP, "occ")]
        if retry:
            marks[-1] += f"[{_valid_mark(m, occ)}]"
        out.append(
            [
                f"`{m.key}`",
                "yes" if m.original.get("ort_error") is None else "no",
                "/".join(marks),
                "/".join(casts),
                f"{nodes[0]} / {wrap(occ, nodes[1])}",
                f"{_secs(m.median('amp_O2'))} / {wrap(occ, _secs(m.median(occ)))} / "
                f"{_secs(m.median('floor'))}",
                f"{_rel(m, 'amp_O2')} / {wrap(occ, _rel(m, occ))}",
            ]
        )
    return out


LEGEND = """\
Per model: a row for the FP32 original (its "time" and "peak RSS" are the I/O floor: onnx.load +
onnx.save in a fresh process), then one row per converter (file to file: load + convert + save).
loads in ORT: onnxruntime.InferenceSession on CPU. full checker: onnx.checker.check_model(path,
full_check=True). casts added: Cast nodes (subgraphs included) minus the original's. FP32 nodes:
float nodes still computing in FP32 / all float nodes (see bench/_compare_analyze.py). time:
median over rounds, each from a warm fresh process (batched for small models; for large ones, a
process per run and the range over runs); x floor: median time / median I/O floor. peak RSS:
VmHWM of that conversion. size: output on disk with external data. max rel err / min cosine /
NaN/Inf: worst over outputs, amp_convert.validate(provider="emulate", runs=0) against the FP32
original (NaN/Inf counted in the converted model's outputs)."""
LEGEND_MD = LEGEND.replace("x floor", "×floor")


if __name__ == "__main__":
    sys.exit(main())
