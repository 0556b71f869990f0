"""Never lose a user's file.

Outputs are checked against every file the input reads and against each other before any work;
an external-data pair is replaced so that a reader never sees new weights with an old graph;
SIGTERM cleans up like Ctrl-C; modes follow the umask or the replaced file.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import amp_convert
from amp_convert import OutputError
from amp_convert.commands.cli import cli
from amp_convert.files import data_file, direct_stream, safe_write
from amp_convert.files import io as amp_io
from amp_convert.reports.conversion import ConversionReport
from tests.graphs import mlp
from tests.helpers import run

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def external_model(path: Path, location: str | None = None, **kw: int) -> Path:
    """An MLP whose tensors all live in `location` (default: NAME.data) next to `path`."""
    onnx.save_model(
        mlp(**kw),
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location or path.name + ".data",
        size_threshold=0,
    )
    return path


def digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def listing(folder: Path) -> list[str]:
    """Every entry in `folder`, hidden ones included."""
    return sorted(p.name for p in folder.iterdir())


def outputs_of(path: Path) -> np.ndarray:
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    return run(str(path), {"x": x})[0]


def data_files(model: Path) -> set[str]:
    proto = onnx.load(str(model), load_external_data=False)
    return {
        e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"
    }


# ------------------------------------------------------------------ 1. input files are sacred


def test_output_named_like_the_inputs_data_file_is_refused(tmp_path: Path) -> None:
    src = external_model(tmp_path / "in.onnx", location="conv.onnx.data")
    before = digest(tmp_path / "conv.onnx.data")
    result = invoke(src, "-o", tmp_path / "conv.onnx")
    assert result.exit_code == 2
    assert result.output == (
        f"amp-convert: error: {tmp_path / 'conv.onnx.data'}: output data file would overwrite "
        f"{tmp_path / 'conv.onnx.data'}, the external data of the input model {src}; "
        "choose another path\n"
    )
    assert digest(tmp_path / "conv.onnx.data") == before
    assert listing(tmp_path) == ["conv.onnx.data", "in.onnx"]
    with pytest.raises(OutputError, match="external data of the input model"):
        amp_convert.convert_file(src, tmp_path / "conv.onnx", force=True)
    assert digest(tmp_path / "conv.onnx.data") == before


def test_output_onto_the_inputs_data_file_is_refused_even_with_force(tmp_path: Path) -> None:
    src = external_model(tmp_path / "m.onnx")
    before = digest(tmp_path / "m.onnx.data")
    result = invoke(src, "-o", tmp_path / "m.onnx.data", "--force")
    assert result.exit_code == 2
    assert (
        "output would overwrite" in result.output and "external data of the input" in result.output
    )
    assert digest(tmp_path / "m.onnx.data") == before
    # through a symlink too: files are compared, not strings
    (tmp_path / "alias").symlink_to(tmp_path / "m.onnx.data")
    result = invoke(src, "-o", tmp_path / "alias", "--force")
    assert result.exit_code == 2 and "external data of the input" in result.output
    assert digest(tmp_path / "m.onnx.data") == before


# ------------------------------------------------------------------ 2. reports obey the -o rules


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--report", "{src}", "--force"], "report would overwrite the input {src}\n"),
        (["--report", "{src}.data", "--force"], "report would overwrite"),
        (["--report", "{out}"], "report is also the output"),
        (["--report", "{out}.data"], "report is also the output data file"),
        (["--validate", "--validation-report", "{src}", "--force"], "would overwrite the input"),
        (
            ["--validate", "--validation-report", "{tmp}/v.json", "--junit", "{tmp}/v.json"],
            "JUnit report is also the validation report",
        ),
        (["--validate", "--junit", "{out}"], "JUnit report is also the output"),
        (["--report", "{tmp}/existing.json"], "report exists (use --force to overwrite)"),
        (["--report", "{tmp}/no/dir/r.json"], "cannot write report: folder"),
    ],
)
def test_report_paths_are_checked_before_any_work(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    src = external_model(tmp_path / "m.onnx")
    (tmp_path / "existing.json").write_text("keep")
    out = tmp_path / "o.onnx"
    before = digest(src, tmp_path / "m.onnx.data", tmp_path / "existing.json")
    names = {"src": src, "out": out, "tmp": tmp_path}
    result = invoke(src, "-o", out, *(e.format(**names) for e in extra))
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("amp-convert: error: ")
    assert message.format(**names) in result.output
    assert digest(src, tmp_path / "m.onnx.data", tmp_path / "existing.json") == before
    assert listing(tmp_path) == ["existing.json", "m.onnx", "m.onnx.data"]  # nothing written


def test_report_replaced_only_with_force_and_keeps_its_mode(tmp_path: Path) -> None:
    src = external_model(tmp_path / "m.onnx")
    report = tmp_path / "r.json"
    report.write_text("old")
    os.chmod(report, 0o664)
    result = invoke(src, "-o", tmp_path / "o.onnx", "--report", report, "--force")
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["level"] == "O2"
    assert stat.S_IMODE(report.stat().st_mode) == 0o664


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    src = external_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    amp_convert.convert_file(src, out, level="O2")
    return src, out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--report", "{src}"], "report would overwrite the input "),
        (["--report", "{src}.data", "--force"], "report would overwrite"),
        (["--junit", "{out}", "--force"], "JUnit report would overwrite the input {out}\n"),
        (["--report", "{tmp}/r", "--junit", "{tmp}/r"], "JUnit report is also the report"),
        (["--report", "{tmp}/existing.json"], "report exists (use --force to overwrite)"),
    ],
)
def test_validate_report_paths(
    pair: tuple[Path, Path], tmp_path: Path, extra: list[str], message: str
) -> None:
    src, out = pair
    (tmp_path / "existing.json").write_text("keep")
    files = [
        src,
        tmp_path / "m.onnx.data",
        out,
        tmp_path / "o.onnx.data",
        tmp_path / "existing.json",
    ]
    before = digest(*files)
    names = {"src": src, "out": out, "tmp": tmp_path}
    result = invoke(
        "validate",
        src,
        out,
        "--provider",
        "emulate",
        "--runs",
        "0",
        *(e.format(**names) for e in extra),
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("amp-convert: error: ")
    assert message.format(**names) in result.output
    assert digest(*files) == before
    assert not (tmp_path / "r").exists()


@pytest.mark.integration
def test_validate_report_force_replaces(pair: tuple[Path, Path], tmp_path: Path) -> None:
    src, out = pair
    report, junit = tmp_path / "v.json", tmp_path / "v.xml"
    report.write_text("old")
    args = ["validate", src, out, "--provider", "emulate", "--runs", "0", "--report", report]
    assert invoke(*args, "--junit", junit).exit_code == 2
    assert report.read_text() == "old" and not junit.exists()
    result = invoke(*args, "--junit", junit, "--force")
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["candidate"] == str(out)
    assert junit.read_text().count("<testcase") == 1


def test_report_write_is_atomic(tmp_path: Path, monkeypatch) -> None:
    report = tmp_path / "r.json"
    report.write_text("old")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safe_write.os, "replace", full_disk)
    with pytest.raises(OutputError, match="No space left"):
        ConversionReport(level="O2", dtype="fp16", keep_io_types=True).to_json(report)
    assert report.read_text() == "old"
    assert listing(tmp_path) == ["r.json"]


# ------------------------------------------------------------------ 3. the pair is committed


def test_force_rewrite_switches_pair_and_removes_only_the_old_data(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    src, out = pair
    assert data_files(out) == {"o.onnx.data"}
    amp_convert.convert_file(src, out, level="O1", force=True)
    (name,) = data_files(out)
    assert (
        name.startswith("o.onnx.")
        and name.endswith(".data")
        and len(name) == len("o.onnx.data") + 9
    )
    assert listing(tmp_path) == sorted(["m.onnx", "m.onnx.data", name, "o.onnx"])
    third = invoke(src, "-o", out, "--force", "--level", "O3")
    assert third.exit_code == 0, third.output
    assert data_files(out) == {"o.onnx.data"}  # the usual name is free again
    assert listing(tmp_path) == ["m.onnx", "m.onnx.data", "o.onnx", "o.onnx.data"]
    np.testing.assert_allclose(outputs_of(out), outputs_of(src), rtol=2e-2, atol=2e-2)


def test_inline_rewrite_of_an_external_pair_removes_its_data(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    src, out = pair
    amp_convert.convert_file(src, out, force=True, external_data=False)
    assert data_files(out) == set()
    assert listing(tmp_path) == ["m.onnx", "m.onnx.data", "o.onnx"]
    np.testing.assert_allclose(outputs_of(out), outputs_of(src), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("stage", ["graph", "rename", "data"])
def test_failed_force_rewrite_keeps_the_old_pair(
    pair: tuple[Path, Path], tmp_path: Path, monkeypatch, stage: str
) -> None:
    src, out = pair
    old = digest(out, tmp_path / "o.onnx.data")
    old_result = outputs_of(out)
    real_replace, real_save = os.replace, onnx.save

    def graph_disk_full(proto, path, *a, **k):  # the data is written, the graph is not
        Path(path).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    def rename_fails(a, b, **kw):  # everything written, the final rename of the .onnx fails
        if Path(b).name == out.name:  # renames are made in the folder held open (dir_fd)
            raise OSError(28, "No space left on device")
        return real_replace(a, b, **kw)

    def data_disk_full(fd, data, offset):  # a chunk of the weights half written
        os.pwrite(fd, b"\0" * 10, offset)
        raise OSError(28, "No space left on device")

    def direct_disk_full(stream, length):  # the same with O_DIRECT: one block, then full
        os.pwrite(stream.fd, stream.view[: direct_stream.ALIGN], stream.start)
        raise OSError(28, "No space left on device")

    if stage == "graph":
        monkeypatch.setattr(onnx, "save", graph_disk_full)
    elif stage == "rename":
        monkeypatch.setattr(amp_io.os, "replace", rename_fails)
    else:
        monkeypatch.setattr(data_file, "_pwrite_all", data_disk_full)
        monkeypatch.setattr(direct_stream.DirectStream, "_write", direct_disk_full)
    with pytest.raises(OutputError, match="No space left on device"):
        amp_convert.convert_file(src, out, dtype="bf16", force=True)
    monkeypatch.setattr(onnx, "save", real_save)
    assert digest(out, tmp_path / "o.onnx.data") == old
    assert listing(tmp_path) == ["m.onnx", "m.onnx.data", "o.onnx", "o.onnx.data"]
    onnx.checker.check_model(str(out), full_check=True)
    np.testing.assert_array_equal(outputs_of(out), old_result)


def test_only_our_data_files_are_removed(tmp_path: Path) -> None:
    """A replaced output's data file is removed only when named by us and not read by the input."""
    shared = tmp_path / "o.onnx.0123abcd.data"
    src = external_model(tmp_path / "m.onnx", location=shared.name)
    external_model(tmp_path / "o.onnx", location=shared.name, seed=1)  # old output, same file
    before = digest(shared)
    amp_convert.convert_file(src, tmp_path / "o.onnx", force=True)
    assert digest(shared) == before
    other = tmp_path / "other"
    other.mkdir()
    src2 = external_model(other / "m.onnx")
    external_model(other / "o.onnx", location="weights.bin", seed=1)  # not our naming
    amp_convert.convert_file(src2, other / "o.onnx", force=True)
    assert listing(other) == ["m.onnx", "m.onnx.data", "o.onnx", "o.onnx.data", "weights.bin"]


