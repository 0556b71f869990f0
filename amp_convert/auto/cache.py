"""Reference values kept after the one FP32 pass, so the reference session can close at once.

Under the memory budget they stay in memory; above it they go to ``.npy`` files in a temporary
folder and are read back memory-mapped, one batch at a time, so neither the reference's weights
nor all its activations are held while candidates run. When the disk has no room for them either,
the caller keeps its reference session open and re-runs it per batch instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from amp_convert import safe_write


class ValueCache:
    """Per-sample reference values, in memory or on disk (``mode``)."""

    def __init__(self, samples: int, mode: str) -> None:
        if mode not in ("memory", "disk"):
            raise ValueError(f"mode {mode!r}")
        self.mode = mode
        self._memory: list[dict[str, Any]] = [{} for _ in range(samples)]
        self._files: list[dict[str, str]] = [{} for _ in range(samples)]
        self._tmp = safe_write.temp_folder("amp-auto-ref-") if mode == "disk" else None

    @classmethod
    def plan(cls, samples: int, total_bytes: int, budget: int) -> ValueCache | None:
        """Memory when the values fit ``budget``, disk when there is twice their room, else None."""
        if total_bytes <= budget:
            return cls(samples, "memory")
        free = shutil.disk_usage(tempfile.gettempdir()).free
        return cls(samples, "disk") if 2 * total_bytes < free else None

    def put(self, sample: int, name: str, arr: Any) -> None:
        if self.mode == "memory" or not isinstance(arr, np.ndarray) or arr.dtype == object:
            self._memory[sample][name] = arr
            return
        assert self._tmp is not None
        path = os.path.join(self._tmp.name, f"{sample}_{len(self._files[sample])}.npy")
        with safe_write.temp_writes("amp-auto-ref-"):
            try:
                np.save(path, arr, allow_pickle=False)
            except BaseException:
                safe_write.unlink_quietly(path)
                raise
        self._files[sample][name] = path

    def get(self, sample: int, names: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for n in names:
            if n in self._memory[sample]:
                out[n] = self._memory[sample][n]
            elif n in self._files[sample]:
                out[n] = np.load(self._files[sample][n], mmap_mode="r")
        return out

    def close(self) -> None:
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            tmp.cleanup()
