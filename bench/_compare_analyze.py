"""What bench/compare.py checks on each model file, original or converted (run in worker processes).

The same definitions apply to every converter's output:

* **loads in ORT**: ``onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])``
  succeeds (default graph optimizations);
* **checker**: ``onnx.checker.check_model(path, full_check=True)`` passes;
* **casts**: ``Cast`` nodes in the model, subgraphs (If/Loop/Scan bodies) included; the table
  shows converted minus original;
* **FP32 nodes**: among the "float nodes" (every node of every graph except Cast, CastLike and
  Constant, whose float inputs or outputs are typed after ONNX shape inference), those that still
  compute in FP32: a node with float outputs counts when one of its float outputs is float32; a
  node without float outputs (Shape, ArgMax, NonMaxSuppression, comparisons...) counts when one
  of its float inputs is float32. Values whose type stays unknown are ignored (``untyped``);
* **accuracy**: ``amp_convert.validate(original, converted, provider="emulate", runs=0)``: worst
  ``max_rel`` over float outputs, lowest cosine, NaN+Inf count in the converted model's outputs
  (and in the original's), mismatches of integer outputs.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from amp_convert.core import proto_walk
from bench._corpus import disk_size

FLOAT32 = 1
FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
NOT_COUNTED = {"Cast", "CastLike", "Constant"}


def quiet_worker(log_path: str) -> None:
    """Pool initializer: ONNX Runtime's C++ log (run errors of validation) goes to a file."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


def first_line(e: BaseException, limit: int = 300) -> str:
    """`Type: first non-empty line`, without ORT's "[ONNXRuntimeError] : 1 : FAIL : Load model
    from /long/tmp/path failed:" preamble (the reason follows it)."""
    text = str(e).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    line = re.sub(r"^Load model from .+? failed:\s*", "Load model failed: ", line)
    # C++ source locations and signatures before the message
    line = re.sub(r"/onnxruntime_src/\S+:\d+ .*?\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    line = re.sub(r"/onnxruntime_src/\S+:\d+ onnxruntime::.*?\)>? (?=[A-Z])", "", line)
    return f"{type(e).__name__}: {line}"[:limit]


def _constant_type(node) -> int | None:
    for a in node.attribute:
        if a.name in ("value", "sparse_value"):
            return a.t.data_type if a.name == "value" else a.sparse_value.values.data_type
        if a.name in ("value_float", "value_floats"):
            return FLOAT32
        if a.name in ("value_int", "value_ints"):
            return 7  # INT64
        if a.name in ("value_string", "value_strings"):
            return 8
    return None


def _elem_type(type_proto) -> int | None:
    which = type_proto.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        return getattr(type_proto, which).elem_type or None
    return None  # sequences, maps, optionals: not counted


def count_nodes(graph, outer: dict[str, int] | None = None) -> dict[str, int]:
    """casts / float_nodes / fp32_nodes / untyped / nodes over the graph and its subgraphs."""
    types: dict[str, int] = dict(outer or {})
    for v in (*graph.input, *graph.output, *graph.value_info):
        t = _elem_type(v.type)
        if t:
            types[v.name] = t
    for init in graph.initializer:
        types[init.name] = init.data_type
    for sp in graph.sparse_initializer:
        types[sp.values.name] = sp.values.data_type
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            t = _constant_type(node)
            if t:
                types[node.output[0]] = t
    out = {"nodes": 0, "casts": 0, "float_nodes": 0, "fp32_nodes": 0, "untyped": 0}
    for node in graph.node:
        out["nodes"] += 1
        default = node.domain in ("", "ai.onnx")
        if default and node.op_type == "Cast":
            out["casts"] += 1
        for g in proto_walk.subgraphs(node):
            for k, v in count_nodes(g, types).items():
                out[k] += v
        if default and node.op_type in NOT_COUNTED:
            continue
        outs = [types.get(o) for o in node.output if o]
        ins = [types.get(i) for i in node.input if i]
        if outs and all(t is None for t in outs):
            out["untyped"] += 1
        float_outs = [t for t in outs if t in FLOAT_TYPES]
        float_ins = [t for t in ins if t in FLOAT_TYPES]
        if not float_outs and not float_ins:
            continue
        out["float_nodes"] += 1
        decisive = float_outs or float_ins
        if FLOAT32 in decisive:
            out["fp32_nodes"] += 1
    return out


