"""Which nodes to pin after a failing candidate: the localiser wired to the sessions and the map.

A node's precision is read from the converter's value map (a value, not a report string). A
BatchNormalization folded into its Conv has no precision of its own: it runs as its ``into``
node does, and pinning it means pinning that node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from amp_convert.auto.bodies import BodyJudge
from amp_convert.auto.graph import GraphFacts, NodeFacts
from amp_convert.auto.localise import Blame, Localiser, ValueStats
from amp_convert.auto.report import PinnedNode
from amp_convert.auto.sessions import Sample, Sessions
from amp_convert.core.dtypes import LowType
from amp_convert.core.precision import Precision
from amp_convert.reports.value_map import Fate, ValueMap


def runs_as(value_map: ValueMap, node: str) -> str:
    """The node of the result that does ``node``'s work (itself unless folded or replaced)."""
    fate = value_map.nodes.get(node)
    if fate is not None and fate.fate in (Fate.FOLDED, Fate.REPLACED) and fate.into:
        return fate.into
    return node


def is_low(value_map: ValueMap, facts: GraphFacts, node: str) -> bool:
    """Whether ``node`` (or a node of its bodies) computes in low precision in the candidate."""
    if value_map.precision(runs_as(value_map, node)) == Precision.LOW:
        return True
    return any(value_map.precision(b) == Precision.LOW for b in facts.body_of(node))


def localise(
    sessions: Sessions,
    facts: GraphFacts,
    work: ir.Model,
    value_map: ValueMap,
    stats: Mapping[str, ValueStats],
    cand_feeds: Sequence[Sample],
    failing: Sequence[str],
    pinned: Mapping[str, PinnedNode],
    *,
    low_type: LowType,
    margin: float,
) -> tuple[list[Blame], dict[str, str]]:
    """The nodes that introduce the error of ``failing`` outputs, and the bodies pinned whole."""

    def low(name: str) -> bool:
        return is_low(value_map, facts, name)

    def initializer(name: str) -> np.ndarray | None:
        value = work.graph.initializers.get(name)
        if value is None or value.const_value is None:
            return None
        return np.asarray(value.const_value.numpy())

    protos = {n.name: n for n in sessions.ref_proto.graph.node}
    judge = BodyJudge(
        facts.opsets, facts.ir_version, low_type, margin, low, weights=facts.initializers
    )

    def in_body(node: NodeFacts, exclude: set[str]) -> tuple[list[Blame], str | None]:
        envs = sessions.ref_values(node.inputs)
        for env in envs:
            for v in node.inputs:
                if v not in env and v in facts.initializers:
                    arr = initializer(v)
                    if arr is not None:
                        env[v] = arr
        verdict = judge.judge(protos[node.name], envs, exclude)
        return verdict.blames, verdict.fallback

    localiser = Localiser(
        facts,
        stats,
        low,
        low_type,
        sessions.ref_values,
        lambda names: sessions.cand_values(cand_feeds, names),
        initializer,
        node_protos=protos,
        body_judge=in_body,
    )
    blames = localiser.blame(failing, exclude=set(pinned))
    return blames, localiser.whole_bodies


def pin_entry(facts: GraphFacts, b: Blame, round_no: int, whole: str | None) -> PinnedNode:
    """The report entry of a node pinned after candidate ``round_no``."""
    inside = facts.inner[b.node].parent if b.node in facts.inner else ""
    if b.kind == "range":
        evidence = b.how
    elif inside:
        evidence = f"introduces error {b.score:.3g} ({b.how})"
    else:
        evidence = (
            f"introduces error {b.score:.3g} ({b.how}; output error {b.output_error:.3g}, "
            f"inputs {b.input_error:.3g})"
        )
    if whole is not None:
        evidence += f"; whole body pinned: {whole}"
    return PinnedNode(
        b.node,
        facts.op_type(b.node),
        round_no,
        b.kind,
        evidence,
        max_abs=b.max_abs,
        introduced_error=b.score,
        body_nodes=len(facts.body_of(b.node)),
        inside=inside,
    )


def pin_set(facts: GraphFacts, value_map: ValueMap | None, pinned: Sequence[str]) -> frozenset[str]:
    """The node names handed to the converter: each pin, its bodies, and for a folded node the
    node it was folded into."""
    names: set[str] = set()
    for name in pinned:
        names.add(name)
        names.update(facts.body_of(name))
        if value_map is not None:
            names.add(runs_as(value_map, name))
    return frozenset(names)
