"""README's CI recipe, run as written: it passes a healthy model and fails a broken one.

The command is read from README's "As a CI gate" block (the lines that continue the
``amp-convert`` command), so the recipe users copy is the one tested; the GitHub Actions job in
docs/integrations.md runs the same command. The model is a
probability-map text detector at a steep edge (``paddle_text_detector(gain=400)``) on a rendered
text page: a healthy FP16 conversion puts 86 of 307,200 pixels past the element-wise bound
(cosine 0.999999), the case a bare ``--atol 1e-2 --rtol 1e-2`` failed; a copy whose logits shift
by 0.25 is broken, and cosine alone would pass it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper

from amp_convert.commands.cli import cli
from models.input_meaning import paddle_text_detector, text_like_image
from models.overflow import calibration, matmul_overflow

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CI_JOB = ROOT / "docs" / "integrations.md"


def recipe(
    path: Path = README, heading: str = "## As a CI gate", fence: str = "```bash"
) -> list[str]:
    """The arguments of a page's CI command (after ``amp-convert``), as written."""
    text = path.read_text(encoding="utf-8")
    block = text.split(heading, 1)[1].split(fence, 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("amp-convert "))
    command = []
    for ln in lines[start:]:
        command.append(ln.strip().rstrip("\\").strip())
        if not ln.rstrip().endswith("\\"):
            break
    return shlex.split(" ".join(command))[1:]


def _run(tmp: Path, model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> tuple[int, str]:
    """The recipe in ``tmp`` as the CI job runs it (its model.onnx and ci/inputs.npz)."""
    (tmp / "ci").mkdir(exist_ok=True)
    onnx.save(model, tmp / "model.onnx")
    np.savez(tmp / "ci" / "inputs.npz", **inputs)
    local = ("model.", "fp16-", "ci/")  # the job's files, in its folder
    args = [str(tmp / a) if a.startswith(local) else a for a in recipe()]
    res = CliRunner().invoke(cli, args)
    return res.exit_code, res.output


def test_the_recipe_is_the_readme_command() -> None:
    args = recipe()
    assert args[0] == "model.onnx" and "--validate" in args
    assert "--max-mismatch" in args and "--min-cosine" in args


def test_the_ci_job_in_the_docs_runs_the_readme_recipe() -> None:
    assert recipe(CI_JOB, "## CI", "```yaml") == recipe()


@pytest.mark.integration
def test_the_readme_recipe_passes_a_healthy_detector(tmp_path) -> None:
    image = {"x": text_like_image(480, 640)}
    code, out = _run(tmp_path, paddle_text_detector(gain=400), image)
    assert code == 0, out
    assert "result: PASS" in out and (tmp_path / "model.fp16.onnx").is_file()


def _shifted(model: onnx.ModelProto, shift: float) -> onnx.ModelProto:
    """The detector whose logits are ``shift`` higher: the map's edges move."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name == "bias":
            t.CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(t) + np.float32(shift), "bias")
            )
    return out


@pytest.mark.integration
def test_the_readme_recipes_thresholds_fail_a_perturbed_detector(tmp_path) -> None:
    """The recipe's judging flags, as written, on a converted detector whose logits moved by
    0.25: 0.4% of the pixels past the bound, more than --max-mismatch allows (cosine 0.99999
    would pass it alone)."""
    import amp_convert

    healthy = paddle_text_detector(gain=400)
    (tmp_path / "ci").mkdir()
    onnx.save(healthy, tmp_path / "model.onnx")
    np.savez(tmp_path / "ci" / "inputs.npz", x=text_like_image(480, 640))
    onnx.save(amp_convert.convert(_shifted(healthy, 0.25), level="O2"), tmp_path / "shifted.onnx")
    args = recipe()
    judge = args[args.index("--provider") :]  # the recipe's judging flags, as written
    drop = {"--validation-report", "--junit"}  # and their file arguments
    kept: list[str] = []
    skip = False
    for a in judge:
        if skip or a in drop:
            skip = a in drop
            continue
        kept.append(str(tmp_path / a) if a == "ci/inputs.npz" else a)
    res = CliRunner().invoke(
        cli, ["validate", str(tmp_path / "model.onnx"), str(tmp_path / "shifted.onnx"), *kept]
    )
    assert res.exit_code == 1, res.output
    assert re.search(r"\(\d\.\d+%, more than max_mismatch 0\.001\)", res.output), res.output


@pytest.mark.integration
def test_the_readme_recipe_fails_a_model_fp16_breaks_and_writes_nothing(tmp_path) -> None:
    """A long MatMul whose sum passes 65504 in FP16: the recipe, as written, exits 1 and leaves
    no model behind."""
    model, _ = matmul_overflow()
    code, out = _run(tmp_path, model, calibration(model, "normal", batch=2))
    assert code == 1, out
    assert "result: FAIL" in out and not (tmp_path / "model.fp16.onnx").exists()
