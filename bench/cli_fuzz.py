"""Fuzz the command line: random option combinations with hostile values (issue 16).

Each case is `amp-convert ...` or `amp-convert validate ...` built from a seed: a model argument
(a real model, one with external data, a missing file, a FIFO, a folder, a text file, a near-miss
command name), then 0-8 options drawn from every option the commands have, each with a valid or a
hostile value (the input model or its data file as an output, an existing file, a FIFO, a
symlink to /dev/null, '', 'dir/', a 250-character name, nan, inf, -1, 1e12, non-ASCII...).

Invariants, checked on every case (run in-process with click's CliRunner, so a case costs
milliseconds unless it converts or validates):
* the exit code is 0, 1 or 2, never 3 (internal error) nor anything else;
* no traceback and no "internal error" in the output;
* the input files (models, their data, the inputs .npz, the op-list file) are unchanged, and
  the FIFO is still a FIFO.

Usage: python bench/cli_fuzz.py [--runs 5000] [--seed 0]  (prints cases/s and the exit codes)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import stat
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amp_convert.cli import cli  # noqa: E402

#: values an option taking a number may get: valid ones, then hostile ones
NUMBERS = (
    ["1e-2", "0.5", "y:1e-3", "0"],
    ["-1", "nan", "inf", "-inf", "1e12", "2", "x", "", "nosuch:1", ":1", "y:", "\u00b2"],
)
#: share of values drawn from the valid list (the rest are hostile)
VALID_SHARE = 0.8


def pick(rng: random.Random, valid: list[str], hostile: list[str]) -> str:
    return rng.choice(valid if rng.random() < VALID_SHARE else hostile)


@dataclass
class Arena:
    """The files a fuzz run plays with (inputs must never change)."""

    root: Path
    model: Path
    external: Path
    candidate: Path
    npz: Path
    lists: Path
    fifo: Path
    protected: list[Path]

    def digest(self, outputs: set[str]) -> str:
        """The protected files' contents, less those the case names as outputs (may change)."""
        h = hashlib.sha256()
        for p in self.protected:
            if os.path.realpath(p) not in outputs:
                h.update(p.name.encode() + (p.read_bytes() if p.exists() else b"<gone>"))
        return h.hexdigest()

    def intact(self) -> bool:
        return stat.S_ISFIFO(os.lstat(self.fifo).st_mode)


