"""Unit tests of auto/localise.py: the per-value error statistics, the cheap ranking by introduced
error, and the Localiser's choice of which node to blame, on graphs of a few nodes built here and
candidate values emulated with NumPy (no ORT session)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from amp_convert.auto.graph import GraphFacts, NodeFacts, graph_facts
from amp_convert.auto.localise import (
    SHARE,
    Blame,
    Localiser,
    ValueStats,
    _round,
    introduced,
    relative_error,
)
from amp_convert.core.dtypes import FP16
from tests.graphs import cancellation_model

F16 = np.float16


# ---------------------------------------------------------------- ValueStats
def test_identical_values_have_no_error() -> None:
    ref = np.array([1.0, -2.0, 3.0], np.float32)
    assert relative_error(ref, ref.copy()) == 0.0


def test_error_is_the_larger_of_relative_l2_and_relative_max() -> None:
    ref = np.array([10.0, 0.0, 0.0, 0.0], np.float32)
    cand = np.array([10.0, 1.0, 0.0, 0.0], np.float32)
    # relative L2: 1/10; max error over max |ref|: 1/10 as well
    assert relative_error(ref, cand) == pytest.approx(0.1)
    ref = np.array([1.0, 1.0, 1.0, 1.0], np.float32)
    cand = np.array([1.0, 1.0, 1.0, 1.5], np.float32)
    # relative L2: 0.5 / 2 = 0.25, relative max: 0.5
    assert relative_error(ref, cand) == pytest.approx(0.5)


def test_new_nan_or_inf_is_infinite_error() -> None:
    ref = np.array([1.0, 2.0], np.float32)
    assert relative_error(ref, np.array([1.0, np.inf], np.float32)) == math.inf
    assert relative_error(ref, np.array([np.nan, 2.0], np.float32)) == math.inf


def test_non_finite_already_in_the_reference_is_not_new() -> None:
    ref = np.array([np.inf, 2.0, np.nan, 4.0], np.float32)
    cand = np.array([np.inf, 2.0, np.nan, 4.0], np.float32)
    s = ValueStats()
    s.add(ref, cand)
    assert s.new_nonfinite == 0 and s.error == 0.0
    assert s.ref_max == 4.0  # the peak of the finite reference values
    cand = np.array([np.inf, 3.0, 1.0, 4.0], np.float32)  # 2 -> 3 compared, NaN -> 1 not
    s = ValueStats()
    s.add(ref, cand)
    assert s.new_nonfinite == 0
    assert s.max_abs_diff == 1.0 and s.error == pytest.approx(0.25)


def test_a_shape_change_is_infinite_error() -> None:
    s = ValueStats()
    s.add(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert s.new_nonfinite == 6 and s.error == math.inf


def test_empty_values_and_missing_candidates_add_no_error() -> None:
    s = ValueStats()
    s.add(np.zeros((0,), np.float32), np.zeros((0,), np.float32))
    assert s == ValueStats()
    s.add(np.array([-5.0, 1.0], np.float32), None)  # reference only: its range is recorded
    assert s.ref_max == 5.0 and s.error == 0.0


def test_stats_accumulate_over_samples() -> None:
    s = ValueStats()
    s.add(np.array([1.0], np.float32), np.array([1.0], np.float32))
    s.add(np.array([4.0], np.float32), np.array([5.0], np.float32))
    assert s.ref_max == 4.0 and s.max_abs_diff == 1.0
    assert s.sumsq_ref == 17.0 and s.sumsq_diff == 1.0
    assert s.error == pytest.approx(max(math.sqrt(1 / 17), 1 / 4))


def test_round_only_touches_float32_arrays() -> None:
    x = np.array([1.0001, 70000.0], np.float32)
    got = _round(x, F16)
    assert got.dtype == np.float32 and got[0] == 1.0 and got[1] == np.inf
    ints = np.array([1, 2], np.int64)
    assert _round(ints, F16) is ints
    assert _round(3.5, F16) == 3.5


# ---------------------------------------------------------------- introduced
def _stats(**errors: float) -> dict[str, ValueStats]:
    """Stats whose `error` is the given number (inf: a new NaN/Inf)."""
    out = {}
    for name, e in errors.items():
        s = ValueStats(ref_max=1.0, sumsq_ref=1.0)
        if math.isinf(e):
            s.new_nonfinite = 1
        elif e:
            s.sumsq_diff, s.max_abs_diff = e * e, e
        out[name] = s
    return out


def _node(name: str, ins: Sequence[str], outs: Sequence[str], index: int = 0) -> NodeFacts:
    return NodeFacts(name, "Mul", index, list(ins), list(outs))


def test_introduced_is_output_error_minus_the_worst_input_error() -> None:
    stats = _stats(a=0.1, b=0.3, y=0.5)
    e_out, diff = introduced(_node("n", ["a", "b"], ["y"]), stats)
    assert e_out == pytest.approx(0.5) and diff == pytest.approx(0.2)


def test_introduced_is_never_negative() -> None:
    stats = _stats(a=0.4, y=0.1)
    assert introduced(_node("n", ["a"], ["y"]), stats) == pytest.approx((0.1, 0.0))


def test_introduced_without_measured_outputs_is_nothing() -> None:
    assert introduced(_node("n", ["a"], ["y"]), _stats(a=0.4)) == (0.0, 0.0)


def test_introduced_unmeasured_inputs_count_as_exact() -> None:
    assert introduced(_node("n", ["x"], ["y"]), _stats(y=0.25)) == pytest.approx((0.25, 0.25))


def test_a_new_inf_is_introduced_only_where_it_first_appears() -> None:
    stats = _stats(a=0.1, y=math.inf, z=math.inf)
    assert introduced(_node("first", ["a"], ["y"]), stats) == (math.inf, math.inf)
    assert introduced(_node("after", ["y"], ["z"]), stats) == (math.inf, 0.0)


# ---------------------------------------------------------------- Localiser on synthetic stats
def _chain_facts(n: int) -> GraphFacts:
    """x -> n0 -> v0 -> n1 -> v1 ... : a chain of `n` nodes."""
    nodes = [_node(f"n{i}", [f"v{i - 1}" if i else "x"], [f"v{i}"], i) for i in range(n)]
    return GraphFacts(
        nodes=nodes,
        producer={f"v{i}": i for i in range(n)},
        types={"x": TensorProto.FLOAT, **{f"v{i}": TensorProto.FLOAT for i in range(n)}},
        shapes={},
        graph_inputs=["x"],
        graph_outputs=[f"v{n - 1}"],
        initializers=set(),
        opsets={"": 17},
        ir_version=8,
    )


def _no_values(names: Sequence[str]) -> list[dict[str, np.ndarray]]:
    return [{}]


def _synthetic(
    facts: GraphFacts, stats: Mapping[str, ValueStats], low: set[str], per_round: int = 4
) -> Localiser:
    """A localiser without values: every judgement falls back to the cheap difference."""
    return Localiser(
        facts,
        stats,
        lambda name: name in low,
        FP16,
        _no_values,
        _no_values,
        lambda name: None,
        per_round=per_round,
    )


def _cumulative(*introduced_by_node: float) -> dict[str, ValueStats]:
    """Stats of a chain where node i adds `introduced_by_node[i]` to the error it reads."""
    total, errors = 0.0, {}
    for i, e in enumerate(introduced_by_node):
        total += e
        errors[f"v{i}"] = total
    return _stats(**errors)


def test_the_node_introducing_the_error_is_blamed_not_its_readers() -> None:
    facts = _chain_facts(3)
    loc = _synthetic(facts, _cumulative(0.0, 0.3, 0.0), {"n0", "n1", "n2"})
    blames = loc.blame(["v2"], exclude=set())
    assert [b.node for b in blames] == ["n1"]
    b = blames[0]
    assert b.how == "difference" and b.kind == "error"
    assert b.score == pytest.approx(0.3) and b.output_error == pytest.approx(0.3)
    assert b.input_error == pytest.approx(0.0)


def test_blames_are_ordered_by_score_and_cut_at_a_share_of_the_worst() -> None:
    facts = _chain_facts(5)
    stats = _cumulative(0.2, 0.45, 0.05, 0.5, 0.3)
    blames = _synthetic(facts, stats, {f"n{i}" for i in range(5)}).blame(["v4"], set())
    assert [b.node for b in blames] == ["n3", "n1", "n4"]  # n0's 0.2 < SHARE * 0.5
    assert all(b.score >= SHARE * blames[0].score for b in blames)
    scores = [b.score for b in blames]
    assert scores == sorted(scores, reverse=True)


def test_at_most_per_round_blames() -> None:
    facts = _chain_facts(5)
    stats = _cumulative(0.5, 0.5, 0.5, 0.5, 0.5)
    blames = _synthetic(facts, stats, {f"n{i}" for i in range(5)}, per_round=2).blame(["v4"], set())
    assert len(blames) == 2


def test_ties_keep_graph_order() -> None:
    facts = _chain_facts(4)
    stats = _cumulative(0.25, 0.25, 0.25, 0.25)
    blames = _synthetic(facts, stats, {f"n{i}" for i in range(4)}).blame(["v3"], set())
    assert [b.node for b in blames] == ["n0", "n1", "n2", "n3"]


def test_excluded_and_fp32_nodes_are_never_blamed() -> None:
    facts = _chain_facts(3)
    stats = _cumulative(0.4, 0.3, 0.2)
    loc = _synthetic(facts, stats, {"n0", "n1"})  # n2 computes in FP32
    assert [b.node for b in loc.blame(["v2"], exclude={"n0"})] == ["n1"]
    assert loc.blame(["v2"], exclude={"n0", "n1"}) == []


def test_only_ancestors_of_the_failing_outputs_are_suspects() -> None:
    facts = _chain_facts(3)
    stats = _cumulative(0.1, 0.0, 0.9)
    loc = _synthetic(facts, stats, {"n0", "n1", "n2"})
    assert [b.node for b in loc.blame(["v1"], set())] == ["n0"]
    assert loc.blame([], set()) == []
    assert loc.blame(["not_a_value"], set()) == []


def test_no_error_anywhere_blames_nothing() -> None:
    facts = _chain_facts(3)
    loc = _synthetic(facts, _cumulative(0.0, 0.0, 0.0), {"n0", "n1", "n2"})
    assert loc.blame(["v2"], set()) == []


def test_a_new_inf_blames_only_where_it_appears() -> None:
    facts = _chain_facts(4)
    stats = _stats(v0=0.9, v1=0.95, v2=math.inf, v3=math.inf)
    blames = _synthetic(facts, stats, {f"n{i}" for i in range(4)}).blame(["v3"], set())
    assert [(b.node, b.score) for b in blames] == [("n2", math.inf)]


# ---------------------------------------------------------------- bodies
def _with_body(body_nodes: list[str]) -> GraphFacts:
    facts = _chain_facts(2)
    facts.nodes[1].body_nodes = body_nodes
    return facts


def test_a_body_without_a_judge_is_blamed_whole_and_says_why() -> None:
    facts = _with_body(["inner"])
    loc = _synthetic(facts, _cumulative(0.0, 0.4), {"n0", "n1"})
    blames = loc.blame(["v1"], set())
    assert [b.node for b in blames] == ["n1"]
    assert loc.whole_bodies == {"n1": "body localisation not available"}


def test_a_body_judge_narrows_the_blame_to_a_body_node() -> None:
    facts = _with_body(["inner_a", "inner_b"])
    seen: list[set[str]] = []

    def judge(node: NodeFacts, exclude: set[str]) -> tuple[list[Blame], str | None]:
        seen.append(exclude)
        return [Blame("inner_b", 0.4, 0.4, 0.0, "isolated")], None

    loc = _synthetic(facts, _cumulative(0.0, 0.4), {"n0", "n1", "inner_b"})
    loc.body_judge = judge
    blames = loc.blame(["v1"], exclude={"elsewhere"})
    assert [b.node for b in blames] == ["inner_b"]
    assert seen == [{"elsewhere"}] and loc.whole_bodies == {}


def test_a_body_judge_that_cannot_narrow_falls_back_to_the_whole_node() -> None:
    facts = _with_body(["inner"])
    loc = _synthetic(facts, _cumulative(0.0, 0.4), {"n0", "n1"})
    loc.body_judge = lambda node, exclude: ([], "Loop trip count unknown")
    assert [b.node for b in loc.blame(["v1"], set())] == ["n1"]
    assert loc.whole_bodies == {"n1": "Loop trip count unknown"}


# ---------------------------------------------------------------- real values, onnx.reference


def _values(model: onnx.ModelProto, samples: list[np.ndarray]) -> tuple[list[dict], list[dict]]:
    """Reference (FP32) and candidate (scale and relu emulated in FP16) values per sample."""
    k = np.float32(1.001)
    refs, cands = [], []
    for x in samples:
        m = x * k
        refs.append({"x": x, "m": m, "d": x - m, "r": np.maximum(x, 0)})
        mc = _round(_round(x, F16) * _round(np.array([k]), F16), F16)
        cands.append({"x": x, "m": mc, "d": x - mc, "r": np.maximum(_round(x, F16), 0)})
    return refs, cands


def _real(
    low: set[str], with_protos: bool = True
) -> tuple[Localiser, dict[str, ValueStats], GraphFacts]:
    model = cancellation_model()
    rng = np.random.default_rng(0)
    samples = [rng.uniform(1, 100, 16).astype(np.float32) for _ in range(2)]
    facts = graph_facts(model, {"x": samples[0]})
    refs, cands = _values(model, samples)
    stats: dict[str, ValueStats] = {}
    for ref, cand in zip(refs, cands, strict=True):
        for name in ("m", "d", "r"):
            stats.setdefault(name, ValueStats()).add(ref[name], cand[name])

    def pick(table: list[dict]) -> Callable[[Sequence[str]], list[dict[str, np.ndarray]]]:
        return lambda names: [{n: t[n] for n in names if n in t} for t in table]

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    loc = Localiser(
        facts,
        stats,
        lambda name: name in low,
        FP16,
        pick(refs),
        pick(cands),
        inits.get,
        node_protos={n.name: n for n in model.graph.node} if with_protos else {},
    )
    return loc, stats, facts


def test_the_cancellation_is_blamed_on_the_low_node_that_rounded() -> None:
    loc, stats, _ = _real({"scale", "relu"})
    assert stats["d"].error > 100 * stats["m"].error  # the FP32 Sub amplified it
    blames = loc.blame(["d"], set())
    assert [b.node for b in blames] == ["scale"]
    b = blames[0]
    assert b.how == "via cancel"
    assert b.score == pytest.approx(stats["d"].error, rel=1e-3)  # the Sub re-run on m alone


def test_a_low_node_is_judged_in_isolation_on_reference_inputs() -> None:
    """With the Sub low too, each low node is scored on rounded reference inputs: the Mul's
    score is one rounding, the Sub's the cancellation it does itself, so the Sub is blamed."""
    loc, _stats, _ = _real({"scale", "cancel"})
    judged = loc._judge(loc.facts.node("scale"), 0.0, 0.0, 0.0)
    assert [(b.node, b.how) for b in judged] == [("scale", "isolated")]
    assert 0 < judged[0].score < 1e-3  # one FP16 rounding of x * k
    sub = loc._judge(loc.facts.node("cancel"), 0.0, 0.0, 0.0)[0]
    assert sub.how == "isolated" and sub.score > 0.1  # a low Sub of rounded inputs cancels
    blames = loc.blame(["d"], set())
    assert [(b.node, b.how) for b in blames] == [("cancel", "isolated")]


def test_without_a_node_proto_the_difference_is_the_evidence() -> None:
    loc, _, _ = _real({"scale", "relu"}, with_protos=False)
    judged = loc._judge(loc.facts.node("scale"), 0.01, 0.01, 0.0)
    assert [(b.node, b.how, b.score) for b in judged] == [("scale", "difference", 0.01)]
    # and an FP32 node whose inputs cannot be re-run blames by the worst input's error
    via = loc._judge(loc.facts.node("cancel"), 1.0, 1.0, 0.0)
    assert [(b.node, b.how) for b in via] == [("scale", "via cancel")]


def test_a_low_node_owns_the_rounding_of_the_graph_input_it_reads() -> None:
    loc, stats, _ = _real({"scale", "relu"})
    blames = loc.blame(["r"], set())
    assert stats["r"].error > 0  # the FP16 input rounding shows at r
    assert [(b.node, b.how) for b in blames] == [("relu", "isolated")]
    # the worst sample's error (stats pool the samples)
    assert blames[0].score == pytest.approx(stats["r"].error, rel=0.05)
