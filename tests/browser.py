"""Headless Chromium for the HTML report tests: the page as a browser builds it, and a screenshot.

Why a real browser: the page's table sorting is JavaScript and its charts are inline SVG; a
string search of the HTML says nothing about what a reader sees. ``dom`` returns the document
after the page's scripts (and an optional test script, e.g. clicks) ran; ``screenshot`` the PNG.

Where Chromium is missing the tests skip, except in CI (``CI`` set), where ``.ci/run`` installs it
and a missing browser is a failure: the browser test must never quietly stop running there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
TIMEOUT_S = 120


def chromium() -> str:
    """The browser's path; skips the test without one (fails it in CI)."""
    for name in _NAMES:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("no Chromium in CI: .ci/run installs it (apt-get install -y chromium)")
    pytest.skip("no Chromium installed (apt-get install -y chromium)")


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    profile = tmp / "chromium-profile"  # never the user's profile; each run a fresh one
    return subprocess.run(
        [chromium(), *_FLAGS, f"--user-data-dir={profile}", *args],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )


def dom(page: Path, script: str = "", width: int | None = None) -> str:
    """The page's DOM after its own scripts, then ``script`` (appended to a copy), have run;
    ``width``: the window's width in pixels (layout measurements depend on it)."""
    target = page
    if script:
        target = page.with_name(page.stem + ".under-test.html")
        text = page.read_text(encoding="utf-8")
        target.write_text(text.replace("</body>", f"<script>{script}</script></body>", 1))
    size = [f"--window-size={width},1000"] if width else []
    done = _run(["--virtual-time-budget=5000", *size, "--dump-dom", target.as_uri()], page.parent)
    return done.stdout.decode("utf-8")


def screenshot(page: Path, width: int = 1200, height: int = 2000) -> bytes:
    """A PNG of the page's first ``width`` x ``height`` pixels."""
    shot = page.with_suffix(".png")
    _run([f"--screenshot={shot}", f"--window-size={width},{height}", page.as_uri()], page.parent)
    return shot.read_bytes()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
