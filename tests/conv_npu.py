"""A Conv-only NPU backend, as a vendor writes one with ``tessera new-plugin``: it claims 2-D
float32 convolutions (group 1; one kernel size, for a pointwise-only NPU) and nothing else,
declines every other convolution with a reason (:meth:`Backend.declines`), and runs its
kernels on the host with numpy (im2col and one matrix product), so its numerics are its own,
checked against onnx's reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import CompileError
from tessera.ir.graph import Function, Node
from tessera.plugin import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.patterns import Pattern, region_matches
from tessera.plugin.target import TargetKind


def conv_refusal(node: Node, kernel: tuple[int, int] | None = None) -> str | None:
    """Why the NPU does not run this Conv node, or None when it does (``kernel``: the one
    kernel size it runs, None for any)."""
    rank = len(node.inputs[0].type.shape)
    if rank != 4:
        return f"only 2-D convolutions (this one is {rank - 2}-D)"
    if any(v is not None and v.type.dtype.value != "float32" for v in node.inputs):
        return "only float32 convolutions"
    if int(node.attrs.get("group", 1)) != 1:
        return f"only convolutions of group 1 (this one has group {node.attrs['group']})"
    size = tuple(node.inputs[1].type.shape[2:])
    if kernel is not None and size != kernel:
        return f"only {kernel[0]}x{kernel[1]} kernels (this one is {size[0]}x{size[1]})"
    return None


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: list[int],
           pads: list[int], dilations: list[int]) -> np.ndarray:
    """NCHW x OIHW -> NCHW, as the NPU's matrix unit computes it: im2col, then one matmul."""
    n, c, _, _ = x.shape
    o, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                                  j * dw: j * dw + sw * (ow - 1) + 1: sw]
    out = np.einsum("ock,nckp->nop", w.reshape(o, c, kh * kw),
                    cols.reshape(n, c, kh * kw, oh * ow)).reshape(n, o, oh, ow)
    return out + b.reshape(1, o, 1, 1) if b is not None else out


class ConvNPU(Backend):
    """Claims ``Conv`` (2-D, float32, group 1, of the ``kernel`` size when given);
    ``calls`` counts the kernels it ran."""

    device = "cpu"

    def __init__(self, name: str = "convnpu", kernel: tuple[int, int] | None = None) -> None:
        self.name = name
        self.kernel = kernel
        self.calls = 0

    def claims(self, target: TargetKind) -> list[Pattern]:
        return [Pattern("Conv", check=lambda node: self.declines(node, target) is None)]

    def declines(self, node: Node, target: TargetKind) -> str | None:
        return conv_refusal(node, self.kernel) if node.op == "Conv" else None

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        kernels = [self._kernel(match.root) for match in region_matches(region)]
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            tensors.update({o.name: o.type for o in node.outputs})
        return CompiledRegion(self.name, region, kernels, tensors,
                              {v.name: v.data for v in region.constants()})

    def _kernel(self, node: Node) -> Kernel:
        if node.op != "Conv" or conv_refusal(node, self.kernel) is not None:
            raise CompileError(f"{self.name}: node {node.name} ({node.op}) was not claimed by "
                               f"this backend; expected a 2-D float32 Conv")
        strides = list(node.attrs.get("strides") or [1, 1])
        pads = list(node.attrs.get("pads") or [0, 0, 0, 0])
        dilations = list(node.attrs.get("dilations") or [1, 1])

        def run(ins: list[Any], outs: list[Any]) -> None:
            self.calls += 1
            bias = np.asarray(ins[2]) if len(ins) > 2 else None
            np.copyto(outs[0], conv2d(np.asarray(ins[0]), np.asarray(ins[1]), bias, strides,
                                      pads, dilations))

        inputs = [v.name for v in node.inputs if v is not None]
        return Kernel(node.name, run, inputs, [node.outputs[0].name], "Conv")
