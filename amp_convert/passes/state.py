"""State shared by the passes of one conversion: per-node facts, decisions and the report."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from amp_convert.op_lists import OpLists
from amp_convert.options import ConvertOptions
from amp_convert.report import ConversionReport

FLOAT = ir.DataType.FLOAT
LOW_TYPES = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


@dataclass
class NodeInfo:
    """What the schema and the op lists say of one node."""

    op_class: str  # allow / infer / clear / deny / fixed / none
    reason: str
    low_inputs: frozenset[int] = frozenset()  # slots that turn low with the node
    low_outputs: frozenset[int] = frozenset()
    any_inputs: frozenset[int] = frozenset()  # slots that accept any float type (Cast's input)
    precision: str = "fp32"  # "low" or "fp32" once assigned
    forced: bool = False  # decided by a hard rule; propagation must not flip it

    @property
    def candidate(self) -> bool:
        return bool(self.low_inputs or self.low_outputs) and self.op_class not in ("fixed", "none")


@dataclass
class ConversionState:
    """Everything the passes of one conversion share."""

    options: ConvertOptions
    lists: OpLists
    report: ConversionReport
    info: dict[ir.Node, NodeInfo] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    main_graph: ir.Graph | None = None
    # scalar sentinels (e.g. float32 min as a mask fill) stored as +-65504, each reported
    saturate: set[str] = field(default_factory=set)

    @property
    def low(self) -> ir.DataType:
        return self.options.low_dtype

    def is_low(self, node: ir.Node | None) -> bool:
        info = self.info.get(node) if node is not None else None
        return info is not None and info.precision == "low"

    def unique_name(self, base: str) -> str:
        """A value/node name unused anywhere in the model (subgraphs included)."""
        name, n = base, 0
        while name in self.names:
            n += 1
            name = f"{base}_{n}"
        self.names.add(name)
        return name


def is_float_tensor(value: ir.Value | None) -> bool:
    """A value of FP32 tensor type: the only kind the converter retypes."""
    if value is None:
        return False
    vtype = value.type
    if vtype is not None and not isinstance(vtype, ir.TensorType):
        return False
    return value.dtype == FLOAT


def constant_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    """The tensor behind an initializer (not a graph input) or a Constant node's `value`."""
    if value.is_initializer() and not value.is_graph_input():
        return value.const_value
    producer = value.producer()
    if (
        producer is not None
        and producer.op_type == "Constant"
        and producer.domain in ("", "ai.onnx")
    ):
        attr = producer.attributes.get("value")
        if attr is not None and attr.type == ir.AttributeType.TENSOR:
            return attr.value
    return None
