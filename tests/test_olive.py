"""The Olive pass: workflows run offline through Olive's API and CLI with our package config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest

os.environ.setdefault("OLIVE_DISABLE_TELEMETRY", "1")  # tests never touch the network
olive_run = pytest.importorskip("olive.workflows").run
ort = pytest.importorskip("onnxruntime")

from amp_convert.errors import OptionError  # noqa: E402
from amp_convert.olive import PACKAGE_CONFIG, AmpConvert, merged_package_config  # noqa: E402
from models.blocks import bert_encoder  # noqa: E402

pytestmark = pytest.mark.integration

FP16 = onnx.TensorProto.FLOAT16


@pytest.fixture
def bert(tmp_path: Path) -> Path:
    path = tmp_path / "bert.onnx"
    onnx.save(bert_encoder(layers=1, hidden=32, heads=2, vocab=50, max_positions=16), path)
    return path


def _workflow(model: Path, out: Path, provider: str, **pass_config: Any) -> dict[str, Any]:
    device = "gpu" if provider != "CPUExecutionProvider" else "cpu"
    return {
        "input_model": {"type": "ONNXModel", "model_path": str(model)},
        "systems": {
            "local": {
                "type": "LocalSystem",
                "accelerators": [{"device": device, "execution_providers": [provider]}],
            }
        },
        "passes": {"amp": {"type": "AmpConvert", **pass_config}},
        "host": "local",
        "target": "local",
        "output_dir": str(out / "out"),
        "cache_dir": str(out / "cache"),
        "log_severity_level": 3,
    }


def _fp16_nodes(path: Path) -> int:
    model = onnx.load(path)
    typed = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    typed.update({v.name: v.type.tensor_type.elem_type for v in model.graph.output})
    init = {t.name: t.data_type for t in model.graph.initializer}
    return sum(
        1
        for n in model.graph.node
        if any(typed.get(i) == FP16 or init.get(i) == FP16 for i in n.input)
    )


def test_cuda_workflow_writes_a_model_ort_loads_with_fp16_nodes(bert: Path, tmp_path: Path) -> None:
    cfg = _workflow(bert, tmp_path, "CUDAExecutionProvider", level="O2")
    olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    out = tmp_path / "out" / "model.onnx"
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    onnx.checker.check_model(str(out), full_check=True)
    model = onnx.load(out)
    matmul_weights = [
        t for t in model.graph.initializer if t.data_type == FP16 and len(t.dims) == 2
    ]
    assert len(matmul_weights) >= 6  # the attention and FFN weights are stored FP16
    assert _fp16_nodes(out) > 10
    report = json.loads((tmp_path / "out" / "amp_report.json").read_text())
    assert report["target"].startswith("ort-cuda") and report["level"] == "O2"


def test_the_execution_provider_picks_the_target(bert: Path, tmp_path: Path) -> None:
    olive_run(_workflow(bert, tmp_path, "CPUExecutionProvider"), package_config=str(PACKAGE_CONFIG))
    report = json.loads((tmp_path / "out" / "amp_report.json").read_text())
    assert report["target"].startswith("ort-cpu")


def test_a_provider_without_a_target_is_one_line(bert: Path, tmp_path: Path) -> None:
    cfg = _workflow(bert, tmp_path, "DmlExecutionProvider")
    with pytest.raises(OptionError) as info:
        olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    assert "no amp-convert target for DmlExecutionProvider" in str(info.value)
    assert "\n" not in str(info.value)


def test_option_errors_pass_through_as_one_line(bert: Path, tmp_path: Path) -> None:
    cfg = _workflow(bert, tmp_path, "CUDAExecutionProvider", level="O9")
    with pytest.raises(OptionError) as info:
        olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    assert "O9" in str(info.value) and "\n" not in str(info.value)


def test_a_misspelt_dim_is_refused_like_everywhere(bert: Path, tmp_path: Path) -> None:
    """dims is a pass parameter generated from ConvertOptions' declaration; the one --dim check
    refuses a misspelt name with the closest one, as the CLI and the API do."""
    cfg = _workflow(bert, tmp_path, "CPUExecutionProvider", dims=["btach=2"])
    with pytest.raises(OptionError) as info:
        olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    assert "--dim btach: the model has no dim named 'btach' (did you mean 'batch'?)" in str(
        info.value
    )
    assert not (tmp_path / "out" / "model.onnx").exists()


def test_every_conversion_option_is_a_pass_parameter() -> None:
    """Generated from the declarations: a new ConvertOptions field is an Olive parameter too."""
    from olive.hardware.accelerator import DEFAULT_CPU_ACCELERATOR

    from amp_convert.options.convert import cli_fields

    config = AmpConvert.default_config(DEFAULT_CPU_ACCELERATOR)
    assert {f.name for f in cli_fields()} <= set(config)
    assert config["level"].default_value == "O2" and config["target"].default_value is None
    assert config["keep_io_types"].default_value is None  # amp-convert's own default holds


def test_auto_calibrates_on_the_data_config(bert: Path, tmp_path: Path) -> None:
    data = {
        "name": "ids",
        "type": "DummyDataContainer",
        "load_dataset_config": {
            "input_shapes": [[1, 8], [1, 8]],
            "input_names": ["input_ids", "attention_mask"],
            "input_types": ["int64", "int64"],
        },
    }
    cfg = _workflow(bert, tmp_path, "CUDAExecutionProvider", auto=True, data_config=data)
    olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    report = json.loads((tmp_path / "out" / "amp_report.json").read_text())
    assert report["passed"] is True
    assert report["samples"] >= 1
    ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])


def test_auto_without_data_is_refused(bert: Path, tmp_path: Path) -> None:
    cfg = _workflow(bert, tmp_path, "CUDAExecutionProvider", auto=True)
    with pytest.raises(OptionError, match="auto needs a data_config"):
        olive_run(cfg, package_config=str(PACKAGE_CONFIG))


def test_level_and_dtype_are_searchable() -> None:
    from olive.hardware.accelerator import DEFAULT_CPU_ACCELERATOR

    config = AmpConvert.default_config(DEFAULT_CPU_ACCELERATOR)
    assert config["level"].search_defaults is not None
    assert config["dtype"].search_defaults is not None
    assert "save_as_external_data" in config  # Olive's external-data options


def test_merged_package_config_keeps_olives_passes(tmp_path: Path) -> None:
    merged = json.loads(merged_package_config(tmp_path / "pc.json").read_text())
    assert "AmpConvert" in merged["passes"] and "OnnxFloatToFloat16" in merged["passes"]


@pytest.mark.slow
def test_olive_run_cli_as_in_readme(bert: Path, tmp_path: Path) -> None:
    config = tmp_path / "workflow.json"
    config.write_text(json.dumps(_workflow(bert, tmp_path, "CUDAExecutionProvider", level="O2")))
    olive = [sys.executable, "-m", "olive", "run", "--config", str(config)]
    done = subprocess.run(
        [*olive, "--package-config", str(PACKAGE_CONFIG)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OLIVE_DISABLE_TELEMETRY": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "model.onnx").exists()
    assert (tmp_path / "out" / "amp_report.json").exists()


# ------------------------------------------------------------------ failing like the command line


@pytest.fixture
def one_input(tmp_path: Path) -> Path:
    """One MatMul whose FP16 result never reaches cosine 1.0 (its error is the weights')."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _one_input_data(model: Path) -> dict[str, Any]:
    name = onnx.load(str(model)).graph.input[0].name
    return {
        "name": "d",
        "type": "DummyDataContainer",
        "load_dataset_config": {
            "input_shapes": [[1, 16]],
            "input_names": [name],
            "input_types": ["float32"],
        },
    }


def test_auto_on_a_one_input_model(one_input: Path, tmp_path: Path) -> None:
    """Olive hands a one-input model's batches as a bare tensor: AttributeError ('items')."""
    cfg = _workflow(
        one_input,
        tmp_path,
        "CPUExecutionProvider",
        auto=True,
        data_config=_one_input_data(one_input),
    )
    olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    report = json.loads((tmp_path / "out" / "amp_report.json").read_text())
    assert report["passed"] is True and report["samples"] >= 1


def test_auto_thresholds_not_met_fail_the_pass_and_write_nothing(one_input, tmp_path) -> None:
    """The workflow ended normally with the model written (only "passed": false in its JSON);
    the command line exits 1 and writes nothing."""
    from amp_convert.olive import OliveThresholdsNotMet

    cfg = _workflow(
        one_input,
        tmp_path,
        "CPUExecutionProvider",
        auto=True,
        min_cosine=1.0,
        data_config=_one_input_data(one_input),
    )
    with pytest.raises(ValueError) as info:
        olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    assert isinstance(info.value, OliveThresholdsNotMet)
    assert "cannot be met" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out" / "model.onnx").exists()
    data = _one_input_data(one_input)
    forced = _workflow(
        one_input,
        tmp_path / "f",
        "CPUExecutionProvider",
        auto=True,
        min_cosine=1.0,
        force_write=True,
        data_config=data,
    )
    olive_run(forced, package_config=str(PACKAGE_CONFIG))
    report = json.loads((tmp_path / "f" / "out" / "amp_report.json").read_text())
    assert report["passed"] is False and (tmp_path / "f" / "out" / "model.onnx").exists()


@pytest.mark.parametrize("name", ["../escape.data", "/tmp/abs.data", "sub/w.data"])
def test_an_external_data_name_with_folder_parts_is_refused(one_input, tmp_path, name) -> None:
    """'../escape.data' ended the workflow normally with a model ORT refused to load."""
    cfg = _workflow(
        one_input,
        tmp_path,
        "CPUExecutionProvider",
        save_as_external_data=True,
        external_data_name=name,
    )
    with pytest.raises(OptionError) as info:
        olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    assert "without folder parts" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "escape.data").exists() and not Path("/tmp/abs.data").exists()


def test_a_plain_external_data_name_is_the_data_file(one_input, tmp_path) -> None:
    cfg = _workflow(
        one_input,
        tmp_path,
        "CPUExecutionProvider",
        save_as_external_data=True,
        external_data_name="w.data",
    )
    olive_run(cfg, package_config=str(PACKAGE_CONFIG))
    out = tmp_path / "out" / "model.onnx"
    proto = onnx.load(str(out), load_external_data=False)
    locations = {
        e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"
    }
    assert locations == {"w.data"} and (tmp_path / "out" / "w.data").exists()
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
