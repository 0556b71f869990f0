"""Per-node error of a converted model against its original, for ``validate --html``.

Two sessions: the original with its float intermediates exposed, and the candidate (emulated, or
as is on CUDA) with, for each of them, the value that carries it: the value map the converter
stored in the candidate (``value_map.METADATA_KEY``). A candidate converted elsewhere has none:
values are then matched by name, only those present in both graphs, and the page says so.
Precision is read from the converted graph itself (the carrier's element type), never from a
search. Fetched in batches so memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from amp_convert.auto.graph import FLOAT, GraphFacts, graph_facts
from amp_convert.auto.localise import ValueStats
from amp_convert.auto.page_facts import (
    cast_count,
    folded_by_op,
    node_names,
    precision_by_op,
    weight_bytes,
)
from amp_convert.auto.probe import (
    DEFAULT_BUDGET,
    Probe,
    carrier_aliases,
    expose,
    open_probe,
    plan_batches,
    produced_names,
)
from amp_convert.auto.report import TracePoint
from amp_convert.auto.sessions import worst
from amp_convert.auto.staging import lean_options
from amp_convert.core import proto_walk
from amp_convert.core.dtypes import LOW_TYPES, low_numpy_type
from amp_convert.pages import html as html_report
from amp_convert.pages.html import Page
from amp_convert.reports.value_map import Fate, ValueMap, read_reasons
from amp_convert.validation.emulate import build_emulated_model
from amp_convert.validation.evidence import weak_notes, weak_outputs
from amp_convert.validation.input_search import Samples, gather_samples, replay
from amp_convert.validation.inputs import InputSpec
from amp_convert.validation.metrics import OutputResult, Thresholds, compare_output
from amp_convert.validation.providers import provider_mode, runtime_target
from amp_convert.validation.report import ValidationReport, output_notes
from amp_convert.validation.runtime import (
    ModelSource,
    load_source,
)

if TYPE_CHECKING:
    from amp_convert.validation.core import Verdict

_LOW = {int(t) for t in LOW_TYPES}
#: what the folded-values section says of a model that carries no value map of ours
NO_MAP = (
    "the converted model carries no amp-convert value map (converted elsewhere, or stripped): "
    "values are matched by name, and what the conversion folded or removed is not known"
)


def candidate_value_map(reference: onnx.ModelProto, candidate: onnx.ModelProto) -> ValueMap:
    """The value map the candidate carries, or the by-name fallback (``complete`` False)."""
    result = [n for g in proto_walk.graphs(candidate.graph) for n in _value_names(g)]
    metadata = {p.key: p.value for p in candidate.metadata_props}
    found, problem = ValueMap.read_metadata(metadata, result)
    if found is not None:
        return found
    original = [n for g in proto_walk.graphs(reference.graph) for n in _value_names(g)]
    by_name = ValueMap.common_names(original, result)
    if not problem:
        return by_name
    note = (
        f"the converted model carries amp-convert's value map but {problem}: it is not used, "
        "values are matched by name (a value the conversion folded may be compared with "
        "different data); the outputs are compared as the exit code judged them"
    )
    return ValueMap(by_name.values, {}, complete=False, note=note)


def _value_names(graph: onnx.GraphProto) -> Iterator[str]:
    yield from (i.name for i in graph.input)
    yield from (t.name for t in graph.initializer)
    for node in graph.node:
        yield from (o for o in node.output if o)


def _elem_types(proto: onnx.ModelProto, inferred: Mapping[str, int]) -> dict[str, int]:
    """Element types of every value of ``proto`` (subgraphs included), as the file states them,
    completed by inference."""
    types = dict(inferred)
    for g in proto_walk.graphs(proto.graph):
        for vi in (*g.input, *g.value_info, *g.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types[vi.name] = vi.type.tensor_type.elem_type
        for t in g.initializer:
            types[t.name] = t.data_type
        for node in g.node:  # a Cast says what it makes
            if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
                to = next((a.i for a in node.attribute if a.name == "to"), 0)
                types.setdefault(node.output[0], to)
    return types


def _precision(outputs: list[str], vm: ValueMap, types: Mapping[str, int]) -> tuple[str, str]:
    """(precision label, folded-into) of a node of the reference, from the converted graph."""
    fates = [vm.fate(v) for v in outputs]
    if fates and all(f.fate == Fate.FOLDED for f in fates):
        return "folded", fates[0].into
    carried = [types.get(f.carrier) for f in fates if f.carrier is not None]
    if _LOW & set(carried):
        return "low", ""
    if FLOAT in carried:
        return "fp32", ""
    if fates and all(f.fate == Fate.REMOVED for f in fates) and vm.complete:
        return "removed", ""
    return "n/a", ""


def _samples(
    ref: Probe,
    inputs: Any,
    dims: Mapping[str, int] | None,
    seed: int,
    proto: onnx.ModelProto,
    outputs: list[str],
    judged: Samples[Any] | None = None,
) -> Samples[dict[str, Any]]:
    """The samples a verdict was `judged` on, else the one input generator (random inputs at
    dims the reference runs on, or the files); each sample keeps the reference's outputs
    (evidence.py reads them)."""

    def run(feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        return ref.fetch(feeds, outputs)

    if judged is not None:
        return replay(judged, run)
    specs = [InputSpec(n, t, s) for n, (t, s) in ref.runner.inputs.items()]
    return gather_samples(specs, proto, run, inputs=inputs, dims=dims, seed=seed)


def _candidate_model(
    cand_src: ModelSource, emulate: bool, own: list[str], types: Mapping[str, int]
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The candidate to probe (emulated, or as is) and its inputs to round to a low type."""
    if not emulate:
        model = onnx.ModelProto()
        model.CopyFrom(cand_src.proto)
        expose(model, own, types)
        return model, {}
    emulated = build_emulated_model(cand_src.proto, cand_src.base_dir, runtime_target("emulate"))
    expose(emulated.model, own, dict.fromkeys(own, FLOAT))  # the emulated copy computes in FP32
    return emulated.model, dict(emulated.low_inputs)


