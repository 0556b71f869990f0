"""Every string a model file carries is checked once, where the file is decoded.

A protobuf ``string`` field must hold UTF-8; protobuf's Python runtime (upb) hands an invalid one
over as ``bytes`` instead of ``str``, and it then fails far away (onnx-ir's serialiser raised a
SerdeError in ``--auto``'s staging, exit 3). A name is also bounded: a 64 KiB input name could
not be saved as an ``.npz`` member, and no exporter writes names of that size. ``check_strings``
walks the proto (an explicit stack: subgraphs nest) and refuses the first bad string in one line,
saying which field holds it.
"""

from __future__ import annotations

import onnx
from google.protobuf.descriptor import FieldDescriptor

from amp_convert.core.user_text import printable
from amp_convert.errors import InputError

#: the longest name (of a value, node, graph, op, domain, metadata key) a model may hold
MAX_NAME_CHARS = 0xFFFF
#: string fields that are text, not names: doc strings and metadata values may be long
_FREE_TEXT = {"doc_string", "value"}
_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def check_strings(proto: onnx.ModelProto, where: str) -> None:
    """InputError for a string field that is not valid UTF-8, or a name over MAX_NAME_CHARS."""
    stack: list[tuple[object, str]] = [(proto, "model")]
    while stack:
        message, path = stack.pop()
        for field, value in message.ListFields():  # type: ignore[attr-defined]
            if field.type == _MESSAGE:
                items = value if _repeated(field) else [value]
                stack.extend((m, f"{path}.{field.name}") for m in items)
            elif field.type == _STRING:
                for text in value if _repeated(field) else [value]:
                    _check_one(text, field.name, path, where)


def _repeated(field: FieldDescriptor) -> bool:
    """protobuf 5+ says ``is_repeated`` (upb has no ``label``); older ones say ``label``."""
    flag = getattr(field, "is_repeated", None)
    if flag is None:
        return bool(field.label == FieldDescriptor.LABEL_REPEATED)
    return bool(flag)


def _check_one(text: object, name: str, path: str, where: str) -> None:
    if not isinstance(text, str):  # upb's bytes: not UTF-8
        raw = text if isinstance(text, bytes) else str(text).encode()
        shown = printable(raw[:60].decode("utf-8", "surrogateescape"))
        raise InputError(
            f"{where}: the {name} field of {path} holds '{shown}', which is not valid UTF-8 "
            "(a protobuf string must be)"
        )
    if name not in _FREE_TEXT and len(text) > MAX_NAME_CHARS:
        raise InputError(
            f"{where}: a {name} of {path} is {len(text)} characters long (at most "
            f"{MAX_NAME_CHARS}): '{printable(text[:40])}...'"
        )
