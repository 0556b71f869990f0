"""Error localisation inside If/Loop/Scan bodies, offline, so body nodes are pinned one by one.

A body's values cannot be graph outputs of the main graph, so the probes see only the
control-flow node's own outputs. When that node introduces error, its executed bodies are re-run
here with onnx.reference on the node's *reference* inputs (its operands and the outer values it
captures, all recorded by the reference pass): the taken If branch, every Loop/Scan iteration in
turn (carried values fed forward), recording every body value. Each low body node is then judged
as main-graph nodes are: run alone on its reference inputs rounded to the low type, its outputs
rounded, the error of that isolated node is the error it introduces; an input or output whose
magnitude x margin exceeds the low type's range is a range hit. No ORT session is spent, and the
next candidate re-checks the pins in ORT.

The caller pins the whole body instead when this cannot judge (an op onnx.reference lacks, a
value not recorded, no low body node that introduces error on its own: error amplified by FP32
body nodes), and says why in the evidence.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from amp_convert.auto.graph import body_graphs, captured_names
from amp_convert.auto.localise import Blame, relative_error
from amp_convert.core import domains
from amp_convert.core.dtypes import LowType

#: iterations of one Loop/Scan analysed per sample (the ORT re-check covers the rest)
MAX_INVOCATIONS = 256


class CannotJudge(Exception):
    """The body cannot be analysed offline; the message says why (for the evidence)."""


@dataclass
class _Judged:
    """One body node's worst case over invocations and samples."""

    op_type: str
    error: float = 0.0
    peak: float = 0.0  # max |x| over its non-weight inputs and its outputs


@dataclass
class BodyVerdict:
    """What the body localisation found for one control-flow node."""

    blames: list[Blame]
    #: which bodies ran and how often, for the evidence ("then_branch in 2 of 2 samples")
    note: str
    #: why the whole body must be pinned instead (None when ``blames`` narrow it)
    fallback: str | None = None


