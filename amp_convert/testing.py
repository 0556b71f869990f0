"""Test helpers for users of amp-convert: assert that a converted model matches its original.

Why: a one-line check in a project's own test suite, e.g.
``assert_converted_close("model.onnx", "model.fp16.onnx", atol=1e-2)``, that fails with the full
validation table so the failing output and its numbers are visible in the pytest log.
"""

from __future__ import annotations

from typing import Any

from amp_convert.validation import Thresholds, ValidationReport, validate


def assert_converted_close(
    reference: Any,
    candidate: Any,
    *,
    atol: float | None = 1e-2,
    rtol: float | None = 1e-2,
    min_cosine: float | None = 0.999,
    max_nan: int | None = 0,
    max_mismatch: float | None = 1e-3,
    provider: str = "auto",
    **kw: Any,
) -> ValidationReport:
    """Validate ``candidate`` against ``reference`` and raise AssertionError with the table.

    Defaults are loose enough for FP16 (BF16 usually needs ``rtol`` around 5e-2): README's CI
    recipe, whose ``max_mismatch`` lets 0.1% of the elements past the element-wise atol/rtol
    bound (a steep edge's rounding), never a shifted output. Extra keyword
    arguments go to ``amp_convert.validation.validate`` (``inputs``, ``dims``, ``seed``, ``runs``,
    ``warmup``, ``thresholds`` for per-output overrides). Timing is skipped unless ``runs`` is
    given. Returns the report when everything passes.
    """
    limits = Thresholds.coerce(kw.pop("thresholds", None)).to_dict()
    for key, value in (
        ("atol", atol),
        ("rtol", rtol),
        ("min_cosine", min_cosine),
        ("max_nan", max_nan),
        ("max_mismatch", max_mismatch if atol is not None or rtol is not None else None),
    ):
        if limits.get(key) is None:
            limits[key] = value
    if all(limits.get(k) is None for k in ("atol", "rtol", "min_cosine", "max_nan")):
        raise ValueError("assert_converted_close needs at least one threshold to judge by")
    kw.setdefault("runs", 0)
    report = validate(reference, candidate, provider=provider, thresholds=limits, **kw)
    if not report.passed:
        raise AssertionError(f"converted model differs from the original\n{report.format_table()}")
    return report
