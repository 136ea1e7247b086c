"""Quantized matrix products run as integer products: ``MatMul``/``Gemm`` of dequantized 8-bit
operands becomes ``MatMulInteger`` of the 8-bit values, scaled once per output.

A model quantized in the QDQ format (``tessera quantize``, onnxruntime's ``quantize_static``)
spells an int8 layer as a float product of dequantized values::

    MatMul(DequantizeLinear(xq, sx, zx), DequantizeLinear(wq, sw, zw))

with ``wq`` a constant 8-bit weight. Run as written, the product is a float32 product (the
weight dequantized once, at compile time) and the quantization buys nothing. Since
``(xq - zx) * sx @ (wq - zw) * sw == ((xq - zx) @ (wq - zw)) * (sx * sw)`` for a per-tensor
``sx`` and an ``sw`` per tensor or per output column, the product becomes::

    Mul(Cast(MatMulInteger(xq, wq, zx, zw), float32), sx * sw)

an exact int32 accumulation (what onnxruntime's QDQ kernels and TVM's FakeQuantizationToInteger
compute) whose float scaling is the epilogue the backends fuse into the product. Results differ
from the float product only by float32 rounding (the float product rounds every partial sum; the
integer one rounds once), so a following ``QuantizeLinear`` may land one step away where the
float value sat on a rounding boundary.

``Gemm`` takes the same rewrite (``transB``: the constant weight transposed, its per-channel
scale then per column; ``alpha`` into the scale; ``beta * C`` added after). It applies when:

* the data operand is ``DequantizeLinear`` of int8/uint8 values with a one-element scale and
  zero point (per tensor), dequantizing to float32, not blockwise;
* the weight is ``DequantizeLinear`` of a constant two-dimensional int8/uint8 tensor with a
  float32 scale (and zero point) per tensor or per output column (``axis`` the column axis),
  not blockwise; the importer keeps such nodes (:mod:`tessera.frontend.onnx.converters.quant`)
  and :class:`~tessera.passes.fold_constants.FoldConstants`, which runs after this pass, folds
  those left;
* ``Gemm`` has no ``transA``.

Zero points that are all zeros are dropped (the integer product then needs no correction).
Products of two activations (attention's) and convolutions are left as they are: the CPU
backend's integer kernels cover matrix products with constant weights.
"""

from __future__ import annotations

import numpy as np

from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import DType
from tessera.passes.base import Pass, Rewriter, take_name

#: The 8-bit types an integer product reads.
_BYTE_TYPES = (DType.int8, DType.uint8)


class QDQToInteger(Pass):
    """See the module doc."""

    name = "QDQToInteger"
    opt_level = 2

    def run(self, fn: Function) -> Function:
        rw = Rewriter(fn)
        bypassed: list[Node] = []
        for node in list(fn.nodes):
            if node.op not in ("MatMul", "Gemm") or rw.is_removed(node):
                continue
            bypassed += _rewrite(rw, node) or []
        rw.remove_if_unused(bypassed)
        return rw.finish()


def _dequantized(v: Value | None) -> Node | None:
    """The per-tensor or per-axis ``DequantizeLinear`` to float32 of 8-bit values producing
    ``v``, or None."""
    dq = v.producer if v is not None else None
    if dq is None or dq.op != "DequantizeLinear" or dq.attrs.get("block_size"):
        return None
    x, scale = dq.inputs[0], dq.inputs[1]
    if x is None or scale is None or x.type.dtype not in _BYTE_TYPES or \
            scale.type.dtype != DType.float32 or dq.outputs[0].type.dtype != DType.float32:
        return None
    return dq


def _per_tensor(dq: Node) -> bool:
    scale, zp = dq.inputs[1], (dq.inputs + [None])[2]
    return scale is not None and scale.type.size == 1 and (zp is None or zp.type.size == 1)


