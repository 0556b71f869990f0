"""Symbolic dims: the one ``--dim NAME=VALUE`` parser, and dims written as expressions.

One parser serves the converter (sizes for the cast-cost estimate), ``validate``, ``--auto`` and the
HTML probes, so a value accepted by one is accepted by all: ``Dims`` is its result, the form every
options object holds (parsed once, passed on as is). Values are non-negative integers: 0 is a real
size (an empty KV cache, ``past_sequence_length=0``, on a decoder's first step). One check,
``check_dim_names``, refuses a name the model does not have, with the closest one it has.

Exporters write some dims as expressions over others: optimum's decoders
``past_sequence_length + sequence_length``, torch dynamo ``2*s0`` or ``s0 + 1``. ``DimExpr``
evaluates them without ``eval()``: the text (at most ``MAX_EXPR_CHARS``) is read by a loop into
postfix steps, and only integer constants, names, ``+ - * // / %``, unary minus and
``floor``/``ceil``/``min``/``max`` calls are accepted; anything else means the text is a plain
name. Nothing recurses on the text: a dim_param is untrusted input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from amp_convert.core import spelling
from amp_convert.errors import OptionError

_CALLS = {"floor", "ceil", "min", "max", "Min", "Max", "floordiv", "FloorDiv"}


class Dims(Mapping[str, int]):
    """``--dim`` values parsed once: NAME -> size, in name order; hashable (options hold it).

    Built from any form ``parse_dims`` reads; built from a Dims it is that Dims' copy, so an
    object handed down is never parsed again.
    """

    __slots__ = ("_pairs",)

    def __init__(self, dims: Any = None) -> None:
        pairs = dims._pairs if isinstance(dims, Dims) else tuple(sorted(parse_dims(dims).items()))
        self._pairs: tuple[tuple[str, int], ...] = pairs

    def __getitem__(self, name: str) -> int:
        for key, value in self._pairs:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __hash__(self) -> int:
        return hash(self._pairs)

    def __repr__(self) -> str:
        return f"Dims({dict(self._pairs)!r})"


def check_dim_names(
    dims: Iterable[str],
    names: Collection[str],
    *,
    inputs: Collection[str] | None = None,
    listed: str | None = None,
) -> None:
    """Every ``--dim`` NAME is one of `names` (or, with `inputs`, INPUT[AXIS] of one of them): a
    misspelt name would size nothing, silently. One OptionError line with the closest name;
    `listed` says what the model offers (default: `names`)."""
    for name in dims:
        if name in names:
            continue
        base = name.split("[", 1)[0]
        if inputs is not None and "[" in name and name.endswith("]"):
            if base in inputs:
                continue
            raise OptionError(f"--dim {name}: the model has no input named {base!r}")
        close = spelling.closest(name, names)
        hint = f" (did you mean {close!r}?)" if close else ""
        offered = listed if listed is not None else (", ".join(sorted(names)) or "none")
        raise OptionError(
            f"--dim {name}: the model has no dim named {name!r}{hint} (its dims: {offered})"
        )


def parse_dims(dims: Any) -> dict[str, int]:
    """``["batch=1", "seq=16"]`` / ``{"batch": 1}`` / ``(("batch", 1),)`` → ``{"batch": 1, ...}``.

    Names keep their inner spelling (``input_ids[1]`` sets an unnamed axis); a name given twice
    with two values is an error, never a silent last-wins.
    """
    if dims is None:
        return {}
    if isinstance(dims, Mapping):
        items: Iterable[Any] = dims.items()
    elif isinstance(dims, str):
        items = (dims,)
    else:
        items = dims
    out: dict[str, int] = {}
    for item in items:
        if isinstance(item, str):
            name, sep, text = item.rpartition("=")
            if not sep:
                raise OptionError(f"--dim {item!r}: expected NAME=VALUE")
        else:
            try:
                name, text = item
            except (TypeError, ValueError):
                raise OptionError(f"--dim: expected NAME=VALUE pairs, not {item!r}") from None
        name = str(name).strip()
        value = _dim_value(name, text)
        if not name:
            raise OptionError(f"--dim ={text}: empty name before '='")
        if name in out and out[name] != value:
            raise OptionError(f"--dim {name} given twice ({out[name]} and {value})")
        out[name] = value
    return out


def _dim_value(name: str, text: Any) -> int:
    if isinstance(text, bool):
        raise OptionError(f"--dim {name}={text}: the value must be a non-negative integer")
    try:
        value = int(text.strip()) if isinstance(text, str) else int(text)
        if not isinstance(text, str) and value != text:
            raise ValueError
    except (TypeError, ValueError):
        raise OptionError(
            f"--dim {name}={text}: the value must be a non-negative integer"
        ) from None
    if value < 0:
        raise OptionError(f"--dim {name}={text}: the value must be a non-negative integer")
    return value


#: the longest dim_param read as an expression: exporters write a few terms (``past + seq``,
#: ``floor(s0/2) + 1``); longer text is a plain name, never a deep parse
MAX_EXPR_CHARS = 256
#: the most terms a polynomial built from an expression may have (``(a+b)*(a+b)*...`` doubles)
MAX_TERMS = 64
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*/%(),]))")
#: binary operators by precedence; unary minus and plus bind tighter than all of them
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "neg": 3, "pos": 3}
_ARITY = {"floor": (1, 1), "ceil": (1, 1), "floordiv": (2, 2), "FloorDiv": (2, 2)}
#: one step of an expression in postfix order: ("num", 3), ("name", "seq"), ("op", "+"),
#: ("op", "neg"), ("call", "floor", 1)
Step = tuple[Any, ...]


class _NotArithmetic(Exception):
    """The text is not an expression of the grammar (it is then a plain name)."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _NotArithmetic
        pos = m.end()
        kind = "num" if m.group(1) else "name" if m.group(2) else "sym"
        out.append((kind, m.group(m.lastindex or 0)))
    return out