def _rounded(feeds: dict[str, np.ndarray], low_inputs: Mapping[str, str]) -> dict:
    out = dict(feeds)
    for name, low in low_inputs.items():
        out[name] = feeds[name].astype(low_numpy_type(low)).astype(np.float32)
    return out


def _measure(
    ref: Probe,
    cand: Probe,
    samples: list[dict[str, np.ndarray]],
    low_inputs: Mapping[str, str],
    facts: GraphFacts,
    values: list[str],
    limits: Thresholds,
    budget: int,
) -> tuple[dict[str, ValueStats], list[OutputResult]]:
    """Every carried value's error over the samples; each output judged on its worst sample."""
    sizes = {v: facts.estimated_bytes(v) for v in values}
    stats: dict[str, ValueStats] = {}
    per_output: dict[str, list[OutputResult]] = {o: [] for o in facts.graph_outputs}
    batches = plan_batches(values, sizes, budget, first=facts.graph_outputs)
    for feeds in samples:
        cand_feeds = _rounded(feeds, low_inputs)
        for batch in batches:
            r = ref.fetch(feeds, batch)
            c = cand.fetch(cand_feeds, batch)
            for name in batch:
                if name in per_output:
                    per_output[name].append(
                        compare_output(name, r.get(name), c.get(name), limits.for_output(name))
                    )
                arr = r.get(name)
                if isinstance(arr, np.ndarray) and arr.dtype == np.float32 and name in c:
                    stats.setdefault(name, ValueStats()).add(arr, c[name])
    return stats, [worst(results) for results in per_output.values() if results]


@dataclass(frozen=True)
class _Names:
    """Node names as the reports give them, and why each node of the result is FP32."""

    reference: Mapping[str, str]  # output value -> reference node name
    candidate: Mapping[str, str]  # output value -> candidate node name
    reasons: Mapping[str, str]  # candidate node name -> why FP32

    def name(self, node: str, outputs: list[str], op_type: str) -> str:
        if node:
            return node
        return next((self.reference[v] for v in outputs if v in self.reference), op_type)

    def reason(self, label: str, outputs: list[str], vm: ValueMap, node: str) -> str:
        """Why the node is FP32 (the conversion report), or what became of it (the map)."""
        if label == "fp32":
            for v in outputs:
                carrier = vm.fate(v).carrier
                found = self.reasons.get(self.candidate.get(carrier or "", ""), "")
                if found:
                    return found
            return ""
        fate = vm.nodes.get(node)
        if fate is not None and fate.why:
            return fate.why
        return next((w for v in outputs if (w := vm.fate(v).why) and w != "not mapped"), "")