def _weight(dq: Node, transposed: bool) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The scale and zero point of the constant weight ``dq`` dequantizes (``(N, K)`` when
    ``transposed``): ``(float32 scale (N,) or (1,), zero point (N,) or (1,) or None where
    all zeros)``, or None where the rewrite does not apply."""
    wq, scale, zp = dq.inputs[0], dq.inputs[1], (dq.inputs + [None])[2]
    if wq is None or not wq.is_constant or wq.type.ndim != 2 or scale is None or \
            not scale.is_constant or (zp is not None and not zp.is_constant):
        return None
    n_axis = 0 if transposed else 1
    n = wq.type.shape[n_axis]
    s = np.asarray(scale.data, np.float32).reshape(-1)
    z = None if zp is None else np.asarray(zp.data).reshape(-1)
    if s.size != 1 or (z is not None and z.size != 1):
        axis = int(dq.attrs.get("axis", 1))
        axis = axis + 2 if axis < 0 else axis
        if axis != n_axis or s.size not in (1, n) or (z is not None and z.size not in (1, n)):
            return None
    return s, (z if z is not None and z.any() else None)


def _data_zero_point(zp: Value | None) -> Value | np.ndarray | None | bool:
    """The data's zero point as ``MatMulInteger`` reads it (a scalar: a 1-D one would be per
    row): a constant's value as a scalar array, a run-time scalar as it is, None where absent
    or zero; False where it cannot be given (a run-time ``[1]``)."""
    if zp is None:
        return None
    if zp.is_constant:
        z = np.asarray(zp.data).reshape(-1)
        return z.reshape(()) if z.any() else None
    return zp if zp.type.ndim == 0 else False


def _scalar_or_columns(values: np.ndarray) -> np.ndarray:
    return values.reshape(()) if values.size == 1 else values


def _rewrite(rw: Rewriter, node: Node) -> list[Node] | None:
    """Rewrite the product ``node`` (module doc); the dequantizations it bypassed, or None
    where it does not apply."""
    if len(node.outputs) != 1 or node.outputs[0].type.dtype != DType.float32:
        return None
    gemm = node.op == "Gemm"
    if gemm and int(node.attrs.get("transA", 0)):
        return None
    dx, dw = _dequantized(node.inputs[0]), _dequantized(node.inputs[1])
    if dx is None or dw is None or not _per_tensor(dx) or dx.inputs[0].type.ndim < 2:
        return None
    xq, sx = dx.inputs[0], dx.inputs[1]
    assert xq is not None and sx is not None
    zx = _data_zero_point((dx.inputs + [None])[2])
    transposed = gemm and bool(int(node.attrs.get("transB", 0)))
    weight = _weight(dw, transposed)
    if weight is None or zx is False:
        return None
    # it applies: the constants the integer product reads
    sw, zw = weight
    wq = dw.inputs[0]
    assert wq is not None
    if transposed:
        wq = rw.fn.constant(np.ascontiguousarray(np.asarray(wq.data).T), f"{wq.name}_t")
    if isinstance(zx, np.ndarray):
        zx = rw.fn.constant(zx, f"{dx.name}_zero_point")
    zw_value = None if zw is None else rw.fn.constant(
        _scalar_or_columns(zw.astype(wq.type.dtype.value)), f"{dw.name}_zero_point")
    alpha = np.float32(node.attrs.get("alpha", 1.0)) if gemm else np.float32(1.0)
    added: list[Node] = []

    def add(op: str, inputs: list[Value | None], hint: str, **attrs: object) -> Value:
        new = rw.add(op, inputs, attrs, name=rw.fn.fresh_node_name(f"{node.name}_{hint}"))
        added.append(new)
        return new.output

    acc = add("Cast", [add("MatMulInteger", [xq, wq, zx, zw_value], "int")], "float",
              to=DType.float32)
    if sx.is_constant:
        # the scales' float32 product, as the reference multiplies them
        sx_value = np.float32(np.asarray(sx.data, np.float32).reshape(-1)[0])
        factor = rw.fn.constant(_scalar_or_columns((sx_value * sw * alpha).astype(np.float32)),
                                f"{node.name}_scale")
    else:
        weight_scale = rw.fn.constant(_scalar_or_columns((sw * alpha).astype(np.float32)),
                                      f"{node.name}_weight_scale")
        factor = add("Mul", [sx, weight_scale], "scale")
    result = add("Mul", [acc, factor], "scaled")
    c = node.inputs[2] if gemm and len(node.inputs) > 2 else None
    if c is not None:
        beta = np.float32(node.attrs.get("beta", 1.0))
        if beta != 1.0 and c.is_constant:
            c = rw.fn.constant((np.asarray(c.data) * beta).astype(np.float32), f"{c.name}_beta")
        elif beta != 1.0:
            c = add("Mul", [c, rw.fn.constant(beta, f"{node.name}_beta")], "beta")
        result = add("Add", [result, c], "bias")
    out = node.outputs[0]
    if result.type != out.type:  # a broadcast the product did not have (not expected)
        for new in added:
            rw.remove(new)
        return None
    rw.replace(out, result)
    take_name(rw.fn, result, out)
    rw.remove(node)
    return [dx, dw]
