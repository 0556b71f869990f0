"""Small helpers the converter tests share: run in ORT, count ops, read types."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from amp_convert.core import proto_walk

FLOAT16 = onnx.TensorProto.FLOAT16
FLOAT = onnx.TensorProto.FLOAT


def session(model: onnx.ModelProto | str, optimize: bool = True) -> ort.InferenceSession:
    """A CPU session; `optimize=False` computes the graph as written (no fusion into other
    kernels), e.g. a QDQ model's float semantics instead of ORT's int8 kernels."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def run(
    model: onnx.ModelProto | str, feeds: dict[str, np.ndarray], optimize: bool = True
) -> list[np.ndarray]:
    return session(model, optimize).run(None, feeds)


def all_nodes(graph: onnx.GraphProto):
    for g in proto_walk.graphs(graph):
        yield from g.node


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in all_nodes(model.graph))


def casts(model: onnx.ModelProto) -> int:
    return op_counts(model)["Cast"]


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    """elem_type of every typed value, model-wide (after shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    out: dict[str, int] = {}

    def visit(graph: onnx.GraphProto) -> None:
        for vi in (*graph.input, *graph.output, *graph.value_info):
            if vi.type.HasField("tensor_type"):
                out[vi.name] = vi.type.tensor_type.elem_type
        for t in graph.initializer:
            out[t.name] = t.data_type
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    visit(attr.g)

    visit(inferred.graph)
    return out


def node_by_name(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    for node in all_nodes(model.graph):
        if node.name == name:
            return node
    raise KeyError(name)


def io_types(model: onnx.ModelProto) -> tuple[list[int], list[int]]:
    g = model.graph
    return (
        [i.type.tensor_type.elem_type for i in g.input],
        [o.type.tensor_type.elem_type for o in g.output],
    )


def rel_error(ref: np.ndarray, got: np.ndarray) -> float:
    """max |got - ref| relative to the output's scale (max |ref|)."""
    ref = ref.astype(np.float64)
    got = got.astype(np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-6))


def one_line_error(result, *needles: str, code: int = 2) -> str:
    """A CLI result that failed with `code` in one line holding every needle; that line."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def check_onnx(model: onnx.ModelProto) -> None:
    """ONNX's full check, with ORT's own ai.onnx-domain ops (LayerNormalization below opset 17,
    SimplifiedLayerNormalization) moved to a domain of their own, as amp-convert's checks do."""
    from amp_convert.files.onnx_checks import hide_runtime_ops

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    hide_runtime_ops(copy)
    onnx.checker.check_model(copy, full_check=True)


class SessionCounter:
    """Counts onnxruntime.InferenceSession constructions in this process (independent of any
    report's own count)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = ort.InferenceSession
        counter = self

        class Counted(real):  # type: ignore[misc, valid-type]
            def __init__(self, *a, **k):
                counter.count += 1
                super().__init__(*a, **k)

        monkeypatch.setattr(ort, "InferenceSession", Counted)


def mypy_errors(source: str, tmp_path: Path) -> list[str]:
    """mypy's error lines for `source` (a snippet using amp_convert), checked from the repo root."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(source)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-error-summary",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(snippet),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return [line for line in result.stdout.splitlines() if ": error:" in line]
