"""Pass 3: decide LOW or FP32 per node, by level, then settle INFER/CLEAR nodes where casts are saved.

- O1: ALLOW nodes are LOW; INFER/CLEAR nodes go LOW only where that needs fewer casts.
- O2: everything LOW except DENY and what DENY reaches forward through INFER/CLEAR (like TF's
  auto mixed precision); INFER/CLEAR go back to FP32 where that needs fewer casts.
- O3: every node the schemas allow is LOW; built-in DENY is ignored (user rules are not).
Hard limits win at every level: weights beyond the low type's range keep their readers FP32.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from amp_convert.options import Level
from amp_convert.passes.state import ConversionState, NodeInfo, constant_tensor, is_float_tensor
from amp_convert.report import TensorNote

FP16_MAX = 65504.0
_CHUNK = 1 << 22


def max_abs_finite(tensor: ir.TensorProtocol) -> float:
    """Largest finite |value|, read in chunks so a memory-mapped weight is never copied whole."""
    flat = np.asarray(tensor.numpy()).reshape(-1)
    best = 0.0
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK]
        finite = chunk[np.isfinite(chunk)]
        if finite.size:
            best = max(best, float(np.abs(finite).max()))
    return best


def value_home(value: ir.Value, state: ConversionState) -> str:
    """Where a float value lives before casts: 'low', 'fp32' or 'free' (a constant)."""
    producer = value.producer()
    if producer is not None:
        if constant_tensor(value) is not None:
            return "free"
        info = state.info.get(producer)
        index = value.index()
        if info is not None and info.precision == "low" and index in info.low_outputs:
            return "low"
        return "fp32"
    if value.is_graph_input():
        return "low" if (value.graph is state.main_graph and not state.options.keep_io_types) else "fp32"
    if value.is_initializer():
        return "free"
    return "fp32"


def use_requirement(node: ir.Node, index: int, state: ConversionState) -> str:
    """What an input slot needs: 'low', 'fp32' or 'any' (Cast's input takes any float type)."""
    info = state.info.get(node)
    if info is None:
        return "fp32"
    if index in info.any_inputs:
        return "any"
    if info.precision == "low" and index in info.low_inputs:
        return "low"
    return "fp32"


def output_requirement(value: ir.Value, state: ConversionState) -> str:
    """What a graph output needs: the interface type (main graph) or the original type (bodies)."""
    if value.graph is state.main_graph and not state.options.keep_io_types:
        return "low"
    return "fp32"


def requirements(value: ir.Value, state: ConversionState) -> set[str]:
    reqs = {use_requirement(use.node, use.idx, state) for use in value.uses()}
    if value.is_graph_output():
        reqs.add(output_requirement(value, state))
    reqs.discard("any")
    return reqs


def _casts_needed(node: ir.Node, info: NodeInfo, as_low: bool, state: ConversionState) -> int:
    have = "low" if as_low else "fp32"
    count = 0
    for i in info.low_inputs:
        value = node.inputs[i]
        if value is not None and is_float_tensor(value):
            home = value_home(value, state)
            count += home not in ("free", have)
    for i in info.low_outputs:
        value = node.outputs[i]
        if is_float_tensor(value):
            count += any(r != have for r in requirements(value, state))
    return count


class AssignPrecisionPass(ir.passes.InPlacePass):
    """Set NodeInfo.precision for every node."""

    def __init__(self, state: ConversionState) -> None:
        super().__init__()
        self.state = state

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        state = self.state
        state.main_graph = model.graph
        nodes = list(model.graph.all_nodes())
        self._range_limits(nodes)
        level = state.options.level
        for node in nodes:
            info = state.info[node]
            if not info.candidate:
                info.precision, info.forced = "fp32", True
            elif info.op_class == "deny" and (level != Level.O3 or "user" in info.reason):
                info.precision, info.forced = "fp32", True
            elif level == Level.O3 or info.op_class == "allow":
                info.precision, info.forced = "low", True
            else:
                info.precision = "low" if level == Level.O2 else "fp32"
        if level in (Level.O1, Level.O2):
            self._deny_reach(nodes)
            if level == Level.O1:
                self._sandwich(nodes)
            self._settle(nodes)
        return ir.passes.PassResult(model, modified=False)

    def _range_limits(self, nodes: list[ir.Node]) -> None:
        """Readers of weights that do not fit FP16 keep FP32: never clamp silently."""
        state = self.state
        if state.low != ir.DataType.FLOAT16:
            return  # bfloat16 has float32's range
        checked: dict[int, float] = {}
        for node in nodes:
            info = state.info[node]
            if not info.candidate:
                continue
            for i in sorted(info.low_inputs):
                value = node.inputs[i]
                tensor = constant_tensor(value) if value is not None else None
                if tensor is None or not is_float_tensor(value):
                    continue
                if id(value) not in checked:
                    checked[id(value)] = max_abs_finite(tensor)
                    if checked[id(value)] > FP16_MAX:
                        state.out_of_range[value.name or ""] = checked[id(value)]
                        state.report.tensors.append(
                            TensorNote(
                                value.name or "",
                                "kept FP32",
                                f"max |value| {checked[id(value)]:.4g} > {FP16_MAX:g}; "
                                "its readers stay FP32 instead of clamping",
                            )
                        )
                if checked[id(value)] > FP16_MAX:
                    info.op_class = "fixed"
                    info.reason = f"range: input {value.name!r} exceeds FP16 (never clamped)"
                    break

    def _deny_reach(self, nodes: list[ir.Node]) -> None:
        """DENY spreads forward through INFER/CLEAR nodes (their inputs are unsafe values)."""
        state = self.state
        stack = [n for n in nodes if state.info[n].op_class == "deny"]
        while stack:
            node = stack.pop()
            for out in node.outputs:
                if not is_float_tensor(out):
                    continue
                for use in out.uses():
                    info = state.info.get(use.node)
                    if info is None or info.forced or not info.candidate:
                        continue
                    if info.op_class in ("infer", "clear") and use.idx in info.low_inputs:
                        info.precision, info.forced = "fp32", True
                        info.reason = f"follows deny: reads {out.name!r} from {node.op_type}"
                        stack.append(use.node)

    def _movable(self, node: ir.Node) -> bool:
        info = self.state.info.get(node)
        return info is not None and not info.forced and info.op_class in ("infer", "clear")

    def _sandwich(self, nodes: list[ir.Node]) -> None:
        """O1: INFER/CLEAR chains with ALLOW nodes on both sides go low (TF AMP's rule).

        A chain such as MatMul → Add(bias) → Reshape → Transpose → MatMul costs casts at both ends
        in FP32, but no single node of it saves a cast by flipping alone.
        """
        state = self.state
        allow = [n for n in nodes if state.info[n].forced and state.info[n].precision == "low"]
        downstream: set[ir.Node] = set()
        stack = list(allow)
        while stack:
            node = stack.pop()
            for i in state.info[node].low_outputs:
                for use in node.outputs[i].uses():
                    nxt = use.node
                    if nxt not in downstream and self._movable(nxt):
                        if use.idx in state.info[nxt].low_inputs:
                            downstream.add(nxt)
                            stack.append(nxt)
        upstream: set[ir.Node] = set()
        stack = list(allow)
        while stack:
            node = stack.pop()
            for i in state.info[node].low_inputs:
                value = node.inputs[i]
                prev = value.producer() if value is not None else None
                if prev is None or prev in upstream or not self._movable(prev):
                    continue
                if value.index() in state.info[prev].low_outputs:
                    upstream.add(prev)
                    stack.append(prev)
        for node in downstream & upstream:
            info = state.info[node]
            info.precision = "low"
            info.reason += "; between ALLOW nodes"

    def _settle(self, nodes: list[ir.Node]) -> None:
        """Flip INFER/CLEAR nodes whose other precision needs strictly fewer casts."""
        state = self.state
        movable = [
            n
            for n in nodes
            if not state.info[n].forced and state.info[n].op_class in ("infer", "clear")
        ]
        for _ in range(10):
            changed = False
            for node in movable:
                info = state.info[node]
                as_low = _casts_needed(node, info, True, state)
                as_fp32 = _casts_needed(node, info, False, state)
                if info.precision == "low" and as_fp32 < as_low:
                    info.precision, changed = "fp32", True
                    info.reason += "; FP32 needs fewer casts here"
                elif info.precision == "fp32" and as_low < as_fp32:
                    info.precision, changed = "low", True
                    info.reason += "; low precision needs fewer casts here"
            if not changed:
                break
