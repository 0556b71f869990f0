"""Start-up of the command line, side by side with the imports it cannot avoid (issue 20).

Each round runs, in a fresh interpreter each and in rotated order:
  * ``amp-convert --version`` against ``python -c "import onnx"`` (target <= 1.5x);
  * ``amp-convert --help``;
  * ``amp-convert MODEL -o OUT --force -q`` on a ~1 MB BERT-style model (models/blocks.py)
    against ``python -c "import onnx_ir"`` (target <= 1.5x);
  * with ``--baseline-src DIR`` (a checkout of an older amp-convert, e.g. ``git worktree add
    /tmp/base main``) the same three commands run from that source, for a before/after column.
Medians of ``--repeat`` rounds; ratios come from the same run. Also prints whether sympy was
imported by a conversion (``-X importtime``).

    PYTHONPATH=. python bench/startup.py [--repeat 7] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import os
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

CLI = "from amp_convert.startup import main; main()"
OLD_CLI = "from amp_convert.commands.cli import main; main()"


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return elapsed


def _commands(
    model: Path, out: Path, baseline: Path | None, pycache: Path
) -> dict[str, tuple[list[str], dict]]:
    """Byte code cached for every command alike, as after ``pip install`` (bench/small_models.py's
    _env): with PYTHONDONTWRITEBYTECODE set, amp-convert's own modules were compiled on every run
    while the installed packages' were not (0.62 s against 0.46-0.54 s for the 1 MB model)."""
    from bench.small_models import _env

    py = sys.executable
    here = _env(REPO, pycache)
    convert_args = [str(model), "-o", str(out), "--force", "-q"]
    cmds = {
        "import onnx": ([py, "-c", "import onnx"], here),
        "import onnx_ir": ([py, "-c", "import onnx_ir"], here),
        "amp-convert --version": ([py, "-c", CLI, "--version"], here),
        "amp-convert --help": ([py, "-c", CLI, "--help"], here),
        "amp-convert 1 MB model": ([py, "-c", CLI, *convert_args], here),
    }
    if baseline is not None:
        there = _env(baseline, pycache / "baseline")
        entry = CLI if (baseline / "amp_convert" / "startup.py").exists() else OLD_CLI
        cmds |= {
            "baseline --version": ([py, "-c", entry, "--version"], there),
            "baseline --help": ([py, "-c", entry, "--help"], there),
            "baseline 1 MB model": ([py, "-c", entry, *convert_args], there),
        }
    return cmds


def _sympy_loaded(model: Path, out: Path) -> bool:
    argv = ["amp-convert", str(model), "-o", str(out), "--force", "-q"]
    code = f"import sys; sys.argv = {argv!r}; {CLI}"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True
    )
    return any(line.rstrip().endswith("| sympy.core") for line in done.stderr.splitlines())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--baseline-src", type=Path, help="source folder of an older amp-convert")
    args = p.parse_args(argv)
    import onnx

    from bench._progress import progress
    from models.blocks import bert_encoder

    tmp = Path(tempfile.mkdtemp(prefix="amp_startup_"))
    try:
        model = tmp / "bert_1mb.onnx"
        onnx.save(bert_encoder(layers=1, hidden=128, heads=4, vocab=500), str(model))
        out = tmp / "out.onnx"
        cmds = _commands(model, out, args.baseline_src, tmp / "pycache")
        times: dict[str, list[float]] = {name: [] for name in cmds}
        names = list(cmds)
        for _ in range(1):  # warm the page cache and write the byte code, unmeasured
            for name in names:
                _timed(*cmds[name])
        for r in range(args.repeat):
            progress(f"round {r + 1} of {args.repeat}")
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(_timed(*cmds[name]))
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"model: {model.stat().st_size / 1e6:.2f} MB; medians of {args.repeat} rounds")
        for name, t in med.items():
            print(f"  {name:26s} {t:6.3f} s")
        version = med["amp-convert --version"] / med["import onnx"]
        convert = med["amp-convert 1 MB model"] / med["import onnx_ir"]
        print(f"--version / import onnx      {version:.2f}x (target <= 1.5)")
        print(f"--help / import onnx         {med['amp-convert --help'] / med['import onnx']:.2f}x")
        print(f"1 MB conversion / import onnx_ir  {convert:.2f}x (target <= 1.5)")
        if args.baseline_src is not None:
            for what in ("--version", "--help", "1 MB model"):
                before, after = med[f"baseline {what}"], med[f"amp-convert {what}"]
                print(f"before/after {what:12s} {before:.3f} s -> {after:.3f} s")
        print(f"sympy imported by the conversion: {_sympy_loaded(model, out)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
