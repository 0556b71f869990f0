"""ONNX Runtime plumbing: lazy import, model sources, sessions per provider, feeds, timing.

onnxruntime is imported only here and only when validation runs, so conversion never needs it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto

from amp_convert.core import proto_walk
from amp_convert.errors import ValidationError
from amp_convert.files import file_kinds, safe_write, text_fields


class CudaStartError(ValidationError):
    """The CUDA provider did not start (CPU fallback or EPFail): ``auto`` falls back on the type."""


class RunError(ValidationError):
    """ORT raised while running a model; ``detail`` is ORT's own first line."""

    def __init__(self, role: str, detail: str) -> None:
        super().__init__(f"ONNX Runtime failed to run the {role}: {detail}")
        self.detail = detail


MISSING_ORT = "validation needs ONNX Runtime: pip install 'amp-convert[cpu]' (or [gpu])"
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"
# Above this a model cannot be passed to ORT as one serialized protobuf (2 GiB hard limit).
_PROTO_LIMIT = 1_900_000_000

NP_DTYPES: dict[str, np.dtype] = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(bfloat16)": np.dtype(ml_dtypes.bfloat16),
    "tensor(double)": np.dtype(np.float64),
    "tensor(int8)": np.dtype(np.int8),
    "tensor(int16)": np.dtype(np.int16),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(uint16)": np.dtype(np.uint16),
    "tensor(uint32)": np.dtype(np.uint32),
    "tensor(uint64)": np.dtype(np.uint64),
    "tensor(bool)": np.dtype(np.bool_),
    "tensor(string)": np.dtype(object),  # ORT takes str objects (or a numpy unicode array)
}


#: said after ORT's "no kernel" load errors
NO_KERNEL_HINT = (
    " (ORT on this device has no kernel for it at this precision: ORT CPU lacks most "
    "BF16 and some FP16 kernels; use --provider emulate, or cuda)"
)


def is_missing_kernel(message: str) -> bool:
    """ORT's words for "this device has no kernel for this type": a gap, not a broken model."""
    return "NOT_IMPLEMENTED" in message or "Could not find an implementation" in message


