"""Suite-wide fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _package_logger_restored() -> Iterator[None]:
    """`amp-convert -v` run in-process (click's runner) sets the package's logger to DEBUG for the
    rest of the process: restored after each test, so no later test formats DEBUG records."""
    logger = logging.getLogger("amp_convert")
    level = logger.level
    yield
    logger.setLevel(level)
