"""Per-node error of a converted model against its original, for ``validate --html``.

Two sessions: the original with its float intermediates exposed, and the candidate (emulated,
or as is on CUDA) with the same values exposed; fetched in batches so memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from amp_convert import proto_walk
from amp_convert.auto.graph import FLOAT, graph_facts
from amp_convert.auto.localise import ValueStats
from amp_convert.auto.probe import DEFAULT_BUDGET, expose, open_probe, plan_batches
from amp_convert.auto.report import TracePoint
from amp_convert.auto.staging import lean_options
from amp_convert.dtypes import LOW_TYPES, low_numpy_type
from amp_convert.html_report import Page
from amp_convert.validation.emulate import build_emulated_model
from amp_convert.validation.inputs import InputSpec, load_inputs, random_inputs
from amp_convert.validation.metrics import Thresholds, compare_output
from amp_convert.validation.runtime import cuda_available, load_source

_LOW = {int(t) for t in LOW_TYPES}


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
    facts = graph_facts(ref_src.proto, {})
    values = facts.float_values
    exposed = onnx.ModelProto()
    exposed.CopyFrom(ref_src.proto)
    expose(exposed, values, {v: FLOAT for v in values})
    ref = open_probe(
        ref_src, exposed, "reference", device=device, disable_optimizations=emulate,
        configure=lean_options(ref_src.has_external_data),
    )  # fmt: skip
    specs = [InputSpec(n, t, s) for n, (t, s) in ref.runner.inputs.items()]
    if inputs is None:
        feeds = random_inputs(specs, ref_src.proto, dims=dims, seed=seed).arrays
    else:
        feeds = load_inputs(inputs, specs).arrays
    facts = graph_facts(ref_src.proto, feeds)
    cand_types = graph_facts(cand_src.proto, feeds).types
    if emulate:
        emulated = build_emulated_model(cand_src.proto)
        model = emulated.model
        expose(model, values, {v: FLOAT for v in values})
        cand_feeds = dict(feeds)
        for name, low in emulated.low_inputs.items():
            cand_feeds[name] = feeds[name].astype(low_numpy_type(low)).astype(np.float32)
    else:
        model = onnx.ModelProto()
        model.CopyFrom(cand_src.proto)
        expose(model, values, cand_types)
        cand_feeds = dict(feeds)
    cand = open_probe(
        cand_src, model, "candidate", device=device, disable_optimizations=emulate,
        configure=lean_options(cand_src.has_external_data),
    )  # fmt: skip
    sizes = {v: facts.estimated_bytes(v) for v in values}
    stats: dict[str, ValueStats] = {}
    outputs = []
    try:
        for batch in plan_batches(values, sizes, budget, first=facts.graph_outputs):
            r = ref.fetch(feeds, batch)
            c = cand.fetch(cand_feeds, batch)
            for name in batch:
                if name in facts.graph_outputs:
                    outputs.append(
                        compare_output(name, r.get(name), c.get(name), limits.for_output(name))
                    )
                arr = r.get(name)
                if isinstance(arr, np.ndarray) and arr.dtype == np.float32:
                    stats.setdefault(name, ValueStats()).add(arr, c.get(name))
    finally:
        ref.close()
        cand.close()
        for src in (ref_src, cand_src):
            if src._tmp is not None:
                src._tmp.cleanup()
    trace, by_op = [], {}
    for node in facts.nodes:
        types = [cand_types.get(v) for v in node.outputs]
        precision = "low" if _LOW & set(types) else ("fp32" if FLOAT in types else "n/a")
        if precision != "n/a":
            low, high = by_op.get(node.op_type, (0, 0))
            by_op[node.op_type] = (low + (precision == "low"), high + (precision == "fp32"))
        floats = [v for v in node.outputs if v in stats]
        if floats:
            trace.append(
                TracePoint(
                    node.name, node.op_type, max(stats[v].ref_max for v in floats), None,
                    max(stats[v].error for v in floats), precision,
                )
            )  # fmt: skip
    passed = all(o.passed for o in outputs)
    low_nodes = sum(lo for lo, _ in by_op.values())
    float_nodes = sum(lo + hi for lo, hi in by_op.values())
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
            ("inputs", f"random (seed {seed})" if inputs is None else str(inputs)),
            ("main-graph float nodes low", f"{low_nodes} / {float_nodes}"),
        ],  # fmt: skip
        outputs=outputs,
        trace=trace,
        by_op=by_op,
        sizes=[
            ("weights before", _weights(ref_src.proto)),
            ("weights after", _weights(cand_src.proto)),
        ],
        series=("", "converted vs original"),
        searched=False,
    )


def _weights(proto: onnx.ModelProto) -> str:
    total = 0
    for g in proto_walk.graphs(proto.graph):
        for t in g.initializer:
            size = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            total += size * int(np.prod(t.dims, dtype=np.int64))
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if total >= scale:
            return f"{total / scale:.2f} {unit}"
    return f"{total} B"
