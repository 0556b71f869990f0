"""Page defects seen in Chromium, each checked in the browser: a BatchNormalization fold drawn
the right way round, no pointer to a note that is not there, tables that fit 1400 px, the
norm-ratio warning, top-1 only for class scores."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import amp_convert
from amp_convert.pages import html as html_report
from amp_convert.pages.trace import validation_page
from amp_convert.validation import validate
from models.cnn import resnet_bn_block
from models.overflow import mlp_ok
from tests import browser

pytestmark = pytest.mark.integration

pytest.importorskip("onnxruntime")

WIDTH = 1400
#: writes the page's widest overflow into the DOM for the test to read
MEASURE = (
    "var w = document.documentElement.scrollWidth, v = window.innerWidth;"
    "var wide = Array.from(document.querySelectorAll('table')).filter("
    "function(t){return t.getBoundingClientRect().right > v + 1;}).length;"
    "document.body.setAttribute('data-measure', w + ' ' + v + ' ' + wide);"
)


def _page(tmp_path: Path, ref: onnx.ModelProto, cand: onnx.ModelProto, **kw) -> Path:
    page = validation_page(ref, cand, provider="emulate", **kw)
    path = tmp_path / "page.html"
    html_report.write(page, path)
    return path


def _rows(dom: str, table_id: str = "nodes") -> list[list[str]]:
    body = dom.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)
    return [
        [
            re.sub(r"<[^>]+>", "", c).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.S)
        ]
        for r in rows
    ]


def test_a_batchnorm_fold_is_drawn_from_the_bn_into_the_conv(tmp_path) -> None:
    """The BN row says "folded into <Conv>" with no error of its own; the Conv is low and
    carries the fused output's error; the Conv never appears folded into itself."""
    model = resnet_bn_block()
    page = _page(tmp_path, model, amp_convert.convert(model, level="O2"))
    rows = {r[1]: r for r in _rows(browser.dom(page)) if len(r) > 7}
    bn = rows["layer1/0/conv1/bn/BatchNormalization"]
    conv = rows["layer1/0/conv1/conv/Conv"]
    assert bn[4] == "folded into layer1/0/conv1/conv/Conv" and bn[8] == "–"
    assert conv[4] == "low" and conv[8] != "–"
    assert "folded into layer1/0/conv1/conv/Conv" not in conv[4]
    worst = browser.dom(page).split("worst nodes", 1)[1].split("</table>", 1)[0]
    assert "BatchNormalization</td>" not in worst  # a folded node has no error to rank


def test_no_pointer_to_a_note_that_is_not_there(tmp_path) -> None:
    """A model converted elsewhere (no value map): the folded-values section says why it cannot
    tell, in place; a model with a map never says "see the note above"."""
    model = mlp_ok()[0]
    ours = amp_convert.convert(model, level="O2")
    words = browser.dom(_page(tmp_path, model, ours))
    assert "see the note above" not in words
    assert "None: every value of the original is carried by the result" in words
    stripped = onnx.ModelProto()
    stripped.CopyFrom(ours)
    del stripped.metadata_props[:]
    words = browser.dom(_page(tmp_path, model, stripped))
    assert "see the note above" not in words
    assert "Unknown: the converted model carries no value map" in words


def _long_names(model: onnx.ModelProto, length: int = 160) -> onnx.ModelProto:
    """Every node and intermediate value renamed to an unbreakable ``length``-character name."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    keep = {v.name for v in (*g.input, *g.output)} | {t.name for t in g.initializer}
    rename = {}
    for i, node in enumerate(g.node):
        node.name = f"/encoder/very_long_scope_{i}/" + "x" * length
        for j, o in enumerate(node.output):
            if o not in keep:
                rename[o] = f"/encoder/value_{i}_{j}/" + "y" * length
    for node in g.node:
        node.input[:] = [rename.get(v, v) for v in node.input]
        node.output[:] = [rename.get(v, v) for v in node.output]
    return out


def test_tables_fit_a_1400_pixel_window(tmp_path) -> None:
    """160-character node names: every table wraps inside the page (no horizontal scroll)."""
    model = _long_names(mlp_ok()[0])
    onnx.checker.check_model(model)
    page = _page(tmp_path, model, amp_convert.convert(model, level="O2"))
    dom = browser.dom(page, MEASURE, width=WIDTH)
    found = re.search(r'data-measure="(\d+) (\d+) (\d+)"', dom)
    assert found is not None
    scroll, view, wide = (int(v) for v in found.groups())
    assert view == WIDTH
    assert scroll <= view and wide == 0
    shot = browser.screenshot(page, width=WIDTH, height=1200)
    assert browser.png_size(shot) == (WIDTH, 1200)


def _scaled(model: onnx.ModelProto, factor: float) -> onnx.ModelProto:
    """``model`` with its output multiplied by ``factor``: a scale change cosine cannot see."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    name = g.output[0].name
    for node in g.node:
        node.output[:] = [f"{name}_raw" if o == name else o for o in node.output]
    g.initializer.append(numpy_helper.from_array(np.array(factor, np.float32), "scale"))
    g.node.append(helper.make_node("Mul", [f"{name}_raw", "scale"], [name], "scale/Mul"))
    return out


