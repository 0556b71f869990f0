"""The pipeline's steps as a small pass infrastructure: one result shape, one runner.

Every step returns a `StepResult`: a frozen value whose ``summary()`` is its one line at ``-v``
(the base class gives it from the scalar fields). Every step declares what it does to the graph
(`Edits`), and runs through `StepRunner.run`, which numbers it, logs it at DEBUG with its result
and its time, names it in an exception that escapes it, and then

* calls the runner's ``after_shapes_change`` hooks after a step that may change shapes (the shape
  cache is built again there; a step that only retypes values or rewires nodes keeping every
  value's shape declares so, and the cache stays valid);
* calls every check in `STEP_CHECKS` around the step: the test suite installs one that checks the
  graph's structure after every step and that the step did no more than it declared.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import onnx_ir as ir

from amp_convert.core.summaries import one_line

_R = TypeVar("_R")
_P = ParamSpec("_P")


class Edits(enum.Enum):
    """What a step does to the graph, from least to most."""

    #: reads the graph only
    NOTHING = "nothing"
    #: changes element types and type attributes, adds Casts; no value changes its shape
    TYPES = "types"
    #: rewires, adds or removes nodes and values; every value that stays keeps its shape
    NODES = "nodes"
    #: may change the shape of a value that stays (the shape cache is built again after it)
    SHAPES = "shapes"


class StepResult:
    """The one shape of a step's result: a frozen value with a one-line summary."""

    def summary(self) -> str:
        """The result in one line (``-v``): its scalar fields by default."""
        return one_line(self)


@dataclass(frozen=True)
class Step:
    """One step as the runner runs it: its number, name and declared edits."""

    number: str
    name: str
    edits: Edits


#: A check around every step: called before it with the model and the step, it returns what to
#: call after it (tests/conftest.py installs the structural check)
StepCheck = Callable[[ir.Model, Step], Callable[[], None]]
STEP_CHECKS: list[StepCheck] = []


class StepRunner:
    """Runs the steps of one conversion of ``model`` (see the module docstring)."""

    def __init__(self, model: ir.Model, log: logging.Logger) -> None:
        self.model = model
        self.log = log
        self.after_shapes_change: list[Callable[[], None]] = []

    def run(
        self,
        number: int | str,
        name: str,
        edits: Edits,
        func: Callable[_P, _R],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _R:
        """Run one step: ``func(*args, **kwargs)``, typed against the step's signature."""
        step = Step(str(number), name, edits)
        self.log.debug("step %s: %s", step.number, name)
        checks = [check(self.model, step) for check in STEP_CHECKS]
        start = time.perf_counter()
        try:
            result = func(*args, **kwargs)
        except Exception as e:
            e.add_note(f"in step {step.number}: {name}")
            raise
        seconds = time.perf_counter() - start
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(
                "step %s: %s -> %s (%.3f s)", step.number, name, summary(result), seconds
            )
        if edits is Edits.SHAPES:
            for hook in self.after_shapes_change:
                hook()
        for after in checks:
            after()
        return result


def summary(result: Any) -> str:
    """A step's result in one line (a step that did not apply returns None)."""
    if result is None:
        return "not applicable"
    own = getattr(result, "summary", None)
    return own() if callable(own) else one_line(result)
