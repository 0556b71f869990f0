"""Regenerate amp_convert/targets/ort_{cuda,cpu}_kernels.json from ORT's OperatorKernels.md.

    python scripts/gen_ort_cuda_kernels.py --doc OperatorKernels.md --ort-version 1.25.0 \\
        --source "microsoft/onnxruntime@<commit> docs/OperatorKernels.md"
    python scripts/gen_ort_cuda_kernels.py --git-dir /path/to/onnxruntime.git [--rev HEAD]

The second form reads docs/OperatorKernels.md and VERSION_NUMBER from a clone (bare or not) at
`--rev` and records the commit. Both the CUDA table and the CPU table are written: the CPU one is
the CUDA table's fallback (ORT places there what CUDA does not take, which decides whether a node
with a function body gets inlined). The markdown merges an op's typed registrations per opset range,
and some rules live in kernel code, not in the registry; EXTRA_CONSTRAINTS below adds those back,
each with its reason and the ORT source it was read from. On a new ORT version, re-read those
sources: the script warns when a constraint names an op/range the new table no longer has.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amp_convert.targets.opkernel_doc import parse_operator_kernels
from amp_convert.targets.table_format import FORMAT, validate_table

OUT_DIR = Path(__file__).resolve().parent.parent / "amp_convert" / "targets"

_LN_COMBOS = [
    ["float", "float", "float"],
    ["double", "double", "double"],
    ["float16", "float", "float16"],
    ["float", "float", "float16"],
    ["float16", "float", "float"],
    ["bfloat16", "float", "bfloat16"],
]

#: Rules the markdown cannot express (it shows the union of an op's typed registrations).
EXTRA_CONSTRAINTS: list[dict[str, Any]] = [
    {
        "op": "BatchNormalization",
        "domain": "ai.onnx",
        "since": 14,
        "until": 14,
        "kind": "same_type",
        "type_params": ["T", "U"],
        "reason": "the CUDA kernel is registered once per T with U bound to the same T, so X, "
        "scale, B, mean and var need one float type (FP16 X with FP32 statistics falls back to "
        "the CPU); onnxruntime/core/providers/cuda/nn/batch_norm.cc",
    },
    {
        "op": "BatchNormalization",
        "domain": "ai.onnx",
        "since": 15,
        "until": None,
        "kind": "same_type",
        "type_params": ["T", "T1", "T2"],
        "reason": "the CUDA kernel is registered once per T with T1 and T2 bound to the same T, so "
        "X, scale, B, mean and var need one float type (FP16 X with FP32 scale/bias/statistics "
        "falls back to the CPU); onnxruntime/core/providers/cuda/nn/batch_norm.cc",
    },
    {
        "op": "BatchNormalization",
        "domain": "com.ms.internal.nhwc",
        "since": 15,
        "until": None,
        "kind": "same_type",
        "type_params": ["T", "T1", "T2"],
        "reason": "same registration as the NCHW kernel (batch_norm.cc, NHWC=true)",
    },
    {
        "op": "LayerNormalization",
        "domain": "ai.onnx",
        "since": 1,
        "until": 16,
        "kind": "combinations",
        "type_params": ["T", "U", "V"],
        "allowed": _LN_COMBOS,
        "reason": "ORT's own LayerNormalization-1 (used below opset 17) is registered for these "
        "(X, Mean/InvStdDev, Scale/B/Y) triples only; onnxruntime/contrib_ops/cuda/layer_norm.cc",
    },
    {
        "op": "SimplifiedLayerNormalization",
        "domain": "ai.onnx",
        "since": 1,
        "until": None,
        "kind": "combinations",
        "type_params": ["T", "U", "V"],
        "allowed": _LN_COMBOS,
        "reason": "registered for these (X, inv_std_var, scale/Y) triples only; "
        "onnxruntime/contrib_ops/cuda/layer_norm.cc",
    },
    {
        "op": "RMSNormalization",
        "domain": "ai.onnx",
        "since": 23,
        "until": None,
        "kind": "combinations",
        "type_params": ["T", "V"],
        "allowed": [
            ["float", "float"],
            ["float", "float16"],
            ["float16", "float16"],
            ["float16", "float"],
            ["bfloat16", "bfloat16"],
            ["double", "double"],
        ],
        "reason": "registered for these (X, scale/Y) pairs only: BF16 X needs BF16 scale; "
        "onnxruntime/core/providers/cuda/nn/rms_norm.cc",
    },
    {
        "op": "Attention",
        "domain": "ai.onnx",
        "since": 23,
        "until": None,
        "kind": "combinations",
        "type_params": ["T1", "T2", "U"],
        "allowed": [[t, t, u] for t in ("float", "float16", "bfloat16") for u in ("bool", t)],
        "reason": "registered once per T with T1 = T2 = T and the mask U either bool or T: Q/K "
        "and V need one float type, a float mask the same type; "
        "onnxruntime/core/providers/cuda/llm/attention.cc",
    },
    {
        "op": "OneHot",
        "domain": "ai.onnx",
        "since": 11,
        "until": None,
        "kind": "combinations",
        "type_params": ["T1", "T2", "T3"],
        "allowed": [
            ["int64", "int64", "int64"],
            ["int64", "int64", "float"],
            ["int32", "int32", "float"],
            ["int64", "int64", "float16"],
            ["int32", "int32", "float16"],
        ],
        "reason": "registered for these (indices, depth, values) triples only; "
        "onnxruntime/core/providers/cuda/tensor/onehot.cc",
    },
    {
        "op": "Resize",
        "domain": "ai.onnx",
        "since": 11,
        "until": None,
        "kind": "allowed_types",
        "type_params": ["T2"],
        "allowed": ["float"],
        "reason": "the kernel leaves roi (T2) unconstrained, but UpsampleBase::ParseRoiData reads "
        "it with Data<float>(), so an FP16/double roi fails at run time; "
        "onnxruntime/core/providers/cpu/tensor/upsamplebase.h",
    },
]

#: Ops ORT resolves while loading the model, so they need no kernel.
LOAD_TIME_OPS: list[dict[str, str]] = [
    {
        "op": "Constant",
        "domain": "ai.onnx",
        "reason": "ORT turns Constant nodes into initializers when it builds the graph "
        "(onnxruntime/core/graph/graph.cc), so they need no kernel and never run on the CPU",
    },
]


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True
    ).stdout


#: target -> (provider section, display name, extra constraints, fallback target)
TABLES: dict[str, tuple[str, str, list[dict[str, Any]], str | None]] = {
    "ort-cuda": ("CUDAExecutionProvider", "ORT CUDA", EXTRA_CONSTRAINTS, "ort-cpu"),
    "ort-cpu": ("CPUExecutionProvider", "ORT CPU", [], None),
}


def build_table(
    doc_text: str, ort_version: str, source: dict[str, Any], target: str = "ort-cuda"
) -> dict[str, Any]:
    """One table file's content: the provider's parsed kernels plus its extra constraints."""
    provider, display, constraints, fallback = TABLES[target]
    kernels = parse_operator_kernels(doc_text, provider)
    for c in constraints:
        entries = kernels.get(c["domain"], {}).get(c["op"], {}).get("kernels", [])
        if not any(
            k["since"] <= (c["until"] or 10**6) and c["since"] <= (k["until"] or 10**6)
            for k in entries
        ):
            print(f"warning: no {c['domain']} {c['op']} kernel overlaps {c}", file=sys.stderr)
    table = {
        "format": FORMAT,
        "target": target,
        "display": display,
        "provider": provider,
        "ort_version": ort_version,
        "source": source,
        "fallback": fallback,
        "kernels": kernels,
        "constraints": constraints,
        "load_time_ops": LOAD_TIME_OPS,
    }
    validate_table(table, f"generated {target} table")
    return table


def dump_json(table: dict[str, Any]) -> str:
    """Indented JSON, metadata and constraints first, one line per kernel range (diffable)."""
    head = {k: v for k, v in table.items() if k != "kernels"}
    text = json.dumps(head, indent=1)
    flat = re.compile(r'\[\s+("[^"\n]*"(?:,\s+"[^"\n]*")*)\s+\]')
    text = flat.sub(lambda m: "[" + re.sub(r'",\s+"', '", "', m[1]) + "]", text)
    domains = []
    for domain, ops in table["kernels"].items():
        entries = []
        for op, entry in ops.items():
            kernels = ",\n".join(f"     {json.dumps(k)}" for k in entry["kernels"])
            entries.append(
                f'   {json.dumps(op)}: {{\n    "params": {json.dumps(entry["params"])},\n'
                f'    "kernels": [\n{kernels}\n    ]\n   }}'
            )
        domains.append(f"  {json.dumps(domain)}: {{\n" + ",\n".join(entries) + "\n  }")
    body = ' "kernels": {\n' + ",\n".join(domains) + "\n }"
    return text[: text.rindex("}")].rstrip() + ",\n" + body + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", help="path to OperatorKernels.md")
    ap.add_argument("--ort-version", help="ORT version the document belongs to (VERSION_NUMBER)")
    ap.add_argument("--source", default="", help="where the document came from (repo@commit)")
    ap.add_argument("--git-dir", help="an onnxruntime clone: read the doc and version from it")
    ap.add_argument("--rev", default="HEAD", help="revision to read with --git-dir")
    ap.add_argument("--out-dir", default=str(OUT_DIR), help=f"where to write (default {OUT_DIR})")
    args = ap.parse_args(argv)
    if args.git_dir:
        commit = _git(args.git_dir, "rev-parse", args.rev).strip()
        text = _git(args.git_dir, "show", f"{commit}:docs/OperatorKernels.md")
        version = args.ort_version or _git(args.git_dir, "show", f"{commit}:VERSION_NUMBER").strip()
        date = _git(args.git_dir, "show", "-s", "--format=%cI", commit).strip()
        source = {
            "repository": args.source or "microsoft/onnxruntime",
            "path": "docs/OperatorKernels.md",
            "commit": commit,
            "commit_date": date,
        }
    elif args.doc and args.ort_version:
        text = Path(args.doc).read_text(encoding="utf-8")
        version = args.ort_version
        source = {"repository": args.source, "path": "docs/OperatorKernels.md"}
    else:
        ap.error("give --git-dir, or --doc with --ort-version")
    for target in TABLES:
        table = build_table(text, version, source, target)
        out = Path(args.out_dir) / f"{target.replace('-', '_')}_kernels.json"
        out.write_text(dump_json(table), encoding="utf-8")
        n = sum(len(op["kernels"]) for ops in table["kernels"].values() for op in ops.values())
        print(f"wrote {out}: {n} kernel ranges, ORT {table['ort_version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
