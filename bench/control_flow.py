"""Casts and traffic of models with control flow and KV-cache I/O, per level (issue 19 items 2-3).

    PYTHONPATH=. python bench/control_flow.py [--levels O1 O2 O3]

For each model and level: Cast nodes before -> after, the traffic estimate of the result relative
to the FP32 original and to the all-low graph (1.00x = as good as every value in low precision
with the FP32 interface), and the Casts left inside If/Loop/Scan bodies. The decoders are also
converted with ``--low-io`` for their KV cache. Figures come from the converter's own report; no
onnxruntime needed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx

import amp_convert
from models.blocks import loop_rnn, scan_rnn
from models.decoders import decoder_model_merged, decoder_with_past
from models.focused import if_outer_capture, loop_outer_capture

KV_CACHE = ("past_key_values\\..*", "present\\..*")
MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "decoder_with_past": decoder_with_past,
    "decoder_model_merged": decoder_model_merged,
    "loop_rnn": loop_rnn,
    "scan_rnn": scan_rnn,
    "if_outer_capture": if_outer_capture,
    "loop_outer_capture": loop_outer_capture,
}


def _body_casts(graph: onnx.GraphProto, inside: bool = False) -> int:
    count = sum(1 for n in graph.node if inside and n.op_type == "Cast")
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                count += _body_casts(attr.g, True)
    return count


def row(name: str, level: str, **options: object) -> str:
    out, report = amp_convert.convert(MODELS[name](), level=level, return_report=True, **options)
    t = report.traffic
    label = name + (" --low-io KV" if options.get("low_io") else "")
    return (
        f"| {label} | {level} | {report.casts_before} -> {report.casts_after} | "
        f"{_body_casts(out.graph)} | {t['result'] / t['original']:.3f} | "
        f"{t['result'] / t['all_low']:.2f}x |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", nargs="+", default=["O1", "O2", "O3"])
    args = parser.parse_args(argv)
    print("| model | level | Cast nodes | casts in bodies | traffic vs FP32 | vs all-low |")
    print("|---|---|---|---|---|---|")
    for name in MODELS:
        for level in args.levels:
            print(row(name, level))
        if name.startswith("decoder"):
            for level in args.levels:
                print(row(name, level, low_io=list(KV_CACHE)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
