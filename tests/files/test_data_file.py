"""The weights of a model worked a chunk at a time on every core.

The parallel paths must give exactly what the simple ones gave: the data file ir.save wrote
(LowCopy chunks across chunk boundaries, NaN/Inf/subnormal/huge values, FP16 and BF16, kept FP32
external tensors, in-memory ones), the stats of one weight_range.scan per weight; a failing
worker surfaces as the one-line error a serial read gave and leaves no output; and the pool
never holds more than its bound of chunks.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner

import amp_convert
from amp_convert import pipeline
from amp_convert.commands.cli import cli
from amp_convert.core import chunk_pool, tensors, weight_range, weight_scan
from amp_convert.core.dtypes import low_type_of
from amp_convert.core.precision import numpy_type
from amp_convert.errors import InputError, OptionError
from amp_convert.files import data_file, direct_stream
from amp_convert.files import io as amp_io
from tests.graphs import mlp
from tests.helpers import one_line_error

#: the awkward values include FP16 overflows, rounded to inf on purpose (as ir.save does)
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast")
LOW = {"fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}
SMALL_CHUNK = 64  # elements: the tests cross chunk boundaries with small tensors


@pytest.fixture(params=["pread", "mapped"])
def small_chunks(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Chunks of SMALL_CHUNK elements, ranges read with pread or mapped (tensors._map_range)."""
    monkeypatch.setattr(tensors, "_MAP_MIN", 1 << 40 if request.param == "pread" else 1)
    monkeypatch.setattr(chunk_pool, "CHUNK", SMALL_CHUNK)
    monkeypatch.setattr(weight_range, "_CHUNK", SMALL_CHUNK)
    monkeypatch.setattr(weight_scan, "SCAN_CHUNK", SMALL_CHUNK)


def awkward_values(size: int, seed: int) -> np.ndarray:
    """Normal values with NaN, +-Inf, -0, FP16/BF16 subnormals and flushes, and overflows."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(size).astype(np.float32)
    specials = np.array(
        [np.nan, np.inf, -np.inf, -0.0, 1e-6, -3e-8, 2.0**-25, 1e-39, -1e-45, 7e4, -1e5, 3.4e38],
        np.float32,
    )
    where = rng.choice(size, size=min(size, 3 * len(specials)), replace=False)
    values[where] = np.resize(specials, len(where))
    return values


#: sizes around the chunk: one element, a chunk less one, a chunk, one more, several and a tail
SIZES = [1, SMALL_CHUNK - 1, SMALL_CHUNK, SMALL_CHUNK + 1, 3 * SMALL_CHUNK + 5]


def external_arrays(folder: Path, arrays: dict[str, np.ndarray]) -> dict[str, ir.ExternalTensor]:
    """`arrays` as external FP32 tensors of one data file in `folder`, at odd offsets."""
    tensors_: dict[str, ir.ExternalTensor] = {}
    with open(folder / "in.data", "wb") as f:
        for name, array in arrays.items():
            f.write(b"\x01" * 3)  # offsets that are no multiple of anything
            offset = f.tell()
            f.write(array.astype("<f4").tobytes())
            tensors_[name] = ir.ExternalTensor(
                "in.data",
                offset,
                array.nbytes,
                ir.DataType.FLOAT,
                shape=ir.Shape(array.shape),
                name=name,
                base_dir=str(folder),
            )
    return tensors_


def model_of(tensors_: list[ir.TensorProtocol]) -> ir.Model:
    """A graph that only holds `tensors_` as initializers (enough for a save)."""
    values = [
        ir.Value(name=t.name, type=ir.TensorType(t.dtype), shape=t.shape, const_value=t)
        for t in tensors_
    ]
    graph = ir.Graph([], [], nodes=[], initializers=values, opset_imports={"": 17}, name="g")
    return ir.Model(graph, ir_version=9)


def saved_both_ways(model: ir.Model, folder: Path, threads: int) -> tuple[bytes, bytes]:
    """(graph, data) bytes of ir.save(external_data=...) and of data_file's parallel write."""
    old, new = folder / "old", folder / "new"
    old.mkdir()
    new.mkdir()
    ir.save(model, old / "m.onnx", external_data="m.onnx.data", size_threshold_bytes=256)
    (new / "m.onnx.data").touch()
    os.environ["AMP_CONVERT_THREADS"] = str(threads)
    try:
        with data_file.externalized(model, str(new), "m.onnx.data", 256):
            ir.save(model, new / "m.onnx")
    finally:
        del os.environ["AMP_CONVERT_THREADS"]
    for name in ("m.onnx", "m.onnx.data"):
        assert (new / name).read_bytes() == (old / name).read_bytes(), name
    return (new / "m.onnx").read_bytes(), (new / "m.onnx.data").read_bytes()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("threads", [1, 3])
