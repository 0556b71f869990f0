"""Rotary embeddings at long positions: does FP16 hold? Measured under the emulating validator.

    python bench/rotary_positions.py

Two cases, O2, error of the worst output against the FP32 model at several start positions:
1. fused (models/fused.py genai_llama, GroupQueryAttention with do_rotary and RotaryEmbedding +
   MultiHeadAttention): the cos/sin caches are initializers stored FP16. Each entry is one value in
   [-1, 1] rounded once (abs error <= 2^-12 at any position) and the position ids stay int64.
2. unfused, angles computed in the graph as torch exports them: Cast(position_ids) -> MatMul with
   inv_freq -> Cos/Sin. FP16 holds integers exactly only up to 2048, and an angle of 30000 rad has
   an FP16 spacing of 16 rad.
Prints one line per case and position.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amp_convert import convert
from amp_convert.validation import validate
from bench._needs import needs
from models.fused import genai_llama, in_graph_rotary, step_feeds

POSITIONS = (0, 4096, 30000)


def _llama_feeds(model: onnx.ModelProto, start: int, gqa: bool) -> dict[str, np.ndarray]:
    """One step at `start`: GQA reads its positions from the past length, MHA from position_ids."""
    seq, past = (1, start) if gqa and start else (8, 0 if gqa else 3)
    return step_feeds(model, seq=seq, past=past, start=start)


def _worst(original: onnx.ModelProto, converted: onnx.ModelProto, feeds: dict) -> str:
    report = validate(original, converted, provider="emulate", inputs=feeds, runs=1)
    worst = min(report.outputs, key=lambda o: o.cosine)
    return f"cosine {worst.cosine:.7f}  max abs {worst.max_abs:.3g}  ({worst.name})"


def main() -> int:
    needs("onnxruntime")
    for attention in ("gqa", "mha"):
        model = genai_llama(attention=attention, max_positions=32768)
        converted = convert(model, level="O2")
        for start in POSITIONS:
            feeds = _llama_feeds(model, start, attention == "gqa")
            print(
                f"fused genai_llama ({attention}) position {start:>5}: "
                f"{_worst(model, converted, feeds)}"
            )
    model = in_graph_rotary()
    converted = convert(model, level="O2")
    rng = np.random.default_rng(0)
    for start in POSITIONS:
        feeds = {
            "position_ids": np.arange(start, start + 8, dtype=np.int64)[None],
            "x": rng.standard_normal((1, 8, 16)).astype(np.float32),
        }
        print(f"in-graph rotary angles position {start:>5}: {_worst(model, converted, feeds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
