"""The data the passes hand each other: per-node facts (classify) and the precision plan (assign).

Classify produces `NodeInfo` per node; assign turns them into a `PrecisionPlan`; rewrite consumes
the plan. The plan answers the three questions rewrite asks of every value: where it lives before
casts (`home`), what each reading slot needs (`need`), and what a graph interface keeps
(`interface`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from amp_convert.precision import NodeClass, Precision, constant_tensor
from amp_convert.report import TensorNote

LOW, FP32, FREE, ANY = Precision.LOW, Precision.FP32, Precision.FREE, Precision.ANY


@dataclass
class NodeInfo:
    """What the schema and the op lists say of one node, and (after assign) its precision."""

    op_class: NodeClass
    reason: str
    low_inputs: frozenset[int] = frozenset()  # slots that turn low with the node
    low_outputs: frozenset[int] = frozenset()
    any_inputs: frozenset[int] = frozenset()  # slots that accept any float type (Cast's input)
    user: bool = False  # the class came from the user (--fp32-ops, op list file, exclusions)
    #: low only between low neighbours: the kernel accumulates in FP32, casts around it buy nothing
    low_between_low: bool = False
    #: when LOW, rewrite runs the node as other ops the target has low kernels for ("minmax")
    rewrite_as: str = ""
    precision: Precision = FP32
    forced: bool = False  # decided by a hard rule; placement must not flip it

    @property
    def candidate(self) -> bool:
        return bool(self.low_inputs or self.low_outputs) and self.op_class not in (
            NodeClass.FIXED,
            NodeClass.NONE,
        )

    def pin(self, op_class: NodeClass, reason: str) -> None:
        """Keep the node at its original precision, whatever the level."""
        self.op_class, self.reason = op_class, reason


Classes = dict[ir.Node, NodeInfo]


@dataclass
class PrecisionPlan:
    """Per-node precision for one model, plus what rewrite needs to apply it."""

    info: Classes
    main_graph: ir.Graph
    low: ir.DataType
    keep_io_types: bool
    #: names of scalar sentinels (e.g. float32 min as a mask fill) stored as +-65504
    saturate: set[str] = field(default_factory=set)
    #: weights worth a line in the report (kept FP32 for range, saturated)
    tensor_notes: list[TensorNote] = field(default_factory=list)

    def is_low(self, node: ir.Node | None) -> bool:
        info = self.info.get(node) if node is not None else None
        return info is not None and info.precision == LOW

    def interface(self, value: ir.Value) -> Precision:
        """A graph input's or output's type: low only at the main graph with --no-keep-io-types.

        Subgraph inputs/outputs keep their original type: the If/Loop/Scan boundary does not change.
        """
        if value.graph is self.main_graph and not self.keep_io_types:
            return LOW
        return FP32

    def home(self, value: ir.Value) -> Precision:
        """Where a float value lives before casts: LOW, FP32 or FREE (a constant)."""
        producer = value.producer()
        if producer is not None:
            if constant_tensor(value) is not None:
                return FREE
            info = self.info.get(producer)
            if info is not None and info.precision == LOW and value.index() in info.low_outputs:
                return LOW
            return FP32
        if value.is_graph_input():
            return self.interface(value)
        if value.is_initializer():
            return FREE
        return FP32

    def need(self, node: ir.Node, index: int) -> Precision:
        """What an input slot needs: LOW, FP32 or ANY (Cast's input takes any float type)."""
        info = self.info.get(node)
        if info is None:
            return FP32
        if index in info.any_inputs:
            return ANY
        if info.precision == LOW and index in info.low_inputs:
            return LOW
        return FP32

    def needs(self, value: ir.Value) -> set[Precision]:
        """Everything the readers of `value` (and a graph output) need, ANY left out."""
        reqs = {self.need(use.node, use.idx) for use in value.uses()}
        if value.is_graph_output():
            reqs.add(self.interface(value))
        reqs.discard(ANY)
        return reqs