# ------------------------------------------------------------------ 4. SIGTERM


_CHILD = textwrap.dedent(
    """
    import sys, threading, time
    import onnx, onnx_ir
    import amp_convert

    src, dst, stage, entry = sys.argv[1:5]
    first = threading.Lock()

    def announce():  # once, whichever writer thread comes first
        if first.acquire(blocking=False):
            print("WRITING", flush=True)
        time.sleep(0.2)

    if stage == "data":
        from amp_convert.files import data_file

        real = data_file.write_chunk

        def slow(*a, **k):
            announce()
            return real(*a, **k)

        data_file.write_chunk = slow
    else:
        real_save = onnx.save

        def slow_save(*a, **k):
            announce()
            time.sleep(60)
            return real_save(*a, **k)

        onnx.save = slow_save
    if entry == "api":
        amp_convert.convert_file(src, dst, force=True)
    else:
        from amp_convert.commands.cli import main

        sys.argv = ["amp-convert", src, "-o", dst, "--force", "-q"]
        main()
    print("FINISHED", flush=True)
    """
)


@pytest.mark.integration
@pytest.mark.parametrize("entry", ["api", "cli"])
@pytest.mark.parametrize("stage", ["data", "graph"])
def test_sigterm_mid_write_leaves_no_temporary_files(
    tmp_path: Path, stage: str, entry: str
) -> None:
    src = external_model(tmp_path / "m.onnx", layers=40)
    out = tmp_path / "o.onnx"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(src), str(out), stage, entry],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout.readline() == "WRITING\n"
        hidden = [n for n in listing(tmp_path) if n.startswith(".")]
        assert hidden, "the write had begun: temporary files exist"
        child.send_signal(signal.SIGTERM)
        rest, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGTERM, err
    assert "FINISHED" not in rest
    assert listing(tmp_path) == ["m.onnx", "m.onnx.data"]


