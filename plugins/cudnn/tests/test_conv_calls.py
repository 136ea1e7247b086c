"""The cuDNN convolution calls without a GPU: the library (``cudnn_api.fn``), the handle and
the device are fakes that record what tessera-cudnn passes, so that CI checks the arguments
of the fused call (``z`` is never the uninitialised output) and how its algorithm is chosen
(the fused call must accept the measured algorithm, else IMPLICIT_PRECOMP_GEMM).

The library is faked below ``cudnn_api.call`` (at ``cudnn_api.fn``, the bound functions), so
that the real ``call``/``check`` turn a status into a RunError as they do on the GPU, and the
fused call's validation, which reads the status itself, sees the same fake.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tessera.errors import RunError
from tessera_cudnn import conv
from tessera_cudnn import cudnn_api as dnn
from tessera_cudnn.conv import ConvCall, ConvPlan, choose_algorithm

FIND = "cudnnFindConvolutionForwardAlgorithmEx"
FUSED = "cudnnConvolutionBiasActivationForward"
WS_SIZE = "cudnnGetConvolutionForwardWorkspaceSize"
NOT_SUPPORTED = 3000  # cuDNN 9 (cudnn_graph.h)
IPG = dnn.IMPLICIT_PRECOMP_GEMM
WINOGRAD, IMPLICIT_GEMM, FFT = 6, 0, 4


class FakeArena:
    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr, self.nbytes = ptr, nbytes


class FakeDevice:
    """What conv.py uses of tessera-cuda's device: memory with distinct addresses, uploads
    (kept, to read back what a pointer holds), context, stream, synchronize, key."""

    key = "cuda:0"

    def __init__(self) -> None:
        self._next = 0x10000
        self.live: dict[int, FakeArena] = {}
        self.uploads: dict[int, np.ndarray] = {}
        self.synchronized = 0

    @property
    def stream(self) -> int:
        return 0x5EA

    def context(self) -> None:
        pass

    def allocate(self, nbytes: int) -> FakeArena:
        arena = FakeArena(self._next, int(nbytes))
        self._next += (max(int(nbytes), 1) + 255) // 256 * 256 + 256
        self.live[arena.ptr] = arena
        return arena

    def free(self, arena: FakeArena) -> None:
        assert arena.ptr in self.live, "freed twice or never allocated"
        del self.live[arena.ptr]

    def from_host(self, array: np.ndarray) -> FakeArena:
        arena = self.allocate(array.nbytes)
        self.uploads[arena.ptr] = np.array(array, copy=True)
        return arena

    def synchronize(self) -> None:
        self.synchronized += 1

    def holding(self, ptr: int) -> np.ndarray | None:
        """The uploaded array whose buffer starts at ``ptr``."""
        return self.uploads.get(ptr)


class FakeHandle:
    ptr = dnn.VP(0xC0DE)

    def __init__(self) -> None:
        self.streams: list[Any] = []

    @contextmanager
    def on(self, stream: Any) -> Iterator[dnn.VP]:
        self.streams.append(stream)
        yield self.ptr


class FakeCudnn:
    """``cudnn_api.fn``: ``fn(name)(*args)`` returns a status. The search reports ``measured``
    ((algo, ms, workspace bytes), fastest first); the fused call accepts the algorithms in
    ``fused_ok`` (else ``refusal``); ``workspace`` is what the size query answers per
    algorithm."""

    def __init__(self, measured: list[tuple[int, float, int]], fused_ok: set[int] = frozenset(),
                 workspace: dict[int, int] | None = None, refusal: int = NOT_SUPPORTED) -> None:
        self.measured, self.fused_ok = measured, set(fused_ok)
        self.workspace = workspace or {}
        self.refusal = refusal
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __call__(self, name: str) -> Callable[..., int]:
        assert name in dnn._SIGNATURES, f"{name} is not bound by cudnn_api"

        def run(*args: Any) -> int:
            assert len(args) == len(dnn._SIGNATURES[name]), f"{name}: {len(args)} arguments"
            self.calls.append((name, args))
            return self._status(name, args)

        return run

    def _status(self, name: str, args: tuple[Any, ...]) -> int:
        if name == FIND:
            perf = args[10]
            for i, (algo, ms, memory) in enumerate(self.measured):
                perf[i].algo, perf[i].status, perf[i].time, perf[i].memory = algo, 0, ms, memory
            args[9]._obj.value = len(self.measured)
            return 0
        if name == FUSED:
            return 0 if args[7] in self.fused_ok else self.refusal
        if name == WS_SIZE:
            args[6]._obj.value = self.workspace[args[5]]
            return 0
        return 0

    def status_text(self, status: int) -> str:
        return {NOT_SUPPORTED: "CUDNN_STATUS_NOT_SUPPORTED",
                5000: "CUDNN_STATUS_EXECUTION_FAILED"}.get(status, "CUDNN_STATUS_?")

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self.calls if n == name]


def _desc(value: int) -> SimpleNamespace:
    return SimpleNamespace(ptr=dnn.VP(value))


DESCRIPTORS = SimpleNamespace(x=_desc(0xD1), w=_desc(0xD2), y=_desc(0xD3), bias=_desc(0xD4),
                              conv=_desc(0xD5), act=_desc(0xD6))


def _plan(activation: str = "relu", residual: bool = False, workspace: int = 1 << 20,
          cout: int = 8, algo: int | None = None) -> ConvPlan:
    return ConvPlan(name="conv7", op="ConvRelu" if activation == "relu" else "Conv",
                    inputs=["x", "w", "b"] + (["r"] if residual else []), outputs=["y"],
                    flops=0, workspace=workspace, x_shape=[2, 4, 8, 8], w_shape=[cout, 4, 3, 3],
                    y_shape=[2, cout, 8, 8], pads=[1, 1], strides=[1, 1], dilations=[1, 1],
                    activation=activation, residual=residual, algo=algo)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[FakeCudnn, FakeDevice,
                                                                 FakeHandle]]:
    def make(*args: Any, **kwargs: Any) -> tuple[FakeCudnn, FakeDevice, FakeHandle]:
        lib, handle = FakeCudnn(*args, **kwargs), FakeHandle()
        monkeypatch.setattr(dnn, "fn", lib)
        monkeypatch.setattr(dnn.Handle, "of", staticmethod(lambda device: handle))
        return lib, FakeDevice(), handle

    return make


def _run(call: ConvCall, device: FakeDevice, plan: ConvPlan,
         residual: bool = False) -> dict[str, FakeArena]:
    bufs = {"x": device.allocate(4 * int(np.prod(plan.x_shape))),
            "w": device.allocate(4 * int(np.prod(plan.w_shape))),
            "b": device.allocate(4 * plan.w_shape[0]),
            "y": device.allocate(4 * int(np.prod(plan.y_shape))),
            "ws": device.allocate(plan.workspace)}
    if residual:
        bufs["r"] = device.allocate(4 * int(np.prod(plan.y_shape)))
    ins = [bufs["x"], bufs["w"], bufs["b"]] + ([bufs["r"]] if residual else [])
    call(ins, [bufs["y"], bufs["ws"]])
    return bufs


def _fused_pointers(args: tuple[Any, ...]) -> dict[str, Any]:
    """The fused call's arguments by name (cudnn_cnn.h's parameter order)."""
    return {"handle": args[0].value, "alpha1": args[1]._obj.value, "x": args[3].value,
            "w": args[5].value, "algo": args[7], "alpha2": args[10]._obj.value,
            "zdesc": args[11].value, "z": args[12].value, "bias": args[14].value,
            "ydesc": args[16].value, "y": args[17].value}


# -- the fused call's z ----------------------------------------------------------------------

def test_fused_relu_without_residual_reads_zeros_as_z_never_its_output(fake) -> None:  # noqa: ANN001
    lib, device, handle = fake(measured=[], fused_ok={WINOGRAD, IPG})
    plan = _plan(algo=WINOGRAD)
    call = ConvCall(plan, DESCRIPTORS, device)
    assert len(device.uploads) == 1, "the zero buffer is uploaded when the plan is bound"
    for _ in range(2):
        bufs = _run(call, device, plan)
    assert len(device.uploads) == 1, "not per run"
    calls = lib.named(FUSED)
    assert len(calls) == 2
    a = _fused_pointers(calls[-1])
    y_bytes = 4 * int(np.prod(plan.y_shape))
    assert a["y"] == bufs["y"].ptr and a["alpha2"] == 0.0 and a["alpha1"] == 1.0
    assert a["z"] != a["y"]
    assert not any(b.ptr <= a["z"] < b.ptr + max(b.nbytes, 1) for b in bufs.values()), \
        "z aliases a buffer of the run"
    zeros = device.holding(a["z"])
    assert zeros is not None, "z is not the uploaded zero buffer"
    assert zeros.nbytes >= y_bytes and not zeros.any()
    assert a["algo"] == WINOGRAD and a["handle"] == handle.ptr.value
    assert a["x"] == bufs["x"].ptr and a["w"] == bufs["w"].ptr and a["bias"] == bufs["b"].ptr
    assert handle.streams == [device.stream] * 2


def test_the_zero_buffer_is_shared_per_device_and_grows(fake) -> None:  # noqa: ANN001
    lib, device, _ = fake(measured=[], fused_ok={WINOGRAD, IPG})
    small = ConvCall(_plan(algo=IPG), DESCRIPTORS, device)
    again = ConvCall(_plan(algo=IPG), DESCRIPTORS, device)
    assert small.zeros is again.zeros and len(device.uploads) == 1
    big_plan = _plan(cout=64, algo=IPG)  # an output 8 times larger
    big = ConvCall(big_plan, DESCRIPTORS, device)
    assert big.zeros is not small.zeros and len(device.uploads) == 2
    assert big.zeros.nbytes >= 4 * int(np.prod(big_plan.y_shape))
    _run(big, device, big_plan)
    z = _fused_pointers(lib.named(FUSED)[-1])["z"]
    assert z == big.zeros.ptr and device.holding(z).nbytes >= 4 * int(np.prod(big_plan.y_shape))
    # a later small plan takes the large buffer; the first calls keep theirs
    assert ConvCall(_plan(algo=IPG), DESCRIPTORS, device).zeros is big.zeros
    assert small.zeros.nbytes >= 4 * int(np.prod(_plan().y_shape))
    # another device has its own
    other = FakeDevice()
    assert ConvCall(_plan(algo=IPG), DESCRIPTORS, other).zeros.ptr in other.uploads


def test_fused_relu_with_residual_adds_it_with_alpha2_one(fake) -> None:  # noqa: ANN001
    lib, device, _ = fake(measured=[], fused_ok={WINOGRAD, IPG})
    plan = _plan(residual=True, algo=IPG)
    call = ConvCall(plan, DESCRIPTORS, device)
    bufs = _run(call, device, plan, residual=True)
    a = _fused_pointers(lib.named(FUSED)[0])
    assert a["z"] == bufs["r"].ptr and a["alpha2"] == 1.0 and a["y"] == bufs["y"].ptr
    assert a["zdesc"] == DESCRIPTORS.y.ptr.value
    assert not device.uploads, "a residual plan needs no zero buffer"


# -- the fused call's algorithm ----------------------------------------------------------------

def _choose(device: FakeDevice, plan: ConvPlan) -> None:
    weights = device.allocate(4 * int(np.prod(plan.w_shape)))
    try:
        choose_algorithm(plan, DESCRIPTORS, device, weights)
    finally:
        device.free(weights)


def _scratch_freed(device: FakeDevice) -> bool:
    return set(device.live) <= set(device.uploads)


def test_the_fused_call_keeps_the_fastest_measured_algorithm_it_accepts(fake) -> None:  # noqa: ANN001
    lib, device, _ = fake(measured=[(WINOGRAD, 0.1, 0), (IMPLICIT_GEMM, 0.25, 0), (IPG, 0.3, 0)],
                          fused_ok={IMPLICIT_GEMM, IPG})
    plan = _plan()
    _choose(device, plan)
    assert plan.algo == IMPLICIT_GEMM
    assert plan.algo_source == "measured 0.250 ms on cuda:0, validated for the fused call"
    tried = [_fused_pointers(args) for args in lib.named(FUSED)]
    assert [t["algo"] for t in tried] == [WINOGRAD, IMPLICIT_GEMM]
    for t in tried:  # made as the plan's call makes it, on defined z and bias
        assert t["alpha2"] == 0.0 and t["z"] != t["y"]
        zeros = device.holding(t["z"])
        assert zeros is not None and not zeros.any()
        assert zeros.nbytes >= 4 * int(np.prod(plan.y_shape))
        assert device.holding(t["bias"]) is not None and not device.holding(t["bias"]).any()
    assert not lib.named(WS_SIZE)
    assert device.synchronized >= 1 and _scratch_freed(device)
    # the plan's call then uses it
    _run(ConvCall(plan, DESCRIPTORS, device), device, plan)
    assert _fused_pointers(lib.named(FUSED)[-1])["algo"] == IMPLICIT_GEMM


def test_residual_plans_are_validated_with_alpha2_one(fake) -> None:  # noqa: ANN001
    lib, device, _ = fake(measured=[(WINOGRAD, 0.1, 0), (FFT, 0.2, 0)], fused_ok={FFT})
    plan = _plan(residual=True)
    _choose(device, plan)
    assert plan.algo == FFT
    assert [_fused_pointers(a)["alpha2"] for a in lib.named(FUSED)] == [1.0, 1.0]


def test_when_the_fused_call_refuses_all_it_falls_back_to_implicit_precomp_gemm(fake) -> None:  # noqa: ANN001,E501
    lib, device, _ = fake(measured=[(WINOGRAD, 0.1, 0), (FFT, 0.2, 4096)], fused_ok={IPG},
                          workspace={IPG: 8192})
    plan = _plan()
    _choose(device, plan)
    assert plan.algo == IPG
    assert plan.algo_source.startswith("IMPLICIT_PRECOMP_GEMM: fallback, the fused call "
                                       "refused the measured algorithms")
    assert "WINOGRAD" in plan.algo_source and "CUDNN_STATUS_NOT_SUPPORTED" in plan.algo_source
    assert [_fused_pointers(a)["algo"] for a in lib.named(FUSED)] == [WINOGRAD, FFT, IPG]
    (query,) = lib.named(WS_SIZE)
    assert query[5] == IPG and query[0].value == FakeHandle.ptr.value
    assert _scratch_freed(device)


def test_a_fallback_workspace_over_the_budget_is_a_clear_error(fake) -> None:  # noqa: ANN001
    lib, device, _ = fake(measured=[(WINOGRAD, 0.1, 0)], fused_ok={IPG},
                          workspace={IPG: 3 << 20})
    plan = _plan(workspace=1 << 20)
    with pytest.raises(RunError, match=r"conv7.*IMPLICIT_PRECOMP_GEMM needs 3145728 bytes.*"
                                       r"-workspace_mb \(to at least 3\)"):
        _choose(device, plan)
    assert plan.algo is None and _scratch_freed(device)
    assert [_fused_pointers(a)["algo"] for a in lib.named(FUSED)] == [WINOGRAD]


def test_when_the_fused_call_refuses_even_the_fallback_it_says_so(fake) -> None:  # noqa: ANN001
    lib, device, _ = fake(measured=[(WINOGRAD, 0.1, 0), (IPG, 0.2, 0)],
                          workspace={IPG: 0})
    plan = _plan()
    with pytest.raises(RunError, match=r"refuses every algorithm for conv7: WINOGRAD: .*"
                                       r"IMPLICIT_PRECOMP_GEMM: CUDNN_STATUS_NOT_SUPPORTED"):
        _choose(device, plan)
    # IMPLICIT_PRECOMP_GEMM was refused once already: not tried twice
    assert [_fused_pointers(a)["algo"] for a in lib.named(FUSED)] == [WINOGRAD, IPG]
    assert _scratch_freed(device)


def test_a_failure_that_is_not_a_refusal_is_raised_not_skipped(fake) -> None:  # noqa: ANN001
    lib, device, _ = fake(measured=[(WINOGRAD, 0.1, 0), (IPG, 0.2, 0)], fused_ok={IPG},
                          refusal=5000)
    plan = _plan()
    with pytest.raises(RunError, match="conv7 with algorithm WINOGRAD: "
                                       "CUDNN_STATUS_EXECUTION_FAILED"):
        _choose(device, plan)
    assert len(lib.named(FUSED)) == 1 and _scratch_freed(device)


def test_cudnn9_refusal_statuses() -> None:
    assert conv.refuses(3000) and conv.refuses(3004) and conv.refuses(2000)
    assert not conv.refuses(0) and not conv.refuses(9) and not conv.refuses(5000)
    assert not conv.refuses(1001) and not conv.refuses(4000)


def test_a_plain_convolution_keeps_the_fastest_measured_algorithm_unvalidated(fake) -> None:  # noqa: ANN001,E501
    lib, device, _ = fake(measured=[(WINOGRAD, 0.1, 0), (IPG, 0.3, 0)], fused_ok=set())
    plan = _plan(activation="identity")
    _choose(device, plan)
    assert plan.algo == WINOGRAD and plan.algo_source == "measured 0.100 ms on cuda:0"
    assert [n for n, _ in lib.calls] == [FIND]
    assert not device.uploads and _scratch_freed(device)
    call = ConvCall(plan, DESCRIPTORS, device)
    assert call.zeros is None and not device.uploads
    bufs = _run(call, device, plan)
    forward = lib.named("cudnnConvolutionForward")
    assert len(forward) == 1 and forward[0][7] == WINOGRAD and forward[0][12].value == bufs["y"].ptr
    assert not lib.named(FUSED)


def test_a_plain_convolution_without_a_fitting_algorithm_names_the_budget(fake) -> None:  # noqa: ANN001,E501
    _, device, _ = fake(measured=[(WINOGRAD, 0.1, 2 << 20)])
    with pytest.raises(RunError, match="conv7 fits the 1048576-byte workspace"):
        _choose(device, _plan(activation="identity", workspace=1 << 20))
    assert _scratch_freed(device)


def test_search_arguments_match_the_bound_signature() -> None:
    # the fake checks argument counts against cudnn_api's signatures; make sure the ones it
    # relies on are bound there
    for name in (FIND, FUSED, WS_SIZE, "cudnnConvolutionForward", "cudnnAddTensor"):
        assert name in dnn._SIGNATURES
    assert len(dnn._SIGNATURES[WS_SIZE]) == 7 and dnn._SIGNATURES[WS_SIZE][-1] == \
        ctypes.POINTER(ctypes.c_size_t)