def _model(width: int = 16) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((width, width)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Softmax", ["m"], ["y"], name="sm", axis=-1),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def make_arena(root: Path) -> Arena:
    """Models, an inputs file, an op-list file, a FIFO and a few hostile entries under `root`."""
    from amp_convert import convert_file

    root.mkdir(parents=True, exist_ok=True)
    model = root / "m.onnx"
    onnx.save(_model(), model)
    external = root / "e.onnx"
    onnx.save_model(_model(64), external, save_as_external_data=True,
                    location="e.onnx.data", size_threshold=0)  # fmt: skip
    candidate = root / "c.onnx"
    convert_file(model, candidate)
    npz = root / "in.npz"
    np.savez(npz, x=np.ones((1, 16), np.float32))
    lists = root / "lists.txt"
    lists.write_text("[deny]\nSoftmax keep it FP32\n[rules]\nPow 1 > 2 deny big exponent\n")
    (root / "bad.txt").write_bytes(b"[deny]\n\xff\xfe x\n")
    (root / "notes.txt").write_text("not a model\n")
    (root / "dir").mkdir(exist_ok=True)
    fifo = root / "fifo"
    os.mkfifo(fifo)
    (root / "null").symlink_to("/dev/null")
    protected = [model, external, root / "e.onnx.data", candidate, npz, lists]
    return Arena(root, model, external, candidate, npz, lists, fifo, protected)


def _paths(a: Arena, rng: random.Random, output: bool) -> str:
    """A path value: a fresh file or an existing input, or a hostile one (FIFO, folder, '')."""
    r = a.root
    if rng.random() < VALID_SHARE:
        if output:
            return str(r / f"out{rng.randrange(6)}.{rng.choice(['onnx', 'json', 'xml', 'html'])}")
        return rng.choice([str(a.npz), str(a.lists)])
    choices = [
        str(a.model), str(a.external), str(r / "e.onnx.data"), str(a.npz), str(a.lists),
        str(a.candidate), str(a.fifo), str(r / "null"), str(r / "dir"), str(r / "dir") + "/",
        "", str(r / ("n" * 250)), str(r / "missing" / "x.json"), str(r / "notes.txt"),
        "/dev/null", str(r / "\u00fcn\u00efc\u00f6de.json"),
    ]  # fmt: skip
    if not output:
        choices += [str(r / "bad.txt"), str(r / "nosuch.npz")]
    return rng.choice(choices)


def _convert_options(a: Arena, rng: random.Random) -> list[list[str]]:
    out, inp = (lambda: _paths(a, rng, True)), (lambda: _paths(a, rng, False))
    return [
        ["-o", out()], ["--report", out()], ["--html", out()], ["--junit", out()],
        ["--validation-report", out()], ["--force"], ["--auto"], ["--force-write"],
        ["--validate"], ["-q"],
        ["--level", pick(rng, ["O0", "O1", "O2", "O3", "o2"], ["O4", ""])],
        ["--dtype", pick(rng, ["fp16", "bf16", "float16"], ["fp8", ""])],
        [rng.choice(["--keep-io-types", "--no-keep-io-types"])],
        ["--fp32-ops", pick(rng, ["Softmax", "Exp,Log"], ["Softmx", "", ",", "\u00b2", "a:X"])],
        ["--fp16-ops", pick(rng, ["MatMul", "Relu"], ["NoSuchOp", " "])],
        ["--exclude-nodes", pick(rng, ["mm", ".*", "^s"], ["(a+)+$", "[", r"(\w)\1", "(?=x)"])],
        ["--cast-optional-params"],
        ["--op-lists", pick(rng, [str(a.lists)], [str(a.root / "bad.txt"), inp()])],
        ["--target", pick(rng, ["ort-cuda", "none"], ["tensorrt", ""])],
        *_validation_options(a, rng),
    ]  # fmt: skip


def _validation_options(a: Arena, rng: random.Random) -> list[list[str]]:
    return [
        ["--provider", pick(rng, ["emulate", "cpu", "auto"], ["cuda", "tpu"])],
        ["--dim", pick(rng, ["batch=2", "batch=1"], ["batch=0", "batch=-1", "batch=1000000000000",
                                                    "bach=2", "=", "x[0]=2", "batch=x"])],
        ["--inputs", pick(rng, [str(a.npz)], [str(a.model), str(a.fifo), "",
                                             str(a.root / "nosuch.npz")])],
        ["--seed", pick(rng, ["0", "7"], ["-1", "x"])],
        ["--runs", pick(rng, ["0", "1"], ["-1", "x"])],
        ["--warmup", pick(rng, ["0", "1"], ["-3"])],
        ["--atol", pick(rng, *NUMBERS)], ["--rtol", pick(rng, *NUMBERS)],
        ["--min-cosine", pick(rng, ["0.999", "0.9", "1"], NUMBERS[1])],
        ["--max-nan", pick(rng, ["0", "3", "y:2"], ["-1", "1.5"])],
        ["--top1", pick(rng, ["y"], ["nosuch", ""])],
    ]  # fmt: skip


def case(a: Arena, seed: int) -> list[str]:
    """The argument list of fuzz case `seed`."""
    rng = random.Random(seed)
    if rng.random() < 0.25:
        hostile = [str(a.external), str(a.fifo), "/dev/zero", "", str(a.root / "dir")]
        args = ["validate", pick(rng, [str(a.model)], hostile),
                pick(rng, [str(a.candidate)], hostile)]  # fmt: skip
        pool = [*_validation_options(a, rng), ["--report", _paths(a, rng, True)],
                ["--junit", _paths(a, rng, True)], ["--html", _paths(a, rng, True)],
                ["--force"], ["-q"]]  # fmt: skip
        args += ["--runs", "0"] if rng.random() < 0.8 else []
    else:
        model = pick(rng, [str(a.model), str(a.external)],
                     [str(a.root / "no.onnx"), str(a.fifo), str(a.root / "dir"),
                      str(a.root / "notes.txt"), "", "validat", "/dev/zero"])  # fmt: skip
        args = [model]
        pool = _convert_options(a, rng)
    chosen = rng.sample(pool, rng.randrange(0, min(6, len(pool)) + 1))
    for option in chosen:
        args += option
    validating = {"--validate", "--auto"} & set(args)
    wants = {o[0] for o in chosen} & set(VALIDATION_FLAGS)
    if args[0] != "validate" and not validating and wants and rng.random() < 0.7:
        args.append("--validate")  # mostly give validation options their companion
    return args


@dataclass
class Outcome:
    args: list[str]
    code: int
    output: str
    problem: str | None


VALIDATION_FLAGS = ("--provider", "--atol", "--rtol", "--min-cosine", "--inputs", "--junit",
                    "--validation-report", "--runs")  # fmt: skip
OUTPUT_FLAGS = ("-o", "--output", "--report", "--html", "--junit", "--validation-report")


def named_outputs(args: list[str]) -> set[str]:
    """Real paths the arguments name as outputs (the files a case may legitimately replace)."""
    return {
        os.path.realpath(value)
        for flag, value in zip(args, args[1:], strict=False)
        if flag in OUTPUT_FLAGS and value
    }


def run_case(a: Arena, runner: CliRunner, seed: int) -> Outcome:
    args = case(a, seed)
    outputs = named_outputs(args)
    before = a.digest(outputs)
    result = runner.invoke(cli, args)
    code = result.exit_code if isinstance(result.exit_code, int) else -1
    text = result.output
    problem = None
    if code not in (0, 1, 2):
        problem = f"exit code {code}"
    elif "Traceback" in text or "internal error" in text:
        problem = "traceback or internal error in the output"
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        problem = f"uncaught {type(result.exception).__name__}: {result.exception}"
    elif a.digest(outputs) != before:
        problem = "an input file changed"
    elif not a.intact():
        problem = "the FIFO was replaced"
    return Outcome(args, code, text, problem)


def fuzz(root: Path, seeds: range) -> tuple[list[Outcome], Counter[int]]:
    """Run every seed; returns the failing outcomes and the count of each exit code."""
    arena = make_arena(root)
    runner = CliRunner()
    failures: list[Outcome] = []
    codes: Counter[int] = Counter()
    for seed in seeds:
        outcome = run_case(arena, runner, seed)
        codes[outcome.code] += 1
        if outcome.problem:
            failures.append(outcome)
    return failures, codes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="amp-cli-fuzz-") as tmp:
        start = time.perf_counter()
        failures, codes = fuzz(Path(tmp), range(args.seed, args.seed + args.runs))
        seconds = time.perf_counter() - start
    print(f"{args.runs} cases in {seconds:.1f} s ({args.runs / seconds:.1f}/s); exit codes "
          + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items())))  # fmt: skip
    for f in failures[:20]:
        print(f"FAIL {f.problem}: amp-convert {' '.join(repr(x) for x in f.args)}")
        print("  " + f.output.strip().replace("\n", "\n  ")[-2000:])
    print(f"{len(failures)} failing case(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
