"""Fuzz the converter with thousands of random valid graphs (models/random_graphs.py).

Each seed gives one graph (1-10 ops from ~45 op types, opsets 13-23, If/Loop bodies, some saved
with external data). It is converted at O1/O2/O3 to FP16 and to BF16, and each result must:
convert without an exception (see ACCEPTED_ERRORS), pass ``onnx.checker.check_model(full_check)``,
load in ONNX Runtime CPU (FP16; ORT CPU has no BF16 kernels) and match the original under
``amp_convert.validate(provider="emulate")`` within the graph's proven error bound.

Prints how many ran and passed, and one line per distinct failure (stage, exception type and first
line, with names and numbers masked) with its count and the first seed that shows it. Reproduce a
seed with ``--seed S --examples 1 -v`` or write its model with
``python -m models.random_graphs --seed S -o case.onnx``.

Run from the repository root:
    PYTHONPATH=. python bench/fuzz.py [--examples 2000] [--seed 0] [--minutes 20]
        [--levels O1,O2,O3] [--dtypes fp16,bf16] [--json FILE] [-v]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnx

import amp_convert
from amp_convert.errors import AmpConvertError
from bench._needs import needs
from bench._progress import Every
from models.random_graphs import FuzzCase, case_from_seed, check_case, save_with_external_data

LEVELS = ("O1", "O2", "O3")
DTYPES = ("fp16", "bf16")

#: AmpConvertErrors that are a correct answer for a valid FP32 model, as (regex, why). The
#: generated models are valid, standard-domain FP32 graphs, so the list is empty: any
#: AmpConvertError on them (VerificationError above all: the converter built an invalid model and
#: refused to write it) is a converter defect and counts as a failure.
ACCEPTED_ERRORS: list[tuple[str, str]] = []


class FuzzFailure(AssertionError):
    """One broken promise, with the stage it broke at."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def _ort_session(model: onnx.ModelProto | str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def check_conversion(
    case: FuzzCase,
    level: str,
    dtype: str,
    workdir: Path,
    mutate: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None,
) -> str | None:
    """Convert ``case`` at ``level``/``dtype`` and check every promise; raise FuzzFailure.

    Returns None on success, or the message of an accepted AmpConvertError. ``mutate`` changes
    the converted model before the checks (to prove that they catch a broken conversion).
    """
    opts = {"level": level, "dtype": dtype, "keep_io_types": case.keep_io_types}
    ref: onnx.ModelProto | str = case.model
    try:
        if case.external:  # through files: weights in external data next to the model
            src, dst = workdir / f"src_{level}_{dtype}.onnx", workdir / f"out_{level}_{dtype}.onnx"
            save_with_external_data(case.model, src)
            amp_convert.convert_file(src, dst, force=True, **opts)
            ref, out = str(src), str(dst)
        else:
            out = amp_convert.convert(case.model, **opts)
            if mutate is not None:
                out = mutate(out)
    except AmpConvertError as e:
        for pattern, _why in ACCEPTED_ERRORS:
            if re.search(pattern, str(e)):
                return str(e)
        raise FuzzFailure("convert-error", _first_line(e)) from e
    except Exception as e:
        raise FuzzFailure("convert-crash", _first_line(e)) from e
    try:
        onnx.checker.check_model(out, full_check=True)
    except Exception as e:
        raise FuzzFailure("checker", _first_line(e)) from e
    if dtype == "fp16":  # ORT CPU has FP16 fallbacks for every op; it has no BF16 kernels
        try:
            _ort_session(out)
        except Exception as e:
            raise FuzzFailure("ort-load", _first_line(e)) from e
    per_output = {name: {"atol": case.tolerance(name, dtype), "rtol": 0.0} for name in case.bounds}
    try:
        report = amp_convert.validate(
            ref,
            out,
            provider="emulate",
            inputs=case.feeds,
            runs=0,
            thresholds={"max_nan": 0, "per_output": per_output},
        )
    except Exception as e:
        raise FuzzFailure("validate-error", _first_line(e)) from e
    if not report.passed:
        bad = [o for o in report.outputs if not o.passed]
        worst = "; ".join(
            f"{o.name}: max_abs {o.max_abs:.3g} > atol {o.thresholds.get('atol'):.3g}"
            if o.max_abs is not None and o.kind == "float"
            else f"{o.name}: {', '.join(o.failures)}"
            for o in bad
        )
        raise FuzzFailure("mismatch", worst)
    return None


