"""Options are made once: ConvertOptions / ValidateOptions check themselves, every entry point takes
them (an object and/or typed keywords), and an unknown name is an error everywhere."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import amp_convert
from amp_convert import ConvertOptions, OptionError, ValidationError
from amp_convert.auto import auto_convert
from amp_convert.commands.cli import cli
from amp_convert.options.convert import cli_fields, make_options, user_fields
from amp_convert.validation.options import ValidateOptions
from tests.graphs import pow_model
from tests.helpers import mypy_errors, one_line_error

pytestmark = pytest.mark.integration

F32 = onnx.TensorProto.FLOAT
REPO = Path(__file__).resolve().parents[2]


def _blocks() -> onnx.ModelProto:
    """attn_q -> ffn_act -> ffn_out: names that share letters with "attn" but do not contain it."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.1, "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["q"], name="attn_q"),
            helper.make_node("Relu", ["q"], ["a"], name="ffn_act"),
            helper.make_node("MatMul", ["a", "w"], ["y"], name="ffn_out"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F32, [2, 8])],
        [helper.make_tensor_value_info("y", F32, [2, 8])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _fp32(report: amp_convert.ConversionReport) -> set[str]:
    return {n.name for n in report.nodes if n.precision == "fp32"}


def test_auto_and_convert_keep_the_same_excluded_nodes() -> None:
    """A string is one pattern everywhere (auto_convert split "attn" into a, t, t, n)."""
    model = _blocks()
    _, converted = amp_convert.convert(model, level="O3", exclude_nodes="attn", return_report=True)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)}
    _, auto = auto_convert(model, inputs=feeds, exclude_nodes="attn")
    assert auto.passed and auto.conversion is not None
    assert _fp32(converted) == _fp32(auto.conversion) == {"attn_q"}
    reasons = {n.reason for n in auto.conversion.nodes if n.name == "attn_q"}
    assert reasons == {"user: --exclude-nodes attn"}


def test_an_options_object_and_keywords_combine() -> None:
    base = ConvertOptions(level="o1", exclude_nodes="attn", dims={"batch": 2})
    assert base.level == amp_convert.Level.O1 and base.exclude_nodes == ("attn",)
    assert base == ConvertOptions.from_kwargs(level="O1", exclude_nodes=["attn"], dims=["batch=2"])
    with pytest.raises(OptionError, match="no dim named 'batch'"):  # this model has none
        amp_convert.convert(_blocks(), options=base)
    base = base.replace(dims={})
    _, report = amp_convert.convert(_blocks(), options=base, dtype="bf16", return_report=True)
    assert (report.level, report.dtype) == ("O1", "bf16")
    assert base.replace(level="O2").exclude_patterns[0].pattern == "attn"  # derived again
    with pytest.raises(OptionError, match="unknown level"):
        base.replace(level="O9")
    with pytest.raises(OptionError, match="must be a ConvertOptions"):
        amp_convert.convert(_blocks(), options={"level": "O1"})  # type: ignore[arg-type]


def test_unknown_option_names_are_errors_at_every_entry_point(tmp_path: Path) -> None:
    model = _blocks()
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    entry_points = [
        lambda: amp_convert.convert(model, levle="O2"),
        lambda: amp_convert.convert_file(src, tmp_path / "out.onnx", levle="O2"),
        lambda: auto_convert(model, levle="O2"),
        lambda: amp_convert.validate(src, src, provder="emulate"),
        lambda: ConvertOptions.from_kwargs(levle="O2"),
        lambda: ValidateOptions.from_kwargs(provder="emulate"),
    ]
    for call in entry_points:
        with pytest.raises(OptionError, match=r"did you mean 'level'|unknown validation option"):
            call()  # type: ignore[call-arg]
    assert not (tmp_path / "out.onnx").exists()
    one_line_error(CliRunner().invoke(cli, [str(src), "--levle", "O2"]), "--levle")


