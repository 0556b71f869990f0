"""What every report shares: a versioned JSON form, written atomically, and a terminal summary.

``ConversionReport``, ``ValidationReport`` and the ``--auto`` report derive from ``Report``. Each
says its ``schema_version`` and ``tool`` once; ``to_json`` writes ``to_dict()`` as strict JSON
(non-finite floats as the strings ``"nan"``, ``"inf"``, ``"-inf"``), atomically, through the one
safe writer. New keys may be added within a schema version; renamed or removed keys, or a changed
meaning, bump it.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, ClassVar

from amp_convert import safe_write


def json_ready(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth) replaced by its string spelling."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


class Report:
    """Base of the reports: subclasses give ``to_dict`` and ``summary``, and their version."""

    SCHEMA_VERSION: ClassVar[int] = 1
    TOOL: ClassVar[str] = "amp-convert"

    def __init_subclass__(
        cls, *, tool: str | None = None, schema_version: int | None = None, **kwargs: Any
    ) -> None:
        """``class R(Report, tool="amp-convert validate", schema_version=2)``: said once."""
        super().__init_subclass__(**kwargs)
        if tool is not None:
            cls.TOOL = tool
        if schema_version is not None:
            cls.SCHEMA_VERSION = schema_version

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def summary(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def versioned(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with ``schema_version`` and ``tool`` set (the subclass's own keys win)."""
        data.setdefault("schema_version", self.SCHEMA_VERSION)
        data.setdefault("tool", self.TOOL)
        return data

    def json_bytes(self) -> bytes:
        """``to_dict()`` as strict JSON."""
        text = json.dumps(json_ready(self.to_dict()), indent=2, allow_nan=False)
        return (text + "\n").encode("utf-8")

    def to_json(self, path: str | os.PathLike) -> None:
        """Write ``to_dict()`` as strict JSON, atomically (raises OutputError)."""
        safe_write.write_bytes(path, self.json_bytes())