def _postfix(text: str) -> list[Step]:
    """``text`` in postfix order, by a loop (shunting-yard), never by recursion: a dim_param is
    untrusted text, and a recursive parse of 10,000 nested terms ended in RecursionError."""
    tokens = _tokens(text)
    out: list[Step] = []
    stack: list[Any] = []  # operators, "(" and ("call", name) marks
    args: list[int] = []  # argument counts of the open calls
    operand = True  # an operand is expected next
    for i, (kind, tok) in enumerate(tokens):
        if kind == "num" or (kind == "name" and tokens[i + 1 : i + 2] != [("sym", "(")]):
            if not operand:
                raise _NotArithmetic
            out.append(("num", int(tok)) if kind == "num" else ("name", tok))
            operand = False
        elif kind == "name":  # a call: its "(" comes next
            if not operand or tok not in _CALLS:
                raise _NotArithmetic
            stack.append(("call", tok))
        elif tok == "(":
            if not operand:
                raise _NotArithmetic
            if stack and isinstance(stack[-1], tuple) and tokens[i - 1][0] == "name":
                args.append(1)
                stack.append("call(")
            else:
                stack.append("(")
        elif tok in (",", ")"):
            if operand:
                raise _NotArithmetic
            while stack and stack[-1] not in ("(", "call("):
                out.append(("op", stack.pop()))
            if not stack:
                raise _NotArithmetic
            if tok == ",":
                if stack[-1] != "call(":
                    raise _NotArithmetic
                args[-1] += 1
                operand = True
                continue
            mark = stack.pop()
            if mark == "call(":
                out.append(("call", stack.pop()[1], args.pop()))
        else:  # an operator
            op = tok
            if operand:
                if op not in "+-":
                    raise _NotArithmetic
                stack.append("neg" if op == "-" else "pos")
                continue
            prec = _PRECEDENCE[op]
            while stack and isinstance(stack[-1], str) and _PRECEDENCE.get(stack[-1], 0) >= prec:
                out.append(("op", stack.pop()))
            stack.append(op)
            operand = True
    if operand:
        raise _NotArithmetic
    while stack:
        top = stack.pop()
        if not isinstance(top, str) or top in ("(", "call("):
            raise _NotArithmetic
        out.append(("op", top))
    for step in out:
        if step[0] == "call":
            low, high = _ARITY.get(step[1], (1, 2))
            if not low <= step[2] <= high:
                raise _NotArithmetic
    return out


