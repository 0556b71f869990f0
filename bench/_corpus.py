"""The models the benchmarks run on, and what their files weigh on disk.

* the backend test models shipped in the onnx wheel (onnx/backend/test/data/GROUP);
* the generated blocks of models/blocks.py, written to a folder;
* the generated > 2 GB FP32 model with external data of models/big.py;
* a tiny warm-up model that measuring processes convert once, unmeasured.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable
from pathlib import Path

from amp_convert.core import proto_walk

WHEEL_GROUPS = ("light", "pytorch-converted", "pytorch-operator", "simple")
GB = 10**9


def wheel_models(groups: tuple[str, ...] = WHEEL_GROUPS) -> list[tuple[str, str, Path]]:
    """(group, name, path) of the onnx wheel's backend test models, sorted within each group."""
    import onnx

    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    out = []
    for group in groups:
        if group == "light":
            paths = sorted(Path(p) for p in glob.glob(str(root / group / "*.onnx")))
            out += [(group, p.stem, p) for p in paths]
        else:
            paths = sorted(Path(p) for p in glob.glob(str(root / group / "*" / "model.onnx")))
            out += [(group, p.parent.name, p) for p in paths]
    return out


def write_blocks(folder: Path, wanted: Callable[[str], bool]) -> list[tuple[str, Path]]:
    """Build and save the models/blocks.py models whose name is `wanted`: (name, path)."""
    import onnx

    from models.blocks import ALL_BLOCKS

    out = []
    for name, build in ALL_BLOCKS.items():
        if not wanted(name):
            continue
        path = folder / f"{name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(build(), str(path))
        out.append((name, path))
    return out


def write_big(path: Path, target_bytes: int, width: int = 1024) -> tuple[Path, str]:
    """Write the generated external-data model (models/big.py); its path and a line saying what."""
    from models.big import write_big_model

    start = time.perf_counter()
    info = write_big_model(path, target_bytes=target_bytes, width=width)
    what = (
        f"wrote {info.path.name} + {info.data_path.name}: {info.layers} x MatMul "
        f"{info.width}x{info.width} + Add + Relu, {info.data_bytes / GB:.2f} GB external data, "
        f"{time.perf_counter() - start:.1f} s"
    )
    return info.path, what


def write_warmup(folder: Path) -> Path:
    """A tiny MatMul+Add+Relu model every measuring process converts once, unmeasured."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "warmup",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = folder / "warmup.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def external_data_files(path: str | os.PathLike) -> set[str]:
    """The external-data files a model file references (subgraphs included; weights not read)."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    return {
        e.value
        for g in proto_walk.graphs(proto.graph)
        for t in g.initializer
        for e in t.external_data
        if e.key == "location"
    }


def disk_size(path: str | os.PathLike) -> int:
    """The .onnx file plus the external-data files it references."""
    path = Path(path)
    files = (path.parent / loc for loc in external_data_files(path))
    return path.stat().st_size + sum(f.stat().st_size for f in files if f.exists())
