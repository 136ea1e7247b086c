"""Canonicalization: one form for equivalent layout ops, and no no-ops.

* ``Identity`` and ``Cast`` to the input's own type disappear;
* ``Flatten``, ``Squeeze`` and ``Unsqueeze`` become ``Reshape`` (the IR's Reshape carries the
  target shape as its ``shape`` attribute, so any of them is a Reshape to its output shape);
* ``Reshape(Reshape(x))`` reads ``x`` directly; a Reshape to its input's shape disappears;
* ``Transpose(Transpose(x, p1), p2)`` becomes one ``Transpose(x, [p1[j] for j in p2])``, and a
  Transpose with the identity permutation disappears;
* an ``AveragePool`` or ``MaxPool`` without padding or dilation whose one window covers the
  whole input (every output spatial size 1, every kernel size at least the input's) is the
  ``GlobalAveragePool`` or ``GlobalMaxPool`` it computes (Hugging Face's EfficientNet pools with
  a 1280 x 1280 window, ``ceil_mode``, over a 7 x 7 map: a pooling kernel would visit the whole
  window and skip what lies outside);
* a ``Conv`` reading a zero ``Pad`` of its data's spatial axes reads the data itself, with the
  padding added to its own ``pads`` (Hugging Face's MobileNetV2 pads before each strided
  depthwise convolution, TensorFlow style: a separate pad is a copy of the activation, and on
  a channel-blocked layout two layout transforms around it);
* a float ``ReduceMean`` or ``ReduceMax`` over every spatial axis of 3-D or larger data,
  keeping them, is ``GlobalAveragePool`` or ``GlobalMaxPool`` (PyTorch's dynamo exporter writes
  squeeze-and-excitation's pooling that way; a global pool keeps a channel-blocked layout,
  which a reduction over named axes cannot).

Nodes bypassed this way are removed once nobody reads them. Function outputs are positional, so
an output may end up being a graph input or a constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import PassError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.symbolic import shapes_equal
from tessera.passes.base import Pass, Rewriter, take_name

#: Ops that only change the shape of their (first) input, keeping the data order.
TO_RESHAPE = ("Flatten", "Squeeze", "Unsqueeze")


#: Windowed pools and the global pools they equal when one window covers the input.
GLOBAL_POOL = {"AveragePool": "GlobalAveragePool", "MaxPool": "GlobalMaxPool"}


def _zero_spatial_pad(pad: Node | None) -> bool:
    """Whether ``pad`` is a constant-mode ``Pad`` by zeros (no value, or a constant zero) of
    float data's spatial axes only, growing them (no crop)."""
    if pad is None or pad.op != "Pad" or len(pad.outputs) != 1 or pad.inputs[0] is None:
        return False
    x = pad.inputs[0]
    rank = x.type.ndim
    pads = [int(p) for p in pad.attrs.get("pads") or []]
    value = pad.inputs[1] if len(pad.inputs) > 1 else None
    zero = value is None or (value.data is not None and not np.any(np.asarray(value.data)))
    return (pad.attrs.get("mode", "constant") == "constant" and zero and rank >= 3
            and x.type.dtype.is_float and len(pads) == 2 * rank and min(pads) >= 0
            and not any(pads[:2]) and not any(pads[rank:rank + 2]))


#: Reductions and the global pools they equal over every spatial axis, kept.
GLOBAL_REDUCE = {"ReduceMean": "GlobalAveragePool", "ReduceMax": "GlobalMaxPool"}


def _spatial_reduction(node: Node, x: Value) -> bool:
    """Whether reduction ``node`` (one input, axes as an attribute) reduces exactly the
    spatial axes (2 and up) of float data of rank 3 or more, keeping them."""
    rank = x.type.ndim
    axes = node.attrs.get("axes")
    if len(node.inputs) != 1 or rank < 3 or not x.type.dtype.is_float or axes is None:
        return False
    return int(node.attrs.get("keepdims", 1)) == 1 and \
        sorted(int(a) % rank for a in axes) == list(range(2, rank))


def _covers_input(node: Node, x: Value) -> bool:
    """Whether pooling ``node`` (one output) has no padding or dilation and one window that
    covers all of ``x``'s spatial dims."""
    spatial = x.type.shape[2:]
    kernel = [int(k) for k in node.attrs.get("kernel_shape") or []]
    a = node.attrs
    out_spatial = node.outputs[0].type.shape[2:]
    if not all(type(d) is int for d in (*spatial, *out_spatial)):
        return False  # symbolic image sizes: the window may or may not cover them
    return (len(node.outputs) == 1 and len(spatial) == len(kernel) > 0
            and all(d == 1 for d in out_spatial)
            and all(k >= d for k, d in zip(kernel, spatial))
            and not any(int(p) for p in a.get("pads") or [])
            and all(int(d) == 1 for d in a.get("dilations") or [])
            and a.get("auto_pad", "NOTSET") in (None, "NOTSET", "VALID"))


def _perm(node: Node) -> list[int]:
    perm = node.attrs.get("perm")
    ndim = node.outputs[0].type.ndim
    return list(range(ndim))[::-1] if perm is None else [int(p) for p in perm]


