"""Latency as users deploy, and where a variant's GPU time goes, op by op (ORT CUDA provider).

For each model of ``gpu_bench.py`` (ResNet-50 b128, BERT-base b64 s128, GPT-2 b8 s512) and each
variant (FP32, amp-convert O2, onnxconverter-common "OCC", plus hypothesis variants given with
``--pow16``), three latencies in one session each, interleaved A B A B across the variants:

* ``host``: ``session.run`` with numpy feeds and host outputs (copies in every run);
* ``bound``: I/O binding, inputs copied to the device once, outputs left there (how a server
  that keeps tensors on the GPU runs; what ``validate --provider cuda`` times);
* ``nhwc``: ``bound`` with the CUDA provider option ``prefer_nhwc=1`` (CNNs only).

``--profile A,B`` also runs each named variant once with ORT's profiler on and prints, per op type,
the summed kernel time of the two side by side (the largest differences first), and the op counts of
the graph ORT actually ran (its optimised model: fusions such as FastGelu, SkipLayerNormalization).

    PYTHONPATH=. python bench/gpu_deploy.py --out /tmp/deploy                # on a GPU machine
    PYTHONPATH=. python bench/gpu_deploy.py --provider cpu --small --runs 3  # a CPU check
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnx

from amp_convert.validation.runtime import CPU_EP, CUDA_EP, Runner, import_ort, run_once, time_runs
from bench._gpu_models import FULL, MODEL_KEYS, SMALL, build_model
from bench._gpu_run import (
    cuda_unavailable_reason,
    make_variant,
    output_errors,
    reference_outputs,
)
from bench._needs import needs, no_gpu

BASE_VARIANTS = ("FP32", "O2", "OCC")
_KERNEL = "_kernel_time"


def pow16_variant(src: Path, folder: Path) -> Path:
    """O2 with every float32 scalar Pow exponent stored as float16 (what OCC writes): the
    hypothesis that a mixed-type Pow keeps ORT from fusing or from its fast kernel."""
    o2 = folder / f"{src.stem}.O2.onnx"
    model = onnx.load(str(o2), load_external_data=False)
    consts = {t.name: t for t in model.graph.initializer}
    changed = 0
    for node in model.graph.node:
        if node.op_type == "Pow" and node.input[1] in consts:
            t = consts[node.input[1]]
            if t.data_type == onnx.TensorProto.FLOAT:
                arr = onnx.numpy_helper.to_array(t).astype(np.float16)
                t.CopyFrom(onnx.numpy_helper.from_array(arr, t.name))
                changed += 1
    dst = folder / f"{src.stem}.O2pow16.onnx"
    data = o2.name + ".data"
    for t in model.graph.initializer:  # the external weights stay in O2's data file
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = data
    onnx.save(model, str(dst))
    print(f"O2pow16: {changed} Pow exponents stored as float16", file=sys.stderr)
    return dst


def open_runner(path: Path, provider: str, options: dict[str, str], profile: str | None) -> Runner:
    ort = import_ort()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if profile is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile
        so.optimized_model_filepath = profile + ".optimized.onnx"
    providers: list[Any] = [(CUDA_EP, options), CPU_EP] if provider == "cuda" else [CPU_EP]
    sess = ort.InferenceSession(str(path), so, providers=providers)
    inputs = {i.name: (i.type, list(i.shape)) for i in sess.get_inputs()}
    outputs = [(o.name, o.type) for o in sess.get_outputs()]
    return Runner(sess, provider, inputs, outputs)


def host_runs(runner: Runner, feeds: dict[str, np.ndarray], runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        runner.session.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        runner.session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1000.0)
    return times


def op_times(profile_json: str) -> dict[str, float]:
    """Summed kernel time (ms) per op type over the profiled runs."""
    with open(profile_json, encoding="utf-8") as f:
        events = json.load(f)
    out: dict[str, float] = defaultdict(float)
    for ev in events:
        if ev.get("cat") == "Node" and str(ev.get("name", "")).endswith(_KERNEL):
            args = ev.get("args") or {}
            out[str(args.get("op_name", "?"))] += float(ev.get("dur", 0)) / 1000.0
    return dict(out)


def graph_ops(path: str) -> Counter[str]:
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:
        return Counter()
    return Counter(n.op_type for n in model.graph.node)


def profile_variant(path: Path, provider: str, feeds: dict[str, np.ndarray], prefix: str, n: int):
    runner = open_runner(path, provider, {}, prefix)
    for _ in range(2):  # warm: the first runs pick algorithms
        runner.session.run(None, feeds)
    runner.session.end_profiling()
    runner = open_runner(path, provider, {}, prefix + "_b")
    runner.session.run(None, feeds)
    for _ in range(n):
        runner.session.run(None, feeds)
    ops = op_times(runner.session.end_profiling())
    return {k: v / (n + 1) for k, v in ops.items()}, graph_ops(prefix + ".optimized.onnx")


def measure_model(key: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    specs = SMALL if args.small else FULL
    folder = root / key
    folder.mkdir(parents=True, exist_ok=True)
    built = build_model(specs[key], folder)
    print(f"[{key}] built {built.spec.title}, {built.nodes} nodes", file=sys.stderr, flush=True)
    reference, label = reference_outputs(built.path, args.provider, built.feeds)
    paths: dict[str, Path] = {}
    for v in BASE_VARIANTS:
        t0 = time.perf_counter()
        paths[v] = make_variant(v, built.path, folder, target="ort-cuda")
        print(f"[{key}] {v} made in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    if args.pow16 and key == "gpt":
        paths["O2pow16"] = pow16_variant(built.path, folder)
    modes = ["host", "bound"] + (["nhwc"] if key == "cnn" else [])
    result: dict[str, Any] = {"title": built.spec.title, "reference": label, "variants": {}}
    for v, path in list(paths.items()):
        try:
            runner = open_runner(path, args.provider, {}, None)
            outs = run_once(runner, built.feeds, v)
        except Exception as e:  # a peer's output that does not load: said, not timed
            result["variants"][v] = {"error": str(e).splitlines()[0][:200]}
            del paths[v]
            continue
        errs = output_errors(reference, outs)
        result["variants"][v] = {
            "cosine": min((e.cosine for e in errs if e.cosine is not None), default=None),
            "rel": max((e.rel for e in errs if e.rel is not None), default=None),
            **{m: [] for m in modes},
        }
        runner.close()
    # A B A B: each round opens one session per (variant, mode) and times a block of runs
    for _ in range(args.rounds):
        for v, path in paths.items():
            for mode in modes:
                options = {"prefer_nhwc": "1"} if mode == "nhwc" else {}
                runner = open_runner(path, args.provider, options, None)
                if mode == "host":
                    t = host_runs(runner, built.feeds, args.runs, args.warmup)
                else:
                    t = time_runs(runner, built.feeds, runs=args.runs, warmup=args.warmup)
                result["variants"][v][mode].extend(t)
                runner.close()
    for v in paths:
        for mode in modes:
            ts = result["variants"][v][mode]
            result["variants"][v][mode] = {"median": float(np.median(ts)), "runs": len(ts)}
    if key in args.profile_models:
        prof: dict[str, Any] = {}
        for v in args.profile:
            if v in paths:
                prefix = str(folder / f"prof_{key}_{v}")
                ops, graph = profile_variant(paths[v], args.provider, built.feeds, prefix, 5)
                prof[v] = {"op_ms": ops, "ran_ops": dict(graph)}
        result["profile"] = prof
    return result


def print_model(key: str, res: dict[str, Any]) -> None:
    print(f"\n## {res['title']} ({key}); errors against {res['reference']}")
    fp32 = res["variants"].get("FP32", {})
    for v, r in res["variants"].items():
        if "error" in r:
            print(f"{v:8s} fails: {r['error']}")
            continue
        cells = []
        for mode in ("host", "bound", "nhwc"):
            if mode in r:
                med = r[mode]["median"]
                base = fp32.get(mode, {}).get("median")
                ratio = f" ({base / med:.2f}x)" if base else ""
                cells.append(f"{mode} {med:8.3f} ms{ratio}")
        cos = r["cosine"]
        print(f"{v:8s} " + "  ".join(cells) + f"  cosine {cos if cos is None else f'{cos:.6f}'}")
    prof = res.get("profile")
    if prof and len(prof) >= 2:
        names = list(prof)
        a, b = prof[names[0]]["op_ms"], prof[names[1]]["op_ms"]
        ops = sorted(set(a) | set(b), key=lambda o: -abs(a.get(o, 0) - b.get(o, 0)))
        print(f"kernel ms per run by op type: {names[0]} vs {names[1]} (largest differences first)")
        for o in ops[:25]:
            ta, tb = a.get(o, 0.0), b.get(o, 0.0)
            print(f"  {o:32s} {ta:8.3f} {tb:8.3f}  Δ {ta - tb:+.3f}")
        print(f"  {'total':32s} {sum(a.values()):8.3f} {sum(b.values()):8.3f}")
        for n in names:
            ran = prof[n]["ran_ops"]
            print(f"ops ORT ran for {n}: " + ", ".join(f"{k}×{c}" for k, c in sorted(ran.items())))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(MODEL_KEYS), help="models (cnn,bert,gpt)")
    p.add_argument("--provider", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--small", action="store_true", help="tiny models (a CPU check)")
    p.add_argument("--runs", type=int, default=20, help="timed runs per block (default 20)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2, help="A B A B rounds (default 2)")
    p.add_argument("--pow16", action="store_true", help="GPT-2: add the O2pow16 variant")
    p.add_argument("--profile", default="O2,OCC", help="variants to profile per op (two)")
    p.add_argument("--profile-models", default="gpt", help="models to profile (default gpt)")
    p.add_argument("--out", type=Path, help="folder for the JSON figures and the models")
    args = p.parse_args(argv)
    needs("onnxruntime", "onnxconverter_common")
    args.profile = [v for v in args.profile.split(",") if v]
    args.profile_models = [m for m in args.profile_models.split(",") if m]
    if args.provider == "cuda":
        reason = cuda_unavailable_reason()
        if reason is not None:
            return no_gpu(reason)
    ort = import_ort()
    print(
        f"onnxruntime {ort.__version__}; provider {args.provider}; runs {args.runs} x "
        f"{args.rounds} rounds after {args.warmup} warm-up; command: python bench/gpu_deploy.py "
        + " ".join(argv if argv is not None else sys.argv[1:])
    )
    with tempfile.TemporaryDirectory(prefix="gpu-deploy-") as tmp:
        root = Path(tmp)
        results = {}
        for key in [k for k in args.only.split(",") if k]:
            results[key] = measure_model(key, args, root)
            print_model(key, results[key])
            sys.stdout.flush()
            if args.out is not None:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / "deploy.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
