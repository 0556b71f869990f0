"""The validate CLI pieces: exit codes 0/1/2, options, reports, and the convert-command hooks."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import click
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto

import amp_convert
from models import validation_models as vm

pytest.importorskip("onnxruntime")

from amp_convert.commands.validate import (
    VALIDATION_OPTION_NAMES,
    parse_threshold,
    run_cli_validation,
    validate_command,
    validation_options,
)
from amp_convert.errors import ValidationError
from amp_convert.validation import validate
from amp_convert.validation.runtime import MISSING_ORT

pytestmark = pytest.mark.integration


@pytest.fixture
def pairs(tmp_path: Path) -> dict[str, tuple[str, str]]:
    out = {}
    for name, build in (
        ("mlp", lambda: vm.mlp_pair(TensorProto.FLOAT16)),
        ("overflow", vm.overflow_pair),
        ("tokens", vm.multi_io_pair),
    ):
        ref, cand = build()
        r, c = tmp_path / f"{name}.onnx", tmp_path / f"{name}.fp16.onnx"
        onnx.save(ref, r)
        onnx.save(cand, c)
        out[name] = (str(r), str(c))
    return out


def _run(*args: str):
    """The CLI with an explicit provider unless one is given: `auto` depends on the machine."""
    provider = [] if "--provider" in args else ["--provider", "emulate"]
    return CliRunner().invoke(validate_command, [*args, *provider, "--runs", "2", "--warmup", "0"])


def _errors(output: str) -> str:
    """The output without the progress lines (``amp-convert validate: [ 0.1 s] ...``)."""
    return "".join(
        line for line in output.splitlines(keepends=True) if not line.startswith(PROGRESS)
    )


PROGRESS = "amp-convert validate: ["


@pytest.fixture
def no_cuda(monkeypatch):
    """Make `auto` see an onnxruntime without the CUDA provider, whatever is installed."""
    from amp_convert.validation import runtime

    monkeypatch.setattr(runtime, "cuda_available", lambda: False)


@pytest.fixture
def cuda_fails_to_start(monkeypatch):
    """Make the CUDA provider look installed but fail to start, as on a machine without a driver.

    Patched at the session factory, so the fallback decision is exercised whatever the machine
    has; ``test_make_session_reports_cuda_start_failure_by_type`` covers the real detection.
    """
    from amp_convert.validation import runtime, sessions
    from amp_convert.validation.runtime import CudaStartError

    real = sessions.make_session

    def make_session(src, role, *, device, **kw):
        if device == "cuda":
            raise CudaStartError(f"{role} {src.label}: the CUDA provider failed to start (test)")
        return real(src, role, device=device, **kw)

    monkeypatch.setattr(runtime, "cuda_available", lambda: True)
    monkeypatch.setattr(sessions, "make_session", make_session)
    # the load check's child would look for CUDA in the real onnxruntime: keep it on the CPU
    real_check = sessions.default_load_check
    monkeypatch.setattr(
        sessions,
        "default_load_check",
        lambda ref, cand, mode, strict=True: real_check(ref, cand, "emulate", strict=strict),
    )


def test_exit_0_when_all_pass(pairs) -> None:
    res = _run(*pairs["mlp"], "--atol", "1e-2", "--rtol", "1e-2", "--min-cosine", "0.999")
    assert res.exit_code == 0, res.output
    assert "result: PASS" in res.output and "speedup" in res.output
    assert "provider: emulate (requested emulate" in res.output


def test_auto_without_cuda_uses_emulate(pairs, no_cuda) -> None:
    res = _run(*pairs["mlp"], "--provider", "auto", "--atol", "1e-2", "--rtol", "1e-2")
    assert res.exit_code == 0, res.output
    assert "provider: emulate (requested auto" in res.output
    assert "failed to start" not in res.output


def test_auto_falls_back_when_cuda_fails_to_start(pairs, cuda_fails_to_start) -> None:
    res = _run(*pairs["mlp"], "--provider", "auto", "--atol", "1e-2", "--rtol", "1e-2")
    assert res.exit_code == 0, res.output
    assert "provider: emulate (requested auto" in res.output
    assert "warning: provider auto: the CUDA provider is installed but failed to start" in (
        res.output
    )
    assert "fell back to emulate" in res.output


@pytest.mark.parametrize("setup", ["no_cuda", "cuda_fails_to_start"])
def test_cuda_options_unused_by_auto_are_said(pairs, setup, request, tmp_path: Path) -> None:
    """auto that runs emulate (no CUDA provider, or one that failed to start) says the CUDA
    options were not used, and the report lists none: they were dropped silently."""
    request.getfixturevalue(setup)
    report = tmp_path / "r.json"
    res = _run(
        *pairs["mlp"],
        "--provider",
        "auto",
        "--cuda-option",
        "prefer_nhwc=1",
        "--report",
        str(report),
    )
    assert res.exit_code == 0, res.output
    assert "warning: provider auto ran emulate: --cuda-option was not used" in res.output
    assert json.loads(report.read_text())["provider"]["options"] == {}


def test_html_page_is_drawn_with_the_verdicts_provider_and_inputs(
    pairs, cuda_fails_to_start, monkeypatch, tmp_path: Path
) -> None:
    """`validate --html` is handed the verdict (its options, provider and samples): the page runs
    where the verdict ran (emulate, after CUDA failed to start) on the very same arrays, and
    never draws its own inputs or reads `auto` again."""
    from amp_convert.pages import trace
    from amp_convert.validation import input_search

    seen: list[dict[str, np.ndarray]] = []
    real_replay = input_search.replay

    def replay(samples, run):
        seen.extend(s.inputs.arrays for s in samples.items)
        return real_replay(samples, run)

    def no_second_draw(*args, **kwargs):
        raise AssertionError("the page drew inputs of its own")

    monkeypatch.setattr(trace, "replay", replay)
    monkeypatch.setattr(trace, "gather_samples", no_second_draw)
    saved, page = tmp_path / "in.npz", tmp_path / "p.html"
    res = _run(
        *pairs["mlp"],
        "--provider",
        "auto",
        "--atol",
        "1e-2",
        "--rtol",
        "1e-2",
        "--html",
        str(page),
        "--save-inputs",
        str(saved),
    )
    assert res.exit_code == 0, res.output
    assert "fell back to emulate" in res.output and page.stat().st_size > 0
    judged = np.load(saved)
    assert len(seen) == 1 and set(seen[0]) == set(judged.files)
    for name in judged.files:
        np.testing.assert_array_equal(seen[0][name], judged[name])


def test_explicit_cuda_that_cannot_start_is_an_error(pairs, cuda_fails_to_start) -> None:
    """An explicit --provider cuda never silently becomes emulate."""
    res = _run(*pairs["mlp"], "--provider", "cuda", "--atol", "1e-2")
    assert res.exit_code == 2, res.output
    out = _errors(res.output)
    assert out.startswith("amp-convert: error: provider cuda: reference ")
    assert "the CUDA provider failed to start" in out and out.count("\n") == 1
    assert "auto" not in res.output and "emulate (requested" not in res.output
    with pytest.raises(ValidationError, match=r"^provider cuda: "):
        validate(*pairs["mlp"], provider="cuda", runs=0)


def test_explicit_cuda_without_the_provider_is_an_error(pairs, no_cuda) -> None:
    res = _run(*pairs["mlp"], "--provider", "cuda")
    assert res.exit_code == 2
    assert "provider cuda: this onnxruntime has no CUDAExecutionProvider" in res.output


@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")
def test_make_session_reports_cuda_start_failure_by_type(pairs, monkeypatch) -> None:
    """The fallback is decided by type: ORT's EPFail, or a session that came up without CUDA."""
    import onnxruntime as ort

    from amp_convert.validation.runtime import CudaStartError, load_source, make_session

    src = load_source(pairs["mlp"][0], "reference")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        # ORT's Python layer falls back to CPU when the provider is missing: detected by type
        with pytest.raises(CudaStartError, match="ORT fell back to CPU"):
            make_session(src, "reference", device="cuda", disable_optimizations=False)
    ep_fail = ort.capi.onnxruntime_pybind11_state.EPFail

    def failing_session(*args, **kw):
        raise ep_fail("CUDA failure 100: no CUDA-capable device is detected")

    monkeypatch.setattr(ort, "InferenceSession", failing_session)
    with pytest.raises(CudaStartError, match="no CUDA-capable device"):
        make_session(src, "reference", device="cuda", disable_optimizations=False)
    # the same ORT error on the CPU is a load error, not a reason to fall back
    with pytest.raises(ValidationError, match="cannot load it") as err:
        make_session(src, "reference", device="cpu", disable_optimizations=False)
    assert not isinstance(err.value, CudaStartError)


