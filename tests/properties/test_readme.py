"""README's and every docs page's command blocks run as written, so they stay true.

Each page (README.md, docs/*.md, bench/README.md) runs top to bottom in its own empty folder that
holds the repository's sample models, as a reader's clone does: ``models/sample_bert.onnx`` and
``models/sample_resnet.onnx`` (pages copy the ResNet to ``model.onnx``, the user's model in the
examples). The steps are tests/properties/doc_blocks.py's: python blocks executed, bash commands
run with the exit code they announce (``# exit 1``), a ``text`` block after a bash block checked
against what its last command printed. A command that fails, a block that needs a file no earlier
block made, or two commands writing the same file (the second fails without ``--force``) fails
the test. Then the pages' links (inside the repository, and resolving) and figures (each table of
measured figures next to the command that measured it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from amp_convert.commands.cli import cli
from tests.properties.doc_blocks import Step, missing_lines, page_steps

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "bench" / "README.md",
]
ONLINE = ("http://", "https://", "mailto:")

pytest.importorskip("onnxruntime")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _run_cli(step: Step, folder: Path) -> tuple[int, str]:
    env = dict(step.env)
    result = CliRunner().invoke(cli, shlex.split(step.text)[1:], env=env)
    if result.exit_code not in (0, 1, 2, 130) and result.exception is not None:
        raise result.exception
    return result.exit_code, result.output


def _run_shell(step: Step, folder: Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", step.text],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def run_page(page: Path, folder: Path) -> list[str]:
    """Run every step of `page` in `folder`; return the commands run."""
    (folder / "models").mkdir()
    for name in ("sample_bert.onnx", "sample_resnet.onnx"):
        shutil.copy(ROOT / "models" / name, folder / "models" / name)
    where = _id(page)
    ran: list[str] = []
    output = ""
    for step in page_steps(page.read_text(encoding="utf-8")):
        if step.kind == "skip" or (step.needs and importlib.util.find_spec(step.needs) is None):
            continue
        if step.kind == "python":
            exec(compile(step.text, f"{where}:{step.line}", "exec"), {"__name__": "docs"})
            ran.append("python block")
            continue
        if step.kind == "expect":
            missing = missing_lines(step.text, output)
            assert not missing, f"{where}:{step.line}: not printed: {missing}\n{output}"
            continue
        run = _run_cli if step.kind == "cli" else _run_shell
        code, output = run(step, folder)
        assert code == step.exit_code, (
            f"{where}:{step.line}: `{step.text}` exited {code}, the page says {step.exit_code}\n"
            f"{output}"
        )
        ran.append(step.text)
    return ran


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_page_blocks_run_as_written(page: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_page(page, tmp_path)


def test_the_readme_is_a_front_door() -> None:
    """Short, and it shows the first conversion, the three commands, the API and the CI gate."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    steps = page_steps(text)
    commands = [s.text for s in steps if s.kind == "cli"]
    assert commands[0] == "amp-convert models/sample_bert.onnx --level O2"
    assert any(c.startswith("amp-convert validate ") for c in commands)
    assert any("--auto" in c for c in commands)
    assert any("--validate" in c and "--junit" in c for c in commands)  # the CI gate
    assert any("amp_convert.convert" in s.text for s in steps if s.kind == "python")
    assert 'pip install -e ".[cpu]"' in text
    for page in (
        "converting",
        "validating",
        "auto",
        "integrations",
        "how-it-works",
        "reliability",
        "troubleshooting",
        "cli",
    ):
        assert f"(docs/{page}.md)" in text, page


def test_no_placeholders_nor_links_out_of_the_repository() -> None:
    for page in (ROOT / "README.md", *PAGES):
        text = page.read_text(encoding="utf-8")
        assert "OWNER" not in text, _id(page)
        assert "../shared" not in text, _id(page)


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#+\s+(.*)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_links_resolve_inside_the_repository(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for target in _LINK.findall(text):
        if target.startswith(ONLINE):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        assert resolved.is_relative_to(ROOT), f"{_id(page)}: {target} leaves the repository"
        assert resolved.exists(), f"{_id(page)}: {target} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{_id(page)}: no heading #{anchor} in {target}"


