"""A bench that needs an optional dependency says so in one line and exits 2, before any work.

    from bench._needs import needs
    needs("onnxruntime", "onnxconverter_common")   # first thing in main()

The line names the bench, the module and how to install it; never a traceback half-way through a
run (auto_bench used to fail on onnxconverter-common after minutes of work). A module that is
installed but does not import (a broken wheel) counts as missing, with its error.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

#: optional module -> how to get it (from a clone of the repository)
INSTALL = {
    "onnxruntime": 'pip install -e ".[cpu]" (or ".[gpu]")',
    "onnxconverter_common": 'pip install -e ".[bench]" (onnxconverter-common, the peer compared)',
    "psutil": 'pip install -e ".[bench]"',
    "olive": 'pip install torch && pip install -e ".[olive]"',
    "torch": "pip install torch (the build your machine needs)",
    "transformers": "pip install transformers",
}
EXIT_MISSING = 2


def missing(*modules: str) -> list[tuple[str, str]]:
    """(module, why) for each of `modules` that does not import."""
    out = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            out.append((name, str(e).splitlines()[0] if str(e) else type(e).__name__))
    return out


def needs(*modules: str) -> None:
    """Exit 2 with one line on stderr when one of `modules` does not import."""
    lacking = missing(*modules)
    if not lacking:
        return
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "this bench"
    name, why = lacking[0]
    more = f" (and {', '.join(m for m, _ in lacking[1:])})" if len(lacking) > 1 else ""
    hint = INSTALL.get(name, f"pip install {name}")
    print(f"{script}: needs {name}{more}, which does not import ({why}): {hint}", file=sys.stderr)
    sys.exit(EXIT_MISSING)


def no_gpu(why: str) -> int:
    """The one line a GPU bench prints where ONNX Runtime's CUDA provider cannot run, and its exit
    code: the provider is an optional dependency like any other (onnxruntime-gpu, the [gpu]
    extra, and a CUDA device)."""
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "this bench"
    print(
        f'{script}: no GPU to measure on: {why}; nothing measured (pip install -e ".[gpu]" on a '
        "machine with a CUDA device, or --provider cpu for a check on the CPU)",
        file=sys.stderr,
    )
    return EXIT_MISSING