def test_cuda_options_reach_both_sessions_and_the_report(
    pairs, monkeypatch, tmp_path: Path
) -> None:
    """--cuda-option goes to the CUDA provider of both models' sessions (latency as served:
    prefer_nhwc...) and the report says which options ran. The sessions are opened on the CPU
    here, with what they were handed recorded."""
    from amp_convert.validation import runtime, sessions

    seen: list[tuple[str, dict[str, str] | None]] = []
    real = sessions.make_session

    def make_session(src, role, *, device, cuda_options=None, **kw):
        seen.append((role, cuda_options))
        return real(src, role, device="cpu", **kw)

    monkeypatch.setattr(runtime, "cuda_available", lambda: True)
    monkeypatch.setattr(sessions, "make_session", make_session)
    real_check = sessions.default_load_check
    monkeypatch.setattr(
        sessions,
        "default_load_check",
        lambda ref, cand, mode, strict=True: real_check(ref, cand, "cpu", strict=strict),
    )
    report = tmp_path / "r.json"
    options = [
        "--cuda-option",
        "prefer_nhwc=1",
        "--cuda-option",
        "cudnn_conv_algo_search = HEURISTIC",
    ]
    res = _run(*pairs["mlp"], "--provider", "cuda", *options, "--report", str(report))
    assert res.exit_code == 0, res.output
    want = {"prefer_nhwc": "1", "cudnn_conv_algo_search": "HEURISTIC"}
    assert seen == [("reference", want), ("candidate", want)]
    assert "CUDA options prefer_nhwc=1, cudnn_conv_algo_search=HEURISTIC)" in res.output
    assert json.loads(report.read_text())["provider"]["options"] == want
    api = validate(*pairs["mlp"], provider="cuda", runs=0, cuda_options={"prefer_nhwc": True})
    assert api.provider_options == {"prefer_nhwc": "1"}
    assert seen[-1] == ("candidate", {"prefer_nhwc": "1"})


