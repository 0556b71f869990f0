"""Issue 16: a fuzz over command-line arguments (bench/cli_fuzz.py) never exits 3, never prints a
traceback and never changes a file the case did not name as an output.

500 cases with fixed seeds, in-process (click's CliRunner); bench/cli_fuzz.py runs more.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli_fuzz import fuzz

SEEDS = [range(0, 250), range(10_000, 10_250)]


@pytest.mark.parametrize("seeds", SEEDS, ids=lambda r: f"{r.start}-{r.stop}")
def test_cli_fuzz_never_crashes(tmp_path: Path, seeds: range) -> None:
    failures, codes = fuzz(tmp_path / "arena", seeds)
    report = "\n".join(
        f"{f.problem}: amp-convert {' '.join(repr(a) for a in f.args)}\n{f.output[-600:]}"
        for f in failures[:5]
    )
    assert not failures, f"{len(failures)} failing case(s):\n{report}"
    assert set(codes) <= {0, 1, 2}
    assert codes[2] > 0 and codes[0] > 0  # both refusals and successful runs were exercised
