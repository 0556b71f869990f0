"""auto_convert: the lowest-precision model that meets the thresholds, in a handful of ORT sessions.

1. Range guard: one FP32 session of the original with every float intermediate exposed, fetched in
   batches (bounded memory); nodes that would overflow the low type are kept FP32 (ranges.py).
2. Convert at the level with those nodes pinned.
3. One emulated (or CUDA) session of the candidate with its intermediates exposed; compare each
   value with the reference; if an output fails, pin the few nodes that introduce the error
   (localise.py) and go back to 2, up to ``max_rounds`` candidates.

A model that meets the thresholds at the level comes back after two sessions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from amp_convert import io
from amp_convert.api import convert
from amp_convert.auto.bodies import BodyJudge
from amp_convert.auto.cache import ValueCache
from amp_convert.auto.graph import (
    FLOAT,
    GraphFacts,
    NodeFacts,
    graph_facts,
    name_nodes,
    pin_patterns,
)
from amp_convert.auto.localise import Blame, Localiser, ValueStats
from amp_convert.auto.probe import DEFAULT_BUDGET, Probe, expose, open_probe, plan_batches
from amp_convert.auto.ranges import DEFAULT_MARGIN, LIMITS, range_hits
from amp_convert.auto.report import AutoReport, PinnedNode, TracePoint
from amp_convert.auto.staging import Staged, lean_options, stage
from amp_convert.dtypes import LOW_TYPES, low_numpy_type
from amp_convert.errors import ValidationError
from amp_convert.options import make_options
from amp_convert.report import ConversionReport
from amp_convert.validation.emulate import build_emulated_model
from amp_convert.validation.inputs import InputSpec, load_inputs, random_inputs
from amp_convert.validation.metrics import OutputResult, Thresholds, check_names, compare_output
from amp_convert.validation.runtime import cuda_available, import_ort

DEFAULT_MIN_COSINE = 0.999
PROVIDERS = ("emulate", "cuda", "auto")


def auto_convert(
    model: Any,
    *,
    inputs: Any = None,
    level: str = "O3",
    dtype: str = "fp16",
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    min_cosine: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    max_nan: int | None = None,
    provider: str = "emulate",
    max_rounds: int = 8,
    margin: float = DEFAULT_MARGIN,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    memory_budget: int = DEFAULT_BUDGET,
    **options: Any,
) -> tuple[Any, AutoReport]:
    """Convert ``model`` at ``level`` keeping FP32 only the nodes the calibration data needs.

    ``model``: path, bytes, onnx.ModelProto or onnx_ir.Model (returned as the same kind; a path
    gives an onnx_ir.Model). ``inputs``: None (seeded random inputs, ``dims`` sets dynamic dims),
    one ``.npz`` path or dict of arrays, or a list of them (each one sample). Thresholds mean
    what they mean in ``validate``; with none given, ``min_cosine=0.999`` (and ``max_nan=0``).
    Every output of every sample must pass. ``provider``: ``emulate`` (CPU, FP16/BF16 rounding
    reproduced) or ``cuda`` (``auto``: cuda when available). Other keywords are conversion
    options (``keep_io_types``, ``fp32_ops``, ``exclude_nodes``...). Unnamed nodes are given
    unique names. Returns (model, AutoReport); ``report.passed`` says whether the thresholds
    were met (the model is returned either way).
    """
    start = time.perf_counter()
    if provider not in PROVIDERS:
        raise ValidationError(f"provider {provider!r}: --auto takes emulate, cuda or auto")
    if provider == "auto":
        provider = "cuda" if cuda_available() else "emulate"
    import_ort()
    if not isinstance(max_rounds, int) or max_rounds < 1:
        raise ValidationError(f"max_rounds must be a positive integer, got {max_rounds!r}")
    if not (isinstance(margin, int | float) and margin >= 1):
        raise ValidationError(f"margin must be a number >= 1, got {margin!r}")
    limits = _limits(thresholds, min_cosine=min_cosine, atol=atol, rtol=rtol, max_nan=max_nan)
    if dims:
        options["dims"] = dims  # sizes the cast-cost estimate too
    make_options(level=level, dtype=dtype, **options)  # bad options fail before any work
    user_excludes = list(options.pop("exclude_nodes", ()) or ())
    if isinstance(user_excludes, str):
        user_excludes = [user_excludes]
    dtype = make_options(dtype=dtype).dtype

    work = io.load_model(model)
    renamed = name_nodes(work)
    search = _Search(
        work, stage(work, "<reference>"),
        provider=provider, dtype=dtype, level=level, limits=limits,
        margin=margin, budget=memory_budget, options={**options, "exclude_nodes": user_excludes},
    )  # fmt: skip
    report = AutoReport(
        level=str(level).upper(), dtype=dtype, provider=provider, thresholds=limits.to_dict(),
        margin=float(margin), samples=0,
    )  # fmt: skip
    if renamed:
        report.warnings.append(f"{renamed} unnamed or duplicate node names were made unique")
    try:
        result = search.run(report, inputs, dims, seed, max_rounds)
    finally:
        search.close()
    report.seconds = time.perf_counter() - start
    return _as_kind(model, result), report


def _limits(thresholds: Any, **flat: Any) -> Thresholds:
    base = Thresholds.coerce(thresholds)
    extra = {k: v for k, v in flat.items() if v is not None}
    if extra:
        base = Thresholds.coerce({**base.to_dict(), **extra})
    if not base.active:
        base = Thresholds.coerce({**base.to_dict(), "min_cosine": DEFAULT_MIN_COSINE})
    return base


def _as_kind(model: Any, result: ir.Model) -> Any:
    if isinstance(model, onnx.ModelProto):
        return ir.serde.serialize_model(result)
    if isinstance(model, bytes | bytearray | memoryview):
        return ir.serde.serialize_model(result).SerializeToString()
    return result


class _Search:
    """State of one search: the reference session, the samples, the pins, the counters."""

    def __init__(
        self,
        work: ir.Model,
        ref_staged: Staged,
        *,
        provider: str,
        dtype: str,
        level: str,
        limits: Thresholds,
        margin: float,
        budget: int,
        options: dict[str, Any],
    ) -> None:
        self.work = work
        self.ref_proto = ref_staged.proto
        self.provider = provider
        self.device = "cuda" if provider == "cuda" else "cpu"
        self.dtype = dtype
        self.level = level
        self.limits = limits
        self.margin = margin
        self.budget = budget
        self.options = options
        self.sessions = 0
        self.runs = 0
        self.ref_staged = ref_staged
        self.cand_staged: Staged | None = None
        self.ref: Probe | None = None
        self.cand: Probe | None = None
        self.cache: ValueCache | None = None

    # -- sessions ------------------------------------------------------------------------------
    def close(self) -> None:
        for probe in (self.cand, self.ref):
            if probe is not None:
                probe.close()
        for staged in (self.cand_staged, self.ref_staged):
            if staged is not None:
                staged.close()
        if self.cache is not None:
            self.cache.close()

    def _open_reference(self) -> tuple[Probe, GraphFacts]:
        facts0 = graph_facts(self.ref_proto, {})
        exposed = onnx.ModelProto()
        exposed.CopyFrom(self.ref_proto)  # weight-free (or small): see staging
        expose(exposed, facts0.float_values, {v: FLOAT for v in facts0.float_values})
        expose(exposed, facts0.control_inputs, facts0.types)  # for the body localisation
        probe = open_probe(
            self.ref_staged.source, exposed, "reference", device=self.device,
            disable_optimizations=self.provider == "emulate",
            configure=lean_options(self.ref_staged.mapped),
        )  # fmt: skip
        del exposed
        self.sessions += 1
        return probe, facts0

    @property
    def _small_activations(self) -> bool:
        """Every reference value fits the budget in memory (so may a pooled candidate's)."""
        return self.cache is not None and self.cache.mode == "memory"

    def _close_reference(self) -> None:
        """Every reference value is cached: the session (and its weights) can go."""
        if self.ref is not None:
            self.ref.close()
            self.ref = None
        self.ref_staged.close()

    def _open_candidate(self, cand: ir.Model, facts: GraphFacts) -> tuple[Probe, dict[str, str]]:
        if self.cand is not None:  # one candidate session at a time, its files with it
            self.cand.close()
            self.cand = None
        if self.cand_staged is not None:
            self.cand_staged.close()
        self.cand_staged = staged = stage(cand, "<candidate>")
        values = facts.float_values
        if self.provider == "emulate":
            emulated = build_emulated_model(staged.proto)
            model = emulated.model
            expose(model, values, {v: FLOAT for v in values})
            low_inputs = dict(emulated.low_inputs)
        else:
            model = onnx.ModelProto()
            model.CopyFrom(staged.proto)
            types = graph_facts(staged.proto, {}).types
            expose(model, values, types)
            low_inputs = {}
        probe = open_probe(
            staged.source, model, "candidate", device=self.device,
            disable_optimizations=self.provider == "emulate",
            configure=lean_options(staged.mapped, arena=self._small_activations),
        )  # fmt: skip
        self.sessions += 1
        return probe, low_inputs

    # -- the search ----------------------------------------------------------------------------
    def run(
        self,
        report: AutoReport,
        inputs: Any,
        dims: Mapping[str, int] | None,
        seed: int,
        max_rounds: int,
    ) -> ir.Model:
        self.ref, facts0 = self._open_reference()
        specs = [InputSpec(n, t, s) for n, (t, s) in self.ref.runner.inputs.items()]
        samples = self._samples(inputs, specs, dims, seed)
        report.samples = len(samples)
        facts = graph_facts(self.ref_proto, samples[0])
        facts.types.update({k: v for k, v in facts0.types.items() if k not in facts.types})
        self.facts = facts
        check_names(self.limits, facts.graph_outputs)
        values = [*facts.float_values, *facts.control_inputs]
        sizes = {v: facts.estimated_bytes(v) for v in values}
        self.batches = plan_batches(values, sizes, self.budget, first=facts.graph_outputs)
        self.samples = samples

        # 1. range guard: one FP32 pass (also caches the reference when it fits the budget)
        ref_max = self._reference_pass(sum(sizes.values()))
        if self.cache is not None:  # every reference value is held: free its weights now
            self._close_reference()
        for name, feeds in samples[0].items():
            if facts.types.get(name) == FLOAT or feeds.dtype == np.float32:
                ref_max[name] = max(
                    float(np.abs(s[name][np.isfinite(s[name])]).max(initial=0.0)) for s in samples
                )
        pinned: dict[str, PinnedNode] = {}
        limit = LIMITS[self.dtype]
        for name, hit in range_hits(facts, ref_max, self.dtype, self.margin).items():
            node = facts.node(name)
            pinned[name] = PinnedNode(
                name, node.op_type, 0, "range", hit.describe(self.margin, limit),
                max_abs=hit.max_abs, body_nodes=len(node.body_nodes),
            )  # fmt: skip

        # 2-3. candidates
        first_stats: dict[str, ValueStats] | None = None
        cand_model: ir.Model | None = None
        for round_no in range(1, max_rounds + 1):
            report.rounds = round_no
            cand_model, conv = self._convert(pinned)
            self.cand, low_inputs = self._open_candidate(cand_model, facts)
            cand_feeds = [self._round_inputs(s, low_inputs) for s in samples]
            stats, outputs = self._compare(cand_feeds)
            if first_stats is None:
                first_stats = stats
            if all(o.status == "skipped" for o in outputs):
                raise ValidationError(
                    "--auto: nothing to compare on these inputs (every reference output is "
                    "empty, not a tensor, or has no finite value); choose other --inputs"
                )
            # outputs with nothing to compare (0 elements, non-tensor) neither pass nor block
            passed = any(o.passed for o in outputs) and all(
                o.passed or o.status == "skipped" for o in outputs
            )
            report.history.append(
                {
                    "round": round_no,
                    "pinned": len(pinned),
                    "passed": passed,
                    "outputs": {o.name: _brief(o) for o in outputs},
                }
            )
            report.outputs = outputs
            report.conversion = conv
            self.final_stats = stats
            if passed:
                report.passed = True
                break
            if round_no == max_rounds:
                report.warnings.append(
                    f"thresholds not met after {max_rounds} candidates (max_rounds); "
                    f"{len(pinned)} nodes pinned FP32"
                )
                break
            failing = [o.name for o in outputs if not o.passed and o.status != "skipped"]
            new, whole = self._localise(stats, conv, cand_feeds, failing, pinned)
            if not new:
                report.warnings.append(
                    "thresholds cannot be met: no node still in low precision introduces the "
                    f"error of {', '.join(failing)}"
                )
                break
            for b in new:
                pinned[b.node] = self._pin(b, round_no, whole.get(b.node))
        assert cand_model is not None and first_stats is not None
        report.pinned = sorted(pinned.values(), key=lambda p: facts.order(p.name))
        report.sessions = self.sessions
        report.runs = self.runs
        self._figures(report, cand_model, ref_max, first_stats, pinned)
        return cand_model

    def _pin(self, b: Blame, round_no: int, whole: str | None) -> PinnedNode:
        """The report entry of a node pinned after candidate ``round_no``."""
        facts = self.facts
        inside = facts.inner[b.node].parent if b.node in facts.inner else ""
        if b.kind == "range":
            evidence = b.how
        elif inside:
            evidence = f"introduces error {b.score:.3g} ({b.how})"
        else:
            evidence = (
                f"introduces error {b.score:.3g} ({b.how}; output error {b.output_error:.3g}, "
                f"inputs {b.input_error:.3g})"
            )
        if whole is not None:
            evidence += f"; whole body pinned: {whole}"
        return PinnedNode(
            b.node, facts.op_type(b.node), round_no, b.kind, evidence,
            max_abs=b.max_abs, introduced_error=b.score,
            body_nodes=len(facts.body_of(b.node)), inside=inside,
        )  # fmt: skip

    def _samples(self, inputs: Any, specs, dims, seed) -> list[dict[str, np.ndarray]]:
        if inputs is None:
            return [random_inputs(specs, self.ref_proto, dims=dims, seed=seed).arrays]
        items = inputs if isinstance(inputs, list | tuple) else [inputs]
        if not items:
            raise ValidationError("inputs: an empty list (give at least one sample)")
        return [load_inputs(item, specs).arrays for item in items]

    def _round_inputs(self, feeds: dict, low_inputs: Mapping[str, str]) -> dict:
        if not low_inputs:
            return feeds
        out = dict(feeds)
        for name, low in low_inputs.items():
            if name in out:
                out[name] = out[name].astype(low_numpy_type(low)).astype(np.float32)
        return out

    def _reference_pass(self, total_bytes: int) -> dict[str, float]:
        assert self.ref is not None
        self.cache = ValueCache.plan(
            len(self.samples), total_bytes * len(self.samples), self.budget
        )
        ref_max: dict[str, float] = {}
        for s, feeds in enumerate(self.samples):
            for batch in self.batches:
                got = self.ref.fetch(feeds, batch)
                self.runs += 1
                for name, arr in got.items():
                    if arr is not None and self.cache is not None:
                        self.cache.put(s, name, arr)
                    if arr is None or not _is_float(arr):
                        continue
                    fin = np.isfinite(arr)
                    peak = float(np.abs(arr[fin]).max()) if fin.any() else 0.0
                    ref_max[name] = max(ref_max.get(name, 0.0), peak)
                del got
        return ref_max

    def _ref_batch(self, s: int, batch: Sequence[str]) -> dict[str, np.ndarray]:
        if self.cache is not None:
            return self.cache.get(s, batch)
        assert self.ref is not None
        self.runs += 1
        return self.ref.fetch(self.samples[s], batch)

    def _compare(self, cand_feeds: list[dict]) -> tuple[dict[str, ValueStats], list[OutputResult]]:
        assert self.cand is not None
        facts = self.facts
        stats: dict[str, ValueStats] = {}
        per_output: dict[str, list[OutputResult]] = {o: [] for o in facts.graph_outputs}
        for s, cfeeds in enumerate(cand_feeds):
            for name, arr in self.samples[s].items():
                if arr.dtype == np.float32:
                    stats.setdefault(name, ValueStats()).add(arr, cfeeds[name])
            for batch in self.batches:
                ref = self._ref_batch(s, batch)
                cand = self.cand.fetch(cfeeds, batch)
                self.runs += 1
                for name in batch:
                    r = ref.get(name)
                    if name in per_output:
                        per_output[name].append(
                            compare_output(name, r, cand.get(name), self.limits.for_output(name))
                        )
                    if r is not None and _is_float(r):
                        stats.setdefault(name, ValueStats()).add(r, cand.get(name))
        return stats, [_worst(results) for results in per_output.values()]

    def _convert(self, pinned: Mapping[str, PinnedNode]) -> tuple[ir.Model, ConversionReport]:
        names: list[str] = []
        for name in pinned:
            names.append(name)
            names.extend(self.facts.body_of(name))
        excludes = [*self.options["exclude_nodes"], *pin_patterns(names)]
        opts = {**self.options, "exclude_nodes": excludes}
        result, conv = convert(
            self.work, level=self.level, dtype=self.dtype, return_report=True, **opts
        )
        return result, conv

    def _localise(self, stats, conv: ConversionReport, cand_feeds, failing, pinned):
        precision = {n.name: n.precision for n in conv.nodes}
        facts = self.facts

        def is_low(name: str) -> bool:
            if precision.get(name) == "low":
                return True
            return any(precision.get(b) == "low" for b in facts.body_of(name))

        def ref_values(names: Sequence[str]) -> list[dict[str, np.ndarray]]:
            out = []
            for s, feeds in enumerate(self.samples):
                inner = [n for n in names if n not in feeds]
                got = self._ref_batch(s, inner) if inner else {}
                got.update({n: feeds[n] for n in names if n in feeds})
                out.append(got)
            return out

        def cand_values(names: Sequence[str]) -> list[dict[str, np.ndarray]]:
            assert self.cand is not None
            out = []
            for cfeeds in cand_feeds:
                inner = [n for n in names if n not in cfeeds]
                got = self.cand.fetch(cfeeds, inner) if inner else {}
                self.runs += 1 if inner else 0
                got.update({n: cfeeds[n] for n in names if n in cfeeds})
                out.append(got)
            return out

        def initializer(name: str) -> np.ndarray | None:
            value = self.work.graph.initializers.get(name)
            if value is None or value.const_value is None:
                return None
            return np.asarray(value.const_value.numpy())

        protos = {n.name: n for n in self.ref_proto.graph.node}
        judge = BodyJudge(
            facts.opsets, facts.ir_version, self.dtype, self.margin, is_low,
            weights=facts.initializers,
        )  # fmt: skip

        def in_body(node: NodeFacts, exclude: set[str]) -> tuple[list[Blame], str | None]:
            envs = ref_values(node.inputs)
            for env in envs:
                for v in node.inputs:
                    if v not in env and v in facts.initializers:
                        arr = initializer(v)
                        if arr is not None:
                            env[v] = arr
            verdict = judge.judge(protos[node.name], envs, exclude)
            return verdict.blames, verdict.fallback

        localiser = Localiser(
            facts, stats, is_low, self.dtype, ref_values, cand_values, initializer,
            node_protos=protos, body_judge=in_body,
        )  # fmt: skip
        blames = localiser.blame(failing, exclude=set(pinned))
        return blames, localiser.whole_bodies

    def _figures(self, report, cand: ir.Model, ref_max, first_stats, pinned) -> None:
        conv = report.conversion
        if conv is not None:
            report.low_nodes = conv.nodes_low
            report.float_nodes = conv.nodes_low + conv.nodes_fp32
        precision = {n.name: n.precision for n in conv.nodes} if conv is not None else {}
        for graph in cand.graphs():
            for value in graph.initializers.values():
                t = value.const_value
                if t is None or t.dtype not in (ir.DataType.FLOAT, *_LOW_IR):
                    continue
                if t.dtype in _LOW_IR:
                    report.low_weight_bytes += 2 * t.nbytes  # in FP32 bytes
                    report.float_weight_bytes += 2 * t.nbytes  # its FP32 size
                else:
                    report.float_weight_bytes += t.nbytes
        for node in self.facts.nodes:
            floats = [v for v in node.outputs if v in first_stats]
            if not floats:
                continue
            report.trace.append(
                TracePoint(
                    node=node.name,
                    op_type=node.op_type,
                    max_abs=max(ref_max.get(v, 0.0) for v in floats),
                    first_error=max(first_stats[v].error for v in floats),
                    final_error=max(
                        self.final_stats[v].error for v in floats if v in self.final_stats
                    )
                    if any(v in self.final_stats for v in floats)
                    else None,
                    precision="fp32 (pinned)"
                    if node.name in pinned
                    else precision.get(node.name, "n/a"),
                )
            )


_LOW_IR = tuple(LOW_TYPES)


def _is_float(arr: np.ndarray) -> bool:
    return isinstance(arr, np.ndarray) and (arr.dtype.kind == "f" or arr.dtype.name == "bfloat16")


def _worst(results: list[OutputResult]) -> OutputResult:
    """The sample that fails (or comes closest to failing) stands for the output."""
    failing = [r for r in results if not r.passed]
    pool = failing or results

    def key(r: OutputResult) -> tuple:
        cos = r.cosine if r.cosine is not None and math.isfinite(r.cosine) else -2.0
        return (cos, -(r.max_abs or 0.0))

    return min(pool, key=key)


def _brief(o: OutputResult) -> dict[str, Any]:
    return {"cosine": o.cosine, "max_abs": o.max_abs, "nonfinite": o.nonfinite, "passed": o.passed}
