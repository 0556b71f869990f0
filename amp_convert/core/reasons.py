"""Why a node got its class and precision: structured values, rendered to text only in reports.

A node's decision carries a tuple of `Reason`s: the first says where its class came from (op list,
rule, schema, target, user), the rest are what later steps added (range limit, deny reach,
placement). `kind` is what code tests on; `source` names who decided; `detail` is the rest.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class ReasonKind(str, enum.Enum):
    CONTROL_FLOW = "control_flow"  # If/Loop/Scan: the boundary keeps its types
    CONSTANT = "constant"  # stored in the precision its readers need
    CUSTOM_OP = "custom_op"  # no schema for the op
    UNKNOWN_SLOT = "unknown_slot"  # an input/output the op's schema has no formal for
    NON_TENSOR = "non_tensor"  # sequence / optional types
    NO_FLOAT = "no_float"  # no float data path
    SCHEMA = "schema"  # the schema excludes the low type, or a type is unknown
    BOUNDARY_CAST = "boundary_cast"  # a widening Cast out of a low value
    USER = "user"  # --exclude-nodes, --fp32-ops/--fp16-ops, a user list file
    RULE = "rule"  # a conditional rule of the op lists
    LIST = "list"  # the op's entry in a built-in op list
    UNLISTED = "unlisted"  # in no list: follows its neighbours
    RUNTIME_SAFE = "runtime_safe"  # deny-listed, but the runtime handles the danger
    TARGET = "target"  # the target has no kernel in the low types
    LOWERED_AS = "lowered_as"  # runs as other ops when low
    RANGE = "range"  # a weight beyond the low type's range
    DENY_REACH = "deny_reach"  # reads a value a DENY node produced
    NEIGHBOUR = "neighbour"  # low only between low neighbours, and one is FP32
    PLACEMENT = "placement"  # the min-cut moved the node
    QDQ = "qdq"  # next to an FP32 Q/DQ: a Cast would split the DQ -> op -> Q group
    NORM_STATISTICS = "norm_statistics"  # statistics of a hand-written norm: FP32 (stash_type=1)
    BOUNDED = "bounded"  # deny-listed, but its proven bound fits the low type (op_lists/bounds)


@dataclass(frozen=True)
class Reason:
    """One reason: `kind` for code, `source` (who decided) and `detail` for people."""

    kind: ReasonKind
    source: str
    detail: str

    def text(self) -> str:
        return f"{self.source}: {self.detail}" if self.source else self.detail


def render(reasons: Iterable[Reason]) -> str:
    """The reasons as the one line a report shows ("allow list: ...; low precision moves ...")."""
    return "; ".join(r.text() for r in reasons)
