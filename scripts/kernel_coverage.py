"""Count the converted nodes a target has no kernel for, over the project's test models.

    python scripts/kernel_coverage.py [--levels O1 O2 O3] [--dtype fp16] [--target ort-cuda] [-v]

Converts every generated model under models/ (models.build.BUILDERS) and every onnx backend model
(onnx/backend/test/data/{light,pytorch-converted,pytorch-operator,simple}) with amp_convert.convert
and runs amp_convert.targets.uncovered_nodes on the result. Prints, per level, how many models have
uncovered nodes, how many nodes, and the reasons grouped; -v prints every node line. A model the
converter refuses is counted apart. This is a report, not a test: exit status 0 either way.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import sys
from collections import Counter
from pathlib import Path

import onnx
import onnx_ir as ir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import amp_convert
from amp_convert.targets import find_uncovered, load_target, low_precision_nodes
from models.build import BUILDERS

BACKEND = Path(onnx.__file__).parent / "backend" / "test" / "data"


def corpus() -> list[tuple[str, object]]:
    """(name, model or path) for every model the report covers."""
    cases: list[tuple[str, object]] = [(f"models/{n}", b) for n, b in sorted(BUILDERS.items())]
    paths = sorted(glob.glob(str(BACKEND / "light" / "*.onnx")))
    for sub in ("pytorch-converted", "pytorch-operator", "simple"):
        paths += sorted(glob.glob(str(BACKEND / sub / "*" / "model.onnx")))
    for p in paths:
        rel = os.path.relpath(p, BACKEND).replace("/model.onnx", "").replace(".onnx", "")
        cases.append((f"backend/{rel}", p))
    return cases


def _typed(model: onnx.ModelProto) -> ir.Model:
    """The converted model with every inferable value type filled in."""
    with contextlib.suppress(Exception):  # best effort: types already present are kept
        model = onnx.shape_inference.infer_shapes(model)
    return ir.serde.deserialize_model(model)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", nargs="+", default=["O1", "O2", "O3"])
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--target", default="ort-cuda")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    table = load_target(args.target)
    cases = corpus()
    loaded = {}
    for name, src in cases:
        loaded[name] = src() if callable(src) else onnx.load(src)  # type: ignore[operator]
    print(f"target {table.name} (ORT {table.ort_version}), dtype {args.dtype}, {len(cases)} models")
    for level in args.levels:
        typed: Counter[str] = Counter()  # has a kernel, not in these types: the converter's doing
        absent: Counter[str] = Counter()  # no kernel at that opset at all: FP32 runs on CPU too
        inlined: Counter[str] = Counter()  # ORT expands the function body (body not checked)
        by_model: Counter[str] = Counter()
        low_nodes = 0
        refused: list[str] = []
        lines: list[str] = []
        for name, _ in cases:
            try:
                out = amp_convert.convert(loaded[name], level=level, dtype=args.dtype)
            except amp_convert.AmpConvertError as e:
                refused.append(f"{name}: {e}")
                continue
            model = _typed(out)
            low_nodes += sum(1 for _ in low_precision_nodes(model))
            for u in find_uncovered(model, table):
                op = u.op_type if u.domain in ("", "ai.onnx") else f"{u.domain}:{u.op_type}"
                bucket = inlined if u.inlined else typed if u.has_kernel else absent
                bucket[f"{op}-{u.opset}: {u.reason}"] += 1
                by_model[name] += u.has_kernel and not u.inlined
                lines.append(f"  {name}: {u}")
        print(
            f"\n{level}: {sum(typed.values())} nodes with a kernel but not in their types, "
            f"{sum(absent.values())} with no kernel at their opset at all, "
            f"{sum(inlined.values())} inlined by ORT, "
            f"of {low_nodes} low-precision nodes in {len(cases) - len(refused)} converted models"
            + (f" ({len(refused)} refused by the converter)" if refused else "")
        )
        for reason, n in typed.most_common():
            print(f"  {n:4d}  {reason}")
        for reason, n in absent.most_common():
            print(f"  {n:4d}  [no kernel at all] {reason}")
        for reason, n in inlined.most_common():
            print(f"  {n:4d}  [inlined] {reason}")
        hit = [(m, n) for m, n in by_model.most_common() if n]
        if hit:
            print("  models with type gaps: " + ", ".join(f"{m} ({n})" for m, n in hit))
        if args.verbose:
            print("\n".join(lines + [f"  refused {r}" for r in refused]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
