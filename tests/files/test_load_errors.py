"""Malformed inputs fail with one clear line and exit 2, before anything is written.

Each case used to end in "internal error" (exit 3) or a traceback: onnx-ir and numpy raised bare
ValueErrors deep in the conversion. The checks run on the protobuf and file sizes at load.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import amp_convert
from amp_convert import InputError, OptionError
from amp_convert.commands.cli import cli
from tests.graphs import if_branches_reading
from tests.helpers import one_line_error


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def matmul_relu(inits: list[TensorProto], order: tuple[int, int] = (0, 1)) -> onnx.ModelProto:
    """y = Relu(x @ w) with w [4, 4] given by `inits`; `order` permutes the two nodes."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        [nodes[i] for i in order],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def weight() -> TensorProto:
    return numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, "w")


def external_weight(location: str, offset: int = 0, length: int | None = 64) -> TensorProto:
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4])
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": offset}
    if length is not None:
        entries["length"] = length
    for key, value in entries.items():
        t.external_data.add(key=key, value=str(value))
    return t


def floats(n: int) -> bytes:
    return np.ones(n, dtype=np.float32).tobytes()


def traversal(folder: Path) -> Path:
    (folder / "secret.bin").write_bytes(floats(16))
    (folder / "sub").mkdir()
    path = folder / "sub" / "m.onnx"
    onnx.save(matmul_relu([external_weight("../secret.bin")]), path)
    return path


def symlink_outside(folder: Path) -> Path:
    (folder / "secret.bin").write_bytes(floats(16))
    (folder / "sub").mkdir()
    (folder / "sub" / "w.bin").symlink_to(folder / "secret.bin")
    path = folder / "sub" / "m.onnx"
    onnx.save(matmul_relu([external_weight("w.bin")]), path)
    return path


def hard_link(folder: Path) -> Path:
    (folder / "w.bin").write_bytes(floats(16))
    os.link(folder / "w.bin", folder / "w2.bin")
    path = folder / "m.onnx"
    onnx.save(matmul_relu([external_weight("w.bin")]), path)
    return path


def absolute_location(folder: Path) -> Path:
    (folder / "w.bin").write_bytes(floats(16))
    path = folder / "m.onnx"
    onnx.save(matmul_relu([external_weight(str(folder / "w.bin"))]), path)
    return path


def short_external(folder: Path) -> Path:
    (folder / "m.onnx.data").write_bytes(floats(8))
    path = folder / "m.onnx"
    onnx.save(matmul_relu([external_weight("m.onnx.data")]), path)
    return path


def short_external_offset(folder: Path) -> Path:
    """Long enough for the tensor, but not at the declared offset (and no length entry)."""
    (folder / "m.onnx.data").write_bytes(floats(16))
    path = folder / "m.onnx"
    onnx.save(matmul_relu([external_weight("m.onnx.data", offset=32, length=None)]), path)
    return path


def short_raw(folder: Path) -> Path:
    w = weight()
    w.raw_data = w.raw_data[:20]
    path = folder / "m.onnx"
    onnx.save(matmul_relu([w]), path)
    return path


def short_typed(folder: Path) -> Path:
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4], float_data=[1.0] * 5)
    path = folder / "m.onnx"
    onnx.save(matmul_relu([w]), path)
    return path


