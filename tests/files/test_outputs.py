"""One output registry for every file a command writes.

Every path option of every command is declared as an input or an output (cli_paths); each
output goes through one check (output_rules.plan_outputs) and one atomic writer (safe_write)
that renames inside the folder opened at check time.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import click
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import amp_convert
from amp_convert import pipeline
from amp_convert.commands.cli import cli
from amp_convert.commands.paths import InputPath, OutputPath
from amp_convert.errors import OutputError
from amp_convert.files import io as amp_io
from amp_convert.files import outputs as output_rules
from amp_convert.files import safe_write


def mlp(width: int = 32) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def external(path: Path) -> Path:
    onnx.save_model(
        mlp(), path, save_as_external_data=True, location=path.name + ".data", size_threshold=0
    )
    return path


def digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def commands() -> dict[str, click.Command]:
    assert isinstance(cli, click.Group)
    return dict(cli.commands)


# ------------------------------------------------------------------ every path option is declared


def test_every_path_option_is_declared_as_input_or_output() -> None:
    outputs: dict[str, list[str]] = {}
    for name, command in commands().items():
        for param in command.params:
            if isinstance(param.type, click.Path):
                assert isinstance(param.type, InputPath | OutputPath), (name, param.name)
                if isinstance(param.type, OutputPath):
                    outputs.setdefault(name, []).append(max(param.opts, key=len))
    assert sorted(outputs["convert"]) == sorted(
        ["--output", "--report", "--html", "--validation-report", "--junit", "--save-inputs"]
    )
    assert sorted(outputs["validate"]) == ["--html", "--junit", "--report", "--save-inputs"]


def _output_options() -> list[tuple[str, str, tuple[str, ...]]]:
    """(command, flag, flags it needs) of every output option, read from the commands."""
    found = []
    for name, command in commands().items():
        for param in command.params:
            if isinstance(param.type, OutputPath):
                found.append((name, max(param.opts, key=len), param.type.needs))
    return found


@pytest.fixture
def models(tmp_path: Path) -> dict[str, Path]:
    src = external(tmp_path / "m.onnx")
    cand = external(tmp_path / "c.onnx")
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((1, 32), np.float32))
    lists = tmp_path / "lists.txt"
    lists.write_text("[deny]\nSoftmax  keep it FP32\n")
    return {"src": src, "cand": cand, "inputs": inputs, "lists": lists, "tmp": tmp_path}


def _run(command: str, flag: str, needs: tuple[str, ...], value: Path, m, *extra: object):
    """The command with `flag value`, the flags it needs and a second output of the run."""
    tmp = m["tmp"]
    if command == "convert":
        args: list[object] = [m["src"]]
        if flag != "--output":
            args += ["-o", tmp / "out.onnx"]
        args += [*needs[:1], "--op-lists", m["lists"]]
        if needs:
            args += ["--inputs", m["inputs"], "--provider", "emulate"]
    else:
        args = ["validate", m["src"], m["cand"], "--provider", "emulate", "--runs", "0"]
        args += ["--inputs", m["inputs"]]
    return invoke(*args, flag, value, *extra)


OPTIONS = _output_options()
IDS = [f"{c}{f}" for c, f, _ in OPTIONS]


def _assert_refused(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(("command", "flag", "needs"), OPTIONS, ids=IDS)
def test_output_option_refuses_inputs_and_their_data(command, flag, needs, models) -> None:
    files = [models["src"], models["src"].with_name("m.onnx.data")]
    if command == "validate":
        files += [models["cand"], models["cand"].with_name("c.onnx.data"), models["inputs"]]
    else:
        files += [models["lists"], *([models["inputs"]] if needs else [])]
    before = digest(*files)
    for victim in files:
        _assert_refused(_run(command, flag, needs, victim, models, "--force"), "would overwrite")
    assert digest(*files) == before


@pytest.mark.parametrize(("command", "flag", "needs"), OPTIONS, ids=IDS)
def test_output_option_refuses_another_output_of_the_run(command, flag, needs, models) -> None:
    tmp = models["tmp"]
    if command == "convert":
        other = "--report" if flag == "--output" else "-o"
    else:
        other = "--junit" if flag != "--junit" else "--report"
    same = tmp / "same.out"
    result = _run(command, flag, needs, same, models, other, same)
    _assert_refused(result, "is also the")
    assert not same.exists()
    if command == "convert" and flag != "--output":  # the output's data file is an output too
        result = _run(command, flag, needs, tmp / "out.onnx.data", models)
        _assert_refused(result, "is also the output data file")


@pytest.mark.parametrize(("command", "flag", "needs"), OPTIONS, ids=IDS)
def test_output_option_refuses_an_existing_file_without_force(command, flag, needs, models):
    existing = models["tmp"] / "existing"
    existing.write_bytes(b"keep")
    _assert_refused(_run(command, flag, needs, existing, models), "exists (use --force")
    assert existing.read_bytes() == b"keep"


@pytest.mark.parametrize(("command", "flag", "needs"), OPTIONS, ids=IDS)
def test_output_option_refuses_special_files_even_with_force(command, flag, needs, models):
    tmp = models["tmp"]
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    link = tmp / "to-null"
    link.symlink_to("/dev/null")
    for target in (fifo, link):
        result = _run(command, flag, needs, target, models, "--force")
        _assert_refused(result, "not a regular file")
    assert fifo.is_fifo() and os.readlink(link) == "/dev/null"


@pytest.mark.parametrize(("command", "flag", "needs"), OPTIONS, ids=IDS)
def test_output_option_refuses_a_folder_path(command, flag, needs, models):
    result = _run(command, flag, needs, str(models["tmp"] / "dir") + "/", models)
    _assert_refused(result, "must name a file")
    assert not (models["tmp"] / "dir").exists()


def test_validate_html_never_replaces_the_reference(models) -> None:
    """`validate A B --html A.onnx` replaced the reference model with HTML (PASS)."""
    src, cand = models["src"], models["cand"]
    before = digest(src, cand)
    result = invoke("validate", src, cand, "--provider", "emulate", "--runs", "0", "--html", src)
    assert result.exit_code == 2 and "HTML report would overwrite the input" in result.output
    assert digest(src, cand) == before


@pytest.mark.integration
def test_validate_html_is_written_atomically(models, monkeypatch) -> None:
    page = models["tmp"] / "page.html"
    page.write_text("old")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safe_write.os, "replace", full_disk)
    result = invoke(
        "validate",
        models["src"],
        models["cand"],
        "--provider",
        "emulate",
        "--runs",
        "0",
        "--html",
        page,
        "--force",
    )
    assert result.exit_code == 2 and "No space left" in result.output
    assert page.read_text() == "old"
    assert not [p for p in models["tmp"].iterdir() if p.name.startswith(".")]


def test_auto_report_and_html_go_through_the_registry(models) -> None:
    src = models["src"]
    before = digest(src)
    for flag in ("--report", "--html"):
        result = invoke(src, "--auto", "--inputs", models["inputs"], flag, src, "--force")
        _assert_refused(result, "would overwrite the input")
    assert digest(src) == before


# ------------------------------------------------------------------ special files


@pytest.mark.parametrize("kind", ["fifo", "link-to-fifo", "link-to-devnull"])
def test_force_never_replaces_a_special_file(tmp_path: Path, kind: str) -> None:
    src = external(tmp_path / "m.onnx")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = {"fifo": fifo, "link-to-fifo": tmp_path / "l", "link-to-devnull": tmp_path / "n"}
    if kind == "link-to-fifo":
        target[kind].symlink_to(fifo)
    elif kind == "link-to-devnull":
        target[kind].symlink_to("/dev/null")
    result = invoke(src, "-o", target[kind], "--force")
    _assert_refused(result, "not a regular file")
    assert fifo.is_fifo()
    if kind != "fifo":
        assert target[kind].is_symlink()
    with pytest.raises(OutputError, match="not a regular file"):
        amp_convert.convert_file(src, target[kind], force=True)


def test_special_file_appearing_after_the_check_is_not_replaced(tmp_path: Path, monkeypatch):
    src = external(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    real_run = pipeline.run

    def fifo_meanwhile(model, options):
        os.mkfifo(out)
        return real_run(model, options)

    monkeypatch.setattr(pipeline, "run", fifo_meanwhile)
    with pytest.raises(OutputError, match="not a regular file"):
        amp_convert.convert_file(src, out, force=True)
    assert out.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "o.onnx"]


def test_file_appearing_after_the_check_is_not_replaced_without_force(tmp_path, monkeypatch):
    src = external(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    real_run = pipeline.run

    def someone_writes(model, options):
        out.write_bytes(b"theirs")
        return real_run(model, options)

    monkeypatch.setattr(pipeline, "run", someone_writes)
    with pytest.raises(OutputError, match="appeared during the run"):
        amp_convert.convert_file(src, out)
    assert out.read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "o.onnx"]


# ------------------------------------------------------------------ swapped folder


def test_swapped_output_folder_cannot_redirect_the_write_onto_the_input(tmp_path, monkeypatch):
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    src = external(inputs / "m.onnx")
    before = digest(src, inputs / "m.onnx.data")
    real_run = pipeline.run

    def swap(model, options):  # during the conversion, out/ becomes a symlink to in/
        outputs.rename(tmp_path / "moved")
        outputs.symlink_to(inputs)
        return real_run(model, options)

    monkeypatch.setattr(pipeline, "run", swap)
    (inputs / "r.json").write_text("precious")
    result = invoke(src, "-o", outputs / "m.onnx", "--report", outputs / "r.json")
    assert result.exit_code == 0, result.output
    assert digest(src, inputs / "m.onnx.data") == before
    assert (inputs / "r.json").read_text() == "precious"
    assert sorted(p.name for p in inputs.iterdir()) == ["m.onnx", "m.onnx.data", "r.json"]
    # everything went to the folder checked (and held open), wherever it now is
    moved = sorted(p.name for p in (tmp_path / "moved").iterdir())
    assert moved == ["m.onnx", "m.onnx.data", "r.json"]
    onnx.checker.check_model(str(tmp_path / "moved" / "m.onnx"), full_check=True)


def test_swapped_folder_cannot_redirect_a_report(tmp_path: Path) -> None:
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    victim = inputs / "r.json"
    victim.write_text("precious")
    with output_rules.plan_outputs([("report", outputs / "r.json")], [], force=True) as plan:
        outputs.rename(tmp_path / "moved")
        outputs.symlink_to(inputs)
        safe_write.write_bytes(plan["report"], b"{}")
    assert victim.read_text() == "precious"
    assert (tmp_path / "moved" / "r.json").read_bytes() == b"{}"


# ------------------------------------------------------------------ concurrent writers


def test_concurrent_force_writers_leave_no_orphan_data_file(tmp_path: Path, monkeypatch) -> None:
    src = external(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    amp_convert.convert_file(src, out)  # an existing pair both writers replace
    both_writing = threading.Barrier(2, timeout=30)
    real_save = amp_io.ir.save

    def save_together(*args, **kwargs):
        both_writing.wait()  # both have started their pair before either commits
        return real_save(*args, **kwargs)

    monkeypatch.setattr(amp_io.ir, "save", save_together)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            amp_convert.convert_file(src, out, force=True)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    proto = onnx.load(str(out), load_external_data=False)
    used = {
        e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"
    }
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(["m.onnx", "m.onnx.data", "o.onnx", *used])
    onnx.checker.check_model(str(out), full_check=True)


# ------------------------------------------------------------------ temporary folders

_AUTO_CHILD = """
import sys, time
from amp_convert.auto import search, staging
from amp_convert.commands.cli import main
staging.SPILL_BYTES = -1  # stage the weights on disk, as for a big model

