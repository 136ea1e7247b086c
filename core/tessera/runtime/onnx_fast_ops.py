"""Direct numpy forms of the ONNX operators a split plan evaluates at every call.

The size-dependent part of a decoder step (:mod:`tessera.runtime.split`) is a few dozen small
operations per layer: concatenating the cache, expanding it over query heads, the attention's
products, the mask, the softmax. ``onnx.reference`` runs each through checks and generic
implementations (an ``Expand`` multiplies by ones; a ``Reshape`` copies) that cost several
times the operation itself on such tensors. These are the same operators written as the numpy
calls they amount to, with views where ONNX's semantics allow (``Reshape``, ``Unsqueeze``,
``Expand``, ``Transpose``): outputs are never written in place, so a view is as good as a copy.

:func:`inline_op` writes a node as one expression for generated code; :func:`fast_op` returns
a node's form as a function (that expression, or a form that may hand a call back to the
reference), or None where the node needs what is not written here (another domain, an
attribute these forms do not read): such nodes keep ``onnx.reference``'s implementation.
Tests compare every form with ``onnx.reference`` on random data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

__all__ = ["INLINE_SCOPE", "FastOp", "Inline", "fast_op", "inline_op", "list_operands"]

#: ``op(inputs) -> outputs``
FastOp = Callable[[Sequence[Any]], tuple[np.ndarray, ...]]

_CAST_TO = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
            onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.INT64: np.int64,
            onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT16: np.int16,
            onnx.TensorProto.INT8: np.int8, onnx.TensorProto.UINT8: np.uint8,
            onnx.TensorProto.BOOL: np.bool_}

def _ints(a: Any) -> list[int]:
    """A shape operand as a list of ints: a 1-D integer array's contents, or the list
    itself where generated code holds the operand's contents as one (see
    :func:`list_operands`)."""
    if type(a) is list:
        return a
    if type(a) is np.ndarray and a.ndim == 1:
        return a.tolist()  # type: ignore[no-any-return]
    return np.asarray(a).reshape(-1).tolist()  # type: ignore[no-any-return]


#: An ``Expand`` up to this many elements is written out (a copy costs less than numpy's
#: ``broadcast_to``, and the ``Reshape`` that usually follows is then a view); larger ones
#: stay broadcast views.
EXPAND_COPY_LIMIT = 1 << 16


def _expand(x: np.ndarray, shape: Any) -> np.ndarray:
    """ONNX ``Expand``: numpy broadcasting of ``x`` and ``shape`` (either may be the longer)."""
    target = _ints(shape)
    if len(target) >= x.ndim and math.prod(target) <= EXPAND_COPY_LIMIT:
        # the usual case, ``x`` broadcast to ``shape`` itself: the copy is numpy's check
        # (an array that does not fit raises; target's negative sizes too)
        try:
            result = np.empty(target, x.dtype)
            result[...] = x
            return result
        except ValueError:
            pass
    have = x.shape
    out = np.broadcast_shapes(have, tuple(target))  # raises numpy's error
    if out == have:
        return x
    if math.prod(out) <= EXPAND_COPY_LIMIT:
        result = np.empty(out, x.dtype)
        np.copyto(result, x)
        return result
    return np.broadcast_to(x, out)


def _reshape(x: np.ndarray, shape: Any) -> np.ndarray:
    """ONNX ``Reshape`` (``allowzero`` 0: a 0 keeps the input's size there)."""
    target = _ints(shape)
    return x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(target)])


def _inserted_axes(axes: list[int], rank: int) -> list[int] | None:
    """``axes`` of a result of ``rank`` dimensions, non-negative and sorted; None when one
    repeats or lies outside."""
    norm = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(norm)) != len(norm) or any(not 0 <= a < rank for a in norm):
        return None
    return norm


def _with_ones(x: np.ndarray, axes: list[int]) -> tuple[np.ndarray, ...]:
    """``x`` with 1s inserted at ``axes`` of the result (a reshape: ``np.expand_dims``
    without its argument normalisation)."""
    shape = list(x.shape)
    rank = len(shape) + len(axes)
    if len(axes) == 1:  # the usual case
        a = axes[0] + rank if axes[0] < 0 else axes[0]
        if not 0 <= a < rank:
            raise _Unwritten  # the reference's error
        shape.insert(a, 1)
        return (x.reshape(shape),)
    norm = _inserted_axes(axes, rank)
    if norm is None:
        raise _Unwritten
    for a in norm:
        shape.insert(a, 1)
    return (x.reshape(shape),)


def _range(start: Any, limit: Any, delta: Any) -> np.ndarray:
    """ONNX ``Range``; integer bounds as Python ints (numpy's quick path)."""
    dtype = np.asarray(start).dtype
    if dtype.kind in "iu":
        return np.arange(int(start), int(limit), int(delta), dtype=dtype)
    return np.arange(start, limit, delta, dtype=dtype)


