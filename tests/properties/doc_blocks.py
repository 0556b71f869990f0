"""The runnable parts of a Markdown page, in page order, for tests/properties/test_readme.py.

A page's fenced blocks become steps:

* ```` ```python ````: the block, executed;
* ```` ```bash ````: each command (``\\`` continuations joined), run in the page's folder;
  ``amp-convert ...`` in-process (click's runner), anything else through ``bash``; a trailing
  ``# exit N`` says the exit code the command must give (default 0). A block with a heredoc
  (``<<``) runs whole, as one script;
* ```` ```yaml ````: the ``amp-convert`` commands of its ``run:`` steps (a CI recipe);
* ```` ```text ```` right after a bash block: what the block's last command prints. Each line must
  appear in the output (spaces compared loosely; ``…`` stands for any text within a line, and a
  line ``...`` for lines left out).

Commands that install, clone, lint or run benchmarks (`SKIPPED`) are not run, and a block right
after an HTML comment ``<!-- docs-test: skip REASON -->`` is not run either (the reason is
shown to the reader of the source only): a GPU, a download, minutes of work. A block after
``<!-- docs-test: needs MODULE -->`` runs where MODULE imports (an optional extra such as Olive).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

#: command prefixes that are not run: installs, clones, linters, the test suite, benchmarks,
#: generators that rewrite package data
SKIPPED = (
    "pip ",
    "python -m pip ",
    "git ",
    "cd ",
    "python -m pytest",
    "ruff ",
    "mypy ",
    "bash .ci/run",
    "python bench/",
    "python -m bench.",
    "python scripts/",
    "python3 bench/",
    "tar ",
    "sudo ",
    "apt",
)
_ENV = re.compile(r"^((?:[A-Z_][A-Z0-9_]*=\S*\s+)*)(.*)$")
_FENCE = re.compile(
    r"(?P<before>(?:^<!--[^\n]*-->\n(?:\s*\n)*)?)^```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
    re.S | re.M,
)


@dataclass(frozen=True)
class Step:
    kind: str  # "python", "cli" (amp-convert in-process), "shell", "expect", "skip"
    text: str  # the source, the command, the expected lines, or why it is skipped
    exit_code: int = 0
    env: tuple[tuple[str, str], ...] = ()
    line: int = 0  # where it starts in the page
    needs: str = ""  # a module the block needs (``docs-test: needs MODULE``): run where it imports


def _command(raw: str) -> tuple[str, int]:
    """The command without its trailing comment, and the exit code the comment gives."""
    code = 0
    match = re.search(r"\s#\s*exit (\d+)\b", raw)
    if match:
        code = int(match.group(1))
    return _strip_comment(raw).strip(), code


def _strip_comment(line: str) -> str:
    """`line` up to a `` #`` outside quotes."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _shell_steps(body: str, line: int, yaml: bool = False) -> list[Step]:
    steps: list[Step] = []
    joined = re.sub(r"\\\n\s*", " ", body)
    for raw in joined.splitlines():
        text = raw.strip()
        if yaml:
            text = re.sub(r"^-?\s*run:\s*\|?\s*", "", text)
            if not text.startswith("amp-convert "):
                continue
        command, code = _command(text)
        if not command:
            continue
        env_part, rest = _ENV.match(command).groups()  # type: ignore[union-attr]
        env = tuple(tuple(kv.split("=", 1)) for kv in env_part.split())
        if rest.startswith(SKIPPED):
            steps.append(Step("skip", command, line=line))
        elif rest.startswith("amp-convert "):
            steps.append(Step("cli", rest, code, env, line))  # type: ignore[arg-type]
        else:
            steps.append(Step("shell", command, code, line=line))
    return steps


def page_steps(text: str) -> list[Step]:
    """Every step of a Markdown page, in order."""
    steps: list[Step] = []
    previous_end, previous_lang = -1, ""
    for match in _FENCE.finditer(text):
        lang, body, before = match["lang"], match["body"], match["before"]
        line = text.count("\n", 0, match.start("lang")) + 1
        adjacent = text[previous_end : match.start()].strip() == "" and previous_lang == "bash"
        previous_end, previous_lang = match.end(), lang
        skip = re.search(r"docs-test:\s*skip\b\s*(.*?)\s*-->", before)
        if skip:
            steps.append(Step("skip", skip.group(1) or "marked skip", line=line))
            previous_lang = ""
            continue
        needs = re.search(r"docs-test:\s*needs\s+([\w.]+)\s*-->", before)
        first = len(steps)
        if lang == "python":
            steps.append(Step("python", body, line=line))
        elif lang == "bash" and "<<" in body:
            steps.append(Step("shell", body, line=line))
        elif lang == "bash":
            steps.extend(_shell_steps(body, line))
        elif lang == "yaml":
            steps.extend(_shell_steps(body, line, yaml=True))
        elif lang == "text" and adjacent:
            steps.append(Step("expect", body, line=line))
        if needs:
            steps[first:] = [replace(step, needs=needs.group(1)) for step in steps[first:]]
    return steps


def _loose(s: str) -> str:
    return " ".join(s.split())


def missing_lines(expected: str, output: str) -> list[str]:
    """The lines of `expected` that `output` does not show (see the module docstring)."""
    out_lines = [_loose(x) for x in output.splitlines()]
    missing = []
    for want in expected.splitlines():
        want = _loose(want)
        if not want or want == "...":
            continue
        pieces = [p for p in (_loose(x) for x in want.split("…")) if p]
        if not any(_in_order(pieces, got) for got in out_lines):
            missing.append(want)
    return missing


def _in_order(pieces: list[str], line: str) -> bool:
    at = 0
    for piece in pieces:
        at = line.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return True
