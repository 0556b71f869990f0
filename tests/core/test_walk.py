"""core.walk yields what onnx-ir's own walks yield, object for object, in the same order."""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import helper

from amp_convert.core import walk
from models.decoders import decoder_model_merged
from tests.graphs import if_branches_reading

F = onnx.TensorProto.FLOAT


def _nested() -> ir.Model:
    """A Loop whose body holds an If, then a second If at the top with an empty branch: nodes
    depth first, bodies in attribute order (onnx's helper sorts them by name), empty ones kept."""
    then, other = if_branches_reading("x")
    inner_if = helper.make_node(
        "If", ["c"], ["t"], name="inner_if", then_branch=then, else_branch=other
    )
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="id"), inner_if],
        "loop_body",
        [
            helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("t", F, [4]),
        ],
    )
    empty = helper.make_graph([], "empty", [], [helper.make_tensor_value_info("x", F, [4])])
    then2, _ = if_branches_reading("x")
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("Loop", ["n", "c"], ["scan_t"], name="loop", body=body),
            helper.make_node(
                "If", ["c"], ["y"], name="top_if", then_branch=then2, else_branch=empty
            ),
            helper.make_node("Neg", ["r"], ["z"], name="last"),
        ],
        "nested",
        [
            helper.make_tensor_value_info("x", F, [4]),
            helper.make_tensor_value_info("n", onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("z", F, [4])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ir.serde.deserialize_model(proto)


def test_graphs_and_nodes_equal_onnx_irs_on_nested_bodies() -> None:
    model = _nested()
    graphs = list(walk.graphs(model))
    assert graphs == list(model.graphs())
    assert [g.name for g in graphs] == ["nested", "loop_body", "else", "then", "empty", "then"]
    nodes = list(walk.all_nodes(model.graph))
    assert nodes == list(model.graph.all_nodes())
    assert [n.name for n in nodes][:5] == ["first", "loop", "id", "inner_if", "body_neg"]


def test_graphs_and_nodes_equal_onnx_irs_on_a_merged_decoder() -> None:
    model = ir.serde.deserialize_model(decoder_model_merged(layers=2, hidden=32, heads=2))
    assert list(walk.graphs(model)) == list(model.graphs())
    assert len(list(walk.graphs(model))) == 3
    assert list(walk.all_nodes(model.graph)) == list(model.graph.all_nodes())


def test_a_graph_without_bodies_is_one_graph_and_its_nodes() -> None:
    model = _nested()
    for node in [n for n in model.graph if n.op_type in ("Loop", "If")]:
        model.graph.remove(node)
    assert list(walk.graphs(model)) == [model.graph]
    assert [n.name for n in walk.all_nodes(model.graph)] == ["first", "last"]


def test_nodes_added_while_walking_are_walked_as_onnx_irs_are() -> None:
    """Callers edit the graph while they walk it: the walk follows the live node list."""
    seen = []
    model = _nested()
    for node in walk.all_nodes(model.graph):
        seen.append(node.name)
        if node.name == "first":
            model.graph.insert_after(node, ir.node("Abs", [node.outputs[0]], name="added"))
    assert seen[:2] == ["first", "added"]
