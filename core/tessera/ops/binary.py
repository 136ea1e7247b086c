"""Ops: binary and variadic broadcasting family: arithmetic, comparisons, logic, bitwise.

All operands of one op share an element type (``Pow``'s exponent and ``Where``'s condition
excepted) and broadcast like numpy. Arithmetic keeps that type: float16 is computed in float32
where several steps are involved (``Sum``, ``Mean``, ``Pow``) and rounded once, as onnxruntime's
CPU kernels do. Integer semantics follow ONNX rather than numpy where the two differ:

* ``Div`` on integers truncates toward zero (C division), not toward minus infinity;
* ``Pow`` with an integer base is computed as C's ``pow`` in double precision and converted back
  to the base's type (so a negative exponent gives 0 for ``|x| > 1``);
* ``Mod`` with ``fmod=0`` takes the divisor's sign (floor modulo, also for floats, as opset 28
  defines it), with ``fmod=1`` the dividend's (C ``fmod``);
* ``BitShift`` by a negative amount or by at least the type's width gives the sign fill alone
  (opset 28's definition: ``-1`` for a right shift of a negative value, else ``0``).

Integer division or modulo by zero is undefined in ONNX; the references give 0 there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import reduce
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.elementwise import (
    ALL,
    BOOL,
    FLOATS,
    INTS,
    NARROW_FLOATS,
    NUMERIC,
    check_dtype,
)
from tessera.ops.registry import Attr, OpPattern, broadcast_shapes, register_op

B = OpPattern.BROADCAST


def _broadcast(op: str, types: Iterable[TensorType]) -> tuple[int, ...]:
    try:
        return broadcast_shapes(*(t.shape for t in types))
    except OpError as e:
        raise OpError(f"{op}: {e}") from None


def _same_dtypes(op: str, types: list[TensorType], first: int = 0) -> None:
    want = types[first].dtype
    for i, t in enumerate(types[first:], start=first):
        if t.dtype != want:
            raise OpError(f"{op}: input {i} has element type {t.dtype}; expected input "
                          f"{first}'s {want} (every operand must have the same type)")


def elementwise_infer(op: str, allowed: Iterable[DType],
                      result: DType | None = None) -> Callable[..., TensorType]:
    """Inference for a broadcasting op over operands of one type from ``allowed``; the result
    has that type, or ``result`` (bool for comparisons)."""
    allowed = frozenset(allowed)

    def infer(*types: TensorType, **attrs: Any) -> TensorType:
        present = list(types)
        check_dtype(op, "input 0", present[0], allowed)
        _same_dtypes(op, present)
        return TensorType(_broadcast(op, present), result or present[0].dtype)

    infer.__name__ = f"infer_{op}"
    return infer


def _in_float32(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """float16/bfloat16 operands as float32 (to round once at the end), others unchanged."""
    return [a.astype(np.float32) if a.dtype in NARROW_FLOATS else a for a in arrays]


# -- arithmetic ---------------------------------------------------------------------------------

@register_op("Add", inputs=2, infer=elementwise_infer("Add", NUMERIC), pattern=B)
def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a + b).astype(a.dtype, copy=False)


@register_op("Sub", inputs=2, infer=elementwise_infer("Sub", NUMERIC), pattern=B)
def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a - b).astype(a.dtype, copy=False)


@register_op("Mul", inputs=2, infer=elementwise_infer("Mul", NUMERIC), pattern=B)
def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).astype(a.dtype, copy=False)


@register_op("Div", inputs=2, infer=elementwise_infer("Div", NUMERIC), pattern=B)
def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b; integers truncate toward zero like C."""
    if a.dtype.kind == "f" or a.dtype in NARROW_FLOATS:
        return (a / b).astype(a.dtype, copy=False)
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        # floor differs from truncation where the division is inexact and the signs differ
        inexact = np.remainder(a, b) != 0
        q = q + (inexact & ((a < 0) != (b < 0))).astype(a.dtype)
    return q.astype(a.dtype, copy=False)


def _pow_infer(x: TensorType, y: TensorType) -> TensorType:
    check_dtype("Pow", "the base X", x, NUMERIC)
    check_dtype("Pow", "the exponent Y", y, NUMERIC)
    return TensorType(_broadcast("Pow", [x, y]), x.dtype)


