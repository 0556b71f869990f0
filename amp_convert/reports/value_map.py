"""The value map: where each value and node of the original graph went in the converted one.

Why: a converted graph is not the original with other types. A BatchNormalization folded into
its Conv leaves the Conv's output name carrying BN(conv(x)); a dropped Cast's readers read its
input; a graph output keeps its name on a new Cast while the value that computes it is renamed.
Comparing the two graphs value by value by name compares different things, or asks ONNX Runtime
for values that no longer exist. So the conversion steps record what they do to values
(``Carried``, ``Folded``, ``NodeCarried``, ``NodeFolded``, ``BehindCast``: object-level records,
no names), and ``build`` resolves them once, at the end, into a ``ValueMap`` keyed by the
original's names: ``--auto``, ``validate --html`` and the HTML page read it, and nothing looks a
value up by name across the two graphs.

The map travels inside the converted model (metadata ``amp_convert.value_map``, only the entries
that are not "kept under the same name"), so ``validate --html`` finds it in a file converted by
amp-convert; for a model converted elsewhere ``common_names`` is the stated fallback.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir

from amp_convert.core import walk
from amp_convert.core.precision import Precision

METADATA_KEY = "amp_convert.value_map"
MAP_VERSION = 1
#: metadata key of {node: why it is FP32} (the conversion report's reasons, for the pages)
REASONS_KEY = "amp_convert.fp32_reasons"


class Fate(str, enum.Enum):
    """What became of an original value (or node) in the result."""

    KEPT = "kept"  # the same value under the same name (its element type may have changed)
    RENAMED = "renamed"  # the same value under another name
    REPLACED = "replaced"  # another value (node) now carries the same data (work)
    FOLDED = "folded"  # not computed on its own any more: merged into ``into``
    REMOVED = "removed"  # gone, with nothing that carries it

    def __str__(self) -> str:
        return self.value


# -- records the steps produce (object identity, not names) ------------------------------------
@dataclass(frozen=True)
class Carried:
    """From this step on, ``new`` carries ``old``'s data (``old`` leaves the graph or changes)."""

    old: ir.Value
    new: ir.Value
    why: str


@dataclass(frozen=True)
class Folded:
    """``value`` is computed no more on its own: its data was merged into ``into``."""

    value: ir.Value
    into: str
    why: str


@dataclass(frozen=True)
class BehindCast:
    """``value`` (a graph output) is now read through ``cast``, which took its name."""

    value: ir.Value
    cast: ir.Value


@dataclass(frozen=True)
class NodeCarried:
    """``new`` does ``old``'s work (``old`` was replaced, e.g. a Clip by Min/Max)."""

    old: ir.Node
    new: ir.Node
    why: str


@dataclass(frozen=True)
class NodeFolded:
    """``node`` was removed and its work merged into ``into`` (a BatchNormalization folded)."""

    node: ir.Node
    into: str
    why: str


ValueRecord = Carried | Folded | BehindCast | NodeCarried | NodeFolded


# -- the map -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ValueFate:
    """One original value: the result's value that carries it (``carrier``), or why none does."""

    name: str
    fate: Fate
    carrier: str | None = None
    #: element type of the carrier in the result ("FLOAT16", "FLOAT"...); None when unknown
    dtype: str | None = None
    #: FOLDED: the node or initializer that absorbed it
    into: str = ""
    #: a graph output read through a Cast that took the original name
    via_cast: str = ""
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fate": self.fate.value}
        for key in ("carrier", "dtype", "into", "via_cast", "why"):
            value = getattr(self, key)
            if value:
                out[key] = value
        return out


@dataclass(frozen=True)
class NodeFate:
    """One original node: its precision in the result, or what became of it."""

    name: str
    op_type: str
    fate: Fate
    #: LOW or FP32 for a node with a float data path that is still there; None otherwise
    precision: Precision | None = None
    #: REPLACED: the node doing its work; FOLDED: the node that absorbed it
    into: str = ""
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op_type": self.op_type, "fate": self.fate.value}
        if self.precision is not None:
            out["precision"] = self.precision.value
        if self.into:
            out["into"] = self.into
        if self.why:
            out["why"] = self.why
        return out


