"""A thin ctypes binding of the cuDNN 9 calls the ``cudnn`` backend makes.

Only what the backend uses: tensor, filter, convolution, activation and pooling descriptors (they
need no GPU, so their set-up is checked on any machine), a handle per device bound to the
device's stream, forward convolution (plain and fused with bias, residual and activation),
algorithm search, pooling, softmax and tensor addition. Enum values are cuDNN 9's
(``cudnn_graph_v9.h``, ``cudnn_ops_v9.h``, ``cudnn_cnn_v9.h``).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tessera.errors import RunError

from .libs import Functions, PerDevice

c_int_p = ctypes.POINTER(ctypes.c_int)
VP = ctypes.c_void_p

DATA_FLOAT = 0
TENSOR_NCHW = 0
CROSS_CORRELATION = 1
DEFAULT_MATH, TENSOR_OP_MATH, FMA_MATH = 0, 1, 3
NOT_PROPAGATE_NAN, PROPAGATE_NAN = 0, 1
ACTIVATION_RELU, ACTIVATION_IDENTITY = 1, 5
POOLING_MAX, POOLING_AVG_INCLUDE_PAD, POOLING_AVG_EXCLUDE_PAD = 0, 1, 2
SOFTMAX_ACCURATE, SOFTMAX_LOG = 1, 2
SOFTMAX_MODE_INSTANCE, SOFTMAX_MODE_CHANNEL = 0, 1
STATUS_SUCCESS = 0

#: forward convolution algorithms by number (cudnnConvolutionFwdAlgo_t)
FWD_ALGOS = ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
             "WINOGRAD", "WINOGRAD_NONFUSED")
IMPLICIT_PRECOMP_GEMM = 1


class FwdAlgoPerf(ctypes.Structure):
    """cudnnConvolutionFwdAlgoPerf_t."""

    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int),
                ("mathType", ctypes.c_int), ("reserved", ctypes.c_int * 3)]


_SIGNATURES: dict[str, list[Any]] = {
    "cudnnCreate": [ctypes.POINTER(VP)],
    "cudnnDestroy": [VP],
    "cudnnSetStream": [VP, VP],
    "cudnnCreateTensorDescriptor": [ctypes.POINTER(VP)],
    "cudnnDestroyTensorDescriptor": [VP],
    "cudnnSetTensorNdDescriptor": [VP, ctypes.c_int, ctypes.c_int, c_int_p, c_int_p],
    "cudnnCreateFilterDescriptor": [ctypes.POINTER(VP)],
    "cudnnDestroyFilterDescriptor": [VP],
    "cudnnSetFilterNdDescriptor": [VP, ctypes.c_int, ctypes.c_int, ctypes.c_int, c_int_p],
    "cudnnCreateConvolutionDescriptor": [ctypes.POINTER(VP)],
    "cudnnDestroyConvolutionDescriptor": [VP],
    "cudnnSetConvolutionNdDescriptor": [VP, ctypes.c_int, c_int_p, c_int_p, c_int_p,
                                        ctypes.c_int, ctypes.c_int],
    "cudnnSetConvolutionGroupCount": [VP, ctypes.c_int],
    "cudnnSetConvolutionMathType": [VP, ctypes.c_int],
    "cudnnGetConvolutionNdForwardOutputDim": [VP, VP, VP, ctypes.c_int, c_int_p],
    "cudnnCreateActivationDescriptor": [ctypes.POINTER(VP)],
    "cudnnDestroyActivationDescriptor": [VP],
    "cudnnSetActivationDescriptor": [VP, ctypes.c_int, ctypes.c_int, ctypes.c_double],
    "cudnnCreatePoolingDescriptor": [ctypes.POINTER(VP)],
    "cudnnDestroyPoolingDescriptor": [VP],
    "cudnnSetPoolingNdDescriptor": [VP, ctypes.c_int, ctypes.c_int, ctypes.c_int, c_int_p,
                                    c_int_p, c_int_p],
    "cudnnGetPoolingNdForwardOutputDim": [VP, VP, ctypes.c_int, c_int_p],
    "cudnnGetConvolutionForwardWorkspaceSize": [VP, VP, VP, VP, VP, ctypes.c_int,
                                                ctypes.POINTER(ctypes.c_size_t)],
    "cudnnFindConvolutionForwardAlgorithmEx": [VP, VP, VP, VP, VP, VP, VP, VP, ctypes.c_int,
                                               c_int_p, ctypes.POINTER(FwdAlgoPerf), VP,
                                               ctypes.c_size_t],
    "cudnnConvolutionForward": [VP, VP, VP, VP, VP, VP, VP, ctypes.c_int, VP, ctypes.c_size_t,
                                VP, VP, VP],
    "cudnnConvolutionBiasActivationForward": [VP, VP, VP, VP, VP, VP, VP, ctypes.c_int, VP,
                                              ctypes.c_size_t, VP, VP, VP, VP, VP, VP, VP, VP],
    "cudnnAddTensor": [VP, VP, VP, VP, VP, VP, VP],
    "cudnnPoolingForward": [VP, VP, VP, VP, VP, VP, VP, VP],
    "cudnnSoftmaxForward": [VP, ctypes.c_int, ctypes.c_int, VP, VP, VP, VP, VP, VP],
}

#: cuDNN's functions, bound on first use
fn = Functions("cudnn", _SIGNATURES, "cudnnGetErrorString")


def error_string(status: int) -> str:
    return fn.status_text(status)


def check(status: int, what: str, error: type[Exception] = RunError) -> None:
    """Raise ``error`` naming the call ``what`` when ``status`` is not CUDNN_STATUS_SUCCESS."""
    if status != STATUS_SUCCESS:
        raise error(f"cudnn: {what} failed: {error_string(status)} ({status})")


def call(name: str, *args: Any, what: str = "", error: type[Exception] = RunError) -> None:
    check(fn(name)(*args), what or name, error)


def _ints(values: Sequence[int]) -> Any:
    return (ctypes.c_int * len(values))(*[int(v) for v in values])


class _Descriptor:
    """A cuDNN descriptor destroyed with its Python object."""

    kind = ""

    def __init__(self) -> None:
        self.ptr = VP()
        call(f"cudnnCreate{self.kind}Descriptor", ctypes.byref(self.ptr))
        weakref.finalize(self, _destroy, self.kind, self.ptr.value)

    @property
    def value(self) -> int:
        return int(self.ptr.value or 0)


def _destroy(kind: str, ptr: int | None) -> None:
    try:
        fn(f"cudnnDestroy{kind}Descriptor")(VP(ptr))
    except Exception:  # noqa: BLE001 - at interpreter exit the library may be gone
        pass


def packed_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= int(d)
    return strides[::-1]


class TensorDesc(_Descriptor):
    """A float32 tensor of ``shape`` (at least 4 dims: cuDNN's Nd calls want 4 or more),
    packed row-major unless ``strides`` are given."""

    kind = "Tensor"

    def __init__(self, shape: Sequence[int], strides: Sequence[int] | None = None) -> None:
        super().__init__()
        shape = [int(s) for s in shape]
        while len(shape) < 4:
            shape.append(1)
        self.shape = tuple(shape)
        strides = list(strides) if strides is not None else packed_strides(shape)
        while len(strides) < len(shape):
            strides.append(1)
        call("cudnnSetTensorNdDescriptor", self.ptr, DATA_FLOAT, len(shape), _ints(shape),
             _ints(strides), what=f"tensor descriptor {self.shape}", error=_DescError)


class FilterDesc(_Descriptor):
    """Float32 NCHW weights (``[out_channels, in_channels / group, kh, kw]``)."""

    kind = "Filter"

    def __init__(self, shape: Sequence[int]) -> None:
        super().__init__()
        self.shape = tuple(int(s) for s in shape)
        call("cudnnSetFilterNdDescriptor", self.ptr, DATA_FLOAT, TENSOR_NCHW, len(self.shape),
             _ints(self.shape), what=f"filter descriptor {self.shape}", error=_DescError)


class ConvDesc(_Descriptor):
    """A cross-correlation (ONNX Conv) with symmetric ``pads`` per spatial dim, float32
    accumulation, ``groups`` and math mode ``math`` (FMA_MATH: exact float32; DEFAULT_MATH lets
    cuDNN use TF32 tensor cores)."""

    kind = "Convolution"

    def __init__(self, pads: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                 groups: int, math: int = FMA_MATH) -> None:
        super().__init__()
        n = len(pads)
        call("cudnnSetConvolutionNdDescriptor", self.ptr, n, _ints(pads), _ints(strides),
             _ints(dilations), CROSS_CORRELATION, DATA_FLOAT,
             what=f"convolution descriptor (pads {list(pads)}, strides {list(strides)}, "
                  f"dilations {list(dilations)})", error=_DescError)
        call("cudnnSetConvolutionGroupCount", self.ptr, int(groups),
             what=f"group count {groups}", error=_DescError)
        call("cudnnSetConvolutionMathType", self.ptr, int(math), what="math type",
             error=_DescError)

    def output_shape(self, x: TensorDesc, w: FilterDesc) -> tuple[int, ...]:
        """The output shape cuDNN computes for input ``x`` and weights ``w``."""
        out = (ctypes.c_int * len(x.shape))()
        call("cudnnGetConvolutionNdForwardOutputDim", self.ptr, x.ptr, w.ptr, len(x.shape), out,
             what="convolution output shape", error=_DescError)
        return tuple(int(v) for v in out)


class ActivationDesc(_Descriptor):
    kind = "Activation"

    def __init__(self, mode: int) -> None:
        super().__init__()
        call("cudnnSetActivationDescriptor", self.ptr, int(mode), NOT_PROPAGATE_NAN, 0.0,
             error=_DescError)


class PoolingDesc(_Descriptor):
    kind = "Pooling"

    def __init__(self, mode: int, window: Sequence[int], pads: Sequence[int],
                 strides: Sequence[int]) -> None:
        super().__init__()
        call("cudnnSetPoolingNdDescriptor", self.ptr, int(mode), PROPAGATE_NAN, len(window),
             _ints(window), _ints(pads), _ints(strides),
             what=f"pooling descriptor (window {list(window)}, pads {list(pads)}, strides "
                  f"{list(strides)})", error=_DescError)

    def output_shape(self, x: TensorDesc) -> tuple[int, ...]:
        out = (ctypes.c_int * len(x.shape))()
        call("cudnnGetPoolingNdForwardOutputDim", self.ptr, x.ptr, len(x.shape), out,
             what="pooling output shape", error=_DescError)
        return tuple(int(v) for v in out)


class _DescError(RunError):
    """A descriptor cuDNN refused (raised while compiling: the backend turns it into a
    CompileError naming the node)."""


DescriptorError = _DescError


class Handle(PerDevice):
    """One cuDNN handle per device. A cuDNN call queues its work on the stream its handle is
    bound to, and each execution state runs on a stream of its own (``device.stream`` is the
    calling thread's current one), so a call binds the handle to that stream first:
    ``with handle.on(device.stream) as ptr:`` holds the handle's lock (calls on one handle are
    serialized; they only queue work, so the lock is short) and rebinds it only when the
    stream changed."""

    def __init__(self, device: Any) -> None:
        device.context()
        self.ptr = VP()
        call("cudnnCreate", ctypes.byref(self.ptr), what=f"cudnnCreate on {device.key}")
        self.device = device
        self.lock = threading.Lock()
        self._stream: int | None = None

    @contextmanager
    def on(self, stream: Any) -> Iterator[VP]:
        """The handle's pointer, bound to ``stream``, for the calls of the block."""
        with self.lock:
            address = int(stream) if stream is not None else 0
            if address != self._stream:
                call("cudnnSetStream", self.ptr, VP(address), what="cudnnSetStream")
                self._stream = address
            yield self.ptr


def floats(*values: float) -> list[ctypes.c_float]:
    """Host float32 scalars (alpha, beta) kept alive by the caller."""
    return [ctypes.c_float(v) for v in values]
