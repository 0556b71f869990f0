"""Issue 20's placement figures on the vision and hand-written-norm models of models/vision.py.

One row per model: Cast nodes added at O2 and O3 against onnxconverter-common's
``convert_float_to_float16(keep_io_types=True)``, the estimated traffic at O2 over O3's, the
emulated cosine at O2 (seeded random inputs) and what stays FP32; then whether the dynamo and
TorchScript exports of each network got the same placement. ``--target none`` shows today's rule
for comparison.

    PYTHONPATH=. python bench/vision_placement.py [--target ort-cuda|none]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import onnx  # noqa: E402

import amp_convert  # noqa: E402
from bench._needs import needs  # noqa: E402
from bench._progress import progress  # noqa: E402
from models.vision import ALL_VISION, PAIRS  # noqa: E402


def _casts(model: onnx.ModelProto) -> int:
    return sum(1 for n in model.graph.node if n.op_type == "Cast")


def _row(name: str, model: onnx.ModelProto, target: str) -> tuple[list[str], tuple]:
    from onnxconverter_common import float16

    occ = float16.convert_float_to_float16(
        onnx.load_from_string(model.SerializeToString()), keep_io_types=True
    )
    o2, r2 = amp_convert.convert(model, level="O2", target=target, return_report=True)
    o3, r3 = amp_convert.convert(model, level="O3", target=target, return_report=True)
    cos = amp_convert.validate(model, o2, provider="emulate", runs=0).outputs[0].cosine
    fp32 = Counter(d.op_type for d in r2.nodes if d.precision == "fp32")
    base = _casts(model)
    cells = [
        name,
        f"+{_casts(o2) - base}",
        f"+{_casts(o3) - base}",
        f"+{_casts(occ) - base}",
        f"{r2.traffic['result'] / r3.traffic['result']:.3f}",
        f"{cos:.6f}",
        ", ".join(f"{op} {n}" for op, n in sorted(fp32.items())) or "-",
    ]
    pools = sum(1 for d in r2.nodes if d.op_type in ("ReduceMean", "GlobalAveragePool"))
    low = Counter(d.op_type for d in r2.nodes if d.precision == "low")
    low.pop("BatchNormalization", None)
    key = (_casts(o2) - base, pools, dict(fp32), sum(low.values()) - low["ReduceMean"])
    return cells, key


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="ort-cuda", choices=["ort-cuda", "none"])
    args = p.parse_args(argv)
    needs("onnxruntime", "onnxconverter_common")
    head = ["model", "O2 casts", "O3 casts", "occ casts", "O2/O3 traffic", "cosine O2"]
    head.append("FP32 at O2")
    rows, keys = [head], {}
    for name, build in ALL_VISION.items():
        progress(name)
        cells, key = _row(name, build(), args.target)
        rows.append(cells)
        keys[name] = key
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print(f"\ntarget {args.target}; same placement from dynamo and TorchScript exports:")
    for arch in PAIRS:
        same = keys[f"{arch}_dynamo"][:3] == keys[f"{arch}_torchscript"][:3]
        print(f"  {arch:14s} {'yes' if same else 'NO'}  {keys[f'{arch}_dynamo'][:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
