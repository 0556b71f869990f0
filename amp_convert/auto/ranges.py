"""Range guard: nodes whose observed magnitudes, times a safety margin, would overflow the low type.

From one FP32 run of the original on the calibration inputs (every float intermediate exposed),
a node is kept FP32 when

* one of its float outputs has max |value| x margin above the low type's largest finite value
  (65504 for FP16): computed low it would overflow to Inf;
* one of its float inputs does (a value produced out of range, or a graph input): read low, it
  would be cast to Inf on the way in;
* it is a reduction whose accumulated sum would: ReduceMean's sum is |mean| x the reduced count,
  ReduceSumSquare/ReduceL2's is the sum of squares, ReduceLogSumExp's is exp(max input); a kernel
  that accumulates in the low type overflows there even when the result is in range. Which ops
  hold their sum in the low type is the judging runtime's Target's data (its accumulation table,
  ``limit: sum``): ORT CUDA's ReduceMean writes the sum into its FP16 output before dividing
  (Inf past 65504, measured on an H100), and the hit cites that row.

The margin (default 2) covers inputs a little larger than the calibration data. The inference
analogue of a training loss-scale overflow check; it needs no run of any candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from amp_convert.auto.graph import GraphFacts
from amp_convert.core.dtypes import LowType
from amp_convert.targets import Target

DEFAULT_MARGIN = 2.0
_REDUCE_SQUARES = ("ReduceSumSquare", "ReduceL2")


@dataclass
class RangeHit:
    """Why the range guard keeps a node FP32."""

    node: str
    value: str
    max_abs: float
    kind: str  # "output", "input", "accumulator"
    #: for an accumulator: where the kernel keeps that sum (the accumulation table's source)
    kernel: str = ""

    def describe(self, margin: float, limit: float) -> str:
        what = {"output": "output", "input": "input", "accumulator": "accumulated sum of"}[
            self.kind
        ]
        text = f"{what} {self.value}: max |x| {self.max_abs:.4g} x margin {margin:g} > {limit:g}"
        return f"{text} ({self.kernel})" if self.kernel else text


def range_hits(
    facts: GraphFacts,
    ref_max: Mapping[str, float],
    low: LowType,
    target: Target,
    margin: float = DEFAULT_MARGIN,
) -> dict[str, RangeHit]:
    """Node name → the first reason it must stay FP32 (nodes in range are absent); `target` is
    the runtime the search judges on (its kernels say which sums are held in `low`)."""
    limit = low.max
    hits: dict[str, RangeHit] = {}

    def over(x: float) -> bool:
        return x * margin > limit

    for node in facts.nodes:
        hit = None
        for v in node.outputs:
            if over(ref_max.get(v, 0.0)):
                hit = RangeHit(node.name, v, ref_max[v], "output")
                break
        if hit is None:
            for v in node.inputs:
                if v not in facts.initializers and over(ref_max.get(v, 0.0)):
                    hit = RangeHit(node.name, v, ref_max[v], "input")
                    break
        if hit is None and node.outputs:
            acc = _accumulated(facts, target, node.op_type, node.inputs, node.outputs[0], ref_max)
            if acc is not None and over(acc):
                row = target.held_sum(node.op_type, "", low.onnx_name)
                held = f"{target.kernels.display} holds it in {low.name}"
                kernel = f"{held}: {row.limit_text}" if row else ""
                hit = RangeHit(node.name, node.inputs[0], acc, "accumulator", kernel)
        if hit is not None:
            hits[node.name] = hit
    return hits


def _accumulated(
    facts: GraphFacts,
    target: Target,
    op: str,
    inputs: list[str],
    out: str,
    ref_max: Mapping[str, float],
) -> float | None:
    if not inputs:
        return None
    if target.holds_input_sum(op):
        count = _reduced_count(facts, inputs[0], out)
        return None if count is None else ref_max.get(out, 0.0) * count
    if op == "ReduceSumSquare":
        return ref_max.get(out, 0.0)
    if op == "ReduceL2":
        return ref_max.get(out, 0.0) ** 2
    if op == "ReduceLogSumExp":
        x = ref_max.get(inputs[0], 0.0)
        return math.inf if x > 700 else math.exp(x)
    return None


def _reduced_count(facts: GraphFacts, inp: str, out: str) -> int | None:
    a, b = facts.shapes.get(inp), facts.shapes.get(out)
    if not a or b is None or any(d is None for d in a) or any(d is None for d in b):
        return None
    n_in = int(np.prod([int(d or 0) for d in a], dtype=np.int64))
    n_out = max(1, int(np.prod([int(d or 0) for d in b], dtype=np.int64)))
    return max(1, n_in // n_out)
