"""Pass 3: decide LOW or FP32 per node by level, then place INFER/CLEAR nodes for the fewest casts.

- O1: ALLOW nodes are LOW; INFER/CLEAR nodes go LOW only where that needs fewer casts.
- O2: everything LOW except DENY and what DENY reaches forward through INFER/CLEAR (like TF's
  auto mixed precision); INFER/CLEAR go back to FP32 where that needs fewer casts.
- O3: every node the schemas allow is LOW; built-in DENY is ignored (user rules are not).
Hard limits win at every level: weights beyond the low type's range keep their readers FP32.
"""

from __future__ import annotations

import contextlib

import numpy as np
import onnx_ir as ir

from amp_convert.options import Level
from amp_convert.passes.mincut import INF, FlowNetwork
from amp_convert.passes.state import ConversionState, constant_tensor, is_float_tensor
from amp_convert.report import TensorNote

FP16_MAX = 65504.0
SENTINEL = 1e9  # a scalar constant this large is a "minus infinity" fill, not data
_CHUNK = 1 << 22


def max_abs_finite(tensor: ir.TensorProtocol) -> float:
    """Largest finite |value|, read in chunks so a memory-mapped weight is never copied whole.

    min/max per chunk need no temporary; only a chunk holding NaN/Inf is masked. A memory-mapped
    tensor is released afterwards so its pages do not stay resident.
    """
    best = _max_abs(np.asarray(tensor.numpy()).reshape(-1))
    release(tensor)
    return best


def _max_abs(flat: np.ndarray) -> float:
    best = 0.0
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK]
        lo, hi = float(chunk.min()), float(chunk.max())
        if not (np.isfinite(lo) and np.isfinite(hi)):
            finite = chunk[np.isfinite(chunk)]
            if not finite.size:
                continue
            lo, hi = float(finite.min()), float(finite.max())
        best = max(best, abs(lo), abs(hi))
    return best


def release(tensor: ir.TensorProtocol) -> None:
    """Drop the memory map of an external tensor (it is mapped again if read again)."""
    if isinstance(tensor, ir.ExternalTensor):
        # someone may still hold a view: then it stays mapped, which is only slower
        with contextlib.suppress(BufferError):
            tensor.release()


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
        return interface_precision(value, state)
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


def interface_precision(value: ir.Value, state: ConversionState) -> str:
    """A graph input's or output's type: low only at the main graph with --no-keep-io-types.

    Subgraph inputs/outputs keep their original type: the If/Loop/Scan boundary does not change.
    """
    if value.graph is state.main_graph and not state.options.keep_io_types:
        return "low"
    return "fp32"


