"""Unit tests for the parts end-to-end tests only reach indirectly: the min cut, the op-list parser,
the options declaration and the stamp."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert.commands.cli import cli
from amp_convert.core.precision import DTYPE_ATTRIBUTES
from amp_convert.errors import OptionError
from amp_convert.op_lists import apply_user_file, load_builtin
from amp_convert.options.convert import ConvertOptions, cli_fields, make_options, user_fields
from amp_convert.placement.mincut import INF, FlowNetwork
from tests.helpers import FLOAT, node_by_name, op_counts


# ---------------------------------------------------------------- min cut
def test_min_cut_value_and_side() -> None:
    net = FlowNetwork()
    s, a, b, t = (net.add_vertex() for _ in range(4))
    net.add_edge(s, a, 3)
    net.add_edge(s, b, 2)
    net.add_edge(a, b, 1)
    net.add_edge(a, t, 2)
    net.add_edge(b, t, 3)
    assert net.max_flow(s, t) == 5
    assert net.source_side(s) == {s}


def test_min_cut_infinite_edges_are_never_cut() -> None:
    net = FlowNetwork()
    s, a, t = (net.add_vertex() for _ in range(3))
    net.add_edge(s, a, INF)
    net.add_edge(a, t, 7)
    assert net.max_flow(s, t) == 7
    assert net.source_side(s) == {s, a}


def test_min_cut_chain_needs_one_cut() -> None:
    """A long chain between a LOW source and an FP32 sink is cut once, at its cheapest edge."""
    net = FlowNetwork()
    s, t = net.add_vertex(), net.add_vertex()
    chain = [net.add_vertex() for _ in range(50)]
    net.add_edge(s, chain[0], INF)
    for i, (u, v) in enumerate(itertools.pairwise(chain)):
        net.add_edge(u, v, 10 if i != 30 else 4)
        net.add_edge(v, u, 10 if i != 30 else 4)
    net.add_edge(chain[-1], t, INF)
    assert net.max_flow(s, t) == 4
    assert net.source_side(s) == {s, *chain[:31]}


# ---------------------------------------------------------------- op lists
def test_user_rules_first_match_wins(tmp_path: Path) -> None:
    lists_file = tmp_path / "lists.txt"
    lists_file.write_text(
        "[rules]\n"
        "Pow 1 between 0 1 clear first rule wins\n"
        "Pow 1 between 0 1 deny second rule loses\n"
    )
    lists = apply_user_file(load_builtin(), lists_file)
    rules = lists.rules_for("Pow")
    assert [r.reason for r in rules[:2]] == ["first rule wins", "second rule loses"]
    assert rules[2].user is False  # the built-in rule comes after the user's

    model = _pow_model(0.5)
    _, report = amp_convert.convert(model, op_lists=lists_file, return_report=True)
    decision = report.decision("pow")
    assert decision.op_class == "clear"
    assert decision.reason == "user rule: first rule wins"


def test_user_list_reason_is_kept(tmp_path: Path) -> None:
    lists_file = tmp_path / "lists.txt"
    lists_file.write_text("[deny]\nPow   we saw NaNs with our data\n")
    _, report = amp_convert.convert(_pow_model(3.0), op_lists=lists_file, return_report=True)
    assert report.decision("pow").reason == "user: we saw NaNs with our data"
    _, report = amp_convert.convert(_pow_model(3.0), fp32_ops="Pow", return_report=True)
    assert report.decision("pow").reason == "user: --fp32-ops"


def test_user_deny_holds_at_o3_builtin_deny_does_not(tmp_path: Path) -> None:
    _, report = amp_convert.convert(_pow_model(3.0), level="O3", return_report=True)
    assert report.decision("pow").precision == "low"
    _, report = amp_convert.convert(
        _pow_model(3.0), level="O3", fp32_ops=["Pow"], return_report=True
    )
    assert report.decision("pow").precision == "fp32"


def _pow_model(exponent: float) -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Pow", ["m", "e"], ["p"], name="pow"),
            helper.make_node("MatMul", ["p", "w"], ["y"], name="mm2"),
        ],
        "g",
        [helper.make_tensor_value_info("x", FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", FLOAT, [2, 4])],
        [
            numpy_helper.from_array(np.eye(4, dtype=np.float32), "w"),
            numpy_helper.from_array(np.array(exponent, dtype=np.float32), "e"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# ---------------------------------------------------------------- options declared once
def test_cli_shows_every_option_field() -> None:
    text = CliRunner().invoke(cli, ["convert", "--help"]).output
    for f in cli_fields():
        flag = f.metadata["flags"][0].split("/")[0]
        assert flag in text, flag
    # the only option the command line does not show: --auto's typed pin set (API only)
    assert {f.name for f in user_fields()} - {f.name for f in cli_fields()} == {"pinned_nodes"}


def test_api_takes_every_option_field() -> None:
    options = make_options(**{f.name: f.default for f in user_fields()})
    assert options == ConvertOptions()


def test_stamp_covers_every_option_and_the_op_list_content(tmp_path: Path) -> None:
    lists_file = tmp_path / "lists.txt"
    lists_file.write_text("[deny]\nRelu x\n")
    stamp = make_options(op_lists=lists_file).stamp()
    assert set(__import__("json").loads(stamp)) == {f.name for f in user_fields()}
    lists_file.write_text("[deny]\nSigmoid x\n")
    assert make_options(op_lists=lists_file).stamp() != stamp


def test_converting_again_with_another_op_list_converts(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("[deny]\nPow x\n")
    b.write_text("[allow]\nPow y\n")
    once = amp_convert.convert(_pow_model(3.0), op_lists=a)
    _, again = amp_convert.convert(once, op_lists=a, return_report=True)
    assert again.already_converted
    _, other = amp_convert.convert(once, op_lists=b, return_report=True)
    assert not other.already_converted


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fp32_ops": 123}, "fp32_ops must be a string or a list of strings"),
        ({"fp16_ops": [1]}, "fp16_ops must be a string or a list of strings"),
        ({"dtype": np.float32}, "dtype must be 'fp16' or 'bf16'"),
        ({"dtype": "int8"}, "unknown dtype"),
        ({"keep_io_types": "no"}, "keep_io_types must be True or False"),
        ({"level": 2}, "level must be one of"),
        ({"levle": "O2"}, "unknown option"),
        ({"dims": ["batch"]}, "expected NAME=VALUE"),
        ({"dims": {"batch": -1}}, "non-negative integer"),
        ({"dims": ["batch=1", "batch=2"]}, "given twice"),
    ],
)
def test_bad_api_options_are_option_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        amp_convert.convert(_pow_model(2.0), **kwargs)


def test_numpy_dtypes_are_understood() -> None:
    assert make_options(dtype=np.float16).dtype == "fp16"


def test_unknown_user_op_names_are_refused() -> None:
    """As in the CLI: a misspelt op name would silently keep nothing FP32."""
    with pytest.raises(OptionError, match=r"--fp32-ops Powr: no ONNX or ONNX Runtime op.*'Pow'"):
        amp_convert.convert(_pow_model(2.0), fp32_ops="Powr")


def test_options_dataclass_has_no_undeclared_cli_field() -> None:
    for f in dataclasses.fields(ConvertOptions):
        api_only = f.metadata.get("kind") == "api"  # pinned_nodes: a typed set, not a flag
        assert f.metadata.get("derived") or api_only or "flags" in f.metadata, f.name


# ---------------------------------------------------------------- dtype attributes
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_window_ops_follow_the_node_precision(op: str) -> None:
    assert op in DTYPE_ATTRIBUTES
    graph = helper.make_graph(
        [
            helper.make_node(op, ["n"], ["w"], name="win"),
            helper.make_node("Mul", ["w", "x"], ["y"], name="mul"),
        ],
        "g",
        [helper.make_tensor_value_info("x", FLOAT, [8])],
        [helper.make_tensor_value_info("y", FLOAT, [8])],
        [numpy_helper.from_array(np.array(8, dtype=np.int64), "n")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    # target none: ORT's CUDA provider has no window kernels, so ort-cuda keeps them FP32
    out = amp_convert.convert(proto, level="O3", target="none")
    onnx.checker.check_model(out, full_check=True)
    attrs = {a.name: a.i for a in node_by_name(out, "win").attribute}
    assert attrs["output_datatype"] == TensorProto.FLOAT16
    assert op_counts(out)["Cast"] == 2  # the x input and the y output, nothing around the window


def test_infinite_max_nan_is_a_validation_error() -> None:
    from amp_convert.errors import ValidationError
    from amp_convert.validation.metrics import Thresholds

    with pytest.raises(ValidationError, match="max_nan must be a number"):
        Thresholds.coerce({"max_nan": float("inf")})


def test_assert_converted_close_refuses_to_judge_nothing() -> None:
    from amp_convert.testing import assert_converted_close

    model = _pow_model(2.0)
    with pytest.raises(ValueError, match="at least one threshold"):
        assert_converted_close(
            model, model, atol=None, rtol=None, min_cosine=None, max_nan=None, provider="emulate"
        )


def test_validate_function_does_not_hide_its_package() -> None:
    """`amp_convert.validate` is the function; the package is `amp_convert.validation`."""
    import importlib

    core = importlib.import_module("amp_convert.validation.core")
    assert amp_convert.validate is core.validate
    exec("import amp_convert.validation.core as c", {})  # the plain import statement works
