"""Olive's FP16 passes vs the AmpConvert pass, each run as an Olive workflow (offline, CPU).

Models built in code: a BERT-like encoder, a ResNet-style CNN with BatchNormalization, and an ORT
GenAI-style Llama decoder (GroupQueryAttention, KV cache). Passes: Olive's ``OnnxFloatToFloat16``
(ORT's float16.py, ``keep_io_types`` on, as amp-convert's default), ``AmpConvert`` at O2 for the
CUDA execution provider (target ort-cuda), and ``OrtMixedPrecision`` where it runs. Per output:
whether ORT (CPU) loads it, casts added, amp-convert's bytes-per-inference estimate against the FP32
original, the emulated FP16 cosine against FP32 (``validate --provider emulate``, the worst output)
and the workflow's wall time.

    pip install -e ".[cpu,olive]"   # Olive needs PyTorch
    PYTHONPATH=. OLIVE_DISABLE_TELEMETRY=1 python bench/olive_fp16.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("OLIVE_DISABLE_TELEMETRY", "1")

import onnx

from amp_convert.validation import validate
from bench._needs import needs
from bench.pipelines import _toposorted, casts, traffic
from models.blocks import bert_encoder, resnet_cnn
from models.fused import genai_llama

PASSES: dict[str, dict[str, Any]] = {
    "OnnxFloatToFloat16": {"type": "OnnxFloatToFloat16", "keep_io_types": True},
    "AmpConvert O2": {"type": "AmpConvert", "level": "O2"},
    "OrtMixedPrecision": {"type": "OrtMixedPrecision"},
}


def _models() -> list[tuple[str, onnx.ModelProto, dict[str, int]]]:
    llama_dims = {"past_sequence_length": 16, "sequence_length": 16, "total_sequence_length": 32}
    return [
        ("BERT-like encoder", bert_encoder(layers=2, hidden=64, heads=4, vocab=100), {}),
        ("ResNet-style CNN", resnet_cnn(channels=8, image=32, classes=10, depths=[1, 1]), {}),
        ("GenAI Llama (GQA)", genai_llama(layers=2, hidden=64, heads=4), llama_dims),
    ]


def _workflow(model: Path, out: Path, pass_config: dict[str, Any]) -> dict[str, Any]:
    accelerator = {"device": "gpu", "execution_providers": ["CUDAExecutionProvider"]}
    return {
        "input_model": {"type": "ONNXModel", "model_path": str(model)},
        "systems": {"local": {"type": "LocalSystem", "accelerators": [accelerator]}},
        "passes": {"p": pass_config},
        "host": "local",
        "target": "local",
        "output_dir": str(out / "out"),
        "cache_dir": str(out / "cache"),
        "log_severity_level": 4,
    }


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:100]


def measure(name: str, model: onnx.ModelProto, dims: dict[str, int], package: Path, tmp: Path):
    src = tmp / f"{name.split()[0]}.onnx"
    onnx.save(model, src)
    base_casts, base_traffic = casts(model), traffic(model, dims)
    rows = []
    for label, config in PASSES.items():
        work = tmp / f"{src.stem}-{label.split()[0]}"
        row: dict[str, Any] = {"model": name, "pass": label}
        start = time.perf_counter()
        try:
            from olive.workflows import run as olive_run

            olive_run(_workflow(src, work, config), package_config=str(package))
        except Exception as e:
            row["error"] = _first_line(e)
        row["seconds"] = time.perf_counter() - start
        out = work / "out" / "model.onnx"
        if "error" not in row and not out.exists():
            row["error"] = "the workflow wrote no model (the pass failed)"
        if "error" not in row:
            try:
                import onnxruntime as ort

                ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
                row["loads"] = "yes"
            except Exception as e:
                row["loads"] = "no"
                row["load_error"] = _first_line(e)
            # ORT's float16.py leaves nodes out of topological order (ORT sorts them on load)
            converted = _toposorted(onnx.load(out))
            row["casts"] = casts(converted) - base_casts
            try:
                row["traffic"] = traffic(converted, dims) / base_traffic
            except Exception as e:
                row["traffic_error"] = _first_line(e)
            try:
                report = validate(model, converted, provider="emulate", dims=dims or None, runs=0)
                row["cosine"] = min(1.0 if o.cosine is None else o.cosine for o in report.outputs)
            except Exception as e:
                row["cosine_error"] = "-" if row["loads"] == "no" else _first_line(e)
        rows.append(row)
    return rows


def _traffic(row: dict[str, Any]) -> str:
    return f"{row['traffic']:.2f}x" if "traffic" in row else row.get("traffic_error", "")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | pass | loads in ORT | casts added | traffic vs FP32 | emulate cosine | time s |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['pass']} | fails: {r['error']} | | | | |")
            continue
        cos = f"{r['cosine']:.6f}" if "cosine" in r else r.get("cosine_error", "")
        lines.append(
            f"| {r['model']} | {r['pass']} | {r['loads']} | {r['casts']:+d} | "
            f"{_traffic(r)} | {cos} | {r['seconds']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    needs("onnxruntime", "olive")
    from amp_convert.olive import merged_package_config

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        package = merged_package_config(tmp / "package_config.json")
        rows = [r for name, m, dims in _models() for r in measure(name, m, dims, package, tmp)]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