def _reshape_attrs(shape: tuple[Any, ...]) -> dict[str, object]:
    """Reshape attributes for exactly ``shape`` (``allowzero`` keeps a 0 dimension literal;
    size expressions stay expressions)."""
    return {"shape": list(shape),
            "allowzero": int(any(isinstance(d, int) and d == 0 for d in shape))}


class Canonicalize(Pass):
    """Rewrite layout ops into canonical forms and drop no-ops."""

    name = "Canonicalize"
    opt_level = 2

    def run(self, fn: Function) -> Function:
        rw = Rewriter(fn)
        bypassed: list[Node] = []
        # One sweep in node order suffices: a node's producers are already canonical when it is
        # visited, so chains of any length collapse.
        for node in list(fn.nodes):
            x = node.inputs[0] if node.inputs else None
            if x is None or len(node.outputs) != 1:
                continue
            y = node.outputs[0]
            if node.op == "Identity" or (node.op == "Cast" and x.type == y.type):
                self._drop(rw, node, x)
            elif node.op in TO_RESHAPE and len(node.inputs) == 1:
                node = self._as_reshape(rw, node, x)
                self._reshape(rw, node, bypassed)
            elif node.op == "Reshape" and len(node.inputs) == 1:
                self._reshape(rw, node, bypassed)
            elif node.op == "Transpose" and len(node.inputs) == 1:
                self._transpose(rw, node, bypassed)
            elif node.op == "Conv" and _zero_spatial_pad(x.producer):
                self._fold_pad(rw, node, bypassed)
            elif node.op in GLOBAL_REDUCE and _spatial_reduction(node, x):
                self._as_global(rw, node, x, GLOBAL_REDUCE[node.op])
            elif node.op in GLOBAL_POOL and _covers_input(node, x):
                self._as_global(rw, node, x, GLOBAL_POOL[node.op])
        rw.remove_if_unused(bypassed)
        return rw.finish()

    @staticmethod
    def _as_global(rw: Rewriter, node: Node, x: Value, op: str) -> None:
        """``node`` replaced by the global pool ``op`` of ``x`` (which it computes)."""
        y = node.outputs[0]
        pooled = rw.add(op, [x], {}, name=node.name)
        rw.replace(y, pooled.output)
        take_name(rw.fn, pooled.output, y)
        rw.remove(node)

    @staticmethod
    def _fold_pad(rw: Rewriter, node: Node, bypassed: list[Node]) -> None:
        pad = node.inputs[0].producer
        assert pad is not None and pad.inputs[0] is not None
        rank = pad.inputs[0].type.ndim
        spatial = rank - 2
        extra = [int(p) for p in pad.attrs["pads"]]
        begins, ends = extra[2:rank], extra[rank + 2:]
        own = [int(p) for p in node.attrs.get("pads") or [0] * (2 * spatial)]
        node.attrs["pads"] = [a + b for a, b in zip(own, begins + ends)]
        rw.set_input(node, 0, pad.inputs[0])
        bypassed.append(pad)

    @staticmethod
    def _drop(rw: Rewriter, node: Node, x: Value) -> None:
        rw.replace(node.outputs[0], x)
        rw.remove(node)

    @staticmethod
    def _as_reshape(rw: Rewriter, node: Node, x: Value) -> Node:
        y = node.outputs[0]
        reshape = rw.add("Reshape", [x], _reshape_attrs(y.type.shape), name=node.name)
        if reshape.output.type != y.type:
            raise PassError(f"node {node.name} ({node.op}): as a Reshape it gives "
                            f"{reshape.output.type}, not {y.type}")
        rw.replace(y, reshape.output)
        take_name(rw.fn, reshape.output, y)
        rw.remove(node)
        return reshape

    def _reshape(self, rw: Rewriter, node: Node, bypassed: list[Node]) -> None:
        x = node.inputs[0]
        assert x is not None
        inner = x.producer
        if inner is not None and inner.op == "Reshape" and len(inner.inputs) == 1:
            rw.set_input(node, 0, inner.inputs[0])
            # the target shape may have copied dimensions (0) of the bypassed Reshape's output
            node.attrs.update(_reshape_attrs(node.outputs[0].type.shape))
            bypassed.append(inner)
            x = inner.inputs[0]
            assert x is not None
        if shapes_equal(x.type.shape, node.outputs[0].type.shape):
            self._drop(rw, node, x)

    def _transpose(self, rw: Rewriter, node: Node, bypassed: list[Node]) -> None:
        x = node.inputs[0]
        assert x is not None
        perm = _perm(node)
        inner = x.producer
        if inner is not None and inner.op == "Transpose" and len(inner.inputs) == 1:
            inner_perm = _perm(inner)
            perm = [inner_perm[j] for j in perm]
            rw.set_input(node, 0, inner.inputs[0])
            node.attrs["perm"] = perm
            bypassed.append(inner)
            x = inner.inputs[0]
            assert x is not None
        if perm == list(range(len(perm))):
            self._drop(rw, node, x)