def _trace(
    facts: GraphFacts,
    vm: ValueMap,
    types: Mapping[str, int],
    stats: Mapping[str, ValueStats],
    ref_max: Mapping[str, float],
    names: _Names,
) -> list[TracePoint]:
    trace = []
    absorbed = _absorbed(facts, vm)
    for node in facts.nodes:
        floats = [v for v in node.outputs if facts.types.get(v) == FLOAT]
        if not floats:
            continue
        name = names.name(node.name, node.outputs, node.op_type)
        fate = vm.nodes.get(name)
        if fate is not None and fate.fate == Fate.FOLDED:
            # its work is in the node it was folded into: drawn there, never here
            label, into, compared = "folded", fate.into, []
        else:
            own = [v for v in floats if not _folded_into(vm, v, name)]
            carried = own + absorbed.get(name, [])
            label, into = _precision(carried or floats, vm, types)
            compared = [v for v in carried if v in stats]
        trace.append(
            TracePoint(
                name,
                node.op_type,
                max((ref_max.get(v, 0.0) for v in compared or floats), default=None),
                None,
                max((stats[v].error for v in compared), default=None),
                label,
                into,
                reason=names.reason(label, floats, vm, name),
                hidden=not node.name and node.op_type == "Constant",
            )
        )
        for inner in node.body_nodes:
            outs = facts.inner[inner].outputs if inner in facts.inner else []
            label, into = _precision(outs, vm, types)
            op = facts.op_type(inner) if inner in facts.inner else ""
            inner_name = names.name(inner, outs, op)
            trace.append(
                TracePoint(
                    inner_name,
                    op,
                    None,
                    None,
                    None,
                    label,
                    into,
                    name,
                    reason=names.reason(label, outs, vm, inner_name),
                    hidden=not inner and op == "Constant",
                )
            )
    return trace


def _folded_into(vm: ValueMap, value: str, node: str) -> bool:
    """``value`` (a node's own output) was folded into that very node: a Conv's output before
    the BatchNormalization it now computes too."""
    fate = vm.fate(value)
    return fate.fate == Fate.FOLDED and fate.into == node


def _absorbed(facts: GraphFacts, vm: ValueMap) -> dict[str, list[str]]:
    """Node -> the float outputs of the nodes folded into it (a BatchNormalization's output is
    the Conv's error once the Conv computes it)."""
    out: dict[str, list[str]] = {}
    for node in facts.nodes:
        fate = vm.nodes.get(node.name)
        if fate is not None and fate.fate == Fate.FOLDED and fate.into:
            floats = [v for v in node.outputs if facts.types.get(v) == FLOAT]
            out.setdefault(fate.into, []).extend(floats)
    return out


def validation_page(
    reference: Any,
    candidate: Any,
    *,
    provider: str = "emulate",
    inputs: Any = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    budget: int = DEFAULT_BUDGET,
    report: ValidationReport | None = None,
    verdict: Verdict | None = None,
) -> Page:
    """The HTML page's content for ``candidate`` validated against ``reference``.

    ``verdict``: the validation whose exit code the user sees; the page runs on its samples,
    with its provider (the one that ran) and thresholds, and its outputs and verdict are the
    page's (the value map only guides the intermediate values, never the verdict); the other
    arguments are then unused. ``report``: a report alone (outputs and verdict). Without either,
    the graph outputs are compared here, by their own names in both models.
    """
    judged = None
    if verdict is not None:
        report, judged = verdict.report, verdict.samples
        provider, thresholds = report.provider, verdict.options.thresholds
    provider = provider_mode(provider)
    device = "cuda" if provider == "cuda" else "cpu"
    emulate = provider in ("emulate", "cpu")  # cpu would hide FP16 errors: trace emulated
    limits = Thresholds.coerce(thresholds)
    ref_src = load_source(reference, "reference")
    cand_src = load_source(candidate, "candidate")
    try:
        vm = candidate_value_map(ref_src.proto, cand_src.proto)
        facts = graph_facts(ref_src.proto, {})
        values = facts.float_values
        exposed = onnx.ModelProto()
        exposed.CopyFrom(ref_src.proto)
        expose(exposed, values, dict.fromkeys(values, FLOAT))
        ref = open_probe(
            ref_src,
            exposed,
            "reference",
            device=device,
            disable_optimizations=emulate,
            configure=lean_options(ref_src.has_external_data),
        )
        try:
            gathered = _samples(ref, inputs, dims, seed, ref_src.proto, facts.graph_outputs, judged)
            samples = [s.inputs.arrays for s in gathered.items]
            feeds = samples[0]
            facts = graph_facts(ref_src.proto, feeds)
            types = _elem_types(cand_src.proto, graph_facts(cand_src.proto, feeds).types)
            aliases = carrier_aliases(vm, values, cand_src.proto)
            # graph outputs are the interface both models share: never looked up in the map
            aliases.update({o: o for o in facts.graph_outputs})
            own = [
                a for a in dict.fromkeys(aliases.values()) if a in produced_names(cand_src.proto)
            ]
            model, low_inputs = _candidate_model(cand_src, emulate, own, types)
            cand = open_probe(
                cand_src,
                model,
                "candidate",
                device=device,
                disable_optimizations=emulate,
                configure=lean_options(cand_src.has_external_data),
                aliases=aliases,
            )
            try:
                stats, outputs = _measure(
                    ref, cand, samples, low_inputs, facts, values, limits, budget
                )
            finally:
                cand.close()
        finally:
            ref.close()
    finally:
        ref_src.close()
        cand_src.close()
    ref_max = {k: s.ref_max for k, s in stats.items()}
    reasons, problem = read_reasons({p.key: p.value for p in cand_src.proto.metadata_props})
    names = _Names(node_names(ref_src.proto), node_names(cand_src.proto), reasons)
    trace = _trace(facts, vm, types, stats, ref_max, names)
    notes = [vm.note] if vm.note else []
    if problem:
        notes.append(f"the converted model carries amp-convert's FP32 reasons but {problem}")
    if report is None:
        checked = any(o.status == "pass" for o in outputs)  # ValidationReport.verdict's rule
        failed = any(o.failed for o in outputs)
        result = "fail" if failed else ("pass" if checked else "not_judged")
    else:
        outputs, result = list(report.outputs), report.verdict
    return _page(ref_src, cand_src, vm, trace, outputs, emulate, gathered, result, types, notes)


