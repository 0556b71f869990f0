"""Give subgraph values model-unique names before anything looks values up by name.

ONNX scopes value names per graph: the two branches of an ``If`` may each define ``t`` (optimum's
merged decoders do, one as float and one as int64), and a branch output may carry the name of the
``If`` output it becomes. ONNX inference, the shape book, the emulator and ``--auto`` key values
by name, so such repeats would mix two values up. Values of the main graph keep their names (the
user's interface); a subgraph value whose name is already taken elsewhere gets a fresh one.
Subgraph names are internal to the model, so nothing the user sees changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import onnx_ir as ir

from amp_convert.core import walk
from amp_convert.core.precision import UniqueNames

logger = logging.getLogger(__name__)


def _defined(graph: ir.Graph) -> Iterator[ir.Value]:
    """The values a graph defines itself: its inputs, initializers and its nodes' outputs."""
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph:
        yield from node.outputs


def separate_scoped_names(model: ir.Model, names: UniqueNames) -> int:
    """Rename subgraph values whose names repeat elsewhere in the model; how many were renamed.

    ``names`` must already hold every name of the model (``UniqueNames.of_model``); the fresh
    names are taken from it, so later passes never hand them out again.
    """
    seen = {v.name for v in _defined(model.graph) if v.name}
    renamed = 0
    for graph in walk.graphs(model):
        if graph is model.graph:
            continue
        for value in list(_defined(graph)):
            if not value.name:
                continue
            if value.name in seen:
                old = value.name
                value.name = names.take(old)
                renamed += 1
                logger.info(
                    "subgraph %r: %r renamed %r (name used elsewhere)", graph.name, old, value.name
                )
            seen.add(value.name)
    return renamed
