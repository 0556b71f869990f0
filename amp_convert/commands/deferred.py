"""sympy on first use: the command line should not pay for what a conversion never does.

onnx-ir imports sympy (~0.2-1 s, more than onnx itself) for symbolic dim arithmetic
(``SymbolicDim + 1``), which a conversion never does. `defer_sympy` registers stand-ins for sympy
and for the onnx-ir module that touches sympy at import (``onnx_ir._symbolic_shapes``) before
onnx-ir is first imported: a stand-in imports the real module on its first attribute access and
forwards to it, so everything works as before and only code that really uses symbolic arithmetic
pays for sympy. onnx-ir itself is not changed. (``importlib.util.LazyLoader`` does not do: an
``import sympy`` statement reads the module's ``__spec__``, which makes it load.)

Called by the command line only (the console script's `startup.main`, and importing
``amp_convert.commands.cli``); a library user's ``import amp_convert`` keeps its own import order.
A no-op when onnx-ir or sympy is already loaded or not installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

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