def slow_run(self, *a, **k):
    print("STAGED", flush=True)
    time.sleep(60)

search.Search.run = slow_run
sys.argv = ["amp-convert", sys.argv[1], "--auto", "-o", sys.argv[2]]
main()
"""


def ours(temp: Path) -> list[Path]:
    """Our entries in a temporary folder (the environment may leave its own files there)."""
    return [p for p in temp.iterdir() if p.name.startswith("amp-")]


@pytest.mark.integration
def test_sigterm_during_auto_leaves_no_temporary_folder(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    src = external(tmp_path / "m.onnx")
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(__file__).parents[2])}
    child = subprocess.Popen(
        [sys.executable, "-c", _AUTO_CHILD, str(src), str(tmp_path / "o.onnx")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout.readline() == "STAGED\n", child.stderr.read()
        assert [p.name[:9] for p in ours(temp)] == ["amp-auto-"]
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGTERM, err
    assert ours(temp) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "temp"]


def test_temporary_folders_are_declared() -> None:
    with pytest.raises(ValueError, match="undeclared"):
        safe_write.temp_folder("tmp-")
    with safe_write.temp_folder("amp-auto-") as name:
        assert Path(name).name.startswith("amp-auto-")


@pytest.mark.integration
def test_auto_writes_an_external_data_model_as_external_data(tmp_path: Path) -> None:
    """--auto wrote an external-data model as one protobuf holding every weight."""
    src = external(tmp_path / "m.onnx")
    out = tmp_path / "a.onnx"
    result = invoke(src, "--auto", "-o", out, "--provider", "emulate")
    assert result.exit_code == 0, result.output
    proto = onnx.load(str(out), load_external_data=False)
    locations = {
        e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"
    }
    assert locations == {"a.onnx.data"}
    assert (tmp_path / "a.onnx.data").stat().st_size > out.stat().st_size
    onnx.checker.check_model(str(out), full_check=True)
