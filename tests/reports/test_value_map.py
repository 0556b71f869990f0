"""The value map: a BN folded and a Cast dropped, traced from the original to the result.

The converter reports, for every original value, the value that carries it (or that it was folded
or removed); --auto and validate --html read it, and the HTML page shows folded values as folded.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner, Result

from amp_convert import convert
from amp_convert.commands.cli import cli
from amp_convert.core.precision import Precision
from amp_convert.pages.html import num, thresholds_text
from amp_convert.pages.trace import candidate_value_map
from amp_convert.reports.value_map import METADATA_KEY, Fate, ValueMap
from models.export_shapes import bn_cast_head, wakeword_in_if


def _validate_page(src: Path, dst: Path, page: Path) -> Result:
    """``amp-convert validate SRC DST --provider emulate --min-cosine 0.999 --html PAGE``."""
    args = ["validate", str(src), str(dst), "--provider", "emulate", "--min-cosine", "0.999"]
    return CliRunner().invoke(cli, [*args, "--html", str(page)])


def _map() -> tuple[onnx.ModelProto, ValueMap]:
    model, report = convert(bn_cast_head(), level="O2", return_report=True)
    return model, report.value_map


def test_folded_bn_and_dropped_cast_are_traced() -> None:
    model, vm = _map()
    result = {o for n in model.graph.node for o in n.output}
    conv_out = vm.fate("stem.conv_out")
    assert conv_out.fate == Fate.FOLDED and conv_out.carrier is None
    assert conv_out.into == "stem.conv"  # its own data is gone: BN(conv) now has its name
    bn_out = vm.fate("stem.batch_norm.bn_out")
    assert bn_out.fate == Fate.REPLACED and bn_out.carrier == "stem.conv_out"
    assert bn_out.dtype == "FLOAT16" and bn_out.carrier in result
    assert vm.nodes["stem.batch_norm.bn"].fate == Fate.FOLDED
    assert vm.nodes["stem.batch_norm.bn"].into == "stem.conv"
    for stat in ("w_0", "b_0", "w_1", "w_2"):
        assert vm.fate(f"stem.batch_norm.{stat}").fate == Fate.FOLDED
    cast = vm.fate("stem.cast_out")  # Cast(to FLOAT) of a low Relu: a Cast to its own type
    assert cast.fate == Fate.REPLACED and cast.carrier == "stem.relu_out"
    assert "stem.cast" not in {n.name for n in model.graph.node}
    assert vm.nodes["stem.cast"].fate == Fate.REMOVED
    score = vm.fate("score")  # the graph output: its low value renamed, a Cast took the name
    assert score.fate == Fate.RENAMED and score.via_cast == "score"
    assert score.carrier in result and score.carrier != "score"
    assert vm.fate("image").fate == Fate.KEPT
    assert vm.precision("head.conv") == Precision.LOW
    assert vm.precision("head.sigmoid") == Precision.LOW


def test_map_travels_in_the_model_and_reads_back() -> None:
    model, vm = _map()
    stored = {p.key: p.value for p in model.metadata_props}
    assert METADATA_KEY in stored
    back = candidate_value_map(bn_cast_head(), model)
    assert back.complete
    for name in ("stem.conv_out", "stem.batch_norm.bn_out", "stem.cast_out", "score"):
        assert back.fate(name) == vm.fate(name), name
    assert back.fate("image").fate == Fate.KEPT and back.carrier("image") == "image"
    del model.metadata_props[:]  # converted elsewhere: the by-name fallback, said so
    fallback = candidate_value_map(bn_cast_head(), model)
    assert not fallback.complete and "no value map" in fallback.note
    assert fallback.fate("stem.cast_out").fate == Fate.REMOVED


@pytest.mark.integration
def test_auto_and_validate_pages_show_folded_values(tmp_path) -> None:
    src, dst = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx"
    onnx.save(bn_cast_head(), src)
    page = tmp_path / "auto.html"
    args = [
        str(src),
        "-o",
        str(dst),
        "--auto",
        "--provider",
        "emulate",
        "--min-cosine",
        "0.999",
        "--html",
        str(page),
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    text = page.read_text()
    row = re.search(r"<tr><td>stem\.conv_out</td><td>(.*?)</tr>", text)
    assert row and "folded" in row.group(1) and "stem.conv" in row.group(1)
    assert "strip: folded into another node" in text  # the BN's node in the strip
    assert "(= final: one candidate)" in text and "1 (the first candidate is the final" in text
    vpage = tmp_path / "validate.html"
    res = _validate_page(src, dst, vpage)
    assert res.exit_code == 0, res.output
    vtext = vpage.read_text()
    assert "the converter&#x27;s value map (in the model)" in vtext
    assert re.search(r"<tr><td>stem\.conv_out</td><td><span class='fate folded'>", vtext)
    assert "kept FP32 by the search" not in vtext and "Nodes kept FP32" not in vtext
    assert "Float nodes per op type in the converted model as written" in vtext


@pytest.mark.integration
def test_validate_page_of_a_model_converted_elsewhere_says_how_it_matched(tmp_path) -> None:
    src, dst = tmp_path / "m.onnx", tmp_path / "other.onnx"
    onnx.save(bn_cast_head(), src)
    converted = convert(bn_cast_head(), level="O2")
    del converted.metadata_props[:]
    onnx.save(converted, dst)
    page = tmp_path / "v.html"
    res = _validate_page(src, dst, page)
    assert res.exit_code in (0, 1), res.output
    text = page.read_text()
    assert "names (no value map)" in text and "carries no value map" in text


@pytest.mark.integration
def test_body_nodes_are_drawn_and_sortable(tmp_path) -> None:
    src, dst = tmp_path / "w.onnx", tmp_path / "w.fp16.onnx"
    onnx.save(wakeword_in_if(), src)
    page = tmp_path / "w.html"
    res = CliRunner().invoke(
        cli, [str(src), "-o", str(dst), "--auto", "--provider", "emulate", "--html", str(page)]
    )
    assert res.exit_code == 0, res.output
    text = page.read_text()
    body_rows = re.findall(
        r"<tr><td data-v='[^']*'>\d+</td><td>([^<]*)</td><td>[^<]*</td>"
        r"<td>detect</td>",
        text,
    )
    assert len(body_rows) > 15  # the If's then/else bodies, node by node
    assert "melspec.stft_real" in body_rows and "wakeword.conv_0.conv" in body_rows
    assert "class='grid sortable'" in text and "<script>" in text
    assert "class='label'" in text  # the worst nodes are named on the chart
    assert "kept FP32 by the search" in text and "new NaN/Inf" in text  # legend


def test_numbers_keep_the_digits_that_decide_a_threshold() -> None:
    assert num(0.9999999) == "0.9999999"
    assert num(0.99949) == "0.9995" and num(1.0) == "1" and num(1 - 1e-12) != "1"
    assert num(float("inf")) == "Inf" and num(None) == "–" and num(3) == "3"
    assert num(2.5e-9) == "2.5e-09"
    assert thresholds_text({"min_cosine": 0.9999999, "atol": None}) == "min_cosine 0.9999999"
    assert np.isclose(float(num(1 / 3)), 1 / 3, rtol=1e-3)


def test_folded_hand_written_norm_is_traced() -> None:
    """A hand-written LayerNorm run as LayerNormalization: its statistics are folded into the
    fused node, its output is carried by the fused node's output under the same name."""
    from models.overflow import hand_variance

    model, _ = hand_variance(normalise=True)
    _, report = convert(model, level="O2", return_report=True)
    vm = report.value_map
    assert vm.fate("mean/ReduceMean_out").fate == Fate.FOLDED
    assert vm.fate("std/Sqrt_out").into == vm.fate("var/ReduceMean_out").into != ""
    out = vm.fate("y")
    assert out.fate == Fate.REPLACED and out.carrier == "y"
    assert vm.nodes["mean/ReduceMean"].fate == Fate.FOLDED
