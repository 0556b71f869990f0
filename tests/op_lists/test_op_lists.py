"""--op-lists files are read as written, and a mistake in one is one clear line, exit 2.

Left from last round: an unknown op name, or one op in both [allow] and [deny], got no word
(while `--fp32-ops NoSuchOp` is exit 2); a file with a BOM, tab-separated reasons or a rule whose
subject is out of the op's range was mis-read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert import OptionError
from amp_convert.commands.cli import cli
from amp_convert.op_lists import apply_user_file, load_builtin
from tests.graphs import pow_model
from tests.helpers import one_line_error


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def mlp(folder: Path) -> Path:
    """MatMul → Softmax → MatMul with a custom-domain op (a user may list their own ops)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w2")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
            helper.make_node("Softmax", ["h"], ["s"], name="softmax", axis=-1),
            helper.make_node("MatMul", ["s", "w2"], ["y"], name="mm2"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [w1, w2],
    )
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def lists_file(folder: Path, data: bytes) -> Path:
    path = folder / "lists.txt"
    path.write_bytes(data)
    return path


def test_bom_and_tabs_are_read_right(tmp_path: Path) -> None:
    """A BOM (Notepad) and a tab between the op and its reason (editors, TSV habits)."""
    lists = lists_file(tmp_path, "\ufeff[deny]\r\nMatMul\tslow on our target\r\n".encode())
    report = amp_convert.convert_file(mlp(tmp_path), tmp_path / "o.onnx", op_lists=lists)
    for name in ("mm1", "mm2"):
        decision = report.decision(name)
        assert decision.precision == "fp32", decision
        assert "slow on our target" in decision.reason
    result = invoke(mlp(tmp_path), "-o", tmp_path / "cli.onnx", "--op-lists", lists)
    assert result.exit_code == 0, result.output
    types = {t.name: t.data_type for t in onnx.load(tmp_path / "cli.onnx").graph.initializer}
    assert types == {"w1": TensorProto.FLOAT, "w2": TensorProto.FLOAT}  # denied: kept FP32


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[deny]\nSoftmx  typo\n",
            "lists.txt:2: Softmx: no ONNX or ONNX Runtime op and no node of the model has this "
            "type (did you mean 'Softmax'?)",
        ),
        (
            "[allow]\nMatMul\n\n[deny]\nMatMul  unstable\n",
            "lists.txt:5: MatMul is in [deny] here and in [allow] at line 2; an op belongs to "
            "one class",
        ),
        (
            "[rules]\nPow 2 between 0 1 infer sqrt-like\n",
            "lists.txt:2: Pow has inputs 0 to 1; subject 2 is out of range",
        ),
        (
            "[rules]\nResize @mdoe == nearest clear copies\n",
            "lists.txt:2: Resize has no attribute 'mdoe'",
        ),
        (
            "[rules]\nPoww 1 between 0 1 infer typo\n",
            "lists.txt:2: Poww: no ONNX or ONNX Runtime op",
        ),
    ],
)
def test_mistakes_are_one_line_exit_2(tmp_path: Path, text: str, message: str) -> None:
    lists = lists_file(tmp_path, text.encode())
    result = invoke(mlp(tmp_path), "-o", tmp_path / "o.onnx", "--op-lists", lists)
    one_line_error(result, message)
    assert not (tmp_path / "o.onnx").exists()
    with pytest.raises(OptionError, match=r"lists.txt:"):
        amp_convert.convert(onnx.load(tmp_path / "m.onnx"), op_lists=lists)


def test_the_models_own_custom_op_may_be_listed(tmp_path: Path) -> None:
    """An op no schema knows is accepted when the model has it (the documented use)."""
    graph = helper.make_graph(
        [helper.make_node("MyCustomNorm", ["x"], ["y"], name="norm", domain="my.ops")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)]
    )
    lists = lists_file(tmp_path, b"[deny]\nmy.ops:MyCustomNorm  ours\n[allow]\n-Conv\n")
    amp_convert.convert(model, op_lists=lists)  # no error


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

    model = pow_model(0.5)
    _, report = amp_convert.convert(model, op_lists=lists_file, return_report=True)
    decision = report.decision("pow")
    assert decision.op_class == "clear"
    assert decision.reason == "user rule: first rule wins"


def test_user_list_reason_is_kept(tmp_path: Path) -> None:
    lists_file = tmp_path / "lists.txt"
    lists_file.write_text("[deny]\nPow   we saw NaNs with our data\n")
    _, report = amp_convert.convert(pow_model(3.0), op_lists=lists_file, return_report=True)
    assert report.decision("pow").reason == "user: we saw NaNs with our data"
    _, report = amp_convert.convert(pow_model(3.0), fp32_ops="Pow", return_report=True)
    assert report.decision("pow").reason == "user: --fp32-ops"


def test_user_deny_holds_at_o3_builtin_deny_does_not(tmp_path: Path) -> None:
    _, report = amp_convert.convert(pow_model(3.0), level="O3", return_report=True)
    assert report.decision("pow").precision == "low"
    _, report = amp_convert.convert(
        pow_model(3.0), level="O3", fp32_ops=["Pow"], return_report=True
    )
    assert report.decision("pow").precision == "fp32"


def test_shipped_rules_name_inputs_and_attributes_their_ops_have() -> None:
    """The shipped conditional rules are parsed without the per-run schema check that user
    rules get; this test holds them to it instead."""
    from amp_convert.op_lists import _check_subject

    rules = load_builtin().rules
    assert rules
    for rule in rules:
        _check_subject(rule.op, rule.subject, "conditional.txt", f"{rule.op} {rule.subject}")