def _installed(name: str) -> bool:
    """Whether a top-level package is installed (found on the path; nothing is imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a half-imported module in sys.modules: it is there
        return True


def import_ort() -> Any:
    """Import onnxruntime or raise the one clear error that says how to get it."""
    try:
        import onnxruntime
    except ImportError as e:
        if not _installed("onnxruntime"):
            raise ValidationError(MISSING_ORT) from None
        # installed but broken (or left half-imported): never "not installed"
        raise ValidationError(f"ONNX Runtime is installed but does not import: {e}") from None
    return onnxruntime


def cuda_available() -> bool:
    """Whether the installed ORT build offers the CUDA provider (it may still fail to start)."""
    ort = import_ort()
    return CUDA_EP in ort.get_available_providers()


# --------------------------------------------------------------------------------------------
# model sources


@dataclass
class ModelSource:
    """One model as ORT wants it (path or bytes) plus its graph, loaded without external data.

    A model over 2 GiB is handed to ORT as a temporary external-data folder; ``close()`` (or
    leaving a ``with`` block) deletes it, after every session on it is closed.
    """

    label: str
    ort_input: str | bytes
    proto: onnx.ModelProto
    #: folder external data is relative to (None for bytes / in-memory models)
    base_dir: str | None = None
    _tmp: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @property
    def has_external_data(self) -> bool:
        return any(
            t.data_location == TensorProto.EXTERNAL for t in _all_initializers(self.proto.graph)
        )

    def close(self) -> None:
        """Delete the temporary external-data folder, if one was made (idempotent)."""
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            tmp.cleanup()

    def __enter__(self) -> ModelSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _all_initializers(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    for g in proto_walk.graphs(graph):
        yield from g.initializer


def load_source(model: Any, role: str) -> ModelSource:
    """Path, bytes, onnx.ModelProto or onnx_ir.Model → ModelSource (errors name the role)."""
    if isinstance(model, str | os.PathLike):
        path = Path(model)
        if why := file_kinds.not_a_file(path):
            raise ValidationError(
                f"{role} {path}: " + ("no such file" if why == "does not exist" else why)
            )
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as e:
            raise ValidationError(f"{role} {path}: not a readable ONNX model ({e})") from None
        text_fields.check_strings(proto, f"{role} {path}")
        # the folder of the path as given, never the symlink's target: ONNX Runtime reads the
        # data files next to the link (a Hugging Face cache links both files into blobs/)
        return ModelSource(str(path), str(path), proto, os.path.dirname(os.path.abspath(path)))
    if isinstance(model, bytes | bytearray | memoryview):
        data = bytes(model)
        try:
            proto = onnx.load_model_from_string(data)
        except Exception as e:
            raise ValidationError(f"{role} <bytes>: not an ONNX model ({e})") from None
        src = ModelSource("<bytes>", data, proto)
    elif isinstance(model, onnx.ModelProto):
        src = ModelSource("<ModelProto>", b"", model)
    else:
        import onnx_ir as ir  # a hard dependency

        if not isinstance(model, ir.Model):
            raise ValidationError(
                f"{role}: expected a path, bytes, onnx.ModelProto or onnx_ir.Model, "
                f"got {type(model).__name__}"
            )
        proto = ir.serde.serialize_model(model)
        src = ModelSource("<onnx_ir.Model>", b"", proto)
    if not src.proto.HasField("graph"):
        raise ValidationError(f"{role} {src.label}: not an ONNX model (no graph)")
    text_fields.check_strings(src.proto, f"{role} {src.label}")
    if src.has_external_data:
        raise ValidationError(
            f"{role} {src.label}: the model refers to external data files; pass its path "
            "instead so ONNX Runtime can find them"
        )
    if not src.ort_input:
        src.ort_input = serialize_for_ort(src)
    return src


def serialize_for_ort(src: ModelSource) -> str | bytes:
    """Bytes for ORT, or a temporary external-data file when the model is over 2 GiB."""
    if src.proto.ByteSize() < _PROTO_LIMIT:
        return src.proto.SerializeToString()
    tmp = safe_write.temp_folder("amp-validate-")
    src._tmp = tmp
    path = os.path.join(tmp.name, "model.onnx")
    proto = onnx.ModelProto()
    proto.CopyFrom(src.proto)  # saving as external data rewrites the proto it is given
    with safe_write.temp_writes("amp-validate-"):
        onnx.save_model(proto, path, save_as_external_data=True, location="model.onnx.data")
    src.base_dir = tmp.name
    return path


# --------------------------------------------------------------------------------------------
# sessions


@dataclass
class Runner:
    """A session plus how to feed and time it on its device; ``close()`` when done."""

    session: Any
    device: str  # "cpu" or "cuda"
    inputs: dict[str, tuple[str, list]]  # name -> (ORT type string, shape)
    outputs: list[tuple[str, str]]  # (name, ORT type string)
    #: a >2 GiB rewritten model saved for this session alone (its folder goes with the runner)
    owned_source: ModelSource | None = field(default=None, repr=False)

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())

    @property
    def output_names(self) -> list[str]:
        return [n for n, _ in self.outputs]

    def close(self) -> None:
        """Drop the session, then delete what only it used (idempotent)."""
        self.session = None  # before deleting files the session may map
        if self.owned_source is not None:
            self.owned_source.close()
            self.owned_source = None


def make_session(
    src: ModelSource,
    role: str,
    *,
    device: str,
    disable_optimizations: bool,
    model_override: onnx.ModelProto | None = None,
    configure: Callable[[Any], None] | None = None,
    cuda_options: Mapping[str, str] | None = None,
) -> Runner:
    """Open an ORT session for ``src`` (or for ``model_override``, a rewritten copy of it).

    ``disable_optimizations`` sets ORT_DISABLE_ALL: the emulate mode needs it so that no graph
    optimiser may ever fold the rounding Cast pairs (ORT 1.31 keeps them even at ORT_ENABLE_ALL,
    but that is an implementation detail we do not want to depend on). The reference runs at ORT's
    defaults, as users run it (sessions.py): constant folding is what feeds prepacking kernels
    such as MatMulNBits the weights they read. ``configure`` may adjust the SessionOptions last
    (--auto's probes trade ORT's arena and weight prepacking for a smaller memory footprint).
    ``cuda_options`` go to the CUDA provider (``--cuda-option``: prefer_nhwc...).
    """
    ort = import_ort()
    so = ort.SessionOptions()
    so.log_severity_level = 4  # errors come back as exceptions; retried runs stay quiet
    # no CPU arena: it keeps the largest intermediates of every run for the session's life
    # (validation holds two sessions, and memory is budgeted: files/budget.py)
    so.enable_cpu_mem_arena = False
    if disable_optimizations:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if configure is not None:
        configure(so)
    model_input: str | bytes = src.ort_input
    owned: ModelSource | None = None
    if model_override is not None:
        if model_override.ByteSize() < _PROTO_LIMIT:
            folder = src.base_dir
            if folder:
                model_override, folder = linked_data(model_override, folder)
                so.add_session_config_entry(
                    "session.model_external_initializers_file_folder_path", folder
                )
            model_input = model_override.SerializeToString()
        else:
            owned = ModelSource(src.label, b"", model_override)
            model_input = serialize_for_ort(owned)
    elif src.base_dir and isinstance(model_input, bytes):
        so.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", src.base_dir
        )
    providers: list = [CPU_EP]
    if device == "cuda":
        providers = [(CUDA_EP, dict(cuda_options or {})), CPU_EP]
    ep_fail = _ort_ep_fail_type(ort)
    try:
        session = ort.InferenceSession(model_input, so, providers=providers)
    except Exception as e:
        if owned is not None:
            owned.close()
        msg = first_line(e)
        if device == "cuda" and ep_fail is not None and isinstance(e, ep_fail):
            raise CudaStartError(
                f"{role} {src.label}: the CUDA provider failed to start ({msg}); check the "
                "CUDA/cuDNN libraries onnxruntime-gpu needs, or use --provider emulate"
            ) from None
        hint = NO_KERNEL_HINT if is_missing_kernel(msg) else ""
        if device == "cuda" and cuda_options:
            given = ", ".join(f"{k}={v}" for k, v in cuda_options.items())
            hint += f" (with the CUDA provider options {given})"
        raise ValidationError(
            f"{role} {src.label}: ONNX Runtime cannot load it: {msg}{hint}"
        ) from None
    if device == "cuda" and CUDA_EP not in session.get_providers():
        if owned is not None:
            owned.close()
        raise CudaStartError(
            f"{role} {src.label}: the CUDA provider failed to start (ORT fell back to CPU); "
            "check the CUDA/cuDNN libraries onnxruntime-gpu needs, or use --provider emulate"
        )
    inputs = {i.name: (i.type, list(i.shape)) for i in session.get_inputs()}
    outputs = [(o.name, o.type) for o in session.get_outputs()]
    return Runner(session, device, inputs, outputs, owned_source=owned)


def linked_data(proto: onnx.ModelProto, folder: str) -> tuple[onnx.ModelProto, str]:
    """``proto`` (a rewritten copy of a model in ``folder``) and the folder its data is read from.

    Why: ONNX Runtime follows a symlinked data file when it loads the model by path, but a copy
    handed over as bytes may only read files that resolve inside the folder it is given, and a
    Hugging Face cache links every file into ``blobs/``. Where a data file resolves elsewhere,
    the copy's locations name the very files the link leads to, relative to their common folder:
    the same bytes ONNX Runtime reads for the model itself, never the files next to a link target.
    """
    real = os.path.realpath(folder)
    external = [
        t for t in _all_initializers(proto.graph) if t.data_location == TensorProto.EXTERNAL
    ]
    places: dict[str, str] = {}
    for t in external:
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        places[location] = os.path.realpath(os.path.join(folder, location))
    if all(os.path.commonpath([real, p]) == real for p in places.values()):
        return proto, folder
    common = os.path.commonpath([os.path.dirname(p) for p in places.values()])
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for t in _all_initializers(copy.graph):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        for e in t.external_data:
            if e.key == "location":
                e.value = os.path.relpath(places[e.value], common)
    return copy, common


def _ort_ep_fail_type(ort: Any) -> type[BaseException] | None:
    """ORT's exception type for an execution-provider failure (None if this build has none)."""
    state = getattr(getattr(ort, "capi", None), "onnxruntime_pybind11_state", None)
    return getattr(state, "EPFail", None)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --------------------------------------------------------------------------------------------
