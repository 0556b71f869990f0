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
from amp_convert import html_report
from amp_convert.auto import auto_convert
from amp_convert.auto.page import auto_page as build_auto_page
from amp_convert.cli import cli
from models import overflow as ov
from tests import browser

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
    args = ["validate", str(src), str(dst), "--provider", "emulate", "--inputs", npz,
            "--min-cosine", "0.999", "--html", str(page), "-q"]  # fmt: skip
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