_VERDICTS = {
    "pass": "all outputs pass",
    "fail": "an output fails",
    "not_judged": "report only (no thresholds set)",
}


def _page(
    ref_src: ModelSource,
    cand_src: ModelSource,
    vm: ValueMap,
    trace: list[TracePoint],
    outputs: list[OutputResult],
    emulate: bool,
    gathered: Samples[dict[str, Any]],
    verdict: str,
    types: Mapping[str, int],
    notes: list[str],
) -> Page:
    by_op = precision_by_op(cand_src.proto, types)  # the file as it will be shipped
    folded = folded_by_op(vm) if vm.complete else {}
    low_nodes = sum(lo for lo, _ in by_op.values())
    float_nodes = sum(lo + hi for lo, hi in by_op.values())
    source = "the converter's value map (in the model)" if vm.complete else "names (no value map)"
    hidden = sum(t.hidden for t in trace)
    if hidden:
        notes = [
            *notes,
            f"{hidden} nameless Constant node(s) are left off the chart and hidden "
            "in the node table (a box above the table shows them)",
        ]
    return Page(
        title=f"amp-convert validate: {cand_src.label}",
        verdict=_VERDICTS[verdict],
        passed=verdict != "fail",
        facts=[
            ("reference", ref_src.label),
            ("candidate", cand_src.label),
            ("per-node trace", "emulated FP16/BF16 on CPU" if emulate else "CUDA"),
            ("inputs", gathered.describe()),
            ("values matched by", source),
            ("float nodes low (converted model)", f"{low_nodes} / {float_nodes}"),
            ("Cast nodes (converted model)", str(cast_count(cand_src.proto))),
        ],
        outputs=outputs,
        trace=trace,
        by_op=by_op,
        folded_ops=folded,
        sizes=[
            ("weights before", html_report.bytes_text(weight_bytes(ref_src.proto))),
            ("weights after", html_report.bytes_text(weight_bytes(cand_src.proto))),
        ],
        series=("", "converted vs original"),
        searched=False,
        warnings=[
            *gathered.warnings,
            *weak_notes(
                weak_outputs(s.result for s in gathered.items),
                gathered.random,
                gathered.first.arrays,
                gathered.origin,
            ),
            *output_notes(outputs),  # the norm-ratio line the terminal prints, here too
        ],
        notes=notes,
        folded=vm.with_fate(Fate.FOLDED, Fate.REMOVED) if vm.complete else [],
        map_problem=None if vm.complete else (vm.note or NO_MAP),
    )


def validation_html(original: str | Path, converted: str | Path, verdict: Verdict) -> bytes:
    """``validate --html``: per-node trace of ``converted`` vs ``original`` (two more sessions)
    on the `verdict`'s own samples, provider and thresholds; its outputs table and verdict are
    the verdict's, the comparison the exit code came from. The page is handed the verdict and
    nothing else: no option is read again from the command's flags."""
    page = validation_page(original, converted, verdict=verdict)
    return html_report.render(page).encode("utf-8")