def test_make_session_hands_the_cuda_options_to_onnxruntime(pairs, monkeypatch) -> None:
    """The options are the CUDA provider's own dict in the session's provider list."""
    import onnxruntime as ort

    from amp_convert.validation.runtime import load_source, make_session

    given: list[list] = []

    def recording_session(model, so, providers):
        given.append(providers)
        raise RuntimeError("stop here")

    monkeypatch.setattr(ort, "InferenceSession", recording_session)
    src = load_source(pairs["mlp"][0], "reference")
    with pytest.raises(ValidationError, match=r"with the CUDA provider options prefer_nhwc=1\)"):
        make_session(
            src,
            "reference",
            device="cuda",
            disable_optimizations=False,
            cuda_options={"prefer_nhwc": "1"},
        )
    assert given == [[("CUDAExecutionProvider", {"prefer_nhwc": "1"}), "CPUExecutionProvider"]]


def test_exit_1_when_an_output_fails(pairs) -> None:
    res = _run(*pairs["overflow"], "--atol", "0.1")
    assert res.exit_code == 1, res.output
    assert "result: FAIL" in res.output and "new NaN/Inf" in res.output
    # the CPU provider misses the overflow (and says so)
    res = _run(*pairs["overflow"], "--atol", "0.1", "--provider", "cpu")
    assert res.exit_code == 0 and "removes the casts" in res.output


