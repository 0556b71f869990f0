"""Hostile moments and hostile strings end as one line and the documented exit code.

Grouped by family: signals at any moment of the command (start-up, after the verdict), user
strings that are not text (non-UTF-8 bytes, NUL, control characters), writes that fail (a file
size limit, a report after the model), and bounds on what a number option may ask for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.graphs import mlp

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def saved(path: Path, model: onnx.ModelProto | None = None) -> Path:
    onnx.save(model or mlp(layers=2), str(path))
    return path


def child(script: str, *args: object, env: dict[str, str] | None = None):
    """Run `script` in a fresh interpreter with SIGINT at its default (a background job's pytest
    hands its children SIGINT ignored)."""
    prologue = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    return subprocess.run(
        [sys.executable, "-c", prologue + textwrap.dedent(script), *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=120,
        check=False,
    )


# ------------------------------------------------------------------ signals at any moment


_SIGNAL_ON_IMPORT = """
import os, signal, sys, time
module, signame, *argv = sys.argv[1:]

class Trap:  # a meta-path finder: the signal arrives as `module` starts to import
    def find_spec(self, name, path=None, target=None):
        if name == module:
            os.kill(os.getpid(), getattr(signal, signame))
            time.sleep(1)
        return None

sys.meta_path.insert(0, Trap())
sys.argv = ["amp-convert", *argv]
from amp_convert.startup import main
main()
print("FINISHED")
"""


@pytest.mark.parametrize(
    "module, extra",
    [
        ("onnx", ()),
        ("onnx_ir", ()),
        ("amp_convert.pipeline", ()),
        ("onnxruntime", ("--validate",)),
    ],
)
def test_sigint_while_packages_import_is_130_and_one_line(tmp_path: Path, module, extra) -> None:
    """Was a traceback and death by SIGINT (or a RuntimeError, or "needs ONNX Runtime")."""
    src = saved(tmp_path / "m.onnx")
    done = child(_SIGNAL_ON_IMPORT, module, "SIGINT", src, "-o", tmp_path / "o.onnx", *extra)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "amp-convert: interrupted"
    assert "FINISHED" not in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_sigterm_while_packages_import_ends_by_sigterm_quietly(tmp_path: Path) -> None:
    src = saved(tmp_path / "m.onnx")
    done = child(_SIGNAL_ON_IMPORT, "onnx_ir", "SIGTERM", src, "-o", tmp_path / "o.onnx")
    assert done.returncode == -signal.SIGTERM
    assert done.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


_SIGINT_AFTER_VERDICT = """
import atexit, os, signal, sys, time
import amp_convert.commands.cli

moment = sys.argv.pop(1)
real = amp_convert.commands.cli.main

def interrupt():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)

def main():  # the command runs, prints its verdict and returns (SystemExit)
    if moment == "exiting":
        atexit.register(interrupt)  # during the interpreter's exit
    try:
        real()
    finally:
        if moment == "returning":
            interrupt()

