"""The size a dynamic input dim takes when the user does not set it: one rule for every caller.

The cast-cost estimate (``shapes.assumed_dims``) and validation's random inputs
(``validation.input_dims``) both read these rules, so a model is sized the same way whether it is
being converted or checked. Each dynamic axis of a graph input gets a role, and the role a size:

* ``batch`` (1): a batch-like name (``batch``, ``batch_size``, ``N``, ``B``, ``bs``,
  ``num_images``...), or the first axis of a rank >= 2 input whose name does not say otherwise
  (dynamo's ``s0``, tf2onnx's ``unk__12``, Paddle's ``p2o.DynamicDimension.0`` or ``-1``);
* ``channels`` (3): a dim named ``channels`` / ``num_channels`` (optimum's image inputs);
* ``image`` (224): H or W of an image input: a rank-4 float input in NCHW or NHWC with 1, 3 or 4
  channels (or a channel dim named so), or an input named like an image (``pixel_values``,
  ``image``, ``images``, ``img``), or a dim named ``height`` / ``width``. A KV cache
  (``past_key_values.*``, ``*cache*``) is never an image, whatever its head count, nor are axes
  named as sequences (``sequence``, ``past``, ``time``...);
* ``other`` (128): anything else, named or not (sequences, past lengths, frames).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

BATCH_DIM = 1
CHANNELS_DIM = 3
IMAGE_DIM = 224
OTHER_DIM = 128
DEFAULTS = {"batch": BATCH_DIM, "channels": CHANNELS_DIM, "image": IMAGE_DIM, "other": OTHER_DIM}

#: dim_param spellings that mean "unknown": each such axis is its own dim, keyed input[axis]
UNKNOWN_DIM_NAMES = frozenset({"", "?", "-1", "none", "unk"})
_BATCH_NAMES = re.compile(
    r"^(n|b|bs|nbatch|batch.*|.*_batch|.*batch_?size.*|num_images|num_batches)$", re.I
)
#: names that say a leading axis is not a batch (time-major sequences, sizes, caches)
_NOT_BATCH = re.compile(
    r"seq|len|time|step|frame|token|past|height|width|size|channel|cache|sample", re.I
)
_SEQUENCE = re.compile(r"seq|len|time|step|frame|token|past|cache", re.I)
_CHANNEL_NAMES = re.compile(r"^(num_)?channels?$", re.I)
_IMAGE_DIM_NAMES = re.compile(r"height|width|^(img|image)_?[hw]$", re.I)
_IMAGE_INPUTS = re.compile(r"^(pixel_values|images?|imgs?|input_images?)$", re.I)
#: inputs holding a KV cache: their past axis is a sequence, never an image
CACHE_INPUTS = re.compile(r"^(past|present)|cache|key_values", re.I)
_IMAGE_CHANNELS = (1, 3, 4)

Dim = int | str | None


def is_batch_like(name: str) -> bool:
    """Symbolic dim names that conventionally mean the batch size."""
    return bool(_BATCH_NAMES.match(name.strip()))


def is_named(d: Dim) -> bool:
    """A dim_param that names a shared dim (not one of the "unknown" spellings)."""
    return isinstance(d, str) and d.strip().lower() not in UNKNOWN_DIM_NAMES


def _is_channel(d: Dim) -> bool:
    return (isinstance(d, int) and d in _IMAGE_CHANNELS) or (
        is_named(d) and bool(_CHANNEL_NAMES.match(str(d)))
    )


def axis_role(name: str, is_float: bool, shape: Sequence[Dim], axis: int) -> str:
    """``batch``, ``channels``, ``image`` or ``other`` (see the module docstring)."""
    d = shape[axis]
    named = is_named(d)
    text = str(d) if named else ""
    if named and is_batch_like(text):
        return "batch"
    if named and _CHANNEL_NAMES.match(text):
        return "channels"
    cache = bool(CACHE_INPUTS.search(name))
    if not cache and _is_image_axis(name, is_float, shape, axis):
        return "image"
    if axis == 0 and len(shape) >= 2 and not (named and _NOT_BATCH.search(text)):
        return "batch"
    return "other"


def _is_image_axis(name: str, is_float: bool, shape: Sequence[Dim], axis: int) -> bool:
    d = shape[axis]
    if is_named(d) and _IMAGE_DIM_NAMES.search(str(d)):
        return True
    if len(shape) != 4 or not is_float:
        return False
    if axis in (2, 3) and (_is_channel(shape[1]) or _IMAGE_INPUTS.match(name)):
        return not _sequence_named(shape[2], shape[3])
    nhwc = axis in (1, 2) and _is_channel(shape[3]) and not _is_channel(shape[1])
    return nhwc and not _sequence_named(shape[1], shape[2])


def _sequence_named(*dims: Dim) -> bool:
    """H/W candidates named as a sequence (``sequence``, ``past``...) are no image."""
    return any(is_named(d) and _SEQUENCE.search(str(d)) for d in dims)


def axis_defaults(
    inputs: Iterable[tuple[str, bool, Sequence[Dim]]], keys: Iterable[tuple[str, int, str]]
) -> dict[str, tuple[int, str]]:
    """Key → (default size, role) for ``keys`` = (input name, axis, key) of the inputs given as
    (name, is_float, shape). A key used several times takes the image role if any use is an
    image axis, else the role of its first use."""
    shapes = {n: (f, s) for n, f, s in inputs}
    out: dict[str, tuple[int, str]] = {}
    for name, axis, key in keys:
        is_float, shape = shapes[name]
        role = axis_role(name, is_float, shape, axis)
        if key not in out or (role == "image" and out[key][1] != "image"):
            out[key] = (DEFAULTS[role], role)
    return out


def named_default(name: str) -> int:
    """The default of a dim known only by its name (a name inside an expression)."""
    return BATCH_DIM if is_batch_like(name) else OTHER_DIM
