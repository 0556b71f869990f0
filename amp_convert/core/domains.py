"""Operator domains: the ONNX default domain has two spellings, "" and "ai.onnx".

Every comparison of a node's domain with the default one goes through here, so that a model
written with "ai.onnx" behaves exactly like one written with "".
"""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT = ""
DEFAULT_SPELLINGS = frozenset({"", "ai.onnx"})


def is_default(domain: str | None) -> bool:
    """Whether `domain` is the ONNX default domain (either spelling, or unset)."""
    return not domain or domain in DEFAULT_SPELLINGS


def normalise(domain: str | None) -> str:
    """The domain with the default spelt "" (onnx.defs and op keys use that spelling)."""
    return DEFAULT if is_default(domain) else str(domain)


def qualified(domain: str | None) -> str:
    """The domain with the default spelt "ai.onnx" (ORT's kernel registry uses that spelling)."""
    return "ai.onnx" if is_default(domain) else str(domain)


def op_key(domain: str | None, op_type: str) -> str:
    """'Conv' for the default domain, 'com.microsoft:Attention' for others."""
    return op_type if is_default(domain) else f"{domain}:{op_type}"


def imported_opset(opsets: Mapping[str, int], domain: str | None = DEFAULT) -> int | None:
    """The opset a model imports for `domain` (either spelling of the default), or None."""
    if is_default(domain):
        for spelling in ("", "ai.onnx"):
            if spelling in opsets:
                return opsets[spelling]
        return None
    return opsets.get(str(domain))


def opset_version(opsets: Mapping[str, int], domain: str | None = DEFAULT) -> int:
    """The opset a model imports for `domain`; 1 when it imports none (ONNX's first opset)."""
    version = imported_opset(opsets, domain)
    return 1 if version is None else version