@register_op("Pow", inputs=2, infer=_pow_infer, pattern=B)
def pow_(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x ** y in the base's type; integer bases and mixed types go through C's double ``pow``."""
    if x.dtype == y.dtype and x.dtype in (np.float32, np.float64):
        return np.power(x, y)
    return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)


def _mod_infer(a: TensorType, b: TensorType, *, fmod: int) -> TensorType:
    if fmod not in (0, 1):
        raise OpError(f"Mod: fmod must be 0 or 1, got {fmod}")
    return elementwise_infer("Mod", NUMERIC)(a, b)


@register_op("Mod", inputs=2, attrs={"fmod": Attr.int(0)}, infer=_mod_infer, pattern=B)
def mod(a: np.ndarray, b: np.ndarray, *, fmod: int) -> np.ndarray:
    """Remainder with the divisor's sign (``fmod=0``) or the dividend's (``fmod=1``)."""
    fn = np.fmod if fmod else np.mod
    if a.dtype in NARROW_FLOATS:
        return fn(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    return fn(a, b).astype(a.dtype, copy=False)


# -- comparisons and logic ----------------------------------------------------------------------

def _register_comparison(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                         allowed: Iterable[DType]) -> None:
    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(fn(a, b), dtype=bool)

    reference.__name__ = name.lower()
    reference.__doc__ = f"{name}: elementwise {fn.__name__}, a bool result."
    register_op(name, inputs=2, infer=elementwise_infer(name, allowed, DType.bool),
                pattern=B)(reference)


_register_comparison("Equal", np.equal, ALL)
_register_comparison("Less", np.less, NUMERIC)
_register_comparison("LessOrEqual", np.less_equal, NUMERIC)
_register_comparison("Greater", np.greater, NUMERIC)
_register_comparison("GreaterOrEqual", np.greater_equal, NUMERIC)
_register_comparison("And", np.logical_and, BOOL)
_register_comparison("Or", np.logical_or, BOOL)
_register_comparison("Xor", np.logical_xor, BOOL)


# -- bitwise ------------------------------------------------------------------------------------

def _register_bitwise(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fn(a, b).astype(a.dtype, copy=False)

    reference.__name__ = name.lower()
    reference.__doc__ = f"{name}: elementwise {fn.__name__} of integers."
    register_op(name, inputs=2, infer=elementwise_infer(name, INTS), pattern=B)(reference)


_register_bitwise("BitwiseAnd", np.bitwise_and)
_register_bitwise("BitwiseOr", np.bitwise_or)
_register_bitwise("BitwiseXor", np.bitwise_xor)


def _bitshift_infer(x: TensorType, y: TensorType, *, direction: str) -> TensorType:
    if direction not in ("LEFT", "RIGHT"):
        raise OpError(f"BitShift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return elementwise_infer("BitShift", INTS)(x, y)


@register_op("BitShift", inputs=2, attrs={"direction": Attr.str()}, infer=_bitshift_infer,
             pattern=B)
def bit_shift(x: np.ndarray, y: np.ndarray, *, direction: str) -> np.ndarray:
    """x shifted by y bits (right shifts of signed types are arithmetic)."""
    width = x.dtype.itemsize * 8
    out_of_range = (y < 0) | (y >= width)
    amount = np.where(out_of_range, 0, y).astype(x.dtype)
    if direction == "LEFT":
        shifted, fill = np.left_shift(x, amount), np.zeros((), x.dtype)
    else:
        shifted = np.right_shift(x, amount)
        fill = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else \
            np.zeros((), x.dtype)
    return np.where(out_of_range, fill, shifted).astype(x.dtype, copy=False)


# -- variadic -----------------------------------------------------------------------------------

def _variadic(name: str, allowed: Iterable[DType], doc: str) -> Callable[[Callable], Callable]:
    def deco(fn: Callable) -> Callable:
        fn.__doc__ = doc
        return register_op(name, inputs=(1, None), infer=elementwise_infer(name, allowed),
                           pattern=B)(fn)

    return deco


@_variadic("Max", NUMERIC, "Elementwise maximum of one or more operands (NaN propagates).")
def max_(*arrays: np.ndarray) -> np.ndarray:
    return np.array(reduce(np.maximum, arrays), dtype=arrays[0].dtype)


@_variadic("Min", NUMERIC, "Elementwise minimum of one or more operands (NaN propagates).")
def min_(*arrays: np.ndarray) -> np.ndarray:
    return np.array(reduce(np.minimum, arrays), dtype=arrays[0].dtype)


@_variadic("Sum", NUMERIC, "Elementwise sum of one or more operands, added left to right.")
def sum_(*arrays: np.ndarray) -> np.ndarray:
    return np.array(reduce(np.add, _in_float32(list(arrays))), dtype=arrays[0].dtype)


@_variadic("Mean", FLOATS, "Elementwise mean of one or more operands.")
def mean(*arrays: np.ndarray) -> np.ndarray:
    total = reduce(np.add, _in_float32(list(arrays)))
    return np.array(total / len(arrays), dtype=arrays[0].dtype)


def _where_infer(cond: TensorType, x: TensorType, y: TensorType) -> TensorType:
    check_dtype("Where", "the condition", cond, BOOL)
    _same_dtypes("Where", [cond, x, y], first=1)
    return TensorType(_broadcast("Where", [cond, x, y]), x.dtype)


@register_op("Where", inputs=3, infer=_where_infer, pattern=B)
def where(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x where the condition holds, else y."""
    return np.where(cond, x, y).astype(x.dtype, copy=False)
