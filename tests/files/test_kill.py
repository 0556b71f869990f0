"""SIGKILL at every step of a pair write, then a rerun: nothing left but the old pair or the new.

A killed process runs no clean-up at all, so what it leaves is whatever was on disk at that
instant. Each case kills a real ``convert_file --force`` (replacing an old external-data pair)
from pair_write's step hook, checks that the output is still the old pair or the new one, then
runs the conversion again and checks that the folder holds the input, the new pair and nothing
else (stale temporaries and orphan data files of the killed run removed by the rerun).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import amp_convert
from amp_convert.files.pair_write import Step
from tests.files.test_pair_write import external, referenced, result

ROOT = Path(__file__).resolve().parents[2]

_KILLED = """
import os, signal, sys
from amp_convert.files import data_file, pair_write
step, src, out = sys.argv[1:]

def kill(at=None):
    os.kill(os.getpid(), signal.SIGKILL)

if step == "MID_DATA":  # half of the weights written under the temporary name
    write = data_file.write
    def half(placed, fd, threads=None):
        write(placed[: max(1, len(placed) // 2)], fd, threads)
        kill()
    data_file.write = half
else:
    pair_write.on_step = lambda at: kill() if at.name == step else None
import amp_convert
amp_convert.convert_file(src, out, force=True)
"""

KILL_POINTS = [s.name for s in Step] + ["MID_DATA"]


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_file())


@pytest.fixture
def pair(tmp_path: Path):
    """An input model and an old output pair from another model (different values)."""
    src = external(tmp_path / "m.onnx", seed=0)
    (tmp_path / "new").mkdir()
    other = external(tmp_path / "new" / "old.onnx", seed=5)
    out = tmp_path / "o.onnx"
    amp_convert.convert_file(other, out)
    fresh = tmp_path / "new" / "o.onnx"
    amp_convert.convert_file(src, fresh)
    return src, out, result(out), result(fresh)


@pytest.mark.integration
@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_every_step_then_a_rerun_leaves_only_a_pair(pair, point: str) -> None:
    src, out, old_values, new_values = pair
    done = subprocess.run(
        [sys.executable, "-c", _KILLED, point, str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    got = result(out)  # right after the kill: the old pair or the new one, whole
    assert np.array_equal(got, old_values) or np.array_equal(got, new_values)
    amp_convert.convert_file(src, out, force=True)  # the rerun
    np.testing.assert_array_equal(result(out), new_values)
    assert files(out.parent) == sorted({"m.onnx", "m.onnx.data", "o.onnx", *referenced(out)})
    onnx.checker.check_model(str(out), full_check=True)


@pytest.mark.integration
def test_a_live_writers_temporaries_are_not_stale(pair) -> None:
    """Another process still writing (its temporaries locked) keeps them through our commit."""
    src, out, _, _ = pair
    held = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out.parent), out.name],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        name = held.stdout.readline().strip() if held.stdout else ""
        assert name.startswith(".o.onnx.")
        amp_convert.convert_file(src, out, force=True)
        assert (out.parent / name).exists()
    finally:
        held.kill()
        held.wait()
    amp_convert.convert_file(src, out, force=True)  # its writer is gone now: stale
    assert not (out.parent / name).exists()


_HOLD = """
import os, sys, time
from amp_convert.files import stale
folder, output = sys.argv[1:]
fd = os.open(folder, os.O_RDONLY)
held = stale.Held()
print(held.create(output, "data.tmp", fd), flush=True)
time.sleep(120)
"""


_KILLED_IN_TEMP = """
import os, signal, sys
from amp_convert.files import pair_write

def kill(at):
    if at.name == "WRITTEN":
        os.kill(os.getpid(), signal.SIGKILL)

pair_write.on_step = kill
sys.argv = ["amp-convert", *sys.argv[1:]]
from amp_convert.startup import main
main()
"""


@pytest.mark.integration
def test_a_killed_runs_temporary_folder_is_removed_by_the_next_run(pair, tmp_path: Path) -> None:
    """--validate stages the model in a temporary folder: a SIGKILL there left the folder (and
    the model in it) in TMPDIR for good."""
    src, out, _, _ = pair
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    args = [str(src), "-o", str(out), "--force", "--validate", "--provider", "emulate", "-q"]
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_IN_TEMP, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert [p.name for p in temp.iterdir() if p.name.startswith("amp-validate-")]
    rerun = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv[0] = 'amp-convert'\nfrom amp_convert.startup import main; main()",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert [p.name for p in temp.iterdir() if p.name.startswith("amp-")] == []
    assert files(out.parent) == sorted({"m.onnx", "m.onnx.data", "o.onnx", *referenced(out)})