_FIGURE = re.compile(
    r"[~≈<>≤+\-−]?\d[\d.,]*(e[-+]?\d+)?(ms|s|x|×|%|B|KB|KiB|MB|MiB|GB|GiB)?"
    r"|ms|s|x|%|B|KB|KiB|MB|MiB|GB|GiB|of|/|->|→"
)


def _is_figure(cell: str) -> bool:
    """A table cell that is a measurement: numbers with their units, nothing else (``1.32x``,
    ``+2 / 0.54x / 0.999999``, ``13.60 (1.32x)``), not text that mentions a number."""
    tokens = re.sub(r"[*`()]", " ", cell).split()
    measured = re.search(r"\d[.,]\d|\d\s?(ms|s|x|×|%|B|KB|KiB|MB|MiB|GB|GiB)\b|\d / ", cell)
    return bool(tokens) and all(_FIGURE.fullmatch(t) for t in tokens) and bool(measured)


_COMMAND = re.compile(r"(python3? (-m )?(bench|scripts)[/.]\w+|amp-convert \w|bash bench/)")


def figure_tables(text: str) -> list[tuple[int, int]]:
    """(first line, last line) of each Markdown table holding measured figures (two body cells
    or more that are measurements)."""
    lines = text.splitlines()
    tables, start = [], None
    for i, line in enumerate([*lines, ""]):
        if line.lstrip().startswith("|"):
            start = i if start is None else start
            continue
        if start is not None:
            body = lines[start + 2 : i]
            figures = sum(_is_figure(cell) for row in body for cell in row.split("|")[1:-1])
            if figures >= 2:
                tables.append((start, i - 1))
            start = None
    return tables


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_figures_carry_the_command_that_measured_them(page: Path) -> None:
    """Every table of figures has a command line in it or within the 12 lines around it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    for first, last in figure_tables("\n".join(lines)):
        near = "\n".join(lines[max(0, first - 12) : last + 13])
        assert _COMMAND.search(near), f"{_id(page)}:{first + 1}: a table of figures, no command"


def test_the_runner_reads_what_a_page_announces() -> None:
    """The steps a page yields: exit codes from comments, expected output, skipped blocks."""
    page = (
        "```bash\ncp a b\namp-convert nosuch.onnx   # exit 2\n```\n\n"
        "```text\namp-convert: error: nosuch.onnx: no such file\n```\n\n"
        "<!-- docs-test: skip needs a GPU -->\n"
        "```bash\namp-convert validate a b --provider cuda\n```\n"
        "```bash\npip install -e .\nAMP_CONVERT_THREADS=2 amp-convert m.onnx -o 'o #1.onnx'\n```\n"
    )
    steps = page_steps(page)
    assert [s.kind for s in steps] == ["shell", "cli", "expect", "skip", "skip", "cli"]
    assert steps[1].exit_code == 2 and steps[0].exit_code == 0
    assert steps[3].text == "needs a GPU"
    assert steps[5].env == (("AMP_CONVERT_THREADS", "2"),)
    assert steps[5].text == "amp-convert m.onnx -o 'o #1.onnx'"


def test_a_block_that_needs_an_optional_module_names_it() -> None:
    """The lower-bounds job installs no extras: Olive's block runs only where Olive imports."""
    page = "<!-- docs-test: needs olive -->\n```bash\npython -c 'import olive'\n```\n"
    page += "```bash\namp-convert m.onnx\n```\n"
    steps = page_steps(page)
    assert [(s.kind, s.needs) for s in steps] == [("shell", "olive"), ("cli", "")]


def test_expected_output_is_checked_line_by_line() -> None:
    out = "wrote m.fp16.onnx\nnodes FP16: 17  (Conv 6, Relu 5)\nresult: PASS (1 of 1 output)\n"
    assert missing_lines("nodes FP16: 17 (Conv 6, …)\n...\nresult: PASS …", out) == []
    assert missing_lines("result: FAIL", out) == ["result: FAIL"]
    assert missing_lines("nodes FP16: 18 …", out) == ["nodes FP16: 18 …"]
