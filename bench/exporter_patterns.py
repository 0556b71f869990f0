"""Real exporters' output, validated on default inputs: the patterns validation recognises must
match what the exporters write today, not what hand-built test models imitate.

    python bench/exporter_patterns.py [--genai-site DIR] [--optimum-site DIR] [--steps 4]
                                      [--work DIR] [--json FILE]

Exports tiny random-initialised models (no download: configs made in code, tokenizers built from
a word list) with each exporter that installs here, converts each at O2 and runs ``validate
--provider emulate --decode-steps N`` with no ``--dim``, no ``--inputs``: the default inputs must
run. Prints, per model: the dims the generator chose, the worst output's cosine, token
agreement over N steps, and the error if any.

* **onnxruntime-genai's builder** (needs transformers >= 5, as in the project's venv):
  ``pip install --no-deps --target DIR onnxruntime-genai`` and ``--genai-site DIR``. Llama and
  Qwen2 (4 heads, 2 KV heads, head size 16, 64 positions) at ``-p fp32 -e cpu`` (packed QKV,
  GroupQueryAttention, cache head axis ``kv_cache_dim``) and ``-p int4 -e cpu`` (MatMulNBits).
* **optimum-onnx** (needs transformers 4.57, so a second site): ``pip install --no-deps --target
  DIR optimum-onnx optimum "transformers==4.57.*" "huggingface_hub<1.0" "tokenizers<0.23"`` and
  ``--optimum-site DIR``: GPT-2 ``text-generation-with-past`` (one ``model.onnx`` with past
  inputs) and Whisper ``automatic-speech-recognition-with-past`` (its merged decoder, 64
  positions here: decode steps must leave room).

An exporter that is not installed is listed as skipped, never as passing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amp_convert import convert_file
from amp_convert.errors import AmpConvertError
from amp_convert.validation import validate
from bench._needs import needs

HF_CONFIG = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}

MAKE_HF = """
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
import transformers
torch.manual_seed(0)
kind, out, config = sys.argv[1], sys.argv[2], eval(sys.argv[3])
classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config",
           "Qwen2ForCausalLM")}
cfg_cls, model_cls = (getattr(transformers, n) for n in classes[kind])
model_cls(cfg_cls(**config)).save_pretrained(out)
vocab = {f"t{i}": i for i in range(config["vocab_size"])}
vocab.update({"<unk>": 0, "<s>": 1, "</s>": 2})
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                        eos_token="</s>").save_pretrained(out)
"""

MAKE_OPTIMUM = """
import sys, torch, transformers
from optimum.exporters.onnx import main_export
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
torch.manual_seed(0)
kind, hf, out = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "gpt2":
    cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(hf)
    task = "text-generation-with-past"
else:
    cfg = transformers.WhisperConfig(
        vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, num_mel_bins=80, max_source_positions=1500,
        max_target_positions=64, decoder_start_token_id=1, pad_token_id=0, eos_token_id=2,
        bos_token_id=1, begin_suppress_tokens=None, suppress_tokens=None)
    transformers.WhisperForConditionalGeneration(cfg).save_pretrained(hf)
    transformers.WhisperFeatureExtractor(feature_size=80).save_pretrained(hf)
    task = "automatic-speech-recognition-with-past"
vocab = {f"t{i}": i for i in range(128)}
vocab.update({"<unk>": 0, "<s>": 1, "</s>": 2})
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                        eos_token="</s>", pad_token="<unk>").save_pretrained(hf)
main_export(hf, output=out, task=task, opset=17, do_validation=False, no_post_process=False)
"""


def _python(code: str, args: list[str], site: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if site:
        env["PYTHONPATH"] = os.pathsep.join([site, env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _genai(work: Path, site: str) -> dict[str, Path | str]:
    """Llama and Qwen2, FP32 and int4, as the GenAI builder writes them for ORT's CPU provider."""
    out: dict[str, Path | str] = {}
    for kind in ("llama", "qwen2"):
        hf = work / f"{kind}_hf"
        done = _python(MAKE_HF, [kind, str(hf), repr(HF_CONFIG)], None)
        if done.returncode:
            out[f"genai {kind}"] = "config: " + done.stderr.strip().splitlines()[-1]
            continue
        for precision in ("fp32", "int4"):
            dst = work / f"genai_{kind}_{precision}"
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": site}
            built = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "onnxruntime_genai.models.builder",
                    "-m",
                    kind,
                    "-i",
                    str(hf),
                    "-o",
                    str(dst),
                    "-p",
                    precision,
                    "-e",
                    "cpu",
                    "-c",
                    str(work / "cache"),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            name = f"genai {kind} {precision}"
            model = dst / "model.onnx"
            out[name] = model if model.is_file() else "builder: " + _last(built.stderr)
    return out


