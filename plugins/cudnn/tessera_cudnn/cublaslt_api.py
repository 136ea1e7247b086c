"""A thin ctypes binding of the cuBLASLt calls the ``cublas`` backend makes.

Matmul descriptors (compute type, transposes, epilogue, bias pointer), matrix layouts (with
strided batches) and preferences need no GPU, so their set-up is checked on any machine; the
handle, the algorithm heuristics and ``cublasLtMatmul`` need one. Enum values are CUDA 13's
(``cublasLt.h``, ``cublas_api.h``, ``library_types.h``).
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

from tessera.errors import RunError

from .libs import Functions, PerDevice

VP = ctypes.c_void_p

CUDA_R_32F = 0
COMPUTE_32F, COMPUTE_32F_FAST_TF32 = 68, 77
OP_N, OP_T = 0, 1
ORDER_COL = 0

DESC_COMPUTE_TYPE, DESC_TRANSA, DESC_TRANSB = 0, 3, 4
DESC_EPILOGUE, DESC_BIAS_POINTER, DESC_BIAS_BATCH_STRIDE, DESC_BIAS_DATA_TYPE = 7, 8, 10, 26
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
PREF_MAX_WORKSPACE_BYTES = 1

EPILOGUES = {"none": 1, "relu": 2, "bias": 4, "relu_bias": 6, "gelu": 32, "gelu_bias": 36}


class Algo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: 64 opaque bytes, saved in artifacts as hex."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]

    def to_hex(self) -> str:
        return bytes(self).hex()

    @classmethod
    def from_hex(cls, text: str) -> Algo:
        raw = bytes.fromhex(text)
        if len(raw) != ctypes.sizeof(cls):
            raise ValueError(f"a cuBLASLt algorithm is {ctypes.sizeof(cls)} bytes, got "
                             f"{len(raw)}")
        return cls.from_buffer_copy(raw)


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [("algo", Algo), ("workspaceSize", ctypes.c_size_t), ("state", ctypes.c_int),
                ("wavesCount", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_SIGNATURES: dict[str, list[Any]] = {
    "cublasLtCreate": [ctypes.POINTER(VP)],
    "cublasLtMatmulDescCreate": [ctypes.POINTER(VP), ctypes.c_int, ctypes.c_int],
    "cublasLtMatmulDescDestroy": [VP],
    "cublasLtMatmulDescSetAttribute": [VP, ctypes.c_int, VP, ctypes.c_size_t],
    "cublasLtMatrixLayoutCreate": [ctypes.POINTER(VP), ctypes.c_int, ctypes.c_uint64,
                                   ctypes.c_uint64, ctypes.c_int64],
    "cublasLtMatrixLayoutDestroy": [VP],
    "cublasLtMatrixLayoutSetAttribute": [VP, ctypes.c_int, VP, ctypes.c_size_t],
    "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(VP)],
    "cublasLtMatmulPreferenceDestroy": [VP],
    "cublasLtMatmulPreferenceSetAttribute": [VP, ctypes.c_int, VP, ctypes.c_size_t],
    "cublasLtMatmulAlgoGetHeuristic": [VP, VP, VP, VP, VP, VP, VP, ctypes.c_int,
                                       ctypes.POINTER(HeuristicResult),
                                       ctypes.POINTER(ctypes.c_int)],
    "cublasLtMatmul": [VP, VP, VP, VP, VP, VP, VP, VP, VP, VP, VP, VP,
                       ctypes.POINTER(Algo), VP, ctypes.c_size_t, VP],
}

#: cuBLASLt's functions, bound on first use
fn = Functions("cublasLt", _SIGNATURES, "cublasLtGetStatusString")


def status_string(status: int) -> str:
    return fn.status_text(status)


class DescriptorError(RunError):
    """A descriptor cuBLASLt refused (the backend reports it as a CompileError)."""


def call(name: str, *args: Any, what: str = "", error: type[Exception] = RunError) -> None:
    status = fn(name)(*args)
    if status != 0:
        raise error(f"cublasLt: {what or name} failed: {status_string(status)} ({status})")


def _set(setter: str, obj: VP, attr: int, value: Any, what: str) -> None:
    call(setter, obj, attr, ctypes.byref(value), ctypes.sizeof(value), what=what,
         error=DescriptorError)


class _Object:
    kind = ""

    def _finalize(self) -> None:
        weakref.finalize(self, _destroy, f"cublasLt{self.kind}Destroy", self.ptr.value)


def _destroy(name: str, ptr: int | None) -> None:
    try:
        fn(name)(VP(ptr))
    except Exception:  # noqa: BLE001 - at interpreter exit the library may be gone
        pass


class MatmulDesc(_Object):
    """Compute type, transposes and epilogue of one matrix product (column-major terms)."""

    kind = "MatmulDesc"

    def __init__(self, compute: int, trans_a: int, trans_b: int, epilogue: str) -> None:
        self.ptr = VP()
        call("cublasLtMatmulDescCreate", ctypes.byref(self.ptr), int(compute), CUDA_R_32F,
             what="matmul descriptor", error=DescriptorError)
        self._finalize()
        setter = "cublasLtMatmulDescSetAttribute"
        _set(setter, self.ptr, DESC_TRANSA, ctypes.c_int32(trans_a), "transa")
        _set(setter, self.ptr, DESC_TRANSB, ctypes.c_int32(trans_b), "transb")
        _set(setter, self.ptr, DESC_EPILOGUE, ctypes.c_uint32(EPILOGUES[epilogue]),
             f"epilogue {epilogue}")
        if "bias" in epilogue:
            _set(setter, self.ptr, DESC_BIAS_DATA_TYPE, ctypes.c_int32(CUDA_R_32F),
                 "bias data type")
            # one bias vector for every batch
            _set(setter, self.ptr, DESC_BIAS_BATCH_STRIDE, ctypes.c_int64(0), "bias stride")

    def set_bias(self, pointer: int) -> None:
        _set("cublasLtMatmulDescSetAttribute", self.ptr, DESC_BIAS_POINTER, VP(pointer),
             "bias pointer")


class Layout(_Object):
    """A column-major float32 ``rows x cols`` matrix with leading dimension ``ld``, and
    ``batch`` matrices ``stride`` elements apart (stride 0: one matrix for every batch)."""

    kind = "MatrixLayout"

    def __init__(self, rows: int, cols: int, ld: int, batch: int = 1, stride: int = 0) -> None:
        self.ptr = VP()
        call("cublasLtMatrixLayoutCreate", ctypes.byref(self.ptr), CUDA_R_32F, int(rows),
             int(cols), int(ld), what=f"matrix layout {rows}x{cols} (ld {ld})",
             error=DescriptorError)
        self._finalize()
        if batch > 1:
            setter = "cublasLtMatrixLayoutSetAttribute"
            _set(setter, self.ptr, LAYOUT_BATCH_COUNT, ctypes.c_int32(batch), "batch count")
            _set(setter, self.ptr, LAYOUT_STRIDED_BATCH_OFFSET, ctypes.c_int64(stride),
                 "batch stride")


class Preference(_Object):
    kind = "MatmulPreference"

    def __init__(self, max_workspace: int) -> None:
        self.ptr = VP()
        call("cublasLtMatmulPreferenceCreate", ctypes.byref(self.ptr), error=DescriptorError)
        self._finalize()
        _set("cublasLtMatmulPreferenceSetAttribute", self.ptr, PREF_MAX_WORKSPACE_BYTES,
             ctypes.c_uint64(max_workspace), "max workspace")


class Handle(PerDevice):
    """One cuBLASLt handle per device (cuBLASLt handles are thread safe; the stream is passed
    to each call)."""

    def __init__(self, device: Any) -> None:
        device.context()
        self.ptr = VP()
        call("cublasLtCreate", ctypes.byref(self.ptr), what=f"cublasLtCreate on {device.key}")
        self.device = device