# feeds and fetches


def to_ortvalue(arr: np.ndarray, type_str: str, device: str = "cpu") -> Any:
    """numpy → OrtValue of the session's declared type (BF16 goes through its bit pattern)."""
    ort = import_ort()
    arr = np.ascontiguousarray(arr).reshape(np.shape(arr))  # a scalar stays rank 0
    dev_args = ("cuda", 0) if device == "cuda" else ("cpu", 0)
    if type_str == "tensor(bfloat16)":
        bits = np.ascontiguousarray(arr.astype(ml_dtypes.bfloat16).view(np.uint16))
        if device == "cuda":
            ov = ort.OrtValue.ortvalue_from_shape_and_type(
                list(arr.shape), TensorProto.BFLOAT16, *dev_args
            )
            ov.update_inplace(bits)
            return ov
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    want = NP_DTYPES.get(type_str)
    if want is not None and arr.dtype != want:
        arr = np.ascontiguousarray(arr.astype(want))
    return ort.OrtValue.ortvalue_from_numpy(arr, *dev_args)


def from_ortvalue(ov: Any) -> np.ndarray | None:
    """OrtValue on CPU → numpy (BF16 upcast exactly to FP32); None for non-tensors."""
    if isinstance(ov, np.ndarray):  # a plain session.run (string feeds) returns numpy already
        return ov
    if not ov.is_tensor():
        return None
    if ov.element_type() == TensorProto.BFLOAT16:
        shape = ov.shape()
        n = int(np.prod(shape)) if shape else 1
        raw = ctypes.string_at(ov.data_ptr(), n * 2)
        return np.frombuffer(raw, np.uint16).view(ml_dtypes.bfloat16).reshape(shape)
    return ov.numpy()


