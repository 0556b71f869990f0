"""Op lists are data: one plain file per class, plus conditional rules; this module only reads them.

Users extend or trim them with a file in the same line format, split in sections:

    [deny]
    MyCustomNorm     numerically unstable in our tests
    [allow]
    -Conv            (a leading '-' removes an op from that list)
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from amp_convert import schema
from amp_convert.core.domains import op_key
from amp_convert.errors import OptionError

__all__ = [
    "CLASSES",
    "OpLists",
    "Rule",
    "apply_user_file",
    "apply_user_ops",
    "canonical_key",
    "load_builtin",
    "op_key",
    "unmatched_user_ops",
]

CLASSES = ("allow", "infer", "clear", "deny")


def canonical_key(text: str) -> str:
    """A user's op name in list spelling: 'ai.onnx:Conv' and ':Conv' are 'Conv'."""
    domain, sep, op = text.strip().rpartition(":")
    return op_key(domain, op) if sep else op


def unmatched_user_ops(
    user_ops: Iterable[tuple[str, Iterable[str]]], present: set[str]
) -> list[str]:
    """One warning per --fp32-ops/--fp16-ops name that matches no node of the model.

    `user_ops` pairs a flag with its names; `present` holds the model's ops in list spelling.
    A bare name that matches an op in another domain says which (the likely intent).
    """
    warnings = []
    for flag, ops in user_ops:
        for raw in ops:
            key = canonical_key(raw)
            if not key or key in present:
                continue
            domain, _, op = key.rpartition(":")
            others = sorted(k for k in present if k.rpartition(":")[2] == op)
            if others:
                why = f"no node of the model is {key}; ignored; did you mean {' or '.join(others)}?"
            elif not schema.is_known_op(op, domain):
                why = "no ONNX op (nor ONNX Runtime contrib op) of that name (misspelt?); ignored"
            else:
                why = f"no node of the model is {key}; ignored"
            warnings.append(f"{flag} {raw}: {why}")
    return warnings


@dataclass(frozen=True)
class Rule:
    """A conditional rule such as 'Pow with a constant exponent in [0, 1] is INFER'."""

    op: str
    subject: str  # input index as text, or "@attr"
    test: str
    values: tuple[str, ...]
    cls: str
    reason: str
    user: bool = False

    def matches(self, value: object) -> bool:
        if value is None:
            return False
        if self.test == "==":
            return str(value) == self.values[0]
        try:
            x = float(value)  # type: ignore[arg-type]
            bounds = [float(v) for v in self.values]
        except (TypeError, ValueError):
            return False
        if self.test == "between":
            return bounds[0] <= x <= bounds[1]
        ops = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
        return ops[self.test](x, bounds[0])


@dataclass
class OpLists:
    """Class and reason per op key, plus conditional rules."""

    entries: dict[str, tuple[str, str]] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    user_keys: set[str] = field(default_factory=set)
    #: op key -> "FILE:LINE" of its first mention in the user's op-list file (for messages)
    user_lines: dict[str, str] = field(default_factory=dict)

    def lookup(self, key: str) -> tuple[str, str] | None:
        return self.entries.get(key)

    def rules_for(self, key: str) -> list[Rule]:
        return [r for r in self.rules if r.op == key]

    def is_user(self, key: str) -> bool:
        return key in self.user_keys

    def add(self, cls: str, key: str, reason: str, user: bool = False) -> None:
        self.entries[key] = (cls, reason)
        if user:
            self.user_keys.add(key)

    def remove(self, cls: str, key: str) -> None:
        if self.entries.get(key, ("", ""))[0] == cls:
            del self.entries[key]

    def copy(self) -> OpLists:
        return OpLists(
            dict(self.entries), list(self.rules), set(self.user_keys), dict(self.user_lines)
        )


def _split_line(line: str) -> list[str]:
    return line.split("#", 1)[0].split() if not line.lstrip().startswith("#") else []


def _parse_entries(text: str, cls: str, where: str, lists: OpLists, user: bool = False) -> None:
    for n, raw in enumerate(text.splitlines(), 1):
        if not _split_line(raw):
            continue
        op, *rest = raw.strip().split(None, 1)  # op and reason apart by spaces or tabs
        reason = rest[0].strip() if rest else "listed"
        if op.startswith("-"):
            lists.remove(cls, op[1:])
        elif not (op.isascii() and op.replace(":", "").replace(".", "").replace("_", "").isalnum()):
            raise OptionError(f"{where}:{n}: not an op type: {op!r}")
        else:
            lists.add(cls, op, reason, user)