def structure(path: str | os.PathLike) -> dict[str, Any]:
    """Node counts of a model file, after ONNX shape inference (weights are not read)."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    inferred = True
    try:
        proto = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
    except Exception:  # keep the value_info the file has
        inferred = False
    result: dict[str, Any] = count_nodes(proto.graph)
    result["io_types"] = {
        v.name: _elem_type(v.type) for v in (*proto.graph.input, *proto.graph.output)
    }
    result["shape_inferred"] = inferred
    result["opset"] = next(
        (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None
    )
    return result


def check_full(path: str | os.PathLike) -> str | None:
    """None when onnx.checker.check_model(path, full_check=True) passes, else the error line."""
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as e:
        return first_line(e)
    return None


def ort_load(path: str | os.PathLike) -> str | None:
    """None when ONNX Runtime (CPU) creates a session for the file, else the error line."""
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # no opset warnings or init errors on stderr
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        return first_line(e)
    del session
    return None


def analyze_file(path: str | os.PathLike) -> dict[str, Any]:
    """Everything about one model file: size, ORT load, full checker, node counts."""
    out: dict[str, Any] = {"path": str(path)}
    try:
        out["size"] = disk_size(path)
        out.update(structure(path))
    except Exception as e:
        out["structure_error"] = first_line(e)
    out["checker_error"] = check_full(path)
    out["ort_error"] = ort_load(path)
    return out


def _num(v: float | None) -> float | str | None:
    if v is None or math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else "inf"


def accuracy(reference: str, candidate: str, seed: int = 0) -> dict[str, Any]:
    """Emulated FP16 accuracy of `candidate` against the FP32 `reference` (no timing runs)."""
    import onnxruntime as ort

    import amp_convert

    ort.set_default_logger_severity(4)
    try:
        report = amp_convert.validate(reference, candidate, provider="emulate", runs=0, seed=seed)
    except Exception as e:
        return {"error": first_line(e)}
    floats = [o for o in report.outputs if o.kind == "float"]
    exact = [o for o in report.outputs if o.kind == "exact"]
    rels = [o.max_rel for o in floats if o.max_rel is not None]
    coss = [o.cosine for o in floats if o.cosine is not None]
    worst_rel = None
    if rels:
        worst_rel = math.nan if any(math.isnan(r) for r in rels) else max(rels)
    return {
        "max_rel": _num(worst_rel),
        "min_cosine": _num(min(coss)) if coss else None,
        "nan_inf": sum(o.candidate_nan + o.candidate_inf for o in floats),
        "ref_nan_inf": sum(o.reference_nan + o.reference_inf for o in floats),
        "new_nonfinite": sum(o.nonfinite for o in floats),
        "exact_outputs": len(exact),
        "exact_mismatches": sum(o.mismatches or 0 for o in exact),
        "skipped_outputs": sum(o.kind == "skipped" for o in report.outputs),
        "outputs": [
            {
                k: _num(v) if isinstance(v, float) else v
                for k, v in o.to_dict().items()
                if k not in ("thresholds", "checked", "passed", "failures")
            }
            for o in report.outputs
        ],
        "dims": dict(report.dims),
        "warnings": list(report.warnings),
    }


def _file_traffic(path: str, all_low: bool) -> tuple[int, int | None]:
    """Estimated bytes per inference of a model file, and the same as if all FP32 were FP16.

    amp_convert's traffic estimate, as the converter makes it for its report: element types from
    the file and ONNX inference, shapes resolved from the default input dims (batch-like 1,
    others 128; amp_convert.cost.shapes), the same for every converter's output. Values left untyped
    would count 0 bytes, hence InferDtypesPass first.
    """
    import onnx_ir as ir

    from amp_convert.cost.traffic import ShapeBook, model_traffic
    from amp_convert.passes.analyse import analyse
    from amp_convert.passes.infer_dtypes import InferDtypesPass

    model = ir.load(path)
    shapes = ShapeBook(model, {})
    InferDtypesPass(analyse(model)[1])(model)
    low = model_traffic(model, shapes, low=ir.DataType.FLOAT16) if all_low else None
    return model_traffic(model, shapes), low


@functools.lru_cache(maxsize=4)
def _original_traffic(path: str) -> tuple[int, int | None]:
    """The original's figures, once per worker (each original has several outputs to check)."""
    return _file_traffic(path, all_low=True)


def traffic(reference: str, candidate: str) -> dict[str, Any]:
    """Bytes per inference of `candidate` and of `reference` all in FP16, over `reference`'s."""
    from amp_convert.cost.traffic import Traffic

    original, all_low = _original_traffic(reference)
    t = Traffic(
        original=original, result=_file_traffic(candidate, all_low=False)[0], all_low=all_low or 0
    )
    return {**asdict(t), "ratio": t.ratio, "all_low_ratio": t.all_low_ratio}


# Figures of a converted output against its original, each under its own key in the output's
# checks (so in --json); a main-table column shows one through _compare_tables.EXTRA_COLUMNS.
# A figure that raises records {"error": ...} instead.
FIGURES: dict[str, Callable[[str, str], dict[str, Any]]] = {"traffic": traffic}


def analyze_converted(
    reference: str, candidate: str, do_accuracy: bool, seed: int = 0
) -> dict[str, Any]:
    """analyze_file(candidate), the FIGURES, and accuracy against `reference` when it loads."""
    out = analyze_file(candidate)
    for name, figure in FIGURES.items():
        try:
            out[name] = figure(reference, candidate)
        except Exception as e:
            out[name] = {"error": first_line(e)}
    if not do_accuracy:
        out["accuracy"] = {"skipped": "original does not load in ORT"}
    elif out["ort_error"]:
        out["accuracy"] = {"skipped": "converted model does not load in ORT"}
    else:
        out["accuracy"] = accuracy(reference, candidate, seed)
    return out
