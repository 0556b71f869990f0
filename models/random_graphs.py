"""Random small valid ONNX graphs, each with a proven error bound per output, to fuzz the converter.

Why a bound per output and not one tolerance: a random graph may cancel (Sub), divide, take logs or
sum dozens of terms, so "1 % of the scale" is sometimes too tight (a false alarm) and usually far
too loose (a real bug slips through). Instead the builder does a forward error analysis while it
builds: every value carries an interval that contains it and an absolute error bound for FP16 and
for BF16, under the worst case that *every* value of the converted model is rounded once to the low
type (unit roundoff u = 2**-11 for FP16, 2**-8 for BF16; weights rounded exactly as numpy rounds
them) and each op then propagates its inputs' errors by its Lipschitz constant on that interval.
Ops computed in FP32 by the converter only make the real error smaller. Inputs are bounded
(uniform in [-1, 1]) and any value whose interval grows past 16 is scaled back by a power of two
(exact), so nothing can legitimately overflow FP16. Domains are kept safe by construction: Log and
Sqrt see values >= 0.25, Div divides by values >= 0.5 in magnitude, Exp sees values <= 4,
LayerNormalization sees rows with a standard deviation >= 1. Discontinuous results (TopK indices,
comparisons of computed floats) are never outputs.

Layout: models/random_scope.py (values, bounds, scopes), models/random_ops.py (one recipe per op
family), this module (whole cases, the hypothesis strategy, the generator's own check).

Every random decision goes through a ``Chooser``: ``HypothesisChooser`` (so hypothesis shrinks a
failing graph to a small one: fewer ops, the first op of the menu, opset 13, rank 1) or
``RandomChooser`` (seed-driven, for ``bench/fuzz.py``). Repro: ``python -m models.random_graphs
--seed N -o case.onnx`` writes the graph of seed N and its inputs (``case.npz``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from models.random_ops import build_ops, r_unary
from models.random_scope import (
    FLOAT,
    LOW_DTYPES,
    MAX_OPS,
    MAX_SIZE,
    OPSETS,
    Chooser,
    Gen,
    HypothesisChooser,
    RandomChooser,
)


# -- whole cases ---------------------------------------------------------------------------------
@dataclass
class FuzzCase:
    """A random model, its inputs, and per output the proven error bound [FP16, BF16]."""

    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    bounds: dict[str, np.ndarray]
    intervals: dict[str, tuple[float, float]]
    external: bool = False  # save with its weights in external data before converting
    keep_io_types: bool = True

    def tolerance(self, output: str, dtype: str) -> float:
        """Absolute tolerance for ``output``: twice the first-order bound (the factor 2 covers
        the dropped second-order terms and FP32 arithmetic noise inside ops, both << the bound)."""
        return 2.0 * float(self.bounds[output][LOW_DTYPES.index(dtype)]) + 1e-6

    def describe(self) -> str:
        ops: dict[str, int] = {}
        for g in all_graphs(self.model.graph):
            for n in g.node:
                ops[n.op_type] = ops.get(n.op_type, 0) + 1
        opset = self.model.opset_import[0].version
        listing = " ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(ops.items()))
        extra = (" external" if self.external else "") + (
            "" if self.keep_io_types else " no-keep-io"
        )
        return f"opset {opset}{extra}: {listing}"


def all_graphs(g: onnx.GraphProto):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from all_graphs(a.g)


def build_case(ch: Chooser) -> FuzzCase:
    """Build one random valid model from the decisions of ``ch``."""
    opset = ch.integer(*OPSETS)
    gen = Gen(ch, opset, ch.integer(0, 2**31 - 1))
    for _ in range(ch.integer(1, 2)):
        dims = [ch.integer(1, 5) for _ in range(ch.integer(1, 4))]
        while math.prod(dims) > MAX_SIZE // 2:
            dims[dims.index(max(dims))] -= 1
        gen.float_input(tuple(dims))
    main = gen.main
    build_ops(main, ch.integer(1, MAX_OPS))
    made = [v for v in main.vals if v.name not in main.hidden and v.name not in gen.feeds]
    if not any(v.elem == FLOAT for v in made):  # only Shape ops so far: give it a float output
        r_unary(main)
        made = [v for v in main.vals if v.name not in main.hidden and v.name not in gen.feeds]
    last = next(v for v in reversed(made) if v.elem == FLOAT)
    outputs = [last]
    for _ in range(ch.integer(0, 2)):
        v = ch.choice(made)
        if v not in outputs:
            outputs.append(v)
    if ch.integer(0, 7) == 7:  # a graph input that is also an output (valid; easy to get wrong)
        outputs.append(main.vals[0])
    out_vi = [helper.make_tensor_value_info(v.name, v.elem, v.shape) for v in outputs]
    graph = helper.make_graph(main.nodes, "fuzz", gen.inputs, out_vi, initializer=main.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="amp-convert-fuzz"
    )
    model.ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])
    external = any(_external_candidates(model)) and ch.rarely()
    keep = not ch.rarely()
    bounds = {v.name: (v.err if v.elem == FLOAT else np.zeros(2)) for v in outputs}
    intervals = {v.name: (v.lo, v.hi) for v in outputs if v.elem == FLOAT}
    return FuzzCase(model, gen.feeds, bounds, intervals, external, keep)


def _external_candidates(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Weights an exporter would store as external data: float initializers of 8+ elements.

    Small tensors stay inline as exporters keep them (size_threshold): ONNX Runtime cannot read
    external data during shape inference, so an external Range start, TopK K or Resize scales
    makes the *original* model unloadable."""
    return [
        t
        for g in all_graphs(model.graph)
        for t in g.initializer
        if t.data_type == FLOAT and math.prod(t.dims) >= 8
    ]


