"""PyTorch's exporters against issue 32's folds: x.mean((2, 3)) and weights listed as inputs.

    python bench/torch_exports.py [--json FILE]

Needs torch (CPU) with onnxscript for the dynamo exporter, onnxruntime and onnxconverter-common.
Exports one tiny random-initialised CNN (Conv-BN-ReLU twice, ``x.mean((2, 3))``, Linear; seeded,
eval mode, input [1, 3, 32, 32]) four ways:

* ``torchscript``: ``torch.onnx.export(dynamo=False, opset_version=17)`` (BN folded by the
  exporter's constant folding);
* ``torchscript, BN kept``: the same with ``do_constant_folding=False`` (BatchNormalization nodes
  in the graph, as older exports have them);
* ``dynamo``: ``torch.onnx.export(dynamo=True)`` (its default opset; ReduceMean's axes an input);
* ``old-style``: ``dynamo=False, opset_version=9, keep_initializers_as_inputs=True,
  do_constant_folding=False``: every weight also a graph input, BNs in the graph, as torch
  1.2-era exports wrote them.

Each goes through amp-convert (defaults: O2, ``--target ort-cuda``), ORT's
``onnxruntime.transformers.float16`` and onnxconverter-common (both ``keep_io_types=True``).
Printed per export and tool: casts added, for amp-convert what became of the mean
(GlobalAveragePool / ReduceMean nodes left), the BNs (folded), the initializers listed as inputs
(the report's case and count) and the weights stored FP16; and the worst output's cosine against
FP32 under ``validate --provider emulate`` on seeded random inputs.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._needs import needs
from bench.pipelines import casts, conversions, emulate_cosine, try_into

#: export name -> torch.onnx.export keyword arguments
EXPORTS: dict[str, dict[str, Any]] = {
    "torchscript": {"dynamo": False, "opset_version": 17},
    "torchscript, BN kept": {"dynamo": False, "opset_version": 17, "do_constant_folding": False},
    "dynamo": {"dynamo": True},
    "old-style (opset 9, weights as inputs)": {
        "dynamo": False,
        "opset_version": 9,
        "keep_initializers_as_inputs": True,
        "do_constant_folding": False,
    },
}


def network() -> Any:
    """The module: two Conv-BN-ReLU stages, the global mean as PyTorch code writes it, a Linear."""
    import torch

    class MeanPoolCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.b1 = torch.nn.BatchNorm2d(16)
            self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.b2 = torch.nn.BatchNorm2d(32)
            self.fc = torch.nn.Linear(32, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = torch.relu(self.b1(self.c1(x)))
            x = torch.relu(self.b2(self.c2(x)))
            return self.fc(x.mean((2, 3)))

    torch.manual_seed(0)
    net = MeanPoolCNN()
    with torch.no_grad():  # running statistics a trained network would have, not 0 and 1
        for bn in (net.b1, net.b2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return net.eval()


def export(net: Any, how: dict[str, Any]) -> onnx.ModelProto:
    import torch

    x = torch.randn(1, 3, 32, 32)
    names = {"input_names": ["x"], "output_names": ["y"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how.get("dynamo"):
            program = torch.onnx.export(net, (x,), **names, **how)
            assert program is not None
            return program.model_proto
        buffer = io.BytesIO()
        torch.onnx.export(net, (x,), buffer, **names, **how)
    return onnx.load_from_string(buffer.getvalue())


_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)


def _ops(model: onnx.ModelProto, op: str) -> int:
    return sum(n.op_type == op for n in model.graph.node)


def measure(name: str, model: onnx.ModelProto) -> list[dict[str, Any]]:
    rows = []
    for row, converted in conversions({"export": name}, model):
        rows.append(row)
        if converted is None:  # a tool that fails gets its first line
            continue
        out, report = converted
        row["casts_added"] = casts(out) - casts(model)
        row["global_pool"] = _ops(out, "GlobalAveragePool")
        row["reduce_mean"] = _ops(out, "ReduceMean")
        bns = (_ops(m, "BatchNormalization") for m in (model, out))
        row["batch_norms"] = " -> ".join(map(str, bns))
        row["inputs"] = f"{len(model.graph.input)} -> {len(out.graph.input)}"
        floats = [t.data_type for t in out.graph.initializer if t.data_type in _FLOATS]
        row["fp16_weights"] = f"{floats.count(onnx.TensorProto.FLOAT16)}/{len(floats)}"
        listed = getattr(report, "initializer_inputs", None)  # (older checkouts: no such field)
        if listed is not None:
            row["initializer_inputs"] = f"{listed.count} {listed.case}"
        try_into(row, "cosine", emulate_cosine, model, out)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "export",
        "tool",
        "casts added",
        "GlobalAveragePool / ReduceMean",
        "BN nodes",
        "graph inputs",
        "FP16 / float weights",
        "emulate cosine",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['export']} | {r['tool']} | fails: {r['error']} |" + " |" * 5)
            continue
        cos = f"{r['cosine']:.6f}" if "cosine" in r else r.get("cosine_error", "-")
        listed = r.get("initializer_inputs")
        inputs = r["inputs"] + (f" ({listed})" if listed else "")
        cells = [
            r["export"],
            r["tool"],
            str(r["casts_added"]),
            f"{r['global_pool']} / {r['reduce_mean']}",
            r["batch_norms"],
            inputs,
            r["fp16_weights"],
            cos,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    needs("torch", "onnxruntime", "onnxconverter_common")
    import torch

    net = network()
    rows: list[dict[str, Any]] = []
    for name, how in EXPORTS.items():
        print(f"exporting and measuring {name} ...", file=sys.stderr)
        try:
            model = export(net, how)
        except Exception as e:  # an exporter that refuses is a row, never a pass
            rows.append({"export": name, "tool": "export", "error": str(e).splitlines()[0][:100]})
            continue
        rows += measure(name, model)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
