"""Trained models that ship inside registry wheels: amp-convert O2 against the FP16 converters.

    python bench/trained_models.py [--cache DIR] [--json FILE]

Downloads (``pip download --no-deps``, never in a test) rapidocr-onnxruntime 1.4.4 (PaddleOCR's
PP-OCRv4 detector and recogniser and the v2.0 direction classifier, paddle2onnx exports at opset
11-12), silero-vad 6.2.3 (its VAD, ``silero_vad.onnx``: If branches per sample rate) and magika
1.0.3 (Google's file-type classifier, flax through jax2tf/tf2onnx), then converts each with
amp-convert (defaults: O2, ort-cuda), ORT's ``onnxruntime.transformers.float16`` and
onnxconverter-common (both ``keep_io_types=True``), and reports per model and tool: casts added,
file size, and the worst output cosine against FP32 under ``validate --provider emulate`` (FP16
rounding reproduced on CPU) on realistic inputs made here: a rendered text line (PIL when
installed, else bright strokes on a dark page, models.input_meaning.text_like_image) normalised
as PaddleOCR does; a speech-like signal (a 120 Hz glottal pulse train through two formant
resonances, an amplitude envelope, breath noise) in 512-sample chunks with the VAD state of the
chunks before; the first and last 1024 bytes of a real text file for Magika.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._needs import needs
from bench.pipelines import casts, conversions, emulate_cosine, try_into
from models.input_meaning import text_like_image

WHEELS = {
    "rapidocr-onnxruntime==1.4.4": "rapidocr_onnxruntime/models/",
    "silero-vad==6.2.3": "silero_vad/data/",
    "magika==1.0.3": "magika/models/standard_v3_3/",
}
Feeds = Callable[[onnx.ModelProto], dict[str, np.ndarray]]


def fetch(cache: Path) -> dict[str, Path]:
    """The .onnx members of the wheels, extracted under `cache` (downloaded once)."""
    cache.mkdir(parents=True, exist_ok=True)
    for spec in WHEELS:
        name = spec.split("==")[0].replace("-", "_")
        if not list(cache.glob(f"{name}-*.whl")):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "-q",
                    spec,
                    "-d",
                    str(cache),
                ],
                check=True,
            )
    found: dict[str, Path] = {}
    for wheel in cache.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if member.endswith(".onnx") and any(member.startswith(p) for p in WHEELS.values()):
                    target = cache / "onnx" / member
                    if not target.exists():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(z.read(member))
                    found[Path(member).name] = target
    return found


def text_line(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A text line as PaddleOCR feeds it: [1, 3, H, W], (x/255 - 0.5) / 0.5."""
    try:
        from PIL import Image, ImageDraw, ImageFont

        img = Image.new("RGB", (width, height), "white")
        font = ImageFont.load_default(size=int(height * 0.6))
        ImageDraw.Draw(img).text(
            (4, height // 6), "amp-convert 2025: ONNX FP16", fill="black", font=font
        )
        pixels = np.asarray(img, np.float32).transpose(2, 0, 1)[None] / 255.0
    except ImportError:  # no PIL: bright strokes on a dark page, inverted to dark on light
        pixels = 1.0 - np.clip(text_like_image(height, width, seed), 0.0, 1.0)
    return ((pixels - 0.5) / 0.5).astype(np.float32)


def page(height: int = 320, width: int = 320) -> np.ndarray:
    """A page of text lines for the detector, normalised with ImageNet's mean and std."""
    pixels = np.clip(text_like_image(height, width, 1), 0.0, 1.0)
    mean = np.array([0.485, 0.456, 0.406], np.float32)[None, :, None, None]
    std = np.array([0.229, 0.224, 0.225], np.float32)[None, :, None, None]
    return ((pixels - mean) / std).astype(np.float32)


def speech(samples: int, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A voiced, speech-like signal: glottal pulses at ~120 Hz through formants near 700 and
    1200 Hz, a syllable envelope and breath noise, peak ~0.5."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    f0 = 120 + 15 * np.sin(2 * np.pi * 3 * t)
    phase = np.cumsum(2 * np.pi * f0 / rate)
    source = sum(np.sin(k * phase) / k for k in range(1, 25))
    voiced = sum(
        np.sin(k * phase) * np.exp(-(((k * f0) - fc) ** 2) / (2 * 150.0**2))
        for k in range(1, 25)
        for fc in (700.0, 1200.0)
    )
    envelope = 0.5 * (1 - np.cos(2 * np.pi * 4 * t)) + 0.1
    signal = envelope * (0.3 * source + voiced) + 0.01 * rng.standard_normal(samples)
    return (0.5 * signal / np.abs(signal).max()).astype(np.float32)


def vad_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The 11th 512-sample chunk, with the state the FP32 model left after the first ten."""
    import onnxruntime as ort

    audio = speech(512 * 11)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, 128), np.float32)
    sr = np.array(16000, np.int64)
    for i in range(10):
        _, state = session.run(
            None, {"input": audio[None, 512 * i : 512 * (i + 1)], "state": state, "sr": sr}
        )
    return {"input": audio[None, 5120:], "state": state, "sr": sr}


def magika_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    data = (Path(__file__).resolve().parent.parent / "README.md").read_bytes()
    sample = np.frombuffer(data[:1024] + data[-1024:], np.uint8).astype(np.int32)
    return {"bytes": sample[None]}


MODELS: dict[str, tuple[str, Feeds]] = {
    "PP-OCRv4 det (paddle2onnx, opset 12)": ("ch_PP-OCRv4_det_infer.onnx", lambda m: {"x": page()}),
    "PP-OCRv4 rec (paddle2onnx, opset 12)": (
        "ch_PP-OCRv4_rec_infer.onnx",
        lambda m: {"x": text_line(48, 320)},
    ),
    "PP-OCR v2.0 cls (paddle2onnx, opset 11)": (
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        lambda m: {"x": text_line(48, 192)},
    ),
    "silero VAD (If per rate, opset 16)": ("silero_vad.onnx", vad_feeds),
    "Magika (jax2tf/tf2onnx, opset 15)": ("model.onnx", magika_feeds),
}


def measure(name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[dict]:
    rows = []
    for row, converted in conversions({"model": name}, model):
        rows.append(row)
        if converted is None:  # a tool that fails gets its first line
            continue
        out = converted[0]
        row["casts_added"] = casts(out) - casts(model)
        row["bytes"] = out.ByteSize()
        try_into(row, "cosine", emulate_cosine, model, out, inputs=feeds)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | tool | casts added | size (MB) | emulate cosine |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['tool']} | fails: {r['error']} | | |")
            continue
        cos = f"{r['cosine']:.6f}" if "cosine" in r else r.get("cosine_error", "-")
        lines.append(
            f"| {r['model']} | {r['tool']} | {r['casts_added']} | {r['bytes'] / 1e6:.2f} | {cos} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "amp-convert-bench"))
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    needs("onnxruntime", "onnxconverter_common")
    files = fetch(Path(args.cache))
    rows: list[dict] = []
    for name, (file, feeds) in MODELS.items():
        print(f"measuring {name} ...", file=sys.stderr)
        model = onnx.load(str(files[file]))
        rows += measure(name, model, feeds(model))
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
