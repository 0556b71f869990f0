"""Suite-wide fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from amp_convert.core.steps import STEP_CHECKS
from tests.step_checks import around_step


@pytest.fixture(autouse=True)
def _package_logger_restored() -> Iterator[None]:
    """`amp-convert -v` run in-process (click's runner) sets the package's logger to DEBUG for the
    rest of the process: restored after each test, so no later test formats DEBUG records."""
    logger = logging.getLogger("amp_convert")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True, scope="session")
def _every_step_checked() -> Iterator[None]:
    """Around every conversion step of every test: the graph's structure, and no more edits than
    the step declares (tests/step_checks.py)."""
    STEP_CHECKS.append(around_step)
    yield
    STEP_CHECKS.remove(around_step)
