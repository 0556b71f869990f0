"""--auto vs onnxconverter-common's auto_convert_mixed_precision on the same models and inputs.

Both search for a model that meets the same thresholds (min cosine 0.999 and no new NaN/Inf on
every output) on the same calibration inputs, and both judge candidates under FP16 emulation:
the peer's candidate runs go through amp-convert's emulator too, because ORT CPU runs FP16 nodes
in FP32 and would hide the overflow both are looking for. Reported per model: ORT sessions
(counted by wrapping onnxruntime.InferenceSession), wall time, float nodes in FP16, final accuracy
under emulate (cosine, new NaN/Inf), and peak RSS of the --auto search for the >2 GB model.

    PYTHONPATH=. python bench/auto_bench.py [--layers 4] [--seq 64] [--skip-peer-bert] [--big]
"""

from __future__ import annotations

import argparse
import contextlib
import io as pyio
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnx

import amp_convert
from amp_convert.auto import auto_convert
from amp_convert.validation.emulate import build_emulated_model
from amp_convert.validation.metrics import Thresholds, compare_output
from bench._needs import needs
from bench._progress import progress
from models import overflow as ov

THRESHOLDS = Thresholds(min_cosine=0.999, max_nan=0)
COUNT = {"sessions": 0}


def count_sessions() -> None:
    """Count every ONNX Runtime session anyone opens (ours and the peer's) in COUNT."""
    import onnxruntime as ort

    real = ort.InferenceSession

    class _Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **k):
            COUNT["sessions"] += 1
            super().__init__(*a, **k)

    ort.InferenceSession = _Counted


def _accuracy(model: onnx.ModelProto, result: onnx.ModelProto, feeds: dict) -> tuple[float, int]:
    rep = amp_convert.validate(
        model, result, provider="emulate", inputs=feeds, runs=0, thresholds=THRESHOLDS
    )
    return min(o.cosine for o in rep.outputs), sum(o.nonfinite for o in rep.outputs)


def _float_nodes(model: onnx.ModelProto) -> tuple[int, int]:
    """(nodes computing in FP16, float nodes), main graph, inserted Casts left out."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    types.update({v.name: v.type.tensor_type.elem_type for v in inferred.graph.output})
    low = total = 0
    for n in model.graph.node:
        if n.op_type == "Cast":
            continue
        outs = [types.get(o) for o in n.output]
        if onnx.TensorProto.FLOAT16 in outs:
            low += 1
            total += 1
        elif onnx.TensorProto.FLOAT in outs:
            total += 1
    return low, total


def run_ours(model: onnx.ModelProto, feeds: dict, margin: float = 2.0) -> dict:
    COUNT["sessions"] = 0
    t = time.perf_counter()
    result, report = auto_convert(model, inputs=feeds, thresholds=THRESHOLDS, margin=margin)
    seconds = time.perf_counter() - t
    sessions = COUNT["sessions"]
    assert sessions == report.sessions, (sessions, report.sessions)
    row = _measured(model, result, feeds, sessions, seconds)
    return {**row, "pinned": len(report.pinned), "passed": report.passed}


def run_peer(model: onnx.ModelProto, feeds: dict) -> dict:
    from onnxconverter_common import auto_mixed_precision as amp

    real_get = amp.get_tensor_values_using_ort

    def emulated_get(m, input_feed, output_names=None, sess_options=None):
        if (
            output_names is None
            and any(t.data_type == onnx.TensorProto.FLOAT16 for t in m.graph.initializer)
        ) or any(n.op_type == "Cast" for n in m.graph.node):
            m = build_emulated_model(m).model
        return real_get(m, input_feed, output_names, sess_options)

    def validate(ref, cand) -> bool:
        return all(
            compare_output(str(i), r, c, THRESHOLDS).passed
            for i, (r, c) in enumerate(zip(ref, cand, strict=True))
        )

    amp.get_tensor_values_using_ort = emulated_get
    COUNT["sessions"] = 0
    t = time.perf_counter()
    try:
        with contextlib.redirect_stdout(pyio.StringIO()):
            result = amp.auto_convert_mixed_precision(
                model, feeds, validate_fn=validate, keep_io_types=True
            )
        error = None
    except Exception as e:  # the peer gives up: report how far it got
        result, error = None, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    finally:
        amp.get_tensor_values_using_ort = real_get
    seconds = time.perf_counter() - t
    sessions = COUNT["sessions"]
    if result is None:
        return {"sessions": sessions, "seconds": seconds, "error": error}
    return _measured(model, result, feeds, sessions, seconds)


def _measured(
    model: onnx.ModelProto, result: onnx.ModelProto, feeds: dict, sessions: int, seconds: float
) -> dict:
    """A search's row: its cost, how much of the model it made low, and the result's accuracy."""
    cos, bad = _accuracy(model, result, feeds)
    low, total = _float_nodes(result)
    return {
        "sessions": sessions,
        "seconds": seconds,
        "low": low,
        "total": total,
        "cosine": cos,
        "nonfinite": bad,
    }


_BIG_CODE = """
import sys, threading, time
import numpy as np
from models.big import write_big_model
from amp_convert.auto import auto_convert