def test_the_norm_ratio_warning_is_on_the_page(tmp_path) -> None:
    model = mlp_ok()[0]
    cand = _scaled(model, 1.05)
    report = validate(model, cand, provider="emulate", thresholds={"min_cosine": 0.999})
    assert any("norms differ" in n for n in report.notes())
    words = browser.dom(_page(tmp_path, model, cand, report=report))
    assert "norms differ: ||candidate|| / ||reference|| = 1.05" in words


def _two_heads() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])
    rng = np.random.default_rng(0)
    inits, nodes, outs = [], [], []
    for name, cols in (("boxes", 4), ("landms", 10), ("logits", 20), ("kps_8", 10)):
        w = numpy_helper.from_array(rng.standard_normal((8, cols)).astype(np.float32), f"{name}.w")
        inits.append(w)
        nodes.append(helper.make_node("MatMul", ["x", w.name], [name], f"{name}/MatMul"))
        outs.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [2, cols]))
    graph = helper.make_graph(nodes, "heads", [x], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_top1_only_for_outputs_that_look_like_class_scores() -> None:
    """Boxes [N, 4], landmarks [N, 10] and keypoints, named as face detectors name their heads
    (RetinaFace's landms, SCRFD's kps_8), get no top-1 (it means nothing there); logits do."""
    model = _two_heads()
    report = validate(model, amp_convert.convert(model, level="O2"), provider="emulate")
    top1 = {o.name: o.top1 for o in report.outputs}
    assert top1["boxes"] is None and top1["landms"] is None and top1["kps_8"] is None
    assert top1["logits"] is not None
    table = report.format_table()
    assert table.count("top1") == 1


def test_the_node_where_a_broken_output_breaks() -> None:
    """The first node whose error reaches half the largest: later nodes only carry it."""
    from amp_convert.auto.report import TracePoint
    from amp_convert.pages.worst import breaking_node

    def point(name: str, err: float | None) -> TracePoint:
        return TracePoint(name, "Op", 1.0, None, err, "low")

    trace = [
        point("a", 1e-4),
        point("b", 2e-4),
        point("exp", 0.9),
        point("c", 1.5),
        point("out", 1.2),
    ]
    found = breaking_node(trace)
    assert found is not None and found.node == "exp"
    inf = [point("a", 1e-4), point("pow", float("inf")), point("out", float("nan"))]
    found = breaking_node(inf)
    assert found is not None and found.node == "pow"
    assert breaking_node([point("folded", None)]) is None


def test_a_broken_model_names_the_node_that_breaks_it() -> None:
    """An Exp overflowing FP16 at O3 (an output far from any threshold): its node is named."""
    from amp_convert.pages.worst import worst_node
    from models.overflow import exp_overflow

    model, _ = exp_overflow()
    cand = amp_convert.convert(model, level="O3")
    found = worst_node(model, cand, provider="emulate")
    assert found is not None and found["op_type"] == "Exp", found


def test_the_auto_page_draws_a_fold_the_same_way() -> None:
    from amp_convert.auto import auto_convert

    _, report = auto_convert(resnet_bn_block(), provider="emulate")
    points = {t.node: t for t in report.trace}
    bn, conv = points["layer1/0/conv1/bn/BatchNormalization"], points["layer1/0/conv1/conv/Conv"]
    assert bn.precision == "folded" and bn.folded_into == conv.node and bn.final_error is None
    assert conv.precision == "low" and conv.final_error is not None
