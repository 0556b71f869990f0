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

Measuring (bench/_compare_run.py, bench/_compare_measure.py): every figure comes from a fresh
interpreter that imported only the tool being measured and did one unmeasured warm-up conversion
of a tiny model. Models of ``--isolate-mb`` or more (the > 2 GB model) get a fresh process per
conversion; the small ones share one process per tool and round (the kernel's peak-RSS counter is
reset before each model, so each peak is still that conversion's own). Dirty pages are flushed
(os.sync) before each process starts, so a run never pays for the previous run's writeback;
outputs are not fsynced (the figures are page-cache figures, the same for every tool).
``--repeat`` rounds (``--big-repeat`` for isolated models), tool order rotated per round; times
are medians, peak RSS the maximum.

Checks (bench/_compare_analyze.py, in worker processes after all timing is done): loads in ONNX
Runtime CPU; ``onnx.checker.check_model(path, full_check=True)``; Cast nodes added (subgraphs
included); FP32 nodes by one definition applied to every output; output size on disk; accuracy
against the FP32 original with ``amp_convert.validate(..., provider="emulate", runs=0)``, skipped
where the original does not load in ORT.

Output (bench/_compare_tables.py, bench/_compare_targets.py): a row per model and converter, a
summary per converter and the targets of project issue 4; ``--json`` keeps every figure.

Run from the repository root:
    PYTHONPATH=. python bench/compare.py [--no-big] [--only REGEX ...] [--markdown FILE]
        [--json FILE] [--repeat 3] [--big-repeat 3] [--jobs 2] [--tmpdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # models/, bench/ and amp_convert/ importable without PYTHONPATH
    sys.path.insert(0, str(REPO))

from bench import _compare_tables as tables  # noqa: E402
from bench import _corpus as corpus  # noqa: E402
from bench._compare_model import Model  # noqa: E402
from bench._compare_run import check_all, log, measure_all  # noqa: E402
from bench._compare_targets import target_lines, targets  # noqa: E402
from bench._needs import needs  # noqa: E402
from bench._table import markdown_table, size_text, text_table  # noqa: E402

GB = 10**9


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
            ["git", "status", "--porcelain", "amp_convert"],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def _versions() -> dict[str, Any]:
    import onnx
    import onnx_ir
    import onnxconverter_common
    import onnxruntime

    import amp_convert

    return {
        "amp_convert": amp_convert.__version__,
        "commit": _git_commit(),
        "onnxconverter_common": onnxconverter_common.__version__,
        "onnx": onnx.__version__,
        "onnx_ir": onnx_ir.__version__,
        "onnxruntime": onnxruntime.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def _meta_line(meta: dict[str, Any]) -> str:
    keys = (
        "amp_convert",
        "commit",
        "onnxconverter_common",
        "onnx",
        "onnx_ir",
        "onnxruntime",
        "python",
        "cpus",
        "repeat",
        "big_repeat",
    )
    return ", ".join(f"{k} {meta[k]}" for k in keys if k in meta)


def collect_models(args: argparse.Namespace, workdir: Path) -> list[Model]:
    """The models `--only` selects (the generated ones written to `workdir`), sized."""
    patterns = [re.compile(p) for p in args.only or []]

    def wanted(key: str) -> bool:
        return not patterns or any(p.search(key) for p in patterns)

    blocks = corpus.write_blocks(workdir / "models", lambda name: wanted(f"generated/{name}"))
    models = [Model(f"generated/{n}", "generated", p, 0) for n, p in blocks]
    wheel = corpus.wheel_models()
    models += [Model(f"{g}/{n}", g, p, 0) for g, n, p in wheel if wanted(f"{g}/{n}")]
    if not args.no_big and wanted(f"generated/big_external_{args.big_bytes / GB:.1f}GB"):
        free = shutil.disk_usage(workdir).free
        need = int(6 * args.big_bytes)  # model, 5 converted copies (half size), floor, temp
        if free < need:
            have, want = size_text(free), size_text(need)
            print(f"# SKIPPED the big model: {have} free in {workdir}, need {want}")
        else:
            big = workdir / "models" / "big" / "big.onnx"
            path, what = corpus.write_big(big, int(args.big_bytes))
            log(what)
            size = corpus.disk_size(path)
            models.append(
                Model(f"generated/big_external_{size / GB:.1f}GB", "generated", path, size)
            )
    for m in models:
        m.size = m.size or corpus.disk_size(m.path)
        m.isolated = m.size >= args.isolate_mb * 10**6
        m.external = bool(corpus.external_data_files(m.path))
    return models


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    needs("onnxruntime", "onnxconverter_common")
    if args.from_json:
        raw = json.loads(args.from_json.read_text())
        models = [Model.from_json(d) for d in raw["models"]]
        print("# from " + str(args.from_json) + ": " + _meta_line(raw["meta"]))
        report(models, raw["meta"], args)
        return 0
    wall = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="amp_compare_", dir=args.tmpdir))
    try:
        meta: dict[str, Any] = {
            **_versions(),
            "repeat": args.repeat,
            "big_repeat": args.big_repeat,
            "workdir": str(workdir),
        }
        print("# " + _meta_line(meta), flush=True)
        models = collect_models(args, workdir)
        if not models:
            print("no model matches --only", file=sys.stderr)
            return 2
        log(f"{len(models)} models ({sum(m.isolated for m in models)} isolated)")
        warmup = corpus.write_warmup(workdir / "warmup")

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


def report(models: list[Model], meta: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the table, the summary and the targets; write --markdown / --compact / --json."""
    cols = tables.main_columns()
    all_rows = [r for m in models for r in tables.rows(m, args.width)]
    summ = tables.summary(models)
    summ_rows = tables.summary_rows(summ)
    note = tables.SUMMARY_NOTE.format(n=len(summ["common"]))
    t = targets(models)
    lines = target_lines(t)
    print()
    print(tables.LEGEND)
    print()
    print(text_table(cols, all_rows, group_first=True, justify=False))
    print()
    print("Summary per converter")
    print(note)
    print(text_table(tables.SUMMARY_COLUMNS, summ_rows, justify=False))
    print()
    print("Targets (project issue 4):")
    print("\n".join(lines))
    head = f"Measured with {_meta_line(meta)}.\n\n"
    if args.markdown:
        md_rows = [[f"`{r[0]}`", *r[1:]] for r in all_rows]
        args.markdown.write_text(
            head
            + "Summary per converter\n\n"
            + markdown_table(tables.SUMMARY_COLUMNS, summ_rows)
            + "\n\n"
            + note
            + "\n\n"
            + tables.LEGEND_MD
            + "\n\n"
            + markdown_table(cols, md_rows, group_first=True)
            + "\n\nTargets (project issue 4):\n\n```\n"
            + "\n".join(lines)
            + "\n```\n"
        )
    if args.compact:
        compact = markdown_table(tables.COMPACT_COLUMNS, tables.compact_rows(models))
        args.compact.write_text(head + tables.COMPACT_NOTE + "\n\n" + compact + "\n")
    if args.json:
        raw = {
            "meta": meta,
            "models": [m.to_json() for m in models],
            "summary": summ,
            "targets": t,
        }
        args.json.write_text(json.dumps(raw, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
