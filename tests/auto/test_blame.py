"""Unit tests of auto/blame.py: a node's precision read from the value map (folded nodes run as
the node they were folded into), the localiser wired to the sessions, the report entry of a pin,
and the names handed back to the converter."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from amp_convert.auto.blame import is_low, localise, pin_entry, pin_set, runs_as
from amp_convert.auto.graph import GraphFacts, InnerNode, NodeFacts, graph_facts
from amp_convert.auto.localise import Blame, ValueStats
from amp_convert.auto.report import PinnedNode
from amp_convert.core.dtypes import FP16
from amp_convert.core.precision import Precision
from amp_convert.reports.value_map import Fate, NodeFate, ValueMap
from tests.graphs import cancellation_model

LOW, FP32 = Precision.LOW, Precision.FP32


def _map(*fates: NodeFate) -> ValueMap:
    return ValueMap(nodes={f.name: f for f in fates})


def _kept(name: str, precision: Precision | None, op: str = "Mul") -> NodeFate:
    return NodeFate(name, op, Fate.KEPT, precision)


def _facts(nodes: list[NodeFacts], inner: dict[str, InnerNode] | None = None) -> GraphFacts:
    producer = {v: n.index for n in nodes for v in n.outputs}
    return GraphFacts(
        nodes=nodes,
        producer=producer,
        types=dict.fromkeys(producer, TensorProto.FLOAT),
        shapes={},
        graph_inputs=["x"],
        graph_outputs=[nodes[-1].outputs[0]],
        initializers=set(),
        opsets={"": 17},
        ir_version=8,
        inner=inner or {},
    )


# ---------------------------------------------------------------- runs_as / is_low
def test_a_kept_node_runs_as_itself() -> None:
    vm = _map(_kept("a", LOW))
    assert runs_as(vm, "a") == "a"
    assert runs_as(vm, "unknown") == "unknown"


@pytest.mark.parametrize("fate", [Fate.FOLDED, Fate.REPLACED])
def test_a_folded_or_replaced_node_runs_as_its_into_node(fate: Fate) -> None:
    vm = _map(NodeFate("bn", "BatchNormalization", fate, into="conv"), _kept("conv", LOW, "Conv"))
    assert runs_as(vm, "bn") == "conv"


def test_a_removed_node_or_one_without_into_runs_as_itself() -> None:
    vm = _map(
        NodeFate("gone", "Identity", Fate.REMOVED, into="other"),
        NodeFate("bn", "BatchNormalization", Fate.FOLDED),
    )
    assert runs_as(vm, "gone") == "gone"
    assert runs_as(vm, "bn") == "bn"


def test_is_low_reads_the_value_map() -> None:
    facts = _facts(
        [
            NodeFacts("a", "Mul", 0, ["x"], ["va"]),
            NodeFacts("b", "Add", 1, ["va"], ["vb"]),
            NodeFacts("c", "Shape", 2, ["vb"], ["vc"]),
        ]
    )
    vm = _map(_kept("a", LOW), _kept("b", FP32, "Add"), _kept("c", None, "Shape"))
    assert is_low(vm, facts, "a")
    assert not is_low(vm, facts, "b")
    assert not is_low(vm, facts, "c")  # no float path
    assert not is_low(vm, facts, "not_in_the_map")


def test_a_folded_node_is_low_when_its_into_node_is() -> None:
    facts = _facts(
        [NodeFacts("conv", "Conv", 0, ["x"], ["y"]), NodeFacts("bn", "B", 1, ["y"], ["z"])]
    )
    folded = NodeFate("bn", "BatchNormalization", Fate.FOLDED, into="conv")
    assert is_low(_map(folded, _kept("conv", LOW, "Conv")), facts, "bn")
    assert not is_low(_map(folded, _kept("conv", FP32, "Conv")), facts, "bn")


def test_a_control_flow_node_is_low_when_a_body_node_is() -> None:
    inner = {
        "body_mul": InnerNode("body_mul", "Mul", "loop", 0),
        "body_add": InnerNode("body_add", "Add", "loop", 1),
    }
    facts = _facts([NodeFacts("loop", "Loop", 0, ["x"], ["y"], ["body_mul", "body_add"])], inner)
    fp32_body = _map(_kept("loop", None, "Loop"), _kept("body_mul", FP32), _kept("body_add", FP32))
    assert not is_low(fp32_body, facts, "loop")
    one_low = _map(_kept("loop", None, "Loop"), _kept("body_mul", FP32), _kept("body_add", LOW))
    assert is_low(one_low, facts, "loop")


# ---------------------------------------------------------------- pin_entry
def _blame(node: str, **kw: object) -> Blame:
    base: dict = {"score": 0.25, "output_error": 0.3, "input_error": 0.05, "how": "isolated"}
    base.update(kw)
    return Blame(node, **base)


def test_pin_entry_of_a_main_graph_node_gives_its_errors() -> None:
    facts = _facts([NodeFacts("mm", "MatMul", 0, ["x"], ["y"])])
    entry = pin_entry(facts, _blame("mm"), 2, None)
    assert entry == PinnedNode(
        "mm",
        "MatMul",
        2,
        "error",
        "introduces error 0.25 (isolated; output error 0.3, inputs 0.05)",
        max_abs=None,
        introduced_error=0.25,
        body_nodes=0,
        inside="",
    )


def test_pin_entry_of_a_range_blame_keeps_its_evidence() -> None:
    facts = _facts([NodeFacts("mm", "MatMul", 0, ["x"], ["y"])])
    b = _blame("mm", kind="range", how="|y| reaches 9e+04 > 65504", max_abs=9e4, score=math.inf)
    entry = pin_entry(facts, b, 1, None)
    assert entry.reason == "range" and entry.evidence == "|y| reaches 9e+04 > 65504"
    assert entry.max_abs == 9e4 and entry.introduced_error == math.inf


def test_pin_entry_of_a_body_node_names_its_parent() -> None:
    inner = {"inner_mul": InnerNode("inner_mul", "Mul", "loop", 0)}
    facts = _facts([NodeFacts("loop", "Loop", 0, ["x"], ["y"], ["inner_mul"])], inner)
    entry = pin_entry(facts, _blame("inner_mul"), 3, None)
    assert entry.inside == "loop" and entry.op_type == "Mul"
    assert entry.evidence == "introduces error 0.25 (isolated)"


def test_pin_entry_of_a_whole_body_counts_its_nodes_and_says_why() -> None:
    inner = {n: InnerNode(n, "Mul", "loop", i) for i, n in enumerate(["b0", "b1", "b2"])}
    facts = _facts([NodeFacts("loop", "Loop", 0, ["x"], ["y"], ["b0", "b1", "b2"])], inner)
    entry = pin_entry(facts, _blame("loop", how="difference"), 1, "no body node to blame")
    assert entry.body_nodes == 3 and entry.inside == "" and entry.op_type == "Loop"
    assert entry.evidence.endswith("; whole body pinned: no body node to blame")
    assert entry.evidence.startswith("introduces error 0.25 (difference;")


# ---------------------------------------------------------------- pin_set
def test_pin_set_adds_bodies_and_folded_targets() -> None:
    inner = {n: InnerNode(n, "Mul", "loop", i) for i, n in enumerate(["b0", "b1"])}
    facts = _facts(
        [
            NodeFacts("conv", "Conv", 0, ["x"], ["c"]),
            NodeFacts("bn", "BatchNormalization", 1, ["c"], ["n"]),
            NodeFacts("loop", "Loop", 2, ["n"], ["y"], ["b0", "b1"]),
        ],
        inner,
    )
    vm = _map(
        _kept("conv", LOW, "Conv"),
        NodeFate("bn", "BatchNormalization", Fate.FOLDED, into="conv"),
        _kept("loop", None, "Loop"),
    )
    assert pin_set(facts, vm, ["bn"]) == {"bn", "conv"}
    assert pin_set(facts, vm, ["loop"]) == {"loop", "b0", "b1"}
    assert pin_set(facts, None, ["bn", "loop"]) == {"bn", "loop", "b0", "b1"}
    assert pin_set(facts, vm, []) == frozenset()


# ---------------------------------------------------------------- localise, with stub sessions


def _f16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float32)


class _StubSessions:
    """What localise reads of Sessions: the reference proto and per-sample values by name."""

    def __init__(self, proto: onnx.ModelProto, samples: list[np.ndarray]) -> None:
        self.ref_proto = proto
        k = np.float32(1.001)
        self.refs = [{"x": x, "m": x * k, "d": x - x * k, "r": np.maximum(x, 0)} for x in samples]
        self.cands = []
        for x in samples:
            m = _f16(_f16(x) * _f16(np.array([k])))
            self.cands.append({"x": x, "m": m, "d": x - m, "r": np.maximum(_f16(x), 0)})
        self.cand_calls: list[tuple[int, list[str]]] = []

    def ref_values(self, names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        return [{n: r[n] for n in names if n in r} for r in self.refs]

    def cand_values(
        self, cand_feeds: Sequence[dict[str, np.ndarray]], names: Sequence[str]
    ) -> list[dict[str, np.ndarray]]:
        self.cand_calls.append((len(cand_feeds), list(names)))
        return [{n: c[n] for n in names if n in c} for c in self.cands]

    def stats(self) -> dict[str, ValueStats]:
        out: dict[str, ValueStats] = {}
        for ref, cand in zip(self.refs, self.cands, strict=True):
            for name in ("m", "d", "r"):
                out.setdefault(name, ValueStats()).add(ref[name], cand[name])
        return out


def _localise(vm: ValueMap, failing: list[str], pinned: Sequence[str] = ()) -> tuple:
    proto = cancellation_model()
    rng = np.random.default_rng(1)
    samples = [rng.uniform(1, 100, 16).astype(np.float32) for _ in range(2)]
    sessions = _StubSessions(proto, samples)
    facts = graph_facts(proto, {"x": samples[0]})
    feeds = [{"x": x} for x in samples]
    pins = {name: PinnedNode(name, "Mul", 1, "error", "earlier") for name in pinned}
    blames, whole = localise(
        sessions,  # type: ignore[arg-type]
        facts,
        ir.from_proto(proto),
        vm,
        sessions.stats(),
        feeds,
        failing,
        pins,
        low_type=FP16,
        margin=2.0,
    )
    return blames, whole, sessions


def test_localise_blames_the_low_producer_of_a_cancelling_fp32_node() -> None:
    vm = _map(_kept("scale", LOW), _kept("cancel", FP32, "Sub"), _kept("relu", LOW, "Relu"))
    blames, whole, sessions = _localise(vm, ["d"])
    assert [(b.node, b.how) for b in blames] == [("scale", "via cancel")]
    assert blames[0].score > 0.1 and whole == {}
    assert sessions.cand_calls == [(2, ["m"])]  # the candidate's m, for each of the 2 samples


def test_localise_reads_the_weight_from_the_working_model() -> None:
    """The Mul's isolated run needs k, which only the working model holds (not the feeds)."""
    vm = _map(_kept("scale", LOW), _kept("cancel", LOW, "Sub"), _kept("relu", LOW, "Relu"))
    blames, _, _ = _localise(vm, ["m"])
    assert [(b.node, b.how) for b in blames] == [("scale", "isolated")]
    assert 0 < blames[0].score < 1e-3


