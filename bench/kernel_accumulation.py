"""How ORT kernels accumulate for FP16 inputs: one node per model, fed values whose sums leave FP16.

Each case is a single FP16 node (SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization,
SkipLayerNormalization, LayerNormalization, ReduceMean, Softmax) fed values near 100 over a hidden
size of 64 or 4096, so that a sum of squares (or a plain sum) kept in FP16 passes 65504 while the
true result is an ordinary number. The output is compared with a float64 NumPy reference; a kernel
that sums in FP32 gives an error near FP16's rounding (about 1e-3 relative), one that sums in FP16
gives zeros, Inf or NaN. Run on ORT CUDA (default and ``enable_skip_layer_norm_strict_mode=1``) and
on ORT CPU; the figures feed amp_convert's accumulation table.

    PYTHONPATH=. python bench/kernel_accumulation.py --provider cuda --json acc.json
    PYTHONPATH=. python bench/kernel_accumulation.py --provider cpu
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnx
from onnx import TensorProto, helper

from bench._needs import needs, no_gpu

F16 = TensorProto.FLOAT16
MS = "com.microsoft"


@dataclass(frozen=True)
class Case:
    """One single-node model, its feeds and the float64 result it should compute."""

    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    expected: np.ndarray


def _model(
    node: onnx.NodeProto, inputs: list[tuple[str, list[int]]], out: list[int]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, F16, s) for n, s in inputs],
        [helper.make_tensor_value_info(node.output[0], F16, out)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _rms(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def _ln(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    d = x - x.mean(axis=-1, keepdims=True)
    return d / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + eps)


def _values(hidden: int, seed: int, centre: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (centre + 10.0 * rng.standard_normal((2, 8, hidden))).astype(np.float16)


def _cases(hidden: int, centre: float = 100.0) -> list[Case]:
    x = _values(hidden, 0, centre)
    skip = (0.5 * np.random.default_rng(1).standard_normal(x.shape)).astype(np.float16)
    gamma = np.ones(hidden, np.float16)
    beta = np.zeros(hidden, np.float16)
    x64, s64 = x.astype(np.float64), skip.astype(np.float64)
    shape = list(x.shape)
    cases: list[Case] = []

    def add(
        name: str, node: onnx.NodeProto, ins: dict[str, np.ndarray], out: list[int], exp: np.ndarray
    ) -> None:
        model = _model(node, [(k, list(v.shape)) for k, v in ins.items()], out)
        label = f"{name} h{hidden}" + ("" if centre == 100.0 else f" c{centre:g}")
        cases.append(Case(label, model, ins, exp))

    add(
        "SkipSimplifiedLayerNormalization",
        helper.make_node(
            "SkipSimplifiedLayerNormalization",
            ["x", "skip", "gamma"],
            ["y"],
            domain=MS,
            epsilon=1e-6,
        ),
        {"x": x, "skip": skip, "gamma": gamma},
        shape,
        _rms(x64 + s64),
    )
    add(
        "SimplifiedLayerNormalization",
        helper.make_node(
            "SimplifiedLayerNormalization", ["x", "gamma"], ["y"], axis=-1, epsilon=1e-6
        ),
        {"x": x, "gamma": gamma},
        shape,
        _rms(x64),
    )
    add(
        "SkipLayerNormalization",
        helper.make_node(
            "SkipLayerNormalization", ["x", "skip", "gamma", "beta"], ["y"], domain=MS
        ),
        {"x": x, "skip": skip, "gamma": gamma, "beta": beta},
        shape,
        _ln(x64 + s64),
    )
    add(
        "LayerNormalization",
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1),
        {"x": x, "gamma": gamma, "beta": beta},
        shape,
        _ln(x64),
    )
    add(
        "ReduceMean",
        helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1),
        {"x": x},
        [*shape[:-1], 1],
        x64.mean(axis=-1, keepdims=True),
    )
    logits = (x64 - centre) * 3.0
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    add(
        "Softmax",
        helper.make_node("Softmax", ["x"], ["y"], axis=-1),
        {"x": logits.astype(np.float16)},
        shape,
        e / e.sum(axis=-1, keepdims=True),
    )
    return cases


def _figures(got: np.ndarray, exp: np.ndarray) -> dict[str, Any]:
    g = got.astype(np.float64)
    finite = np.isfinite(g)
    bad = int((~finite).sum())
    gz = np.where(finite, g, 0.0)
    denom = float(np.linalg.norm(gz) * np.linalg.norm(exp)) or 1.0
    return {
        "nonfinite": bad,
        "zeros": float(np.mean(g == 0.0)),
        "max_abs_err": float(np.max(np.abs(gz - exp))),
        "rel_err": float(np.max(np.abs(gz - exp)) / (np.max(np.abs(exp)) or 1.0)),
        "cosine": float(np.sum(gz * exp) / denom),
    }


def _runner(provider: str, strict: bool) -> Callable[[Case], np.ndarray]:
    import onnxruntime as ort

    if provider == "cuda":
        opts = {"enable_skip_layer_norm_strict_mode": "1" if strict else "0"}
        providers: list[Any] = [("CUDAExecutionProvider", opts)]
    else:
        providers = ["CPUExecutionProvider"]

    def run(case: Case) -> np.ndarray:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(case.model.SerializeToString(), so, providers=providers)
        return sess.run(None, case.feeds)[0]

    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--centre",
        type=float,
        nargs="+",
        default=[100.0],
        help="input means: 100 puts sums of squares past 65504 but their mean below; 300 puts "
        "the mean of squares (what the non-strict SkipSimplifiedLayerNorm keeps in FP16) past it",
    )
    args = p.parse_args(argv)
    needs("onnxruntime")
    if args.provider == "cuda":
        with contextlib.suppress(ImportError):  # torch loads the CUDA libraries ORT needs
            import torch  # noqa: F401
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return no_gpu(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider")
    modes = [("default", False), ("strict", True)] if args.provider == "cuda" else [("cpu", False)]
    rows: list[dict[str, Any]] = []
    cases = [c for centre in args.centre for hidden in (64, 4096) for c in _cases(hidden, centre)]
    for case in cases:
        for mode, strict in modes:
            try:
                fig = _figures(_runner(args.provider, strict)(case), case.expected)
            except Exception as e:  # a kernel missing for FP16 is a result too
                fig = {"error": str(e).splitlines()[0][:160]}
            row = {"case": case.name, "mode": mode, **fig}
            rows.append(row)
            if "error" in fig:
                print(f"{case.name:42s} {mode:8s} error: {fig['error']}")
            else:
                print(
                    f"{case.name:42s} {mode:8s} zeros {fig['zeros']:.3f} nonfinite "
                    f"{fig['nonfinite']:5d} rel {fig['rel_err']:.2e} cos {fig['cosine']:.6f}"
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
