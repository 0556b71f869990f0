"""auto_convert: the lowest-precision model that meets the thresholds, in a handful of ORT sessions.

1. Range guard: one FP32 session of the original with every float intermediate exposed, fetched in
   batches (bounded memory); nodes that would overflow the low type are kept FP32 (ranges.py).
2. Convert at the level with those nodes pinned.
3. One emulated (or CUDA) session of the candidate with its intermediates exposed; compare each
   value with the reference; if an output fails, pin the few nodes that introduce the error
   (localise.py) and go back to 2, up to ``max_rounds`` candidates.

A model that meets the thresholds at the level comes back after two sessions.

Weak evidence stops the search rather than mislead it: on random inputs, a reference whose every
float output is near zero or nearly constant (evidence.py: a detector's map on noise) is refused
before any candidate, exit 2 naming the output (the cosine would measure rounding noise, and each
round would pin nodes for it). A round whose worst output is no better than the best candidate's
ends the search; the best candidate is the result, and the report ends with concrete next steps
(real ``--inputs``, the per-output threshold it reached, the node that introduces the most
error, for ``--exclude-nodes``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from amp_convert.api import convert_ir
from amp_convert.auto.blame import localise, pin_entry, pin_set
from amp_convert.auto.candidates import Candidate, Settings, brief, score, worst_text
from amp_convert.auto.figures import fill_figures
from amp_convert.auto.graph import FLOAT, name_nodes
from amp_convert.auto.localise import introduced
from amp_convert.auto.probe import DEFAULT_BUDGET
from amp_convert.auto.ranges import DEFAULT_MARGIN, range_hits
from amp_convert.auto.report import AutoReport, PinnedNode
from amp_convert.auto.sessions import Sessions
from amp_convert.auto.staging import stage
from amp_convert.errors import ValidationError
from amp_convert.files import io
from amp_convert.files.output_set import OutputSet
from amp_convert.files.outputs import planned_inputs_file
from amp_convert.files.safe_write import Slot
from amp_convert.options.convert import ConvertKwargs, ConvertOptions, resolve
from amp_convert.pipeline import checked_lists
from amp_convert.reports.conversion import ConversionReport
from amp_convert.reports.figures import ir_weights
from amp_convert.validation.evidence import (
    ZERO_REFERENCE,
    all_zero,
    npz_bytes,
    scale_notes,
    threshold_steps,
    weak_notes,
    weak_outputs,
)
from amp_convert.validation.input_search import RANDOM_CALIBRATION_WARNING, fmt_dims
from amp_convert.validation.metrics import Thresholds, check_names
from amp_convert.validation.options import (
    ValidateOptions,
    auto_judging,
    auto_thresholds,
)
from amp_convert.validation.progress import PhaseLog
from amp_convert.validation.providers import provider_mode, runtime_target
from amp_convert.validation.runtime import import_ort

DEGENERATE_REFERENCE = (
    "--auto: the reference output {name!r} is {why} on random inputs (so is every float output): "
    "a search would tune the model to rounding noise; give real inputs with --inputs FILE.npz "
    "(--save-inputs FILE.npz writes the generated ones)"
)
NOTHING_TO_COMPARE = (
    "--auto: nothing to compare on these inputs (every reference output is empty, not a tensor, "
    "or has no finite value); choose other --inputs"
)
if TYPE_CHECKING:
    from typing_extensions import Unpack


def auto_convert(
    model: Any,
    *,
    options: ConvertOptions | None = None,
    validation: ValidateOptions | None = None,
    inputs: Any = None,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    min_cosine: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    max_nan: int | None = None,
    provider: str | None = None,
    seed: int | None = None,
    max_rounds: int = 8,
    margin: float = DEFAULT_MARGIN,
    memory_budget: int = DEFAULT_BUDGET,
    progress: bool = False,
    force: bool = False,
    outputs: OutputSet | None = None,
    **kwargs: Unpack[ConvertKwargs],
) -> tuple[Any, AutoReport]:
    """Convert ``model`` at its level keeping FP32 only the nodes the calibration data needs.

    ``model``: path, bytes, onnx.ModelProto or onnx_ir.Model (returned as the same kind; a path
    gives an onnx_ir.Model). Conversion options: ``options`` (a ConvertOptions) and/or its fields
    as keywords (``level``, ``dtype``, ``exclude_nodes``...; unknown names are an OptionError);
    the level is ``AUTO_LEVEL`` (O3) unless one is given. Judging: ``validation`` (a
    ValidateOptions: provider, inputs, seed, thresholds, dims) and/or the keywords ``inputs``
    (None: seeded random inputs, the options' ``dims`` set dynamic dims; one ``.npz`` path or
    dict of arrays, or a list of them, each one sample), ``thresholds``, ``min_cosine``, ``atol``,
    ``rtol``, ``max_nan`` (with none given, ``min_cosine=0.999`` and ``max_nan=0``), ``provider``
    (``emulate``, the default: CPU with FP16/BF16 rounding reproduced; ``cuda``; ``auto``: cuda
    when available) and ``seed``. Every output of every sample must pass. Unnamed nodes are given
    unique names. ``progress``: a line per phase and per round on stderr. Returns (model,
    AutoReport); ``report.passed`` says whether the thresholds were met (the model is returned
    either way). Both models are loaded once at ORT's default options in a child process first
    (the result before the verdict): a crash there is a LoadCrashError, never a verdict.
    On random inputs a reference whose float outputs are all near zero or nearly constant is
    refused (ValidationError naming it; see the module docstring). ``validation.save_inputs``
    writes the (first) calibration sample as an ``.npz`` for ``inputs``; it goes through the
    output registry as the command line's does (never the model, its data or an inputs file;
    an existing file only with ``force``); it is written when the search ends, or with the
    refusal of a degenerate reference (which says so), never by another error. ``outputs``:
    for commands, the set the file is staged in (the caller commits it with its others).
    """
    start = time.perf_counter()
    opts = resolve(options, kwargs, auto=True)  # bad options fail before any work
    judge = auto_judging(validation, opts, inputs=inputs, provider=provider, seed=seed)
    provider = provider_mode(judge.provider)
    import_ort()
    if not isinstance(max_rounds, int) or max_rounds < 1:
        raise ValidationError(f"max_rounds must be a positive integer, got {max_rounds!r}")
    if not (isinstance(margin, int | float) and margin >= 1):
        raise ValidationError(f"margin must be a number >= 1, got {margin!r}")
    base = judge.thresholds if thresholds is None else thresholds
    limits = auto_thresholds(base, min_cosine=min_cosine, atol=atol, rtol=rtol, max_nan=max_nan)

    with contextlib.ExitStack() as stack:
        save = planned_inputs_file(stack, judge.save_inputs, [model], judge.inputs, force)
        owned = outputs is None  # entered after the plan: committed while its folder is held
        staged = stack.enter_context(OutputSet()) if outputs is None else outputs
        work = io.load_model(model)
        stack.callback(io.give_back, work)  # a caller's proto keeps its names, once serialised
        checked_lists(work, opts)  # names the model lacks fail before the first session
        result, report = _search(
            model,
            work,
            opts,
            judge,
            limits,
            provider,
            max_rounds,
            margin,
            memory_budget,
            progress,
            save,
            staged,
        )
        if owned:
            staged.commit()
        converted = io.same_kind(model, result)
    report.seconds = time.perf_counter() - start
    return converted, report


def _search(
    model: Any,
    work: ir.Model,
    opts: ConvertOptions,
    judge: ValidateOptions,
    limits: Thresholds,
    provider: str,
    max_rounds: int,
    margin: float,
    memory_budget: int,
    progress: bool,
    save: Slot | None,
    outputs: OutputSet,
) -> tuple[ir.Model, AutoReport]:
    """Stage and search (the body of ``auto_convert``)."""
    renamed = name_nodes(work)
    settings = Settings(opts, limits, float(margin), runtime_target(provider))
    original = str(model) if isinstance(model, str | os.PathLike) else None
    sessions = Sessions(
        stage(work, "<reference>"), provider=provider, budget=memory_budget, original=original
    )
    search = Search(work, sessions, settings, PhaseLog(progress, task="auto"))
    report = AutoReport(
        level=opts.level.value,
        dtype=opts.dtype,
        provider=provider,
        thresholds=limits.to_dict(),
        margin=float(margin),
        samples=0,
    )
    if renamed:
        report.warnings.append(f"{renamed} unnamed or duplicate node names were made unique")
    dims = dict(judge.dims) or None
    search.save = (save, outputs)
    try:
        result = search.run(report, judge.inputs, dims, judge.seed, max_rounds)
    except MemoryError:
        raise ValidationError("--auto ran out of memory; give smaller inputs (--dim)") from None
    finally:
        sessions.close()
    return result, report


class Search:
    """One search: range guard, then candidates until the thresholds are met."""

    def __init__(
        self, work: ir.Model, sessions: Sessions, settings: Settings, log: PhaseLog
    ) -> None:
        self.work = work
        self.sessions = sessions
        self.settings = settings
        self.log = log
        self.last: Candidate | None = None
        self._feeds: list[dict[str, np.ndarray]] = []
        self.save: tuple[Slot | None, OutputSet] = (None, OutputSet())  # save_inputs, staged

    def run(
        self,
        report: AutoReport,
        inputs: Any,
        dims: Mapping[str, int] | None,
        seed: int,
        max_rounds: int,
    ) -> ir.Model:
        """Steps 1-3 of the module docstring; the last candidate (the report says if it passed)."""
        sessions = self.sessions
        late = [] if sessions.reference_check_now() else [(sessions.ref_staged, "the original")]
        if not late:
            report.warnings += sessions.check_loads([(sessions.ref_staged, "the original")])
        self.facts = sessions.open_reference(inputs, dims, seed)
        slot, outputs = self.save
        if slot is not None:  # staged: committed when the search ends
            gathered = sessions.gathered  # generated inputs carry their origin into the file
            provenance = gathered.provenance if gathered is not None else None
            outputs.stage(slot, npz_bytes(sessions.samples[0], provenance))
        if not sessions.reference_comparable(self.facts.graph_outputs):
            raise ValidationError(NOTHING_TO_COMPARE)
        self._inputs(report, seed)
        self._evidence(report)
        check_names(self.settings.limits, self.facts.graph_outputs)
        ref_max = sessions.reference_pass()  # 1. range guard: one FP32 pass
        pinned = self._range_guard(ref_max)
        self.log.phase(f"range guard: {len(pinned)} node(s) kept FP32")
        first: Candidate | None = None
        best: tuple[int, Candidate, dict[str, PinnedNode]] | None = None
        for round_no in range(1, max_rounds + 1):  # 2-3. candidates
            report.rounds = round_no
            cand = self._candidate(pinned)
            first = first or cand
            self._record(report, round_no, len(pinned), cand)
            if best is not None and not cand.passed and score(cand) <= score(best[1]):
                report.warnings.append(
                    f"round {round_no} did not improve the worst output ({worst_text(cand)}, "
                    f"round {best[0]}: {worst_text(best[1])}); the search stops with round "
                    f"{best[0]}'s candidate"
                )
                break
            best = (round_no, cand, dict(pinned))
            if cand.passed or not self._pin_more(report, round_no, max_rounds, pinned):
                break
        assert first is not None and self.last is not None and best is not None
        if best[1] is not self.last:  # keep the best candidate, not the last one tried
            self.last = best[1]
            pinned = best[2]
            report.outputs, report.conversion = best[1].outputs, best[1].conversion
            report.passed = best[1].passed
        if not self.last.passed:
            report.warnings += self._next_steps(pinned)
        self.log.phase("the result at ONNX Runtime's default options (child process)")
        report.warnings += sessions.check_loads([*late, (sessions.cand_staged, "the result")])
        report.pinned = sorted(pinned.values(), key=lambda p: self.facts.order(p.name))
        report.sessions = self.sessions.sessions
        report.runs = self.sessions.runs
        report.weight_bytes_before = ir_weights(self.work).total
        fill_figures(
            report,
            self.last.model,
            self.last.conversion.value_map,
            self.facts,
            ref_max,
            first.stats,
            self.last.stats,
            pinned,
        )
        return self.last.model

    def _inputs(self, report: AutoReport, seed: int) -> None:
        """Say what the search calibrates on (a warning when it is random data)."""
        gathered = self.sessions.gathered
        assert gathered is not None
        report.samples = len(gathered.items)
        report.warnings += gathered.warnings
        if gathered.random:
            dims = fmt_dims(gathered.first.dims)
            report.warnings.append(RANDOM_CALIBRATION_WARNING.format(seed=seed, dims=dims))
        self.log.phase(
            f"reference: {gathered.describe()}; {len(self.facts.float_values)} values in "
            f"{len(self.sessions.batches)} batch(es)"
        )

    def _evidence(self, report: AutoReport) -> None:
        """Refuse a degenerate reference on random inputs; otherwise say which outputs are weak."""
        outputs = self.facts.graph_outputs
        refs = [self.sessions.ref_batch(s, outputs) for s in range(len(self.sessions.samples))]
        weak = weak_outputs(refs)
        floats = {
            n
            for r in refs
            for n, a in r.items()
            if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.size > 1
        }
        gathered = self.sessions.gathered
        assert gathered is not None
        if all_zero(refs):
            raise ValidationError(ZERO_REFERENCE.format(label="model"))
        if weak and gathered.random and floats and floats <= set(weak):
            name = next(n for n in outputs if n in weak)
            message = DEGENERATE_REFERENCE.format(name=name, why=weak[name])
            slot, staged = self.save
            if slot is not None:  # the inputs the message speaks of: kept, and said so
                staged.commit()
                message += f"; the generated inputs were written to {slot.path}"
            raise ValidationError(message)
        report.warnings += weak_notes(weak, random=False)
        if gathered.random and scale_notes(gathered.first.arrays):  # what random data assumes
            report.warnings.append(f"random calibration inputs{scale_notes(gathered.first.arrays)}")

    def _next_steps(self, pinned: Mapping[str, PinnedNode]) -> list[str]:
        """What the user can do when the thresholds are not met: concrete options."""
        assert self.last is not None
        steps = []
        gathered = self.sessions.gathered
        if gathered is not None and gathered.random:
            steps.append("next step: calibrate on real data with --inputs FILE.npz")
        steps += threshold_steps(self.last.outputs)  # only near the bar (evidence.py)
        node = self._worst_node(pinned)
        if node is not None:
            steps.append(
                f"next step: keep FP32 the node that introduces the most error: --exclude-nodes "
                f"{node}"
            )
        return steps

    def _worst_node(self, pinned: Mapping[str, PinnedNode]) -> str | None:
        assert self.last is not None
        stats = self.last.stats
        best, worst = None, 0.0
        for node in self.facts.nodes:
            if node.name in pinned:
                continue
            gain = introduced(node, stats)[1]
            if gain > worst:
                best, worst = node.name, gain
        return best

    def _range_guard(self, ref_max: dict[str, float]) -> dict[str, PinnedNode]:
        """Nodes whose FP32 values would overflow the low type (graph inputs' peaks included)."""
        facts, samples = self.facts, self.sessions.samples
        for name, feeds in samples[0].items():
            if facts.types.get(name) == FLOAT or feeds.dtype == np.float32:
                ref_max[name] = max(
                    float(np.abs(s[name][np.isfinite(s[name])]).max(initial=0.0)) for s in samples
                )
        pinned: dict[str, PinnedNode] = {}
        low, margin = self.settings.low, self.settings.margin
        for name, hit in range_hits(facts, ref_max, low, self.settings.runtime, margin).items():
            node = facts.node(name)
            pinned[name] = PinnedNode(
                name,
                node.op_type,
                0,
                "range",
                hit.describe(margin, low.max),
                max_abs=hit.max_abs,
                body_nodes=len(node.body_nodes),
            )
        return pinned

    def _convert(self, pins: frozenset[str]) -> tuple[ir.Model, ConversionReport]:
        """The work model converted with ``pins`` kept FP32 (an ir clone; no protobuf trip)."""
        model = self.work.clone()
        options = self.settings.options
        report = convert_ir(model, options.replace(pinned_nodes=pins))
        return model, report

    def _candidate(self, pinned: Mapping[str, PinnedNode]) -> Candidate:
        """Convert with ``pinned`` (folded nodes pinned through the node that absorbed them),
        open its session and compare it with the reference."""
        previous = self.last.conversion.value_map if self.last is not None else None
        pins = pin_set(self.facts, previous, list(pinned))
        model, conv = self._convert(pins)
        again = pin_set(self.facts, conv.value_map, list(pinned))
        if again != pins:  # a pinned node was folded into another: pin that one too
            model, conv = self._convert(again)
        feeds = self.sessions.open_candidate(model, conv.value_map, self.facts.float_values)
        stats, outputs = self.sessions.compare(
            feeds, self.facts.graph_outputs, self.settings.limits
        )
        if all(o.status == "skipped" for o in outputs):
            raise ValidationError(NOTHING_TO_COMPARE)
        self.last = Candidate(model, conv, stats, outputs)
        self._feeds = feeds
        return self.last

    def _record(self, report: AutoReport, round_no: int, pins: int, cand: Candidate) -> None:
        failing = [o.name for o in cand.outputs if not o.passed]
        self.log.phase(
            f"round {round_no}: {pins} node(s) pinned FP32; "
            + ("every output passes" if not failing else f"failing: {', '.join(failing)}")
        )
        report.history.append(
            {
                "round": round_no,
                "pinned": pins,
                "passed": cand.passed,
                "outputs": {o.name: brief(o) for o in cand.outputs},
            }
        )
        report.outputs = cand.outputs
        report.conversion = cand.conversion
        report.passed = cand.passed

    def _pin_more(
        self, report: AutoReport, round_no: int, max_rounds: int, pinned: dict[str, PinnedNode]
    ) -> bool:
        """Pin the nodes that introduce the failing outputs' error; False when the search ends."""
        assert self.last is not None
        if round_no == max_rounds:
            report.warnings.append(
                f"thresholds not met after {max_rounds} candidates (max_rounds); "
                f"{len(pinned)} nodes pinned FP32"
            )
            return False
        failing = self.last.failing
        new, whole = localise(
            self.sessions,
            self.facts,
            self.work,
            self.last.conversion.value_map,
            self.last.stats,
            self._feeds,
            failing,
            pinned,
            low_type=self.settings.low,
            margin=self.settings.margin,
        )
        if not new:
            report.warnings.append(
                "thresholds cannot be met: no node still in low precision introduces the "
                f"error of {', '.join(failing)}"
            )
            return False
        for b in new:
            pinned[b.node] = pin_entry(self.facts, b, round_no, whole.get(b.node))
        return True
