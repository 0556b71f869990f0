"""The models gpu_bench.py measures, at GPU-bound sizes (tiny ones for --small), and their feeds.

The builders are the test-model builders of models/ with bigger parameters, so the benchmark meets
the same exporter patterns the tests pin down (un-fused BatchNormalization, decomposed GELU, tied
embedding, additive masks). Weights are random but seeded: two runs build the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from models.blocks import bert_encoder, gpt_decoder, resnet_cnn
from models.inputs import sample_inputs


@dataclass(frozen=True)
class BenchModel:
    """One model: how to build it, the dims of its feeds, and a line that says what it is."""

    key: str  # what --only selects
    name: str  # e.g. "BERT-base"
    build: Callable[[], onnx.ModelProto]
    dims: dict[str, int]  # symbolic dim -> value for the feeds

    @property
    def title(self) -> str:
        """The table's model column: the name and the feed dims, "BERT-base"."""
        return " ".join([self.name, *(f"{k[0]}{v}" for k, v in self.dims.items())])

    def feeds(self, model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded inputs (ids in the vocabulary's range, masks of 0/1, images standard normal)."""
        return sample_inputs(model, seed=seed, dims=self.dims)


def _resnet50(image: int, classes: int, channels: int, depths: list[int]):
    return lambda: resnet_cnn(
        channels=channels,
        image=image,
        classes=classes,
        depths=depths,
        bottleneck=True,
        stem_kernel=7,
        stem_stride=2,
    )


def _bert(layers: int, hidden: int, heads: int, vocab: int):
    return lambda: bert_encoder(
        layers=layers, hidden=hidden, heads=heads, vocab=vocab, max_positions=512
    )


def _gpt(layers: int, hidden: int, heads: int, vocab: int):
    return lambda: gpt_decoder(
        layers=layers, hidden=hidden, heads=heads, vocab=vocab, max_positions=1024
    )


#: GPU-bound sizes: where FP16 vs FP32 is set by bytes and FLOPs, not by kernel launches.
FULL: dict[str, BenchModel] = {
    "cnn": BenchModel(
        "cnn",
        "ResNet-50 BN-in-graph",
        _resnet50(224, 1000, 64, [3, 4, 6, 3]),
        {"batch": 128},
    ),
    "bert": BenchModel("bert", "BERT-base", _bert(12, 768, 12, 30522), {"batch": 64, "seq": 128}),
    "gpt": BenchModel("gpt", "GPT-2", _gpt(12, 768, 12, 50257), {"batch": 8, "seq": 512}),
}

#: Tiny versions of the same graphs (--small): every op and pattern, seconds on a CPU.
SMALL: dict[str, BenchModel] = {
    "cnn": BenchModel(
        "cnn", "ResNet BN-in-graph (small)", _resnet50(32, 10, 8, [1, 1, 1, 1]), {"batch": 2}
    ),
    "bert": BenchModel("bert", "BERT (small)", _bert(2, 64, 4, 100), {"batch": 2, "seq": 16}),
    "gpt": BenchModel("gpt", "GPT-2 (small)", _gpt(2, 64, 4, 100), {"batch": 2, "seq": 16}),
}

MODEL_KEYS = tuple(FULL)


@dataclass(frozen=True)
class BuiltModel:
    """A benchmark model on disk: the FP32 file (weights in external data) and its feeds."""

    spec: BenchModel
    path: Path
    feeds: dict[str, np.ndarray]
    params: int
    nodes: int


def build_model(spec: BenchModel, folder: Path, seed: int = 0) -> BuiltModel:
    """Build ``spec`` and write it to ``folder/KEY.onnx`` with its weights in ``KEY.onnx.data``.

    External data (what exporters do for big models) keeps every later copy — converted variants,
    ORT sessions — off the 2 GiB protobuf limit and lets amp-convert stream the weights; the small
    models take the same path, so --small exercises it too.
    """
    model = spec.build()
    feeds = spec.feeds(model, seed)
    params = int(sum(int(np.prod(t.dims)) for t in model.graph.initializer))
    nodes = len(model.graph.node)
    path = folder / f"{spec.key}.onnx"
    # save_model moves the weights out of `model` into the data file; nothing reads it after.
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=path.name + ".data",
        size_threshold=1024,
    )
    return BuiltModel(spec, path, feeds, params, nodes)
