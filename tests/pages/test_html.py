"""The HTML report is one self-contained file, and it renders in a real headless browser."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import amp_convert
from amp_convert.auto import auto_convert
from amp_convert.commands.cli import cli
from amp_convert.pages import html as html_report
from amp_convert.pages.auto import auto_page
from models import overflow as ov

pytestmark = pytest.mark.integration


def _page(tmp_path):
    model, _ = ov.hand_variance()
    _, report = auto_convert(model, inputs=ov.calibration(model, "offset"))
    path = tmp_path / "auto.html"
    html_report.write(auto_page(report), path)
    return report, path.read_text()


def test_auto_page_is_self_contained_and_shows_the_pins(tmp_path) -> None:
    report, text = _page(tmp_path)
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", text)  # nothing fetched
    assert "<link" not in text and "@import" not in text
    assert text.count("class='pin'") == 2  # two pinned nodes marked on the error plot
    for p in report.pinned:
        assert p.name in text
    assert "introduces error" in text and "thresholds met" in text
    assert text.count("<polyline") == 2  # first candidate and final
    assert "Precision by op type" in text
    traffic = getattr(report.conversion, "traffic", None)
    if traffic:  # the converter's estimate, when this build has one
        assert "Memory traffic per inference" in text and "this model" in text
    else:
        assert "Memory-traffic estimate: not on this page" in text


def test_traffic_section_reads_what_the_report_has(tmp_path) -> None:
    model, _ = ov.mlp_ok()
    _, report = auto_convert(model, inputs=ov.calibration(model))
    report.conversion.traffic = {"original": 1_000_000, "result": 500_000}
    text = html_report.render(auto_page(report))
    assert "Memory traffic per inference" in text and "500.00 KB (0.50x the original)" in text


def test_validate_html(tmp_path) -> None:
    model, _ = ov.exp_overflow()
    src, dst = tmp_path / "m.onnx", tmp_path / "m.fp16.onnx"
    onnx.save(model, src)
    amp_convert.convert_file(src, dst, level="O3")
    np.savez(tmp_path / "x.npz", **ov.calibration(model))
    out = tmp_path / "v.html"
    args = [
        "validate",
        str(src),
        str(dst),
        "--provider",
        "emulate",
        "--runs",
        "0",
        "--inputs",
        str(tmp_path / "x.npz"),
        "--min-cosine",
        "0.999",
        "--html",
        str(out),
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output  # O3 overflows in Exp
    text = out.read_text()
    assert "an output fails" in text and "softmax/Exp" in text
    assert "Nodes kept FP32 by the search" not in text
    assert "class='inf'" in text  # the Inf shows on the error plot


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium installed")
def test_renders_in_headless_chromium(tmp_path) -> None:
    _, _ = _page(tmp_path)
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            (tmp_path / "auto.html").as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 2000)
    assert len(data) > 30_000  # a rendered page, not a blank one
