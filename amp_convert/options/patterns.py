"""--exclude-nodes patterns that cannot hang on hostile node names.

Python's ``re`` backtracks: ``(a+)+$`` takes exponential time on a 35-character node name, and a
model's node names are input we do not control. Patterns are compiled with RE2 (google-re2), whose
automaton matches in time linear in the name whatever the pattern; RE2 has no backreferences or
lookarounds, and such a pattern is refused with one line.

Without google-re2 (an environment that could not install its wheel), Python's ``re`` is used on
a bounded subset: a pattern is parsed once (the standard library's own parser) and refused when
it holds a construct whose matching time can explode:
- a backreference: matching with them is NP-hard;
- an unbounded repeat whose body is itself a repeat, an alternation, or can match nothing
  (``(a+)+``, ``(a|ab)*``, ``(a?)*``): exponentially many ways to split a name;
- more than MAX_OPEN_REPEATS unbounded repeats (``.*`` counts), each of which multiplies the
  backtracking by the name's length (still polynomial: prefer installing google-re2).
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Protocol, cast

try:
    import re2  # google-re2: linear-time matching
except ImportError:  # pragma: no cover - exercised by tests that hide it
    re2 = None

from amp_convert.core import user_text
from amp_convert.errors import OptionError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:  # the regex parser of the standard library (public name up to 3.10)
        import sre_parse as _sre
    except ImportError:  # pragma: no cover - removed in a future Python
        from re import _parser as _sre  # type: ignore[attr-defined,no-redef]

#: most unbounded repeats (``*``, ``+``, ``{n,}``) one pattern may hold
MAX_OPEN_REPEATS = 3
#: a counted repeat above this many is treated as unbounded
_BIG_REPEAT = 64
_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)} - {None}


class NamePattern(Protocol):
    """What the converter asks of a compiled pattern (re.Pattern and RE2's both have it)."""

    @property
    def pattern(self) -> str: ...

    def search(self, text: str) -> Any: ...

    def fullmatch(self, text: str) -> Any: ...


def compile_pattern(text: str, flag: str = "--exclude-nodes") -> NamePattern:
    """`text` compiled for node names, or OptionError (not a regex, or one that could hang)."""
    try:
        user_text.check_text(text, flag)
    except user_text.TextError as e:
        raise OptionError(str(e)) from None
    try:
        with warnings.catch_warnings(record=True) as said:  # said once below, naming the flag
            warnings.simplefilter("always")
            compiled = re.compile(text)
            tree = _sre.parse(text)
    except (re.error, RecursionError, OverflowError) as e:
        raise OptionError(f"{flag} {text!r}: bad regular expression: {e}") from None
    if said and re2 is None:  # RE2 reads [[:alpha:]] as a POSIX class; Python's re does not
        warnings.warn(f"{flag} {text!r}: {said[0].message}", FutureWarning, stacklevel=2)
    if re2 is not None:
        options = re2.Options()
        options.log_errors = False
        options.max_mem = 8 << 20  # a pattern's automaton, not the names, needs this
        try:
            return cast(NamePattern, re2.compile(text, options))
        except re2.error as e:
            why = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
            raise OptionError(
                f"{flag} {text!r}: not supported by the linear-time matcher (RE2: {why})"
            ) from None
    problem = _problem(list(tree), [0])  # type: ignore[call-overload]
    if problem:
        raise OptionError(
            f"{flag} {text!r}: {problem}; node names are matched with a bounded regex subset "
            "(no backreferences, no repeat of a repeat or of an alternation, at most "
            f"{MAX_OPEN_REPEATS} open-ended repeats)"
        )
    return compiled


def _problem(items: list[tuple[Any, Any]], open_repeats: list[int]) -> str | None:
    for op, av in items:
        if op in (_sre.GROUPREF, _sre.GROUPREF_EXISTS):
            return "backreferences can take exponential time"
        if op in _REPEATS:
            _low, high, body = av
            if high == _sre.MAXREPEAT or high > _BIG_REPEAT:
                open_repeats[0] += 1
                if open_repeats[0] > MAX_OPEN_REPEATS:
                    return f"more than {MAX_OPEN_REPEATS} open-ended repeats"
                if _ambiguous(list(body)):
                    return (
                        "a repeat of a repeat, of an alternation or of an empty match can take "
                        "exponential time"
                    )
            found = _problem(list(body), open_repeats)
        elif op == _sre.SUBPATTERN:
            found = _problem(list(av[-1]), open_repeats)
        elif op == _sre.BRANCH:
            found = next((p for b in av[1] if (p := _problem(list(b), open_repeats))), None)
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            found = _problem(list(av[1]), open_repeats)
        elif op == getattr(_sre, "ATOMIC_GROUP", None):
            found = _problem(list(av), open_repeats)
        else:
            found = None
        if found:
            return found
    return None


def _ambiguous(body: list[tuple[Any, Any]]) -> bool:
    """Whether a repeated body can match one text in several ways (or match nothing)."""
    if _sre.SubPattern(_sre.State(), body).getwidth()[0] == 0:
        return True
    for op, av in body:
        if op in _REPEATS and (av[1] > 1 or av[1] == _sre.MAXREPEAT):
            return True
        if op == _sre.BRANCH:
            return True
        if op == _sre.SUBPATTERN and _ambiguous(list(av[-1])):
            return True
        if op == getattr(_sre, "ATOMIC_GROUP", None) and _ambiguous(list(av)):
            return True
    return False