def save_with_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Write ``model`` to ``path`` with its weights in ``path.name + '.data'`` next to it."""
    from onnx import external_data_helper as ext

    copy = onnx.ModelProto.FromString(model.SerializeToString())
    for t in _external_candidates(copy):
        ext.set_external_data(t, location=path.name + ".data")
    ext.write_external_data_tensors(copy, str(path.parent))
    onnx.save(copy, str(path))


def case_from_seed(seed: int) -> FuzzCase:
    """The case of ``seed`` (what ``bench/fuzz.py`` runs and reports)."""
    return build_case(RandomChooser(seed))


def fuzz_cases():
    """A hypothesis strategy of FuzzCase (imported lazily: hypothesis is a test dependency)."""
    from hypothesis import strategies as st

    @st.composite
    def cases(draw) -> FuzzCase:
        return build_case(HypothesisChooser(draw))

    return cases()


def check_case(case: FuzzCase) -> list[np.ndarray]:
    """The generator's own promise: full checker, ORT CPU runs it, outputs in their intervals."""
    import onnxruntime as ort

    onnx.checker.check_model(case.model, full_check=True)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(
        case.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    outs = sess.run(None, case.feeds)
    for vi, arr in zip(case.model.graph.output, outs, strict=True):
        dims = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        if arr.shape != dims:
            raise AssertionError(f"{vi.name}: shape {arr.shape}, declared {dims}")
        if vi.name in case.intervals:
            lo, hi = case.intervals[vi.name]
            slack = 1e-4 * max(1.0, abs(lo), abs(hi))
            if arr.size and (arr.min() < lo - slack or arr.max() > hi + slack):
                raise AssertionError(
                    f"{vi.name}: values [{arr.min()}, {arr.max()}] outside [{lo}, {hi}]"
                )
    return outs


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Write the random fuzz model of one seed.")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("-o", "--output", type=Path, required=True, help="MODEL.onnx (+ MODEL.npz)")
    args = p.parse_args(argv)
    case = case_from_seed(args.seed)
    onnx.save(case.model, args.output)
    np.savez(args.output.with_suffix(".npz"), **case.feeds)
    print(f"{args.output}: {case.describe()}")
    for name, b in case.bounds.items():
        print(f"  {name}: |error| <= fp16 {b[0]:.3g}, bf16 {b[1]:.3g}")


if __name__ == "__main__":
    main()
