"""Whether two compare.py runs converted alike: casts, FP32 nodes, sizes and accuracy per model.

For refactors that must not change behaviour: run compare.py before and after with --json, then

    PYTHONPATH=. python bench/compare_diff.py before.json after.json

prints every amp-convert figure that differs (timings and memory are left out) and exits 1 when
any does. Figures compared per model and level: the report's casts_inserted / nodes_low /
nodes_fp32 / size_after, and the output checks (Cast and FP32 node counts, node count, size,
checker and ORT errors, traffic, and the emulated accuracy, bit for bit).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RUN_FIELDS = ("casts_inserted", "nodes_low", "nodes_fp32", "size_after", "error")
CHECK_FIELDS = (
    "nodes",
    "casts",
    "float_nodes",
    "fp32_nodes",
    "untyped",
    "size",
    "checker_error",
    "ort_error",
    "traffic",
    "accuracy",
)


def figures(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(model key, converter) -> the behaviour figures of that conversion."""
    data = json.loads(path.read_text())
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for model in data["models"]:
        for tool, runs in model.get("runs", {}).items():
            if not tool.startswith("amp_"):
                continue
            row = out.setdefault((model["key"], tool), {})
            for i, run in enumerate(runs):
                row |= {f"run{i}.{f}": run.get(f) for f in RUN_FIELDS}
        for tool, check in model.get("checks", {}).items():
            if tool.startswith("amp_"):
                row = out.setdefault((model["key"], tool), {})
                row |= {f"check.{f}": _clean(check.get(f)) for f in CHECK_FIELDS}
    return out


def _clean(value: Any) -> Any:
    """Drop temporary paths (they differ between runs by design)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k != "path"}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    args = p.parse_args(argv)
    before, after = figures(args.before), figures(args.after)
    differences = 0
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            print(f"{key[0]} {key[1]}: only in {'after' if key not in before else 'before'}")
            differences += 1
            continue
        for field in sorted(set(before[key]) | set(after[key])):
            old, new = before[key].get(field), after[key].get(field)
            if old != new:
                print(f"{key[0]} {key[1]} {field}: {old!r} -> {new!r}"[:400])
                differences += 1
    print(f"{len(before)} conversions before, {len(after)} after, {differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