def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) // 1024
    return out


info = write_big_model(sys.argv[1] + "/big.onnx")
peak = {"RssAnon": 0, "RssFile": 0}


def sample():
    while True:
        s = status()
        for k in peak:
            peak[k] = max(peak[k], s[k])
        time.sleep(0.02)


threading.Thread(target=sample, daemon=True).start()
t = time.perf_counter()
m, rep = auto_convert(sys.argv[1] + "/big.onnx", inputs={"x": np.ones((4, 1024), np.float32)})
dt = time.perf_counter() - t
print(info.data_bytes, rep.passed, rep.sessions, round(dt, 1), status()["VmHWM"],
      peak["RssAnon"], peak["RssFile"])
"""


def big_rss(tmp: Path) -> str:
    """Peak RSS of --auto on a >2 GB external-data model, in a fresh process.

    VmHWM counts the weights' memory-mapped pages of the data file (clean page cache the kernel
    can drop) as well as private memory; the private (anonymous) peak is sampled every 20 ms.
    """
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _BIG_CODE, str(tmp)], capture_output=True, text=True, check=True
    )
    size, passed, sessions, seconds, hwm, anon, mapped = out.stdout.split()
    return (
        f"{int(size) / 1e9:.2f} GB external-data model: passed {passed}, {sessions} sessions, "
        f"{seconds} s, peak RSS (VmHWM) {int(hwm)} MiB = private <= {int(anon)} MiB + "
        f"memory-mapped weights <= {int(mapped)} MiB"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2, help="BERT-base-width encoder layers")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--skip-peer-bert", action="store_true")
    ap.add_argument("--big", action="store_true", help="also the >2 GB model (peak RSS)")
    args = ap.parse_args(argv)
    needs("onnxruntime", "onnxconverter_common")
    count_sessions()
    warnings.filterwarnings("ignore", module="onnxconverter_common")
    rng = np.random.default_rng(0)
    cases = []
    for name, builder, kind in (
        ("ReduceSum accumulation", ov.reduce_sum_overflow, "normal"),
        ("MatMul accumulation", ov.matmul_overflow, "normal"),
        ("Exp of large logits", ov.exp_overflow, "normal"),
        ("hand variance (wide)", ov.hand_variance, "wide"),
        ("hand variance (offset)", ov.hand_variance, "offset"),
        ("Exp inside an If branch", ov.if_exp_overflow, "normal"),
    ):
        model, _ = builder()
        cases.append((name, model, ov.calibration(model, kind)))
    bert, _ = ov.bert_outliers(layers=args.layers, hidden=768, heads=12, seq=args.seq, vocab=1000)
    ids = rng.integers(0, 1000, (1, args.seq)).astype(np.int64)
    cases.append(
        (f"BERT-base width, {args.layers} layers, seq {args.seq}", bert, {"input_ids": ids})
    )
    head = ["model", "float nodes", "tool", "ORT sessions", "time (s)", "FP16 nodes", "cosine"]
    print("| " + " | ".join([*head, "new NaN/Inf"]) + " |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    auto_convert(*cases[0][1:2], inputs=cases[0][2])  # warm-up: imports, first session
    for name, model, feeds in cases:
        for margin in (2.0, 1.0):
            progress(f"{name}: amp-convert --auto, margin {margin:g}")
            ours = run_ours(model, feeds, margin)
            label = "amp-convert --auto" + (" (margin 1)" if margin == 1.0 else "")
            print(
                f"| {name if margin == 2.0 else ''} | {ours['total']} | {label} | "
                f"{ours['sessions']} | {ours['seconds']:.2f} | {ours['low']} | "
                f"{ours['cosine']:.5f} | {ours['nonfinite']} |",
                flush=True,
            )
            if margin == 2.0:
                first = ours
        if name.startswith("BERT") and args.skip_peer_bert:
            continue
        progress(f"{name}: onnxconverter-common's auto_convert_mixed_precision")
        peer = run_peer(model, feeds)
        if "error" in peer:
            print(
                f"| | | onnxconverter-common | {peer['sessions']} | {peer['seconds']:.2f} | "
                f"failed: {peer['error']} | | |",
                flush=True,
            )
            continue
        print(
            f"| | | onnxconverter-common | {peer['sessions']} | {peer['seconds']:.2f} | "
            f"{peer['low']} | {peer['cosine']:.5f} | {peer['nonfinite']} |",
            flush=True,
        )
        print(
            f"| | | ratio (peer / ours) | {peer['sessions'] / first['sessions']:.1f}x | "
            f"{peer['seconds'] / first['seconds']:.1f}x | | | |",
            flush=True,
        )
    if args.big:
        progress("the >2 GB model: written, then --auto in a fresh process")
        with tempfile.TemporaryDirectory() as tmp:
            print("\n" + big_rss(Path(tmp)))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"\n(this process peak RSS {rss} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
