"""bench/compare.py's record of one model: its runs per converter, the checks, and reads of both."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# converter key -> (tool, level, label)
CONVERTERS: dict[str, tuple[str, str | None, str]] = {
    "amp_O1": ("amp", "O1", "amp-convert O1"),
    "amp_O2": ("amp", "O2", "amp-convert O2"),
    "amp_O3": ("amp", "O3", "amp-convert O3"),
    "occ": ("occ", None, "onnxconverter-common"),
    "occ_noinfer": ("occ_noinfer", None, "onnxconverter-common, disable_shape_infer=True"),
}
AMP = ("amp_O1", "amp_O2", "amp_O3")


@dataclass
class Model:
    key: str  # group/name
    group: str
    path: Path
    size: int
    isolated: bool = False  # own fresh process per conversion
    runs: dict[str, list[dict]] = field(default_factory=dict)  # converter or "floor" -> results
    original: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)  # converter -> analysis
    external: bool = False  # weights in external-data files (decided once, before any timer)

    def dst(self, workdir: Path, conv: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.key)
        return workdir / "out" / conv / safe / "model.onnx"

    def error(self, conv: str) -> str | None:
        return next((r["error"] for r in self.runs.get(conv, []) if "error" in r), None)

    def converted(self, conv: str) -> bool:
        return bool(self.runs.get(conv)) and self.error(conv) is None

    def _figures(self, conv: str, key: str) -> list:
        """`key` of every run of `conv`; none when a run failed."""
        runs = [r[key] for r in self.runs.get(conv, []) if key in r]
        return runs if not self.error(conv) else []

    def median(self, conv: str) -> float | None:
        runs = self._figures(conv, "seconds")
        return statistics.median(runs) if runs else None

    def fastest(self, conv: str) -> float | None:
        runs = self._figures(conv, "seconds")
        return min(runs) if runs else None

    def peak(self, conv: str) -> int | None:
        runs = self._figures(conv, "peak_rss")
        return max(runs) if runs else None

    def io_changed(self, conv: str) -> list[str]:
        """Model inputs/outputs whose element type differs from the original's (keep_io_types)."""
        before = self.original.get("io_types") or {}
        after = self.checks.get(conv, {}).get("io_types") or {}
        return [n for n, t in before.items() if n in after and after[n] != t]

    def valid(self, conv: str) -> bool:
        c = self.checks.get(conv)
        return bool(c) and c.get("ort_error") is None and c.get("checker_error") is None

    def loads(self) -> bool:
        """The FP32 original loads in ORT (and its checks ran)."""
        return self.original.get("ort_error") is None and "error" not in self.original

    def casts_added(self, conv: str) -> int | None:
        """Cast nodes in `conv`'s output minus the original's."""
        c, o = self.checks.get(conv, {}), self.original
        return c["casts"] - o["casts"] if "casts" in c and "casts" in o else None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "group": self.group,
            "path": str(self.path),
            "size": self.size,
            "isolated": self.isolated,
            "original": self.original,
            "runs": self.runs,
            "checks": self.checks,
            "median_s": {c: self.median(c) for c in self.runs},
            "peak_rss": {c: self.peak(c) for c in self.runs},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Model:
        return cls(
            key=d["key"],
            group=d["group"],
            path=Path(d["path"]),
            size=d["size"],
            isolated=d["isolated"],
            runs=d["runs"],
            original=d["original"],
            checks=d["checks"],
        )