def test_no_thresholds_judges_by_the_defaults_and_report_only_judges_nothing(pairs) -> None:
    """Issue 33: a gate that sets no threshold judges (cosine 0.999, no new NaN/Inf); NOT JUDGED
    only when asked for by name."""
    res = _run(*pairs["mlp"])
    assert res.exit_code == 0 and "result: PASS" in res.output
    res = _run(*pairs["mlp"], "--report-only")
    assert res.exit_code == 0 and "result: NOT JUDGED (--report-only" in res.output
    assert "PASS" not in res.output


def test_new_nonfinite_fails_without_thresholds(pairs, tmp_path: Path) -> None:
    """FP16 overflow to inf is a failure even when no threshold is given."""
    report = tmp_path / "r.json"
    res = _run(*pairs["overflow"], "--report", str(report))
    assert res.exit_code == 1, res.output
    assert "result: FAIL" in res.output and "PASS" not in res.output
    assert "new NaN/Inf values" in res.output
    assert "(the default: new NaN/Inf always fail)" in res.output
    d = json.loads(report.read_text())
    (y,) = d["outputs"]
    assert y["nonfinite"] > 0 and y["passed"] is False and y["status"] == "fail"
    assert d["passed"] is False and d["verdict"] == "fail"


def test_per_output_overrides(pairs) -> None:
    tokens = pairs["tokens"]
    assert _run(*tokens, "--atol", "0.1").exit_code == 0
    res = _run(*tokens, "--atol", "0.1", "--atol", "logits:1e-6")
    assert res.exit_code == 1 and "FAIL (1 of 3 outputs: logits)" in res.output
    res = _run(*tokens, "--max-nan", "nope:2")
    assert res.exit_code == 2 and "unknown output 'nope'" in res.output


def test_dims_option(pairs) -> None:
    res = _run(*pairs["tokens"], "--dim", "batch=2", "--dim", "seq=3")
    assert res.exit_code == 0, res.output
    assert "dims: batch=2, seq=3" in res.output and "input_ids[2, 3]" in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dim", "batch"], "NAME=VALUE"),
        (["--atol", "abc"], "expected [NAME:]VALUE with a number"),
        (["--atol", "1", "--atol", "2"], "given twice"),
        (["--max-nan", "1.5"], "with an integer"),
        (["--provider", "tpu"], "Invalid value for '--provider'"),
        (["--seed", "-1"], "Invalid value for '--seed'"),
        (["--cuda-option", "prefer_nhwc"], "--cuda-option 'prefer_nhwc': expected KEY=VALUE"),
        (["--cuda-option", "prefer_nhwc=1"], "it needs --provider cuda (or auto), not emulate"),
        (
            ["--cuda-option", "a=1", "--cuda-option", "a=2", "--provider", "cuda"],
            "--cuda-option a given twice with different values",
        ),
    ],
)
def test_usage_errors_exit_2(pairs, args, message) -> None:
    res = _run(*pairs["mlp"], *args)
    assert res.exit_code == 2 and message in res.output


