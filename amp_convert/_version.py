"""The package version, importable by the commands without the public API."""

__version__ = "0.1.0"
