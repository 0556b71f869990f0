"""The sweep on the exporter-shaped models: --auto and validate --html never exit 2 or 3.

The full sweep (every models/ builder and onnx backend model) is bench/auto_sweep.py; this runs
its exporter set, the shapes that broke --auto (BN folded, Casts dropped, T5, melspectrograms).
"""

from __future__ import annotations

import pytest

from bench.auto_sweep import run_one, verdict
from models.export_shapes import EXPORTS


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_auto_and_validate_html_on_exporter_shapes(name: str, tmp_path) -> None:
    import onnx

    src = tmp_path / "m.onnx"
    onnx.save(EXPORTS[name](), src)
    row = run_one(src, tmp_path, None)
    assert verdict(row) == "ok", row
    assert row["auto"] == 0  # these all meet min-cosine 0.999 at O3 after the search
    text = (tmp_path / "auto.html").read_text()
    assert "thresholds met" in text and "Every node" in text
    assert (tmp_path / "validate.html").read_text().count("<h2>Outputs</h2>") == 1