def cycle(folder: Path) -> Path:
    """Two nodes that read each other's output: no order runs them (sorted ones are accepted:
    tests/properties/test_ort_loads.py)."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "r"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["r"], name="relu"),
            helper.make_node("Neg", ["s"], ["y"], name="neg"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [weight()],
    )
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def dangling_in_subgraph(folder: Path) -> Path:
    """An If branch reads a value that no scope defines."""
    then, other = if_branches_reading("nowhere")
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def unknown_external_key(folder: Path) -> Path:
    (folder / "m.onnx.data").write_bytes(floats(16))
    w = external_weight("m.onnx.data")
    w.external_data.add(key="bogus", value="1")
    path = folder / "m.onnx"
    onnx.save(matmul_relu([w]), path)
    return path


CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "traversal": (
        traversal,
        "{path}: initializer 'w': external data location '../secret.bin' is outside the model's "
        "folder {folder}/sub; refused",
    ),
    "symlink outside": (
        symlink_outside,
        "{path}: initializer 'w': external data location 'w.bin' is a symlink to "
        "{folder}/secret.bin, outside the model's folder {folder}/sub; refused",
    ),
    "hard link": (
        hard_link,
        "{path}: external data file 'w.bin' has 2 hard links; refused (copy it to a file of "
        "its own)",
    ),
    "absolute": (absolute_location, "initializer 'w': external data location '/"),
    "short external data": (
        short_external,
        "{path}: initializer 'w': external data file 'm.onnx.data' holds 32 bytes, shorter than "
        "the 64 declared (offset 0); truncated?",
    ),
    "short at offset": (
        short_external_offset,
        "{path}: initializer 'w': external data file 'm.onnx.data' holds 64 bytes, shorter than "
        "the 96 declared (offset 32); truncated?",
    ),
    "short raw_data": (
        short_raw,
        "{path}: initializer 'w' holds 20 bytes of raw_data but its dims [4, 4] need 64; the "
        "file is corrupt",
    ),
    "short float_data": (
        short_typed,
        "{path}: initializer 'w' holds 5 values in float_data but its dims [4, 4] need 16",
    ),
    "cycle": (
        cycle,
        "{path}: the nodes form a cycle through node 'add' (Add); no order can run them (ONNX "
        "Runtime refuses it too)",
    ),
    "dangling input in a subgraph": (
        dangling_in_subgraph,
        "{path}: node 'body_relu' (Relu) reads 'nowhere', which no node, graph input or "
        "initializer defines; the model is invalid",
    ),
    "unknown external-data key": (
        unknown_external_key,
        "{path}: initializer 'w': unknown external-data key 'bogus' (ONNX Runtime reads only "
        "checksum, length, location, offset and refuses the model)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cli_one_line_exit_2_nothing_written(tmp_path: Path, case: str) -> None:
    make, message = CASES[case]
    path = make(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = invoke(path, "-o", tmp_path / "o.onnx", "--report", tmp_path / "r.json")
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("amp-convert: error: ")
    assert message.format(path=path, folder=tmp_path) in lines[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("case", list(CASES))
def test_api_raises_input_error(tmp_path: Path, case: str) -> None:
    make, message = CASES[case]
    path = make(tmp_path)
    expected = message.format(path=path, folder=tmp_path)
    with pytest.raises(InputError) as info:
        amp_convert.convert_file(path, tmp_path / "o.onnx")
    assert expected in str(info.value)
    with pytest.raises(InputError):
        amp_convert.convert(path)
    assert not (tmp_path / "o.onnx").exists()


def test_in_memory_models_are_checked_too(tmp_path: Path) -> None:
    w = weight()
    w.raw_data = w.raw_data[:20]
    with pytest.raises(InputError, match="model: initializer 'w' holds 20 bytes of raw_data"):
        amp_convert.convert(matmul_relu([w]))
    with pytest.raises(InputError, match="bytes: the nodes form a cycle through node 'add'"):
        amp_convert.convert(onnx.load(cycle(tmp_path)).SerializeToString())


def test_report_into_missing_folder_fails_before_the_model_is_written(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(matmul_relu([weight()]), path)
    result = invoke(path, "-o", tmp_path / "o.onnx", "--report", tmp_path / "no" / "r.json")
    assert result.exit_code == 2
    assert result.output == (
        f"amp-convert: error: {tmp_path / 'no' / 'r.json'}: cannot write report: folder "
        f"{tmp_path / 'no'} does not exist\n"
    )
    assert not (tmp_path / "o.onnx").exists()


def test_empty_model_path() -> None:
    result = invoke("")
    assert result.exit_code == 2
    assert result.output == "amp-convert: error: empty model path ''\n"
    with pytest.raises(InputError, match=r"^\.: not a file$"):
        amp_convert.convert_file(".")
    with pytest.raises(InputError, match="src must be a path, not NoneType"):
        amp_convert.convert_file(None)  # type: ignore[arg-type]


MORE_BYTES = "the result moves more bytes per inference than the original"


def test_strict_check_does_not_depend_on_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    """Small external tensors are resolved against the model's folder, wherever we run from."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "m.onnx.data").write_bytes(floats(16))
    path = folder / "m.onnx"
    onnx.save(matmul_relu([external_weight("m.onnx.data")]), path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    reports = {}
    for cwd in (folder, elsewhere):
        monkeypatch.chdir(cwd)
        reports[cwd] = amp_convert.convert_file(path, tmp_path / f"{cwd.name}.onnx")
        # this 2x8 MatMul moves more bytes low than FP32 (its two Casts): that warning is due
        warnings = [w for w in reports[cwd].warnings if not w.startswith(MORE_BYTES)]
        assert warnings == [], reports[cwd].warnings
        result = invoke(path, "-o", tmp_path / f"{cwd.name}.cli.onnx")
        lines = [
            x for x in result.output.splitlines() if not x.startswith(f"warning: {MORE_BYTES}")
        ]
        assert result.exit_code == 0 and "warning" not in "\n".join(lines), result.output
    assert sorted(os.listdir(tmp_path)) == [
        "elsewhere",
        "elsewhere.cli.onnx",
        "elsewhere.onnx",
        "model",
        "model.cli.onnx",
        "model.onnx",
    ]


# --------------------------------------------- paths that are not what they should be
# A FIFO, a device or a folder was "no such file", "does not exist" or "is missing".


def _special(folder: Path, kind: str) -> Path:
    """A FIFO, a folder or a character device named in `folder` (a symlink to /dev/null)."""
    path = folder / f"special.{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path = Path("/dev/null")
    return path


WORDS = {
    "fifo": "is a FIFO (named pipe), not a file",
    "folder": "is a folder, not a file",
    "device": "is a character device, not a file",
}


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_op_list_file_that_is_no_file_says_what_it_is(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(matmul_relu([weight()]), src)
    special = _special(tmp_path, kind)
    result = invoke(src, "-o", tmp_path / "o.onnx", "--op-lists", special)
    one_line_error(result, f"op list file {special} {WORDS[kind]}")
    with pytest.raises(OptionError, match="not a file"):
        amp_convert.convert(onnx.load(src), op_lists=special)
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_external_data_that_is_no_file_says_what_it_is(tmp_path: Path, kind: str) -> None:
    special = _special(tmp_path, kind)
    src = tmp_path / "m.onnx"
    onnx.save(matmul_relu([external_weight(special.name)]), src)
    result = invoke(src, "-o", tmp_path / "o.onnx")
    one_line_error(result, f"external data file {special.name!r} of initializer 'w' {WORDS[kind]}")


def test_output_folder_that_is_a_file_says_so(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(matmul_relu([weight()]), src)
    (tmp_path / "plain").write_text("")
    result = invoke(src, "-o", tmp_path / "plain" / "o.onnx")
    one_line_error(result, f"folder {tmp_path / 'plain'} is a file, not a folder")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_validate_candidate_that_is_no_file_says_what_it_is(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(matmul_relu([weight()]), src)
    special = _special(tmp_path, kind)
    result = invoke("validate", src, special)
    assert result.exit_code == 2, result.output
    assert f"candidate {special}: {WORDS[kind]}" in result.output
    assert "no such file" not in result.output