@dataclass(frozen=True)
class ValueMap:
    """Every value and node of the original graph, keyed by its original name.

    ``complete`` is False for the fallback built from names alone (``common_names``): there a
    value the conversion folded may look present, and ``note`` says so.
    """

    values: Mapping[str, ValueFate] = field(default_factory=dict)
    nodes: Mapping[str, NodeFate] = field(default_factory=dict)
    complete: bool = True
    note: str = ""

    def fate(self, name: str) -> ValueFate:
        """The fate of original value ``name``; an unknown name is REMOVED."""
        found = self.values.get(name)
        return found if found is not None else ValueFate(name, Fate.REMOVED, why="not mapped")

    def carrier(self, name: str) -> str | None:
        """The result's name for the value that carries original value ``name``, or None."""
        return self.fate(name).carrier

    def precision(self, node: str) -> Precision | None:
        """LOW/FP32 of an original node in the result (None: no float path, folded, removed)."""
        found = self.nodes.get(node)
        return found.precision if found is not None else None

    def with_fate(self, *fates: Fate) -> list[ValueFate]:
        return [v for v in self.values.values() if v.fate in fates]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.values.values():
            out[v.fate.value] = out.get(v.fate.value, 0) + 1
        return out

    # -- serialisation ---------------------------------------------------------------------------
    def to_dict(self, *, changed_only: bool = False) -> dict[str, Any]:
        """JSON-ready; ``changed_only`` leaves out values kept under their name, nodes kept."""
        values = {
            k: v.to_dict()
            for k, v in self.values.items()
            if not changed_only or v.fate != Fate.KEPT
        }
        nodes = {
            k: n.to_dict() for k, n in self.nodes.items() if not changed_only or n.fate != Fate.KEPT
        }
        return {
            "version": MAP_VERSION,
            "complete": self.complete,
            "changed_only": changed_only,
            "counts": self.counts(),
            "values": values,
            "nodes": nodes,
            **({"note": self.note} if self.note else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], result_names: Iterable[str] = ()) -> ValueMap:
        """Read ``to_dict``'s form. With ``changed_only``, each of ``result_names`` (the values of
        the converted graph) not listed is an original value kept under its own name.

        The map comes from a file anyone may have edited: every field is checked for its type
        and every name for being text (valid UTF-8); anything else raises ``ValueError``.
        """
        if not isinstance(data, Mapping):
            raise ValueError("not an object")
        values: dict[str, ValueFate] = {}
        for name, d in _entries(data, "values"):
            values[name] = ValueFate(
                name,
                _fate(d),
                _text(d, "carrier", None),
                _text(d, "dtype", None),
                _text(d, "into"),
                _text(d, "via_cast"),
                _text(d, "why"),
            )
        if _flag(data, "changed_only", False):
            carried = {v.carrier for v in values.values()}
            for name in result_names:
                if name not in values and name not in carried:
                    values[name] = ValueFate(name, Fate.KEPT, name)
        nodes = {}
        for name, d in _entries(data, "nodes"):
            precision = _text(d, "precision", None)
            nodes[name] = NodeFate(
                name,
                _text(d, "op_type"),
                _fate(d),
                Precision(precision) if precision else None,
                _text(d, "into"),
                _text(d, "why"),
            )
        return cls(values, nodes, _flag(data, "complete", True), _text(data, "note"))

    def to_metadata(self) -> str:
        """The compact JSON stored in the converted model's metadata."""
        return json.dumps(self.to_dict(changed_only=True), separators=(",", ":"), sort_keys=True)

    @classmethod
    def read_metadata(
        cls, metadata: Mapping[str, str], result_names: Iterable[str]
    ) -> tuple[ValueMap | None, str]:
        """(the map, "") or (None, why it is not used: "" when the model has none)."""
        text = metadata.get(METADATA_KEY)
        if not text:
            return None, ""
        try:
            data = json.loads(text)
            if not isinstance(data, Mapping) or data.get("version") != MAP_VERSION:
                return None, "its value map is of an unknown version"
            return cls.from_dict(data, result_names), ""
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            return None, f"its value map is malformed ({type(e).__name__})"

    @classmethod
    def common_names(cls, original: Iterable[str], result: Iterable[str]) -> ValueMap:
        """The fallback without the converter's map: a value carries an original value when it
        has the same name. Folded values may then look present with other data."""
        present = set(result)
        values = {
            name: ValueFate(name, Fate.KEPT, name)
            if name in present
            else ValueFate(name, Fate.REMOVED, why="no value of this name in the result")
            for name in original
        }
        note = (
            "the converted model carries no value map (not converted by amp-convert, or edited "
            "since): values are matched by name, so a value the conversion folded (e.g. a "
            "BatchNormalization merged into its Conv) may be compared with different data"
        )
        return cls(values, {}, complete=False, note=note)


