"""Convolutions on cuDNN: what is claimed, the call plan, and the call.

Claimed: 2-D float32 NCHW ``Conv`` (any groups, strides, dilations; asymmetric padding by
pre-padding the input into the workspace), alone or with what cuDNN fuses into
``cudnnConvolutionBiasActivationForward`` — ``Relu(Conv)``, ``Relu(Add(Conv, z))`` with ``z`` a
residual of the output's shape — and ``Add(Conv, z)`` (residual or per-channel constant bias,
without activation: ``cudnnConvolutionForward`` then ``cudnnAddTensor``).

The algorithm is chosen by measurement (``cudnnFindConvolutionForwardAlgorithmEx``) where the
GPU is, within the workspace budget; compiled without a GPU, the plan keeps the budget as its
workspace and the algorithm is measured when the module is loaded on the GPU. Either way the
choice is stored in the artifact. The search measures the plain convolution; for a plan run by
the fused call, the measured algorithms are then tried with that call (fastest first) and the
first it accepts is kept, else IMPLICIT_PRECOMP_GEMM (see :func:`choose_algorithm`).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import CompileError, RunError
from tessera.ir.graph import Node, Value
from tessera.plugin.patterns import Pattern, PatternMatch

from . import cudnn_api as dnn
from .common import Plan, align, attrs_of, is_f32, pointer, shape

#: a residual addition after a convolution: ONNX models write it as Add or as a two-input Sum
ADDS = ("Add", "Sum")


def conv_unsupported(node: Node) -> str | None:
    """Why cuDNN (through this backend) does not run Conv ``node``, or None."""
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else None
    if not is_f32(x, w, b, node.outputs[0]):
        return "cudnn runs float32 convolutions only"
    if len(x.type.shape) != 4:
        return f"cudnn backend runs 2-D (NCHW) convolutions; this one has " \
               f"{len(x.type.shape) - 2} spatial dims"
    if 0 in shape(x) or 0 in shape(node.outputs[0]):
        return "empty tensor"
    return None


def _conv_of(add: Node, index: int) -> tuple[Value, Value] | None:
    """(conv output, other operand) of an Add whose input ``index`` is a Conv's output."""
    if len(add.inputs) != 2 or any(v is None for v in add.inputs):
        return None
    return add.inputs[index], add.inputs[1 - index]


def addend_kind(conv_out: Value, other: Value) -> str | None:
    """``residual`` (same shape), ``bias`` (a per-channel constant) or None."""
    if not is_f32(other):
        return None
    if shape(other) == shape(conv_out):
        return "residual"
    c = shape(conv_out)[1]
    if other.is_constant and shape(other) in ((1, c, 1, 1), (c, 1, 1)):
        return "bias"
    return None


def add_unsupported(add: Node, index: int) -> str | None:
    pair = _conv_of(add, index)
    if pair is None:
        return "Add with an omitted input"
    if pair[0].producer is None or pair[0].producer.op != "Conv" or \
            len(pair[0].type.shape) != 4:
        return "not the output of a 2-D convolution"
    if addend_kind(*pair) is None:
        return f"the Add after the convolution adds {pair[1].type}, neither a residual of the " \
               f"output's shape {pair[0].type} nor a per-channel constant"
    return None


def patterns() -> list[Pattern]:
    conv = Pattern("Conv", check=lambda n: conv_unsupported(n) is None)
    out: list[Pattern] = []
    for i in (0, 1):
        inputs = [conv, None] if i == 0 else [None, conv]
        add = Pattern(ADDS, inputs, check=lambda n, i=i: add_unsupported(n, i) is None,
                      name="ConvAdd")
        out.append(Pattern("Relu", [Pattern(ADDS, inputs,
                                            check=lambda n, i=i: add_unsupported(n, i) is None,
                                            name="ConvAdd")],
                           name="ConvAddRelu"))
        out.append(add)
    out.append(Pattern("Relu", [conv], name="ConvRelu"))
    out.append(conv)
    return out