def test_sigterm_goes_to_the_previous_handler_after_cleanup(tmp_path: Path, monkeypatch) -> None:
    src = external_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    real_save = onnx.save

    def killed_while_saving(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handler runs at the next bytecode
        return real_save(*a, **k)

    monkeypatch.setattr(onnx, "save", killed_while_saving)
    try:
        with pytest.raises(OutputError, match="interrupted by SIGTERM"):
            amp_convert.convert_file(src, out)
        assert received == [signal.SIGTERM]
        assert listing(tmp_path) == ["m.onnx", "m.onnx.data"]
        monkeypatch.setattr(onnx, "save", real_save)
        handler = signal.getsignal(signal.SIGTERM)
        amp_convert.convert_file(src, out)
        assert signal.getsignal(signal.SIGTERM) is handler  # restored after a normal write too
    finally:
        signal.signal(signal.SIGTERM, previous)


# ------------------------------------------------------------------ 5. modes


@pytest.fixture
def umask():
    def set_umask(mask: int) -> None:
        os.umask(mask)

    old = os.umask(0o022)
    yield set_umask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_new_files_follow_the_umask(tmp_path: Path, umask, mask: int) -> None:
    src = external_model(tmp_path / "m.onnx")
    umask(mask)
    result = invoke(src, "-o", tmp_path / "o.onnx", "--report", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    for name in ("o.onnx", "o.onnx.data", "r.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~mask, name


def test_force_keeps_the_mode_of_the_replaced_files(pair: tuple[Path, Path], umask) -> None:
    src, out = pair
    data = out.with_name("o.onnx.data")
    os.chmod(out, 0o640)
    os.chmod(data, 0o604)
    amp_convert.convert_file(src, out, force=True, level="O1")
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    (name,) = data_files(out)
    assert stat.S_IMODE(out.with_name(name).stat().st_mode) == 0o604
    inline = out.with_name("inline.onnx")
    onnx.save(mlp(), inline)
    os.chmod(inline, 0o751)
    amp_convert.convert_file(inline, inline.with_name("i2.onnx"))
    os.chmod(inline.with_name("i2.onnx"), 0o751)
    amp_convert.convert_file(inline, inline.with_name("i2.onnx"), force=True)
    assert stat.S_IMODE(inline.with_name("i2.onnx").stat().st_mode) == 0o751


# ------------------------------------------------------------------ 16. no empty data file


def test_tiny_external_model_writes_no_data_file(tmp_path: Path) -> None:
    src = external_model(tmp_path / "m.onnx", layers=1, width=4)  # 64 + 16 bytes, external
    assert data_files(src) == {"m.onnx.data"}
    out = tmp_path / "o.onnx"
    report = amp_convert.convert_file(src, out)
    assert listing(tmp_path) == ["m.onnx", "m.onnx.data", "o.onnx"]
    assert data_files(out) == set()
    assert report.size_after == out.stat().st_size
    assert report.size_before == src.stat().st_size + (tmp_path / "m.onnx.data").stat().st_size
    x = np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)
    np.testing.assert_allclose(
        run(str(out), {"x": x})[0], run(str(src), {"x": x})[0], rtol=1e-2, atol=1e-3
    )
