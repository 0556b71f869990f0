"""Formals of an op the schemas do not know, read from the kernel table's own parameter lists.

A kernel table speaks in type-constraint names ("T", "T1"...) of the op's schema at that opset;
a node has positional inputs. The schema interface (amp_convert.schema: onnx.defs plus ORT's
contrib schema table) binds them; for an op neither knows, the document's parameter lists do.
"""

from __future__ import annotations

from collections.abc import Sequence

from amp_convert.schema import KERNEL_DOC, OpSignature, Slot


def doc_formals(
    alternatives: Sequence[dict[str, list[list[str]]]], type_vars: set[str], n_inputs: int
) -> OpSignature | None:
    """Formals read from the table's own parameter lists, when no schema is available.

    The document lists one parameter list per schema version without saying which is which; pick
    the one using most of the type variables the kernel constrains (and no others) that has room
    for the inputs; the first listed on a tie. Admitted types are not known here (empty).
    """

    def build(alt: dict[str, list[list[str]]]) -> OpSignature:
        def slot(pair: list[str]) -> Slot:
            is_var = not pair[1].startswith(("tensor(", "seq("))
            allowed = frozenset() if is_var else frozenset([pair[1]])
            return Slot(pair[1], allowed, False, is_var, name=pair[0])

        return OpSignature(
            tuple(slot(p) for p in alt["inputs"]),
            tuple(slot(p) for p in alt["outputs"]),
            KERNEL_DOC,
        )

    candidates = [build(a) for a in alternatives]
    fitting = [
        (len(used), -i, f)
        for i, f in enumerate(candidates)
        if (used := {x.type_str for x in f.inputs + f.outputs if x.is_type_var}) <= type_vars
        and len(f.inputs) >= n_inputs
    ]
    if fitting:
        return max(fitting, key=lambda t: t[:2])[2]
    return candidates[0] if candidates else None
