"""The HTML reports as a browser shows them (headless Chromium; .ci/run installs it in CI).

The page is checked by what the browser built: headings, the pinned nodes, the error plot's
lines, the verdict; and the screenshot must be a full, non-blank page.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import amp_convert
from amp_convert.auto import auto_convert
from amp_convert.commands.cli import cli
from amp_convert.pages import html as html_report
from amp_convert.pages.auto import auto_page as build_auto_page
from models import overflow as ov
from tests import browser

pytestmark = pytest.mark.integration

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def auto_page(tmp_path_factory) -> tuple[object, Path]:
    model, _ = ov.hand_variance()
    _, report = auto_convert(model, inputs=ov.calibration(model, "offset"))
    path = tmp_path_factory.mktemp("auto") / "auto.html"
    html_report.write(build_auto_page(report), path)
    return report, path


def _text(dom: str) -> str:
    """The visible words of a DOM dump (tags and scripts dropped, spaces collapsed)."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", dom).split())


def test_auto_page_content_in_the_browser(auto_page) -> None:
    report, path = auto_page
    dom = browser.dom(path)
    words = _text(dom)
    assert "Precision by op type" in words and "thresholds met" in words
    for p in report.pinned:
        assert p.name in words  # every node the search kept FP32 is on the page
    assert dom.count("<polyline") >= 2  # the error along the graph: first candidate and final
    # the legend says what each colour means; the worst nodes are named on the chart
    assert "kept FP32 by the search" in words and "new NaN/Inf" in words
    assert "worst nodes" in words and "Every node" in words


def test_validate_page_content_in_the_browser(tmp_path: Path) -> None:
    model, _ = ov.exp_overflow()
    src, dst = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx"
    onnx.save(model, src)
    amp_convert.convert_file(src, dst, level="O3")
    np.savez(tmp_path / "x.npz", **ov.calibration(model))
    page = tmp_path / "v.html"
    npz = str(tmp_path / "x.npz")
    args = [
        "validate",
        str(src),
        str(dst),
        "--provider",
        "emulate",
        "--inputs",
        npz,
        "--min-cosine",
        "0.999",
        "--html",
        str(page),
        "-q",
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output  # O3 overflows in Exp
    dom = browser.dom(page)
    words = _text(dom)
    assert "an output fails" in words and "softmax/Exp" in words
    assert 'class="inf"' in dom or "class='inf'" in dom  # the Inf is drawn on the plot


def test_the_page_renders_full_size_and_not_blank(auto_page) -> None:
    _, path = auto_page
    data = browser.screenshot(path, 1200, 2000)
    assert browser.png_size(data) == (1200, 2000)
    assert len(data) > 30_000  # text, tables and a chart: a blank page compresses to ~10 KB


def _folded_cnn(tmp_path: Path) -> tuple[Path, Path]:
    """A paddle2onnx-style CNN (every BatchNormalization folded into its Conv), its logits scaled
    by a nameless Constant as TorchScript writes them, converted with one op kept FP32."""
    from onnx import TensorProto, helper

    from models import cnn

    model = cnn.mobilenet_cnn()
    for node in model.graph.node:
        node.output[:] = ["logits_raw" if o == "logits" else o for o in node.output]
    scale = helper.make_tensor("k", TensorProto.FLOAT, [], [0.5])
    model.graph.node.extend(
        [
            helper.make_node("Constant", [], ["scale"], value=scale),  # no name
            helper.make_node("Mul", ["logits_raw", "scale"], ["logits"], name="head/scale"),
        ]
    )
    src, dst = tmp_path / "cnn.onnx", tmp_path / "cnn.fp16.onnx"
    onnx.save(model, src)
    amp_convert.convert_file(src, dst, level="O2", fp32_ops=["GlobalAveragePool"])
    return src, dst


_LABEL_CHECK = """
var boxes = Array.prototype.map.call(document.querySelectorAll('svg text.label'),
  function(t){ return t.getBBox(); });
var overlaps = 0;
for (var i = 0; i < boxes.length; i++) for (var j = i + 1; j < boxes.length; j++) {
  var a = boxes[i], b = boxes[j];
  if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height)
    overlaps++;
}
var hidden = document.querySelectorAll('tr.nameless');
var shown = Array.prototype.filter.call(hidden, function(r){
  return getComputedStyle(r).display !== 'none'; }).length;
document.querySelector('input.shownameless').click();
var after = Array.prototype.filter.call(hidden, function(r){
  return getComputedStyle(r).display !== 'none'; }).length;
document.body.setAttribute('data-check', [boxes.length, overlaps, hidden.length, shown, after]
  .join(','));
"""


def test_validate_page_reads_the_converted_graph(tmp_path: Path) -> None:
    """Precision by op type from the file as written (BN folded, not "7 low"), the reason a node
    is FP32 from the conversion, nameless Constants hidden until asked, labels apart."""
    src, dst = _folded_cnn(tmp_path)
    converted = onnx.load(dst)
    ops = {n.op_type for n in converted.graph.node}
    assert "BatchNormalization" not in ops
    page = tmp_path / "v.html"
    args = [
        "validate",
        str(src),
        str(dst),
        "--provider",
        "emulate",
        "--min-cosine",
        "0.99",
        "--html",
        str(page),
        "-q",
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    dom = browser.dom(page, _LABEL_CHECK)
    table = re.search(r"<table class=\"grid ops\">(.*?)</table>", dom, re.S)
    assert table is not None
    rows = {
        cells[0]: cells[1:4]
        for cells in (
            [_text(c) for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
        )
        if cells
    }
    assert rows["BatchNormalization"] == ["0", "0", "7"]  # folded, none left in the file
    assert rows["Conv"] == ["7", "0", "0"]
    assert rows["GlobalAveragePool"] == ["0", "1", "0"]
    assert "Cast" not in rows  # the conversion's own boundaries are not op decisions
    assert "Constant" not in rows and rows["Mul"] == ["8", "0", "0"]  # 7 HardSwish + the head
    # why a node is FP32: the conversion report's reason, in the node table
    node_rows = re.findall(r"<tr>(.*?)</tr>", dom.split('id="nodes"')[1], re.S)
    why = {
        cells[1]: cells[5]
        for cells in (
            [_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in node_rows
        )
        if len(cells) > 5
    }
    assert why["p2o.GlobalAveragePool.0"] == "user: --fp32-ops"
    assert why["p2o.Flatten.0"].startswith("clear list: moves data; follows deny")
    # what became of a folded node: the value map's record
    assert (
        why["p2o.Conv.0"] == "BatchNormalization 'p2o.BatchNormalization.0' folded into Conv "
        "'p2o.Conv.0'"
    )
    words = _text(dom)
    assert "in this build" not in words and "not in this report" not in words
    labels, overlaps, hidden, shown, after = (
        int(v) for v in re.search(r'data-check="([\d,]+)"', dom).group(1).split(",")
    )
    assert labels == 5 and overlaps == 0  # the five worst nodes, named apart
    assert hidden == 1 and shown == 0 and after == 1  # the nameless Constant, on request
    assert "Constant_" not in " ".join(re.findall(r"class=\"label\"[^>]*>([^<]*)", dom))
