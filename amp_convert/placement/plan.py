"""The values the middle steps hand each other: node classes (classify) and the precision plan.

`classify` returns `Classes` (a frozen `ClassInfo` per node); `assign` reads them and returns a
`PrecisionPlan` (a frozen `Placement` per node); `rewrite` applies the plan. The plan answers the
three questions rewrite asks of every value: where it lives before casts (`home`), what each
reading slot needs (`need`), and what a graph interface keeps (`interface`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Protocol

import onnx_ir as ir

from amp_convert.core.precision import NodeClass, Precision, constant_tensor
from amp_convert.core.reasons import Reason
from amp_convert.core.steps import StepResult
from amp_convert.placement.boundaries import Boundaries
from amp_convert.reports.conversion import TensorNote

LOW, FP32, FREE, ANY = Precision.LOW, Precision.FP32, Precision.FREE, Precision.ANY


class LoweredAs(str, enum.Enum):
    """Other ops a LOW node runs as, because the target has no low kernel for the op itself."""

    MIN_MAX = "min_max"  # Clip(x, lo, hi) as Max(Min(x, hi), lo)


@dataclass(frozen=True)
class ClassInfo:
    """What the schema, the op lists and the target say of one node (classify's result)."""

    op_class: NodeClass
    reasons: tuple[Reason, ...]
    low_inputs: frozenset[int] = frozenset()  # slots that turn low with the node
    low_outputs: frozenset[int] = frozenset()
    any_inputs: frozenset[int] = frozenset()  # slots that accept any float type (Cast's input)
    user: bool = False  # the class came from the user (--fp32-ops, op list file, exclusions)
    #: low only between low neighbours: the kernel accumulates in FP32, casts around it buy nothing
    low_between_low: bool = False
    #: when LOW, rewrite runs the node as other ops the target has low kernels for
    lowered_as: LoweredAs | None = None

    @property
    def candidate(self) -> bool:
        """Whether the node could change precision at all."""
        return bool(self.low_inputs or self.low_outputs) and self.op_class not in (
            NodeClass.FIXED,
            NodeClass.NONE,
        )

    def pinned(self, reason: Reason) -> ClassInfo:
        """The node kept at its original precision whatever the level, for `reason` alone."""
        return dataclasses.replace(self, op_class=NodeClass.FIXED, reasons=(reason,))

    def noted(self, reason: Reason) -> ClassInfo:
        return dataclasses.replace(self, reasons=(*self.reasons, reason))


class Classes(Mapping[ir.Node, ClassInfo], StepResult):
    """classify's result (and what pin statistics and the QDQ groups hand on): a ClassInfo per
    node, read-only."""

    __slots__ = ("_by_node",)

    def __init__(self, by_node: Mapping[ir.Node, ClassInfo] | None = None) -> None:
        self._by_node = dict(by_node or {})

    def __getitem__(self, node: ir.Node) -> ClassInfo:
        return self._by_node[node]

    def __iter__(self) -> Iterator[ir.Node]:
        return iter(self._by_node)

    def __len__(self) -> int:
        return len(self._by_node)

    def summary(self) -> str:
        return f"{len(self)} nodes classified"


class Placed(Protocol):
    """A node's class and precision (a `Placement`, or assign's draft of one)."""

    @property
    def info(self) -> ClassInfo: ...

    @property
    def precision(self) -> Precision: ...


@dataclass(frozen=True)
class Placement:
    """One node's decision: its class (after hard limits), precision and every reason."""

    info: ClassInfo
    precision: Precision
    #: the class's reasons followed by what assign added (deny reach, placement, neighbours)
    reasons: tuple[Reason, ...]

    @property
    def op_class(self) -> NodeClass:
        return self.info.op_class


@dataclass(frozen=True)
class PrecisionPlan(StepResult):
    """Per-node precision for one model, plus what rewrite needs to apply it (assign's result)."""

    nodes: Mapping[ir.Node, Placed]
    main_graph: ir.Graph
    low: ir.DataType
    keep_io_types: bool
    #: names of scalar sentinels (e.g. float32 min as a mask fill) stored as +-65504
    saturate: frozenset[str] = frozenset()
    #: weights worth a line in the report (kept FP32 for range, saturated)
    tensor_notes: tuple[TensorNote, ...] = ()
    #: control-flow boundaries (If outputs, Loop/Scan carried and scanned values) and the
    #: indices of those placed LOW; the others keep their original FP32
    boundaries: Boundaries = Boundaries()
    low_boundaries: Set[int] = frozenset()
    #: main-graph inputs/outputs that are low even with keep_io_types (--low-io)
    low_io: frozenset[str] = frozenset()

    def summary(self) -> str:
        low = sum(1 for p in self.nodes.values() if p.precision == Precision.LOW)
        return f"PrecisionPlan: {low} of {len(self.nodes)} nodes low"

    def boundary(self, index: int | None) -> Precision | None:
        """A boundary's precision (None when ``index`` is None: no boundary)."""
        if index is None:
            return None
        return LOW if index in self.low_boundaries else FP32

    def placement(self, node: ir.Node) -> Placement | None:
        placed = self.nodes.get(node)
        return placed if isinstance(placed, Placement) else None

    def is_low(self, node: ir.Node | None) -> bool:
        placed = self.nodes.get(node) if node is not None else None
        return placed is not None and placed.precision == LOW

    def interface(self, value: ir.Value) -> Precision:
        """A graph input's or output's type.

        Main graph: low with --no-keep-io-types, or when --low-io names it. A subgraph input or
        output has its boundary's precision (FP32 where it is no eligible boundary's).
        """
        if value.graph is self.main_graph:
            low = not self.keep_io_types or (value.name or "") in self.low_io
            return LOW if low else FP32
        bounds = self.boundaries
        index = bounds.by_read.get(value) if value.is_graph_output() else None
        if index is None and value.is_graph_input():
            index = bounds.by_defined.get(value)
        found = self.boundary(index)
        return found if found is not None else FP32

    def home(self, value: ir.Value) -> Precision:
        """Where a float value lives before casts: LOW, FP32 or FREE (a constant)."""
        producer = value.producer()
        if producer is not None:
            if constant_tensor(value) is not None:
                return FREE
            across = self.boundary(self.boundaries.by_defined.get(value))
            if across is not None:  # an If/Loop/Scan output
                return across
            placed = self.nodes.get(producer)
            if (
                placed is not None
                and placed.precision == LOW
                and value.index() in placed.info.low_outputs
            ):
                return LOW
            return FP32
        if value.is_graph_input():
            return self.interface(value)
        if value.is_initializer():
            return FREE
        return FP32

    def need(self, node: ir.Node, index: int) -> Precision:
        """What an input slot needs: LOW, FP32 or ANY (Cast's input takes any float type)."""
        across = self.boundary(self.boundaries.by_slot.get((node, index)))
        if across is not None:  # a Loop/Scan input passed into the body
            return across
        placed = self.nodes.get(node)
        if placed is None:
            return FP32
        if index in placed.info.any_inputs:
            return ANY
        if placed.precision == LOW and index in placed.info.low_inputs:
            return LOW
        return FP32

    def needs(self, value: ir.Value) -> set[Precision]:
        """Everything the readers of `value` (and a graph output) need, ANY left out."""
        reqs = {self.need(use.node, use.idx) for use in value.uses()}
        if value.is_graph_output():
            reqs.add(self.interface(value))
        reqs.discard(ANY)
        return reqs
