"""Per-node error of a converted model against its original, for ``validate --html``.

Two sessions: the original with its float intermediates exposed, and the candidate (emulated, or
as is on CUDA) with, for each of them, the value that carries it: the value map the converter
stored in the candidate (``value_map.METADATA_KEY``). A candidate converted elsewhere has none:
values are then matched by name, only those present in both graphs, and the page says so.
Precision is read from the converted graph itself (the carrier's element type), never from a
search. Fetched in batches so memory stays bounded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from amp_convert import html_report, proto_walk
from amp_convert.auto.graph import FLOAT, GraphFacts, graph_facts
from amp_convert.auto.localise import ValueStats
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
from amp_convert.dtypes import LOW_TYPES, low_numpy_type
from amp_convert.html_report import Page
from amp_convert.validation.emulate import build_emulated_model
from amp_convert.validation.evidence import weak_notes, weak_outputs
from amp_convert.validation.input_search import Samples, gather_samples
from amp_convert.validation.inputs import InputSpec
from amp_convert.validation.metrics import OutputResult, Thresholds, compare_output
from amp_convert.validation.runtime import ModelSource, cuda_available, load_source
from amp_convert.value_map import Fate, ValueMap

_LOW = {int(t) for t in LOW_TYPES}


def candidate_value_map(reference: onnx.ModelProto, candidate: onnx.ModelProto) -> ValueMap:
    """The value map the candidate carries, or the by-name fallback (``complete`` False)."""
    result = [n for g in proto_walk.graphs(candidate.graph) for n in _value_names(g)]
    metadata = {p.key: p.value for p in candidate.metadata_props}
    found = ValueMap.from_metadata(metadata, result)
    if found is not None:
        return found
    original = [n for g in proto_walk.graphs(reference.graph) for n in _value_names(g)]
    return ValueMap.common_names(original, result)


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


def _samples(ref: Probe, inputs: Any, dims, seed, proto, outputs) -> Samples[dict[str, Any]]:
    """The one input generator (random inputs at dims the reference runs on, or the files);
    each sample keeps the reference's outputs (evidence.py reads them)."""
    specs = [InputSpec(n, t, s) for n, (t, s) in ref.runner.inputs.items()]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        return ref.fetch(feeds, outputs)

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
    emulated = build_emulated_model(cand_src.proto)
    expose(emulated.model, own, {v: FLOAT for v in own})  # the emulated copy computes in FP32
    return emulated.model, dict(emulated.low_inputs)


def _rounded(feeds: dict[str, np.ndarray], low_inputs: Mapping[str, str]) -> dict:
    out = dict(feeds)
    for name, low in low_inputs.items():
        out[name] = feeds[name].astype(low_numpy_type(low)).astype(np.float32)
    return out


def _measure(ref, cand, samples, low_inputs, facts: GraphFacts, values, limits, budget):
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


