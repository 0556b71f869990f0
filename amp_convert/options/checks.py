"""Options checked against the model they apply to: a typo must not silently do nothing.

An op name in --fp32-ops/--fp16-ops that no ONNX schema, no ONNX Runtime kernel and no node of
the model has, or a --dim name that no input, output or annotated value of the model uses, is
refused with the closest known name. `check_against_model` runs them all; every conversion entry
point goes through it (pipeline.run, and ``--auto`` before its first session).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import onnx
import onnx_ir as ir

from amp_convert import schema
from amp_convert.core import spelling, walk
from amp_convert.cost.dims import check_dim_names
from amp_convert.errors import OptionError
from amp_convert.op_lists import OpLists
from amp_convert.options.convert import ConvertOptions
from amp_convert.targets import SHIPPED, load_target


@functools.lru_cache(maxsize=1)
def _known_ops() -> frozenset[str]:
    """Op types of every ONNX schema and every kernel of the targets we ship a table of."""
    names = {s.name for s in onnx.defs.get_all_schemas_with_history()}
    for name, spec in SHIPPED.items():
        if spec.kernel_file is not None:
            names |= load_target(name).op_types()
    return frozenset(names)


def _suggest(word: str, known: Iterable[str]) -> str:
    close = spelling.closest(word, known)
    return f" (did you mean {close!r}?)" if close else ""


def check_ops(options: ConvertOptions, model: ir.Model) -> None:
    """Every op of --fp32-ops/--fp16-ops is an op type ONNX, ONNX Runtime or the model knows."""
    if not options.fp32_ops and not options.fp16_ops:
        return
    in_model = {n.op_type for n in walk.all_nodes(model.graph)}
    known = _known_ops() | in_model
    for flag, ops in (("--fp32-ops", options.fp32_ops), ("--fp16-ops", options.fp16_ops)):
        for op in ops:
            name = op.rsplit(":", 1)[-1]
            if name not in known:
                raise OptionError(
                    f"{flag} {op}: no ONNX or ONNX Runtime op and no node of the model has this "
                    f"type{_suggest(name, known)}"
                )


def check_op_lists(lists: OpLists, model: ir.Model) -> None:
    """Every op the user's --op-lists file names is one ONNX, ONNX Runtime or the model knows.

    As for --fp32-ops: a misspelt entry would otherwise do nothing, silently.
    """
    if not lists.user_lines:
        return
    in_model = {n.op_type for n in walk.all_nodes(model.graph)}
    known = _known_ops() | in_model
    for key, where in lists.user_lines.items():
        domain, _, name = key.rpartition(":")
        if name not in known and not schema.is_known_op(name, domain):
            raise OptionError(
                f"{where}: {key}: no ONNX or ONNX Runtime op and no node of the model has this "
                f"type{_suggest(name, known)}"
            )


def model_dim_names(model: ir.Model) -> set[str]:
    """Symbolic dim names of the main graph's inputs, outputs and annotated values."""
    graph = model.graph
    values = [*graph.inputs, *graph.outputs]
    values += [out for node in graph for out in node.outputs]
    names: set[str] = set()
    for value in values:
        if value.shape is None:
            continue
        names.update(d.value for d in value.shape if isinstance(d, ir.SymbolicDim) and d.value)
    return names


def check_dims(options: ConvertOptions, model: ir.Model) -> None:
    """Every --dim NAME is a symbolic dim of the model (INPUT[AXIS] names an input)."""
    if not options.dims:
        return
    inputs = {v.name for v in model.graph.inputs if v.name}
    check_dim_names(options.dims, model_dim_names(model), inputs=inputs)


def check_against_model(options: ConvertOptions, lists: OpLists, model: ir.Model) -> None:
    """The options' names checked against the model they apply to (each check skips its scan
    when the option is not set): op list entries, --fp32-ops/--fp16-ops, --dim."""
    check_op_lists(lists, model)
    check_ops(options, model)
    check_dims(options, model)
