"""Decode-step validation (``validate --decode-steps N``): roll both models out as decoders.

A decoder's error does not stay put: each step reads the KV cache the previous steps wrote, so a
small FP16 error in ``present.*`` is fed back and can grow, and one flipped greedy token sends the
two generations apart. One forward pass on random inputs cannot show that; this does.

Each model runs on its OWN state: after a step, its ``present.X`` outputs become its
``past_key_values.X`` inputs, its greedy token (argmax of the last position of the logits) its
``input_ids``, ``attention_mask`` grows by a column of ones and ``position_ids`` moves one position
on, where the model has them. A merged decoder (input ``use_cache_branch``) starts without past
(the flag False, an empty cache) and then runs with it (True). An encoder-decoder's merged
decoder (optimum's Whisper, T5) computes its cross-attention cache on step 1 and returns an empty
placeholder for it afterwards: an empty ``present`` never replaces a cache that was not empty.
Every step's outputs are compared with the same thresholds as a single run.

Bounded twice, because each step costs a run of both models and the cache grows by a position
each step: at most MAX_DECODE_STEPS steps (10,000: a divergence shows in the first hundreds,
and 20,000 session runs already take minutes to hours; ``--decode-steps 1000000000`` ran until
killed), and after step 2, when the cache's growth per step is measured, a roll-out whose
cache would outgrow the memory budget at its last step (each model's past and present: four
copies) is refused with the number of steps that fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_convert.errors import ValidationError
from amp_convert.files.budget import memory_budget
from amp_convert.validation.decoder_inputs import is_cross_cache
from amp_convert.validation.metrics import OutputResult
from amp_convert.validation.options import MAX_DECODE_STEPS as MAX_DECODE_STEPS  # re-exported
from amp_convert.validation.runtime import RunError

#: input name -> output name pairs: past_key_values.X / past.X / past_X (ORT's GPT-2) in,
#: present.X / present_X out
_PAST = re.compile(r"^(?:past_key_values|past)[._](.+)$")
_PRESENT = re.compile(r"^(?:present_key_values|present)[._](.+)$")
USE_CACHE = "use_cache_branch"

Outputs = Mapping[str, np.ndarray | None]
Run = Callable[[dict[str, np.ndarray]], Outputs]
Compare = Callable[[str, np.ndarray | None, np.ndarray | None], OutputResult]


@dataclass(frozen=True)
class DecoderIO:
    """Which inputs and outputs make a model a decoder: the KV pairs, logits and the extras."""

    kv: tuple[tuple[str, str], ...]  # (past input, present output)
    logits: str
    merged: bool
    has_mask: bool
    has_positions: bool
    #: named dims of the past inputs that the first step of a merged decoder sets to 0
    past_dims: tuple[str, ...] = ()


def decoder_io(inputs: Mapping[str, tuple[str, list]], outputs: Sequence[str]) -> DecoderIO:
    """The decoder interface of a model, or ValidationError saying why it is not one."""
    present = {m.group(1): n for n in outputs if (m := _PRESENT.match(n))}
    kv = tuple(
        (n, present[m.group(1)]) for n in inputs if (m := _PAST.match(n)) and m.group(1) in present
    )
    if not kv:
        raise ValidationError(
            "--decode-steps needs a decoder with a KV cache: no past_key_values.* input with a "
            "matching present.* output found (inputs: "
            f"{', '.join(inputs) or 'none'}; outputs: {', '.join(outputs) or 'none'})"
        )
    if "input_ids" not in inputs:
        raise ValidationError("--decode-steps needs an input_ids input to feed the next token")
    kv_outputs = {p for _, p in kv}
    candidates = [n for n in outputs if n not in kv_outputs]
    logits = "logits" if "logits" in outputs else (candidates[0] if candidates else "")
    if not logits:
        raise ValidationError("--decode-steps needs a logits output besides the present.* ones")
    token_dims = {d for d in inputs["input_ids"][1] if isinstance(d, str)}
    past_dims = {  # a cross-attention cache's length is the encoder's, never 0
        d
        for name, _ in kv
        if not is_cross_cache(name)
        for d in inputs[name][1]
        if isinstance(d, str) and d not in token_dims
    }
    return DecoderIO(
        kv,
        logits,
        USE_CACHE in inputs,
        "attention_mask" in inputs,
        "position_ids" in inputs,
        tuple(sorted(past_dims)),
    )


@dataclass
class DecodeStep:
    """One generation step: each model's greedy tokens and every output compared."""

    step: int  # 1-based
    reference_tokens: list[int]
    candidate_tokens: list[int]
    outputs: list[OutputResult]

    @property
    def same_token(self) -> bool:
        return self.reference_tokens == self.candidate_tokens

    @property
    def failed(self) -> bool:
        return any(o.failed for o in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "reference_tokens": list(self.reference_tokens),
            "candidate_tokens": list(self.candidate_tokens),
            "same_token": self.same_token,
            "status": "fail" if self.failed else _status(self.outputs),
            "outputs": [o.to_dict() for o in self.outputs],
        }


