"""Fuzz the command line: random option combinations with hostile values (issues 16 and 25).

Each case is `amp-convert ...` or `amp-convert validate ...` built from a seed: a model argument
(a real model, one with external data, a missing file, a FIFO, a folder, a text file, a near-miss
command name, a model whose output names hold control characters, one whose external-data
location holds a NUL), then 0-8 options drawn from every option the commands have, each with a
valid or a hostile value (the input model or its data file as an output, an existing file, a
FIFO, a symlink to /dev/null, '', 'dir/', a 250-character name, nan, inf, -1, 1e12, non-ASCII,
bytes that are not UTF-8 (as Python decodes them from a Latin-1 terminal), NUL, ESC sequences,
form feed, U+FFFE...).

Invariants, checked on every case (run in-process with click's CliRunner, so a case costs
milliseconds unless it converts or validates):
* the exit code is 0, 1 or 2, never 3 (internal error) nor anything else;
* no traceback and no "internal error" in the output, and no raw control character (a name from
  a model or the command line must not reach the terminal as an ESC sequence);
* the input files (models, their data, the inputs .npz, the op-list file) are unchanged, and
  the FIFO is still a FIFO.

A share of the cases (``--api-share``, 0.2 by default) calls the Python entry points instead:
``convert``, ``convert_file``, ``validate``, ``auto_convert``, ``MixedPrecisionPass`` and Olive's
``AmpConvert`` pass (bench/_api_fuzz.py). Such a case returns or raises an AmpConvertError of one
line (code 0 or 2 in the tally), never another exception (code 3); in-memory models handed in
are unchanged, and so are the protected files.

``signal_fuzz`` runs real processes (the console entry point) and sends SIGINT, SIGTERM or
SIGKILL at a random moment: the process ends 0/1/2 (it finished first), 130 with the one line
"amp-convert: interrupted" (SIGINT), by SIGTERM (the documented default after clean-up) or by
SIGKILL, never with a traceback; the inputs are unchanged; every output that exists loads (the
old one or the new one), and no temporary file or folder is left. A SIGKILL runs no clean-up at
all: the command is then run again to its end, and nothing may be left but what it wrote (the
rerun removes what the killed run left: stale.py).

Usage: python bench/cli_fuzz.py [--runs 5000] [--seed 0] [--api-share 0.2] [--signals 40]
(prints cases/s and the exit codes)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from amp_convert.commands.cli import cli
from bench._needs import needs
from bench._progress import Every

#: values an option taking a number may get: valid ones, then hostile ones
NUMBERS = (
    ["1e-2", "0.5", "y:1e-3", "0"],
    ["-1", "nan", "inf", "-inf", "1e12", "2", "x", "", "nosuch:1", ":1", "y:", "\u00b2"],
)
#: share of values drawn from the valid list (the rest are hostile)
VALID_SHARE = 0.8
#: text no option can use: a non-UTF-8 byte (surrogate-escaped, as Python decodes argv), NUL,
#: an ESC sequence, other control characters, a noncharacter
HOSTILE_TEXT = ["caf\udce9", "\udcff", "a\x00b", "\x1b[2J", "x\x01y", "\x0c", "n\ufffe", "\x7f"]
#: characters that must never reach the terminal raw (tab and newline are fine)
_RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\ufffe]")


def pick(rng: random.Random, valid: list[str], hostile: list[str]) -> str:
    return rng.choice(valid if rng.random() < VALID_SHARE else hostile)


@dataclass
class Arena:
    """The files a fuzz run plays with (inputs must never change)."""

    root: Path
    model: Path
    external: Path
    candidate: Path
    controls: Path
    nul_location: Path
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


def _model(width: int = 16, names: str = "y") -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((width, width)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            helper.make_node("Softmax", ["m"], [names], name="sm" + names[1:], axis=-1),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info(names, TensorProto.FLOAT, ["batch", width])],
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
    onnx.save_model(
        _model(64), external, save_as_external_data=True, location="e.onnx.data", size_threshold=0
    )
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
    controls = root / "ctl.onnx"
    onnx.save(_model(names="y\x01\x1b[2J\x00\x0c\ufffe"), controls)
    nul_location = root / "nul.onnx"
    proto = onnx.load(str(external), load_external_data=False)
    for t in proto.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = "e.onnx\x00.data"
    onnx.save(proto, nul_location)
    protected = [
        model,
        external,
        root / "e.onnx.data",
        candidate,
        npz,
        lists,
        controls,
        nul_location,
    ]
    return Arena(
        root, model, external, candidate, controls, nul_location, npz, lists, fifo, protected
    )


def _paths(a: Arena, rng: random.Random, output: bool) -> str:
    """A path value: a fresh file or an existing input, or a hostile one (FIFO, folder, '')."""
    r = a.root
    if rng.random() < VALID_SHARE:
        if output:
            return str(r / f"out{rng.randrange(6)}.{rng.choice(['onnx', 'json', 'xml', 'html'])}")
        return rng.choice([str(a.npz), str(a.lists)])
    choices = [
        str(a.model),
        str(a.external),
        str(r / "e.onnx.data"),
        str(a.npz),
        str(a.lists),
        str(a.candidate),
        str(a.fifo),
        str(r / "null"),
        str(r / "dir"),
        str(r / "dir") + "/",
        "",
        str(r / ("n" * 250)),
        str(r / "missing" / "x.json"),
        str(r / "notes.txt"),
        "/dev/null",
        str(r / "\u00fcn\u00efc\u00f6de.json"),
        *(str(r / f"o{t}.json") for t in HOSTILE_TEXT[:4]),
    ]
    if not output:
        choices += [str(r / "bad.txt"), str(r / "nosuch.npz")]
    return rng.choice(choices)


def _convert_options(a: Arena, rng: random.Random) -> list[list[str]]:
    out, inp = (lambda: _paths(a, rng, True)), (lambda: _paths(a, rng, False))
    return [
        ["-o", out()],
        ["--report", out()],
        ["--html", out()],
        ["--junit", out()],
        ["--validation-report", out()],
        ["--force"],
        ["--auto"],
        ["--force-write"],
        ["--validate"],
        ["-q"],
        ["--level", pick(rng, ["O0", "O1", "O2", "O3", "o2"], ["O4", ""])],
        ["--dtype", pick(rng, ["fp16", "bf16", "float16"], ["fp8", ""])],
        [rng.choice(["--keep-io-types", "--no-keep-io-types"])],
        [
            "--fp32-ops",
            pick(rng, ["Softmax", "Exp,Log"], ["Softmx", "", ",", "\u00b2", "a:X", *HOSTILE_TEXT]),
        ],
        ["--fp16-ops", pick(rng, ["MatMul", "Relu"], ["NoSuchOp", " "])],
        [
            "--exclude-nodes",
            pick(rng, ["mm", ".*", "^s"], ["(a+)+$", "[", r"(\w)\1", "(?=x)", *HOSTILE_TEXT]),
        ],
        ["--low-io", pick(rng, ["mm", "^s"], HOSTILE_TEXT)],
        ["--cast-optional-params"],
        ["--op-lists", pick(rng, [str(a.lists)], [str(a.root / "bad.txt"), inp()])],
        ["--target", pick(rng, ["ort-cuda", "none"], ["tensorrt", ""])],
        *_validation_options(a, rng),
    ]


def _validation_options(a: Arena, rng: random.Random) -> list[list[str]]:
    return [
        ["--provider", pick(rng, ["emulate", "cpu", "auto"], ["cuda", "tpu"])],
        [
            "--dim",
            pick(
                rng,
                ["batch=2", "batch=1"],
                ["batch=0", "batch=-1", "batch=1000000000000", "bach=2", "=", "x[0]=2", "batch=x"],
            ),
        ],
        [
            "--inputs",
            pick(rng, [str(a.npz)], [str(a.model), str(a.fifo), "", str(a.root / "nosuch.npz")]),
        ],
        ["--seed", pick(rng, ["0", "7"], ["-1", "x"])],
        ["--runs", pick(rng, ["0", "1"], ["-1", "x"])],
        ["--warmup", pick(rng, ["0", "1"], ["-3"])],
        ["--atol", pick(rng, *NUMBERS)],
        ["--rtol", pick(rng, *NUMBERS)],
        ["--min-cosine", pick(rng, ["0.999", "0.9", "1"], NUMBERS[1])],
        ["--max-nan", pick(rng, ["0", "3", "y:2"], ["-1", "1.5"])],
        ["--top1", pick(rng, ["y"], ["nosuch", "", *HOSTILE_TEXT])],
    ]


def case(a: Arena, seed: int) -> list[str]:
    """The argument list of fuzz case `seed`."""
    rng = random.Random(seed)
    if rng.random() < 0.25:
        hostile = [
            str(a.external),
            str(a.fifo),
            "/dev/zero",
            "",
            str(a.root / "dir"),
            str(a.controls),
            str(a.nul_location),
            str(a.root / "m\udce9.onnx"),
        ]
        args = [
            "validate",
            pick(rng, [str(a.model)], hostile),
            pick(rng, [str(a.candidate)], hostile),
        ]
        pool = [
            *_validation_options(a, rng),
            ["--report", _paths(a, rng, True)],
            ["--junit", _paths(a, rng, True)],
            ["--html", _paths(a, rng, True)],
            ["--force"],
            ["-q"],
        ]
        args += ["--runs", "0"] if rng.random() < 0.8 else []
    else:
        model = pick(
            rng,
            [str(a.model), str(a.external)],
            [
                str(a.root / "no.onnx"),
                str(a.fifo),
                str(a.root / "dir"),
                str(a.root / "notes.txt"),
                "",
                "validat",
                "/dev/zero",
                str(a.controls),
                str(a.nul_location),
                str(a.root / "m\udce9.onnx"),
                "m\x00.onnx",
                "\x1b[2J",
            ],
        )
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


VALIDATION_FLAGS = (
    "--provider",
    "--atol",
    "--rtol",
    "--min-cosine",
    "--inputs",
    "--junit",
    "--validation-report",
    "--runs",
)
OUTPUT_FLAGS = ("-o", "--output", "--report", "--html", "--junit", "--validation-report")


def named_outputs(args: list[str]) -> set[str]:
    """Real paths the arguments name as outputs (the files a case may legitimately replace)."""
    return {
        os.path.realpath(value)
        for flag, value in itertools.pairwise(args)
        if flag in OUTPUT_FLAGS and value and "\x00" not in value
    }


#: the names bench/_api_fuzz.py uses
paths = _paths


def run_api_case(a: Arena, seed: int) -> Outcome:
    """One call of a Python entry point (bench/_api_fuzz.py), checked like a command."""
    import sys as _sys

    from amp_convert.errors import AmpConvertError
    from bench import _api_fuzz

    rng = random.Random(seed)
    label, call, writes = _api_fuzz.api_call(a, rng, _sys.modules[__name__])
    outputs = {os.path.realpath(w) for w in writes if w and "\x00" not in w}
    before = a.digest(outputs)
    code, text, problem = 0, "", None
    try:
        call()
    except AmpConvertError as e:
        code, text = 2, str(e)
        if "\n" in text.strip():
            problem = "an error of more than one line"
    except Exception as e:  # anything else is what the command line reports as exit 3
        code, text = 3, f"{type(e).__name__}: {e}"
        problem = f"uncaught {type(e).__name__}: {str(e)[:300]}"
    if problem is None and a.digest(outputs) != before:
        problem = "an input file changed"
    elif problem is None and not a.intact():
        problem = "the FIFO was replaced"
    return Outcome(["api:", *label], code, text, problem)


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
    elif _RAW_CONTROL.search(text):
        problem = "a raw control character reached the terminal"
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        problem = f"uncaught {type(result.exception).__name__}: {result.exception}"
    elif a.digest(outputs) != before:
        problem = "an input file changed"
    elif not a.intact():
        problem = "the FIFO was replaced"
    return Outcome(args, code, text, problem)


def fuzz(root: Path, seeds: range, api_share: float = 0.0) -> tuple[list[Outcome], Counter[int]]:
    """Run every seed (a share of them as API cases); the failing outcomes and the count of
    each exit code."""
    arena = make_arena(root)
    runner = CliRunner()

    def one(seed: int) -> Outcome:
        if random.Random(seed * 7919 + 1).random() < api_share:
            return run_api_case(arena, seed)
        return run_case(arena, runner, seed)

    return _tally(one(seed) for seed in seeds)


def _tally(outcomes: Iterable[Outcome]) -> tuple[list[Outcome], Counter[int]]:
    """The failing outcomes and the count of each exit code."""
    failures: list[Outcome] = []
    codes: Counter[int] = Counter()
    tick = Every(10.0)
    for outcome in outcomes:
        tick(f"{codes.total()} cases, {len(failures)} failing")
        codes[outcome.code] += 1
        if outcome.problem:
            failures.append(outcome)
    return failures, codes


# ---------------------------------------------------------------- signals at random moments


def _signal_commands(a: Arena, out: Path) -> list[list[str]]:
    """What a signal case runs, `out` its output (an old pair is there for --force)."""
    e, m, c = str(a.external), str(a.model), str(a.candidate)
    return [
        [e, "-o", str(out), "-q"],
        [e, "-o", str(out), "--force", "-q", "--report", str(out.with_suffix(".json"))],
        [
            e,
            "-o",
            str(out),
            "--force",
            "--validate",
            "--provider",
            "emulate",
            "--runs",
            "0",
            "--junit",
            str(out.with_suffix(".xml")),
        ],
        [e, "-o", str(out), "--force", "--auto", "--provider", "emulate", "-q"],
        [
            "validate",
            m,
            c,
            "--provider",
            "emulate",
            "--runs",
            "0",
            "--report",
            str(out.with_suffix(".json")),
        ],
    ]


def _left_behind(folder: Path, temp: Path) -> str | None:
    """What a case must not leave: temporary files, orphan data files, outputs that do not load."""
    names = sorted(p.name for p in folder.iterdir())
    if any(n.startswith(".") for n in names):
        return f"temporary file left: {names}"
    if any(p.name.startswith("amp-") for p in temp.iterdir()):
        return "temporary folder left"
    referenced: set[str] = set()
    for p in folder.glob("*.onnx"):
        try:
            proto = onnx.load(str(p), load_external_data=False)
            onnx.checker.check_model(str(p), full_check=False)
            onnx.load(str(p))  # with its weights: the data file is there and long enough
        except Exception as err:
            return f"{p.name} does not load: {type(err).__name__}: {err}"
        referenced |= {
            x.value for t in proto.graph.initializer for x in t.external_data if x.key == "location"
        }
    orphans = [n for n in names if n.endswith(".data") and n not in referenced]
    return f"orphan data file(s) {orphans}" if orphans else None


def signal_case(a: Arena, seed: int, old_pair: tuple[Path, Path]) -> Outcome:
    """One real process, interrupted by SIGINT or SIGTERM after a random delay."""
    import shutil

    rng = random.Random(seed)
    folder = a.root / f"sig{seed}"
    temp = folder.with_name(folder.name + "-tmp")
    folder.mkdir()
    temp.mkdir()
    out = folder / "o.onnx"
    for p in old_pair:  # an old output pair (o.onnx, o.onnx.data) a --force run replaces
        shutil.copy(p, folder / p.name)
    args = rng.choice(_signal_commands(a, out))
    signum = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
    delay = rng.uniform(0.0, 3.0)
    before = a.digest(set())
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(__file__).parents[1])}
    code = "import sys\nfrom amp_convert.startup import main\nsys.argv[0] = 'amp-convert'\nmain()\n"
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(delay)
    child.send_signal(signum)
    try:
        _, err = child.communicate(timeout=300)
    finally:
        child.kill()
    rc = child.returncode
    label = [f"{signal.Signals(signum).name}@{delay:.2f}s", *args]
    problem = None
    if signum == signal.SIGKILL:  # no clean-up ran: the rerun must leave only its own files
        rerun = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        if rerun.returncode not in (0, 1, 2):
            return Outcome([*label, "(rerun)"], rerun.returncode, rerun.stderr, "rerun failed")
        err = err + rerun.stderr
    if rc not in (0, 1, 2, 130, -signal.SIGTERM, -signal.SIGKILL):
        problem = f"exit code {rc}"
    elif "Traceback" in err or "internal error" in err:
        problem = "traceback or internal error"
    elif rc == 130 and (
        err.strip().splitlines()[-1:] != ["amp-convert: interrupted"]
        or err.count("interrupted") != 1
    ):
        problem = "130 without the one line"
    elif rc == -signal.SIGTERM and signum != signal.SIGTERM:
        problem = "died by SIGTERM it was not sent"
    elif rc == -signal.SIGKILL and signum != signal.SIGKILL:
        problem = "died by SIGKILL it was not sent"
    elif a.digest(set()) != before:
        problem = "an input file changed"
    else:
        problem = _left_behind(folder, temp)
    return Outcome(label, rc, err, problem)


def signal_fuzz(root: Path, seeds: range) -> tuple[list[Outcome], Counter[int]]:
    """Run every seed as an interrupted real process (signal_case)."""
    from amp_convert import convert_file

    arena = make_arena(root)
    old = root / "old" / "o.onnx"
    old.parent.mkdir()
    convert_file(arena.external, old, level="O1")
    pair = (old, old.with_name("o.onnx.data"))
    return _tally(signal_case(arena, seed, pair) for seed in seeds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--signals", type=int, default=0, help="also N interrupted processes")
    parser.add_argument(
        "--api-share",
        type=float,
        default=0.2,
        help="share of the cases that call the Python entry points",
    )
    args = parser.parse_args()
    needs("onnxruntime")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="amp-cli-fuzz-") as tmp:
        start = time.perf_counter()
        seeds = range(args.seed, args.seed + args.runs)
        failures, codes = fuzz(Path(tmp) / "args", seeds, args.api_share)
        seconds = time.perf_counter() - start
        print(
            f"{args.runs} cases ({args.api_share:.0%} API and pass calls) in {seconds:.1f} s "
            f"({args.runs / seconds:.1f}/s); exit codes "
            + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items()))
        )
        if args.signals:
            start = time.perf_counter()
            seeds = range(args.seed, args.seed + args.signals)
            more, codes = signal_fuzz(Path(tmp) / "signals", seeds)
            seconds = time.perf_counter() - start
            print(
                f"{args.signals} interrupted processes in {seconds:.1f} s; exit codes "
                + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items()))
            )
            failures += more
    for f in failures[:20]:
        print(f"FAIL {f.problem}: amp-convert {' '.join(repr(x) for x in f.args)}")
        print("  " + f.output.strip().replace("\n", "\n  ")[-2000:])
    print(f"{len(failures)} failing case(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