@dataclass
class ConvPlan(Plan):
    """One convolution call. ``inputs`` are x, w, b and (when fused) z; ``prepad`` the
    [top, left, bottom, right] padding written into the workspace before the call when the
    node's padding is asymmetric (``pads`` is then 0)."""

    kind = "conv"
    x_shape: list[int] = field(default_factory=list)
    w_shape: list[int] = field(default_factory=list)
    y_shape: list[int] = field(default_factory=list)
    pads: list[int] = field(default_factory=list)
    prepad: list[int] | None = None
    strides: list[int] = field(default_factory=list)
    dilations: list[int] = field(default_factory=list)
    groups: int = 1
    activation: str = "identity"
    has_bias: bool = True
    residual: bool = False
    math: int = dnn.FMA_MATH
    algo: int | None = None
    algo_source: str = "not chosen"

    @property
    def padded_shape(self) -> list[int]:
        n, c, h, w = self.x_shape
        if not self.prepad:
            return list(self.x_shape)
        t, left, b, r = self.prepad
        return [n, c, h + t + b, w + left + r]

    @property
    def prepad_bytes(self) -> int:
        return align(int(np.prod(self.padded_shape)) * 4) if self.prepad else 0


def plan_conv(match: PatternMatch, math: int, workspace: int,
              constants: dict[str, np.ndarray]) -> ConvPlan:
    """The call for a matched Conv pattern. A per-channel constant added after the
    convolution, or a missing bias, becomes a constant bias (added to ``constants``)."""
    nodes = {n.op: n for n in match.nodes}
    conv = nodes["Conv"]
    a = attrs_of(conv)
    x, w = conv.inputs[0], conv.inputs[1]
    y = match.root.outputs[0]
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    bias_name = b.name if b is not None else None
    z_name = None
    add = nodes.get("Add") or nodes.get("Sum")
    if add is not None:
        conv_out = conv.outputs[0]
        other = add.inputs[1] if add.inputs[0] is conv_out else add.inputs[0]
        if addend_kind(conv_out, other) == "residual":
            z_name = other.name
        else:  # a constant per-channel addend folds into the bias
            extra = np.asarray(other.data, dtype=np.float32).reshape(-1)
            base = np.zeros_like(extra) if b is None else _const(b, constants)
            bias_name = f"{match.root.name}__bias"
            constants[bias_name] = (base + extra).astype(np.float32)
    if bias_name is None:  # the fused call adds a bias: give it zeros
        bias_name = f"{conv.name}__zero_bias"
        constants[bias_name] = np.zeros(shape(w)[0], np.float32)
    elif b is not None and bias_name == b.name and b.is_constant:
        constants[bias_name] = _const(b, constants)
    if w.is_constant:
        constants[w.name] = np.ascontiguousarray(np.asarray(w.data, dtype=np.float32))
    pads = [int(p) for p in (a.get("pads") or [0, 0, 0, 0])]
    symmetric = pads[0] == pads[2] and pads[1] == pads[3]
    n, cin, *_ = shape(x)
    cout, cpg, kh, kw = shape(w)
    ys = shape(y)
    flops = 2 * ys[0] * cout * ys[2] * ys[3] * cpg * kh * kw
    inputs = [x.name, w.name, bias_name] + ([z_name] if z_name else [])
    plan = ConvPlan(
        name=match.root.name, op=match.pattern, inputs=inputs, outputs=[y.name], flops=flops,
        workspace=workspace, x_shape=list(shape(x)), w_shape=list(shape(w)), y_shape=list(ys),
        pads=pads[:2] if symmetric else [0, 0],
        prepad=None if symmetric else [pads[0], pads[1], pads[2], pads[3]],
        strides=[int(s) for s in (a.get("strides") or [1, 1])],
        dilations=[int(d) for d in (a.get("dilations") or [1, 1])],
        groups=int(a.get("group", 1)), activation="relu" if "Relu" in nodes else "identity",
        has_bias=True, residual=z_name is not None, math=math)
    plan.workspace = workspace + plan.prepad_bytes
    return plan


def _const(v: Value, constants: dict[str, np.ndarray]) -> np.ndarray:
    if v.name in constants:
        return constants[v.name]
    if not v.is_constant:
        raise CompileError(f"cudnn: the bias {v.name} of a fused convolution must be a "
                           f"constant to be combined with the added one")
    return np.asarray(v.data, dtype=np.float32).reshape(-1)


class ConvDescriptors:
    """The cuDNN descriptors of a plan (created on any machine: their set-up is the check
    that cuDNN accepts the convolution)."""

    def __init__(self, plan: ConvPlan) -> None:
        self.x = dnn.TensorDesc(plan.padded_shape)
        self.w = dnn.FilterDesc(plan.w_shape)
        self.y = dnn.TensorDesc(plan.y_shape)
        self.bias = dnn.TensorDesc([1, plan.w_shape[0], 1, 1])
        self.conv = dnn.ConvDesc(plan.pads, plan.strides, plan.dilations, plan.groups,
                                 plan.math)
        self.act = dnn.ActivationDesc(dnn.ACTIVATION_RELU if plan.activation == "relu"
                                      else dnn.ACTIVATION_IDENTITY)
        got = self.conv.output_shape(self.x, self.w)
        if list(got) != list(plan.y_shape):
            raise dnn.DescriptorError(f"cuDNN computes output shape {list(got)}, the graph says "
                                      f"{plan.y_shape}")


