"""Issue 18's sweep: --auto and validate --html on every model; never exit 2/3 on one that converts.

For each model (models/ builders, the exporter-shaped models of models/exporters.py, and every
onnx backend model with graph inputs, fed its own test_data_set_0 inputs):

    amp-convert M -o OUT --auto --provider emulate --min-cosine 0.999 --html P
    amp-convert validate M OUT --provider emulate --min-cosine 0.999 --html Q

An --auto exit 0 must leave a model and a page, exit 1 a written reason (on stderr) and a page;
validate must exit 0 or 1 and write its page. A model plain conversion rejects (exit 2 at O3) is
listed as "does not convert" and not held against --auto. Prints one line per model and a tally;
exits 1 when a model that converts gets exit 2/3 or a missing page.

    PYTHONPATH=. python bench/auto_sweep.py [--only exporters|models|backend] [-k SUBSTRING]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import numpy_helper

from amp_convert.commands.cli import cli
from bench._needs import needs

BACKEND = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def builders() -> Iterator[tuple[str, str, Callable[[], onnx.ModelProto]]]:
    from models.build import BUILDERS
    from models.export_shapes import EXPORTS

    for name, build in EXPORTS.items():
        yield "exporters", name, build
    for name, build in BUILDERS.items():
        yield "models", name, build


def backend_cases() -> Iterator[tuple[str, Path, Path | None]]:
    """(id, model path, inputs .npz or None) for backend models with non-constant inputs."""
    paths = sorted(glob.glob(os.path.join(BACKEND, "light", "*.onnx")))
    for sub in ("pytorch-converted", "pytorch-operator", "simple"):
        paths += sorted(glob.glob(os.path.join(BACKEND, sub, "*", "model.onnx")))
    for path in paths:
        yield os.path.relpath(path, BACKEND).replace("/model.onnx", ""), Path(path), None


def _inputs_npz(model_path: Path, model: onnx.ModelProto, out: Path) -> Path | None:
    data = model_path.parent / "test_data_set_0"
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    arrays = {}
    for k, vi in enumerate(inputs):
        pb = data / f"input_{k}.pb"
        if not pb.exists() or not vi.type.HasField("tensor_type"):
            return None
        tensor = onnx.TensorProto()
        tensor.ParseFromString(pb.read_bytes())
        arrays[vi.name] = numpy_helper.to_array(tensor)
        if arrays[vi.name].dtype == object:  # strings: an .npz cannot hold them unpickled
            return None
    np.savez(out, **arrays)
    return out


def original_loads(src: Path) -> str:
    """ "" when ONNX Runtime (CPU) loads the original, else why not (then no verdict is possible:
    both commands must say so with exit 2, as for any input the runtime cannot load)."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    except Exception as e:
        return str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
    return ""


def run_one(src: Path, work: Path, inputs: Path | None) -> dict[str, object]:
    runner = CliRunner()
    extra = ["--inputs", str(inputs)] if inputs is not None else []
    plain = runner.invoke(cli, [str(src), "-o", str(work / "plain.onnx"), "--level", "O3", "-q"])
    row: dict[str, object] = {"converts": plain.exit_code == 0, "loads": original_loads(src)}
    out, page, vpage = work / "auto.onnx", work / "auto.html", work / "validate.html"
    start = time.perf_counter()
    args = [
        str(src),
        "-o",
        str(out),
        "--auto",
        "--provider",
        "emulate",
        "--min-cosine",
        "0.999",
        "--html",
        str(page),
        "-q",
        *extra,
    ]
    res = runner.invoke(cli, args)
    row.update(
        auto=res.exit_code,
        auto_s=time.perf_counter() - start,
        auto_page=page.exists(),
        auto_model=out.exists(),
    )
    tail = (res.output or "").strip().splitlines()
    row["reason"] = tail[-1][:140] if tail else repr(res.exception)[:140]
    candidate = out if out.exists() else work / "plain.onnx"
    if candidate.exists():
        res = runner.invoke(
            cli,
            [
                "validate",
                str(src),
                str(candidate),
                "--provider",
                "emulate",
                "--min-cosine",
                "0.999",
                "--html",
                str(vpage),
                "-q",
                *extra,
            ],
        )
        row.update(validate=res.exit_code, validate_page=vpage.exists())
        if res.exit_code not in (0, 1):
            tail = (res.output or "").strip().splitlines()
            row["reason"] = tail[-1][:140] if tail else repr(res.exception)[:140]
    return row


def verdict(row: dict[str, object]) -> str:
    if not row["converts"]:
        return "does not convert"
    if row["loads"]:  # no verdict possible; the commands must refuse with exit 2
        refused = row["auto"] == 2 and row.get("validate") == 2
        return "original not in ORT" if refused else "BROKEN"
    auto_ok = (row["auto"] == 0 and row["auto_page"] and row["auto_model"]) or (
        row["auto"] == 1 and row["auto_page"]
    )
    validate_ok = row.get("validate") in (0, 1) and row.get("validate_page")
    return "ok" if auto_ok and validate_ok else "BROKEN"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("exporters", "models", "backend"))
    parser.add_argument("-k", default="", help="only models whose name contains this")
    args = parser.parse_args(argv)
    needs("onnxruntime")
    tally: dict[str, int] = {}
    broken = []
    with tempfile.TemporaryDirectory(prefix="amp-sweep-") as tmp:
        cases: list[tuple[str, str, Callable[[Path], tuple[Path, Path | None]]]] = []
        for group, name, build in builders():

            def make(d: Path, build=build) -> tuple[Path, Path | None]:
                onnx.save(build(), d / "m.onnx")
                return d / "m.onnx", None

            cases.append((group, name, make))
        for name, path, _ in backend_cases():

            def copy(d: Path, path=path) -> tuple[Path, Path | None]:
                model = onnx.load(path)
                onnx.save(model, d / "m.onnx")
                inits = {t.name for t in model.graph.initializer}
                if not [i for i in model.graph.input if i.name not in inits]:
                    raise LookupError("no graph inputs")
                return d / "m.onnx", _inputs_npz(path, model, d / "inputs.npz")

            cases.append(("backend", name, copy))
        for i, (group, name, make) in enumerate(cases):
            if (args.only and group != args.only) or args.k not in name:
                continue
            work = Path(tmp) / str(i)
            work.mkdir()
            try:
                src, inputs = make(work)
            except LookupError:
                continue
            row = run_one(src, work, inputs)
            v = verdict(row)
            tally[v] = tally.get(v, 0) + 1
            if v == "BROKEN":
                broken.append(f"{group}/{name}")
            print(
                f"{v:17s} {group}/{name}: auto {row['auto']} ({row['auto_s']:.1f} s), validate "
                f"{row.get('validate')}; {row['reason'] if row['auto'] or v != 'ok' else ''}",
                flush=True,
            )
    print("tally: " + ", ".join(f"{k} {n}" for k, n in sorted(tally.items())))
    if broken:
        print("BROKEN: " + ", ".join(broken))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
