"""One exception family, so callers and the CLI can catch everything we raise on purpose."""

from __future__ import annotations


class AmpConvertError(Exception):
    """Base of every error amp-convert raises on purpose (the CLI prints its message only)."""


class InputError(AmpConvertError):
    """The input model cannot be read or is not something we can convert."""


class OutputError(AmpConvertError):
    """The output cannot be written (exists without --force, not writable...)."""


class OptionError(AmpConvertError):
    """An option value is invalid (unknown level, bad regex, bad op list file...)."""


class VerificationError(AmpConvertError):
    """A rewrite produced an invalid model: a converter bug, reported instead of written."""


class ValidationError(AmpConvertError):
    """Validation could not run (bad inputs file, missing runtime, provider unavailable...)."""


class TargetError(AmpConvertError):
    """A target kernel table is unknown, unreadable or malformed."""