_MASK = re.compile(r"/\S+|(?<![A-Za-z])\d+(\.\d+)?(e-?\d+)?|_\d+")


def failure_key(stage: str, message: str) -> str:
    """Failures that differ only in value names and numbers are the same finding."""
    return f"{stage}: {_MASK.sub('#', message)}"[:240]


@dataclass
class Finding:
    key: str
    count: int = 0
    seeds: list[int] = field(default_factory=list)
    example: str = ""
    where: str = ""


def run(
    seeds: Sequence[int],
    levels: Sequence[str],
    dtypes: Sequence[str],
    deadline: float | None,
    verbose: bool,
) -> dict:
    findings: dict[str, Finding] = {}
    tick = Every(10.0)
    ran = passed = conversions = conv_passed = accepted = 0
    start = time.perf_counter()
    for seed in seeds:
        if deadline is not None and time.perf_counter() > deadline:
            break
        ran += 1
        ok = True
        try:
            case = case_from_seed(seed)
            check_case(case)
        except Exception as e:  # the generator broke its own promise: not a converter finding
            _note(findings, seed, "generator", _first_line(e), "-")
            continue
        with tempfile.TemporaryDirectory(prefix="ampfuzz") as tmp:
            for dtype in dtypes:
                for level in levels:
                    conversions += 1
                    try:
                        msg = check_conversion(case, level, dtype, Path(tmp))
                        conv_passed += 1
                        accepted += msg is not None
                    except FuzzFailure as f:
                        ok = False
                        _note(findings, seed, f.stage, f.message, f"{level} {dtype}")
                        if verbose:
                            print(f"seed {seed} {level} {dtype}: {f}\n  {case.describe()}")
        passed += ok
        tick(f"{ran} of {len(seeds)} graphs, {passed} passed, {len(findings)} findings")
        if verbose and ok:
            print(f"seed {seed}: ok ({case.describe()})")
    return {
        "cases_run": ran,
        "cases_passed": passed,
        "conversions": conversions,
        "conversions_passed": conv_passed,
        "accepted_errors": accepted,
        "seconds": round(time.perf_counter() - start, 1),
        "findings": [f.__dict__ for f in sorted(findings.values(), key=lambda f: -f.count)],
    }


def _note(findings: dict[str, Finding], seed: int, stage: str, message: str, where: str) -> None:
    key = failure_key(stage, message)
    f = findings.setdefault(key, Finding(key, example=f"{stage}: {message}", where=where))
    f.count += 1
    if seed not in f.seeds and len(f.seeds) < 10:
        f.seeds.append(seed)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=200, help="number of seeds to run")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--minutes", type=float, default=None, help="stop after this long")
    p.add_argument("--levels", default=",".join(LEVELS))
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--json", type=Path, help="write the summary as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    needs("onnxruntime")
    np.seterr(all="ignore")
    deadline = time.perf_counter() + 60 * args.minutes if args.minutes else None
    seeds = range(args.seed, args.seed + args.examples)
    levels, dtypes = args.levels.split(","), args.dtypes.split(",")
    summary = run(seeds, levels, dtypes, deadline, args.verbose)
    print(
        f"ran {summary['cases_run']} graphs (seeds {args.seed}..), "
        f"{summary['conversions']} conversions ({'/'.join(levels)} x {'/'.join(dtypes)}) "
        f"in {summary['seconds']} s: {summary['cases_passed']} graphs passed everything, "
        f"{summary['conversions_passed']} conversions passed "
        f"({summary['accepted_errors']} of them an accepted AmpConvertError)"
    )
    findings = summary["findings"]
    print(f"{len(findings)} distinct failure(s)")
    for f in findings:
        seeds_txt = ", ".join(map(str, f["seeds"]))
        print(f"- {f['count']}x [{f['where']}] {f['example']}\n    seeds: {seeds_txt}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
