"""README's command blocks run as written, top to bottom, so they stay true.

Every ``amp-convert ...`` line of a ```bash block and every ```python block is run in order in
one empty folder holding the repository's sample models: ``models/sample_bert.onnx`` (the first
use) and ``model.onnx`` (the user's model in the examples: the sample ResNet, an image model).
A line that fails, a block that needs a file no earlier block made, or two commands writing the
same file (the second fails without ``--force``) fails the test. pip, build and bench lines are
not run (they install or take minutes).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from amp_convert.commands.cli import cli

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("onnxruntime")


def readme_steps(text: str) -> list[tuple[str, str]]:
    """("cli", command line) and ("python", source) in README order."""
    steps: list[tuple[str, str]] = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang == "python":
            steps.append(("python", body))
        elif lang == "bash":
            joined = re.sub(r"\\\n\s*", " ", body)
            for line in joined.splitlines():
                command = line.split(" #", 1)[0].strip()
                if command.startswith("amp-convert "):
                    steps.append(("cli", command))
    return steps


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    steps = readme_steps((ROOT / "README.md").read_text(encoding="utf-8"))
    commands = [s for kind, s in steps if kind == "cli"]
    assert commands[0] == "amp-convert models/sample_bert.onnx --level O2"
    assert any(" validate " in c for c in commands) and any("--auto" in c for c in commands)
    assert any("np.savez" in s for kind, s in steps if kind == "python")  # making inputs.npz
    assert sum(kind == "python" for kind, _ in steps) >= 2


def test_readme_blocks_run_as_written(tmp_path, monkeypatch) -> None:
    (tmp_path / "models").mkdir()
    shutil.copy(ROOT / "models" / "sample_bert.onnx", tmp_path / "models" / "sample_bert.onnx")
    shutil.copy(ROOT / "models" / "sample_resnet.onnx", tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    for kind, step in readme_steps((ROOT / "README.md").read_text(encoding="utf-8")):
        if kind == "python":
            exec(compile(step, "README.md", "exec"), {"__name__": "readme"})
            continue
        result = CliRunner().invoke(cli, shlex.split(step)[1:])
        assert result.exit_code == 0, f"{step}\n{result.output}"
    made = {p.name for p in tmp_path.iterdir()}
    expected = {"model.fp16.onnx", "model.bf16.onnx", "model.o1.onnx", "r.json",
                "checked.fp16.onnx", "api.fp16.onnx", "report.json", "calib1.npz", "calib2.npz",
                "model.auto.onnx", "auto.json", "auto.html"}  # fmt: skip
    assert expected <= made, expected - made
    assert (tmp_path / "models" / "sample_bert.fp16.onnx").is_file()
