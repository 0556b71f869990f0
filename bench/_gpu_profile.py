"""Where ONNX Runtime placed each node, read from its profile (``SessionOptions.enable_profiling``).

ORT assigns a node to the CPU when the CUDA provider has no kernel for it in its types (FP16
BatchNormalization with FP32 statistics, FP16 Clip below opset 12), and pays a device→host→device
copy for it on every inference: the Memcpy nodes it inserts. The profile is the ground truth for
both, on the graph ORT actually runs (after its fusions), so this reads it rather than guessing
from the model. Each node's ``*_kernel_time`` event carries ``op_name``, ``provider`` and the types
of its inputs and outputs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CPU_EP = "CPUExecutionProvider"
FLOAT_TYPES = frozenset({"float", "float16", "bfloat16", "double"})
_KERNEL_SUFFIX = "_kernel_time"


@dataclass
class Placement:
    """Node counts of one profiled run: per provider, CPU-placed op types, Memcpy nodes."""

    nodes: int = 0
    by_provider: dict[str, int] = field(default_factory=dict)
    #: op type -> count of the nodes ORT ran on the CPU provider
    cpu_ops: dict[str, int] = field(default_factory=dict)
    #: CPU-placed nodes that read or write float tensors (the costly ones; shape math is not)
    cpu_float_nodes: int = 0
    memcpy: int = 0

    @property
    def cpu_nodes(self) -> int:
        return self.by_provider.get(CPU_EP, 0)

    def cpu_ops_text(self) -> str:
        """``BatchNormalization×53, Cast×106`` (most frequent first), or "" when none."""
        ops = sorted(self.cpu_ops.items(), key=lambda kv: (-kv[1], kv[0]))
        return ", ".join(f"{op}×{n}" for op, n in ops)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "by_provider": dict(sorted(self.by_provider.items())),
            "cpu_nodes": self.cpu_nodes,
            "cpu_float_nodes": self.cpu_float_nodes,
            "cpu_ops": dict(sorted(self.cpu_ops.items())),
            "memcpy": self.memcpy,
        }


def _types(entries: Any) -> set[str]:
    """Element types named in an ``input_type_shape`` / ``output_type_shape`` list."""
    out: set[str] = set()
    for entry in entries or []:
        if isinstance(entry, dict):
            out.update(entry)
    return out


def placement_from_events(events: list[dict[str, Any]]) -> Placement:
    """Count the node events of ONE profiled run (every node appears once per run)."""
    by_provider: Counter[str] = Counter()
    cpu_ops: Counter[str] = Counter()
    cpu_float = memcpy = 0
    for ev in events:
        if ev.get("cat") != "Node" or not str(ev.get("name", "")).endswith(_KERNEL_SUFFIX):
            continue
        args = ev.get("args") or {}
        op = str(args.get("op_name", "?"))
        provider = str(args.get("provider", "?"))
        by_provider[provider] += 1
        if op.startswith("Memcpy"):
            memcpy += 1
        if provider == CPU_EP:
            cpu_ops[op] += 1
            types = _types(args.get("input_type_shape")) | _types(args.get("output_type_shape"))
            if types & FLOAT_TYPES:
                cpu_float += 1
    return Placement(
        nodes=sum(by_provider.values()),
        by_provider=dict(by_provider),
        cpu_ops=dict(cpu_ops),
        cpu_float_nodes=cpu_float,
        memcpy=memcpy,
    )


def read_profile(path: str | Path) -> Placement:
    """Parse the JSON file ``InferenceSession.end_profiling()`` wrote (a list of trace events)."""
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    if isinstance(events, dict):  # Chrome trace format also allows {"traceEvents": [...]}
        events = events.get("traceEvents", [])
    return placement_from_events(events)