amp_convert.commands.cli.main = main
sys.argv = ["amp-convert", *sys.argv[1:]]
from amp_convert.startup import main
main()
"""


@pytest.mark.parametrize("moment", ["returning", "exiting"])
def test_sigint_after_the_verdict_is_130_and_one_line(tmp_path: Path, moment: str) -> None:
    """SIGINT after the verdict line killed silently (death by SIGINT)."""
    src = saved(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    done = child(
        _SIGINT_AFTER_VERDICT,
        moment,
        src,
        "-o",
        out,
        "--validate",
        "--provider",
        "emulate",
        "--runs",
        "0",
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "amp-convert: interrupted"
    assert done.stderr.count("interrupted") == 1
    assert "result: PASS" in done.stdout  # the verdict was printed before, and kept
    onnx.checker.check_model(str(out))


def test_a_broken_onnxruntime_import_is_not_reported_missing(monkeypatch) -> None:
    """An import cut short (a half-initialised package) said "validation needs ONNX Runtime"."""
    import builtins

    from amp_convert import ValidationError
    from amp_convert.validation import runtime

    real = builtins.__import__

    def half(name, *a, **k):
        if name == "onnxruntime":
            raise ImportError("cannot import name 'x' from partially initialized module")
        return real(name, *a, **k)

    monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)
    monkeypatch.setattr(builtins, "__import__", half)
    with pytest.raises(ValidationError) as e:
        runtime.import_ort()
    assert "installed but does not import" in str(e.value)
    assert "pip install" not in str(e.value)


# ------------------------------------------------------------------ hostile strings


def invoke(*args: object):
    from click.testing import CliRunner

    from amp_convert.commands.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


LATIN1 = "caf\udce9"  # b"caf\xe9" from a Latin-1 terminal, as Python decodes argv


@pytest.mark.parametrize("flag", ["--exclude-nodes", "--low-io", "--fp32-ops", "--dim"])
def test_non_utf8_option_value_is_one_line_exit_2(tmp_path: Path, flag: str) -> None:
    """--exclude-nodes/--low-io with a Latin-1 byte: exit 3 UnicodeEncodeError."""
    from tests.helpers import one_line_error

    src = saved(tmp_path / "m.onnx")
    one_line_error(invoke(src, "-o", tmp_path / "o.onnx", flag, LATIN1), flag, "caf\\xe9", "UTF-8")
    one_line_error(invoke(src, "-o", tmp_path / "o.onnx", f"{flag}={LATIN1}"), flag, "UTF-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_non_utf8_bytes_from_a_real_command_line(tmp_path: Path) -> None:
    """The same bytes through a real argv (no click test runner in between)."""
    src = saved(tmp_path / "m.onnx")
    latin1_model = os.fsencode(tmp_path) + b"/m\xe9.onnx"  # a file name a Latin-1 system made
    with open(latin1_model, "wb") as f:
        f.write(src.read_bytes())
    script = "import sys\nfrom amp_convert.startup import main\nmain()\n"
    for args in (
        [src, "-o", tmp_path / "o.onnx", "--exclude-nodes", b"caf\xe9"],
        [src, "-o", tmp_path / "o.onnx", "--low-io", b"^mm\xff"],
        [latin1_model, "-o", tmp_path / "o.onnx"],
        ["validate", src, latin1_model],  # was: "ONNX Runtime cannot load it"
        [src, "-o", os.fsencode(tmp_path) + b"/o\xe9.onnx"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", script, *(a if isinstance(a, bytes) else str(a) for a in args)],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "LC_ALL": "C.UTF-8"},
            timeout=120,
            check=False,
        )
        err = done.stderr.decode()
        assert done.returncode == 2, err
        assert err.count("\n") == 1 and "not valid UTF-8" in err, err
    assert sorted(os.listdir(os.fsencode(tmp_path))) == [b"m.onnx", b"m\xe9.onnx"]


def test_api_pattern_that_is_not_text_is_an_option_error() -> None:
    import amp_convert

    for bad in (LATIN1, "mm\x00"):
        with pytest.raises(amp_convert.OptionError, match="exclude-nodes"):
            amp_convert.convert(mlp(layers=2), exclude_nodes=[bad])


def nul_location(tmp_path: Path) -> Path:
    onnx.save(
        mlp(layers=2),
        str(tmp_path / "e.onnx"),
        save_as_external_data=True,
        location="e.data",
        size_threshold=0,
    )
    proto = onnx.load(str(tmp_path / "e.onnx"), load_external_data=False)
    for t in proto.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = "e\x00.data"
    onnx.save(proto, str(tmp_path / "nul.onnx"))
    return tmp_path / "nul.onnx"


def test_nul_in_an_external_data_location_is_one_line_exit_2(tmp_path: Path) -> None:
    """exit 3 on convert, a traceback and exit 1 on validate."""
    from tests.helpers import one_line_error

    src = nul_location(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    one_line_error(invoke(src, "-o", tmp_path / "o.onnx"), "e\\x00.data", "NUL")
    one_line_error(invoke("validate", src, src), "e\\x00.data", "NUL")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def control_named(tmp_path: Path) -> Path:
    name = "y\x01\x1b[2J\x00\x0c\ufffe"
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], [name], name="r\x1b[31m")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])],
    )
    return saved(
        tmp_path / "c.onnx", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    )


def test_control_characters_in_names_never_reach_the_terminal_or_break_junit(
    tmp_path: Path,
) -> None:
    """The JUnit file was not well-formed XML and an ESC sequence reached the terminal."""
    import xml.etree.ElementTree as ET

    src = control_named(tmp_path)
    junit = tmp_path / "j.xml"
    res = invoke(src, "-o", tmp_path / "o.onnx", "-v", "--validate", "--junit", junit)
    assert res.exit_code == 0, res.output
    for raw in ("\x1b", "\x00", "\x01", "\x0c", "\ufffe"):
        assert raw not in res.output
    assert "y\\x01\\x1b[2J\\x00\\x0c\\ufffe" in res.output and "r\\x1b[31m" in res.output
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case is not None and case.get("name") == "y\\x01\\x1b[2J\\x00\\x0c\\ufffe"


def test_control_characters_in_names_never_reach_the_html_page(tmp_path: Path) -> None:
    import re

    src = control_named(tmp_path)
    page = tmp_path / "p.html"
    res = invoke("validate", src, src, "--provider", "emulate", "--runs", "0", "--html", page)
    assert res.exit_code == 0, res.output
    text = page.read_text(encoding="utf-8")
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe]", text)
    assert "y\\x01\\x1b[2J\\x00\\x0c\\ufffe" in text


def test_printable_escapes_what_a_terminal_or_xml_would_obey() -> None:
    from amp_convert.core.user_text import printable

    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("\x00\x0c\x7f\x85\ud800\udce9\ufffe\uffff") == (
        "\\x00\\x0c\\x7f\\x85\\ud800\\xe9\\ufffe\\uffff"
    )
    assert printable("héllo wörld ∑ 😀") == "héllo wörld ∑ 😀"


# ------------------------------------------------------------------ writes that fail


_LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))  # `ulimit -f` for this process
from amp_convert.auto import staging
staging.SPILL_BYTES = int(sys.argv[1])  # 0: the weights are staged in the temporary folder
sys.argv = ["amp-convert", *sys.argv[2:]]
from amp_convert.startup import main
main()
"""


