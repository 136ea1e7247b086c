"""Pooling and softmax on cuDNN: what is claimed, the call plans and the calls.

Pooling: float32 ``MaxPool`` (without the Indices output), ``AveragePool`` (padding counted or
not), ``GlobalAveragePool`` and ``GlobalMaxPool`` over 2 or 3 spatial dims, with symmetric
padding, no dilation, and ``ceil_mode`` only where it gives cuDNN's (floored) output size.
Softmax and LogSoftmax: float32 over any one axis (cuDNN's channel mode on the tensor viewed as
``[outer, axis, inner, 1]``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from math import prod
from typing import Any

from tessera.errors import RunError
from tessera.ir.graph import Node
from tessera.ops.registry import normalize_axis
from tessera.plugin.patterns import Pattern, PatternMatch

from . import cudnn_api as dnn
from .common import Plan, attrs_of, is_f32, pointer, shape

POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
SOFTMAXES = ("Softmax", "LogSoftmax")


def pool_unsupported(node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    if not is_f32(x, y):
        return "cudnn pools float32 tensors only"
    if len(x.type.shape) not in (4, 5):
        return "cudnn pools over 2 or 3 spatial dims"
    if node.op == "MaxPool" and len(node.outputs) > 1 and node.outputs[1] is not None:
        return "MaxPool's Indices output is not computed by cuDNN"
    if 0 in shape(x):
        return "empty tensor"
    if node.op.startswith("Global"):
        return None
    a = attrs_of(node)
    n = len(x.type.shape) - 2
    kernel = list(a["kernel_shape"])
    strides = list(a.get("strides") or [1] * n)
    pads = list(a.get("pads") or [0] * (2 * n))
    if any(d != 1 for d in (a.get("dilations") or [1] * n)):
        return "cudnn pooling has no dilation"
    if pads[:n] != pads[n:]:
        return f"asymmetric pads {pads}: cudnn pooling pads both sides alike"
    floored = [(shape(x)[2 + i] + 2 * pads[i] - kernel[i]) // strides[i] + 1 for i in range(n)]
    if list(shape(y)[2:]) != floored:
        return f"ceil_mode output size {list(shape(y)[2:])}: cudnn pooling floors " \
               f"({floored})"
    return None


def softmax_unsupported(node: Node) -> str | None:
    if not is_f32(node.inputs[0], node.outputs[0]):
        return "cudnn softmax runs on float32 only"
    if 0 in shape(node.inputs[0]):
        return "empty tensor"
    return None


def patterns() -> list[Pattern]:
    return ([Pattern(op, check=lambda n: pool_unsupported(n) is None) for op in POOLS]
            + [Pattern(op, check=lambda n: softmax_unsupported(n) is None) for op in SOFTMAXES])


@dataclass
class PoolPlan(Plan):
    kind = "pool"
    mode: int = dnn.POOLING_MAX
    x_shape: list[int] = field(default_factory=list)
    y_shape: list[int] = field(default_factory=list)
    window: list[int] = field(default_factory=list)
    pads: list[int] = field(default_factory=list)
    strides: list[int] = field(default_factory=list)


@dataclass
class SoftmaxPlan(Plan):
    kind = "softmax"
    log: bool = False
    view: list[int] = field(default_factory=list)


def plan_pool(match: PatternMatch) -> PoolPlan:
    node = match.root
    x, y = node.inputs[0], node.outputs[0]
    n = len(x.type.shape) - 2
    if node.op.startswith("Global"):
        window, pads, strides = list(shape(x)[2:]), [0] * n, [1] * n
        count_pad = True
    else:
        a = attrs_of(node)
        window = [int(k) for k in a["kernel_shape"]]
        pads = [int(p) for p in (a.get("pads") or [0] * (2 * n))][:n]
        strides = [int(s) for s in (a.get("strides") or [1] * n)]
        count_pad = bool(a.get("count_include_pad", 0))
    if "Max" in node.op:
        mode = dnn.POOLING_MAX
    else:
        mode = dnn.POOLING_AVG_INCLUDE_PAD if count_pad else dnn.POOLING_AVG_EXCLUDE_PAD
    return PoolPlan(name=node.name, op=node.op, inputs=[x.name], outputs=[y.name],
                    flops=prod(shape(y)) * prod(window), workspace=0, mode=mode,
                    x_shape=list(shape(x)), y_shape=list(shape(y)), window=window, pads=pads,
                    strides=strides)


def plan_softmax(match: PatternMatch) -> SoftmaxPlan:
    node = match.root
    x = node.inputs[0]
    dims = shape(x)
    axis = normalize_axis(int(attrs_of(node).get("axis", -1)), len(dims), node.name)
    view = [prod(dims[:axis]), dims[axis], prod(dims[axis + 1:]), 1]
    return SoftmaxPlan(name=node.name, op=node.op, inputs=[x.name],
                       outputs=[node.outputs[0].name], flops=5 * prod(dims), workspace=0,
                       log=node.op == "LogSoftmax", view=view)


def _handle(device: Any | None, plan: Plan) -> dnn.Handle:
    """The cuDNN handle of the device a call was bound to, its context current."""
    if device is None:
        raise RunError(f"cudnn: {plan.name} is not loaded on a GPU")
    device.context()
    return dnn.Handle.of(device)


class PoolCall:
    def __init__(self, plan: PoolPlan, device: Any | None) -> None:
        self.plan = plan
        self.x = dnn.TensorDesc(plan.x_shape)
        self.y = dnn.TensorDesc(plan.y_shape)
        self.pool = dnn.PoolingDesc(plan.mode, plan.window, plan.pads, plan.strides)
        got = self.pool.output_shape(self.x)
        if list(got) != list(plan.y_shape):
            raise dnn.DescriptorError(f"cuDNN computes pooled shape {list(got)}, the graph "
                                      f"says {plan.y_shape}")
        self.device = device
        self.one, self.zero = dnn.floats(1.0, 0.0)

    def __call__(self, ins: list[Any], outs: list[Any]) -> None:
        h = _handle(self.device, self.plan)
        with h.on(self.device.stream) as ptr:
            dnn.call("cudnnPoolingForward", ptr, self.pool.ptr, ctypes.byref(self.one),
                     self.x.ptr, dnn.VP(pointer(ins[0])), ctypes.byref(self.zero), self.y.ptr,
                     dnn.VP(pointer(outs[0])), what=f"pooling {self.plan.name}")


class SoftmaxCall:
    def __init__(self, plan: SoftmaxPlan, device: Any | None) -> None:
        self.plan = plan
        self.desc = dnn.TensorDesc(plan.view)
        self.device = device
        self.one, self.zero = dnn.floats(1.0, 0.0)

    def __call__(self, ins: list[Any], outs: list[Any]) -> None:
        h = _handle(self.device, self.plan)
        algo = dnn.SOFTMAX_LOG if self.plan.log else dnn.SOFTMAX_ACCURATE
        with h.on(self.device.stream) as ptr:
            dnn.call("cudnnSoftmaxForward", ptr, algo, dnn.SOFTMAX_MODE_CHANNEL,
                     ctypes.byref(self.one), self.desc.ptr, dnn.VP(pointer(ins[0])),
                     ctypes.byref(self.zero), self.desc.ptr, dnn.VP(pointer(outs[0])),
                     what=f"softmax {self.plan.name}")