def test_load_errors_exit_2_with_one_line(pairs, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    res = CliRunner().invoke(validate_command, [pairs["mlp"][0], str(bad)])
    assert res.exit_code == 2
    out = _errors(res.output)
    assert out.startswith("amp-convert: error: candidate") and out.count("\n") == 1
    res = CliRunner().invoke(validate_command, [pairs["mlp"][0], str(tmp_path / "missing.onnx")])
    assert res.exit_code == 2 and "does not exist" in res.output
    res = _run(*pairs["mlp"], "--dim", "seq=4")
    assert res.exit_code == 2 and "--dim seq: the model has no dim named 'seq'" in res.output
    res = _run(pairs["mlp"][0], pairs["tokens"][1])
    assert res.exit_code == 2 and "different inputs" in res.output


def test_npz_inputs(pairs, tmp_path: Path) -> None:
    good, wrong_name, wrong_shape = (tmp_path / f"{n}.npz" for n in ("good", "name", "shape"))
    np.savez(good, x=np.ones((2, 16), np.float32))
    np.savez(wrong_name, inp=np.ones((2, 16), np.float32))
    np.savez(wrong_shape, x=np.ones((2, 3), np.float32))
    res = _run(*pairs["mlp"], "--inputs", str(good))
    assert res.exit_code == 0 and "inputs: npz:" in res.output
    res = _run(*pairs["mlp"], "--inputs", str(wrong_name))
    assert res.exit_code == 2
    assert "missing 'x'; unexpected 'inp' (model inputs: x)" in res.output
    res = _run(*pairs["mlp"], "--inputs", str(wrong_shape))
    assert res.exit_code == 2
    assert "input 'x': expected shape [2, 16], got (2, 3) (axis 1 must be 16)" in res.output


def test_report_and_junit_files(pairs, tmp_path: Path) -> None:
    rj, rx = tmp_path / "r.json", tmp_path / "r.xml"
    res = _run(*pairs["overflow"], "--atol", "0.1", "--report", str(rj), "--junit", str(rx), "-q")
    assert res.exit_code == 1
    assert "output  dtype" not in res.output  # quiet: no table, one failure line
    assert res.output.startswith("validation FAILED (emulate): y:")
    d = json.loads(rj.read_text())
    assert d["passed"] is False and d["outputs"][0]["max_abs"] == "inf"
    assert d["thresholds"]["atol"] == 0.1 and d["latency"]["runs"] == 2
    case = ET.parse(rx).getroot().find("testsuite/testcase")
    assert case.get("name") == "y" and "new NaN/Inf" in case.find("failure").get("message")
    res = _run(*pairs["mlp"], "--report", str(tmp_path / "no" / "dir" / "r.json"))
    assert res.exit_code == 2 and "cannot write report" in res.output


def test_quiet_success_prints_nothing(pairs) -> None:
    res = _run(*pairs["mlp"], "-q")
    assert res.exit_code == 0 and res.output == ""


def test_hooks_for_the_convert_command(pairs, tmp_path: Path) -> None:
    """What cli.py plugs in: validation_options on its own command + run_cli_validation."""

    @click.command()
    @click.argument("src")
    @click.argument("dst")
    @validation_options
    @click.option("--validation-report", type=click.Path())
    def convert(src: str, dst: str, validation_report: str | None, **values) -> None:
        assert set(values) == set(VALIDATION_OPTION_NAMES)
        code = run_cli_validation(src, dst, report_path=validation_report, **values)
        click.get_current_context().exit(code)

    report = tmp_path / "v.json"
    res = CliRunner().invoke(
        convert,
        [
            *pairs["tokens"],
            "--dim",
            "seq=2",
            "--atol",
            "pred:0",
            "--runs",
            "1",
            "--validation-report",
            str(report),
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(report.read_text())["inputs"]["dims"] == {"batch": 1, "seq": 2}
    # programmatic call with raw strings works the same way
    code = run_cli_validation(*pairs["overflow"], quiet=True, atol=("0.1",), runs=0)
    assert code == 1
    with pytest.raises(TypeError, match="unknown option"):
        run_cli_validation(*pairs["mlp"], atoll=1)


def test_parse_threshold_names_with_colons() -> None:
    opt = parse_threshold("atol", ("1e-3", "output:0:0.5", "logits:2"))
    assert opt.value == 1e-3 and opt.per_output == {"output:0": 0.5, "logits": 2.0}


def test_missing_onnxruntime_is_one_clear_error(monkeypatch, pairs) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with pytest.raises(ValidationError) as err:
        validate(*pairs["mlp"])
    assert str(err.value) == MISSING_ORT
    assert MISSING_ORT == (
        "validation needs ONNX Runtime: pip install 'amp-convert[cpu]' (or [gpu])"
    )
    res = CliRunner().invoke(validate_command, list(pairs["mlp"]))
    assert res.exit_code == 2 and MISSING_ORT in res.output


def test_conversion_modules_do_not_import_onnxruntime() -> None:
    """Importing the validate package must not pull onnxruntime in (conversion never needs it)."""
    import subprocess

    code = (
        "import sys, amp_convert.validation, amp_convert.commands.validate, amp_convert.testing; "
        "sys.exit(1 if 'onnxruntime' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.cuda
def test_cuda_provider(pairs) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs the ONNX Runtime CUDA provider (onnxruntime-gpu)")
    report = validate(*pairs["overflow"], provider="cuda", runs=5, warmup=2)
    assert report.provider == "cuda" and "CUDAExecutionProvider" in report.ort_providers
    assert report.output("y").candidate_inf > 0  # real FP16 overflows like emulate says
    emu = validate(*pairs["overflow"], provider="emulate", runs=0)
    assert report.output("y").candidate_inf == emu.output("y").candidate_inf
    mlp = validate(*pairs["mlp"], provider="cuda", runs=5, warmup=2)
    assert mlp.output("y").max_abs < 1e-2 and mlp.speedup is not None
    auto = validate(*pairs["mlp"], provider="auto", runs=0)
    assert auto.provider == "cuda"


def test_progress_only_on_a_terminal_outside_ci(monkeypatch, pairs, capsys) -> None:
    from amp_convert.validation import core, progress

    monkeypatch.delenv("CI", raising=False)
    assert progress.progress_wanted() is False  # pytest's streams are not a TTY
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert progress.progress_wanted() is True
    monkeypatch.setenv("CI", "1")
    assert progress.progress_wanted() is False
    # the bar itself: forced on, it reports on stderr and counts both models' runs
    monkeypatch.setattr(core, "progress_wanted", lambda: True)  # the bar, beside the phase lines
    ticks: list[int] = []
    real = progress.Progress.tick
    monkeypatch.setattr(progress.Progress, "tick", lambda self: (ticks.append(1), real(self)))
    validate(*pairs["mlp"], provider="emulate", runs=3, warmup=0, progress=True)
    assert len(ticks) == 6
    assert "timing" in capsys.readouterr().err


def test_defaults_the_reference_cannot_run_on(tmp_path: Path) -> None:
    """Larger dims are tried and printed; if none work, exit 2 with the way out."""
    from models import picky_inputs as picky

    paths = {}
    # 5005 = 7 x 715: past every size the search tries (91 = 7 x 13 is found from the Reshape)
    pad = (
        ("pad", lambda: picky.reflect_pad_pair(200)),
        ("fixed", lambda: picky.fixed_length_pair(7 * 715)),
    )
    for name, build in pad:
        for role, model in zip(("ref", "cand"), build(), strict=True):
            paths[name, role] = tmp_path / f"{name}.{role}.onnx"
            onnx.save(model, paths[name, role])
    res = _run(str(paths["pad", "ref"]), str(paths["pad", "cand"]), "--atol", "1e-2")
    assert res.exit_code == 0, res.output
    assert "these dims worked: (batch=1, samples=256)" in res.output
    assert "dims: batch=1, samples=256" in res.output and "result: PASS" in res.output
    fixed = (str(paths["fixed", "ref"]), str(paths["fixed", "cand"]))
    res = _run(*fixed)
    out = _errors(res.output)
    assert res.exit_code == 2 and out.count("\n") == 1
    assert out.startswith(
        f"amp-convert: error: reference {fixed[0]} cannot run on the generated inputs"
    )
    assert "shapes tried: x[1, 128]; x[1, 256]; x[1, 1024]" in res.output
    assert "values tried: length = 128/256/1024/64/16/715" in res.output
    assert "--dim NAME=VALUE (length)" in res.output and "--inputs FILE.npz" in res.output
    assert _run(*fixed, "--dim", "length=5005", "--atol", "1e-2").exit_code == 0


def test_top1_option(pairs) -> None:
    res = _run(*pairs["tokens"])
    assert res.exit_code == 0 and "top1" not in res.output  # logits are rank 3
    res = _run(*pairs["tokens"], "--top1", "logits")
    assert res.exit_code == 0 and "top1 100.0%" in res.output
    res = _run(*pairs["tokens"], "--top1", "nope")
    assert res.exit_code == 2 and "top1 for unknown output 'nope'" in res.output


# ------------------------------------------------------------- defaults that judge


def _broken_by_fp16(tmp_path: Path) -> tuple[Path, Path]:
    """A hand-written variance of inputs near 100 at O3: FP16 cancels (x - mean) to a cosine of
    0.97, finite everywhere (no NaN/Inf to fail on): only a threshold sees it."""
    from models.overflow import calibration, hand_variance

    model, _ = hand_variance()
    src = tmp_path / "hv.onnx"
    onnx.save(model, src)
    feeds = tmp_path / "offset.npz"
    np.savez(feeds, **calibration(model, "offset", batch=2))
    return src, feeds


def test_validate_without_thresholds_on_a_broken_conversion_exits_1(tmp_path: Path) -> None:
    """No threshold given: convert --validate, validate and --auto judge by one default set
    (cosine 0.999, no new NaN/Inf); a broken conversion is not written."""
    from amp_convert.commands.cli import cli

    src, feeds = _broken_by_fp16(tmp_path)
    out = tmp_path / "hv.fp16.onnx"
    res = CliRunner().invoke(
        cli,
        [
            str(src),
            "-o",
            str(out),
            "--level",
            "O3",
            "--validate",
            "--provider",
            "emulate",
            "--inputs",
            str(feeds),
        ],
    )
    assert res.exit_code == 1, res.output
    assert "result: FAIL" in res.output and "min_cosine 0.999" in res.output
    assert not out.exists()
    onnx.save(amp_convert.convert(onnx.load(src), level="O3"), out)
    res = CliRunner().invoke(
        validate_command, [str(src), str(out), "--provider", "emulate", "--inputs", str(feeds)]
    )
    assert res.exit_code == 1 and "result: FAIL" in res.output
    # judging nothing is asked for by name, and then says so
    args = [str(src), str(out), "--provider", "emulate", "--inputs", str(feeds)]
    res = CliRunner().invoke(validate_command, [*args, "--report-only"])
    assert res.exit_code == 0 and "NOT JUDGED" in res.output
    res = CliRunner().invoke(
        validate_command, [str(src), str(out), "--report-only", "--min-cosine", "0.9"]
    )
    assert res.exit_code == 2 and "--report-only judges nothing" in res.output


def test_the_defaults_are_in_the_help() -> None:
    res = CliRunner().invoke(validate_command, ["--help"])
    text = " ".join(res.output.split())
    assert "--report-only" in text and "--min-cosine 0.999 and no new NaN/Inf" in text


def test_a_broken_model_gets_the_node_where_it_breaks_and_no_thresholds(tmp_path: Path) -> None:
    """Far from any threshold (an Exp that overflows FP16 at O3): no "smallest thresholds", the
    node where the output breaks is named, and the JSON report holds it."""
    from models.overflow import exp_overflow

    model, _ = exp_overflow()
    src, dst = tmp_path / "m.onnx", tmp_path / "m.o3.onnx"
    onnx.save(model, src)
    onnx.save(amp_convert.convert(model, level="O3"), dst)
    report = tmp_path / "r.json"
    res = CliRunner().invoke(
        validate_command, [str(src), str(dst), "--provider", "emulate", "--report", str(report)]
    )
    assert res.exit_code == 1, res.output
    assert "smallest thresholds" not in res.output
    assert "is far from any threshold" in res.output
    assert "the output breaks at node" in res.output and "(Exp, low)" in res.output
    data = json.loads(report.read_text())
    assert data["broken"] and data["worst_node"]["op_type"] == "Exp"
