"""Issue 7's placement targets, read from a `bench/compare.py --json` file (nothing is measured).

    PYTHONPATH=. python bench/issue7_targets.py compare.json

On every model both tools convert validly (output loads in ORT and passes the full checker):
- casts at O2 <= onnxconverter-common's + 2 per Softmax/LogSoftmax/Log kept FP32;
- estimated traffic at O2 <= 1.10x the all-low estimate, at O1 <= 1.25x;
- emulated accuracy at O2 is listed where it is worse than onnxconverter-common's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import amp_convert
from models.build import BUILDERS

KEPT_OPS = {"Softmax", "LogSoftmax", "Log"}


def _valid(check: dict) -> bool:
    return not check.get("checker_error") and not check.get("ort_error")


def _source(model: dict) -> object:
    """The original model: its file, or (a generated block whose temp folder is gone) rebuilt."""
    if os.path.exists(model["path"]):
        return model["path"]
    return BUILDERS[model["key"].split("/", 1)[1]]()


def _kept_fp32(source: object) -> int:
    """Softmax/LogSoftmax/Log nodes amp-convert O2 keeps FP32 on this model (converted again)."""
    _, report = amp_convert.convert(source, level="O2", return_report=True)
    return sum(1 for d in report.nodes if d.op_type in KEPT_OPS and d.precision == "fp32")


def main(path: str) -> int:
    with open(path) as f:
        data = json.load(f)
    rows, misses = 0, {"casts": [], "traffic O2": [], "traffic O1": []}
    for m in data["models"]:
        checks = m["checks"]
        if not all(k in checks and _valid(checks[k]) for k in ("amp_O1", "amp_O2", "occ")):
            continue
        rows += 1
        o1, o2, occ = checks["amp_O1"], checks["amp_O2"], checks["occ"]
        original_casts = m["original"].get("casts", 0)
        added = o2["casts"] - original_casts
        occ_added = occ["casts"] - original_casts
        allowed = occ_added + 2 * _kept_fp32(_source(m))
        if added > allowed:
            misses["casts"].append(f"{m['key']}: +{added} vs allowed +{allowed}")
        for name, check, limit in (("traffic O2", o2, 1.10), ("traffic O1", o1, 1.25)):
            t = check.get("traffic") or {}
            if t.get("all_low") and t["result"] > limit * t["all_low"]:
                ratio = t["result"] / t["all_low"]
                misses[name].append(f"{m['key']}: {ratio:.2f}x all-low (limit {limit})")
    print(f"{rows} models both tools convert validly")
    for name, items in misses.items():
        print(f"{name}: {'MET' if not items else f'missed on {len(items)}'}")
        for item in items:
            print(f"  - {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
