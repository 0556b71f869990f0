"""Sizes a model's own graph implies for its inputs, read once so random inputs can respect them.

Dim names do not say everything: a recognizer's height must collapse to what its later layers
expect, ORT GenAI's builder names the head size of its packed KV cache ``kv_cache_dim`` and only
the attention node knows its value, a decoder's position table ends somewhere. The graph says:

* ``head_sizes``: per KV-cache input of a ``GroupQueryAttention``, the head size, from the node's
  ``num_heads``/``kv_num_heads`` and the width of what it reads (the packed QKV projection's
  ``(num_heads + 2 * kv_num_heads) * head``, or the K projection's ``kv_num_heads * head``),
  else from its rotary cache (``2 * cos_cache.shape[1]``);
* ``position_limit``: the positions the model's tables hold: rows of the rotary caches of
  ``GroupQueryAttention``/``RotaryEmbedding``, and of a position-embedding table (an initializer
  named like one, read by a Gather); the fewest wins;
* ``sizes``: candidate sizes for dims the defaults do not fit: the positive entries of constant
  Reshape targets (and the element count of a fully fixed one) and Slice bounds, and the static
  sizes of later layers (pool windows, the declared shapes of intermediate values), smallest
  first.

Everything here reads only node attributes, initializer shapes and small constants: no weight
data, no inference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from amp_convert.core import domains, proto_walk

MS = "com.microsoft"
#: the sizes ``sizes`` keeps: larger ones are no input size worth trying, smaller ones no help
_SIZE_RANGE = (8, 4096)
_MAX_SIZES = 12
#: position-embedding tables: ``wpe``, ``position_embeddings``, ``embed_positions`` (optimum's
#: Whisper: ``model.decoder.embed_positions.weight_merged_0``), ``pos_emb``
_POSITION_TABLES = re.compile(
    r"wpe|pos(ition)?s?[_.]?(emb|embed|embedding|encoding)s?|embed(ding)?s?[_.]?pos(ition)?s?",
    re.I,
)
_SMALL = 64  # constant int tensors up to this many elements are read (shape vectors)


@dataclass(frozen=True)
class ModelSizes:
    """What the graph says about its inputs' sizes (see the module docstring)."""

    head_sizes: dict[str, int] = field(default_factory=dict)
    position_limit: int | None = None
    sizes: tuple[int, ...] = ()


def model_sizes(model: onnx.ModelProto) -> ModelSizes:
    """Read ``model`` once, If/Loop/Scan bodies included (a merged decoder's branches)."""
    graphs = list(proto_walk.graphs(model.graph))
    shapes = {t.name: list(t.dims) for g in graphs for t in g.initializer}
    consts = _small_constants(model)
    producers = {o: n for g in graphs for n in g.node for o in n.output}
    inputs = {i.name for i in model.graph.input} - set(shapes)
    heads: dict[str, int] = {}
    limits: list[int] = []
    for node in (n for g in graphs for n in g.node):
        if node.domain == MS and node.op_type == "GroupQueryAttention":
            size = _gqa_head_size(node, producers, shapes)
            for past in node.input[3:5]:
                if size and past in inputs:
                    heads[past] = size
            if _attr(node, "do_rotary", 0) and len(node.input) > 7:
                limits += _rows(node.input[7], shapes)
        elif node.domain == MS and node.op_type == "RotaryEmbedding" and len(node.input) > 2:
            limits += _rows(node.input[2], shapes)
        elif node.op_type == "Gather" and domains.is_default(node.domain) and node.input:
            table = node.input[0]
            if _POSITION_TABLES.search(table) and len(shapes.get(table, [])) == 2:
                limits += _rows(table, shapes)
    return ModelSizes(heads, min(limits) if limits else None, _implied(model, consts))


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _rows(name: str, shapes: dict[str, list[int]]) -> list[int]:
    dims = shapes.get(name)
    return [dims[0]] if dims and dims[0] > 0 else []


