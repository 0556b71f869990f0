"""The closest known name to a misspelt one, for the "did you mean" of an error line.

difflib is imported when a name is misspelt, not at start-up: a conversion that goes well never
needs it.
"""

from __future__ import annotations

from collections.abc import Iterable


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name most like `word` (difflib's ratio of at least 0.6), or None."""
    import difflib

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return close[0] if close else None
