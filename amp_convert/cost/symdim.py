"""Symbolic tensor dims: polynomials over named dims, so `2*seq` and `seq+past` stay exact.

ONNX shape inference forgets a dim as soon as it is computed (a Concat of `seq` and `past` gives
an unnamed dim); the cost model needs its size. A dim here is an int, a `Sym` (integer
polynomial over dim names, with exact or floor division kept as an opaque atom), or None
(unknown: data-dependent). `evaluate` gives the size for concrete dims.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Monomial = tuple  # sorted tuple of atoms (a name repeated for a power)


@dataclass(frozen=True)
class FloorDiv:
    """`num // den` where the division is not exact as polynomials."""

    num: Sym
    den: Sym

    def evaluate(self, env: Mapping[str, int]) -> int | None:
        n, d = self.num.evaluate(env), self.den.evaluate(env)
        if n is None or not d:
            return None
        return n // d

    def __str__(self) -> str:
        return f"({self.num})//({self.den})"


def _key(atom: object) -> str:
    return atom if isinstance(atom, str) else str(atom)


class Sym:
    """An integer polynomial over dim names (immutable, hashable)."""

    __slots__ = ("_hash", "terms")

    def __init__(self, terms: Mapping[Monomial, int]) -> None:
        self.terms: dict[Monomial, int] = {m: c for m, c in terms.items() if c}
        self._hash = hash(frozenset(self.terms.items()))

    @staticmethod
    def name(name: str) -> Sym:
        return Sym({(name,): 1})

    @property
    def constant(self) -> int | None:
        """The value when the polynomial has no symbol, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and () in self.terms:
            return self.terms[()]
        return None

    def evaluate(self, env: Mapping[str, int]) -> int | None:
        """The value for concrete dims `env`; None when a name is missing."""
        total = 0
        for mono, coeff in self.terms.items():
            value = coeff
            for atom in mono:
                v = env.get(atom) if isinstance(atom, str) else atom.evaluate(env)
                if v is None:
                    return None
                value *= v
            total += value
        return total

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.constant == other
        return isinstance(other, Sym) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for mono, coeff in sorted(self.terms.items(), key=lambda t: (-len(t[0]), str(t[0]))):
            names = "*".join(_key(a) for a in mono)
            if not names:
                parts.append(str(coeff))
            elif coeff == 1:
                parts.append(names)
            elif coeff == -1:
                parts.append("-" + names)
            else:
                parts.append(f"{coeff}*{names}")
        return "+".join(parts).replace("+-", "-")

    __repr__ = __str__


Dim = int | Sym | None


def sym(d: int | Sym) -> Sym:
    return d if isinstance(d, Sym) else Sym({(): d})


def _norm(s: Sym) -> int | Sym:
    c = s.constant
    return c if c is not None else s


def add(a: Dim, b: Dim) -> Dim:
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    terms = dict(sym(a).terms)
    for m, c in sym(b).terms.items():
        terms[m] = terms.get(m, 0) + c
    return _norm(Sym(terms))


def neg(a: Dim) -> Dim:
    return mul(a, -1)


def sub(a: Dim, b: Dim) -> Dim:
    return add(a, neg(b))


def mul(a: Dim, b: Dim) -> Dim:
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    terms: dict[Monomial, int] = {}
    for ma, ca in sym(a).terms.items():
        for mb, cb in sym(b).terms.items():
            m = tuple(sorted((*ma, *mb), key=_key))
            terms[m] = terms.get(m, 0) + ca * cb
    return _norm(Sym(terms))


def floordiv(a: Dim, b: Dim) -> Dim:
    """`a // b`; exact polynomial division when it divides, else an opaque FloorDiv atom."""
    if a is None or b is None or b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    sa, sb = sym(a), sym(b)
    if len(sb.terms) == 1:  # a monomial divisor: divide term by term when every term allows it
        ((mb, cb),) = sb.terms.items()
        out: dict[Monomial, int] = {}
        for ma, ca in sa.terms.items():
            rest = list(ma)
            try:
                for atom in mb:
                    rest.remove(atom)
            except ValueError:
                break
            if ca % cb:
                break
            out[tuple(rest)] = ca // cb
        else:
            return _norm(Sym(out))
    return Sym({(FloorDiv(sa, sb),): 1})


def ceildiv(a: Dim, b: Dim) -> Dim:
    """`ceil(a / b)` as `(a + b - 1) // b`."""
    return floordiv(add(a, sub(b, 1)), b)


def prod(dims: list[Dim] | tuple[Dim, ...]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


def evaluate(d: Dim, env: Mapping[str, int]) -> int | None:
    """The size of `d` for concrete dims `env`; None when unknown."""
    if d is None or isinstance(d, int):
        return d
    return d.evaluate(env)