def test_parallel_data_file_is_the_one_ir_save_writes(
    tmp_path: Path, small_chunks: None, dtype: str, threads: int
) -> None:
    low = LOW[dtype]
    arrays = {f"w{i}": awkward_values(n, i) for i, n in enumerate(SIZES)}
    external = external_arrays(tmp_path, arrays)
    kept_fp32 = external_arrays_in(tmp_path / "kept", {"kept": awkward_values(200, 9)})
    memory = ir.Tensor(awkward_values(150, 7), name="memory")
    tiny_external = external_arrays_in(tmp_path / "tiny", {"tiny": awkward_values(10, 8)})
    model = model_of(
        [tensors.to_low(t, low) for t in external.values()]  # streamed a chunk at a time
        + [tensors.to_low(memory, low, saturate=True)]  # an in-memory source, saturated
        + [kept_fp32["kept"], ir.Tensor(memory.numpy(), name="fp32")]  # copied / written whole
        + [tensors.to_low(ir.Tensor(np.ones(4, np.float32), name="small"), low)]  # inline
        + [tiny_external["tiny"]]  # external but small: read into the graph
        + [packed_external(tmp_path, 1001)]  # int4 kept as stored: copied byte for byte
    )
    assert len(model.graph.initializers) == len(SIZES) + 6
    graph, data = saved_both_ways(model, tmp_path, threads)
    # the stored low values are each source value rounded on its own
    proto = onnx.load_model_from_string(graph)
    w4 = next(t for t in proto.graph.initializer if t.name == "w4")
    offset = int(next(e.value for e in w4.external_data if e.key == "offset"))
    stored = np.frombuffer(data, numpy_type(low), count=arrays["w4"].size, offset=offset)
    expected = arrays["w4"].astype(numpy_type(low))
    np.testing.assert_array_equal(stored.view(np.uint16), expected.view(np.uint16))
    # the initializers are the model's own again afterwards
    assert isinstance(model.graph.initializers["kept"].const_value, ir.ExternalTensor)
    assert isinstance(model.graph.initializers["w0"].const_value, tensors.LowCopy)


