"""ORT sessions that expose intermediate values, and batched fetches that keep memory bounded.

One session per model: every float value to probe becomes an extra graph output, and each run
fetches only one batch of them (ORT frees what is not fetched), so the bytes held at once stay
under a budget however big the model. Sessions are counted: the search reports how many it used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from amp_convert.errors import ValidationError
from amp_convert.validation.runtime import (
    ModelSource,
    Runner,
    from_ortvalue,
    make_session,
    to_ortvalue,
)

#: default bytes of activations fetched (and held) at once, per model
DEFAULT_BUDGET = 512 << 20


def expose(proto: onnx.ModelProto, values: Sequence[str], elem_types: Mapping[str, int]) -> None:
    """Append ``values`` to ``proto``'s graph outputs in place (those not already outputs, and
    only those the graph has: a conversion may fold a subgraph, e.g. a hand-written LayerNorm,
    whose intermediates then do not exist in the candidate)."""
    present = {o.name for o in proto.graph.output}
    produced = {v for n in proto.graph.node for v in n.output} | {i.name for i in proto.graph.input}
    for name in values:
        if name not in present and name in elem_types and name in produced:
            proto.graph.output.append(helper.make_tensor_value_info(name, elem_types[name], None))
            present.add(name)


@dataclass
class Probe:
    """A session over a model with intermediates exposed; ``fetch`` returns named values."""

    runner: Runner
    #: exposed values this model really has (others are absent from the candidate)
    available: set[str] = field(default_factory=set)

    def fetch(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, Any]:
        """One run that returns ``names`` (those available) as numpy arrays on the host."""
        names = [n for n in names if n in self.available]
        if not names:
            return {}
        runner = self.runner
        try:
            if runner.device == "cuda":
                binding = runner.session.io_binding()
                for name, arr in feeds.items():
                    ov = to_ortvalue(arr, runner.inputs[name][0], "cuda")
                    binding.bind_ortvalue_input(name, ov)
                for name in names:
                    binding.bind_output(name, "cpu")
                runner.session.run_with_iobinding(binding)
                values = binding.get_outputs()
            else:
                ovs = {n: to_ortvalue(a, runner.inputs[n][0]) for n, a in feeds.items()}
                values = runner.session.run_with_ort_values(names, ovs)
        except Exception as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValidationError(f"ONNX Runtime failed to run the model: {msg}") from None
        return {n: from_ortvalue(v) for n, v in zip(names, values, strict=True)}

    def close(self) -> None:
        self.runner.close()


def open_probe(
    src: ModelSource,
    model: onnx.ModelProto,
    role: str,
    *,
    device: str,
    disable_optimizations: bool,
    configure: Callable[[Any], None] | None = None,
) -> Probe:
    """Open a session on ``model`` (``src``'s graph, or a rewritten copy of it)."""
    runner = make_session(
        src, role, device=device, disable_optimizations=disable_optimizations,
        model_override=model, configure=configure,
    )  # fmt: skip
    return Probe(runner, {n for n, _ in runner.outputs})


def plan_batches(
    values: Sequence[str], sizes: Mapping[str, int], budget: int, first: Sequence[str] = ()
) -> list[list[str]]:
    """Split ``values`` into batches of at most ``budget`` bytes; ``first`` leads batch 0."""
    batches: list[list[str]] = []
    current: list[str] = []
    used = 0
    seen: set[str] = set()
    for name in [*first, *values]:
        if name in seen:
            continue
        seen.add(name)
        size = sizes.get(name, 0)
        if current and used + size > budget:
            batches.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        batches.append(current)
    return batches


def iterate(
    probe: Probe, feeds: Mapping[str, np.ndarray], batches: Sequence[Sequence[str]]
) -> Iterator[dict[str, Any]]:
    """The values of each batch in turn, one run per batch."""
    for batch in batches:
        yield probe.fetch(feeds, batch)
