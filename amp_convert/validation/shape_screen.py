"""Screening of input sizes by ONNX shape inference: sizes the graph refuses cost no ORT run.

When the reference cannot run on the default dims, ``input_search`` walks a ladder of other
sizes, and each attempt is a full run of the model. Strict ONNX shape inference with data
propagation, on a weight-free copy whose inputs carry the attempt's concrete shapes, refuses
many of those sizes in milliseconds (a Squeeze of an axis that is not 1, a Reshape whose target
does not divide the input, a MatMul whose inner dims differ). It is trusted only when it explains
the failure ORT reported on the defaults (``explaining``): a model whose shapes inference cannot
follow (ORT's fused ops, data-dependent sizes) keeps running every attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from amp_convert.files.onnx_checks import hide_runtime_ops

logger = logging.getLogger(__name__)
_SMALL = 1024  # bytes of initializer data kept in the weight-free copy (shape constants)


class ShapeScreen:
    """Strict shape inference of one weight-free copy of a model, at concrete input shapes."""

    def __init__(self, stripped: onnx.ModelProto) -> None:
        self._model = stripped

    @classmethod
    def explaining(
        cls, model: onnx.ModelProto, failed: Mapping[str, np.ndarray]
    ) -> ShapeScreen | None:
        """A screen for ``model`` if inference refuses the feeds ORT failed on, else None."""
        try:
            screen = cls(_weight_free(model))
        except Exception as e:  # the copy is a help, never a reason to stop
            logger.info("no shape screen: %s", e)
            return None
        return screen if screen.refuses(failed) else None

    def refuses(self, feeds: Mapping[str, np.ndarray]) -> str | None:
        """Inference's first line when it refuses these input shapes, else None."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self._model)
        for vi in proto.graph.input:
            arr = feeds.get(vi.name)
            if arr is None or not vi.type.HasField("tensor_type"):
                continue
            shape = vi.type.tensor_type.shape
            shape.ClearField("dim")
            for size in arr.shape:
                shape.dim.add().dim_value = int(size)
        try:
            onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
        except Exception as e:
            return _first_line(str(e))
        return None


def _weight_free(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its large initializers as typed graph inputs and no declared inner or
    output shapes (they were written for other sizes)."""
    proto = onnx.ModelProto()
    _copy_fields(model, proto, skip=("graph",))
    graph = proto.graph
    _copy_fields(model.graph, graph, skip=("initializer", "value_info", "output"))
    names = {i.name for i in graph.input}
    for t in model.graph.initializer:
        external = t.data_location == onnx.TensorProto.EXTERNAL
        size = int(np.prod(t.dims, dtype=np.int64)) * 8
        if not external and size <= _SMALL:
            graph.initializer.append(t)
        elif t.name not in names:
            graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    for out in model.graph.output:
        kept = graph.output.add()
        kept.CopyFrom(out)
        if kept.type.HasField("tensor_type"):
            kept.type.tensor_type.ClearField("shape")
    hide_runtime_ops(proto)
    return proto


def _copy_fields(source: Any, target: Any, skip: tuple[str, ...]) -> None:
    """Copy a message's set fields but ``skip`` (no copy of what is skipped is ever made)."""
    for f, value in source.ListFields():
        if f.name in skip:
            continue
        field = getattr(target, f.name)
        if hasattr(field, "MergeFrom"):  # messages and repeated fields
            field.MergeFrom(value)
        else:
            setattr(target, f.name, value)


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "refused"
    return line.split("] ", 1)[-1] if line.startswith("[") else line
