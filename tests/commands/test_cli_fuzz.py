"""A fuzz over command-line arguments (bench/cli_fuzz.py) never exits 3, never
prints a traceback or a raw control character and never changes a file the case did not name as
an output; real processes interrupted at random moments end as documented.

500 cases with fixed seeds, in-process (click's CliRunner), with hostile text among the values
(bytes that are not UTF-8, NUL, ESC sequences, U+FFFE) and models whose names hold control
characters or whose external-data location holds a NUL; a fifth of them call the Python entry
points instead (convert, convert_file, validate, auto_convert, MixedPrecisionPass, Olive's
pass); bench/cli_fuzz.py runs more.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bench.cli_fuzz import fuzz, signal_fuzz

SEEDS = [range(0, 250), range(10_000, 10_250)]


def _report(failures) -> str:
    return "\n".join(
        f"{f.problem}: amp-convert {' '.join(repr(a) for a in f.args)}\n{f.output[-600:]}"
        for f in failures[:5]
    )


@pytest.mark.slow
@pytest.mark.parametrize("seeds", SEEDS, ids=lambda r: f"{r.start}-{r.stop}")
def test_cli_fuzz_never_crashes(tmp_path: Path, seeds: range) -> None:
    failures, codes = fuzz(tmp_path / "arena", seeds, api_share=0.2)
    assert not failures, f"{len(failures)} failing case(s):\n{_report(failures)}"
    assert set(codes) <= {0, 1, 2}
    assert codes[2] > 0 and codes[0] > 0  # both refusals and successful runs were exercised


@pytest.mark.slow
def test_signals_at_random_moments_end_as_documented(tmp_path: Path) -> None:
    """SIGINT: 130 and one line; SIGTERM: clean-up, then death by SIGTERM; SIGKILL: a rerun
    leaves nothing of the killed run; old or new outputs."""
    failures, codes = signal_fuzz(tmp_path / "arena", range(0, 10))
    assert not failures, f"{len(failures)} failing case(s):\n{_report(failures)}"
    assert set(codes) <= {0, 1, 2, 130, -signal.SIGTERM, -signal.SIGKILL}
    interrupted = codes[130] + codes[-signal.SIGTERM] + codes[-signal.SIGKILL]
    assert interrupted > 0  # some were interrupted, not all finished