@dataclass
class DecodeResult:
    """The roll-out: one DecodeStep per step, token agreement and the first divergence."""

    steps: list[DecodeStep]
    merged: bool
    kv_pairs: int
    notes: list[str] = field(default_factory=list)
    #: the steps asked for (more than ``len(steps)`` when the model's positions ended first)
    requested: int | None = None

    @property
    def token_agreement(self) -> float:
        """Share of steps where both models chose the same token (every batch row)."""
        return sum(s.same_token for s in self.steps) / len(self.steps) if self.steps else 1.0

    @property
    def first_divergence(self) -> int | None:
        """The first step (1-based) whose tokens differ, None when they never do."""
        return next((s.step for s in self.steps if not s.same_token), None)

    def worst(self) -> dict[str, OutputResult]:
        """Per output, its worst step (a failure first, then the lowest cosine)."""
        worst: dict[str, OutputResult] = {}
        for s in self.steps:
            for o in s.outputs:
                if o.name not in worst or badness(o) > badness(worst[o.name]):
                    worst[o.name] = o
        return worst

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [s.to_dict() for s in self.steps],
            "token_agreement": self.token_agreement,
            "first_divergence": self.first_divergence,
            "merged": self.merged,
            "kv_pairs": self.kv_pairs,
            "requested": len(self.steps) if self.requested is None else self.requested,
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        """The table's decode section: a summary line, then one line per step."""
        n, same = len(self.steps), sum(s.same_token for s in self.steps)
        div = self.first_divergence
        asked = "" if self.requested in (None, n) else f" of {self.requested} asked (see below)"
        out = [
            f"decode: {n} steps{asked}"
            f"{' (merged decoder: step 1 without past)' if self.merged else ''}, "
            f"same greedy token in {same}/{n} ({self.token_agreement:.1%}), first divergence: "
            + ("none" if div is None else f"step {div}")
            + "; each output above shows its worst of the single run and the steps"
        ]
        for s in self.steps:
            floats = [o for o in s.outputs if o.cosine is not None]
            low = min(floats, key=lambda o: o.cosine or 0.0) if floats else None
            tok = "same" if s.same_token else "DIFFER"
            ref_t, cand_t = _tokens(s.reference_tokens), _tokens(s.candidate_tokens)
            worst = "" if low is None else f"; lowest cosine {low.cosine:.6f} ({low.name})"
            status = "FAIL" if s.failed else {"pass": "PASS"}.get(_status(s.outputs), "-")
            out.append(
                f"  step {s.step}: token {tok} (ref {ref_t}, cand {cand_t}){worst}; {status}"
            )
        out.extend(f"  {note}" for note in self.notes)
        return out


def _tokens(tokens: list[int]) -> str:
    return str(tokens[0]) if len(tokens) == 1 else str(tokens)


def _status(outputs: list[OutputResult]) -> str:
    if any(o.failed for o in outputs):
        return "fail"
    return "pass" if any(o.status == "pass" for o in outputs) else "not_judged"


def badness(r: OutputResult) -> tuple:
    """Order results worst-last: a failure, then the lowest cosine, the largest error."""
    cosine = 1.0 if r.cosine is None else r.cosine
    return (r.failed, -cosine, r.max_abs or 0.0, r.mismatches or 0)