def _optimum(work: Path, site: str) -> dict[str, Path | str]:
    """GPT-2 and Whisper merged decoders as optimum-onnx exports them."""
    out: dict[str, Path | str] = {}
    for kind in ("gpt2", "whisper"):
        dst = work / f"optimum_{kind}"
        done = _python(MAKE_OPTIMUM, [kind, str(work / f"{kind}_hf"), str(dst)], site)
        # a merged decoder (Whisper), or one model with past inputs (GPT-2 in optimum-onnx 0.1)
        found = [m for m in (dst / "decoder_model_merged.onnx", dst / "model.onnx") if m.is_file()]
        label = f"optimum {kind} " + ("merged" if "merged" in str(found[:1]) else "with past")
        out[label] = found[0] if found else "export: " + _last(done.stderr)
    return out


def _last(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def _judge(src: Path, steps: int) -> dict[str, Any]:
    dst = src.with_name(src.stem + ".fp16.onnx")
    try:
        convert_file(src, dst, level="O2", force=True)
        report = validate(
            str(src),
            str(dst),
            provider="emulate",
            runs=0,
            decode_steps=steps,
            thresholds={"min_cosine": 0.999},
        )
    except AmpConvertError as e:
        return {"error": str(e)[:400]}
    worst = min((o.cosine for o in report.outputs if o.cosine is not None), default=None)
    decode = report.decode
    return {
        "verdict": report.verdict,
        "dims": dict(report.dims),
        "worst_cosine": worst,
        "steps": None if decode is None else len(decode.steps),
        "token_agreement": None if decode is None else decode.token_agreement,
        "notes": [] if decode is None else list(decode.notes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--genai-site", help="folder onnxruntime-genai is installed in")
    parser.add_argument("--optimum-site", help="folder optimum-onnx (transformers 4.57) is in")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--work", help="keep the exported models here")
    parser.add_argument("--json", help="write the figures as JSON")
    args = parser.parse_args(argv)
    needs("onnxruntime")
    work = Path(args.work or tempfile.mkdtemp(prefix="exporters-"))
    work.mkdir(parents=True, exist_ok=True)
    models: dict[str, Path | str] = {}
    for site, build, label in (
        (args.genai_site, _genai, "onnxruntime-genai builder"),
        (args.optimum_site, _optimum, "optimum-onnx"),
    ):
        if not site:
            models[label] = "skipped: not installed (see the module docstring)"
            continue
        models.update(build(work, site))
    results: dict[str, Any] = {}
    print(f"{'model':28s} {'verdict':10s} {'worst cosine':>12s} {'tokens':>8s}  dims / error")
    for name, model in models.items():
        if isinstance(model, str):
            results[name] = {"error": model}
            print(f"{name:28s} {'-':10s} {'-':>12s} {'-':>8s}  {model}")
            continue
        r = results[name] = _judge(model, args.steps)
        if "error" in r:
            print(f"{name:28s} {'ERROR':10s} {'-':>12s} {'-':>8s}  {r['error']}")
            continue
        tokens = "-" if r["token_agreement"] is None else f"{r['token_agreement']:.0%}"
        cos = "-" if r["worst_cosine"] is None else f"{r['worst_cosine']:.6f}"
        dims = ", ".join(f"{k}={v}" for k, v in r["dims"].items())
        print(f"{name:28s} {r['verdict']:10s} {cos:>12s} {tokens:>8s}  {dims}")
        for note in r["notes"]:
            print(f"{'':28s} note: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
