"""Temporary folders of killed runs are removed; a live run's folder never is."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from amp_convert.files import stale


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_live_folder_survives_a_concurrent_sweep(temp_root: Path) -> None:
    folder = stale.HeldFolder("amp-test-")
    try:
        assert stale.remove_stale_folders(("amp-test-",)) == []
        assert Path(folder.name, stale.OWNER).is_file()
    finally:
        folder.cleanup()
    assert not Path(folder.name).exists()


def test_a_sweep_between_create_and_lock_leaves_the_new_folder(
    temp_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run sweeping TMPDIR at the instant a folder's owner file exists but is not yet
    locked took the live folder away (a conversion then failed: 'No such file' in /tmp)."""
    swept: list[list[str]] = []
    hold = stale.Held.hold

    def sweep_then_hold(self: stale.Held, fd: int) -> None:
        swept.append(stale.remove_stale_folders(("amp-test-",)))
        hold(self, fd)

    monkeypatch.setattr(stale.Held, "hold", sweep_then_hold)
    folder = stale.HeldFolder("amp-test-")
    try:
        assert swept == [[]]
        assert Path(folder.name, stale.OWNER).is_file()
        assert not Path(folder.name, stale.OWNER + ".claim").exists()
    finally:
        folder.cleanup()


def test_a_dead_owners_folder_is_removed(temp_root: Path) -> None:
    dead = temp_root / "amp-test-dead"
    dead.mkdir()
    (dead / stale.OWNER).write_bytes(b"")
    (dead / "model.onnx").write_bytes(b"x")
    foreign = temp_root / "amp-test-foreign"  # no owner file: not ours, left alone
    foreign.mkdir()
    assert stale.remove_stale_folders(("amp-test-",)) == ["amp-test-dead"]
    assert not dead.exists() and foreign.exists()
    assert sorted(os.listdir(temp_root)) == ["amp-test-foreign"]