def bind_feeds(
    runner: Runner,
    feeds: Mapping[str, np.ndarray],
    *,
    outputs_on: str,
    names: Sequence[str] | None = None,
) -> tuple[Callable[[], Any], Any]:
    """One inference as a call, with the inputs converted (and on CUDA bound) once.

    Returns ``(call, binding)``. On CUDA the inputs are copied to the device once and bound with
    I/O binding, outputs are bound on ``outputs_on`` ("cpu" to read them, "cuda" to keep host
    copies out of timings), ``call()`` only runs, and the outputs are ``binding.get_outputs()``.
    On CPU the inputs become OrtValues once, ``binding`` is None and ``call()`` returns the
    outputs. Outputs come in ``names`` order (default: ``runner.output_names``; any value the
    session exposes may be named). String feeds go through a plain ``run`` (no OrtValue holds
    strings).
    """
    session = runner.session
    names = list(runner.output_names if names is None else names)
    if runner.device == "cuda":
        binding = session.io_binding()
        for name, arr in feeds.items():
            binding.bind_ortvalue_input(name, to_ortvalue(arr, runner.inputs[name][0], "cuda"))
        for name in names:
            binding.bind_output(name, outputs_on)
        return (lambda: session.run_with_iobinding(binding)), binding
    if any(runner.inputs[n][0] == "tensor(string)" for n in feeds):
        return (lambda: session.run(names, dict(feeds))), None  # no OrtValue from strings
    ovs = {n: to_ortvalue(a, runner.inputs[n][0]) for n, a in feeds.items()}
    return (lambda: session.run_with_ort_values(names, ovs)), None


def fetch_outputs(
    runner: Runner, feeds: Mapping[str, np.ndarray], names: Sequence[str]
) -> dict[str, np.ndarray | None]:
    """One inference returning `names` (any value the session exposes) as host arrays.

    Raises whatever ORT raises; ``run_once`` and the --auto probes word it for their role.
    """
    call, binding = bind_feeds(runner, feeds, outputs_on="cpu", names=names)
    values = call()
    if binding is not None:
        values = binding.get_outputs()
    return {n: from_ortvalue(v) for n, v in zip(names, values, strict=True)}


def run_once(
    runner: Runner, feeds: Mapping[str, np.ndarray], role: str = "model"
) -> dict[str, np.ndarray | None]:
    """One inference with host outputs (for accuracy), on the runner's device."""
    try:
        return fetch_outputs(runner, feeds, runner.output_names)
    except ValidationError:
        raise
    except Exception as e:
        raise RunError(role, first_line(e)) from None


def time_runs(
    runner: Runner,
    feeds: Mapping[str, np.ndarray],
    *,
    runs: int,
    warmup: int,
    tick: Callable[[], None] | None = None,
) -> list[float]:
    """Per-run latencies in ms after ``warmup`` untimed runs.

    On CUDA, inputs are bound on the device once and outputs stay there (I/O binding), so host
    copies are not timed; ORT synchronises the stream at the end of each run.
    """
    call, _ = bind_feeds(runner, feeds, outputs_on="cuda")
    for _ in range(warmup):
        call()
    times: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000.0)
        if tick is not None:
            tick()
    return times