#: cuDNN 9 statuses are a category plus a specific error (``cudnn_graph.h``): 2000-2999
#: BAD_PARAM and its variants, 3000-3999 NOT_SUPPORTED and its variants (CUDNN_STATUS_NOT_SUPPORTED
#: is 3000 in cuDNN 9; 9 was cuDNN 8's number)
STATUS_BAD_PARAM, STATUS_NOT_SUPPORTED = 2000, 3000
FUSED = "cudnnConvolutionBiasActivationForward"


def refuses(status: int) -> bool:
    """Whether a cuDNN status says the call does not run this configuration (the NOT_SUPPORTED
    or BAD_PARAM category; the legacy fused call answers an algorithm it does not implement
    with one of them), rather than that the library or the GPU failed."""
    return status // 1000 * 1000 in (STATUS_BAD_PARAM, STATUS_NOT_SUPPORTED)


def _nbytes(dims: list[int]) -> int:
    return int(np.prod(dims)) * 4


class ZeroBuffer:
    """A read-only device buffer of ``nbytes`` zero bytes (the ``z`` of a fused convolution
    without a residual, which then adds ``0 * z``: ``z`` must hold numbers, never the
    uninitialised output)."""

    __slots__ = ("buffer", "nbytes", "__weakref__")

    def __init__(self, buffer: Any, nbytes: int) -> None:
        self.buffer, self.nbytes = buffer, nbytes

    @property
    def ptr(self) -> int:
        return pointer(self.buffer)


_zeros_lock = threading.Lock()
_zeros: weakref.WeakKeyDictionary[Any, weakref.ref[ZeroBuffer]] = weakref.WeakKeyDictionary()


