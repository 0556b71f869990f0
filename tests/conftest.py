"""Suite-wide fixtures, and the `unit` selection."""

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


#: markers that keep a test out of the unit loop (`pytest -m unit`, under a minute on 2 cores)
_NOT_UNIT = ("slow", "integration", "cuda")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that is not slow, integration or CUDA is `unit`: a new test joins the fast loop
    unless it says why it cannot (a marker), so the loop covers what it can by default."""
    for item in items:
        if not any(item.get_closest_marker(name) for name in _NOT_UNIT):
            item.add_marker(pytest.mark.unit)