def _trace(facts: GraphFacts, vm: ValueMap, types, stats, ref_max) -> list[TracePoint]:
    trace = []
    for node in facts.nodes:
        floats = [v for v in node.outputs if facts.types.get(v) == FLOAT]
        if not floats:
            continue
        label, into = _precision(floats, vm, types)
        compared = [v for v in floats if v in stats]
        trace.append(
            TracePoint(
                node.name, node.op_type, max((ref_max.get(v, 0.0) for v in floats), default=None),
                None, max((stats[v].error for v in compared), default=None), label, into,
            )
        )  # fmt: skip
        for inner in node.body_nodes:
            outs = facts.inner[inner].outputs if inner in facts.inner else []
            label, into = _precision(outs, vm, types)
            trace.append(
                TracePoint(inner, facts.op_type(inner), None, None, None, label, into, node.name)
            )
    return trace


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
) -> Page:
    """The HTML page's content for ``candidate`` validated against ``reference``."""
    if provider == "auto":
        provider = "cuda" if cuda_available() else "emulate"
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
        expose(exposed, values, {v: FLOAT for v in values})
        ref = open_probe(
            ref_src, exposed, "reference", device=device, disable_optimizations=emulate,
            configure=lean_options(ref_src.has_external_data),
        )  # fmt: skip
        try:
            gathered = _samples(ref, inputs, dims, seed, ref_src.proto, facts.graph_outputs)
            samples = [s.inputs.arrays for s in gathered.items]
            feeds = samples[0]
            facts = graph_facts(ref_src.proto, feeds)
            types = _elem_types(cand_src.proto, graph_facts(cand_src.proto, feeds).types)
            aliases = carrier_aliases(vm, values, cand_src.proto)
            own = [a for a in dict.fromkeys(aliases.values()) if a in produced_names(
                cand_src.proto)]  # fmt: skip
            model, low_inputs = _candidate_model(cand_src, emulate, own, types)
            cand = open_probe(
                cand_src, model, "candidate", device=device, disable_optimizations=emulate,
                configure=lean_options(cand_src.has_external_data), aliases=aliases,
            )  # fmt: skip
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
    trace = _trace(facts, vm, types, stats, ref_max)
    return _page(ref_src, cand_src, vm, trace, outputs, limits, emulate, gathered)


def _page(ref_src, cand_src, vm, trace, outputs, limits, emulate, gathered) -> Page:
    by_op: dict[str, tuple[int, int]] = {}
    for t in trace:
        if t.precision in ("low", "fp32"):
            low, high = by_op.get(t.op_type, (0, 0))
            by_op[t.op_type] = (low + (t.precision == "low"), high + (t.precision == "fp32"))
    passed = all(o.passed for o in outputs)
    low_nodes = sum(lo for lo, _ in by_op.values())
    float_nodes = sum(lo + hi for lo, hi in by_op.values())
    source = "the converter's value map (in the model)" if vm.complete else "names (no value map)"
    return Page(
        title=f"amp-convert validate: {cand_src.label}",
        verdict=("all outputs pass" if passed else "an output fails")
        if limits.active
        else "report only (no thresholds set)",
        passed=passed,
        facts=[
            ("reference", ref_src.label),
            ("candidate", cand_src.label),
            ("per-node trace", "emulated FP16/BF16 on CPU" if emulate else "CUDA"),
            ("inputs", gathered.describe()),
            ("values matched by", source),
            ("float nodes low (converted model)", f"{low_nodes} / {float_nodes}"),
        ],  # fmt: skip
        outputs=outputs,
        trace=trace,
        by_op=by_op,
        sizes=[
            ("weights before", html_report.bytes_text(_weights(ref_src.proto))),
            ("weights after", html_report.bytes_text(_weights(cand_src.proto))),
        ],
        series=("", "converted vs original"),
        searched=False,
        warnings=[
            *gathered.warnings,
            *weak_notes(weak_outputs(s.result for s in gathered.items), gathered.random),
        ],
        notes=[vm.note] if vm.note else [],
        folded=vm.with_fate(Fate.FOLDED, Fate.REMOVED) if vm.complete else [],
    )


def write_validation_html(
    original: str | Path,
    converted: str | Path,
    path: str | os.PathLike,
    *,
    thresholds: Thresholds | Mapping[str, Any] | None,
    provider: str | None = None,
    inputs: Any = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
) -> None:
    """``validate --html``: per-node trace of ``converted`` vs ``original`` (two more sessions)."""
    files = inputs or None
    if isinstance(files, tuple):
        files = list(files)
    page = validation_page(
        original, converted, provider=provider or "auto", inputs=files, dims=dims or None,
        seed=seed or 0, thresholds=thresholds,
    )  # fmt: skip
    html_report.write(page, path)


def _weights(proto: onnx.ModelProto) -> int:
    total = 0
    for g in proto_walk.graphs(proto.graph):
        for t in g.initializer:
            size = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            total += size * int(np.prod(t.dims, dtype=np.int64))
    return total