def _gather_nd(data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """ONNX ``GatherND`` with ``batch_dims`` 0: each row of ``indices``' last axis indexes
    ``data``'s leading axes (negative indices count from the end, as numpy's do)."""
    k = indices.shape[-1]
    if not 1 <= k <= data.ndim:
        raise ValueError(f"GatherND: index rows of length {k}; data of rank {data.ndim} needs "
                         f"1 to {data.ndim}")
    return np.asarray(data[tuple(indices[..., j] for j in range(k))])


def _unsqueeze(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
    return _with_ones(args[0], _ints(args[1]))


def _unsqueeze_by(axes: list[int]) -> FastOp:
    """Unsqueeze by constant ``axes`` (read once)."""
    return lambda args: _with_ones(args[0], axes)


def _softmax_of(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.subtract(x, x.max(axis=axis, keepdims=True))
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _flatten_of(x: np.ndarray, axis: int) -> np.ndarray:
    a = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))


def fast_op(node: onnx.NodeProto, opset: int,
            constants: Mapping[str, np.ndarray] | None = None) -> FastOp | None:
    """The numpy form of ``node`` (default domain), or None; ``constants`` (the values of
    inputs known when the form is made) let a form read its axes once. Where
    :func:`inline_op` writes the node, the form is its expression made a function; the
    forms below are those that may hand a call back to the reference (:data:`Unwritten`)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if op == "Unsqueeze" and opset >= 13 and not attrs:  # bad axes: the reference's error
        given = (constants or {}).get(node.input[1]) if len(node.input) > 1 else None
        if given is not None:
            return _unsqueeze_by(_ints(given))
        return _unsqueeze
    inline = inline_op(node, opset, constants)
    if inline is not None:
        expression = inline([f"args[{i}]" for i in range(len(node.input))])
        form = eval(f"lambda args: ({expression},)", dict(INLINE_SCOPE))  # noqa: S307
        return form  # type: ignore[no-any-return]
    if op == "Div" and not attrs:
        def div(args: Sequence[Any]) -> tuple[np.ndarray, ...] | None:
            a, b = args
            if a.dtype.kind != "f":
                raise _Unwritten  # integer division: ONNX truncates, numpy floors
            return (np.asarray(np.divide(a, b)),)
        return div  # type: ignore[return-value]
    if op in ("Max", "Min") and not attrs:
        fold = np.maximum if op == "Max" else np.minimum

        def extreme(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
            out = args[0]
            for a in args[1:]:
                out = fold(out, a)
            return (np.asarray(out),)
        return extreme
    if op == "Cast" and set(attrs) <= {"to", "saturate"} and attrs.get("to") in _CAST_TO:
        dtype = _CAST_TO[attrs["to"]]

        def cast(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
            x = args[0]
            if x.dtype.kind == "f" and np.dtype(dtype).kind in "iub":
                raise _Unwritten  # NaN and out-of-range conversions: the reference's rules
            return (x.astype(dtype, copy=False),)
        return cast
    if op == "Squeeze" and opset >= 13 and not attrs:
        return lambda args: (np.squeeze(args[0], tuple(_ints(args[1])))
                             if len(args) > 1 and args[1] is not None else np.squeeze(args[0]),)
    return None


#: ``inline(args) -> expression``: a node's numpy form as one Python expression of the
#: variables holding its inputs (see :func:`inline_op`).
Inline = Callable[[Sequence[str]], str]

_UFUNC_NAMES = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Equal": "equal",
                "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
                "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
                "MatMul": "matmul", "IsNaN": "isnan", "Not": "logical_not", "Neg": "negative",
                "Sqrt": "sqrt", "Exp": "exp"}


def _unsqueezed(x: np.ndarray, axes: list[int]) -> np.ndarray:
    try:
        return _with_ones(x, axes)[0]
    except _Unwritten:
        raise ValueError(f"Unsqueeze: axes {axes} do not fit an input of rank {x.ndim}") from None


#: What inline expressions call, by the names they use.
INLINE_SCOPE: dict[str, Any] = {
    "np": np, "_fx_expand": _expand, "_fx_unsqueeze": _unsqueezed, "_fx_gather_nd": _gather_nd,
    "_fx_range": _range, "_fx_ints": _ints,
    "_fx_reshape": _reshape,
    "_fx_softmax": _softmax_of, "_fx_flatten": _flatten_of,
}


def list_operands(node: onnx.NodeProto) -> tuple[int, ...]:
    """The input positions of ``node`` whose :func:`inline_op` expression reads a shape
    operand only through its integer contents: there it takes a Python list of ints in place
    of a 1-D array, or a Python int in place of a 0-d one (generated code that computes shape
    values from the sizes need not make arrays of them)."""
    if node.domain not in ("", "ai.onnx"):
        return ()
    if node.op_type in ("Expand", "Reshape", "Unsqueeze"):
        return (1,)
    if node.op_type == "Range":  # start's dtype is the result's: it stays an array
        return (1, 2)
    return ()


def _unsqueeze_index(rank: int, axes: list[int]) -> str | None:
    """The indexing text (``:, None``) that inserts 1s at ``axes`` into an array of ``rank``
    dimensions (a view, as reshape's), or None when the axes do not fit."""
    out = rank + len(axes)
    norm = _inserted_axes(axes, out)
    if norm is None:
        return None
    parts = ["None" if i in norm else ":" for i in range(out)]
    while parts and parts[-1] == ":":
        parts.pop()
    return ", ".join(parts) if parts else "..."


def inline_op(node: onnx.NodeProto, opset: int,
              constants: Mapping[str, np.ndarray] | None = None,
              ranks: Mapping[str, int] | None = None) -> Inline | None:
    """The numpy form of a single-output ``node`` as an expression over its inputs' variable
    names (calling only :data:`INLINE_SCOPE`), for the nodes whose form never hands back to
    the reference (:func:`fast_op` covers those); None for the others. Generated code then
    spends no Python call of its own on the node. ``ranks`` (value name -> rank) are what
    the caller expects the inputs' ranks to be: an expression written for one still checks
    it at run time."""
    if node.domain not in ("", "ai.onnx") or len([o for o in node.output if o]) != 1:
        return None
    op = node.op_type
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    n_in = len(node.input)
    if op in _UFUNC_NAMES and not attrs:
        name = _UFUNC_NAMES[op]
        return lambda a: f"np.asarray(np.{name}({', '.join(a)}))"
    if op == "Identity" and not attrs:
        return lambda a: a[0]
    if op == "Where" and not attrs:
        return lambda a: f"np.where({a[0]}, {a[1]}, {a[2]})"
    if op == "Concat" and set(attrs) == {"axis"}:
        axis = int(attrs["axis"])
        return lambda a: f"np.concatenate(({''.join(x + ', ' for x in a)}), axis={axis})"
    if op == "Transpose" and set(attrs) <= {"perm"}:
        perm = attrs.get("perm")
        perm_text = repr([int(p) for p in perm]) if perm is not None else "None"
        return lambda a: f"np.transpose({a[0]}, {perm_text})"
    if op == "Unsqueeze" and opset >= 13 and not attrs and n_in == 2:
        given = (constants or {}).get(node.input[1])
        if given is not None:
            axes = repr(_ints(given))
            rank = (ranks or {}).get(node.input[0])
            index = _unsqueeze_index(rank, _ints(given)) if rank is not None else None
            if index is not None:  # a view by indexing, at the rank expected
                return lambda a: (f"({a[0]}[{index}] if {a[0]}.ndim == {rank} else "
                                  f"_fx_unsqueeze({a[0]}, {axes}))")
            return lambda a: f"_fx_unsqueeze({a[0]}, {axes})"
        return lambda a: f"_fx_unsqueeze({a[0]}, _fx_ints({a[1]}))"
    if op == "Reshape" and set(attrs) <= {"allowzero"}:
        if attrs.get("allowzero", 0):  # a 0 is a size of 0: numpy's own reading
            return lambda a: f"{a[0]}.reshape(_fx_ints({a[1]}))"
        return lambda a: f"_fx_reshape({a[0]}, {a[1]})"
    if op == "Range" and not attrs:
        return lambda a: f"_fx_range({a[0]}, {a[1]}, {a[2]})"
    if op == "Expand" and not attrs:
        return lambda a: f"_fx_expand({a[0]}, {a[1]})"
    if op == "Softmax" and opset >= 13 and set(attrs) <= {"axis"}:
        axis = int(attrs.get("axis", -1))
        return lambda a: f"_fx_softmax({a[0]}, {axis})"
    if op == "Flatten" and set(attrs) <= {"axis"}:
        axis = int(attrs.get("axis", 1))
        return lambda a: f"_fx_flatten({a[0]}, {axis})"
    if op == "Gather" and set(attrs) <= {"axis"}:
        axis = int(attrs.get("axis", 0))
        return lambda a: f"np.take({a[0]}, {a[1]}, axis={axis})"
    if op == "GatherND" and set(attrs) <= {"batch_dims"} and not attrs.get("batch_dims", 0):
        return lambda a: f"_fx_gather_nd({a[0]}, {a[1]})"
    return None


class _Unwritten(Exception):
    """This call's inputs need the reference implementation (raised before any work)."""


#: What a caller catches to fall back to the reference implementation for one call.
Unwritten = _Unwritten