def packed_external(folder: Path, size: int) -> ir.ExternalTensor:
    """An INT4 weight of `size` values (two a byte) in its own data file, at an odd offset."""
    rng = np.random.default_rng(size)
    (folder / "int4.data").write_bytes(
        b"\x07" + rng.integers(0, 256, (size + 1) // 2, np.uint8).tobytes()
    )
    return ir.ExternalTensor(
        "int4.data",
        1,
        (size + 1) // 2,
        ir.DataType.INT4,
        shape=ir.Shape([size]),
        name="int4",
        base_dir=str(folder),
    )


def external_arrays_in(folder: Path, arrays: dict[str, np.ndarray]) -> dict[str, ir.ExternalTensor]:
    folder.mkdir()
    return external_arrays(folder, arrays)


def written(folder: Path, placed: list[data_file.Placed], threads: int) -> bytes:
    """The bytes data_file.write puts in a fresh file in `folder`."""
    path = folder / "o.data"
    path.touch()
    fd = os.open(path, os.O_WRONLY)
    try:
        data_file.write(placed, fd, threads=threads)
    finally:
        os.close(fd)
    return path.read_bytes()


def test_external_weights_are_read_by_range_never_mapped(tmp_path: Path, small_chunks) -> None:
    """Memory holds chunks, not weights: the external tensors are never memory-mapped whole."""
    external = external_arrays(tmp_path, {"a": awkward_values(500, 1)})
    tensor = external["a"]
    weight_scan.range_stats([tensor], ir.DataType.FLOAT16)
    low = tensors.to_low(tensor, ir.DataType.FLOAT16)
    assert isinstance(low, tensors.LowCopy)
    jobs = list(data_file.jobs([data_file.Placed(ir.Value(name="a"), low, 0)]))
    assert [(j.start, j.stop) for j in jobs] == [(s, min(s + 64, 500)) for s in range(0, 500, 64)]
    data = written(tmp_path, [data_file.Placed(ir.Value(name="a"), low, 0)], threads=2)
    assert tensor.raw is None  # onnx-ir maps a file on the first whole read: none happened
    assert data == low.evaluate().tobytes()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_parallel_range_stats_are_one_scans(tmp_path: Path, small_chunks, dtype: str) -> None:
    """Chunks scanned apart on 3 threads, summed in order: the stats one scan gives, exactly."""
    low = LOW[dtype]
    arrays = {f"w{i}": awkward_values(n, i) for i, n in enumerate(SIZES)}
    arrays["tiny"] = np.full(300, 1e-6, np.float32)  # all FP16-subnormal
    arrays["empty"] = np.zeros(0, np.float32)
    external = external_arrays(tmp_path, arrays)
    lazy = ir.LazyTensor(lambda: ir.Tensor(arrays["w4"]), ir.DataType.FLOAT, ir.Shape([203]))
    given = [*external.values(), ir.Tensor(arrays["w3"]), lazy]
    before = arrays["w3"].copy()
    os.environ["AMP_CONVERT_THREADS"] = "3"
    try:
        got = weight_scan.range_stats(given, low)
    finally:
        del os.environ["AMP_CONVERT_THREADS"]
    limits = low_type_of(low)
    want = [weight_range.scan(a, limits) for a in arrays.values()]
    want += [weight_range.scan(arrays["w3"], limits), weight_range.scan(arrays["w4"], limits)]
    assert got == want
    tiny = got[len(SIZES)]  # all FP16-subnormal, BF16-normal
    assert (tiny.nonzero, tiny.subnormal) == (300, 300 if dtype == "fp16" else 0)
    # the scan takes magnitudes in place only in its own read buffers, never in a model's weight
    np.testing.assert_array_equal(arrays["w3"], before)


def test_scan_in_place_gives_the_same_stats() -> None:
    """scan(scratch=True) overwrites its input with magnitudes and returns the same stats."""
    values = awkward_values(1000, 7)
    limits = low_type_of(ir.DataType.FLOAT16)
    want = weight_range.scan(values, limits)
    assert weight_range.scan(values.copy(), limits, scratch=True) == want
    assert weight_range.scan(values, limits) == want  # the plain scan left `values` alone


@pytest.mark.parametrize("direct", [True, False])
def test_one_thread_writes_the_data_file(
    tmp_path: Path, small_chunks, monkeypatch, direct: bool
) -> None:
    """Workers read and round; every write comes from the caller's thread, in file order (writers
    on several threads only contend for the file's inode lock), with O_DIRECT (direct_stream)
    and through the page cache."""
    if not direct:
        monkeypatch.setattr(direct_stream, "open_direct", _no_direct)
    arrays = {f"w{i}": awkward_values(n, i) for i, n in enumerate(SIZES)}
    external = external_arrays(tmp_path, arrays)
    placed, offset = [], 0
    for i, t in enumerate(external.values()):  # low copies and kept FP32 ranges, interleaved
        tensor = tensors.to_low(t, ir.DataType.FLOAT16) if i % 2 else t
        placed.append(data_file.Placed(ir.Value(name=t.name), tensor, offset))
        offset += tensor.nbytes
    writes: list[tuple[int, int]] = []
    real = os.pwrite

    def recorded(fd: int, data: memoryview, at: int) -> int:
        writes.append((threading.get_ident(), at))
        return real(fd, data, at)

    monkeypatch.setattr(os, "pwrite", recorded)
    data = written(tmp_path, placed, threads=3)
    assert writes and {who for who, _ in writes} == {threading.get_ident()}
    assert [at for _, at in writes] == sorted(at for _, at in writes)
    want = b"".join(
        p.tensor.evaluate().tobytes()
        if isinstance(p.tensor, tensors.LowCopy)
        else p.tensor.tobytes()
        for p in placed
    )
    assert data == want


# ------------------------------------------------------------------ failures


def mlp_file(path: Path, layers: int = 6, width: int = 64) -> Path:
    """A MatMul+Add+Relu stack whose weights all live in NAME.data."""
    model = mlp(layers=layers, width=width)
    onnx.save_model(model, path, save_as_external_data=True, location=path.name + ".data")
    return path


def serial_error(model: ir.Model, name: str) -> str:
    """The one line a plain whole read of weight `name` gives now (the serial path's error)."""
    with pytest.raises(InputError) as e:
        tensors.read(model.graph.initializers[name].const_value)
    return str(e.value)


@pytest.mark.integration
@pytest.mark.parametrize("stage", ["scan", "save"])
def test_failing_worker_is_the_serial_one_line_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_chunks, stage: str
) -> None:
    """The data file shrinks under the conversion: the scan's or the save's workers meet it,
    and the error is the serial read's, for the first weight it hides, with no output left."""
    src = mlp_file(tmp_path / "m.onnx")
    data = tmp_path / "m.onnx.data"
    whole = data.read_bytes()
    loaded = amp_io.model_from_file(onnx.load(str(src), load_external_data=False), src)
    cut = 2 * 64 * 64 * 4 + 100  # inside w2: w0 and w1 stay whole
    monkeypatch.setenv("AMP_CONVERT_THREADS", "3")
    real_run, real_save = pipeline.run, amp_io.save_model

    def truncate_then(real):
        def wrapped(*a, **k):
            os.truncate(data, cut)
            return real(*a, **k)

        return wrapped

    if stage == "scan":
        monkeypatch.setattr(pipeline, "run", truncate_then(real_run))
    else:
        monkeypatch.setattr(amp_io, "save_model", truncate_then(real_save))
    with pytest.raises(InputError) as e:
        amp_convert.convert_file(src, tmp_path / "o.onnx")
    expected = serial_error(loaded, "w2")
    assert "truncated during the conversion" in expected
    assert str(e.value) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]
    data.write_bytes(whole)
    result = CliRunner().invoke(cli, [str(src), "-o", str(tmp_path / "o.onnx")])
    assert one_line_error(result).endswith(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


def test_bad_thread_count_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for text in ("0", "many", "-2"):
        monkeypatch.setenv("AMP_CONVERT_THREADS", text)
        with pytest.raises(OptionError, match=f"AMP_CONVERT_THREADS='{text}': expected a whole"):
            chunk_pool.workers()
    monkeypatch.setenv("AMP_CONVERT_THREADS", "5")
    assert chunk_pool.workers() == 5
    monkeypatch.delenv("AMP_CONVERT_THREADS")
    assert 1 <= chunk_pool.workers() <= chunk_pool.MAX_WORKERS


# ------------------------------------------------------------------ the bound


@pytest.mark.parametrize("threads", [2, 4])
def test_ordered_map_never_holds_more_than_its_bound(threads: int) -> None:
    """Jobs are taken from the source only as results are handed back: at most `in_flight`
    taken and not yet handed back, whatever the number of jobs; results come in job order."""
    lock = threading.Lock()
    taken = handed = most = 0

    def source():
        nonlocal taken, most
        for i in range(200):
            with lock:
                taken += 1
                most = max(most, taken - handed)
            yield i

    def work(i: int) -> int:
        time.sleep(0.001 * (i % 3))  # out-of-order completion
        return i * i

    results = []
    for r in chunk_pool.ordered_map(work, source(), threads=threads, in_flight=2 * threads):
        with lock:
            handed += 1
        results.append(r)
    assert results == [i * i for i in range(200)]
    assert most <= 2 * threads


def test_ordered_map_error_is_the_first_in_order_after_every_worker_stopped() -> None:
    running = set()
    finished = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            running.add(i)
        time.sleep(0.02 if i == 3 else 0.001)
        with lock:
            running.discard(i)
            finished.append(i)
        if i in (3, 5):
            raise ValueError(f"job {i}")
        return i

    seen = []
    with pytest.raises(ValueError, match="job 3"):
        for r in chunk_pool.ordered_map(work, range(1000), threads=4):
            seen.append(r)
    assert seen == [0, 1, 2]
    assert not running  # no worker outlives the call
    assert len(finished) < 20  # the jobs not started were cancelled


@contextlib.contextmanager
def _no_direct(fd: int, size: int) -> Iterator[None]:
    """direct_stream.open_direct on a file system without O_DIRECT."""
    yield None


def test_a_whole_tensor_bigger_than_a_chunk_is_written_by_its_worker(
    tmp_path: Path, small_chunks, monkeypatch
) -> None:
    """An in-memory kept weight (one job, written whole) is not held until its turn: its worker
    writes it; the chunks around it still come from the caller's thread, and the bytes are
    right."""
    external = external_arrays(tmp_path, {"a": awkward_values(300, 1), "c": awkward_values(300, 2)})
    whole = ir.Tensor(awkward_values(1000, 3), name="b")  # 4000 bytes > a chunk's 256
    parts = [tensors.to_low(external["a"], ir.DataType.FLOAT16), whole, external["c"]]
    placed, offset = [], 0
    for t in parts:
        placed.append(data_file.Placed(ir.Value(name=t.name), t, offset))
        offset += t.nbytes
    writers: dict[int, int] = {}
    real = data_file._pwrite_all

    def recorded(fd: int, data: memoryview, at: int) -> None:
        writers[at] = threading.get_ident()
        real(fd, data, at)

    monkeypatch.setattr(data_file, "_pwrite_all", recorded)
    data = written(tmp_path, placed, threads=2)
    main = threading.get_ident()
    assert writers[placed[1].offset] != main
    assert {who for at, who in writers.items() if at < placed[1].offset} == {main}
    assert data == parts[0].evaluate().tobytes() + whole.tobytes() + external["c"].tobytes()


def test_data_file_write_keeps_its_chunks_bounded(
    tmp_path: Path, monkeypatch, small_chunks
) -> None:
    """The save's jobs go through the bounded pool: never more than 2 x threads chunks at once."""
    external = external_arrays(tmp_path, {f"w{i}": awkward_values(1000, i) for i in range(6)})
    lows = [tensors.to_low(t, ir.DataType.FLOAT16) for t in external.values()]
    placed, offset = [], 0
    for t in lows:
        placed.append(data_file.Placed(ir.Value(name=t.name), t, offset))
        offset += t.nbytes
    lock = threading.Lock()
    now = most = calls = 0
    real = data_file.write_chunk

    def counted(job, local, spare):
        nonlocal now, most, calls
        with lock:
            now += 1
            calls += 1
            most = max(most, now)
        try:
            time.sleep(0.002)
            return real(job, local, spare)
        finally:
            with lock:
                now -= 1

    monkeypatch.setattr(data_file, "write_chunk", counted)
    data = written(tmp_path, placed, threads=3)
    assert calls == 6 * 16  # 1000 elements in chunks of 64
    assert 1 < most <= 3
    assert data == b"".join(t.evaluate().tobytes() for t in lows)


def test_a_small_weight_is_rounded_into_memory_of_its_own_size(
    tmp_path: Path, small_chunks
) -> None:
    """Only chunk-sized jobs take (and hand back) a chunk-sized rounding buffer: a batch of many
    small weights held one each until written (1.7 GB for a 48-layer export's 600 weights)."""
    external = external_arrays(
        tmp_path, {"small": awkward_values(10, 0), "big": awkward_values(200, 1)}
    )
    small, big = (tensors.to_low(t, ir.DataType.FLOAT16) for t in external.values())
    local, spare = threading.local(), []
    ready = data_file.write_chunk(data_file.Job(small, 0, 0, 10), local, spare)
    assert ready.buffer is None and bytes(ready.data) == small.evaluate().tobytes()
    ready = data_file.write_chunk(data_file.Job(big, 0, 0, SMALL_CHUNK), local, spare)
    assert ready.buffer is not None and len(ready.buffer) == 2 * SMALL_CHUNK
    assert bytes(ready.data) == big.evaluate().tobytes()[: 2 * SMALL_CHUNK]


def test_small_jobs_share_a_batch_big_ones_stand_alone() -> None:
    """Many small weights make few pool jobs; a batch holds about a chunk at most."""
    sizes = [10, 20, 30, 100, 5, 5, 200, 1]
    got = list(chunk_pool.batches(sizes, lambda n: n, 64))
    assert got == [[10, 20, 30], [100], [5, 5], [200], [1]]
    assert [x for b in got for x in b] == sizes


def test_scan_goes_last_weight_first(small_chunks) -> None:
    """The save reads first to last; scanned last to first, the first weights are the ones a
    model bigger than the page cache still has cached when the save reads them."""
    given = [ir.Tensor(np.ones(n, np.float32)) for n in (100, 10, 130)]
    jobs = list(weight_scan._jobs(given))
    assert jobs == [(2, 0, 64), (2, 64, 128), (2, 128, 130), (1, 0, 10), (0, 0, 64), (0, 64, 100)]


def test_work_within_one_chunk_runs_on_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights that fit in a chunk get no pool (threads cost more than they save on a small
    model); more get every worker; a bad AMP_CONVERT_THREADS is said whatever the size."""
    monkeypatch.setenv("AMP_CONVERT_THREADS", "3")
    assert chunk_pool.workers_for(chunk_pool.CHUNK) == 1
    assert chunk_pool.workers_for(chunk_pool.CHUNK + 1) == 3
    monkeypatch.setenv("AMP_CONVERT_THREADS", "zero")
    with pytest.raises(OptionError, match="AMP_CONVERT_THREADS='zero'"):
        chunk_pool.workers_for(10)