def _gqa_head_size(
    node: onnx.NodeProto, producers: dict[str, onnx.NodeProto], shapes: dict[str, list[int]]
) -> int | None:
    heads, kv_heads = _attr(node, "num_heads", 0), _attr(node, "kv_num_heads", 0)
    if heads <= 0 or kv_heads <= 0:
        return None
    packed = len(node.input) < 3 or not node.input[1]
    source, parts = (node.input[0], heads + 2 * kv_heads) if packed else (node.input[1], kv_heads)
    width = _width(source, producers, shapes)
    if width and width % parts == 0:
        return width // parts
    if _attr(node, "do_rotary", 0) and len(node.input) > 7:
        cos = shapes.get(node.input[7])
        if cos and len(cos) == 2 and cos[1] > 0:
            return 2 * cos[1]  # full rotary: the cache holds half the head
    return None


def _width(
    name: str, producers: dict[str, onnx.NodeProto], shapes: dict[str, list[int]], depth: int = 0
) -> int | None:
    """The last dim of a projection's output: MatMul/Gemm weight, MatMulNBits ``N``, through a
    bias Add or a Cast."""
    node = producers.get(name)
    if node is None or depth > 4:
        return None
    if node.op_type == "MatMulNBits":
        return _attr(node, "N", 0) or None
    if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1:
        w = shapes.get(node.input[1])
        if w and len(w) >= 2:
            trans = node.op_type == "Gemm" and _attr(node, "transB", 0)
            return w[0] if trans else w[-1]
        return None
    if node.op_type in ("Add", "Cast", "Identity"):
        for i in node.input:
            if i in shapes and len(shapes[i]) == 1 and shapes[i][0] > 0:
                return shapes[i][0]  # a bias: one value per output feature
        for i in node.input:
            found = _width(i, producers, shapes, depth + 1)
            if found:
                return found
    return None


def _small_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Small integer constants (initializers and Constant nodes), in every graph."""
    out: dict[str, np.ndarray] = {}
    for g in proto_walk.graphs(model.graph):
        for t in g.initializer:
            if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and _few(t.dims):
                out[t.name] = numpy_helper.to_array(t)
        for n in g.node:
            if n.op_type != "Constant" or not n.output:
                continue
            for a in n.attribute:
                if a.name == "value" and a.t.data_type in (6, 7) and _few(a.t.dims):
                    out[n.output[0]] = numpy_helper.to_array(a.t)
                elif a.name == "value_ints":
                    out[n.output[0]] = np.array(a.ints, np.int64)
    return out


def _few(dims: Iterable[int]) -> bool:
    return int(np.prod(list(dims), dtype=np.int64)) <= _SMALL


def _implied(model: onnx.ModelProto, consts: dict[str, np.ndarray]) -> tuple[int, ...]:
    found: set[int] = set()
    for g in proto_walk.graphs(model.graph):
        for n in g.node:
            if n.op_type == "Reshape" and len(n.input) > 1:
                target = _ints(consts.get(n.input[1]))
                found.update(target)
                if target and len(target) == np.asarray(consts[n.input[1]]).size:
                    found.add(int(np.prod(target)))  # a fixed target: its input's element count
            elif n.op_type == "Slice":
                for i in n.input[1:3]:
                    found.update(abs(v) for v in _ints(consts.get(i)))
            elif n.op_type in ("MaxPool", "AveragePool", "LpPool"):
                found.update(v for a in n.attribute if a.name == "kernel_shape" for v in a.ints)
        for vi in g.value_info:
            if vi.type.HasField("tensor_type"):
                dims = vi.type.tensor_type.shape.dim
                found.update(d.dim_value for d in list(dims)[1:] if d.HasField("dim_value"))
    lo, hi = _SIZE_RANGE
    return tuple(sorted(v for v in found if lo <= v <= hi))[:_MAX_SIZES]


def _ints(arr: np.ndarray | None) -> list[int]:
    if arr is None:
        return []
    return [int(v) for v in np.asarray(arr).reshape(-1) if v > 1]
