"""ORT sessions that expose intermediate values, and batched fetches that keep memory bounded.

One session per model: every float value to probe becomes an extra graph output, and each run
fetches only one batch of them (ORT frees what is not fetched), so the bytes held at once stay
under a budget however big the model. Sessions are counted: the search reports how many it used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from amp_convert.reports.value_map import ValueMap
from amp_convert.validation.runtime import (
    ModelSource,
    RunError,
    Runner,
    fetch_outputs,
    first_line,
    make_session,
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
    """A session over a model with intermediates exposed; ``fetch`` returns named values.

    Values are asked for by their *reference* names; ``aliases`` (from the value map) gives the
    name of the value that carries each in this model. A reference value nothing carries (folded,
    removed) is simply not returned.
    """

    runner: Runner
    #: exposed values this model really has, by its own names
    available: set[str] = field(default_factory=set)
    #: reference name -> this model's name of the value that carries it (identity when absent)
    aliases: Mapping[str, str] | None = None
    role: str = "model"

    def own_name(self, name: str) -> str | None:
        """This model's name for reference value ``name``, or None when it has no carrier."""
        own = name if self.aliases is None else self.aliases.get(name)
        return own if own is not None and own in self.available else None

    def fetch(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, Any]:
        """One run that returns ``names`` (those carried here) as numpy arrays on the host."""
        asked = {n: own for n in names if (own := self.own_name(n)) is not None}
        got = self._fetch(feeds, list(dict.fromkeys(asked.values())))
        return {n: got[own] for n, own in asked.items()}

    def _fetch(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, Any]:
        if not names:
            return {}
        try:
            return fetch_outputs(self.runner, feeds, names)
        except Exception as e:
            raise RunError(self.role, first_line(e)) from None

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
    aliases: Mapping[str, str] | None = None,
) -> Probe:
    """Open a session on ``model`` (``src``'s graph, or a rewritten copy of it); ``aliases``:
    reference name -> ``model``'s name of each value to fetch (see ``Probe``)."""
    runner = make_session(
        src,
        role,
        device=device,
        disable_optimizations=disable_optimizations,
        model_override=model,
        configure=configure,
    )
    return Probe(runner, {n for n, _ in runner.outputs}, aliases, role)


def produced_names(proto: onnx.ModelProto) -> set[str]:
    """Values of the main graph a session can return: node outputs and graph inputs/outputs."""
    graph = proto.graph
    names = {o for node in graph.node for o in node.output if o}
    names.update(i.name for i in graph.input)
    names.update(o.name for o in graph.output)
    return names


def carrier_aliases(
    value_map: ValueMap, names: Sequence[str], proto: onnx.ModelProto
) -> dict[str, str]:
    """Reference name -> candidate name for each of ``names`` that a value of ``proto``'s main
    graph carries (a graph output by the Cast that gives it its interface type)."""
    present = produced_names(proto)
    out: dict[str, str] = {}
    for name in names:
        fate = value_map.fate(name)
        own = fate.via_cast or fate.carrier
        if own is not None and own in present:
            out[name] = own
    return out


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