def zeros_for(device: Any, nbytes: int) -> ZeroBuffer:
    """The device's shared buffer of zeros, at least ``nbytes`` long.

    One buffer per device, shared by every plan, call and execution state that needs one; it
    is uploaded once with ``device.from_host`` (complete when that returns, so any stream may
    read it) when a plan is bound, never per run, and nothing writes it. A need larger than
    the current buffer uploads a new one of at least twice its size; calls keep the buffer
    they were given, and a buffer is freed when no call holds it (the table holds it weakly).
    Memory: normally one buffer of the largest such output (rounded up to 256 bytes, at most
    twice it after growth); while calls bound to smaller, older buffers live, those too --
    the sizes at least double, so in all less than four times the largest output.
    """
    with _zeros_lock:
        ref = _zeros.get(device)
        current = ref() if ref is not None else None
        if current is not None and current.nbytes >= nbytes:
            return current
        size = align(max(int(nbytes), 2 * current.nbytes if current is not None else 0, 4))
        zeros = ZeroBuffer(device.from_host(np.zeros(size // 4, np.float32)), size)
        _zeros[device] = weakref.ref(zeros)
        return zeros


def _fused_args(ptr: Any, plan: ConvPlan, d: ConvDescriptors, algo: int,
                scalars: tuple[Any, Any], x: int, w: int, ws: int, ws_bytes: int, z: int, b: int,
                y: int) -> tuple[Any, ...]:
    """The arguments of ``cudnnConvolutionBiasActivationForward`` for ``plan`` (alpha2 is 1
    with a residual ``z``, else 0 and ``z`` a zero buffer): one list for the call and for the
    validation of its algorithm."""
    one, zero = scalars
    return (ptr, one, d.x.ptr, dnn.VP(x), d.w.ptr, dnn.VP(w), d.conv.ptr, int(algo),
            dnn.VP(ws or None), ws_bytes, one if plan.residual else zero, d.y.ptr, dnn.VP(z),
            d.bias.ptr, dnn.VP(b), d.act.ptr, d.y.ptr, dnn.VP(y))


def unchecked_fused(plan: Any) -> bool:
    """Whether ``plan`` is a fused convolution whose algorithm was chosen without validating
    it for the fused call (an artifact saved before that check): it is measured again."""
    return isinstance(plan, ConvPlan) and plan.activation == "relu" and \
        plan.algo is not None and "validated" not in plan.algo_source and \
        "fallback" not in plan.algo_source


def choose_algorithm(plan: ConvPlan, d: ConvDescriptors, device: Any, weights: Any) -> None:
    """Measure cuDNN's algorithms for ``plan`` on ``device`` within the plan's workspace and
    keep the fastest that succeeds.

    The search times the plain convolution (``cudnnConvolutionForward``). A plan run by the
    fused call (ReLU) keeps the fastest measured algorithm that the fused call itself accepts
    on these scratch buffers (:func:`_validate_fused`)."""
    handle = dnn.Handle.of(device)
    limit = plan.workspace - plan.prepad_bytes
    fused = plan.activation == "relu"
    x = device.allocate(_nbytes(plan.padded_shape))
    y = device.allocate(_nbytes(plan.y_shape))
    ws = device.allocate(max(limit, 1))
    try:
        perf = (dnn.FwdAlgoPerf * len(dnn.FWD_ALGOS))()
        count = ctypes.c_int(0)
        with handle.on(device.stream) as ptr:
            dnn.call("cudnnFindConvolutionForwardAlgorithmEx", ptr, d.x.ptr,
                     dnn.VP(x.ptr), d.w.ptr, dnn.VP(pointer(weights)), d.conv.ptr, d.y.ptr,
                     dnn.VP(y.ptr), len(perf), ctypes.byref(count), perf, dnn.VP(ws.ptr), limit,
                     what=f"algorithm search for {plan.name}")
        usable = [p for p in perf[:count.value] if p.status == 0 and p.memory <= limit]
        if fused:
            _validate_fused(plan, d, device, handle, usable, x.ptr, pointer(weights), y.ptr,
                            ws.ptr, limit)
            return
        if not usable:
            raise RunError(f"cudnn: no convolution algorithm for {plan.name} fits the "
                           f"{limit}-byte workspace (raise -workspace_mb)")
        plan.algo = int(usable[0].algo)
        plan.algo_source = f"measured {usable[0].time:.3f} ms on {device.key}"
    finally:
        try:
            if fused:  # the validation calls queued work on these buffers
                device.synchronize()
        finally:
            for arena in (x, y, ws):
                device.free(arena)


def _algo_name(algo: int) -> str:
    return dnn.FWD_ALGOS[algo] if 0 <= algo < len(dnn.FWD_ALGOS) else str(algo)


def _validate_fused(plan: ConvPlan, d: ConvDescriptors, device: Any, handle: Any,
                    measured: list[Any], x: int, w: int, y: int, ws: int, limit: int) -> None:
    """Set ``plan.algo`` to the first of the ``measured`` algorithms (fastest first) that
    ``cudnnConvolutionBiasActivationForward`` runs, made once as the plan's call makes it on
    the search's scratch buffers (``z`` and the bias read the device's zero buffer); when it
    refuses them all, IMPLICIT_PRECOMP_GEMM (the algorithm cuDNN documents for the fused call),
    which must fit the workspace budget. A failure that is not a refusal is raised."""
    zeros = zeros_for(device, _nbytes(plan.y_shape))  # y's size: enough for the bias too
    scalars = tuple(ctypes.byref(v) for v in dnn.floats(1.0, 0.0))
    refused: dict[int, str] = {}

    def accepts(algo: int) -> bool:
        with handle.on(device.stream) as ptr:
            status = int(dnn.fn(FUSED)(*_fused_args(ptr, plan, d, algo, scalars, x, w, ws,
                                                    limit, zeros.ptr, zeros.ptr, y)))
        if status == dnn.STATUS_SUCCESS:
            return True
        text = f"{_algo_name(algo)}: {dnn.error_string(status)} ({status})"
        if not refuses(status):
            raise RunError(f"cudnn: fused convolution {plan.name} with algorithm {text}")
        refused[algo] = text
        return False

    for p in measured:
        if int(p.algo) not in refused and accepts(int(p.algo)):
            plan.algo = int(p.algo)
            plan.algo_source = f"measured {p.time:.3f} ms on {device.key}, validated for the " \
                               f"fused call"
            return
    tried = "; ".join(refused.values()) or "none fits the workspace"
    algo = dnn.IMPLICIT_PRECOMP_GEMM
    need = ctypes.c_size_t(0)
    with handle.on(device.stream) as ptr:
        dnn.call("cudnnGetConvolutionForwardWorkspaceSize", ptr, d.x.ptr, d.w.ptr, d.conv.ptr,
                 d.y.ptr, algo, ctypes.byref(need),
                 what=f"workspace size of IMPLICIT_PRECOMP_GEMM for {plan.name}")
    if need.value > limit:
        mb = -(-need.value // (1 << 20))  # the budget excludes the pre-padding
        raise RunError(f"cudnn: fused convolution {plan.name}: the fused call refused the "
                       f"measured algorithms ({tried}) and IMPLICIT_PRECOMP_GEMM needs "
                       f"{need.value} bytes of workspace, more than the {limit}-byte budget: "
                       f"raise -workspace_mb (to at least {mb})")
    if algo not in refused and accepts(algo):
        plan.algo = algo
        plan.algo_source = f"IMPLICIT_PRECOMP_GEMM: fallback, the fused call refused the " \
                           f"measured algorithms ({tried}); workspace {need.value} bytes, on " \
                           f"{device.key}"
        return
    raise RunError(f"cudnn: the fused call (convolution, bias, ReLU) refuses every algorithm "
                   f"for {plan.name}: {'; '.join(refused.values())}")


class ConvCall:
    """The kernel function of a bound plan: ``(ins, outs)`` with ins = [x, w, b, (z)] and outs
    = [y, (workspace)]. A fused plan without a residual reads the device's zero buffer as
    ``z`` (:func:`zeros_for`, taken here, when the plan is bound)."""

    def __init__(self, plan: ConvPlan, d: ConvDescriptors, device: Any) -> None:
        if plan.algo is None:
            raise RunError(f"cudnn: {plan.name} has no algorithm chosen")
        self.plan, self.d, self.device = plan, d, device
        self.handle = dnn.Handle.of(device)
        self.one, self.zero = dnn.floats(1.0, 0.0)
        self.zeros = zeros_for(device, _nbytes(plan.y_shape)) \
            if plan.activation == "relu" and not plan.residual else None

    def _prepad(self, x: int, ws: int) -> None:
        cu = self.device.cu  # the driver API of tessera-cuda's device

        n, c, h, w = self.plan.x_shape
        _, _, hp, wp = self.plan.padded_shape
        top, left, _, _ = self.plan.prepad or [0, 0, 0, 0]
        stream = self.device.stream
        _cu_check(cu.cuMemsetD32Async(cu.CUdeviceptr(ws), 0, n * c * hp * wp, stream),
                  "cuMemsetD32Async")
        p = cu.CUDA_MEMCPY3D()
        p.srcMemoryType = p.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
        p.srcDevice, p.srcPitch, p.srcHeight = cu.CUdeviceptr(x), w * 4, h
        p.dstDevice, p.dstPitch, p.dstHeight = cu.CUdeviceptr(ws), wp * 4, hp
        p.dstXInBytes, p.dstY, p.dstZ = left * 4, top, 0
        p.WidthInBytes, p.Height, p.Depth = w * 4, h, n * c
        _cu_check(cu.cuMemcpy3DAsync(p, stream), "cuMemcpy3DAsync (pre-padding)")

    def __call__(self, ins: list[Any], outs: list[Any]) -> None:
        plan, d = self.plan, self.d
        x, w, b = (pointer(v) for v in ins[:3])
        z = pointer(ins[3]) if plan.residual else None
        y = pointer(outs[0])
        ws = pointer(outs[1]) if len(outs) > 1 else 0
        self.device.context()
        if plan.prepad:
            self._prepad(x, ws)
            x = ws
            ws += plan.prepad_bytes
        ws_bytes = plan.workspace - plan.prepad_bytes
        h = self.handle
        one, zero = ctypes.byref(self.one), ctypes.byref(self.zero)
        with h.on(self.device.stream) as ptr:
            if plan.activation == "relu":
                zin = z if z is not None else self.zeros.ptr  # never y: it is uninitialised
                dnn.call(FUSED, *_fused_args(ptr, plan, d, plan.algo, (one, zero), x, w, ws,
                                             ws_bytes, zin, b, y),
                         what=f"fused convolution {plan.name}")
                return
            dnn.call("cudnnConvolutionForward", ptr, one, d.x.ptr, dnn.VP(x), d.w.ptr,
                     dnn.VP(w), d.conv.ptr, plan.algo, dnn.VP(ws or None), ws_bytes, zero,
                     d.y.ptr, dnn.VP(y), what=f"convolution {plan.name}")
            dnn.call("cudnnAddTensor", ptr, one, d.bias.ptr, dnn.VP(b), one, d.y.ptr,
                     dnn.VP(y), what=f"bias of {plan.name}")
            if z is not None:
                dnn.call("cudnnAddTensor", ptr, one, d.y.ptr, dnn.VP(z), one, d.y.ptr,
                         dnn.VP(y), what=f"residual of {plan.name}")


def _cu_check(result: Any, what: str) -> None:
    status = result[0] if isinstance(result, tuple) else result
    if int(status) != 0:
        raise RunError(f"cudnn: {what} failed ({status})")
