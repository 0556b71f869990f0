"""Small models, whole processes: amp-convert against onnxconverter-common and ORT's float16.

    PYTHONPATH=. python bench/small_models.py [--repeat 5] [--only NAME ...] [--baseline-src DIR]

Every model of bench/pipelines.py (built in code, 2 layers, hidden 64) and models/sample_bert.onnx,
models/sample_resnet.onnx is written to a temporary folder; then each round runs, per model and
in rotated order, one fresh interpreter per tool, start-up included, as a user runs it (byte-code
cached, as after ``pip install``: one unmeasured warm-up round writes it):

* ``amp``: ``amp-convert MODEL -o OUT --force -q`` (O2, the default);
* ``occ``: ``onnxconverter_common.float16.convert_float_to_float16(model, keep_io_types=True)``
  between ``onnx.load`` and ``onnx.save``;
* ``ort``: ``onnxruntime.transformers.float16.convert_float_to_float16(model,
  keep_io_types=True)``, the same way;
* ``floor``: no conversion at all: amp-convert's start-up settings, the third-party packages a
  conversion imports (onnx, onnx-ir, numpy, ml_dtypes, click, re2), onnx's schema registry (which
  the checker and shape inference read) and ``onnx.load`` then ``onnx.save``. What any design on
  these dependencies pays before its first line of conversion: ``floor / occ`` above 1.0 means
  amp / occ <= 1.0 cannot be met by making amp-convert's own code faster;
* with ``--baseline-src DIR`` (an older checkout) ``base``: that checkout's amp-convert.

Pairs A B A B: each model's tools run one after the other in every round, so the machine's load
is shared. Prints per model the median wall time of each tool and amp's ratio to each peer
(medians of the per-round ratios), then the median over models of those ratios (target: amp /
occ <= 1.0 on models under 20 MB) and the children's CPU time (user + sys) the same way.
"""

from __future__ import annotations

import argparse
import os
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

from bench._needs import needs  # noqa: E402
from bench._progress import Every, progress  # noqa: E402

AMP = "from amp_convert.startup import main; main()"
OLD_AMP = "from amp_convert.commands.cli import main; main()"
PEER = """
import sys, warnings
import onnx
{imp}
warnings.simplefilter("ignore")
model = onnx.load(sys.argv[1])
out = convert_float_to_float16(model, keep_io_types=True)
onnx.save(out, sys.argv[2])
"""
FLOOR = """
import sys
from amp_convert.startup import lean_process
from amp_convert.commands.deferred import defer_sympy
lean_process()
defer_sympy()
import click, ml_dtypes, numpy, onnx, onnx_ir, re2
onnx.defs.get_schema("Add")
onnx.save(onnx.load(sys.argv[1]), sys.argv[2])
"""
OCC = PEER.format(imp="from onnxconverter_common.float16 import convert_float_to_float16")
ORT = PEER.format(imp="from onnxruntime.transformers.float16 import convert_float_to_float16")
MB = 1e6


