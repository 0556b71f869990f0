"""Error localisation: which nodes *introduce* the error the candidate's outputs show.

Per value, the candidate (emulated) is compared with the FP32 reference: relative L2 error, max
error relative to the value's range, and new NaN/Inf. A node's output error minus the largest
error its inputs already carry ranks the suspects cheaply. For the top suspects the evidence is
then made exact without any ORT session, by running the node alone (onnx.reference) on the
*reference* inputs:

* a low-precision node: its inputs rounded to the low type, computed in FP32, its outputs rounded:
  the error of that isolated node is the error it introduces (squaring a noisy value doubles its
  relative error, but the square itself is not to blame);
* an FP32 node whose output error is far above its inputs' (cancellation: ``x - mean`` where the
  mean was rounded): each input in turn is taken from the candidate, the others from the
  reference; the producer of the input that hurts most is blamed (walking back through FP32
  producers to the first low one).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from amp_convert.auto.graph import GraphFacts, NodeFacts
from amp_convert.core import domains
from amp_convert.core.dtypes import LowType

TINY = 1e-30
#: suspects whose isolated error is measured per round (ranked by the cheap difference first)
SUSPECTS = 24
#: a suspect is pinned when its introduced error is at least this share of the worst one's
SHARE = 0.5


@dataclass
class ValueStats:
    """Candidate vs reference for one value, accumulated over samples."""

    ref_max: float = 0.0
    sumsq_diff: float = 0.0
    sumsq_ref: float = 0.0
    max_abs_diff: float = 0.0
    new_nonfinite: int = 0

    def add(self, ref: np.ndarray, cand: np.ndarray | None) -> None:
        r = np.asarray(ref, dtype=np.float32).ravel()
        if not r.size:
            return
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is the NaN we test for
            r_ok = bool(np.isfinite(r.max() - r.min()))  # all finite, without a mask
        fin = None if r_ok else np.isfinite(r)
        peak = np.abs(r if r_ok else r[fin])
        if peak.size:
            self.ref_max = max(self.ref_max, float(peak.max()))
        if cand is None:
            return
        c = np.asarray(cand, dtype=np.float32).ravel()
        if np.shape(cand) != np.shape(ref):
            self.new_nonfinite += max(1, int(r.size))  # a shape change is as bad as it gets
            return
        with np.errstate(invalid="ignore", over="ignore"):
            c_ok = bool(np.isfinite(c.max() - c.min()))
        if r_ok and c_ok:
            d, rr = (c - r).astype(np.float64), r.astype(np.float64)
        else:
            fin = np.isfinite(r) if fin is None else fin
            cfin = np.isfinite(c)
            self.new_nonfinite += int(np.count_nonzero(fin & ~cfin))
            both = fin & cfin
            d, rr = (c[both] - r[both]).astype(np.float64), r[both].astype(np.float64)
        if d.size:
            self.sumsq_diff += float(np.dot(d, d))
            self.sumsq_ref += float(np.dot(rr, rr))
            self.max_abs_diff = max(self.max_abs_diff, float(np.abs(d).max()))

    @property
    def error(self) -> float:
        """max(relative L2 error, max error / max |ref|); inf when new NaN/Inf appeared."""
        if self.new_nonfinite:
            return math.inf
        rel = math.sqrt(self.sumsq_diff / max(self.sumsq_ref, TINY))
        return max(rel, self.max_abs_diff / max(self.ref_max, TINY)) if self.sumsq_diff else 0.0


def relative_error(ref: np.ndarray, cand: np.ndarray) -> float:
    s = ValueStats()
    s.add(ref, cand)
    return s.error


def introduced(node: NodeFacts, stats: Mapping[str, ValueStats]) -> tuple[float, float]:
    """(output error, output error minus the worst input error) of one node."""
    outs = [stats[v].error for v in node.outputs if v in stats]
    if not outs:
        return 0.0, 0.0
    e_out = max(outs)
    e_in = max((stats[v].error for v in node.inputs if v in stats), default=0.0)
    if math.isinf(e_out):
        return e_out, (0.0 if math.isinf(e_in) else math.inf)
    return e_out, max(0.0, e_out - e_in)


@dataclass
class Blame:
    """A node to pin and why."""

    node: str
    score: float
    output_error: float
    input_error: float
    how: str  # "isolated", "difference", "via <node>"
    kind: str = "error"  # "range" for a body node whose values exceed the low type's range
    max_abs: float | None = None


@dataclass
class Localiser:
    """Ranks the nodes of one candidate by the error they introduce."""

    facts: GraphFacts
    stats: Mapping[str, ValueStats]
    is_low: Callable[[str], bool]
    low_type: LowType
    #: name -> per-sample arrays, from the reference and the candidate (loaded on demand)
    ref_values: Callable[[Sequence[str]], list[dict[str, np.ndarray]]]
    cand_values: Callable[[Sequence[str]], list[dict[str, np.ndarray]]]
    initializer: Callable[[str], np.ndarray | None]
    per_round: int = 4
    notes: list[str] = field(default_factory=list)

    #: node → blames inside its bodies, or the reason its whole body must be pinned
    body_judge: Callable[[NodeFacts, set[str]], tuple[list[Blame], str | None]] | None = None
    #: control-flow nodes blamed whole, with why their bodies could not be narrowed
    whole_bodies: dict[str, str] = field(default_factory=dict)

    def blame(self, failing_outputs: Sequence[str], exclude: set[str]) -> list[Blame]:
        """The few nodes to pin next (none when nothing low can be blamed)."""
        self._exclude = exclude
        relevant = self.facts.ancestors(failing_outputs)
        ranked: list[tuple[float, float, float, NodeFacts]] = []
        for node in self.facts.nodes:
            if node.name not in relevant:
                continue
            e_out, diff = introduced(node, self.stats)
            if diff > 0:
                e_in = e_out - diff if math.isfinite(diff) else 0.0
                ranked.append((diff, e_out, e_in, node))
        ranked.sort(key=lambda r: -r[0])
        suspects = [r for r in ranked if math.isinf(r[0])] or ranked[:SUSPECTS]
        blames: dict[str, Blame] = {}
        for diff, e_out, e_in, node in suspects:
            for b in self._judge(node, diff, e_out, e_in):
                if b.node in exclude or not self.is_low(b.node):
                    continue
                if b.node not in blames or b.score > blames[b.node].score:
                    blames[b.node] = b
        return self._select(list(blames.values()))

    def _select(self, blames: list[Blame]) -> list[Blame]:
        blames = [b for b in blames if b.score > 0]
        if not blames:
            return []
        infinite = [b for b in blames if math.isinf(b.score)]
        if infinite:
            return infinite
        blames.sort(key=lambda b: -b.score)
        best = blames[0].score
        return [b for b in blames if b.score >= SHARE * best][: self.per_round]

    def _judge(self, node: NodeFacts, diff: float, e_out: float, e_in: float) -> list[Blame]:
        if self.is_low(node.name):
            if node.body_nodes:
                return self._in_body(node, Blame(node.name, diff, e_out, e_in, "difference"))
            isolated = self._isolated(node)
            if isolated is None:
                return [Blame(node.name, diff, e_out, e_in, "difference")]
            return [Blame(node.name, isolated, e_out, e_in, "isolated")]
        # an FP32 node amplified an input error: blame where that input was rounded
        culprit = self._worst_input(node)
        seen = {node.name}
        while culprit is not None:
            value, score = culprit
            producer = self.facts.producer.get(value)
            if producer is None:
                return []
            src = self.facts.nodes[producer]
            if src.name in seen:
                return []
            seen.add(src.name)
            if self.is_low(src.name):
                blame = Blame(src.name, score, e_out, e_in, f"via {node.name}")
                return self._in_body(src, blame) if src.body_nodes else [blame]
            culprit = self._worst_input(src, score)
        return []

    def _in_body(self, node: NodeFacts, whole: Blame) -> list[Blame]:
        """Blames for the body nodes of ``node`` when they can be narrowed, else ``whole``."""
        if self.body_judge is None:
            self.whole_bodies[node.name] = "body localisation not available"
            return [whole]
        blames, why = self.body_judge(node, getattr(self, "_exclude", set()))
        if blames:
            return blames
        self.whole_bodies[node.name] = why or "no body node to blame"
        return [whole]

    def _worst_input(self, node: NodeFacts, score: float | None = None) -> tuple[str, float] | None:
        """The float input whose candidate value hurts ``node``'s output most, with that error."""
        ins = [v for v in node.inputs if v in self.stats and self.stats[v].error > 0]
        if not ins:
            return None
        if not node.body_nodes:
            scores = self._sensitivities(node, ins)
            if scores:
                best = max(scores, key=lambda v: scores[v])
                return best, scores[best] if score is None else score
        best = max(ins, key=lambda v: self.stats[v].error)
        return best, self.stats[best].error if score is None else score

    # -- isolated evaluation of one node on reference inputs (no ORT session) -----------------
    def _isolated(self, node: NodeFacts) -> float | None:
        names = [v for v in node.inputs if v not in self.facts.initializers]
        refs = self.ref_values([*names, *node.outputs])
        worst = 0.0
        low = self.low_type.numpy
        for ref in refs:
            feeds = self._feeds(node, ref)
            if feeds is None:
                return None
            feeds = {k: _round(v, low) for k, v in feeds.items()}
            outs = self._run(node, feeds)
            if outs is None:
                return None
            for name, got in outs.items():
                if name in ref and self.facts.types.get(name) == onnx.TensorProto.FLOAT:
                    worst = max(worst, relative_error(ref[name], _round(got, low)))
        return worst

    def _sensitivities(self, node: NodeFacts, inputs: Sequence[str]) -> dict[str, float]:
        refs = self.ref_values([*node.inputs, *node.outputs])
        cands = self.cand_values(inputs)
        scores: dict[str, float] = {}
        for ref, cand in zip(refs, cands, strict=True):
            base = self._feeds(node, ref)
            if base is None:
                return {}
            for v in inputs:
                if v not in cand:
                    continue
                outs = self._run(node, {**base, v: cand[v]})
                if outs is None:
                    return {}
                err = max((relative_error(ref[o], outs[o]) for o in outs if o in ref), default=0.0)
                scores[v] = max(scores.get(v, 0.0), err)
        return scores

    def _feeds(self, node: NodeFacts, ref: Mapping[str, np.ndarray]) -> dict | None:
        feeds: dict[str, np.ndarray] = {}
        for v in node.inputs:
            if v in ref:
                feeds[v] = ref[v]
            else:
                arr = self.initializer(v)
                if arr is None:
                    return None
                feeds[v] = arr
        return feeds

    def _run(self, node: NodeFacts, feeds: Mapping[str, np.ndarray]) -> dict | None:
        proto = self._node_proto(node)
        if proto is None:
            return None
        try:
            from onnx.reference import ReferenceEvaluator

            graph = helper.make_graph(
                [proto],
                "isolated",
                [helper.make_tensor_value_info(k, _elem(v), None) for k, v in feeds.items()],
                [helper.make_value_info(o, onnx.TypeProto()) for o in node.outputs],
            )
            opsets = [helper.make_opsetid(d, v) for d, v in self.facts.opsets.items()]
            model = helper.make_model(graph, opset_imports=opsets)
            model.ir_version = self.facts.ir_version
            with np.errstate(all="ignore"):
                got = ReferenceEvaluator(model).run(None, dict(feeds))
        except Exception:  # an op onnx.reference lacks: fall back to the difference
            return None
        return dict(zip(node.outputs, got, strict=False))

    node_protos: Mapping[str, onnx.NodeProto] = field(default_factory=dict)

    def _node_proto(self, node: NodeFacts) -> onnx.NodeProto | None:
        proto = self.node_protos.get(node.name)
        if proto is None or not domains.is_default(proto.domain):
            return None
        return proto


def _elem(arr: np.ndarray) -> int:
    with contextlib.suppress(Exception):
        return helper.np_dtype_to_tensor_dtype(arr.dtype)
    return onnx.TensorProto.FLOAT


def _round(arr: Any, low: Any) -> Any:
    if isinstance(arr, np.ndarray) and arr.dtype == np.float32:
        with np.errstate(over="ignore"):
            return arr.astype(low).astype(np.float32)
    return arr
