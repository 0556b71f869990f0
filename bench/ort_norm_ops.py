"""ORT's own ai.onnx-domain norms in FP16, as amp-convert folds hand-written norms into them.

Below opset 17 a hand LayerNorm becomes LayerNormalization-1 and a hand RMSNorm (below opset 23)
SimplifiedLayerNormalization, both ops ONNX Runtime registers in the ai.onnx domain; a norm over
a run-time-sized reshape gets its unit Scale from ``ConstantOfShape(Shape(x)[-1:])``. One FP16
node model per case, inputs N(centre, 10) over hidden 64 and 4096, against float64; on CUDA the
session refuses CPU fallback, so a case that runs ran on the GPU.

    PYTHONPATH=. python bench/ort_norm_ops.py --provider cuda
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench._needs import needs, no_gpu


def _model(nodes: list[onnx.NodeProto], opset: int, shape: tuple[int, ...], inits: list) -> bytes:
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "g",
        [vi("x", TensorProto.FLOAT16, shape)],
        [vi("y", TensorProto.FLOAT16, shape)],
        inits,
    )
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def _unit_scale(opset: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """ConstantOfShape(Shape(x)[-1:], 1.0 in FP16), as hand_norms writes it."""
    one = numpy_helper.from_array(np.ones(1, np.float16))
    fill = helper.make_node("ConstantOfShape", ["d"], ["s"], value=one)
    if opset >= 15:
        return [helper.make_node("Shape", ["x"], ["d"], start=-1), fill], []
    ends = [
        numpy_helper.from_array(np.array([-1]), "a"),
        numpy_helper.from_array(np.array([2**62]), "b"),
    ]
    shape = helper.make_node("Shape", ["x"], ["f"])
    return [shape, helper.make_node("Slice", ["f", "a", "b"], ["d"]), fill], ends


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args(argv)
    needs("onnxruntime")
    with contextlib.suppress(ImportError):  # torch loads the CUDA libraries ORT needs
        import torch  # noqa: F401
    import onnxruntime as ort

    so = ort.SessionOptions()
    providers = ["CPUExecutionProvider"]
    if args.provider == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return no_gpu(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider")
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        providers = ["CUDAExecutionProvider"]

    def run(model: bytes, x: np.ndarray) -> np.ndarray:
        sess = ort.InferenceSession(model, so, providers=providers)
        return sess.run(None, {"x": x})[0].astype(np.float64)

    def cos(a: np.ndarray, b: np.ndarray) -> float:
        return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))

    print(f"onnxruntime {ort.__version__} {providers[0]}")
    for centre in (3.0, 100.0, 1000.0):
        for hidden in (64, 4096):
            rng = np.random.default_rng(0)
            x = (centre + 10 * rng.standard_normal((2, 16, hidden))).astype(np.float16)
            r = x.astype(np.float64)
            d = r - r.mean(-1, keepdims=True)
            ln = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)
            rms = r / np.sqrt((r * r).mean(-1, keepdims=True) + 1e-6)
            cases = []
            for opset in (11, 14):
                node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1)
                scale = numpy_helper.from_array(np.ones(hidden, np.float16), "s")
                cases.append((f"LayerNormalization-1 opset {opset}", node, [], [scale], opset, ln))
            for opset in (14, 17):
                node = helper.make_node(
                    "SimplifiedLayerNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-6
                )
                pre, inits = _unit_scale(opset)
                name = f"SimplifiedLayerNormalization+ConstantOfShape opset {opset}"
                cases.append((name, node, pre, inits, opset, rms))
            for name, node, pre, inits, opset, expected in cases:
                y = run(_model([*pre, node], opset, x.shape, inits), x)
                err = float(np.abs(y - expected).max())
                finite = bool(np.isfinite(y).all())
                print(
                    f"{name:52s} centre {centre:6g} h{hidden:<5d} finite {finite}"
                    f" cos {cos(y, expected):.6f} max_abs_err {err:.1e}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
