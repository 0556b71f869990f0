"""A run's small outputs (reports, an inputs file) committed together: all of them or none.

Why: an exit 2 must leave nothing new. A run that wrote its JSON report, then failed to write
its JUnit file (a full disk) or found its model's name taken (a file that appeared during the
run), used to exit 2 with the first output committed. Every small output is now staged first
(``StagedFile``: written under a held temporary name, the step that can fail), and committed with
the others at the end; a commit that fails rolls the committed ones back (a replaced file comes
back from its backup link, a new one is removed). A model pair commits last, after these: its
failure rolls them back too (``before_commit`` of ``io.save_model``).
"""

from __future__ import annotations

import contextlib

from amp_convert.files.safe_write import Slot, StagedFile


class OutputSet:
    """Staged small outputs; ``commit`` puts all in place or none, ``close`` cleans up."""

    def __init__(self) -> None:
        self._staged: list[StagedFile] = []
        self._committed: list[StagedFile] = []

    def stage(self, slot: Slot, data: bytes) -> None:
        """Write `data` for `slot` under a temporary name now (OutputError when it cannot be)."""
        self._staged.append(StagedFile(slot, data))

    @property
    def paths(self) -> list[str]:
        return [str(s.slot.path) for s in self._staged]

    def commit(self) -> None:
        """Every staged file in place, or (on an error) none of them: the replaced ones back."""
        try:
            for staged in self._staged:
                staged.commit(keep_backup=True)
                self._committed.append(staged)
        except BaseException:
            self.roll_back()
            raise

    def roll_back(self) -> None:
        """Undo the commits made (a later output, such as the model, failed)."""
        for staged in reversed(self._committed):
            with contextlib.suppress(OSError):
                staged.roll_back()
        self._committed = []

    def close(self) -> None:
        """The end of the run: backups of committed files dropped, uncommitted ones removed."""
        for staged in self._committed:
            staged.drop_backup()
        for staged in self._staged:
            staged.discard()
        self._committed, self._staged = [], []

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
