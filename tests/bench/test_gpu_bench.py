"""bench/gpu_bench.py: the no-GPU exit, the whole pipeline on the CPU provider, profile parsing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from bench import _gpu_run as gpu_run
from bench._gpu_profile import CPU_EP, placement_from_events, read_profile
from bench._gpu_run import VARIANTS, Measurement, output_errors
from bench.gpu_bench import NO_GPU, cpu_placed_lines, parse_args, rows

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_bench.py"
CUDA_EP = "CUDAExecutionProvider"


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=full_env,
        timeout=300,
    )


def test_without_a_gpu_it_says_so_in_one_line_and_exits_2() -> None:
    pytest.importorskip("onnxconverter_common")  # the bench checks its peer first ([bench] extra)
    # No visible device: a CPU build lacks the provider, a GPU build's provider cannot start.
    # The CUDA provider is an optional dependency: one line and exit 2, as for a missing module.
    res = _bench("--runs", "1", env={"CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(NO_GPU + ": ")
    assert lines[0].endswith("or --provider cpu for a check on the CPU)")


def test_bad_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in [
        (["--only", "vit"], "unknown model vit (choose from cnn, bert, gpt)"),
        (["--only", "cnn", "--dim", "seq=8"], "--dim seq: no selected model has it (dims: batch)"),
        (["--variants", "O4"], "unknown variant O4 (choose from FP32, O1, O2, O3, OCC)"),
    ]:
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


def _table_rows(stdout: str) -> list[tuple[str, str, list[str]]]:
    """(model, variant, cells) of the printed table (the model cell is blank under its first)."""
    lines = stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("model "))
    starts = [
        i
        for i, ch in enumerate(lines[head + 1])
        if ch == "-" and (i == 0 or lines[head + 1][i - 1] == " ")
    ]
    out, model = [], ""
    for ln in lines[head + 2 :]:
        if not ln.strip():
            break
        model = ln[: starts[1]].strip() or model
        cells = ln[starts[1] :].split()
        out.append((model, cells[0], cells[1:]))
    return out


@pytest.mark.integration
def test_cpu_provider_runs_every_variant_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("onnxconverter_common")  # one of the measured variants ([bench] extra)
    js, md = tmp_path / "gpu.json", tmp_path / "gpu.md"
    res = _bench(
        "--provider",
        "cpu",
        "--small",
        "--runs",
        "2",
        "--warmup",
        "1",
        "--only",
        "cnn,gpt",
        "--dim",
        "batch=3",
        "--json",
        str(js),
        "--markdown",
        str(md),
    )
    assert res.returncode == 0, res.stderr
    assert "onnxruntime" in res.stdout and "(cpu provider)" in res.stdout
    table = _table_rows(res.stdout)
    titles = ["ResNet BN-in-graph (small) b3", "GPT-2 (small) b3 s16"]
    assert [(m, v) for m, v, _ in table] == [(t, v) for t in titles for v in VARIANTS]

    data = json.loads(js.read_text())
    assert data["meta"]["provider"] == "cpu" and data["meta"]["target"] == "ort-cuda"
    assert [m["key"] for m in data["models"]] == ["cnn", "gpt"]
    for mod in data["models"]:
        assert mod["dims"]["batch"] == 3
        variants = {v["variant"]: v for v in mod["variants"]}
        assert list(variants) == list(VARIANTS)
        for name, v in variants.items():
            if name == "OCC" and v["error"]:  # the peer's failures are reported, not raised
                continue
            assert v["error"] is None, v
            assert len(v["times_ms"]) == 2 and 0 < v["median_ms"] <= v["p90_ms"]
            assert [o["name"] for o in v["outputs"]] == ["logits"]
            pl = v["placement"]
            assert pl["nodes"] > 0 and pl["by_provider"] == {CPU_EP: pl["nodes"]}
            assert pl["memcpy"] == 0
            if name == "FP32":  # against itself (the CPU has no TF32)
                assert v["max_rel_err"] <= 1e-6 and v["min_cosine"] > 0.999999
            else:  # FP16 weights: a real, small error
                assert 1e-5 < v["max_rel_err"] < 1e-2, (mod["key"], name, v["max_rel_err"])
                assert v["min_cosine"] > 0.9999
    text = md.read_text()
    assert "| model | variant | median ms |" in text
    assert (
        sum(line.startswith("| ResNet") or line.startswith("| GPT") for line in text.splitlines())
        == 10
    )


def test_placement_counts_a_cuda_profile() -> None:
    def node(name: str, op: str, ep: str, types: list[str]) -> dict:
        args = {"op_name": op, "provider": ep, "input_type_shape": [{t: [2]} for t in types]}
        return {"cat": "Node", "name": f"{name}_kernel_time", "args": args}

    events = [
        {"cat": "Session", "name": "model_run", "args": {}},
        node("conv", "FusedConv", CUDA_EP, ["float16"]),
        {"cat": "Node", "name": "conv_fence_before", "args": {"op_name": "FusedConv"}},
        node("to_host", "MemcpyToHost", CUDA_EP, ["float16"]),
        node("bn", "BatchNormalization", CPU_EP, ["float16", "float"]),
        node("cast", "Cast", CPU_EP, ["float16"]),
        node("cast2", "Cast", CPU_EP, ["float"]),
        node("shape", "Shape", CPU_EP, ["int64"]),
        node("from_host", "MemcpyFromHost", CUDA_EP, ["float16"]),
    ]
    pl = placement_from_events(events)
    assert pl.nodes == 7
    assert pl.by_provider == {CUDA_EP: 3, CPU_EP: 4}
    assert pl.cpu_nodes == 4 and pl.cpu_float_nodes == 3 and pl.memcpy == 2
    assert pl.cpu_ops_text() == "Cast×2, BatchNormalization×1, Shape×1"

    mod = {
        "title": "ResNet-50 b128",
        "variants": [
            Measurement("FP32", median_ms=20.0, p90_ms=21.0, placement=placement_from_events([])),
            Measurement("O3", median_ms=80.0, p90_ms=90.0, placement=pl),
            Measurement("OCC", error="Fail: Load model failed: Type Error", stage="load"),
        ],
    }
    out = rows([mod])
    assert out[1][:5] == ["ResNet-50 b128", "O3", "80.000", "90.000", "0.25x"]
    assert out[1][7:] == ["7", "4", "2"]
    assert out[2][2] == "fails (load): Fail: Load model failed: Type Error"
    assert cpu_placed_lines([mod], "cuda") == [
        "CPU-placed nodes:",
        "- ResNet-50 b128 O3: 4 on CPU (3 with float tensors): "
        "Cast×2, BatchNormalization×1, Shape×1",
    ]
    assert cpu_placed_lines([mod], "cpu") == []


def test_read_profile_accepts_both_trace_layouts(tmp_path: Path) -> None:
    ev = [{"cat": "Node", "name": "a_kernel_time", "args": {"op_name": "Relu", "provider": CPU_EP}}]
    (tmp_path / "list.json").write_text(json.dumps(ev))
    (tmp_path / "dict.json").write_text(json.dumps({"traceEvents": ev}))
    for name in ("list.json", "dict.json"):
        pl = read_profile(tmp_path / name)
        assert (pl.nodes, pl.cpu_ops, pl.cpu_float_nodes) == (1, {"Relu": 1}, 0)


def test_output_errors_are_scale_relative_and_count_nonfinite() -> None:
    ref = {"y": np.array([10.0, -4.0, 0.001], np.float32), "ids": np.array([1, 2], np.int64)}
    cand = {"y": np.array([10.5, -4.0, 0.002], np.float32), "ids": np.array([1, 2], np.int64)}
    y, ids = output_errors(ref, cand)
    assert y.rel == pytest.approx(0.05, rel=1e-6)  # max|Δ| 0.5 over max|ref| 10
    assert y.max_rel_elementwise == pytest.approx(1.0, rel=1e-3)  # the 0.001 element doubled
    assert 0.99 < y.cosine < 1.0 and y.nonfinite == 0
    assert ids.rel is None and ids.cosine is None  # integer outputs are compared exactly
    (bad,) = output_errors({"y": ref["y"]}, {"y": np.array([np.nan, -4.0, 0.001], np.float32)})
    assert bad.nonfinite == 1 and bad.rel == float("inf") and bad.cosine < 0.9


def test_reference_falls_back_to_cpu_fp32_when_the_no_tf32_session_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def fake(path: Path, provider: str, feeds: dict) -> dict:
        calls.append(provider)
        if provider == "cuda":
            raise RuntimeError("unknown provider option use_tf32")
        return {"y": np.ones(2, np.float32)}

    monkeypatch.setattr(gpu_run, "_run_reference", fake)
    out, label = gpu_run.reference_outputs(Path("m.onnx"), "cuda", {})
    assert calls == ["cuda", "cpu"] and list(out) == ["y"]
    assert label == (
        "FP32, CPU provider (CUDA with use_tf32=0 failed: "
        "RuntimeError: unknown provider option use_tf32)"
    )
    calls.clear()
    assert gpu_run.reference_outputs(Path("m.onnx"), "cpu", {})[1] == "FP32, CPU provider"
    assert calls == ["cpu"]


def test_cuda_options_are_parsed_and_need_the_cuda_provider(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parse_args(["--cuda-option", "prefer_nhwc=1", "--cuda-option", " use_tf32 = 0 "])
    assert args.cuda_options == {"prefer_nhwc": "1", "use_tf32": "0"} and not args.nhwc
    assert parse_args(["--nhwc"]).nhwc
    for argv, message in [
        (["--cuda-option", "prefer_nhwc"], "expected KEY=VALUE, got 'prefer_nhwc'"),
        (["--cuda-option", "=1"], "expected KEY=VALUE, got '=1'"),
        (["--provider", "cpu", "--nhwc"], "they need --provider cuda"),
        (["--provider", "cpu", "--cuda-option", "a=b"], "they need --provider cuda"),
    ]:
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


class _FakeSession:
    """What ORT's InferenceSession shows gpu_bench: the providers each session was given."""

    opened: ClassVar[list[list]] = []

    def __init__(self, path: str, so: object, providers: list) -> None:
        self.providers = providers
        _FakeSession.opened.append(providers)

    def get_providers(self) -> list[str]:
        return [CUDA_EP, CPU_EP]

    def get_inputs(self) -> list:
        return []

    def get_outputs(self) -> list:
        return []

    def end_profiling(self) -> str:
        return ""