def first_feeds(io: DecoderIO, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Step 1's inputs: as generated/given, a merged decoder told to run without its cache."""
    out = dict(feeds)
    if io.merged:
        out[USE_CACHE] = np.zeros_like(np.asarray(feeds[USE_CACHE]), dtype=np.bool_)
    return out


def next_feeds(
    io: DecoderIO, feeds: Mapping[str, np.ndarray], outputs: Outputs, tokens: np.ndarray
) -> dict[str, np.ndarray]:
    """The next step's inputs from this step's inputs and outputs (one model's own state)."""
    nxt = dict(feeds)
    ids = np.asarray(feeds["input_ids"])
    nxt["input_ids"] = tokens.astype(ids.dtype).reshape(ids.shape[0], 1)
    for past, present in io.kv:
        value = outputs[present]
        if value is None:
            raise ValidationError(f"--decode-steps: output {present} is not a tensor")
        if value.size == 0 and np.asarray(feeds[past]).size:
            continue  # a merged decoder's placeholder (optimum's cross-attention cache): keep
        nxt[past] = value
    if io.has_mask:
        mask = np.asarray(feeds["attention_mask"])
        nxt["attention_mask"] = np.concatenate([mask, np.ones_like(mask[:, :1])], axis=1)
    if io.has_positions:
        pos = np.asarray(feeds["position_ids"])
        nxt["position_ids"] = pos[:, -1:] + 1
    if io.merged:
        nxt[USE_CACHE] = np.ones_like(np.asarray(feeds[USE_CACHE]), dtype=np.bool_)
    return nxt


def greedy(io: DecoderIO, outputs: Outputs, role: str) -> np.ndarray:
    """Argmax over the vocabulary at the last position, one token per batch row."""
    logits = outputs.get(io.logits)
    if logits is None or logits.ndim < 2:
        raise ValidationError(
            f"--decode-steps: the {role}'s {io.logits} is not a [batch, (seq,) vocab] tensor"
        )
    last = logits[:, -1, :] if logits.ndim >= 3 else logits
    return np.argmax(np.asarray(last, dtype=np.float32), axis=-1)


def roll_out(
    io: DecoderIO,
    feeds: Mapping[str, np.ndarray],
    steps: int,
    run_reference: Run,
    run_candidate: Run,
    compare: Compare,
    output_names: Sequence[str],
) -> DecodeResult:
    """Run both models ``steps`` steps from ``feeds``, each on its own tokens and cache."""
    ref_feeds = cand_feeds = first_feeds(io, feeds)
    done: list[DecodeStep] = []
    sizes: list[int] = []
    notes: list[str] = []
    for step in range(1, steps + 1):
        try:
            ref_out = run_reference(ref_feeds)
        except RunError as e:
            if step == 1:
                raise
            notes.append(_stopped(step, steps, ref_feeds, e))
            break
        cand_out = run_candidate(cand_feeds)
        if step <= 2:
            sizes.append(cache_bytes(io, ref_out))
            if step == 2:
                check_cache_growth(sizes[0], sizes[1] - sizes[0], steps)
        ref_tok, cand_tok = greedy(io, ref_out, "reference"), greedy(io, cand_out, "candidate")
        results = [compare(n, ref_out[n], cand_out[n]) for n in output_names]
        done.append(DecodeStep(step, ref_tok.tolist(), cand_tok.tolist(), results))
        if step < steps:
            ref_feeds = next_feeds(io, ref_feeds, ref_out, ref_tok)
            cand_feeds = next_feeds(io, cand_feeds, cand_out, cand_tok)
    return DecodeResult(done, io.merged, len(io.kv), notes, requested=steps)


def _stopped(step: int, steps: int, feeds: Mapping[str, np.ndarray], error: RunError) -> str:
    """Why the roll-out ended early: the reference itself cannot run the next step (the model's
    positions end there), so the steps it ran are judged and the rest cannot be."""
    mask = feeds.get("attention_mask")
    at = f" at {np.asarray(mask).shape[-1]} positions" if mask is not None else ""
    return (
        f"stopped after step {step - 1} of {steps}: the reference cannot run step {step}{at} "
        f"({error.detail}); the model's positions end there, so steps {step}-{steps} are not "
        "judged (start from a shorter sequence with --dim or --inputs to judge more)"
    )


def cache_bytes(io: DecoderIO, outputs: Outputs) -> int:
    """Bytes of one model's present.* outputs (its cache after a step)."""
    return sum(
        np.asarray(value).nbytes
        for _, present in io.kv
        if (value := outputs.get(present)) is not None
    )


def check_cache_growth(first: int, growth: int, steps: int) -> None:
    """Refuse a roll-out whose cache (4 copies) would outgrow the memory budget by its end."""
    if growth <= 0 or steps <= 2:
        return
    budget = memory_budget()
    last = 4 * (first + (steps - 1) * growth)
    if last <= budget:
        return
    fits = max(2, (budget // 4 - first) // growth + 1)
    raise ValidationError(
        f"--decode-steps {steps}: the KV cache grows by {growth} bytes a step and would take "
        f"{_mib(last)} at step {steps} (each model's past and present), more than the memory "
        f"budget of {_mib(budget)} (AMP_CONVERT_MEMORY_BUDGET); at most {fits} steps fit"
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
