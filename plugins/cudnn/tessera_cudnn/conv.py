"""Convolutions on cuDNN: what is claimed, the call plan, and the call.

Claimed: 2-D float32 NCHW ``Conv`` (any groups, strides, dilations; asymmetric padding by
pre-padding the input into the workspace), alone or with what cuDNN fuses into
``cudnnConvolutionBiasActivationForward`` — ``Relu(Conv)``, ``Relu(Add(Conv, z))`` with ``z`` a
residual of the output's shape — and ``Add(Conv, z)`` (residual or per-channel constant bias,
without activation: ``cudnnConvolutionForward`` then ``cudnnAddTensor``).

The algorithm is chosen by measurement (``cudnnFindConvolutionForwardAlgorithmEx``) where the
GPU is, within the workspace budget; compiled without a GPU, the plan keeps the budget as its
workspace and the algorithm is measured when the module is loaded on the GPU. Either way the
choice is stored in the artifact.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import CompileError, RunError
from tessera.ir.graph import Node, Value
from tessera.partition.patterns import Pattern, PatternMatch

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


def choose_algorithm(plan: ConvPlan, d: ConvDescriptors, device: Any, weights: Any) -> None:
    """Measure cuDNN's algorithms for ``plan`` on ``device`` within the plan's workspace and
    keep the fastest that succeeds."""
    handle = dnn.Handle.of(device)
    limit = plan.workspace - plan.prepad_bytes
    x = device.allocate(int(np.prod(plan.padded_shape)) * 4)
    y = device.allocate(int(np.prod(plan.y_shape)) * 4)
    ws = device.allocate(max(limit, 1))
    try:
        perf = (dnn.FwdAlgoPerf * len(dnn.FWD_ALGOS))()
        count = ctypes.c_int(0)
        with handle.lock:
            dnn.call("cudnnFindConvolutionForwardAlgorithmEx", handle.ptr, d.x.ptr,
                     dnn.VP(x.ptr), d.w.ptr, dnn.VP(pointer(weights)), d.conv.ptr, d.y.ptr,
                     dnn.VP(y.ptr), len(perf), ctypes.byref(count), perf, dnn.VP(ws.ptr), limit,
                     what=f"algorithm search for {plan.name}")
        usable = [p for p in perf[:count.value] if p.status == 0 and p.memory <= limit]
        if not usable:
            raise RunError(f"cudnn: no convolution algorithm for {plan.name} fits the "
                           f"{limit}-byte workspace (raise -workspace_mb)")
        plan.algo = int(usable[0].algo)
        plan.algo_source = f"measured {usable[0].time:.3f} ms on {device.key}"
    finally:
        for arena in (x, y, ws):
            device.free(arena)


class ConvCall:
    """The kernel function of a bound plan: ``(ins, outs)`` with ins = [x, w, b, (z)] and outs
    = [y, (workspace)]."""

    def __init__(self, plan: ConvPlan, d: ConvDescriptors, device: Any) -> None:
        if plan.algo is None:
            raise RunError(f"cudnn: {plan.name} has no algorithm chosen")
        self.plan, self.d, self.device = plan, d, device
        self.handle = dnn.Handle.of(device)
        self.one, self.zero = dnn.floats(1.0, 0.0)

    def _prepad(self, x: int, ws: int) -> None:
        from cuda.bindings import driver as cu

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
        with h.lock:
            if plan.activation == "relu":
                dnn.call("cudnnConvolutionBiasActivationForward", h.ptr, one, d.x.ptr,
                         dnn.VP(x), d.w.ptr, dnn.VP(w), d.conv.ptr, plan.algo, dnn.VP(ws or None),
                         ws_bytes, one if z is not None else zero, d.y.ptr,
                         dnn.VP(z if z is not None else y), d.bias.ptr, dnn.VP(b), d.act.ptr,
                         d.y.ptr, dnn.VP(y), what=f"fused convolution {plan.name}")
                return
            dnn.call("cudnnConvolutionForward", h.ptr, one, d.x.ptr, dnn.VP(x), d.w.ptr,
                     dnn.VP(w), d.conv.ptr, plan.algo, dnn.VP(ws or None), ws_bytes, zero,
                     d.y.ptr, dnn.VP(y), what=f"convolution {plan.name}")
            dnn.call("cudnnAddTensor", h.ptr, one, d.bias.ptr, dnn.VP(b), one, d.y.ptr,
                     dnn.VP(y), what=f"bias of {plan.name}")
            if z is not None:
                dnn.call("cudnnAddTensor", h.ptr, one, d.y.ptr, dnn.VP(z), one, d.y.ptr,
                         dnn.VP(y), what=f"residual of {plan.name}")


def _cu_check(result: Any, what: str) -> None:
    status = result[0] if isinstance(result, tuple) else result
    if int(status) != 0:
        raise RunError(f"cudnn: {what} failed ({status})")
