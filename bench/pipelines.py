"""Transformer pipelines: amp-convert O2 against the FP16 converters users already have.

    python bench/pipelines.py [--layers 2 --hidden 64] [--steps 8] [--json FILE]

Per model (fused ORT graphs, optimum-style decoders, a quantize_static QDQ encoder (also with
``--opset-upgrade``), a seq2seq decoder with transformers' causal mask, paddle2onnx-style trained
weights: all built in code under models/) and per
tool, side by side in one run: amp-convert ``convert(level="O2")``, ONNX Runtime's
``onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)`` and
onnxconverter-common's ``float16.convert_float_to_float16(keep_io_types=True)``:

* casts added (Cast nodes in every graph, subgraphs included, minus the original's);
* weight bytes (every initializer, subgraphs included);
* traffic: bytes read and written per inference: amp-convert's report figure for its result;
  for the FP32 model and the other tools' results the same estimate (traffic.py, values typed by
  amp-convert's dtype inference) at the dims amp's report took (``traffic_remeasured`` in the
  JSON holds that re-measure for amp's result too);
* cosine: the worst output's cosine against the FP32 model under ``validate --provider emulate``
  (FP16 rounding reproduced on CPU) on the validator's default inputs;
* tokens: for decoders, ``validate --decode-steps N``: the share of N greedy steps on which the
  converted model chose the FP32 model's token, each feeding its own KV cache back.

A tool that fails on a model gets its first error line instead of numbers. Needs onnxruntime
([cpu] extra) and onnxconverter-common (``pip install onnxconverter-common``).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amp_convert import convert
from amp_convert.core.proto_walk import graphs
from amp_convert.cost.shapes import ShapeBook
from amp_convert.cost.traffic import model_traffic
from amp_convert.passes.analyse import analyse
from amp_convert.passes.infer_dtypes import InferDtypesPass
from amp_convert.validation import validate
from bench._needs import needs
from models.bounded import linear_attention
from models.decoders import decoder_model_merged, decoder_with_past
from models.fused import (
    fused_bert,
    fused_gpt2_past,
    genai_llama,
    ort_optimized_bert,
)
from models.norm_exports import jax_moments_ln, paddle_ln_after_transpose
from models.old_exports import torch12_face_detector
from models.qdq import qdq_encoder
from models.seq2seq import seq2seq_decoder
from models.trained_weights import bn_tiny_tail, conv_tiny_tail, tiny_bias_linear
from models.vision import mean_pool_cnn

Tool = Callable[[onnx.ModelProto], tuple[onnx.ModelProto, Any]]


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _toposorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """Main-graph nodes in topological order: the Python converters append their input Casts at
    the end of the node list (ORT sorts on load; onnx's checker and our validator do not)."""
    ready = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | {""}
    pending, ordered = list(model.graph.node), []
    while pending:
        rest = []
        for n in pending:
            if _missing(n, ready):
                rest.append(n)
            else:
                ordered.append(n)
                ready.update(n.output)
        if len(rest) == len(pending):
            n = rest[0]
            name = sorted(_missing(n, ready))[0]
            raise ValueError(f"broken graph: {n.name} reads {name!r}, defined out of its reach")
        pending = rest
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    return model


def _missing(node: onnx.NodeProto, ready: set[str]) -> set[str]:
    """What the node (its subgraphs included) reads that is not defined yet."""
    outer = {
        x
        for a in node.attribute
        if a.type == onnx.AttributeProto.GRAPH
        for g in graphs(a.g)
        for m in g.node
        for x in m.input
    }
    return (set(node.input) | (outer - _locals(node))) - ready


def _locals(node: onnx.NodeProto) -> set[str]:
    """Names defined inside the node's subgraphs (what its body reads from itself)."""
    names: set[str] = set()
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            for g in graphs(a.g):
                names.update(i.name for i in g.input)
                names.update(t.name for t in g.initializer)
                names.update(o for n in g.node for o in n.output)
    return names


def amp_o2(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Any]:
    """amp-convert O2 and its ConversionReport (traffic and the dims it took)."""
    return convert(model, level="O2", return_report=True)


def ort_fp16(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Any]:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return _toposorted(convert_float_to_float16(_copy(model), keep_io_types=True)), None


def occ_fp16(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Any]:
    from onnxconverter_common import float16

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = float16.convert_float_to_float16(_copy(model), keep_io_types=True)
    return _toposorted(out), None


def amp_o2_upgrade(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Any]:
    """amp-convert O2 with --opset-upgrade (QDQ models: Q/DQ take FP16 scales at opset 19)."""
    return convert(model, level="O2", opset_upgrade=True, return_report=True)


TOOLS: dict[str, Tool] = {
    "amp O2": amp_o2,
    "ORT float16": ort_fp16,
    "onnxconverter-common": occ_fp16,
}
#: for QDQ models, amp-convert with and without the opset upgrade
QDQ_TOOLS: dict[str, Tool] = {"amp O2 --opset-upgrade": amp_o2_upgrade, **TOOLS}


def casts(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "Cast" for g in graphs(model.graph) for n in g.node)


def weight_bytes(model: onnx.ModelProto) -> int:
    total = 0
    for g in graphs(model.graph):
        for t in g.initializer:
            total += len(t.raw_data) or onnx.numpy_helper.to_array(t).nbytes
    return total


def traffic(model: onnx.ModelProto, dims: dict[str, int]) -> int:
    """amp-convert's bytes-per-inference estimate of any model: values typed by its dtype
    inference (contrib schemas included), sized at ``dims``."""
    work = ir.serde.deserialize_model(_copy(model))
    _, inferred = analyse(work)
    InferDtypesPass(inferred)(work)
    return model_traffic(work, ShapeBook(work, dims))


def _first_line(e: BaseException) -> str:
    """The part of an error that says what broke (ORT's load error after its file name)."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    if "failed:" in text:
        text = "ORT cannot load it: " + text.split("failed:", 1)[1]
    elif not isinstance(e, ValueError | RuntimeError):
        text = f"{type(e).__name__}: {text}"
    return text.replace("|", "/")[:110]


def conversions(
    row: dict[str, Any], model: onnx.ModelProto, tools: dict[str, Tool] = TOOLS
) -> Iterator[tuple[dict[str, Any], tuple[onnx.ModelProto, Any] | None]]:
    """Each tool's row (`row`'s keys and the tool's name) and what it returned (model, report),
    or None when it raised: the row then holds the error's first line."""
    for tool, fn in tools.items():
        mine = {**row, "tool": tool}
        converted = None
        try:
            converted = fn(model)
        except Exception as e:
            mine["error"] = _first_line(e)
        yield mine, converted


def measure(
    name: str,
    model: onnx.ModelProto,
    dims: dict[str, int],
    steps: int,
    decoder: bool,
    tools: dict[str, Tool] = TOOLS,
) -> list[dict[str, Any]]:
    """One row per tool, after the FP32 model's own row."""
    rows = []
    amp_dims: dict[str, int] = {}  # amp's report says which dims its traffic figure took
    for row, converted in conversions({"model": name}, model, tools):
        rows.append(row)
        if converted is None:
            continue
        out, report = converted
        if report is not None:  # amp's own figure, from its report
            amp_dims = dict(report.traffic_dims)
            row["traffic"] = report.traffic.get("result")
        _fill(row, model, out, amp_dims, dims, steps if decoder else 0)
    fp32: dict[str, Any] = {"model": name, "tool": "FP32", "casts_added": 0}
    fp32["weight_bytes"] = weight_bytes(model)
    try_into(fp32, "traffic", traffic, model, amp_dims)
    return [fp32, *rows]


def _fill(
    row: dict[str, Any],
    model: onnx.ModelProto,
    out: onnx.ModelProto,
    amp_dims: dict[str, int],
    dims: dict[str, int],
    steps: int,
) -> None:
    row["casts_added"] = casts(out) - casts(model)
    row["weight_bytes"] = weight_bytes(out)
    try_into(row, "traffic_remeasured", traffic, out, amp_dims)
    row.setdefault("traffic", row.get("traffic_remeasured"))
    try_into(row, "cosine", emulate_cosine, model, out, dims=dims)
    if steps:
        try_into(row, "tokens", _tokens, model, out, dims, steps)


def try_into(
    row: dict[str, Any], key: str, what: Callable[..., Any], *args: Any, **kw: Any
) -> None:
    """``row[key] = what(*args, **kw)``, or ``row[key + "_error"]`` the first line of what it
    raised."""
    try:
        row[key] = what(*args, **kw)
    except Exception as e:
        row[f"{key}_error"] = _first_line(e)


def emulate_cosine(
    ref: onnx.ModelProto,
    cand: onnx.ModelProto,
    *,
    dims: dict[str, int] | None = None,
    inputs: dict[str, np.ndarray] | None = None,
) -> float:
    """The lowest output cosine of `cand` against `ref` under the emulator (no timing runs)."""
    report = validate(ref, cand, provider="emulate", dims=dims or None, inputs=inputs, runs=0)
    return min(1.0 if o.cosine is None else o.cosine for o in report.outputs)


def _tokens(ref: onnx.ModelProto, cand: onnx.ModelProto, dims: dict[str, int], steps: int) -> str:
    report = validate(ref, cand, provider="emulate", dims=dims or None, runs=0, decode_steps=steps)
    dec = report.decode
    assert dec is not None
    same = sum(s.same_token for s in dec.steps)
    return f"{same}/{len(dec.steps)}"


def models(layers: int, hidden: int, heads: int) -> list[tuple[str, onnx.ModelProto, dict, bool]]:
    """(name, model, validation dims, is a decoder)."""
    size = {"layers": layers, "hidden": hidden, "heads": heads}
    gpt2_dims = {"past_sequence_length": 16, "sequence_length": 16}
    llama_dims = {"past_sequence_length": 16, "sequence_length": 16, "total_sequence_length": 32}
    s2s_dims = {"decoder_sequence_length": 16, "encoder_sequence_length": 16}
    return [
        ("fused_bert", fused_bert(**size, max_positions=128), {}, False),
        ("bert_plain+optimize_model", ort_optimized_bert(**size), {}, False),
        ("fused_gpt2_past", fused_gpt2_past(**size, max_positions=128), gpt2_dims, True),
        ("genai_llama (GQA)", genai_llama(**size, intermediate=4 * hidden), llama_dims, True),
        (
            "genai_llama (MHA)",
            genai_llama(**size, intermediate=4 * hidden, attention="mha"),
            llama_dims,
            True,
        ),
        (
            "decoder_with_past",
            decoder_with_past(layers=layers, hidden=hidden, heads=heads),
            {},
            True,
        ),
        (
            "decoder_model_merged",
            decoder_model_merged(layers=layers, hidden=hidden, heads=heads),
            {},
            True,
        ),
        ("qdq_encoder (quantize_static)", qdq_encoder(hidden=hidden, ffn=4 * hidden), {}, False),
        (
            "seq2seq_decoder (mask fill)",
            seq2seq_decoder(hidden=hidden, heads=heads),
            s2s_dims,
            False,
        ),
        (
            "seq2seq_decoder merged (If)",
            seq2seq_decoder(merged=True, hidden=hidden, heads=heads),
            s2s_dims,
            False,
        ),
        ("trained: tiny biases", tiny_bias_linear(features=hidden, hidden=4 * hidden), {}, False),
        ("trained: conv tail", conv_tiny_tail(), {}, False),
        ("trained: BN tiny tail", bn_tiny_tail(), {}, False),
        ("torch 1.2: weights as inputs", torch12_face_detector(), {}, False),
        ("paddle LN opset 12 (Transpose)", paddle_ln_after_transpose(), {}, False),
        ("jax2tf E[x^2]-E[x]^2 LN", jax_moments_ln(), {}, False),
        ("x.mean((2,3)) dynamo", mean_pool_cnn("dynamo"), {}, False),
        ("x.mean((2,3)) torchscript", mean_pool_cnn("torchscript"), {}, False),
        ("MobileViTv2 linear attention", linear_attention(), {}, False),
    ]


def table(rows: list[dict[str, Any]], steps: int) -> str:
    head = [
        "model",
        "tool",
        "casts added",
        "weight bytes",
        "traffic (vs FP32)",
        "emulate cosine",
        f"same token ({steps} steps)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["tool"] == "FP32":
            base[r["model"]] = r
        fp32 = base[r["model"]]
        if "error" in r:
            cells = [f"fails: {r['error']}", "", "", "", ""]
        else:
            t = r.get("traffic")
            ratio = f" ({t / fp32['traffic']:.2f}x)" if t and fp32.get("traffic") else ""
            cells = [
                str(r["casts_added"]),
                f"{r['weight_bytes']:,}",
                f"{t:,}{ratio}" if t else r.get("traffic_error", "-"),
                f"{r['cosine']:.6f}" if "cosine" in r else r.get("cosine_error", "-"),
                r.get("tokens") or r.get("tokens_error", "-"),
            ]
            if cells[4] == cells[3] and "cosine_error" in r:
                cells[4] = "(same error)"
            if r["tool"] == "FP32":
                cells[3:] = ["1", "-"]
        lines.append("| " + " | ".join([r["model"], r["tool"], *cells]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8, help="decode steps for the decoders")
    ap.add_argument("--only", nargs="*", help="model names to run (default: all)")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    needs("onnxruntime", "onnxconverter_common")
    rows: list[dict[str, Any]] = []
    for name, model, dims, decoder in models(args.layers, args.hidden, args.heads):
        if args.only and name not in args.only:
            continue
        print(f"measuring {name} ...", file=sys.stderr)
        tools = QDQ_TOOLS if name.startswith("qdq") else TOOLS
        rows += measure(name, model, dims, args.steps, decoder, tools)
    print(table(rows, args.steps))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