@pytest.mark.parametrize("spill", [0, 1 << 30], ids=["staged weights", "load-check model"])
def test_auto_under_a_file_size_limit_is_one_line_exit_2(tmp_path: Path, spill: int) -> None:
    """--auto could not stage (ulimit -f): exit 3 OSError [Errno 27]."""
    src = saved(tmp_path / "m.onnx", mlp(layers=3, width=256))  # 768 KiB of weights
    temp = tmp_path / "temp"
    temp.mkdir()
    out = tmp_path / "o.onnx"
    done = child(_LIMITED, spill, src, "-o", out, "--auto", "-q", env={"TMPDIR": str(temp)})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "File too large" in lines[0] and "ulimit -f" in lines[0], lines
    assert "temporary folder" in lines[0]
    assert [p for p in temp.iterdir() if p.name.startswith("amp-")] == []  # ours: none left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "temp"]


def test_a_short_write_says_disk_full_not_numpy_words(tmp_path: Path, monkeypatch) -> None:
    """ENOSPC was worded "1048576 requested and 524288 written"."""
    from amp_convert import OutputError
    from amp_convert.files import safe_write

    def short(*a, **k):
        raise OSError("1048576 requested and 524288 written")

    monkeypatch.setattr(safe_write.os, "replace", short)
    with pytest.raises(OutputError) as e:
        safe_write.write_bytes(tmp_path / "r.json", b"{}")
    assert "disk is full" in str(e.value) and "524288 of 1048576 bytes" in str(e.value)
    assert "requested and" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_an_input_file_vanishing_mid_write_blames_the_input(tmp_path: Path, monkeypatch) -> None:
    """Another process replacing the input: was "OUT: cannot write: No such file or directory"."""
    import amp_convert
    from amp_convert import InputError
    from amp_convert.files import io as amp_io

    src = saved(tmp_path / "m.onnx")
    gone = str(tmp_path / "m.onnx.data")

    def reading_fails(*a, **k):
        raise FileNotFoundError(2, "No such file or directory", gone)

    monkeypatch.setattr(amp_io.ir, "save", reading_fails)
    with pytest.raises(InputError) as e:
        amp_convert.convert_file(src, tmp_path / "o.onnx")
    assert str(e.value).startswith(f"{gone}: cannot read: No such file or directory")
    assert "replaced or removed during the run" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# ------------------------------------------------------------------ bounds


def test_decode_steps_beyond_the_bound_is_refused_at_once(tmp_path: Path) -> None:
    """--decode-steps 1000000000 was accepted and ran until killed, memory growing."""
    from tests.helpers import one_line_error

    src = saved(tmp_path / "m.onnx")
    one_line_error(
        invoke("validate", src, src, "--decode-steps", 1_000_000_000), "--decode-steps", "10000"
    )


def test_decode_steps_whose_cache_outgrows_the_budget_are_refused(monkeypatch) -> None:
    """The growth is measured after step 2; the roll-out stops before the cache outgrows it."""
    import amp_convert
    from amp_convert import ValidationError
    from models.decoders import decoder_with_past

    ref = decoder_with_past()
    cand = amp_convert.convert(ref, level="O2")
    monkeypatch.setenv("AMP_CONVERT_MEMORY_BUDGET", str(96 << 10))
    dims = {"past_sequence_length": 16, "sequence_length": 16}  # inputs well inside the budget
    with pytest.raises(ValidationError) as e:
        amp_convert.validate(ref, cand, provider="emulate", decode_steps=5000, dims=dims)
    message = str(e.value)
    assert message.startswith("--decode-steps 5000: the KV cache grows by ")
    assert "memory budget of 0.1 MiB" in message and "steps fit" in message
    fits = int(message.rsplit("at most ", 1)[1].split()[0])
    report = amp_convert.validate(ref, cand, provider="emulate", decode_steps=fits, dims=dims)
    assert report.decode is not None and len(report.decode.steps) == fits