def requirements(value: ir.Value, state: ConversionState) -> set[str]:
    reqs = {use_requirement(use.node, use.idx, state) for use in value.uses()}
    if value.is_graph_output():
        reqs.add(interface_precision(value, state))
    reqs.discard("any")
    return reqs


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
            if (
                not info.candidate
                or info.op_class == "deny"
                and (level != Level.O3 or "user" in info.reason)
            ):
                info.precision, info.forced = "fp32", True
            elif level == Level.O3 or info.op_class == "allow":
                info.precision, info.forced = "low", True
            else:
                info.precision = "low" if level == Level.O2 else "fp32"
        if level in (Level.O1, Level.O2):
            self._deny_reach(nodes)
            self._min_cut(nodes, prefer_low=level == Level.O2)
        return ir.passes.PassResult(model, modified=False)

    def _range_limits(self, nodes: list[ir.Node]) -> None:
        """Readers of weights that do not fit FP16 keep FP32: never clamp silently.

        One exception, always reported: a scalar constant of magnitude >= 1e9 is a sentinel
        ("minus infinity" mask fills such as float32's min, -1e9), not a learned value; it is
        saturated to +-65504, which is still far beyond any activation it is compared or added to.
        """
        state = self.state
        if state.low != ir.DataType.FLOAT16:
            return  # bfloat16 has float32's range
        checked: dict[int, bool] = {}
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
                    checked[id(value)] = self._fits(value, tensor)
                if not checked[id(value)]:
                    info.op_class = "fixed"
                    info.reason = f"range: input {value.name!r} exceeds FP16 (never clamped)"
                    break

    def _fits(self, value: ir.Value, tensor: ir.TensorProtocol) -> bool:
        state = self.state
        peak = max_abs_finite(tensor)
        if peak <= FP16_MAX:
            return True
        name = value.name or ""
        if tensor.size == 1 and peak >= SENTINEL:
            state.saturate.add(name)
            state.report.tensors.append(
                TensorNote(
                    name, "saturated", f"sentinel of magnitude {peak:.3g} stored as +-{FP16_MAX:g}"
                )
            )
            return True
        state.report.tensors.append(
            TensorNote(
                name,
                "kept FP32",
                f"max |value| {peak:.4g} > {FP16_MAX:g}; its readers stay FP32 instead of clamping",
            )
        )
        return False

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
                        info.reason += f"; follows deny: reads {out.name!r} from {node.op_type}"
                        stack.append(use.node)

    def _min_cut(self, nodes: list[ir.Node], prefer_low: bool) -> None:
        """Place INFER/CLEAR nodes so the number of Casts is minimal (an exact s-t min cut).

        Source side = LOW, sink side = FP32. Every float value costs one Cast when a reader needs
        the other precision than its producer gives; two helper vertices per value make that a
        cut of weight W. Forced nodes are tied to their side; each movable node has a weight-1
        edge towards the level's preference (O2: LOW, O1: FP32), which only breaks ties since W
        exceeds the number of movable nodes.
        """
        state = self.state
        net = FlowNetwork()
        src, sink = net.add_vertex(), net.add_vertex()
        vertex: dict[ir.Node, int] = {}
        movable = []
        for node in nodes:
            info = state.info[node]
            if not info.candidate:
                continue
            v = vertex[node] = net.add_vertex()
            if info.forced:
                net.add_edge(*((src, v) if info.precision == "low" else (v, sink)), INF)
            else:
                movable.append(node)
        if not movable:
            return
        weight = len(movable) + 1
        for node in movable:
            v = vertex[node]
            net.add_edge(*((src, v) if prefer_low else (v, sink)), 1)
        for value in _float_values_of(nodes, state):
            self._add_value(net, value, vertex, src, sink, weight)
        net.max_flow(src, sink)
        low_side = net.source_side(src)
        for node in movable:
            info = state.info[node]
            low = vertex[node] in low_side
            if low != (info.precision == "low"):
                info.reason += "; " + ("low precision" if low else "FP32") + " needs fewer casts"
            info.precision = "low" if low else "fp32"

    def _add_value(
        self,
        net: FlowNetwork,
        value: ir.Value,
        vertex: dict[ir.Node, int],
        src: int,
        sink: int,
        weight: int,
    ) -> None:
        state = self.state
        if constant_tensor(value) is not None:
            return  # a constant is stored in whatever precision its readers need
        producer = value.producer()
        if producer is not None:
            info = state.info.get(producer)
            movable_out = info is not None and value.index() in info.low_outputs
            p = vertex.get(producer, sink) if movable_out else sink
        else:
            p = src if value_home(value, state) == "low" else sink
        readers: set[int] = set()
        for use in value.uses():
            info = state.info.get(use.node)
            if info is None or use.idx in info.any_inputs:
                continue
            if use.idx in info.low_inputs and use.node in vertex:
                readers.add(vertex[use.node])
            else:
                readers.add(sink)
        if value.is_graph_output():
            readers.add(src if interface_precision(value, state) == "low" else sink)
        readers.discard(p)
        if not readers or (p in (src, sink) and readers <= {src, sink}):
            return
        if p != sink:  # p LOW and a reader FP32 → a Cast up
            a = net.add_vertex()
            net.add_edge(p, a, weight)
            for r in readers:
                net.add_edge(a, r, INF)
        if p != src:  # p FP32 and a reader LOW → a Cast down
            b = net.add_vertex()
            net.add_edge(b, p, weight)
            for r in readers:
                net.add_edge(r, b, INF)


def _float_values_of(nodes: list[ir.Node], state: ConversionState) -> list[ir.Value]:
    """Float values read by candidate nodes or produced by them (graph inputs included)."""
    seen: set[int] = set()
    out: list[ir.Value] = []
    for node in nodes:
        info = state.info[node]
        if not info.candidate:
            continue
        for v in (*(node.inputs[i] for i in info.low_inputs), *node.outputs):
            if v is not None and id(v) not in seen and is_float_tensor(v):
                seen.add(id(v))
                out.append(v)
    return out
