"""The "did you mean" of error lines: one rule for every misspelt name."""

from __future__ import annotations

import pytest

from amp_convert.core.spelling import closest


@pytest.mark.parametrize(
    ("word", "known", "want"),
    [
        ("btach", ["batch", "sequence"], "batch"),
        ("validte", ["convert", "validate"], "validate"),
        ("SoftMax", ["Softmax", "Add"], "Softmax"),
        ("zzz", ["batch", "sequence"], None),
        ("batch", [], None),
    ],
)
def test_closest_is_the_nearest_known_name_or_none(
    word: str, known: list[str], want: str | None
) -> None:
    assert closest(word, known) == want


def test_closest_takes_any_iterable() -> None:
    assert closest("sequnce", (n for n in ("batch", "sequence"))) == "sequence"
