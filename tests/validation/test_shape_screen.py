"""Screening input sizes by shape inference: trusted only when it explains ORT's failure."""

from __future__ import annotations

import numpy as np

from amp_convert.validation.shape_screen import ShapeScreen
from models import input_meaning as im


def _image(h: int, w: int) -> dict[str, np.ndarray]:
    return {"x": np.zeros((1, 3, h, w), np.float32)}


def test_a_recognizer_is_screened_at_224_and_passes_at_48() -> None:
    model = im.text_recognizer()
    screen = ShapeScreen.explaining(model, _image(224, 224))
    assert screen is not None
    refused = screen.refuses(_image(640, 640))
    assert refused is not None and "Squeeze" in refused and "must be 1 instead of 38" in refused
    assert screen.refuses(_image(48, 320)) is None
    assert screen.refuses(_image(40, 100)) is None  # 33-48 all collapse to 1


def test_no_screen_when_inference_does_not_explain_the_failure() -> None:
    """A model inference is happy with at the failed sizes: every attempt keeps its ORT run."""
    model = im.unnamed_hw_cnn()
    assert ShapeScreen.explaining(model, _image(224, 224)) is None


def test_the_weight_free_copy_leaves_the_model_alone() -> None:
    model = im.text_recognizer()
    before = model.SerializeToString()
    ShapeScreen.explaining(model, _image(224, 224))
    assert model.SerializeToString() == before
