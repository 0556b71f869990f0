"""Regenerate amp_convert/schema/ort_contrib_schemas.json from an installed onnxruntime.

    pip install onnxruntime==<version>
    python scripts/gen_ort_contrib_schemas.py

ONNX Runtime registers operator schemas onnx itself does not define: its contrib ops
(com.microsoft: Attention, GroupQueryAttention, SkipLayerNormalization...) and a few ops in the
ONNX domain (SimplifiedLayerNormalization, LayerNormalization-1 for opsets before 17...). The
converter needs their formal inputs/outputs and type constraints, but must not need onnxruntime
(and its schema API is private: onnxruntime.capi._pybind_state.get_all_operator_schema). This
script, run where onnxruntime is installed, writes them as package data with the ORT version.
An ONNX-domain schema is kept only when the installed onnx has no schema of that op at that
since_version. ORT's internal layout domains (com.ms.internal.nhwc, com.microsoft.nchwc) are
left out: ORT creates those nodes itself, they never reach a model file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amp_convert.schema.contrib import FORMAT, TABLE_PATH, validate_table

KEPT_DOMAINS = ("com.microsoft", "")


def _onnx_knows(name: str, since: int, domain: str) -> bool:
    import onnx.defs

    try:
        return onnx.defs.get_schema(name, since, domain).since_version == since
    except onnx.defs.SchemaError:
        return False


def _formal(p: Any) -> dict[str, Any]:
    option = p.option.name.lower()  # single / optional / variadic
    out: dict[str, Any] = {"name": p.name, "type": p.typeStr, "option": option}
    if option == "variadic" and not p.isHomogeneous:
        out["homogeneous"] = False
    return out


def _entry(s: Any) -> dict[str, Any]:
    source = s.file.split("onnxruntime/", 1)[-1] if "onnxruntime/" in s.file else s.file
    entry: dict[str, Any] = {
        "domain": s.domain,
        "op": s.name,
        "since": s.since_version,
        "inputs": [_formal(p) for p in s.inputs],
        "outputs": [_formal(p) for p in s.outputs],
        "type_constraints": {
            c.type_param_str: sorted(c.allowed_type_strs) for c in s.type_constraints
        },
        "attributes": sorted(s.attributes),
        "source": "onnxruntime/" + source if source else "",
    }
    if s.deprecated:
        entry["deprecated"] = True
    return entry


def build_table() -> dict[str, Any]:
    """The table's content from the installed onnxruntime's registered schemas."""
    import onnx
    import onnxruntime
    from onnxruntime.capi import _pybind_state

    entries = [
        _entry(s)
        for s in _pybind_state.get_all_operator_schema()
        if s.domain in KEPT_DOMAINS
        and not (s.domain == "" and _onnx_knows(s.name, s.since_version, ""))
    ]
    entries.sort(key=lambda e: (e["domain"], e["op"], e["since"]))
    table = {
        "format": FORMAT,
        "ort_version": onnxruntime.__version__,
        "onnx_version": onnx.__version__,
        "source": "onnxruntime.capi._pybind_state.get_all_operator_schema() of the onnxruntime "
        f"{onnxruntime.__version__} wheel; ONNX-domain schemas only where onnx "
        f"{onnx.__version__} has none at that since_version",
        "schemas": entries,
    }
    validate_table(table, "generated table")
    return table


def dump_json(table: dict[str, Any]) -> str:
    """Metadata first, then one line per schema (diffable across ORT versions)."""
    head = {k: v for k, v in table.items() if k != "schemas"}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    rows = ",\n".join(f"  {json.dumps(e)}" for e in table["schemas"])
    return "{\n" + "\n".join(lines) + '\n "schemas": [\n' + rows + "\n ]\n}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(TABLE_PATH), help=f"where to write ({TABLE_PATH})")
    args = ap.parse_args(argv)
    table = build_table()
    Path(args.out).write_text(dump_json(table), encoding="utf-8")
    print(f"{len(table['schemas'])} schemas from onnxruntime {table['ort_version']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