def test_localise_skips_pinned_nodes() -> None:
    vm = _map(_kept("scale", LOW), _kept("cancel", FP32, "Sub"), _kept("relu", LOW, "Relu"))
    blames, _, _ = _localise(vm, ["d"], pinned=["scale"])
    assert blames == []


def test_localise_blames_a_folded_node_by_its_into_node_precision() -> None:
    vm = _map(
        NodeFate("scale", "Mul", Fate.FOLDED, into="fused"),
        _kept("fused", LOW, "FusedMul"),
        _kept("cancel", FP32, "Sub"),
        _kept("relu", FP32, "Relu"),
    )
    blames, _, _ = _localise(vm, ["d", "r"])
    assert [b.node for b in blames] == ["scale"]


def test_localise_blames_nothing_when_everything_is_fp32() -> None:
    vm = _map(_kept("scale", FP32), _kept("cancel", FP32, "Sub"), _kept("relu", FP32, "Relu"))
    blames, whole, _ = _localise(vm, ["d", "r"])
    assert blames == [] and whole == {}


def _if_model() -> onnx.ModelProto:
    """y = If(c) then x * w (w a main-graph weight the branch captures) else Neg(x)."""
    w = numpy_helper.from_array(np.full([16], 1.001, np.float32), "w")
    out = helper.make_tensor_value_info("t", TensorProto.FLOAT, [16])
    then = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t"], name="body_mul")], "then", [], [out]
    )
    out_e = helper.make_tensor_value_info("e", TensorProto.FLOAT, [16])
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"], name="body_neg")], "else", [], [out_e]
    )
    node = helper.make_node("If", ["c"], ["y"], name="iff", then_branch=then, else_branch=other)
    graph = helper.make_graph(
        [node],
        "with_if",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [16]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


class _IfSessions:
    def __init__(self, proto: onnx.ModelProto, xs: list[np.ndarray]) -> None:
        self.ref_proto = proto
        c = np.array(True)
        w = np.float32(1.001)
        self.refs = [{"x": x, "c": c, "y": x * w} for x in xs]
        self.cands = [{"x": x, "c": c, "y": _f16(_f16(x) * _f16(np.array([w])))} for x in xs]

    def ref_values(self, names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        return [{n: r[n] for n in names if n in r} for r in self.refs]

    def cand_values(
        self, cand_feeds: Sequence[dict[str, np.ndarray]], names: Sequence[str]
    ) -> list[dict[str, np.ndarray]]:
        return [{n: c[n] for n in names if n in c} for c in self.cands]


def test_localise_narrows_a_control_flow_blame_to_its_low_body_node() -> None:
    """The branch reads the main-graph weight w, which the reference values do not carry:
    localise fills it in from the working model so the body node can be judged alone."""
    proto = _if_model()
    rng = np.random.default_rng(2)
    xs = [rng.uniform(1, 100, 16).astype(np.float32) for _ in range(2)]
    sessions = _IfSessions(proto, xs)
    facts = graph_facts(proto, {"x": xs[0], "c": np.array(True)})
    assert sorted(facts.node("iff").inputs) == ["c", "w", "x"]  # w captured by the branch
    stats: dict[str, ValueStats] = {}
    for ref, cand in zip(sessions.refs, sessions.cands, strict=True):
        stats.setdefault("y", ValueStats()).add(ref["y"], cand["y"])
    vm = _map(_kept("iff", None, "If"), _kept("body_mul", LOW), _kept("body_neg", LOW, "Neg"))
    blames, whole = localise(
        sessions,  # type: ignore[arg-type]
        facts,
        ir.from_proto(proto),
        vm,
        stats,
        [{"x": x, "c": np.array(True)} for x in xs],
        ["y"],
        {},
        low_type=FP16,
        margin=2.0,
    )
    assert [b.node for b in blames] == ["body_mul"] and whole == {}
    entry = pin_entry(facts, blames[0], 1, None)
    assert entry.inside == "iff" and entry.op_type == "Mul"