class _FakeOrt:
    InferenceSession = _FakeSession

    class SessionOptions:
        pass


def test_cuda_options_and_nhwc_reach_the_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """--cuda-option goes to every measured session; --nhwc times a second session with
    prefer_nhwc=1 added; the FP32 reference's use_tf32=0 wins over the options."""
    _FakeSession.opened = []
    monkeypatch.setattr(gpu_run, "import_ort", lambda: _FakeOrt)
    monkeypatch.setattr(gpu_run, "run_once", lambda runner, feeds, label: {})
    monkeypatch.setattr(gpu_run, "read_profile", lambda path: None)
    timings = iter([[2.0, 4.0, 3.0], [1.0, 1.5, 1.2]])
    monkeypatch.setattr(gpu_run, "time_runs", lambda runner, feeds, runs, warmup: next(timings))
    options = {"cudnn_conv_algo_search": "HEURISTIC"}
    m = gpu_run.measure(
        "O2",
        Path("m.onnx"),
        "cuda",
        {},
        {},
        runs=3,
        warmup=0,
        profile_prefix="p",
        options=options,
        nhwc=True,
    )
    assert m.error is None and m.median_ms == 3.0 and m.nhwc_median_ms == 1.2
    assert _FakeSession.opened == [
        [(CUDA_EP, {"cudnn_conv_algo_search": "HEURISTIC"}), CPU_EP],
        [(CUDA_EP, {"cudnn_conv_algo_search": "HEURISTIC", "prefer_nhwc": "1"}), CPU_EP],
    ]
    _FakeSession.opened = []
    gpu_run.open_session(Path("m.onnx"), "cuda", tf32=False, options={"use_tf32": "1"})
    assert _FakeSession.opened == [[(CUDA_EP, {"use_tf32": "0"}), CPU_EP]]
    mod = {"title": "ResNet", "variants": [m]}
    assert rows([mod], nhwc=True)[0][-1] == "1.200"
    assert len(rows([mod])[0]) == len(rows([mod], nhwc=True)[0]) - 1
