"""The API and pass entry points under the CLI fuzz's hostile values (bench/cli_fuzz.py).

Each case calls one entry point as a Python user would: ``convert`` (a proto, bytes, a path, an
onnx_ir.Model, or something else), ``convert_file``, ``validate``, ``auto_convert``,
``MixedPrecisionPass`` on an in-memory model, or Olive's ``AmpConvert`` pass in a workflow, with
valid or hostile arguments (the input model as ``dst`` or ``save_inputs``, existing files without
``force``, a FIFO, a Cast(to=999) model, a name that is not UTF-8, a subgraph initializer
shadowing a main-graph one, hostile option values).

Invariants: the call returns or raises an ``AmpConvertError`` (Olive's errors are ones too) whose
message is one line, never another exception (exit 3 for the command line); the protected files
and the FIFO are unchanged; an in-memory model handed in is unchanged, and ``MixedPrecisionPass``
leaves its model as it was when it raises.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

#: share of the API cases that run an Olive workflow (seconds each) or an --auto search
OLIVE_SHARE = 0.03
AUTO_SHARE = 0.06


def hostile_protos(model: onnx.ModelProto) -> dict[str, onnx.ModelProto]:
    """In-memory models a user might hand over: the arena's model and broken variants."""
    cast999 = onnx.ModelProto()
    cast999.CopyFrom(model)
    out = cast999.graph.output[0].name
    cast999.graph.node[-1].output[0] = "pre999"
    cast999.graph.node.append(helper.make_node("Cast", ["pre999"], [out], to=999))
    no_graph = onnx.ModelProto(ir_version=8)
    return {"model": model, "cast999": cast999, "no_graph": no_graph, "loop": shadowing_loop()}


def shadowing_loop() -> onnx.ModelProto:
    """A Loop body whose initializer `w` shadows the main graph's."""
    rng = np.random.default_rng(0)
    inner = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["v", "w"], ["v2"]),
            helper.make_node("Identity", ["cond"], ["c2"]),
        ],
        "body",
        [
            vi("i", TensorProto.INT64, []),
            vi("cond", TensorProto.BOOL, []),
            vi("v", TensorProto.FLOAT, [1, 4]),
        ],
        [vi("c2", TensorProto.BOOL, []), vi("v2", TensorProto.FLOAT, [1, 4])],
        [inner],
    )
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["z"]),
            helper.make_node("Loop", ["n", "t", "z"], ["y"], body=body),
        ],
        "g",
        [vi("x", TensorProto.FLOAT, [1, 4])],
        [vi("y", TensorProto.FLOAT, [1, 4])],
        [
            numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array(3, np.int64), "n"),
            numpy_helper.from_array(np.array(True), "t"),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _kwargs(rng: random.Random, hostile: list[str], pick: Callable[..., str]) -> dict[str, Any]:
    """Conversion options, valid or hostile."""
    options: dict[str, Any] = {}
    if rng.random() < 0.5:
        options["level"] = pick(rng, ["O1", "O2", "O3"], ["O9", "", 3])
    if rng.random() < 0.3:
        options["dtype"] = pick(rng, ["fp16", "bf16"], ["fp8", None])
    if rng.random() < 0.3:
        options["exclude_nodes"] = [pick(rng, ["mm", "^s"], ["(a+)+$", "[", *hostile])]
    if rng.random() < 0.2:
        options["dims"] = pick(rng, [{"batch": 2}], [{"batch": -1}, {"bach": 2}, "batch=x"])
    if rng.random() < 0.1:
        options[pick(rng, ["keep_io_types"], ["no_such_option"])] = True
    return options


