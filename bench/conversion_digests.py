"""A digest of every conversion's output model and report, to prove a refactor changed nothing.

    PYTHONPATH=. python bench/conversion_digests.py --blocks DIR --out after.json
    PYTHONPATH=OLD_CHECKOUT python bench/conversion_digests.py --models DIR --out before.json
    python bench/conversion_digests.py --diff before.json after.json

Converts every model of the onnx wheel's backend groups and of models/blocks.py (written to DIR
once with --blocks, then read from DIR with --models by the other checkout, so both convert the
same files) at O1/O2/O3 x fp16/bf16 in memory, and records a SHA-256 of the serialised result and
of the report's conversion facts (REPORT_KEYS: node decisions and reasons, casts, weights,
folds, traffic, warnings). Equal digests mean byte-identical models and
reports; an error is recorded as its message. Unlike compare.py, nothing here depends on the
validator, so a run is comparable across checkouts whose validators differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repo root importable, AFTER PYTHONPATH, so
    sys.path.append(str(Path(__file__).resolve().parent.parent))  # PYTHONPATH=OLD picks the code

REPO = Path(__file__).resolve().parent.parent
LEVELS = ("O1", "O2", "O3")
DTYPES = ("fp16", "bf16")
#: the report's conversion facts (its framing, timings and sizes left out)
REPORT_KEYS = (
    "nodes",
    "tensors",
    "casts",
    "folds",
    "traffic",
    "warnings",
    "casts_before",
    "casts_after",
    "initializers_converted",
    "initializers_kept",
    "already_converted",
    "target",
    "level",
    "dtype",
)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def digests(paths: dict[str, Path]) -> dict[str, str]:
    import onnx

    import amp_convert

    start = last = time.perf_counter()
    out: dict[str, str] = {}
    for i, (key, path) in enumerate(sorted(paths.items())):
        proto = onnx.load(str(path))
        for level in LEVELS:
            for dtype in DTYPES:
                name = f"{key} {level} {dtype}"
                if time.perf_counter() - last >= 10:  # inline: old checkouts lack bench._progress
                    last = time.perf_counter()
                    line = f"[{last - start:7.1f} s] model {i + 1} of {len(paths)}: {name}"
                    print(line, file=sys.stderr, flush=True)
                try:
                    model, report = amp_convert.convert(
                        proto, level=level, dtype=dtype, return_report=True
                    )
                except Exception as e:
                    out[name] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    continue
                data = {k: v for k, v in report.to_dict().items() if k in REPORT_KEYS}
                report_json = json.dumps(data, sort_keys=True).encode()
                out[name] = f"{_digest(model.SerializeToString())} {_digest(report_json)}"
    return out


def _paths(models: Path | None, blocks: Path | None) -> dict[str, Path]:
    if str(REPO) not in sys.path:  # after PYTHONPATH: amp_convert comes from the checkout named
        sys.path.append(str(REPO))
    from bench import _corpus as corpus

    paths = {f"{group}/{name}": path for group, name, path in corpus.wheel_models()}
    if blocks is not None:
        blocks.mkdir(parents=True, exist_ok=True)
        for name, path in corpus.write_blocks(blocks, lambda _: True):
            paths[f"generated/{name}"] = path
    if models is not None:
        paths |= {f"generated/{p.stem}": p for p in sorted(models.glob("*.onnx"))}
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=Path, help="write models/blocks.py models here and use them")
    p.add_argument("--models", type=Path, help="also convert every .onnx file of this folder")
    p.add_argument("--out", type=Path, help="write the digests as JSON")
    p.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = p.parse_args(argv)
    if args.diff:
        before, after = (json.loads(f.read_text()) for f in args.diff)
        changed = [k for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
        for key in changed:
            print(f"{key}: {before.get(key)} -> {after.get(key)}")
        print(f"{len(before)} conversions before, {len(after)} after, {len(changed)} differ")
        return 1 if changed else 0
    result = digests(_paths(args.models, args.blocks))
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    import amp_convert

    errors = sum(v.startswith("error") for v in result.values())
    print(f"{len(result)} conversions, {errors} refused, by {Path(amp_convert.__file__).parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
