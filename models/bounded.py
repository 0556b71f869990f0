"""Blocks whose deny-listed ops cannot overflow, for the bounds analysis (op_lists/bounds.py).

- `linear_attention`: timm MobileViTv2's LinearSelfAttention as torch's dynamo exporter writes
  it (opset 18): a 1x1 Conv to ``1 + 2d`` channels, ``Split`` into query (1 channel), key and
  value, ``Softmax(query, axis=-1)`` over the patches, ``ReduceSum(key * scores, axes=[-1],
  keepdims=1)`` (a convex combination of the keys: ``|sum| <= max|key|``), then
  ``Relu(value) * Expand(context)`` and a 1x1 Conv out; ``blocks`` of them with a residual.
"""

from __future__ import annotations

import onnx

from models._graph import FLOAT, GraphBuilder, first_doc_paragraph


def linear_attention(
    blocks: int = 2, dim: int = 16, patches: int = 4, tokens: int = 64, seed: int = 80
) -> onnx.ModelProto:
    """MobileViTv2 linear self-attention blocks (dynamo, opset 18): a Softmax-weighted ReduceSum."""
    b = GraphBuilder("linear_attention", seed)
    x = b.input("x", FLOAT, [1, dim, patches, tokens])
    split = b.i64("val_split", [1, dim, dim])
    axes = b.i64("val_axes_last", [-1])
    for i in range(blocks):
        s = f"/stages.{i}/attn"
        w = b.weight(f"stages.{i}.attn.qkv_proj.weight", [1 + 2 * dim, dim, 1, 1])
        bias = b.weight(f"stages.{i}.attn.qkv_proj.bias", [1 + 2 * dim])
        qkv = b.op("Conv", [x, w, bias], f"{s}/qkv_proj/Conv")
        q, k, v = b.op("Split", [qkv, split], f"{s}/Split", axis=1, outputs=3)
        scores = b.op("Softmax", [q], f"{s}/Softmax", axis=-1)
        context = b.op(
            "ReduceSum", [b.op("Mul", [k, scores], f"{s}/Mul"), axes], f"{s}/ReduceSum", keepdims=1
        )
        shape = b.op("Shape", [v], f"{s}/Shape")
        context = b.op("Expand", [context, shape], f"{s}/Expand")
        out = b.op("Mul", [b.op("Relu", [v], f"{s}/Relu"), context], f"{s}/Mul_1")
        out = b.op(
            "Conv",
            [out, b.weight(f"stages.{i}.attn.out_proj.weight", [dim, dim, 1, 1])],
            f"{s}/out_proj/Conv",
        )
        x = b.op("Add", [x, out], f"/stages.{i}/Add")
    b.op("Identity", [x], "/output", outputs=["y"])
    b.output("y", FLOAT, [1, dim, patches, tokens])
    return b.model(opset=18, doc=first_doc_paragraph(linear_attention))
