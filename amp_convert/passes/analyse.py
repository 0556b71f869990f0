"""Step 2, analyse: one look at the original through ONNX's checker and type inference.

The weight-stripped graph is checked strictly (is ONNX's own verification something the
result can be held to?) and its inferred types feed dtype inference; a structurally broken
model is refused here, before any edit.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import onnx
import onnx_ir as ir

from amp_convert.errors import InputError
from amp_convert.files.onnx_checks import (
    call_on_stripped,
    first_line,
    one_line,
    proto_value_types,
    strict_check,
)

logger = logging.getLogger(__name__)


class Analysis(NamedTuple):
    """analyse's result: ONNX's strict check error (None when it passed) and the types it
    inferred. A pair, so ``error, types = analyse(model)`` reads as before."""

    strict_error: str | None
    inferred: dict[str, onnx.TypeProto]

    def summary(self) -> str:
        return f"strict check error: {self.strict_error}, {len(self.inferred)} inferred types"


def analyse(model: ir.Model) -> Analysis:
    """One look at the original through ONNX: (strict check error or None, inferred types).

    A model that fails ONNX's structural checker (dangling inputs, unknown ops or attributes, a
    missing required attribute) or cannot be serialised is refused with an InputError: the
    result could not pass the checker either.

    The strict check (checker + strict type inference) tells whether ONNX's own verification can
    be held against our result; its inference also types the values. Serialised once, stripped.
    """

    def look(proto: onnx.ModelProto) -> tuple[str | None, dict[str, onnx.TypeProto]]:
        error = None
        try:
            onnx.checker.check_model(proto, full_check=False)
        except Exception as e:  # the structure itself is broken: no conversion can mend it
            raise InputError(f"the input model fails the ONNX checker: {one_line(e)}") from None
        try:
            inferred = strict_check(proto)
        except Exception as e:  # onnx raises several error kinds
            error = first_line(e)
            try:
                inferred = onnx.shape_inference.infer_shapes(
                    proto, check_type=False, strict_mode=False, data_prop=False
                )
            except Exception as e2:  # inference is a help, never a requirement
                logger.info("onnx shape inference failed (%s); schema propagation only", e2)
                return error, {}
        types: dict[str, onnx.TypeProto] = {}
        proto_value_types(inferred.graph, types)
        return error, types

    try:
        return Analysis(*call_on_stripped(model, look))
    except ir.serde.SerdeError as e:  # e.g. names that are not valid UTF-8
        root: BaseException = e
        while root.__cause__ is not None or root.__context__ is not None:
            root = root.__cause__ or root.__context__  # type: ignore[assignment]
        if isinstance(root, UnicodeError):
            raise InputError(
                f"the input model holds a name that is not valid UTF-8 ({root})"
            ) from None
        raise InputError(f"the input model cannot be serialised: {first_line(root)}") from None