def fold(steps: Sequence[Step], num: Any, name: Any, op: Any, call: Any) -> Any:
    """Evaluate postfix `steps` with a stack: ``num(int)``, ``name(str)``, ``op(sym, *args)``
    (unary "neg"/"pos" take one), ``call(fn, args)``."""
    stack: list[Any] = []
    for step in steps:
        kind = step[0]
        if kind == "num":
            stack.append(num(step[1]))
        elif kind == "name":
            stack.append(name(step[1]))
        elif kind == "op" and step[1] in ("neg", "pos"):
            stack.append(op(step[1], stack.pop()))
        elif kind == "op":
            b, a = stack.pop(), stack.pop()
            stack.append(op(step[1], a, b))
        else:
            n = step[2]
            values, stack[-n:] = stack[-n:], []
            stack.append(call(step[1], values))
    return stack[0]


@dataclass(frozen=True)
class DimExpr:
    """A dim written as an arithmetic expression over other dims (see the module docstring)."""

    text: str
    names: frozenset[str]
    steps: tuple[Step, ...]

    @staticmethod
    def sum_of(keys: Sequence[str]) -> DimExpr:
        """The sum of the dims `keys` (any spelling: keys are looked up, never parsed)."""
        steps: list[Step] = [("name", keys[0])]
        for k in keys[1:]:
            steps += [("name", k), ("op", "+")]
        return DimExpr(" + ".join(keys), frozenset(keys), tuple(steps))

    def evaluate(self, values: Mapping[str, int]) -> int:
        """The integer value given the dims it names; ValueError if it is not a size."""
        result = fold(self.steps, Fraction, lambda n: _value(n, values), _arith, _call)
        if result.denominator != 1:
            raise ValueError(f"dim {self.text!r} is {float(result):g}, not an integer")
        if result < 0:
            raise ValueError(f"dim {self.text!r} is {int(result)}, a negative size")
        return int(result)


def parse_dim_expression(text: str) -> DimExpr | None:
    """The expression in ``text``, or None when it is a plain name, a number, not arithmetic,
    or longer than ``MAX_EXPR_CHARS``."""
    if len(text) > MAX_EXPR_CHARS:
        return None
    try:
        steps = _postfix(text.strip())
    except _NotArithmetic:
        return None
    if len(steps) < 2:
        return None
    names = frozenset(str(s[1]) for s in steps if s[0] == "name")
    return DimExpr(text, names, tuple(steps))


def _value(name: str, values: Mapping[str, int]) -> Fraction:
    if name not in values:
        raise ValueError(f"dim {name!r} has no value")
    return Fraction(values[name])


def _arith(op: str, a: Fraction, b: Fraction | None = None) -> Fraction:
    if op == "neg":
        return -a
    if op == "pos":
        return a
    assert b is not None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise ValueError("division by zero in a dim expression")
    if op == "/":
        return a / b
    if op == "//":
        return Fraction(math.floor(a / b))
    return a - b * math.floor(a / b)  # %, Python's sign convention


def _call(fn: str, args: list[Fraction]) -> Fraction:
    if fn in ("floor", "ceil"):
        return Fraction(math.floor(args[0]) if fn == "floor" else math.ceil(args[0]))
    if fn in ("floordiv", "FloorDiv"):
        if args[1] == 0:
            raise ValueError(f"{fn} takes two arguments, the second not 0")
        return Fraction(math.floor(args[0] / args[1]))
    return min(args) if fn.lower() == "min" else max(args)
