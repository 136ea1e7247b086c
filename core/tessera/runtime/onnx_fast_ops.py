"""Direct numpy forms of the ONNX operators a split plan evaluates at every call.

The size-dependent part of a decoder step (:mod:`tessera.runtime.split`) is a few dozen small
operations per layer: concatenating the cache, expanding it over query heads, the attention's
products, the mask, the softmax. ``onnx.reference`` runs each through checks and generic
implementations (an ``Expand`` multiplies by ones; a ``Reshape`` copies) that cost several
times the operation itself on such tensors. These are the same operators written as the numpy
calls they amount to, with views where ONNX's semantics allow (``Reshape``, ``Unsqueeze``,
``Expand``, ``Transpose``): outputs are never written in place, so a view is as good as a copy.

:func:`fast_op` returns the form of a node, or None where the node needs what is not written
here (another domain, an attribute these forms do not read, an integer division): such nodes
keep ``onnx.reference``'s implementation. Tests compare every form with ``onnx.reference`` on
random data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

__all__ = ["FastOp", "fast_op"]

#: ``op(inputs) -> outputs``
FastOp = Callable[[Sequence[Any]], tuple[np.ndarray, ...]]

_CAST_TO = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
            onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.INT64: np.int64,
            onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT16: np.int16,
            onnx.TensorProto.INT8: np.int8, onnx.TensorProto.UINT8: np.uint8,
            onnx.TensorProto.BOOL: np.bool_}

_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal,
           "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
           "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or,
           "MatMul": np.matmul}
_UNARY = {"IsNaN": np.isnan, "Not": np.logical_not, "Neg": np.negative, "Sqrt": np.sqrt,
          "Exp": np.exp, "Identity": lambda x: x}


def _ints(a: Any) -> list[int]:
    return np.asarray(a).reshape(-1).tolist()  # type: ignore[no-any-return]


def _reshape(x: np.ndarray, shape: Any) -> tuple[np.ndarray, ...]:
    target = _ints(shape)
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return (x.reshape(target),)


def _with_ones(x: np.ndarray, axes: list[int]) -> tuple[np.ndarray, ...]:
    """``x`` with 1s inserted at ``axes`` of the result (a reshape: ``np.expand_dims``
    without its argument normalisation)."""
    rank = x.ndim + len(axes)
    norm = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(norm)) != len(norm) or any(not 0 <= a < rank for a in norm):
        raise _Unwritten  # the reference's error
    shape = list(x.shape)
    for a in norm:
        shape.insert(a, 1)
    return (x.reshape(shape),)


def _unsqueeze(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
    return _with_ones(args[0], _ints(args[1]))


def _unsqueeze_by(axes: list[int]) -> FastOp:
    """Unsqueeze by constant ``axes`` (read once)."""
    return lambda args: _with_ones(args[0], axes)


def _softmax(axis: int) -> FastOp:
    def run(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
        x = args[0]
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True),)
    return run


def _flatten(axis: int) -> FastOp:
    def run(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
        x = args[0]
        a = axis + x.ndim if axis < 0 else axis
        lead = int(np.prod(x.shape[:a], dtype=np.int64))
        return (x.reshape(lead, int(np.prod(x.shape[a:], dtype=np.int64))),)
    return run


def fast_op(node: onnx.NodeProto, opset: int,
            constants: Mapping[str, np.ndarray] | None = None) -> FastOp | None:
    """The numpy form of ``node`` (default domain), or None; ``constants`` (the values of
    inputs known when the form is made) let a form read its axes once."""
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if op in _BINARY and not attrs:
        fn2 = _BINARY[op]
        return lambda args: (np.asarray(fn2(args[0], args[1])),)
    if op == "Div" and not attrs:
        def div(args: Sequence[Any]) -> tuple[np.ndarray, ...] | None:
            a, b = args
            if a.dtype.kind != "f":
                raise _Unwritten  # integer division: ONNX truncates, numpy floors
            return (np.asarray(np.divide(a, b)),)
        return div  # type: ignore[return-value]
    if op in _UNARY and not attrs:
        fn1 = _UNARY[op]
        return lambda args: (np.asarray(fn1(args[0])),)
    if op in ("Max", "Min") and not attrs:
        fold = np.maximum if op == "Max" else np.minimum

        def extreme(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
            out = args[0]
            for a in args[1:]:
                out = fold(out, a)
            return (np.asarray(out),)
        return extreme
    if op == "Where" and not attrs:
        return lambda args: (np.where(args[0], args[1], args[2]),)
    if op == "Cast" and set(attrs) <= {"to", "saturate"} and attrs.get("to") in _CAST_TO:
        dtype = _CAST_TO[attrs["to"]]

        def cast(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
            x = args[0]
            if x.dtype.kind == "f" and np.dtype(dtype).kind in "iub":
                raise _Unwritten  # NaN and out-of-range conversions: the reference's rules
            return (x.astype(dtype, copy=False),)
        return cast
    if op == "Reshape" and set(attrs) <= {"allowzero"} and not attrs.get("allowzero", 0):
        return lambda args: _reshape(args[0], args[1])
    if op == "Unsqueeze" and opset >= 13 and not attrs:
        given = (constants or {}).get(node.input[1]) if len(node.input) > 1 else None
        if given is not None:
            return _unsqueeze_by(_ints(given))
        return _unsqueeze
    if op == "Squeeze" and opset >= 13 and not attrs:
        return lambda args: (np.squeeze(args[0], tuple(_ints(args[1])))
                             if len(args) > 1 and args[1] is not None else np.squeeze(args[0]),)
    if op == "Expand" and not attrs:
        return lambda args: (np.broadcast_to(args[0], np.broadcast_shapes(
            args[0].shape, tuple(_ints(args[1])))),)
    if op == "Concat" and set(attrs) == {"axis"}:
        axis = attrs["axis"]
        return lambda args: (np.concatenate(args, axis=axis),)
    if op == "Transpose" and set(attrs) <= {"perm"}:
        perm = attrs.get("perm")
        return lambda args: (np.transpose(args[0], perm),)
    if op == "Softmax" and opset >= 13 and set(attrs) <= {"axis"}:
        return _softmax(attrs.get("axis", -1))
    if op == "Flatten" and set(attrs) <= {"axis"}:
        return _flatten(attrs.get("axis", 1))
    if op == "Gather" and set(attrs) <= {"axis"}:
        axis = attrs.get("axis", 0)
        return lambda args: (np.take(args[0], args[1], axis=axis),)
    if op == "Range" and not attrs:
        return lambda args: (np.arange(args[0], args[1], args[2], dtype=args[0].dtype),)
    return None


class _Unwritten(Exception):
    """This call's inputs need the reference implementation (raised before any work)."""


#: What a caller catches to fall back to the reference implementation for one call.
Unwritten = _Unwritten