def write_models(folder: Path) -> dict[str, Path]:
    """bench/pipelines.py's models and the two samples, as files: name -> path."""
    import onnx

    from bench.pipelines import models

    paths: dict[str, Path] = {}
    for name, model, _dims, _decoder in models(layers=2, hidden=64, heads=4):
        slug = "".join(c if c.isalnum() else "_" for c in name).strip("_")
        path = folder / f"{slug}.onnx"
        onnx.save(model, str(path))
        paths[name] = path
    for sample in ("sample_bert", "sample_resnet"):
        paths[sample] = REPO / "models" / f"{sample}.onnx"
    return paths


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + sys of the child) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or ["no message"])[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _env(pythonpath: Path, pycache: Path) -> dict[str, str]:
    """Byte-code cached as an installed package has it (pip compiles on install), for every tool
    alike: in one prefix folder, so nothing is written into the checkouts."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath), PYTHONPYCACHEPREFIX=str(pycache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def tools(
    model: Path, out: Path, baseline: Path | None, pycache: Path
) -> dict[str, tuple[list[str], dict]]:
    py = sys.executable
    here = _env(REPO, pycache)
    cmds = {
        "amp": ([py, "-c", AMP, str(model), "-o", str(out), "--force", "-q"], here),
        "occ": ([py, "-c", OCC, str(model), str(out)], here),
        "ort": ([py, "-c", ORT, str(model), str(out)], here),
        "floor": ([py, "-c", FLOOR, str(model), str(out)], here),
    }
    if baseline is not None:
        there = _env(baseline, pycache / "baseline")
        entry = AMP if (baseline / "amp_convert" / "startup.py").exists() else OLD_AMP
        cmds["base"] = ([py, "-c", entry, str(model), "-o", str(out), "--force", "-q"], there)
    return cmds


def measure(
    paths: dict[str, Path], out: Path, repeat: int, baseline: Path | None
) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """model -> tool -> [(wall, cpu)] per round; one unmeasured warm-up round first."""
    times: dict[str, dict[str, list[tuple[float, float]]]] = {}
    every = Every(10.0)
    for r in range(repeat + 1):
        progress(f"round {r} of {repeat}" if r else "warm-up round (unmeasured)")
        for i, (name, path) in enumerate(paths.items()):
            every(f"  model {i + 1} of {len(paths)}: {name}")
            cmds = tools(path, out, baseline, out.parent / "pycache")
            order = list(cmds)
            order = order[r % len(order) :] + order[: r % len(order)]
            for tool in order:
                try:
                    result = _run(*cmds[tool])
                except RuntimeError as e:
                    print(f"  {name} / {tool} failed: {e}", file=sys.stderr)
                    result = (float("nan"), float("nan"))
                if r:
                    times.setdefault(name, {}).setdefault(tool, []).append(result)
    return times


def _ratio(rows: list[tuple[float, float]], base: list[tuple[float, float]], i: int) -> float:
    """Median of the per-round ratios (the pairs share a round's load)."""
    return statistics.median(a[i] / b[i] for a, b in zip(rows, base, strict=True))


def report(times: dict[str, dict[str, list[tuple[float, float]]]], sizes: dict[str, float]) -> None:
    peers = [t for t in ("occ", "ort", "floor", "base") if any(t in v for v in times.values())]
    head = f"{'model':34s} {'MB':>6s} " + " ".join(f"{t + ' s':>7s}" for t in ["amp", *peers])
    print(head + "  " + " ".join(f"{'amp/' + t:>8s}" for t in peers))
    wall: dict[str, list[float]] = {t: [] for t in peers}
    cpu: dict[str, list[float]] = {t: [] for t in peers}
    for name, by_tool in times.items():
        med = {t: statistics.median(w for w, _ in rows) for t, rows in by_tool.items()}
        cells = " ".join(f"{med[t]:7.3f}" for t in ["amp", *peers])
        ratios = []
        for t in peers:
            w = _ratio(by_tool["amp"], by_tool[t], 0)
            ratios.append(f"{w:8.2f}")
            if sizes[name] < 20 * MB and w == w:  # not NaN
                wall[t].append(w)
                cpu[t].append(_ratio(by_tool["amp"], by_tool[t], 1))
        print(f"{name[:34]:34s} {sizes[name] / MB:6.2f} {cells}  {' '.join(ratios)}")
    for t in peers:
        print(
            f"median over {len(wall[t])} models < 20 MB, amp / {t}: "
            f"wall {statistics.median(wall[t]):.2f}x, CPU {statistics.median(cpu[t]):.2f}x"
            + (" (target <= 1.0)" if t == "occ" else "")
        )
    floor = [
        (_ratio(by_tool["floor"], by_tool["occ"], 0), _ratio(by_tool["floor"], by_tool["occ"], 1))
        for name, by_tool in times.items()
        if {"floor", "occ"} <= by_tool.keys() and sizes[name] < 20 * MB
    ]
    floor = [(w, c) for w, c in floor if w == w]  # not NaN: occ failed on the model
    if floor:
        print(
            f"median over {len(floor)} models < 20 MB, floor / occ: "
            f"wall {statistics.median(w for w, _ in floor):.2f}x, "
            f"CPU {statistics.median(c for _, c in floor):.2f}x (no conversion)"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", nargs="*", help="model names to run (default: all)")
    p.add_argument("--baseline-src", type=Path, help="source folder of an older amp-convert")
    args = p.parse_args(argv)
    needs("onnxruntime", "onnxconverter_common")
    tmp = Path(tempfile.mkdtemp(prefix="amp_small_"))
    try:
        paths = write_models(tmp)
        if args.only:
            paths = {k: v for k, v in paths.items() if k in args.only}
        sizes = {name: float(path.stat().st_size) for name, path in paths.items()}
        times = measure(paths, tmp / "out.onnx", args.repeat, args.baseline_src)
        print(f"medians of {args.repeat} rounds, whole processes, paired per round")
        report(times, sizes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