def api_call(
    a: Any, rng: random.Random, tools: Any
) -> tuple[list[str], Callable[[], Any], set[str]]:
    """(a description, the call, real paths it may write) of one API case."""
    import amp_convert
    from amp_convert import MixedPrecisionPass
    from amp_convert.auto import auto_convert

    pick, paths, hostile = tools.pick, tools.paths, tools.HOSTILE_TEXT
    protos = hostile_protos(onnx.load(str(a.model)))
    r = rng.random()
    if r < OLIVE_SHARE:
        return _olive_call(a, rng, pick)
    if r < OLIVE_SHARE + AUTO_SHARE:
        save = paths(a, rng, True)
        model = pick(rng, [str(a.model)], [str(a.external), str(a.fifo), ""])
        judge = amp_convert.ValidateOptions(provider="emulate", save_inputs=save or None)

        def auto() -> Any:
            return auto_convert(model, validation=judge, max_rounds=1, force=rng.random() < 0.3)

        return ["auto_convert", model, f"save_inputs={save!r}"], auto, {save}
    kind = rng.choice(["convert", "convert_file", "validate", "pass"])
    options = _kwargs(rng, hostile, pick)
    if kind == "convert":
        name = rng.choice([*protos, "bytes", "path", "ir", "int", "garbage"])
        arg: Any = {
            "bytes": lambda: protos["model"].SerializeToString(),
            "path": lambda: pick(rng, [str(a.model)], [str(a.fifo), str(a.root / "dir"), ""]),
            "ir": lambda: ir.serde.deserialize_model(protos["model"]),
            "int": lambda: 42,
            "garbage": lambda: b"\x08\x96\x01 not a model",
        }.get(name, lambda: protos.get(name))()

        def convert() -> Any:
            before = arg.SerializeToString() if isinstance(arg, onnx.ModelProto) else None
            try:
                return amp_convert.convert(arg, **options)
            finally:
                if before is not None and arg.SerializeToString() != before:
                    raise AssertionError("convert changed the caller's ModelProto")

        return ["convert", name, repr(options)], convert, set()
    if kind == "convert_file":
        src = pick(rng, [str(a.model), str(a.external)], [str(a.fifo), str(a.npz), ""])
        dst = paths(a, rng, True)
        ext = pick(rng, [None, True, False], ["yes"])
        force = rng.random() < 0.3

        def convert_file() -> Any:
            return amp_convert.convert_file(
                src, dst or None, force=force, external_data=ext, **options
            )

        return ["convert_file", src, dst, f"force={force}", repr(options)], convert_file, {dst}
    if kind == "validate":
        ref = pick(rng, [str(a.model)], [str(a.fifo), str(a.controls), ""])
        cand = pick(rng, [str(a.candidate)], [str(a.external), str(a.model)])
        save = paths(a, rng, True)
        force = rng.random() < 0.3
        extra = {
            "provider": pick(rng, ["emulate", "cpu"], ["cuda", "tpu"]),
            "thresholds": pick(rng, [{"min_cosine": 0.99}], [{"min_cosine": 2}, {"atol": -1}]),
            "inputs": pick(rng, [None, str(a.npz)], [str(a.fifo), str(a.model)]),
        }

        def run_validate() -> Any:
            return amp_convert.validate(
                ref, cand, runs=0, save_inputs=save or None, force=force, **extra
            )

        return ["validate", ref, cand, f"save_inputs={save!r}", repr(extra)], run_validate, {save}
    name = rng.choice(["model", "cast999", "loop"])
    model = ir.serde.deserialize_model(protos[name])

    def run_pass() -> Any:
        before = ir.serde.serialize_model(model).SerializeToString()
        try:
            return MixedPrecisionPass(**options)(model)
        except Exception:
            if ir.serde.serialize_model(model).SerializeToString() != before:
                raise AssertionError("MixedPrecisionPass changed the model, then raised") from None
            raise

    return ["MixedPrecisionPass", name, repr(options)], run_pass, set()


def _olive_call(
    a: Any, rng: random.Random, pick: Callable[..., Any]
) -> tuple[list[str], Callable[[], Any], set[str]]:
    os.environ.setdefault("OLIVE_DISABLE_TELEMETRY", "1")
    from olive.workflows import run as olive_run

    from amp_convert.olive import PACKAGE_CONFIG

    config: dict[str, Any] = {"type": "AmpConvert"}
    for key, valid, hostile in (
        ("level", ["O1", "O2"], ["O9"]),
        ("external_data_name", ["w.data"], ["../escape.data", "/tmp/abs.data", "a\x00b"]),
        ("min_cosine", [0.999], [2.0]),
    ):
        if rng.random() < 0.5:
            config[key] = pick(rng, valid, hostile)
    if "external_data_name" in config:
        config["save_as_external_data"] = True
    if rng.random() < 0.2:
        config["auto"] = True  # without a data_config: refused in one line
    out = Path(a.root) / f"olive{rng.randrange(10**9)}"
    workflow = {
        "input_model": {"type": "ONNXModel", "model_path": str(a.model)},
        "systems": {
            "local": {
                "type": "LocalSystem",
                "accelerators": [
                    {"device": "cpu", "execution_providers": ["CPUExecutionProvider"]}
                ],
            }
        },
        "passes": {"amp": config},
        "host": "local",
        "target": "local",
        "output_dir": str(out / "out"),
        "cache_dir": str(out / "cache"),
        "log_severity_level": 4,
    }

    def olive() -> Any:
        return olive_run(workflow, package_config=str(PACKAGE_CONFIG))

    return ["olive AmpConvert", repr(config)], olive, set()
