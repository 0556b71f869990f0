"""Start-up: the command line should load only what a command uses.

sympy, which onnx-ir imports for symbolic dims a conversion never uses, is deferred to its first
use (amp_convert.commands.deferred) before anything imports onnx-ir.

`main` also owns Ctrl-C from its first line (amp_convert.commands.interrupts): while it imports the
modules the command will use (`preload`, before any file is made) SIGINT ends the process at
once with one line and 130; while the command works SIGINT raises KeyboardInterrupt so clean-up
runs; once it has finished (its verdict printed) SIGINT again ends it at once, with the same line.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import os
import sys

from amp_convert.commands import interrupts
from amp_convert.commands.deferred import defer_sympy


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
        importlib.import_module("amp_convert.commands.auto")
        importlib.import_module("amp_convert.auto.search")


#: numpy's BLAS thread pools, sized by these before numpy is imported
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def lean_process() -> None:
    """What the command line's process spends on neither the command nor its imports, cut.

    * numpy's OpenBLAS starts a thread per core that spins while it waits for work. The
      commands' BLAS calls are small dot products, and the weight work has its own threads, so
      one BLAS thread does (unless the user set the variables): 0.09 of the 0.6 CPU-s of a
      sample BERT conversion went to the spin (ONNX Runtime keeps its own threads).
    * The imports make hundreds of thousands of objects, none of them garbage: the cyclic
      collector stays off while they load, and `imported` freezes them out of its later passes
      (0.06 CPU-s there).
    """
    for name in BLAS_THREADS:
        os.environ.setdefault(name, "1")
    gc.disable()


def imported() -> None:
    """The modules are loaded: keep them out of the collector's passes, and collect again."""
    gc.freeze()
    gc.enable()


def main() -> None:
    """Console-script entry point: Ctrl-C handled, sympy deferred, then the command line.

    ``amp-convert --version`` alone needs only the version string: it is answered here, in
    click's words, before click, onnx and the option declarations are imported.
    """
    interrupts.exit_at_once()
    interrupts.end_at_exit()
    try:
        if sys.argv[1:] == ["--version"]:
            from amp_convert._version import __version__

            print(f"amp-convert, version {__version__}")
            return
        lean_process()
        defer_sympy()
        import warnings

        from amp_convert.core.user_text import show_warning

        warnings.showwarning = show_warning  # one line, no library source path
        from amp_convert.commands.cli import main as cli_main

        preload(sys.argv[1:])
        imported()
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