def _is_text(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")  # a lone surrogate (JSON "\\ud800") is not text
    except UnicodeEncodeError:
        return False
    return True


def _entries(data: Mapping[str, Any], key: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    table = data.get(key)
    if table is None:
        return
    if not isinstance(table, Mapping):
        raise ValueError(f"{key}: not an object")
    for name, entry in table.items():
        if not _is_text(name) or not isinstance(entry, Mapping):
            raise ValueError(f"{key}: a bad entry")
        yield name, entry


def _text(d: Mapping[str, Any], key: str, default: str | None = "") -> Any:
    value = d.get(key)
    if value is None or (value == "" and default is None):
        return default
    if not _is_text(value):
        raise ValueError(f"{key}: not text")
    return value


def _flag(d: Mapping[str, Any], key: str, default: bool) -> bool:
    value = d.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{key}: not true or false")
    return value


def _fate(d: Mapping[str, Any]) -> Fate:
    return Fate(_text(d, "fate"))  # ValueError for an unknown fate


def reasons_to_metadata(reasons: Mapping[str, str]) -> str:
    """{node: why it stays FP32} as the compact JSON stored next to the map."""
    return json.dumps(dict(reasons), separators=(",", ":"), sort_keys=True)


def read_reasons(metadata: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """({node: why FP32}, "") from a converted model's metadata, or ({}, why it is not used):
    like the map, untrusted text, checked entry by entry."""
    text = metadata.get(REASONS_KEY)
    if not text:
        return {}, ""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        return {}, f"its FP32 reasons are malformed ({type(e).__name__})"
    if not isinstance(data, Mapping) or not all(
        _is_text(k) and _is_text(v) for k, v in data.items()
    ):
        return {}, "its FP32 reasons are malformed (not text)"
    return dict(data), ""


# -- building the map from the steps' records -----------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """The original graph's values and nodes, taken before the first step changes anything."""

    values: Mapping[str, ir.Value]
    nodes: Mapping[str, ir.Node]

    @classmethod
    def take(cls, model: ir.Model) -> Snapshot:
        values: dict[str, ir.Value] = {}
        for value in _values(model):
            if value.name and value.name not in values:
                values[value.name] = value
        nodes = {node_name(node, i): node for i, node in enumerate(walk.all_nodes(model.graph))}
        return cls(values, nodes)


def node_name(node: ir.Node, index: int) -> str:
    """A node's name in reports and maps: its own, or op type and position when it has none."""
    return node.name or f"{node.op_type}_{index}"


def _values(model: ir.Model) -> Iterator[ir.Value]:
    for graph in walk.graphs(model):
        yield from graph.inputs
        yield from graph.initializers.values()
        for node in graph:
            yield from (v for v in node.outputs if v is not None)


def build(
    snapshot: Snapshot,
    records: Iterable[ValueRecord],
    model: ir.Model,
    precision: Callable[[ir.Node], Precision | None],
) -> ValueMap:
    """Resolve the steps' records against the converted ``model`` (chains followed to the end).

    ``precision`` gives a node of the result its LOW/FP32 (None: no float data path).
    """
    carried: dict[int, tuple[ir.Value, str]] = {}
    folded: dict[int, Folded] = {}
    casts: dict[int, ir.Value] = {}
    node_carried: dict[int, tuple[ir.Node, str]] = {}
    node_folded: dict[int, NodeFolded] = {}
    for r in records:
        if isinstance(r, Carried):
            carried[id(r.old)] = (r.new, r.why)
        elif isinstance(r, Folded):
            folded[id(r.value)] = r
        elif isinstance(r, BehindCast):
            casts[id(r.value)] = r.cast
        elif isinstance(r, NodeCarried):
            node_carried[id(r.old)] = (r.new, r.why)
        else:
            node_folded[id(r.node)] = r
    live = {id(v) for v in _values(model)}
    values = {}
    for name, value in snapshot.values.items():
        values[name] = _value_fate(name, value, carried, folded, casts, live)
    nodes = {}
    for name, node in snapshot.nodes.items():
        nodes[name] = _node_fate(name, node, node_carried, node_folded, precision)
    return ValueMap(values, nodes)


def _value_fate(
    name: str,
    value: ir.Value,
    carried: Mapping[int, tuple[ir.Value, str]],
    folded: Mapping[int, Folded],
    casts: Mapping[int, ir.Value],
    live: set[int],
) -> ValueFate:
    if id(value) in folded:  # its own data is gone (the object may carry another value now)
        f = folded[id(value)]
        return ValueFate(name, Fate.FOLDED, into=f.into, why=f.why)
    current, whys, seen = value, [], {id(value)}
    while id(current) in carried:
        current, why = carried[id(current)]
        whys.append(why)
        if id(current) in seen:  # a cycle would be a recording bug: stop where we are
            break
        seen.add(id(current))
    if id(current) not in live:
        return ValueFate(name, Fate.REMOVED, why="; ".join(whys) or "no longer in the graph")
    if current is not value:
        fate = Fate.REPLACED
    else:
        fate = Fate.KEPT if current.name == name else Fate.RENAMED
    cast = casts.get(id(current))
    dtype = current.dtype.name if current.dtype is not None else None
    return ValueFate(
        name,
        fate,
        current.name,
        dtype,
        via_cast=cast.name or "" if cast is not None else "",
        why="; ".join(whys),
    )


def _node_fate(
    name: str,
    node: ir.Node,
    carried: Mapping[int, tuple[ir.Node, str]],
    folded: Mapping[int, NodeFolded],
    precision: Callable[[ir.Node], Precision | None],
) -> NodeFate:
    if id(node) in folded:
        f = folded[id(node)]
        return NodeFate(name, node.op_type, Fate.FOLDED, into=f.into, why=f.why)
    current, why = node, ""
    while id(current) in carried:
        current, why = carried[id(current)]
    if current.graph is None:
        return NodeFate(name, node.op_type, Fate.REMOVED, why=why or "no longer in the graph")
    fate = Fate.KEPT if current is node else Fate.REPLACED
    into = "" if current is node else (current.name or "")
    return NodeFate(name, node.op_type, fate, precision(current), into, why)