@dataclass
class BodyJudge:
    """Judges the body nodes of main-graph control-flow nodes on their reference inputs."""

    opsets: Mapping[str, int]
    ir_version: int
    low_type: LowType
    margin: float
    is_low: Callable[[str], bool]
    #: main-graph initializers (weights are not activations: no range check on them)
    weights: set[str] = field(default_factory=set)
    per_round: int = 4
    share: float = 0.5
    #: onnx.reference evaluators by body ("<node>/<attribute>") or node name, built once
    _evaluators: dict[str, Any] = field(default_factory=dict)

    def judge(
        self, node: onnx.NodeProto, samples: Sequence[Mapping[str, Any]], exclude: set[str]
    ) -> BodyVerdict:
        """Blames for ``node``'s body nodes; ``samples``: per sample, every value it reads."""
        judged: dict[str, _Judged] = {}
        runs: dict[str, int] = {}
        capped = False
        try:
            for env in samples:
                for done, (attr, body, values) in enumerate(self._invocations(node, env)):
                    if done == MAX_INVOCATIONS:
                        capped = True
                        break
                    runs[attr] = runs.get(attr, 0) + 1
                    self._judge_nodes(body, values, judged, exclude)
        except CannotJudge as e:
            return BodyVerdict([], "", f"not analysed: {e}")
        except Exception as e:  # onnx.reference lacks an op or a shape: pin the whole body
            msg = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
            return BodyVerdict([], "", f"onnx.reference cannot run the body ({msg})")
        note = _describe(node, runs, len(samples), capped)
        blames = self._select(node.name, judged, note)
        if not blames:
            return BodyVerdict(
                [], note, f"no low body node introduces the error on its own ({note})"
            )
        return BodyVerdict(blames, note)

    # -- which bodies ran, with which values -------------------------------------------------
    def _invocations(
        self, node: onnx.NodeProto, env: Mapping[str, Any]
    ) -> Iterator[tuple[str, onnx.GraphProto, dict[str, Any]]]:
        """(attribute, body, every value of that invocation) for each body execution."""
        graphs = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        ins = [_get(env, v) if v else None for v in node.input]
        if node.op_type == "If" and domains.is_default(node.domain):
            attr = "then_branch" if bool(np.asarray(ins[0]).reshape(-1)[0]) else "else_branch"
            yield attr, graphs[attr], self._run(f"{node.name}/{attr}", graphs[attr], {}, env)
        elif node.op_type == "Loop" and domains.is_default(node.domain):
            yield from self._loop(f"{node.name}/body", graphs["body"], ins, env)
        elif node.op_type == "Scan" and domains.is_default(node.domain):
            yield from self._scan(node, graphs["body"], ins, env)
        else:
            raise CannotJudge(f"{node.op_type} bodies are not analysed")

    def _loop(
        self, key: str, body: onnx.GraphProto, ins: list, env: Mapping[str, Any]
    ) -> Iterator[tuple[str, onnx.GraphProto, dict[str, Any]]]:
        trips = None if ins[0] is None else int(np.asarray(ins[0]).reshape(-1)[0])
        cond = True if len(ins) < 2 or ins[1] is None else bool(np.asarray(ins[1]).reshape(-1)[0])
        carried = ins[2:]
        formal = [i.name for i in body.input]
        outs = [o.name for o in body.output]
        i = 0
        while cond and (trips is None or i < trips):
            feeds = dict(
                zip(formal, [np.array(i, np.int64), np.array(cond), *carried], strict=True)
            )
            values = self._run(key, body, feeds, env)
            yield "body", body, values
            cond = bool(np.asarray(values[outs[0]]).reshape(-1)[0])
            carried = [values[o] for o in outs[1 : 1 + len(carried)]]
            i += 1

    def _scan(
        self, node: onnx.NodeProto, body: onnx.GraphProto, ins: list, env: Mapping[str, Any]
    ) -> Iterator[tuple[str, onnx.GraphProto, dict[str, Any]]]:
        if self.opsets.get("", 0) < 9:
            raise CannotJudge("Scan before opset 9 (batched) is not analysed")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        m = int(attrs["num_scan_inputs"])
        states, scans = ins[: len(ins) - m], ins[len(ins) - m :]
        axes = list(attrs.get("scan_input_axes", [0] * m))
        dirs = list(attrs.get("scan_input_directions", [0] * m))
        length = np.asarray(scans[0]).shape[axes[0] % np.ndim(scans[0])]
        formal = [i.name for i in body.input]
        outs = [o.name for o in body.output]
        for t in range(length):
            slices = [
                np.take(x, length - 1 - t if d else t, axis=a % np.ndim(x))
                for x, a, d in zip(scans, axes, dirs, strict=True)
            ]
            feeds = dict(zip(formal, [*states, *slices], strict=True))
            values = self._run(f"{node.name}/body", body, feeds, env)
            yield "body", body, values
            states = [values[o] for o in outs[: len(states)]]

    def _run(
        self, key: str, body: onnx.GraphProto, feeds: Mapping[str, Any], env: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Every value of one execution of ``body`` (FP32 reference semantics)."""
        outer = {v: _get(env, v) for v in sorted(captured_names(body) - set(feeds))}
        all_feeds = {**feeds, **outer}
        if key not in self._evaluators:
            from onnx.reference import ReferenceEvaluator

            graph = onnx.GraphProto()
            graph.CopyFrom(body)
            graph.input.extend(
                helper.make_tensor_value_info(v, _elem(a), None) for v, a in outer.items()
            )
            self._evaluators[key] = ReferenceEvaluator(self._model(graph))
        with np.errstate(all="ignore"):
            values = self._evaluators[key].run(None, all_feeds, intermediate=True)
        values = {**all_feeds, **values}
        for t in body.initializer:
            values.setdefault(t.name, numpy_helper.to_array(t))
        return values

    # -- judging the nodes of one invocation ---------------------------------------------------
    def _judge_nodes(
        self,
        body: onnx.GraphProto,
        values: Mapping[str, Any],
        judged: dict[str, _Judged],
        exclude: set[str],
    ) -> None:
        weights = self.weights | {t.name for t in body.initializer}
        low = self.low_type.numpy
        for n in body.node:
            if n.name in exclude or not self.is_low(n.name):
                continue
            outs = [o for o in n.output if o and _is_f32(values.get(o))]
            if not outs:
                continue
            names = [v for v in n.input if v]
            for sub in body_graphs(n):
                names.extend(sorted(captured_names(sub) - set(names)))
            missing = [v for v in names if v not in values]
            if missing:
                raise CannotJudge(f"value {missing[0]!r} of {n.name} was not recorded")
            j = judged.setdefault(n.name, _Judged(n.op_type))
            for v in [*(v for v in names if v not in weights), *outs]:
                j.peak = max(j.peak, _peak(values[v]))
            feeds = {v: _round(values[v], low) for v in names}
            got = self._single(n, names, feeds)
            for o, arr in zip(n.output, got, strict=False):
                if o in outs:
                    j.error = max(j.error, relative_error(values[o], _round(arr, low)))

    def _single(self, n: onnx.NodeProto, names: list[str], feeds: Mapping[str, Any]) -> list:
        key = f"node:{n.name}"
        if key not in self._evaluators:
            from onnx.reference import ReferenceEvaluator

            graph = helper.make_graph(
                [n],
                "isolated",
                [helper.make_tensor_value_info(v, _elem(feeds[v]), None) for v in names],
                [helper.make_value_info(o, onnx.TypeProto()) for o in n.output if o],
            )
            self._evaluators[key] = ReferenceEvaluator(self._model(graph))
        with np.errstate(all="ignore"):
            return list(self._evaluators[key].run(None, dict(feeds)))

    def _model(self, graph: onnx.GraphProto) -> onnx.ModelProto:
        opsets = [helper.make_opsetid(d, v) for d, v in self.opsets.items()]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = self.ir_version
        return model

    def _select(self, parent: str, judged: Mapping[str, _Judged], note: str) -> list[Blame]:
        limit = self.low_type.max
        blames: list[Blame] = []
        for name, j in judged.items():
            if j.peak * self.margin > limit:
                how = (
                    f"inside {parent} ({note}): max |x| {j.peak:.4g} x margin {self.margin:g} "
                    f"> {limit:g}"
                )
                blames.append(Blame(name, math.inf, j.error, 0.0, how, "range", j.peak))
            elif j.error > 0:
                how = f"isolated, inside {parent} ({note})"
                blames.append(Blame(name, j.error, j.error, 0.0, how))
        infinite = [b for b in blames if math.isinf(b.score)]
        if infinite:
            return infinite
        if not blames:
            return []
        blames.sort(key=lambda b: -b.score)
        best = blames[0].score
        return [b for b in blames if b.score >= self.share * best][: self.per_round]


def _describe(node: onnx.NodeProto, runs: Mapping[str, int], samples: int, capped: bool) -> str:
    if node.op_type == "If":
        return ", ".join(
            f"{a} taken in {k} of {samples} sample(s)" for a, k in sorted(runs.items())
        )
    total = sum(runs.values())
    more = f", first {MAX_INVOCATIONS} per sample" if capped else ""
    return f"{total} iteration(s) over {samples} sample(s){more}"


def _get(env: Mapping[str, Any], name: str) -> Any:
    if name not in env:
        raise CannotJudge(f"the reference value of {name!r} was not recorded")
    return env[name]


def _is_f32(arr: Any) -> bool:
    return isinstance(arr, np.ndarray) and arr.dtype == np.float32


def _peak(arr: Any) -> float:
    if not _is_f32(arr) or not arr.size:
        return 0.0
    a = np.abs(arr[np.isfinite(arr)])
    return float(a.max()) if a.size else 0.0


def _round(arr: Any, low: Any) -> Any:
    if _is_f32(arr):
        with np.errstate(over="ignore"):
            return arr.astype(low).astype(np.float32)
    return arr


def _elem(arr: Any) -> int:
    try:
        return helper.np_dtype_to_tensor_dtype(np.asarray(arr).dtype)
    except Exception:
        return onnx.TensorProto.FLOAT
