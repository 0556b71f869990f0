"""The step runner: numbers, logs and times each step, names it in an escaping exception, rebuilds
what depends on shapes after a step that may change them, and runs the suite's structural check
(tests/step_checks.py) around it, which holds a step to what it declared."""

from __future__ import annotations

import logging

import onnx_ir as ir
import pytest

from amp_convert.core.steps import Edits, StepResult, StepRunner, summary
from amp_convert.files import io
from tests.graphs import mlp

log = logging.getLogger("amp_convert.test_steps")


def _model() -> ir.Model:
    return io.load_model(mlp(layers=2, width=4))


def test_each_step_is_logged_with_its_result_and_time(caplog) -> None:
    model = _model()
    runner = StepRunner(model, log)
    with caplog.at_level(logging.DEBUG, logger=log.name):
        got = runner.run("4b", "count", Edits.NOTHING, lambda m: len(list(m.graph)), model)
    assert got == 6
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "step 4b: count"
    assert lines[1].startswith("step 4b: count -> 6 (") and lines[1].endswith(" s)")


def test_an_escaping_exception_names_the_step() -> None:
    def broken(m: ir.Model) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError) as info:
        StepRunner(_model(), log).run(8, "classify", Edits.NOTHING, broken, _model())
    assert info.value.__notes__ == ["in step 8: classify"]


def test_only_a_step_that_may_change_shapes_rebuilds_the_shape_cache() -> None:
    model = _model()
    runner = StepRunner(model, log)
    rebuilt: list[str] = []
    runner.after_shapes_change.append(lambda: rebuilt.append("shapes"))
    for edits in (Edits.NOTHING, Edits.TYPES, Edits.NODES):
        runner.run(1, "step", edits, lambda: None)
    assert rebuilt == []
    runner.run(2, "reshape", Edits.SHAPES, lambda: None)
    assert rebuilt == ["shapes"]


def test_results_share_one_shape() -> None:
    """A StepResult says itself in one line; a step that did not apply returns None."""

    class Counted(StepResult):
        def __init__(self) -> None:
            self.count = 3

    assert summary(None) == "not applicable"
    assert summary(Counted()) == "Counted"  # no dataclass: its type's name
    from amp_convert.passes.cleanup import CleanupResult

    assert summary(CleanupResult()).startswith("CleanupResult(rewired=0")


def test_the_suite_check_holds_a_step_to_what_it_declared() -> None:
    """A step declared to edit nothing that removes a node, or one that keeps shapes but
    changes one, or one that leaves a reader before its producer, fails the check."""
    model = _model()
    runner = StepRunner(model, log)

    def drop_last(m: ir.Model) -> None:
        last = list(m.graph)[-1]
        out = last.outputs[0]
        m.graph.outputs[0] = last.inputs[0]  # type: ignore[assignment]
        assert out is not None
        m.graph.remove(last, safe=True)

    with pytest.raises(AssertionError, match="a step that edits nothing edited nodes"):
        runner.run(3, "sneaky", Edits.NOTHING, drop_last, model)

    def reshape(m: ir.Model) -> None:
        m.graph.inputs[0].shape = ir.Shape([7, 7])  # declared [1, 4]

    with pytest.raises(AssertionError, match=r"changed shape .* declared nodes"):
        runner.run(4, "reshape", Edits.NODES, reshape, model)
    runner.run(5, "reshape", Edits.SHAPES, reshape, model)  # declared: allowed

    def misorder(m: ir.Model) -> None:
        nodes = list(m.graph)
        m.graph.remove(nodes[0])
        m.graph.append(nodes[0])

    with pytest.raises(AssertionError, match="before anything defines it"):
        runner.run(6, "misorder", Edits.NODES, misorder, model)