def test_a_report_that_cannot_be_written_leaves_no_new_output(tmp_path: Path, monkeypatch):
    """The report was written after the model: an exit 2 left the new output behind."""
    from tests.helpers import one_line_error

    src = saved(tmp_path / "m.onnx")
    real_open = open

    def full_for_reports(path, mode="r", *a, **k):
        if "w" in mode and str(path).endswith(".tmp") and ".r.json." in str(path):
            raise OSError(28, "No space left on device", str(path))
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr("builtins.open", full_for_reports)
    res = invoke(src, "-o", tmp_path / "o.onnx", "--report", tmp_path / "r.json")
    monkeypatch.undo()
    one_line_error(res, "r.json", "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    # and with --force the old output and report stay as they were
    (tmp_path / "o.onnx").write_bytes(b"old model")
    (tmp_path / "r.json").write_bytes(b"old report")
    monkeypatch.setattr("builtins.open", full_for_reports)
    res = invoke(src, "-o", tmp_path / "o.onnx", "--report", tmp_path / "r.json", "--force")
    monkeypatch.undo()
    one_line_error(res, "r.json", "No space left on device")
    assert (tmp_path / "o.onnx").read_bytes() == b"old model"
    assert (tmp_path / "r.json").read_bytes() == b"old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx", "r.json"]


def test_auto_model_that_cannot_be_written_leaves_no_new_report(tmp_path: Path, monkeypatch):
    """--auto wrote its report and page before the model: exit 2 left them behind."""
    from amp_convert.files import io as amp_io
    from tests.helpers import one_line_error

    src = saved(tmp_path / "m.onnx")
    real = amp_io.ir.save

    def full(model, path, *a, **k):
        real(model, path, *a, **k)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(amp_io.ir, "save", full)
    res = invoke(
        src,
        "--auto",
        "-q",
        "-o",
        tmp_path / "o.onnx",
        "--provider",
        "emulate",
        "--report",
        tmp_path / "r.json",
        "--html",
        tmp_path / "p.html",
    )
    one_line_error(res, "o.onnx", "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# ------------------------------------------------------------------ words


@pytest.mark.parametrize(
    "flag, value", [("--top1", "NOSUCH"), ("--match", "y:sort"), ("--runs", "5")]
)
def test_auto_refuses_validation_options_it_does_not_use(tmp_path: Path, flag, value) -> None:
    """`--auto --top1 NOSUCH` was accepted (and ignored)."""
    from tests.helpers import one_line_error

    src = saved(tmp_path / "m.onnx")
    one_line_error(
        invoke(src, "--auto", "-o", tmp_path / "o.onnx", flag, value), flag, "goes with --validate"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_empty_outputs_with_thresholds_are_not_called_unthresholded() -> None:
    """0-element outputs with --atol set: "no thresholds set" was printed."""
    import amp_convert

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report = amp_convert.validate(model, model, provider="emulate", thresholds={"atol": 0.1})
    assert not report.passed and not report.failed
    for line in (report.result_line(), report.summary_line()):
        assert "no thresholds set" not in line and "thresholds set, but no output" in line, line
    unset = amp_convert.validate(model, model, provider="emulate", report_only=True)
    assert "no thresholds" in unset.result_line()


_WARNS = """
import sys, warnings
from amp_convert import pipeline
real = pipeline.run
def run(model, options):
    warnings.warn("the thing is deprecated\\nand will go", FutureWarning)
    return real(model, options)
pipeline.run = run
sys.argv = ["amp-convert", *sys.argv[1:]]
from amp_convert.startup import main
main()
"""


def test_a_library_warning_is_one_line_without_a_source_path(tmp_path: Path) -> None:
    """A FutureWarning printed a site-packages path and the code line."""
    src = saved(tmp_path / "m.onnx")
    done = child(_WARNS, src, "-o", tmp_path / "o.onnx", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "amp-convert: warning: the thing is deprecated and will go\n"


def test_npz_member_the_model_does_not_take_is_refused_unread(tmp_path: Path, monkeypatch):
    """A member the model does not take was loaded whole (2.1 GB peak for 2 GiB) first."""
    import amp_convert
    from amp_convert import ValidationError
    from amp_convert.validation import inputs

    path = tmp_path / "in.npz"
    np.savez(path, x=np.zeros((1, 64), np.float32), big=np.zeros((1024, 1024), np.float32))

    def never(*a, **k):
        raise AssertionError("np.load read the file")

    monkeypatch.setattr(inputs.np, "load", never)
    model = mlp(layers=2)
    with pytest.raises(ValidationError, match="unexpected 'big'"):
        amp_convert.validate(model, model, provider="emulate", inputs=str(path))
