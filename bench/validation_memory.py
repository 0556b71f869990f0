"""Peak memory of a validation against the size of its inputs (issue 34: ~3x, ORT included).

Each run is a fresh process validating a two-node model (Relu -> Sigmoid, converted at O3)
whose input and output are both `rows x 1024` float32, so inputs, the reference's outputs and
the candidate's outputs are one size each: the floor is 3x. It prints the peak resident memory
above the process's own start-up, divided by the input's size.

Usage: python bench/validation_memory.py [--rows 20000 50000] [--provider emulate]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._needs import needs

_CHILD = """
import resource, sys
import amp_convert
ref, cand, rows, provider = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
import onnxruntime  # loaded before the baseline: its libraries are no validation's cost
from amp_convert.validation import core  # noqa: F401
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = amp_convert.validate(ref, cand, provider=provider, runs=0, dims={"b": rows},
                              thresholds={"min_cosine": 0.99})
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(base * 1024, peak * 1024, report.verdict)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 50_000])
    parser.add_argument("--provider", default="emulate")
    args = parser.parse_args()
    needs("onnxruntime")
    import onnx
    from onnx import TensorProto, helper

    import amp_convert

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        ref, cand = Path(tmp) / "m.onnx", Path(tmp) / "m.fp16.onnx"
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 1024])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 1024])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, ref)
        amp_convert.convert_file(ref, cand, level="O3")
        print(f"provider {args.provider}; peak RSS above start-up / input bytes", flush=True)
        for rows in args.rows:
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, str(ref), str(cand), str(rows), args.provider],
                capture_output=True,
                text=True,
                check=True,
                cwd=root,
            )
            base, peak, verdict = done.stdout.split()
            size = rows * 1024 * 4
            ratio = (int(peak) - int(base)) / size
            print(
                f"input {size / 2**20:7.1f} MiB: peak +{(int(peak) - int(base)) / 2**20:7.1f} "
                f"MiB = {ratio:.1f}x the input ({verdict})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
