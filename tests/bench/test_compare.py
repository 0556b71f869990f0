"""bench/compare.py: the shared definitions (casts, FP32 nodes, error lines) and a smoke run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from bench import _compare_analyze as analyze
from bench._corpus import disk_size, external_data_files
from bench._table import Column, Wide, columns, markdown_table, secs_text, size_text, text_table

REPO = Path(__file__).resolve().parents[2]


def _vi(name: str, elem: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [2])


def _model_with_loop() -> onnx.ModelProto:
    """Main graph: Cast(x -> fp16) -> Relu (fp16) -> Loop whose body has an FP32 Add and a Cast."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["h_in"], ["h32"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["h32", "h32"], ["s"]),
            helper.make_node("Cast", ["s"], ["h_out"], to=TensorProto.FLOAT16),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [_vi("i", TensorProto.INT64), _vi("cond_in", TensorProto.BOOL), _vi("h_in", 10)],
        [_vi("cond_out", TensorProto.BOOL), _vi("h_out", 10)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
            helper.make_node("Relu", ["x16"], ["r"]),
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Loop", ["n", "c", "r"], ["y16"], body=body),
            helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
        ],
        "g",
        [_vi("x", TensorProto.FLOAT), _vi("n", TensorProto.INT64), _vi("c", TensorProto.BOOL)],
        [_vi("y", TensorProto.FLOAT)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_count_nodes_definitions() -> None:
    model = onnx.shape_inference.infer_shapes(_model_with_loop())
    counts = analyze.count_nodes(model.graph)
    assert counts["casts"] == 4  # two in the main graph, two in the Loop body
    # float nodes (Cast/Constant excluded): Relu (fp16), Shape (fp32 input), Loop (fp16),
    # body Add (fp32); Identity reads a bool and does not count
    assert counts["float_nodes"] == 4
    assert counts["fp32_nodes"] == 2  # Shape and the body's Add


def test_first_line_strips_ort_preamble() -> None:
    e = RuntimeError(
        "[ONNXRuntimeError] : 1 : FAIL : Load model from /tmp/x/model.onnx failed:/onnxruntime_src/"
        "onnxruntime/core/graph/graph.cc:1453 onnxruntime::Graph::Graph(const Model&, bool) "
        "[ONNXRuntimeError] : 1 : FAIL : Tensor element type mismatch. 10 != 1\nmore"
    )
    assert analyze.first_line(e) == (
        "RuntimeError: Load model failed: Tensor element type mismatch. 10 != 1"
    )


def test_text_table_groups_aligns_and_lets_wide_cells_overflow() -> None:
    cols = columns("model", "what", "n", right_from=2)
    rows = [["m1", "a", "7"], ["m1", "bb", "123"], ["m2", Wide("ERROR: a long message"), ""]]
    assert text_table(cols, rows, group_first=True).splitlines() == [
        "model  what    n",
        "-----  ----  ---",
        "m1     a       7",
        "       bb    123",
        "m2     ERROR: a long message",
    ]
    # left-aligned throughout, and the error cell widens its column when it is not Wide
    plain = [["m", "no: an error", "1"]]
    assert text_table(cols, plain, justify=False).splitlines() == [
        "model  what          n",
        "-----  ------------  -",
        "m      no: an error  1",
    ]


def test_markdown_table_aligns_escapes_and_renames() -> None:
    cols = [Column("model"), Column("x floor", right=True, md_title="× floor")]
    rows = [["`a`", "1|2"], ["`a`", "3"]]
    assert markdown_table(cols, rows, group_first=True).splitlines() == [
        "| model | × floor |",
        "|---|---:|",
        "| `a` | 1\\|2 |",
        "|  | 3 |",
    ]


def test_cell_formats() -> None:
    assert [size_text(n) for n in (None, 999, 1.5e6, 2.2e9)] == ["-", "1.0 kB", "1.5 MB", "2.20 GB"]
    assert [secs_text(s) for s in (None, 0.0123, 1.5)] == ["-", "12 ms", "1.50 s"]


def test_disk_size_counts_external_data_of_subgraphs(tmp_path: Path) -> None:
    """An initializer inside an If branch kept in external data: its file counts, once."""
    import numpy as np
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.ones(4096, np.float32), "w")
    branch = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y1"])], "then", [], [_vi("y1", 1)], [w]
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y2"])], "else", [], [_vi("y2", 1)]
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
        "g",
        [_vi("x", 1), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [_vi("y", 1)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    assert external_data_files(path) == {"w.bin"}
    assert disk_size(path) == path.stat().st_size + (tmp_path / "w.bin").stat().st_size
    assert (tmp_path / "w.bin").stat().st_size == 4096 * 4


@pytest.mark.integration
@pytest.mark.parametrize("build", ["bert_encoder", "loop_rnn"])
def test_traffic_figure_is_the_converters_own_estimate(tmp_path: Path, build: str) -> None:
    """Re-estimated from the files, the figure equals what convert_file reports."""
    import amp_convert
    from models import blocks

    src, dst = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(getattr(blocks, build)(), str(src))
    report = amp_convert.convert_file(src, dst, level="O2", force=True)
    t = analyze.traffic(str(src), str(dst))
    assert {k: t[k] for k in ("original", "result", "all_low")} == report.traffic
    assert t["ratio"] == pytest.approx(report.traffic["result"] / report.traffic["original"])
    # every float tensor halves; the FP32 interface adds its casts (4 + 2 bytes per element)
    import onnx_ir as ir

    from amp_convert.cost.shapes import ShapeBook

    original = ir.load(str(src))
    shapes = ShapeBook(original, {})
    io = [*original.graph.inputs, *original.graph.outputs]
    interface = sum(6 * shapes.elements(v) for v in io if v.dtype == ir.DataType.FLOAT)
    expected = 0.5 + interface / report.traffic["original"]
    assert t["all_low_ratio"] == pytest.approx(expected, abs=0.03)
    assert t["ratio"] < 1.0


def test_figures_and_extra_columns_reach_checks_and_main_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook a new figure uses: computed per converted output, shown as a main-table column."""
    from bench import _compare_tables as tables
    from bench._compare_model import Model

    path = tmp_path / "m.onnx"
    onnx.save(_model_with_loop(), str(path))

    def size_ratio(reference: str, candidate: str) -> dict:
        return {"ratio": Path(candidate).stat().st_size / Path(reference).stat().st_size}

    def broken(reference: str, candidate: str) -> dict:
        raise ValueError("no figure\nsecond line")

    monkeypatch.setattr(analyze, "FIGURES", {"size_ratio": size_ratio, "broken": broken})
    checks = analyze.analyze_converted(str(path), str(path), do_accuracy=False)
    assert checks["size_ratio"] == {"ratio": 1.0}
    assert checks["broken"] == {"error": "ValueError: no figure"}

    column = tables.ExtraColumn(
        tables.Column("size ratio", right=True),
        original=lambda m: "1.00",
        converter=lambda m, conv: f"{m.checks[conv]['size_ratio']['ratio']:.2f}",
    )
    monkeypatch.setattr(tables, "EXTRA_COLUMNS", [column])
    m = Model("g/m", "g", path, 1, runs={"amp_O2": [{"seconds": 1.0}], "occ": [{"error": "E"}]})
    m.checks["amp_O2"] = checks
    rows = tables.rows(m, width=80)
    assert [c.title for c in tables.main_columns()][-1] == "size ratio"
    assert all(len(r) == len(tables.main_columns()) for r in rows)
    assert [r[-1] for r in rows] == ["1.00", "1.00", ""]  # original, amp O2, failed occ


@pytest.mark.slow
def test_compare_smoke(tmp_path: Path) -> None:
    pytest.importorskip("onnxconverter_common")
    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    proc = subprocess.run(
        [
            sys.executable,
            "bench/compare.py",
            "--no-big",
            "--only",
            "generated/lstm_model$",
            "--repeat",
            "1",
            "--jobs",
            "1",
            "--json",
            str(out),
            "--markdown",
            str(md),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    raw = json.loads(out.read_text())
    (model,) = raw["models"]
    assert model["key"] == "generated/lstm_model"
    for conv in ("amp_O1", "amp_O2", "amp_O3", "occ"):
        check = model["checks"][conv]
        assert check["ort_error"] is None and check["checker_error"] is None
        assert isinstance(check["accuracy"]["max_rel"], float)
        assert model["median_s"][conv] > 0
        assert 0 < check["traffic"]["ratio"] <= 1.0
    assert raw["targets"]["1"]["met"]
    text = md.read_text()
    assert "| converter |" in text and "| traffic |" in text
    assert raw["summary"]["amp_O2"]["median_traffic"] > 0
