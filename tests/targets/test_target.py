"""The Target object: built once, asked for capabilities; a new target touches targets/ only."""

from __future__ import annotations

import ast
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import amp_convert
from amp_convert.errors import OptionError, TargetError
from amp_convert.targets import (
    Rewrite,
    Target,
    build_target,
    load_target,
    register_target,
    target_names,
)
from models.vision import se_cnn
from tests.helpers import node_by_name, op_counts

PASSES = Path(amp_convert.__file__).parent / "passes"
F32 = onnx.TensorProto.FLOAT


def _attention() -> onnx.ModelProto:
    """MatMul -> Softmax -> MatMul: a deny-listed Softmax between two low neighbours."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Softmax", ["h"], ["p"], name="sm", axis=-1),
            helper.make_node("MatMul", ["p", "w"], ["y"], name="mm2"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F32, [2, 4])],
        [helper.make_tensor_value_info("y", F32, [2, 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def npu() -> Iterator[str]:
    """A runtime defined here, not in the package: CUDA's kernels, an FP32 Softmax, global pools."""

    def build() -> Target:
        accumulation = types.MappingProxyType({"Softmax": "npu/softmax.cc accumulates in FP32"})
        return Target("test-npu", load_target("ort-cuda"), accumulation, {Rewrite.GLOBAL_POOL})

    register_target("test-npu", build)
    try:
        yield "test-npu"
    finally:
        register_target("test-npu", None)


def test_a_target_defined_in_a_test_drives_every_step(npu: str) -> None:
    """No step changes for a new target: its facts reach classify, the rewrites and the report."""
    model = _attention()
    out, report = amp_convert.convert(model, level="O2", target=npu, return_report=True)
    sm = next(n for n in report.nodes if n.name == "sm")
    assert sm.precision == "low"
    assert "FP32 accumulation in the test-npu kernel (npu/softmax.cc" in sm.reason
    assert report.target.startswith("test-npu (kernel table from ONNX Runtime ")
    _, none = amp_convert.convert(model, level="O2", target="none", return_report=True)
    assert next(n for n in none.nodes if n.name == "sm").precision == "fp32"  # deny list holds
    assert node_by_name(out, "sm").op_type == "Softmax"

    cnn = se_cnn("efficientnet", "dynamo")
    pools = op_counts(cnn)["ReduceMean"]
    pooled = amp_convert.convert(cnn, target=npu)
    assert op_counts(pooled)["GlobalAveragePool"] == pools and op_counts(pooled)["ReduceMean"] == 0
    kept = amp_convert.convert(cnn, target="none")  # a target that does not want the rewrite
    assert op_counts(kept)["ReduceMean"] == pools


def test_the_target_is_built_once_and_checks_kernels_unless_schema_only() -> None:
    assert build_target("ort-cuda") is build_target("ort-cuda")
    cuda, none = build_target("ort-cuda"), build_target("none")
    assert cuda.checks_kernels and not none.checks_kernels
    assert cuda.wants(Rewrite.GLOBAL_POOL) and not none.wants(Rewrite.GLOBAL_POOL)
    assert cuda.accumulates_fp32("Softmax") and none.accumulates_fp32("Softmax") is None
    assert none.describe() == "none (ONNX schemas only)"


def test_options_and_targets_accept_the_same_names(tmp_path: Path) -> None:
    for name in target_names():
        assert amp_convert.ConvertOptions(target=name).target == name
        assert build_target(name).name == name
    path = str(tmp_path / "table.json")
    with pytest.raises(OptionError, match="unknown target"):
        amp_convert.ConvertOptions(target=path)
    with pytest.raises(TargetError, match="unknown target"):
        load_target(path)
    with pytest.raises(TargetError, match="unknown target"):
        build_target(path)


def _string_constants(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield from (v.value for v in node.values if isinstance(v, ast.Constant))


def test_no_step_names_a_target() -> None:
    """Steps ask the Target for capabilities: no target name and no per-name lookup in passes/."""
    hyphenated = [n for n in target_names() if "-" in n]
    for path in sorted(PASSES.glob("*.py")):
        text = path.read_text()
        for name in hyphenated:  # in code, docstrings or comments
            assert name not in text, f"{path.name} names target {name}"
        for value in _string_constants(path):
            assert value not in target_names(), f"{path.name} has the string {value!r}"
        for lookup in ("fp32_accumulating", "load_target", "options.target"):
            assert lookup not in text, f"{path.name} uses {lookup}"


def test_one_registry_names_every_shipped_target() -> None:
    """registry.SHIPPED is the one table: the command line's names, the kernel tables, the
    accumulation tables and the execution providers (Olive, validation) all come from it."""
    from amp_convert.targets import SHIPPED, providers, target_for_provider
    from amp_convert.targets.accumulation import accumulation_rows

    assert tuple(SHIPPED) == target_names()[: len(SHIPPED)]
    for name, spec in SHIPPED.items():
        target = build_target(name)
        assert target.kernels.accept_all == (spec.kernel_file is None)
        assert bool(accumulation_rows(name)) == (spec.accumulation_file is not None)
        assert target.rewrites == spec.rewrites and target.held_sums == spec.held_sums
    assert providers() == {
        "CUDAExecutionProvider": "ort-cuda",
        "CPUExecutionProvider": "ort-cpu",
    }
    cuda = target_for_provider("CUDAExecutionProvider")
    assert cuda is build_target("ort-cuda") and cuda.holds_input_sum("ReduceMean", "ai.onnx")
    assert not build_target("ort-cpu").holds_input_sum("ReduceMean")
    assert target_for_provider("DmlExecutionProvider") is None


def test_a_shipped_table_lists_every_op_before_any_lookup() -> None:
    """op_types() is the --fp32-ops check's vocabulary: a table builds an op's entry at its first
    lookup, and op_types() once listed only the ops looked up so far, so
    `--fp32-ops SimplifiedLayerNormalization` was refused or not by what ran before it."""
    import json
    from importlib import resources

    from amp_convert.targets import SHIPPED
    from amp_convert.targets.kernel_table import _load_shipped

    for spec in SHIPPED.values():
        if spec.kernel_file is None:
            continue
        ref = resources.files("amp_convert.targets").joinpath(spec.kernel_file)
        with resources.as_file(ref) as path:
            data = json.loads(path.read_text())
            fresh = _load_shipped(path)
        listed = {op for ops in data["kernels"].values() for op in ops}
        assert "SimplifiedLayerNormalization" in listed
        assert fresh.op_types() == listed
        assert fresh.entry("SimplifiedLayerNormalization", "") is not None
        assert fresh.op_types() == listed  # a lookup changes nothing