def _parse_rule(raw: str, where: str, user: bool = False) -> Rule:
    words = raw.split()
    try:
        op, subject, test = words[0], words[1], words[2]
        count = 2 if test == "between" else 1
        values = tuple(words[3 : 3 + count])
        cls = words[3 + count]
        reason = " ".join(words[4 + count :]) or "conditional rule"
    except IndexError:
        raise OptionError(f"{where}: incomplete rule: {raw.strip()!r}") from None
    if test not in ("<=", "<", ">=", ">", "==", "between") or len(values) != count:
        raise OptionError(f"{where}: unknown test {test!r} in rule {raw.strip()!r}")
    if cls not in CLASSES:
        raise OptionError(f"{where}: unknown class {cls!r} in rule {raw.strip()!r}")
    if not (subject.startswith("@") or (subject.isascii() and subject.isdigit())):
        raise OptionError(f"{where}: subject must be an input index or @attribute: {subject!r}")
    if user:  # the shipped rules are checked against the schemas by their tests, not per run
        _check_subject(op, subject, where, raw)
    if test == "==":  # compares text: any value
        return Rule(op, subject, test, values, cls, reason, user)
    try:
        bounds = [float(v) for v in values]
    except ValueError:
        raise OptionError(f"{where}: the bounds of a rule are numbers: {raw.strip()!r}") from None
    if any(math.isnan(b) for b in bounds) or (test == "between" and bounds[0] > bounds[1]):
        raise OptionError(f"{where}: nonsense bounds {' '.join(values)} in rule {raw.strip()!r}")
    return Rule(op, subject, test, values, cls, reason, user)


#: any opset: the newest schema of an op (the schema lookups take the newest at or below it)
_NEWEST = 1 << 30


def _check_subject(op: str, subject: str, where: str, raw: str) -> None:
    """A rule's input index within the op's inputs, its @attribute one the op declares.

    Ops no schema knows (custom ops) are taken on trust: nothing to check them against.
    """
    domain, _, name = op.rpartition(":")
    sig = schema.signature(name, domain, _NEWEST)
    if sig is None:
        return
    if subject.startswith("@"):
        if not schema.has_attribute(name, domain, _NEWEST, subject[1:]):
            raise OptionError(
                f"{where}: {op} has no attribute {subject[1:]!r}: rule {raw.strip()!r}"
            )
    elif sig.input_slot(int(subject)) is None:
        raise OptionError(
            f"{where}: {op} has inputs 0 to {len(sig.inputs) - 1}; subject {subject} is out of "
            f"range: rule {raw.strip()!r}"
        )


def load_builtin() -> OpLists:
    """The lists shipped with amp-convert (a fresh copy: callers may change it)."""
    return _builtin().copy()


@functools.lru_cache(maxsize=1)
def _builtin() -> OpLists:
    lists = OpLists()
    base = resources.files("amp_convert.op_lists")
    for cls in CLASSES:
        _parse_entries(base.joinpath(f"{cls}.txt").read_text(), cls, f"{cls}.txt", lists)
    text = base.joinpath("conditional.txt").read_text()
    for n, raw in enumerate(text.splitlines(), 1):
        if _split_line(raw):
            lists.rules.append(_parse_rule(raw.split("#", 1)[0], f"conditional.txt:{n}"))
    return lists


def apply_user_file(lists: OpLists, path: str | Path) -> OpLists:
    """Extend/trim `lists` with a user file of [allow]/[infer]/[clear]/[deny]/[rules] sections."""
    try:
        data = Path(path).read_bytes()
        text = data.decode("utf-8-sig")  # a BOM (Windows editors) is skipped
    except OSError as e:
        raise OptionError(f"cannot read op list file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        at = data.count(b"\n", 0, e.start) + 1
        raise OptionError(
            f"op list file {path} is not UTF-8 text: byte 0x{data[e.start]:02x} on line {at} "
            f"(offset {e.start})"
        ) from None
    section: str | None = None
    out = lists.copy()
    user_rules: list[Rule] = []
    classes: dict[str, tuple[str, int]] = {}  # op -> (section, line) of its first entry
    for n, raw in enumerate(text.splitlines(), 1):
        words = _split_line(raw)
        if not words:
            continue
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            if section not in (*CLASSES, "rules"):
                raise OptionError(f"{path}:{n}: unknown section [{section}]")
            continue
        if section is None:
            raise OptionError(
                f"{path}:{n}: entry before any [allow]/[infer]/[clear]/[deny] section"
            )
        where = f"{path}:{n}"
        if section == "rules":
            rule = _parse_rule(line, where, user=True)
            user_rules.append(rule)
            out.user_lines.setdefault(rule.op, where)
            continue
        op = line.split(None, 1)[0]
        if not op.startswith("-"):
            first = classes.setdefault(op, (section, n))
            if first[0] != section:
                raise OptionError(
                    f"{where}: {op} is in [{section}] here and in [{first[0]}] at line "
                    f"{first[1]}; an op belongs to one class"
                )
        out.user_lines.setdefault(op.lstrip("-"), where)
        _parse_entries(line, section, where, out, user=True)
    # the user's rules come before the built-in ones, in file order: the first match wins
    out.rules[:0] = user_rules
    return out


def apply_user_ops(lists: OpLists, cls: str, ops: Iterable[str], reason: str) -> OpLists:
    """Put each op of `ops` in class `cls` (the --fp32-ops / --fp16-ops options)."""
    out = lists.copy()
    for op in ops:
        key = canonical_key(op)
        if key:
            out.add(cls, key, reason, user=True)
    return out
