"""Start-up: the command line should load only what a command uses.

onnx-ir imports sympy (~0.3-1 s, more than onnx itself) for symbolic dim arithmetic
(``SymbolicDim + 1``), which a conversion never does. `defer_sympy` registers stand-ins for sympy
and for the onnx-ir module that touches sympy at import (``onnx_ir._symbolic_shapes``) before
onnx-ir is first imported: a stand-in imports the real module on its first attribute access and
forwards to it, so everything works as before and only code that really uses symbolic arithmetic
pays for sympy. onnx-ir itself is not changed. (``importlib.util.LazyLoader`` does not do: an
``import sympy`` statement reads the module's ``__spec__``, which makes it load.)

Called by the command line only (a library user's process may rely on its own import order); a
no-op when onnx-ir or sympy is already loaded or not installed.

`main` also owns Ctrl-C from its first line (amp_convert.interrupts): while it imports the
modules the command will use (`preload`, before any file is made) SIGINT ends the process at
once with one line and 130; while the command works SIGINT raises KeyboardInterrupt so clean-up
runs; once it has finished (its verdict printed) SIGINT again ends it at once, with the same line.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

from amp_convert import interrupts

DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")


class DeferredModule(types.ModuleType):
    """A module that imports itself on first use (any attribute its stand-in lacks)."""

    def __init__(self, name: str, spec: ModuleSpec) -> None:
        super().__init__(name)
        self.__spec__ = spec

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        # later reads through this stand-in (held by `import sympy` in onnx-ir) go straight there
        for key, value in vars(real).items():
            if key != "__spec__":
                self.__dict__.setdefault(key, value)
        return getattr(real, attr)


def defer_sympy() -> bool:
    """Make sympy load on first use instead of with onnx-ir; whether it was deferred."""
    if any(name in sys.modules for name in ("sympy", *DEFERRED, "onnx_ir")):
        return False
    sympy = importlib.util.find_spec("sympy")  # top-level names: searched, not imported
    package = importlib.util.find_spec("onnx_ir")
    if sympy is None or package is None or not package.submodule_search_locations:
        return False
    folder = Path(next(iter(package.submodule_search_locations)))
    shapes = importlib.util.spec_from_file_location(
        "onnx_ir._symbolic_shapes", folder / "_symbolic_shapes.py"
    )
    if shapes is None or not (folder / "_symbolic_shapes.py").is_file():
        return False
    specs = {"sympy": sympy, "onnx_ir._symbolic_shapes": shapes}
    for name, spec in specs.items():
        sys.modules[name] = DeferredModule(name, spec)
    return True


def preload(args: list[str]) -> None:
    """Import what the command will use while an interrupt can still end it at once.

    A conversion needs the converter; --validate, ``validate`` and --auto also need ONNX Runtime
    and the validation modules, --auto its search. Help needs none of it. A missing ONNX Runtime
    is said by the command itself.
    """
    if {"-h", "--help"} & set(args):
        return
    validates = bool({"--validate", "--auto"} & set(args)) or args[:1] == ["validate"]
    if args[:1] != ["validate"]:
        importlib.import_module("amp_convert.api")
    if validates:
        with contextlib.suppress(ImportError):
            importlib.import_module("onnxruntime")
        for name in ("amp_convert.validation.emulate", "amp_convert.validation.sparse"):
            importlib.import_module(name)
    if "--auto" in args:
        importlib.import_module("amp_convert.auto.command")
        importlib.import_module("amp_convert.auto.search")


def main() -> None:
    """Console-script entry point: Ctrl-C handled, sympy deferred, then the command line.

    ``amp-convert --version`` alone needs only the version string: it is answered here, in
    click's words, before click, onnx and the option declarations are imported.
    """
    interrupts.exit_at_once()
    interrupts.end_at_exit()
    try:
        if sys.argv[1:] == ["--version"]:
            from amp_convert import __version__

            print(f"amp-convert, version {__version__}")
            return
        defer_sympy()
        import warnings

        from amp_convert.user_text import show_warning

        warnings.showwarning = show_warning  # one line, no library source path
        from amp_convert.cli import main as cli_main

        preload(sys.argv[1:])
        interrupts.raise_in_work()
        try:
            cli_main()
        except SystemExit as done:
            interrupts.exit_at_once()
            interrupts.end_with(done.code)
            raise
        finally:
            interrupts.exit_at_once()
    except KeyboardInterrupt:  # between the command's own handling and the line above
        interrupts.say_interrupted()
        interrupts.end_with(interrupts.EXIT_INTERRUPTED)
        sys.exit(interrupts.EXIT_INTERRUPTED)