def test_mypy_checks_option_names(tmp_path: Path) -> None:
    """The keywords are a TypedDict: a misspelt option is a type error before anything runs."""
    pytest.importorskip("mypy")
    errors = mypy_errors(
        "import amp_convert\n"
        "from amp_convert.auto import auto_convert\n"
        "amp_convert.convert(b'', level='O2', exclude_nodes='attn')\n"
        "amp_convert.convert(b'', levle='O2')\n"
        "auto_convert(b'', exclude_node='attn')\n"
        "amp_convert.validate('a', 'b', provder='cpu')\n",
        tmp_path,
    )
    assert sorted({line.split(":")[1] for line in errors}) == ["4", "5", "6"], errors
    for word in ('"levle"', '"exclude_node"', '"provder"'):
        assert any(f"Unexpected keyword argument {word}" in line for line in errors), word


def test_validate_options_check_themselves() -> None:
    opts = ValidateOptions(provider="emulate", dims=["batch=2"], match=["boxes:sort"], top1="y")
    assert (opts.dims, opts.match, opts.top1) == ({"batch": 2}, {"boxes": "sort"}, {"y"})
    for bad, message in (
        ({"provider": "gpu"}, "expected one of auto, cuda, cpu, emulate"),
        ({"runs": -1}, "runs must be a non-negative integer"),
        ({"decode_steps": 0}, "decode steps must be an integer >= 1"),
        ({"match": {"y": "shuffle"}}, "expected one of"),
    ):
        with pytest.raises(ValidationError, match=message):
            ValidateOptions.from_kwargs(**bad)  # type: ignore[arg-type]


def test_auto_refuses_the_cpu_provider_with_one_reason_everywhere(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="--auto needs --provider emulate or cuda"):
        auto_convert(_blocks(), provider="cpu")
    with pytest.raises(OptionError, match="--auto needs --provider emulate or cuda"):
        auto_convert(_blocks(), validation=ValidateOptions(provider="cpu"))
    src = tmp_path / "m.onnx"
    onnx.save(_blocks(), src)
    result = CliRunner().invoke(cli, [str(src), "--auto", "--provider", "cpu"])
    one_line_error(result, "--auto needs --provider emulate or cuda")


def test_auto_starts_from_o3_unless_told(tmp_path: Path) -> None:
    feeds = {"x": np.ones((2, 8), np.float32)}
    _, default = auto_convert(_blocks(), inputs=feeds)
    _, told = auto_convert(_blocks(), inputs=feeds, level="O1")
    _, given = auto_convert(_blocks(), inputs=feeds, options=ConvertOptions(level="O2"))
    assert (default.level, told.level, given.level) == ("O3", "O1", "O2")


