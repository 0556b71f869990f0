"""Emulation fidelity: errors of converted models under ORT CPU vs the `emulate` provider.

ORT CPU runs FP16 nodes in FP32 and drops the casts between them, so it understates FP16 errors;
`emulate` rounds every low-precision value like a GPU would. This prints both side by side for
every model under models/ (converted at the given levels), so the gap is visible. The DBNet-style
detector is the model kind where emulate once looked 4x pessimistic against CUDA.

    PYTHONPATH=. python bench/emulation_fidelity.py [--levels O2 O3] [--dtype fp16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx

import amp_convert
from bench._needs import needs
from bench._table import Column, fit_widths, text_header, text_row
from models.blocks import ALL_BLOCKS
from models.detector import dbnet_detector
from models.focused import ALL_FOCUSED

SKIP = {"random_normal_like"}  # random outputs: nothing to compare


def _worst(report) -> tuple[float, float, float, int]:
    floats = [o for o in report.outputs if o.kind == "float" and o.max_abs is not None]
    if not floats:
        return (0.0, 0.0, 1.0, 0)
    return (
        max(o.max_abs for o in floats),
        max(o.mean_abs for o in floats),
        min(o.cosine if o.cosine is not None else 1.0 for o in floats),
        sum(o.candidate_nan + o.candidate_inf for o in floats),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", nargs="+", default=["O2", "O3"])
    parser.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    needs("onnxruntime")
    builders = {**ALL_BLOCKS, **ALL_FOCUSED, "dbnet_detector": dbnet_detector}
    names = [n for n in builders if n not in SKIP and (not args.only or n in args.only)]
    providers = ["emulate"] if args.dtype == "bf16" else ["cpu", "emulate"]
    cols = [Column("model", width=24), Column("lvl")]
    for p in providers:
        cols += [
            Column(f"{p} max_abs", right=True, width=11),
            Column("mean_abs", right=True, width=9),
            Column("cosine", right=True, width=9),
            Column("inf/nan", right=True),
        ]
    widths = fit_widths(cols, [])  # fixed, so each row prints as soon as it is measured
    print(text_header(cols, widths))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            original = builders[name]()
            src = Path(tmp) / f"{name}.onnx"
            onnx.save(original, src)
            for level in args.levels:
                dst = Path(tmp) / f"{name}.{level}.onnx"
                amp_convert.convert_file(src, dst, level=level, dtype=args.dtype, force=True)
                cells = [name, level]
                for provider in providers:
                    report = amp_convert.validate(src, dst, provider=provider, runs=0)
                    max_abs, mean_abs, cosine, bad = _worst(report)
                    cells += [f"{max_abs:.4g}", f"{mean_abs:.3g}", f"{cosine:.6f}", str(bad)]
                print(text_row(cells, cols, widths), flush=True)


if __name__ == "__main__":
    main()
