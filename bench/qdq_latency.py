"""QDQ models on ORT's CUDA provider: FP32, QDQ (ORT ``quantize_static``) and QDQ after amp-convert.

A ResNet-50 (gpu_bench's, BatchNormalization in the graph) is quantized by ORT's own
``quantize_static`` (QDQ format, opset 17, MinMax calibration on a few seeded images), then
converted by amp-convert at O2, without and with ``--opset-upgrade`` (opset 19, FP16 scales).
Each variant is timed with gpu_bench's I/O-bound runner at a GPU-bound batch, with its error
against the FP32 model (TF32 off) and its CPU-placed nodes.

    PYTHONPATH=. python bench/qdq_latency.py --batch 64 --runs 30
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnx

from bench._gpu_models import FULL, SMALL
from bench._gpu_run import convert_and_measure, cuda_unavailable_reason, reference_outputs
from bench._needs import needs, no_gpu
from bench._progress import progress


def _quantize(src: Path, dst: Path, feeds: dict[str, np.ndarray]) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = [{k: v[:1] for k, v in feeds.items()} for _ in range(2)]

        def get_next(self):  # type: ignore[no-untyped-def]
            return self.items.pop() if self.items else None

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--provider", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--small", action="store_true", help="a tiny CNN (a check that the script runs)")
    args = p.parse_args(argv)
    needs("onnxruntime")
    if args.provider == "cuda" and (why := cuda_unavailable_reason()):
        return no_gpu(why)
    bench = (SMALL if args.small else FULL)["cnn"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        src = folder / "resnet50.onnx"
        model = bench.build()
        onnx.save_model(model, str(src))
        feeds = bench.feeds(model, seed=0)
        feeds = {k: np.repeat(v[:1], args.batch, axis=0) for k, v in feeds.items()}
        qdq = folder / "resnet50.qdq.onnx"
        progress("quantize_static (QDQ, MinMax calibration)")
        _quantize(src, qdq, feeds)
        ref, _ = reference_outputs(src, args.provider, feeds)
        progress("FP32, QDQ, QDQ O2 and QDQ O2 --opset-upgrade: converted and timed")
        cases = [
            ("FP32", "FP32", src),
            ("QDQ", "FP32", qdq),
            ("QDQ O2", "O2", qdq),
            ("QDQ O2+up", "O2+upgrade", qdq),
        ]
        timing = {"provider": args.provider, "runs": args.runs, "warmup": args.warmup}
        rows = [
            (
                name,
                convert_and_measure(level, path, folder, feeds, ref, target="ort-cuda", **timing),
            )
            for name, level, path in cases
        ]
    print(f"ResNet-50 b{args.batch} on {args.provider}")
    for name, m in rows:
        cpu = m.placement.cpu_nodes if m.placement else None
        print(
            f"{name:9s} median {m.median_ms} ms  rel {m.worst_rel}  cos {m.worst_cosine}  "
            f"cpu nodes {cpu}  error {m.error}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