def test_one_dim_sizes_the_cost_estimate_and_the_calibration_inputs(tmp_path: Path) -> None:
    """--dim is parsed once and reaches both users (a guard: it used to be popped and put back)."""
    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", F32, ["batch", 8])],
        [helper.make_tensor_value_info("y", F32, ["batch", 8])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    src, out, report = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(model, src)
    args = [str(src), "--auto", "--dim", "batch=3", "--report", str(report), "-o", str(out), "-q"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["level"] == "O3" and data["conversion"]["traffic_dims"] == {"batch": 3}
    assert any("dims (batch=3)" in w for w in data["warnings"])


# ---------------------------------------------------------------- options declared once
def test_cli_shows_every_option_field() -> None:
    text = CliRunner().invoke(cli, ["convert", "--help"]).output
    for f in cli_fields():
        flag = f.metadata["flags"][0].split("/")[0]
        assert flag in text, flag
    # the only option the command line does not show: --auto's typed pin set (API only)
    assert {f.name for f in user_fields()} - {f.name for f in cli_fields()} == {"pinned_nodes"}


def test_validate_shows_every_validation_field_and_convert_the_shared_ones() -> None:
    """ValidateOptions' flags come from its declarations: every field but the API-only ones on
    `validate`, every field without a `commands` limit on `convert` (for --validate/--auto)."""
    from amp_convert.commands.validate import NOT_FOR_AUTO, VALIDATION_OPTION_NAMES
    from amp_convert.options import declare

    shown = {
        command: CliRunner().invoke(cli, [command, "--help"], terminal_width=200).output
        for command in ("validate", "convert")
    }
    for command, text in shown.items():
        for f in declare.cli_fields(ValidateOptions, command):
            parts = f.metadata.get("parts") or ()
            for flag in [p.flag for p in parts] or [f.metadata["flags"][0]]:
                assert flag in text, (command, flag)
    assert "--decode-steps" in shown["validate"] and "--decode-steps" not in shown["convert"]
    api_only = {f.name for f in declare.user_fields(ValidateOptions)} - {
        f.name for f in declare.cli_fields(ValidateOptions, "validate")
    }
    assert api_only == {"save_inputs"}  # an output: each command declares it with its others
    assert set(VALIDATION_OPTION_NAMES) >= {"dim", "atol", "max_nan", "provider"}
    assert set(NOT_FOR_AUTO) == {
        "runs",
        "warmup",
        "top1",
        "match",
        "report_only",
        "cuda_option",
    }  # --auto judges


def test_api_takes_every_option_field() -> None:
    options = make_options(**{f.name: f.default for f in user_fields()})
    assert options == ConvertOptions()


def test_stamp_covers_every_option_and_the_op_list_content(tmp_path: Path) -> None:
    lists_file = tmp_path / "lists.txt"
    lists_file.write_text("[deny]\nRelu x\n")
    stamp = make_options(op_lists=lists_file).stamp()
    assert set(__import__("json").loads(stamp)) == {f.name for f in user_fields()}
    lists_file.write_text("[deny]\nSigmoid x\n")
    assert make_options(op_lists=lists_file).stamp() != stamp


def test_converting_again_with_another_op_list_converts(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("[deny]\nPow x\n")
    b.write_text("[allow]\nPow y\n")
    once = amp_convert.convert(pow_model(3.0), op_lists=a)
    _, again = amp_convert.convert(once, op_lists=a, return_report=True)
    assert again.already_converted
    _, other = amp_convert.convert(once, op_lists=b, return_report=True)
    assert not other.already_converted


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fp32_ops": 123}, "fp32_ops must be a string or a list of strings"),
        ({"fp16_ops": [1]}, "fp16_ops must be a string or a list of strings"),
        ({"dtype": np.float32}, "dtype must be 'fp16' or 'bf16'"),
        ({"dtype": "int8"}, "unknown dtype"),
        ({"keep_io_types": "no"}, "keep_io_types must be True or False"),
        ({"level": 2}, "level must be one of"),
        ({"levle": "O2"}, "unknown option"),
        ({"dims": ["batch"]}, "expected NAME=VALUE"),
        ({"dims": {"batch": -1}}, "non-negative integer"),
        ({"dims": ["batch=1", "batch=2"]}, "given twice"),
    ],
)
def test_bad_api_options_are_option_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        amp_convert.convert(pow_model(2.0), **kwargs)


def test_numpy_dtypes_are_understood() -> None:
    assert make_options(dtype=np.float16).dtype == "fp16"


def test_unknown_user_op_names_are_refused() -> None:
    """As in the CLI: a misspelt op name would silently keep nothing FP32."""
    with pytest.raises(OptionError, match=r"--fp32-ops Powr: no ONNX or ONNX Runtime op.*'Pow'"):
        amp_convert.convert(pow_model(2.0), fp32_ops="Powr")


def test_options_dataclass_has_no_undeclared_cli_field() -> None:
    for f in dataclasses.fields(ConvertOptions):
        api_only = f.metadata.get("kind") == "api"  # pinned_nodes: a typed set, not a flag
        assert f.metadata.get("derived") or api_only or "flags" in f.metadata, f.name


def _batched() -> onnx.ModelProto:
    """_blocks with a symbolic batch dim: the one dim --dim may name."""
    model = _blocks()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


MISSPELT = r"--dim btach: the model has no dim named 'btach' \(did you mean 'batch'\?\)"


def test_a_misspelt_dim_is_refused_at_every_entry_point(tmp_path: Path) -> None:
    """One check (cost/dims.check_dim_names) and one message, whichever way the model comes in;
    nothing is written and the given model is left untouched."""
    from amp_convert import MixedPrecisionPass
    from amp_convert.files import io

    model = _batched()
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    before = src.read_bytes()
    ir_model = io.load_model(model)
    entry_points = {
        "convert": lambda: amp_convert.convert(model, dims={"btach": 4}),
        "convert (options)": lambda: amp_convert.convert(
            model, options=ConvertOptions(dims=["btach=4"])
        ),
        "convert_file": lambda: amp_convert.convert_file(
            src, tmp_path / "o.onnx", dims={"btach": 4}
        ),
        "convert_ir": lambda: amp_convert.convert_ir(ir_model, ConvertOptions(dims={"btach": 4})),
        "MixedPrecisionPass": lambda: MixedPrecisionPass(dims={"btach": 4})(ir_model),
        "auto_convert": lambda: auto_convert(model, dims={"btach": 4}),
        "validate": lambda: amp_convert.validate(src, src, provider="emulate", dims={"btach": 4}),
    }
    for name, call in entry_points.items():
        with pytest.raises(OptionError, match=MISSPELT):
            call()
            pytest.fail(f"{name} accepted a misspelt dim")
    assert not (tmp_path / "o.onnx").exists() and src.read_bytes() == before
    out = tmp_path / "cli.onnx"
    for args in (
        [str(src), "-o", str(out), "--dim", "btach=4"],
        [str(src), "-o", str(out), "--dim", "btach=4", "--auto", "--provider", "emulate"],
        ["validate", str(src), str(src), "--dim", "btach=4", "--provider", "emulate", "-q"],
    ):
        line = one_line_error(CliRunner().invoke(cli, args))
        assert line.startswith("amp-convert: error: --dim btach: the model has no dim named")
        assert "did you mean 'batch'?" in line
    assert not out.exists()
    # the right name is accepted everywhere
    amp_convert.convert(model, dims={"batch": 4})
    MixedPrecisionPass(dims={"batch": 4})(io.load_model(model))


def test_a_dim_is_parsed_once_and_handed_down() -> None:
    """ConvertOptions holds a Dims; the validation of `convert --validate` gets that very object."""
    from amp_convert.cost.dims import Dims

    options = ConvertOptions(dims=["seq=8", "batch=2"])
    assert isinstance(options.dims, Dims) and dict(options.dims) == {"batch": 2, "seq": 8}
    assert ValidateOptions(dims=options.dims).dims == options.dims == {"batch": 2, "seq": 8}
    assert json.loads(options.stamp())["dims"] == [["batch", 2], ["seq", 8]]  # as before Dims
    with pytest.raises(OptionError, match="given twice"):
        ConvertOptions(dims=["batch=2", "batch=3"])


def test_each_level_says_what_it_means_by_name() -> None:
    """Steps ask the level (keeps_model, obeys_deny_list...) instead of comparing names."""
    from amp_convert.options.convert import AUTO_LEVEL, Level, resolve

    table = {
        # level: keeps_model, obeys_deny_list, lowers_everything, places_free_nodes, start low
        Level.O0: (True, True, False, False, False),
        Level.O1: (False, True, False, True, False),
        Level.O2: (False, True, False, True, True),
        Level.O3: (False, False, True, False, False),
    }
    for level, want in table.items():
        got = (
            level.keeps_model,
            level.obeys_deny_list,
            level.lowers_everything,
            level.places_free_nodes,
            level.free_nodes_start_low,
        )
        assert got == want, level
    # --auto's starting level, decided in one place
    assert resolve(None, {}, auto=True).level == AUTO_LEVEL == Level.O3
    assert resolve(None, {"level": "O1"}, auto=True).level == Level.O1
    assert resolve(ConvertOptions(), {}, auto=True).level == Level.O2  # an object says its own
