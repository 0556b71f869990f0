"""Verdicts that cannot contradict themselves: what a user sees is what the exit code judged.

Each test is one way the old code lied: a page following a tampered value map, an emulated copy
reading the data next to a symlink's target, swapped arguments passing, a failing ``--validate``
still writing the model.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import amp_convert
from amp_convert.commands.cli import cli
from amp_convert.reports.value_map import METADATA_KEY, ValueMap
from models import overflow as ov
from models import validation_models as vm
from tests.helpers import one_line_error

pytest.importorskip("onnxruntime")

from amp_convert.validation import validate

pytestmark = pytest.mark.integration


# -- the emulated copy reads the data files ONNX Runtime reads ---------------------------------
def _external(model: onnx.ModelProto, path: Path) -> None:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # saving as external data rewrites the proto it is given
    onnx.save(
        copy, path, save_as_external_data=True, location=path.name + ".data", size_threshold=0
    )


def _negated(model: onnx.ModelProto) -> onnx.ModelProto:
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    for t in bad.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(t), t.name))
    return bad


def test_symlinked_candidate_is_emulated_with_the_data_next_to_the_link(tmp_path) -> None:
    """link/cand.onnx -> target/cand.onnx; ORT reads link/cand.onnx.data (negated weights), so
    must the emulated copy: it FAILs under emulate exactly as under --provider cpu."""
    ref, cand = vm.mlp_pair(vm.F16)
    onnx.save(ref, tmp_path / "ref.onnx")
    target, link = tmp_path / "target", tmp_path / "link"
    target.mkdir()
    link.mkdir()
    _external(cand, target / "cand.onnx")
    _external(_negated(cand), tmp_path / "cand.onnx")
    os.replace(tmp_path / "cand.onnx.data", link / "cand.onnx.data")
    os.symlink(target / "cand.onnx", link / "cand.onnx")
    limits = {"min_cosine": 0.99}
    cosines = {}
    for provider in ("cpu", "emulate"):
        report = validate(
            tmp_path / "ref.onnx", link / "cand.onnx", provider=provider, runs=0, thresholds=limits
        )
        assert report.failed, provider
        cosines[provider] = report.output("y").cosine
    assert cosines["emulate"] == pytest.approx(cosines["cpu"], abs=1e-3)
    assert cosines["emulate"] < 0  # the negated weights, not the target's folder's
    # the link's target folder, validated directly, passes: the two folders really differ
    direct = validate(
        tmp_path / "ref.onnx", target / "cand.onnx", provider="emulate", runs=0, thresholds=limits
    )
    assert direct.passed


def test_hugging_face_cache_layout_validates_under_emulate(tmp_path) -> None:
    """snapshots/v/model.onnx and its data are both symlinks into blobs/ (the hub cache)."""
    ref, cand = vm.mlp_pair(vm.F16)
    onnx.save(ref, tmp_path / "ref.onnx")
    staging, blobs, snap = tmp_path / "staging", tmp_path / "blobs", tmp_path / "snapshots" / "v"
    for d in (staging, blobs, snap):
        d.mkdir(parents=True)
    _external(cand, staging / "model.onnx")
    os.replace(staging / "model.onnx", blobs / "1f3a")
    os.replace(staging / "model.onnx.data", blobs / "9c0e")
    os.symlink("../../blobs/1f3a", snap / "model.onnx")
    os.symlink("../../blobs/9c0e", snap / "model.onnx.data")
    for provider in ("cpu", "emulate"):
        report = validate(
            tmp_path / "ref.onnx",
            snap / "model.onnx",
            provider=provider,
            runs=0,
            thresholds={"min_cosine": 0.999},
        )
        assert report.passed, provider
        assert report.output("y").cosine > 0.999
    assert sorted(os.listdir(blobs)) == ["1f3a", "9c0e"]  # nothing written next to the data


# -- swapped arguments ---------------------------------------------------------------------------
def test_swapped_arguments_are_refused(tmp_path) -> None:
    model, _ = ov.mlp_ok()
    src, dst = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx"
    onnx.save(model, src)
    amp_convert.convert_file(src, dst, level="O2")
    args = ["validate", str(dst), str(src), "--provider", "emulate", "--min-cosine", "0.99"]
    res = CliRunner().invoke(cli, args)
    one_line_error(res, "swapped", str(dst), "original FP32 model first")
    # the right order passes
    res = CliRunner().invoke(
        cli, ["validate", str(src), str(dst), "--provider", "emulate", "--min-cosine", "0.99", "-q"]
    )
    assert res.exit_code == 0, res.output
    # two FP32 files, one of them stamped with no low value (a stale stamp), are not "swapped"
    stale = onnx.load(dst)
    plain = onnx.load(src)
    plain.metadata_props.extend(p for p in stale.metadata_props if p.key == "amp_convert")
    onnx.save(plain, tmp_path / "stamped.onnx")
    stamped = str(tmp_path / "stamped.onnx")
    args = ["validate", stamped, str(src), "--provider", "emulate", "--min-cosine", "0.99", "-q"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output


# -- the page's verdict is the exit code's -------------------------------------------------------
def _converted(tmp_path: Path) -> tuple[Path, Path]:
    model, _ = ov.mlp_ok()
    src, dst = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx"
    onnx.save(model, src)
    amp_convert.convert_file(src, dst, level="O2")
    return src, dst


def _with_map(dst: Path, path: Path, text: str, edit=None) -> Path:
    m = onnx.load(dst)
    if edit is not None:
        edit(m)
    for p in m.metadata_props:
        if p.key == METADATA_KEY:
            p.value = text
    onnx.save(m, path)
    return path


def _validate_html(src: Path, cand: Path, tmp_path: Path) -> tuple[int, str, dict]:
    page, report = tmp_path / (cand.stem + ".html"), tmp_path / (cand.stem + ".json")
    args = [
        "validate",
        str(src),
        str(cand),
        "--provider",
        "emulate",
        "--min-cosine",
        "0.99",
        "--html",
        str(page),
        "--report",
        str(report),
        "-q",
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    assert "Traceback" not in res.output
    return res.exit_code, page.read_text(encoding="utf-8"), json.loads(report.read_text())


def _verdict(text: str) -> str:
    found = re.search(r"<p class='verdict (\w+)'>([^<]*)</p>", text)
    assert found is not None
    return f"{found.group(1)}: {found.group(2)}"


def _map_text(dst: Path) -> str:
    return next(p.value for p in onnx.load(dst).metadata_props if p.key == METADATA_KEY)


@pytest.mark.parametrize(
    "tamper",
    [
        "into",  # "into": 7 on a folded value
        "nested",  # 100,000 nested [
        "surrogate",  # a lone surrogate in a name
        "fate",  # a fate no version knows
    ],
)
def test_a_tampered_map_means_match_by_name_with_a_note(tmp_path, tamper: str) -> None:
    src, dst = _converted(tmp_path)
    data = json.loads(_map_text(dst))
    if tamper == "into":
        data["values"]["fc1/Add"] = {"fate": "folded", "into": 7}
        text = json.dumps(data)
    elif tamper == "nested":
        text = "[" * 100_000 + "]" * 100_000
    elif tamper == "surrogate":
        data["values"]["\ud800"] = {"fate": "removed"}
        text = json.dumps(data)  # ASCII JSON with the escape "\ud800"
    else:
        data["values"]["y"]["fate"] = "teleported"
        text = json.dumps(data)
    cand = _with_map(dst, tmp_path / f"{tamper}.onnx", text)
    code, page, report = _validate_html(src, cand, tmp_path)
    assert code == 0 and report["verdict"] == "pass"
    assert _verdict(page) == "ok: all outputs pass"
    assert "value map is malformed" in page or "unknown version" in page
    assert "matched by name" in page


def test_a_negated_output_gets_a_failing_page(tmp_path) -> None:
    """The candidate's output is negated behind the map's back: the map still names the value
    before the Neg. Exit 1, and the page says the output fails (it used to say "pass")."""
    src, dst = _converted(tmp_path)

    def negate(m: onnx.ModelProto) -> None:
        for node in m.graph.node:
            node.output[:] = ["y_pos" if o == "y" else o for o in node.output]
        m.graph.node.append(helper.make_node("Neg", ["y_pos"], ["y"], name="negate"))

    data = json.loads(_map_text(dst))
    data["values"]["y"]["via_cast"] = "y_pos"
    cand = _with_map(dst, tmp_path / "negated.onnx", json.dumps(data), negate)
    code, page, report = _validate_html(src, cand, tmp_path)
    assert code == 1 and report["verdict"] == "fail"
    assert report["outputs"][0]["cosine"] == pytest.approx(-1, abs=1e-3)
    assert _verdict(page) == "bad: an output fails"
    row = re.search(r"<tr><td>y</td><td>(.*?)</td><td>([^<]*)</td>", page)
    assert row is not None and "FAIL" in row.group(1)
    assert float(row.group(2)) == pytest.approx(-1, abs=1e-3)


def test_a_map_pointing_the_output_elsewhere_cannot_fail_a_passing_model(tmp_path) -> None:
    src, dst = _converted(tmp_path)
    data = json.loads(_map_text(dst))
    data["values"]["y"] = {"fate": "renamed", "carrier": "fc1/Relu_output_0"}
    cand = _with_map(dst, tmp_path / "elsewhere.onnx", json.dumps(data))
    code, page, report = _validate_html(src, cand, tmp_path)
    assert code == 0 and report["verdict"] == "pass"
    assert _verdict(page) == "ok: all outputs pass"


def test_read_metadata_checks_every_field() -> None:
    good = {
        "version": 1,
        "changed_only": False,
        "values": {"a": {"fate": "kept", "carrier": "a"}},
        "nodes": {"n": {"op_type": "Add", "fate": "kept", "precision": "low"}},
    }
    found, why = ValueMap.read_metadata({METADATA_KEY: json.dumps(good)}, [])
    assert found is not None and why == "" and found.carrier("a") == "a"
    bad_entries = [
        {"values": {"a": {"fate": "kept", "carrier": 3}}},
        {"values": {"a": "kept"}},
        {"values": []},
        {"nodes": {"n": {"fate": "kept", "precision": "half"}}},
        {"nodes": {"n": {"fate": "kept", "why": ["x"]}}},
        {"complete": "yes"},
        {"note": "\ud800"},
    ]
    for entry in bad_entries:
        found, why = ValueMap.read_metadata({METADATA_KEY: json.dumps({**good, **entry})}, [])
        assert found is None and "malformed" in why, entry
    assert ValueMap.read_metadata({METADATA_KEY: "[1]"}, [])[0] is None
    assert ValueMap.read_metadata({}, []) == (None, "")


# -- convert --validate writes nothing that failed --------------------------------------------
def _overflowing(tmp_path: Path) -> Path:
    from models.focused import ALL_FOCUSED

    src = tmp_path / "overflow.onnx"
    onnx.save(ALL_FOCUSED["fp16_overflow"](), src)
    return src


def test_a_failing_validate_writes_nothing(tmp_path) -> None:
    src = _overflowing(tmp_path)
    out = tmp_path / "o.onnx"
    args = [
        str(src),
        "-o",
        str(out),
        "--validate",
        "--provider",
        "emulate",
        "--runs",
        "0",
        "--max-nan",
        "0",
        "--validation-report",
        str(tmp_path / "v.json"),
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output
    assert "nothing written" in res.output and "--force-write" in res.output
    assert not out.exists() and not (tmp_path / "o.onnx.data").exists()
    report = json.loads((tmp_path / "v.json").read_text())  # the evidence is still written
    assert report["verdict"] == "fail" and report["candidate"] == str(out)
    # an existing output is left as it was, even with --force
    out.write_bytes(b"previous")
    res = CliRunner().invoke(cli, [*args, "--force"])
    assert res.exit_code == 1 and out.read_bytes() == b"previous"
    # --force-write writes it, still exit 1
    res = CliRunner().invoke(cli, [*args, "--force", "--force-write"])
    assert res.exit_code == 1, res.output
    assert f"wrote {out}" in res.output
    assert onnx.load(out).graph.node  # the converted model, not the old bytes
    # a passing validation writes, exit 0
    model, _ = ov.mlp_ok()
    onnx.save(model, tmp_path / "ok.onnx")
    ok = tmp_path / "ok.fp16.onnx"
    res = CliRunner().invoke(
        cli,
        [
            str(tmp_path / "ok.onnx"),
            "--validate",
            "--provider",
            "emulate",
            "--runs",
            "0",
            "--min-cosine",
            "0.99",
        ],
    )
    assert res.exit_code == 0, res.output
    assert ok.exists() and f"wrote {ok}" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["overflow.onnx", "o.onnx", "v.json", "ok.onnx", "ok.fp16.onnx"]
    )


def test_validate_without_onnxruntime_writes_nothing(tmp_path, monkeypatch) -> None:
    model, _ = ov.mlp_ok()
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)  # import fails
    res = CliRunner().invoke(cli, [str(src), "--validate"])
    one_line_error(res, "needs ONNX Runtime")
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_the_api_refuses_an_op_name_no_schema_knows() -> None:
    from amp_convert.errors import OptionError

    model, _ = ov.mlp_ok()
    with pytest.raises(OptionError, match=r"Sofmax.*did you mean 'Softmax'"):
        amp_convert.convert(model, fp32_ops=["Sofmax"])
    with pytest.raises(OptionError, match="Sofmax"):
        amp_convert.convert(model, fp16_ops=["Sofmax"])
    converted = amp_convert.convert(model, fp32_ops=["Softmax"])  # a real op: fine
    assert isinstance(converted, onnx.ModelProto)


# -- emulation faithful to kernels that read a low-precision weight directly -------------------
@pytest.mark.parametrize("external", [False, True])
def test_matmul_nbits_scales_stay_a_constant_under_emulate(tmp_path, external: bool) -> None:
    """int4 MatMulNBits (accuracy_level 4): fed its scales through a Cast, ORT's prepacked kernel
    returned zeros (cosine 0, a false FAIL). The scales are now an FP32 initializer (exact)."""
    from amp_convert.validation import build_emulated_model

    ref, cand = vm.matmul_nbits_pair()
    if external:  # the scales' bytes are read from the data file next to the model
        onnx.save(ref, tmp_path / "ref.onnx")
        _external(cand, tmp_path / "cand.onnx")
        ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"  # type: ignore[assignment]
    limits = {"min_cosine": 0.9999}
    cpu = validate(ref, cand, provider="cpu", runs=0, thresholds=limits)
    emu = validate(ref, cand, provider="emulate", runs=0, thresholds=limits)
    assert cpu.passed and emu.passed, (cpu.output("y"), emu.output("y"))
    assert emu.output("y").cosine > 0.9999
    assert emu.output("y").max_abs <= 2 * cpu.output("y").max_abs + 1e-6  # FP16 rounding only
    proto = onnx.load(cand, load_external_data=False) if external else cand
    emulated = build_emulated_model(proto, str(tmp_path) if external else None).model
    node = next(n for n in emulated.graph.node if n.op_type == "MatMulNBits")
    scales = {t.name: t for t in emulated.graph.initializer}[node.input[2]]
    assert scales.data_type == onnx.TensorProto.FLOAT and scales.name == "scales"
    assert not any(n.op_type == "Cast" and "scales" in n.output for n in emulated.graph.node)
    expected = numpy_helper.to_array(
        {t.name: t for t in vm.matmul_nbits_pair()[1].graph.initializer}["scales"]
    ).astype(np.float32)
    np.testing.assert_array_equal(numpy_helper.to_array(scales), expected)  # an exact upcast
    assert emulated.graph.node[0].op_type == "Cast"  # the activation is still rounded to FP16


# -- --auto with a STRING output -------------------------------------------------------------
def test_auto_with_a_string_output_is_consistent(tmp_path) -> None:
    """A classifier that also returns its label names (a STRING constant output): the search
    met its thresholds and listed that output as FAIL. Now it is compared exactly (equal)."""
    model, _ = ov.mlp_ok()
    labels = helper.make_tensor("names", onnx.TensorProto.STRING, [3], [b"cat", b"dog", b"bird"])
    model.graph.node.append(
        helper.make_node("Constant", [], ["labels"], name="labels", value=labels)
    )
    model.graph.output.append(helper.make_tensor_value_info("labels", onnx.TensorProto.STRING, [3]))
    onnx.checker.check_model(model)
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    np.savez(tmp_path / "x.npz", **ov.calibration(model))
    args = [
        str(src),
        "--auto",
        "--inputs",
        str(tmp_path / "x.npz"),
        "--report",
        str(tmp_path / "r.json"),
        "--html",
        str(tmp_path / "p.html"),
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "thresholds met" in res.output and "FAIL" not in res.output
    assert re.search(r"ok +labels", res.output)
    report = json.loads((tmp_path / "r.json").read_text())
    by_name = {o["name"]: o for o in report["outputs"]}
    assert by_name["labels"]["status"] == "pass" and by_name["labels"]["kind"] == "exact"
    assert by_name["labels"]["mismatches"] == 0
    page = (tmp_path / "p.html").read_text()
    assert "FAIL" not in page and "thresholds met" in page


# -- the validate page reads the converted file ------------------------------------------------
def test_weights_in_constant_nodes_are_weights(tmp_path) -> None:
    """TorchScript writes weights as Constant nodes: the page's sizes count them (was 0 B)."""
    from amp_convert.auto.page_facts import weight_bytes
    from amp_convert.pages.trace import validation_page

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    nodes = [
        helper.make_node("Constant", [], ["w"], name="fc.weight", value=w),
        helper.make_node("Constant", [], ["b"], value=b),  # nameless, as TorchScript
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc/MatMul"),
        helper.make_node("Add", ["h", "b"], ["y"], name="fc/Add"),
    ]
    graph = helper.make_graph(
        nodes,
        "consts",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 32])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert weight_bytes(model) == (16 * 32 + 32) * 4
    converted = amp_convert.convert(model, level="O2")
    assert weight_bytes(converted) == (16 * 32 + 32) * 2
    page = validation_page(model, converted, provider="emulate", thresholds={"min_cosine": 0.99})
    sizes = dict(page.sizes)
    assert sizes["weights before"] == "2.18 KB" and sizes["weights after"] == "1.09 KB"
    hidden = [t for t in page.trace if t.hidden]
    assert [t.op_type for t in hidden] == ["Constant"] and hidden[0].node.startswith("Constant_")
    assert "Constant" not in page.by_op and page.by_op["MatMul"] == (1, 0)
    assert page.verdict == "all outputs pass"
