"""Fused ORT graphs: amp-convert O2 against ORT's own convert_float_to_float16(keep_io_types=True).

    python bench/fused_vs_ort.py [--layers 4 --hidden 256] [--json FILE]

Per model (built in code by models/fused.py, plus bert_plain fused by ORT's optimize_model), side by
side: Cast nodes added, weight bytes, how many fused nodes (com.microsoft ops and ORT's ONNX-domain
ops) have a float16 first output as ONNX Runtime loads the result, and the emulated error (cosine
and max abs error of the worst output against the FP32 model, validate --provider emulate). Issue
19's bar: every fused node FP16, casts <= ORT's + 2, weight bytes within 1% of ORT's, cosine >=
0.999. genai_llama is also converted with --no-keep-io-types (the builder's -p fp16 layout).
Needs onnxruntime (the [cpu] extra); prints a table, figures measured in one run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amp_convert import convert
from amp_convert.validation import validate
from bench._needs import needs
from models.fused import (
    fused_bert,
    fused_gpt2_past,
    genai_llama,
    ort_optimized_bert,
    step_feeds,
)

ORT_ONNX_DOMAIN = {"SimplifiedLayerNormalization"}


def _fused(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    old_ln = model.opset_import[0].version < 17
    return [
        n
        for n in model.graph.node
        if n.domain == "com.microsoft"
        or n.op_type in ORT_ONNX_DOMAIN
        or (old_ln and n.op_type == "LayerNormalization")
    ]


def _casts(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "Cast" for n in model.graph.node)


def _weight_bytes(model: onnx.ModelProto) -> int:
    return sum(
        len(t.raw_data) or onnx.numpy_helper.to_array(t).nbytes for t in model.graph.initializer
    )


def _fp16_fused(model: onnx.ModelProto) -> tuple[int, int]:
    """(fused nodes whose first output ORT types float16, fused nodes) as ORT loads the model."""
    import onnxruntime as ort

    nodes = _fused(model)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    present = {o.name for o in probe.graph.output}
    declared = {vi.name: vi for vi in probe.graph.value_info}
    for n in nodes:
        if n.output[0] not in present:
            probe.graph.output.append(
                declared.get(n.output[0]) or onnx.ValueInfoProto(name=n.output[0])
            )
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    types = {o.name: o.type for o in sess.get_outputs()}
    return sum(types.get(n.output[0]) == "tensor(float16)" for n in nodes), len(nodes)


def _emulated(original: onnx.ModelProto, converted: onnx.ModelProto) -> tuple[float, float]:
    feeds = step_feeds(original, seq=8, past=4)
    report = validate(original, converted, provider="emulate", inputs=feeds, runs=1)
    return min(o.cosine for o in report.outputs), max(o.max_abs for o in report.outputs)


def _toposorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its main-graph nodes in topological order (ORT sorts on load; onnx and our
    validator require it). ORT's converter appends the keep_io_types input Casts at the end."""
    ready = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | {""}
    pending, ordered = list(model.graph.node), []
    while pending:
        rest = []
        for n in pending:
            if set(n.input) <= ready:
                ordered.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError("cycle or dangling input")
        pending = rest
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    return model


def _ort_convert(model: onnx.ModelProto, keep_io: bool) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return _toposorted(convert_float_to_float16(copy, keep_io_types=keep_io))


def measure(name: str, model: onnx.ModelProto, keep_io: bool = True) -> dict[str, Any]:
    ours = convert(model, level="O2", keep_io_types=keep_io)
    theirs = _ort_convert(model, keep_io)
    row: dict[str, Any] = {"model": name, "keep_io_types": keep_io, "fused": len(_fused(model))}
    for who, result in (("amp", ours), ("ort", theirs)):
        row[f"{who}_casts_added"] = _casts(result) - _casts(model)
        row[f"{who}_weight_bytes"] = _weight_bytes(result)
        try:
            row[f"{who}_fused_fp16"] = _fp16_fused(result)[0]
            row[f"{who}_cosine"], row[f"{who}_max_abs"] = _emulated(model, result)
        except Exception as e:  # ORT's converter output may not load
            row[f"{who}_error"] = str(e).splitlines()[0][:120]
    row["fp32_weight_bytes"] = _weight_bytes(model)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    needs("onnxruntime")
    size = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads}
    models = [
        ("fused_bert", fused_bert(**size, max_positions=128), True),
        ("bert_plain+optimize_model", ort_optimized_bert(**size), True),
        ("fused_gpt2_past", fused_gpt2_past(**size, max_positions=128), True),
        ("genai_llama", genai_llama(**size, intermediate=4 * args.hidden), True),
        ("genai_llama", genai_llama(**size, intermediate=4 * args.hidden), False),
        (
            "genai_llama_mha",
            genai_llama(**size, intermediate=4 * args.hidden, attention="mha"),
            True,
        ),
    ]
    rows = [measure(name, model, keep) for name, model, keep in models]
    head = (
        f"{'model':28} {'io':4} {'fused':>5} {'fp16 amp/ort':>12} {'casts amp/ort':>13} "
        f"{'weights amp/ort':>17} {'cosine amp':>10} {'cosine ort':>10}"
    )
    print(head)
    for r in rows:
        ratio = r["amp_weight_bytes"] / r["ort_weight_bytes"]
        print(
            f"{r['model']:28} {'keep' if r['keep_io_types'] else 'low':4} {r['fused']:5} "
            f"{r.get('amp_fused_fp16', '-'):>5}/{r.get('ort_fused_fp16', '-'):<6} "
            f"{r['amp_casts_added']:>6}/{r['ort_casts_added']:<6} "
            f"{r['amp_weight_bytes']:>8}/{r['ort_weight_bytes']:<8} ({ratio:.4f}) "
            f"{r.get('amp_cosine', float('nan')):10.6f} {r.get('ort_cosine', float('nan')):10.6f}"
            + (f"  ORT: {r['ort_error']}" if "ort_error" in r else "")
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
