"""The search's two ORT sessions: the FP32 reference (values cached) and one candidate at a time.

The reference exposes its float intermediates by their own names; the candidate exposes, for
each of them, the value that carries it in the converted graph (the converter's value map), so a
value folded away or renamed is never asked for by a name the candidate does not have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from amp_convert.auto.cache import ValueCache
from amp_convert.auto.graph import FLOAT, GraphFacts, graph_facts
from amp_convert.auto.localise import ValueStats
from amp_convert.auto.probe import Probe, carrier_aliases, expose, open_probe, plan_batches
from amp_convert.auto.staging import Staged, lean_options, stage
from amp_convert.core.dtypes import low_numpy_type
from amp_convert.reports.value_map import ValueMap
from amp_convert.validation.emulate import build_emulated_model
from amp_convert.validation.input_search import Samples, gather_samples
from amp_convert.validation.inputs import InputSpec
from amp_convert.validation.load_check import ModelFile, ModelToCheck, check_default_load
from amp_convert.validation.metrics import OutputResult, Thresholds, compare_output
from amp_convert.validation.providers import runtime_target
from amp_convert.validation.runtime import CPU_EP, CUDA_EP

Sample = dict[str, np.ndarray]


class Sessions:
    """Reference and candidate probes, the samples, the reference cache and the counters."""

    def __init__(
        self, ref_staged: Staged, *, provider: str, budget: int, original: str | None = None
    ) -> None:
        self.ref_staged = ref_staged
        #: the user's model file, when given as a path (checked at ORT defaults as is)
        self.original = original
        self.ref_proto = ref_staged.proto
        self.provider = provider
        self.device = "cuda" if provider == "cuda" else "cpu"
        self.budget = budget
        self.sessions = 0
        self.runs = 0
        self.cand_staged: Staged | None = None
        self.ref: Probe | None = None
        self.cand: Probe | None = None
        self.cache: ValueCache | None = None
        self.samples: list[Sample] = []
        self.gathered: Samples[None] | None = None
        self._done: list[int] = []
        self.batches: list[list[str]] = []

    def close(self) -> None:
        for probe in (self.cand, self.ref):
            if probe is not None:
                probe.close()
        for staged in (self.cand_staged, self.ref_staged):
            if staged is not None:
                staged.close()
        if self.cache is not None:
            self.cache.close()

    # -- crash-proof verdicts -------------------------------------------------------------------
    def reference_check_now(self) -> bool:
        """Whether the reference must be load-checked before its temporary files go."""
        src = self.ref_staged.source
        return self.original is None and isinstance(src.ort_input, str) and bool(src.ort_input)

    def check_loads(self, models: Sequence[tuple[Staged | None, str]]) -> list[str]:
        """Load each model once at ORT's default session options in one child process: a crash
        raises LoadCrashError (exit 2), never a verdict; warnings for what emulation tolerates.
        The reference given as a path is checked as that file."""
        with ExitStack() as stack:
            checks = []
            for staged, what in models:
                path = self.original if staged is self.ref_staged else None
                src = staged.source if staged is not None else None
                if path is None and src is not None:
                    if isinstance(src.ort_input, str) and src.ort_input:
                        path = src.ort_input
                    elif src.base_dir is None:
                        path = stack.enter_context(ModelFile(src.proto.SerializeToString())).path
                if path is not None:  # else: weights mapped from the original's own folder
                    checks.append(ModelToCheck(path, what))
            if not checks:
                return []
            providers = [CUDA_EP, CPU_EP] if self.provider == "cuda" else [CPU_EP]
            return check_default_load(
                checks, providers=providers, tolerate_missing_kernels=self.provider == "emulate"
            )

    # -- reference ------------------------------------------------------------------------------
    def open_reference(self, inputs: Any, dims: Mapping[str, int] | None, seed: int) -> GraphFacts:
        """Open the reference session and gather the samples through the one input generator
        (random inputs at dims the reference runs on, or the user's files): each sample's run
        *is* its FP32 reference pass (every batch fetched, cached, its peaks kept), so checking
        that the reference runs costs nothing extra. The reference's facts."""
        self.facts0 = graph_facts(self.ref_proto, {})
        exposed = onnx.ModelProto()
        exposed.CopyFrom(self.ref_proto)  # weight-free (or small): see staging
        float_values = self.facts0.float_values
        expose(exposed, float_values, dict.fromkeys(float_values, FLOAT))
        expose(exposed, self.facts0.control_inputs, self.facts0.types)  # for body localisation
        self.ref = open_probe(
            self.ref_staged.source,
            exposed,
            "reference",
            device=self.device,
            disable_optimizations=self.provider == "emulate",
            configure=lean_options(self.ref_staged.mapped),
        )
        del exposed
        self.sessions += 1
        specs = [InputSpec(n, t, s) for n, (t, s) in self.ref.runner.inputs.items()]
        self.expected = 1 if inputs is None else len(_as_list(inputs))
        self.ref_max: dict[str, float] = {}
        self.gathered = gather_samples(
            specs,
            self.ref_proto,
            self._reference_sample,
            inputs=inputs,
            dims=dims,
            seed=seed,
            what="the reference",
        )
        self.samples = [s.inputs.arrays for s in self.gathered.items]
        return self.facts

    def _plan(self, feeds: Sample) -> None:
        """Facts, batches and cache for the shapes of the first sample."""
        facts = graph_facts(self.ref_proto, feeds)
        facts.types.update({k: v for k, v in self.facts0.types.items() if k not in facts.types})
        values = [*facts.float_values, *facts.control_inputs]
        self.sizes = {v: facts.estimated_bytes(v) for v in values}
        self.batches = plan_batches(values, self.sizes, self.budget, first=facts.graph_outputs)
        total = sum(self.sizes.values()) * self.expected
        if self.cache is not None:
            self.cache.close()
        self.cache = ValueCache.plan(self.expected, total, self.budget)
        self.facts = facts

    def _reference_sample(self, feeds: Sample) -> None:
        """One sample's FP32 pass (RunError from the first batch when ORT cannot run it)."""
        assert self.ref is not None
        s = len(self._done)
        if s == 0:  # shapes may differ between attempts of the dims search
            self._plan(feeds)
        for batch in self.batches:
            got = self.ref.fetch(feeds, batch)
            self.runs += 1
            for name, arr in got.items():
                if arr is not None and self.cache is not None:
                    self.cache.put(s, name, arr)
                if arr is None or not is_float(arr):
                    continue
                fin = np.isfinite(arr)
                peak = float(np.abs(arr[fin]).max()) if fin.any() else 0.0
                self.ref_max[name] = max(self.ref_max.get(name, 0.0), peak)
            del got
        self._done.append(s)

    def reference_pass(self) -> dict[str, float]:
        """The max |value| per reference value over the samples; with every value cached, the
        reference session (and its weights) is closed."""
        if self.cache is not None and self.ref is not None:
            self.ref.close()
            self.ref = None
            self.ref_staged.close()
        return self.ref_max

    def reference_comparable(self, outputs: Sequence[str]) -> bool:
        """Whether some graph output of some sample has something to compare (a tensor with an
        element, and a finite one if it is float): else no verdict can be given."""
        for s in range(len(self.samples)):
            for arr in self.ref_batch(s, outputs).values():
                if not isinstance(arr, np.ndarray) or arr.size == 0:
                    continue
                if not is_float(arr) or np.isfinite(np.asarray(arr, np.float32)).any():
                    return True
        return False

    def ref_batch(self, s: int, batch: Sequence[str]) -> dict[str, np.ndarray]:
        if self.cache is not None:
            return self.cache.get(s, batch)
        assert self.ref is not None
        self.runs += 1
        return self.ref.fetch(self.samples[s], batch)

    def ref_values(self, names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        """Per sample, the reference values ``names`` (graph inputs from the feeds)."""
        out = []
        for s, feeds in enumerate(self.samples):
            inner = [n for n in names if n not in feeds]
            got = self.ref_batch(s, inner) if inner else {}
            got.update({n: feeds[n] for n in names if n in feeds})
            out.append(got)
        return out

    # -- candidate ------------------------------------------------------------------------------
    def open_candidate(
        self, cand: ir.Model, value_map: ValueMap, values: Sequence[str]
    ) -> list[Sample]:
        """Open the candidate's session (closing the previous one); its per-sample feeds."""
        if self.cand is not None:  # one candidate session at a time, its files with it
            self.cand.close()
            self.cand = None
        if self.cand_staged is not None:
            self.cand_staged.close()
        self.cand_staged = staged = stage(cand, "<candidate>")
        aliases = carrier_aliases(value_map, values, staged.proto)
        own = list(dict.fromkeys(aliases.values()))
        # graph outputs are the interface both models share (a STRING output too): compared by
        # their own names, never looked up in the map (which only carries float values)
        interface = {o.name for o in staged.proto.graph.output}
        aliases.update({o: o for o in self.facts.graph_outputs if o in interface})
        if self.provider == "emulate":
            emulated = build_emulated_model(
                staged.proto, staged.source.base_dir, runtime_target(self.provider)
            )
            model = emulated.model
            expose(model, own, dict.fromkeys(own, FLOAT))  # the emulated copy computes in FP32
            low_inputs = dict(emulated.low_inputs)
        else:
            model = onnx.ModelProto()
            model.CopyFrom(staged.proto)
            expose(model, own, graph_facts(staged.proto, {}).types)
            low_inputs = {}
        small = self.cache is not None and self.cache.mode == "memory"
        self.cand = open_probe(
            staged.source,
            model,
            "candidate",
            device=self.device,
            disable_optimizations=self.provider == "emulate",
            configure=lean_options(staged.mapped, arena=small),
            aliases=aliases,
        )
        self.sessions += 1
        return [_rounded_inputs(s, low_inputs) for s in self.samples]

    def cand_values(
        self, cand_feeds: Sequence[Sample], names: Sequence[str]
    ) -> list[dict[str, np.ndarray]]:
        """Per sample, the candidate's values for reference values ``names``."""
        assert self.cand is not None
        out = []
        for cfeeds in cand_feeds:
            inner = [n for n in names if n not in cfeeds]
            got = self.cand.fetch(cfeeds, inner) if inner else {}
            self.runs += 1 if inner else 0
            got.update({n: cfeeds[n] for n in names if n in cfeeds})
            out.append(got)
        return out

    def compare(
        self, cand_feeds: Sequence[Sample], outputs: Sequence[str], limits: Thresholds
    ) -> tuple[dict[str, ValueStats], list[OutputResult]]:
        """Every carried value's error, and each graph output judged (worst sample)."""
        assert self.cand is not None
        stats: dict[str, ValueStats] = {}
        per_output: dict[str, list[OutputResult]] = {o: [] for o in outputs}
        for s, cfeeds in enumerate(cand_feeds):
            for name, arr in self.samples[s].items():
                if arr.dtype == np.float32:
                    stats.setdefault(name, ValueStats()).add(arr, cfeeds[name])
            for batch in self.batches:
                ref = self.ref_batch(s, batch)
                cand = self.cand.fetch(cfeeds, batch)
                self.runs += 1
                for name in batch:
                    r = ref.get(name)
                    if name in per_output:
                        per_output[name].append(
                            compare_output(name, r, cand.get(name), limits.for_output(name))
                        )
                    if r is not None and is_float(r) and name in cand:
                        stats.setdefault(name, ValueStats()).add(r, cand[name])
        return stats, [worst(results) for results in per_output.values()]


def _as_list(inputs: Any) -> list[Any]:
    return list(inputs) if isinstance(inputs, list | tuple) else [inputs]


def _rounded_inputs(feeds: Sample, low_inputs: Mapping[str, str]) -> Sample:
    if not low_inputs:
        return feeds
    out = dict(feeds)
    for name, low in low_inputs.items():
        if name in out:
            out[name] = out[name].astype(low_numpy_type(low)).astype(np.float32)
    return out


def is_float(arr: Any) -> bool:
    return isinstance(arr, np.ndarray) and (arr.dtype.kind == "f" or arr.dtype.name == "bfloat16")


def worst(results: list[OutputResult]) -> OutputResult:
    """The sample that fails (or comes closest to failing) stands for the output."""
    import math

    failing = [r for r in results if not r.passed]
    pool = failing or results

    def key(r: OutputResult) -> tuple:
        cos = r.cosine if r.cosine is not None and math.isfinite(r.cosine) else -2.0
        return (cos, -(r.max_abs or 0.0))

    return min(pool, key=key)
