"""bench/compare.py's two phases: timing in fresh processes, then checks in worker processes.

Phase 1 runs bench/_compare_measure.py children (one tool per process, batched or one model per
process); phase 2 runs bench/_compare_analyze.py on every original and every converted output.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _compare_analyze as analyze
from bench._compare_model import CONVERTERS, Model

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


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
        return {
            "key": m.key,
            "src": str(m.path),
            "dst": str(m.dst(workdir, conv)),
            "external": m.external,
            "discard": conv == "floor",
        }

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
    """`--repeat` rounds (`--big-repeat` for isolated models), the tool order rotated per round."""
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
    """Check the originals, then every converted output (accuracy where the original loads)."""
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
        said = time.monotonic()
        futures2 = {}
        for m in models:
            for conv in CONVERTERS:
                if m.converted(conv):
                    args_ = (str(m.path), str(m.dst(workdir, conv)), m.loads(), args.seed)
                    fut = pool[m.isolated].submit(analyze.analyze_converted, *args_)
                    futures2[fut] = (m, conv)
        for n, fut in enumerate(cf.as_completed(futures2), 1):
            m, conv = futures2[fut]
            m.checks[conv] = _result(fut)
            if m.isolated:
                log(f"  checked {m.key} {conv}")
            if n % 200 == 0 or time.monotonic() - said >= 20:
                said = time.monotonic()
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
