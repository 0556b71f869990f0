"""A > 2 GB FP32 model with external data, written without holding the weights in memory.

Why: protobuf caps a serialized model at 2 GB, so real large models keep weights in an external
``.data`` file. The converter must load such a model lazily (memory-mapped), retype weights and
save it again with external data, all with a peak RSS far below the model size. This writer
produces such a model cheaply and deterministically: each weight is generated from its own seed,
streamed into ``<name>.onnx.data`` at an aligned offset, and referenced from a small ``.onnx``
whose initializers carry only ``external_data`` entries (location, offset, length).
"""

from __future__ import annotations

import math
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from models._graph import PRODUCER

#: Offsets of tensors in the data file are multiples of this (page size; lets readers mmap).
ALIGNMENT = 4096


@dataclass(frozen=True)
class BigModelInfo:
    """What :func:`write_big_model` wrote."""

    path: Path
    data_path: Path
    layers: int
    width: int
    data_bytes: int
    peak_rss_bytes: int


def _peak_rss_bytes() -> int:
    """Process peak RSS so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def _external_tensor(
    name: str, shape: list[int], location: str, offset: int, length: int
) -> TensorProto:
    tensor = TensorProto()
    tensor.name = name
    tensor.data_type = TensorProto.FLOAT
    tensor.dims.extend(shape)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = str(value)
    return tensor


def _layer_weights(seed: int, layer: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """He-uniform weight and small bias for one layer, from a per-layer seed (deterministic)."""
    rng = np.random.default_rng([seed, layer])
    bound = math.sqrt(6.0 / width)
    w = rng.random((width, width), dtype=np.float32)
    w *= 2.0 * bound
    w -= bound
    bias = (rng.random(width, dtype=np.float32) - 0.5) * 0.02
    return w.astype("<f4", copy=False), bias.astype("<f4", copy=False)


def write_big_model(
    path: str | os.PathLike[str],
    target_bytes: int = 2_200_000_000,
    *,
    width: int = 1024,
    seed: int = 0,
    verbose: bool = False,
) -> BigModelInfo:
    """Write a MatMul+Add+Relu stack over ``x`` [batch, width] whose weights total >= target.

    Weights go to ``<path>.data`` (e.g. ``big.onnx.data``, referenced by its bare file name),
    one tensor at a time, so peak memory is a few weight matrices regardless of
    ``target_bytes``. The graph output ``y`` [batch, width] has no Relu on the last layer.
    Returns sizes and the process's peak RSS; prints them when ``verbose``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data_path = path.with_name(path.name + ".data")
    location = data_path.name
    per_layer = 4 * (width * width + width)
    layers = max(1, math.ceil(target_bytes / per_layer))

    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = []
    h = "x"
    tmp_data = data_path.with_name(data_path.name + ".tmp")
    with open(tmp_data, "wb") as f:
        for i in range(layers):
            w, bias = _layer_weights(seed, i, width)
            for name, arr in ((f"layer{i}/weight", w), (f"layer{i}/bias", bias)):
                offset = f.tell()
                pad = -offset % ALIGNMENT
                if pad:
                    f.write(b"\0" * pad)
                    offset += pad
                f.write(arr.tobytes())
                inits.append(_external_tensor(name, list(arr.shape), location, offset, arr.nbytes))
            del w, bias
            m = f"layer{i}/MatMul"
            a = f"layer{i}/Add"
            nodes.append(helper.make_node("MatMul", [h, f"layer{i}/weight"], [m + "_out"], name=m))
            last = i == layers - 1
            add_out = "y" if last else a + "_out"
            nodes.append(helper.make_node("Add", [m + "_out", f"layer{i}/bias"], [add_out], name=a))
            if last:
                h = add_out
            else:
                r = f"layer{i}/Relu"
                nodes.append(helper.make_node("Relu", [add_out], [r + "_out"], name=r))
                h = r + "_out"
        data_bytes = f.tell()
    graph = helper.make_graph(
        nodes,
        "big_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=9,
        producer_name=PRODUCER,
        doc_string=(
            f"{layers} x (MatMul {width}x{width} + Add + Relu) with {data_bytes} bytes of "
            "external data: exercises lazy loading and external-data saving (> 2 GB protobuf cap)."
        ),
    )
    tmp_model = path.with_name(path.name + ".tmp")
    tmp_model.write_bytes(model.SerializeToString())
    os.replace(tmp_data, data_path)
    os.replace(tmp_model, path)
    info = BigModelInfo(path, data_path, layers, width, data_bytes, _peak_rss_bytes())
    if verbose:
        print(
            f"wrote {path} + {data_path.name}: {layers} layers, {data_bytes / 1e9:.3f} GB data, "
            f"peak RSS {info.peak_rss_bytes / 2**20:.0f} MiB"
        )
    return info
