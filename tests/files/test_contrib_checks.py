"""An input model whose ONNX Runtime ops break ORT's own schemas is refused as the input's fault.

com.microsoft ops with wrong input types (FastGelu on int32, an int64 gamma, float
position_ids) were reported as "converter bug"; wrong arity (Attention with one input, FastGelu
with no output) passed and wrote a model ORT refuses (as it refuses the input). Now: one line
naming the node, exit 2, before anything is converted or written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert import InputError
from amp_convert.commands.cli import cli
from tests.helpers import one_line_error

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
HIDDEN = 8


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )


def _init(name: str, shape, dtype=np.float32) -> TensorProto:
    rng = np.random.default_rng(len(name))
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


def fast_gelu_int32() -> onnx.ModelProto:
    return _model(
        [helper.make_node("FastGelu", ["x"], ["y"], name="gelu", domain="com.microsoft")],
        [helper.make_tensor_value_info("x", I32, [2, HIDDEN])],
        [helper.make_tensor_value_info("y", I32, [2, HIDDEN])],
    )


def skip_ln_int64_gamma() -> onnx.ModelProto:
    gamma = numpy_helper.from_array(np.ones(HIDDEN, np.int64), "ln.gamma")
    return _model(
        [
            helper.make_node(
                "SkipLayerNormalization",
                ["x", "skip", "ln.gamma", "ln.beta"],
                ["y"],
                name="skip_ln",
                domain="com.microsoft",
                epsilon=1e-5,
            )
        ],
        [
            helper.make_tensor_value_info("x", F, [2, 3, HIDDEN]),
            helper.make_tensor_value_info("skip", F, [2, 3, HIDDEN]),
        ],
        [helper.make_tensor_value_info("y", F, [2, 3, HIDDEN])],
        [gamma, _init("ln.beta", [HIDDEN])],
    )


def embed_ln_float_position_ids() -> onnx.ModelProto:
    inputs = ["input_ids", "segment_ids", "word", "pos", "seg", "gamma", "beta", "", "position_ids"]
    return _model(
        [
            helper.make_node(
                "EmbedLayerNormalization",
                inputs,
                ["y", "mask_index"],
                name="embed",
                domain="com.microsoft",
                epsilon=1e-5,
            )
        ],
        [
            helper.make_tensor_value_info("input_ids", I32, [2, 3]),
            helper.make_tensor_value_info("segment_ids", I32, [2, 3]),
            helper.make_tensor_value_info("position_ids", F, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("y", F, [2, 3, HIDDEN]),
            helper.make_tensor_value_info("mask_index", I32, [2]),
        ],
        [
            _init("word", [16, HIDDEN]),
            _init("pos", [8, HIDDEN]),
            _init("seg", [2, HIDDEN]),
            _init("gamma", [HIDDEN]),
            _init("beta", [HIDDEN]),
        ],
    )


def attention_one_input() -> onnx.ModelProto:
    return _model(
        [
            helper.make_node(
                "Attention", ["x"], ["y"], name="attn", domain="com.microsoft", num_heads=2
            )
        ],
        [helper.make_tensor_value_info("x", F, [2, 3, HIDDEN])],
        [helper.make_tensor_value_info("y", F, [2, 3, HIDDEN])],
    )


def fast_gelu_no_output() -> onnx.ModelProto:
    """The FastGelu's result is unused: it lists no output at all."""
    return _model(
        [
            helper.make_node("FastGelu", ["x"], [], name="gelu", domain="com.microsoft"),
            helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        ],
        [helper.make_tensor_value_info("x", F, [2, HIDDEN])],
        [helper.make_tensor_value_info("y", F, [2, HIDDEN])],
        [_init("w", [HIDDEN, HIDDEN])],
    )


CASES: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "FastGelu on int32": (
        fast_gelu_int32,
        "the input model's node 'gelu' (com.microsoft:FastGelu): input 0 'X' (value 'x') is "
        "int32, but ONNX Runtime's schema admits only bfloat16, double, float, float16",
    ),
    "int64 gamma": (
        skip_ln_int64_gamma,
        "the input model's node 'skip_ln' (com.microsoft:SkipLayerNormalization): input 2 "
        "'gamma' (value 'ln.gamma') is int64, but ONNX Runtime's schema admits only bfloat16, "
        "float, float16",
    ),
    "float position_ids": (
        embed_ln_float_position_ids,
        "the input model's node 'embed' (com.microsoft:EmbedLayerNormalization): input 8 "
        "'position_ids' (value 'position_ids') is float, but ONNX Runtime's schema admits only "
        "int32",
    ),
    "Attention with one input": (
        attention_one_input,
        "the input model's node 'attn' (com.microsoft:Attention): has 1 input(s) but ONNX "
        "Runtime's schema requires at least 2 (input 1 'weights' is missing)",
    ),
    "FastGelu with no output": (
        fast_gelu_no_output,
        "the input model's node 'gelu' (com.microsoft:FastGelu): has 0 output(s) but ONNX "
        "Runtime's schema requires at least 1 (output 0 'Y' is missing)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cli_refuses_the_input_in_one_line(tmp_path: Path, case: str) -> None:
    make, message = CASES[case]
    src = tmp_path / "m.onnx"
    onnx.save(make(), src)
    data = src.read_bytes()
    result = CliRunner().invoke(
        cli, [str(src), "-o", str(tmp_path / "o.onnx")], catch_exceptions=False
    )
    line = one_line_error(result, message, "refuses this node too (fix the model")
    assert "converter bug" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    assert src.read_bytes() == data


@pytest.mark.parametrize("case", list(CASES))
def test_api_raises_input_error(case: str) -> None:
    make, message = CASES[case]
    with pytest.raises(InputError) as info:
        amp_convert.convert(make())
    assert message in str(info.value)


@pytest.mark.integration
def test_a_valid_fused_model_still_converts() -> None:
    """The same check passes ORT's optimizer output (the schemas are ORT's own)."""
    from models.fused import ort_optimized_bert

    out, report = amp_convert.convert(ort_optimized_bert(), return_report=True)
    assert report.nodes_low > 0
    assert any(n.domain == "com.microsoft" for n in out.graph.node)
