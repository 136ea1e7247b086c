"""Broadcasting computes: arithmetic, comparisons, logic, variadic max/min/sum/mean, where.

Operands broadcast like numpy (right-aligned; a size-1 dimension reads index 0). A compute whose
operands all have the output's shape is tagged ``"elemwise"``, otherwise ``"broadcast"``.
Dimensions may be run-time sizes (:func:`~tessera.topi.utils.broadcast_shape`: such a
dimension matches the same size and takes a static 1's place, never broadcasts itself).
float16 operands are computed in float32 and rounded once. Integer semantics follow the
references (ONNX): ``Div`` truncates toward zero, ``Mod`` takes the divisor's sign (or the
dividend's with ``fmod``), and integer division or modulo by zero gives 0 (a guard, so the
generated code never divides by zero; ``INT_MIN / -1`` wraps as numpy does).

Intrinsic used beyond TIR's standard set: ``fmod`` (C's ``fmod`` of floats).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

from tessera import te, tir
from tessera.topi import tag
from tessera.topi.registry import register_compute
from tessera.topi.utils import (
    broadcast_read,
    broadcast_shape,
    cast,
    compute_dtype,
    const,
    constant_scalar,
    dims_of,
    is_float,
    shapes_equal,
)

Expr = tir.PrimExpr


def broadcast_compute(inputs: Sequence[te.Tensor], fn: Callable[..., Expr], name: str,
                      out_dtype: str | None = None, calc_dtype: str | None = None) -> te.Tensor:
    """``out[i] = fn(a[i'], b[i''], ...)`` over the broadcast shape of ``inputs``; operands are
    cast to ``calc_dtype`` (default: the first input's compute dtype) and the result to
    ``out_dtype`` (default: the first input's dtype)."""
    shapes = [dims_of(t) for t in inputs]
    out_shape = broadcast_shape(*shapes)
    ct = calc_dtype or compute_dtype(inputs[0].dtype)
    out = out_dtype or inputs[0].dtype
    kind = tag.ELEMWISE if all(shapes_equal(s, out_shape) for s in shapes) else tag.BROADCAST

    def body(*i: Any) -> Expr:
        vals = [cast(broadcast_read(t, i), ct) for t in inputs]
        return cast(fn(*vals), out)

    return te.compute(out_shape, body, name=name, tag=kind)


# -- arithmetic ---------------------------------------------------------------------------------

def add(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    return broadcast_compute([a, b], lambda x, y: x + y, "add")


def subtract(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    return broadcast_compute([a, b], lambda x, y: x - y, "subtract")


def multiply(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    return broadcast_compute([a, b], lambda x, y: x * y, "multiply")


def _is_signed_int(dtype: str) -> bool:
    return dtype.startswith("int")


def trunc_div_expr(x: Expr, y: Expr) -> Expr:
    """Integer ``x / y`` rounded toward zero; 0 where ``y == 0``; ``-x`` where ``y == -1``."""
    zero = const(0, x.dtype)
    if not _is_signed_int(x.dtype):
        safe = tir.select(tir.eq(y, zero), const(1, y.dtype), y)
        return tir.select(tir.eq(y, zero), zero, x // safe)
    minus_one = const(-1, y.dtype)
    special = tir.any_of(tir.eq(y, zero), tir.eq(y, minus_one))
    safe = tir.select(special, const(1, y.dtype), y)
    q = x // safe
    inexact = tir.ne(x % safe, zero)
    signs_differ = tir.ne(x < zero, y < zero)
    q = tir.select(tir.all_of(inexact, signs_differ), q + 1, q)
    return tir.select(tir.eq(y, zero), zero, tir.select(tir.eq(y, minus_one), zero - x, q))


def floor_mod_expr(x: Expr, y: Expr) -> Expr:
    """Modulo with the divisor's sign (numpy ``mod``); 0 where an integer ``y`` is 0."""
    if is_float(x.dtype):
        r = tir.call("fmod", x, y)
        zero = const(0, x.dtype)
        fix = tir.all_of(tir.ne(r, zero), tir.ne(r < zero, y < zero))
        return tir.select(fix, r + y, r)
    zero = const(0, x.dtype)
    safe = tir.select(tir.eq(y, zero), const(1, y.dtype), y)
    return tir.select(tir.eq(y, zero), zero, x % safe)


def trunc_mod_expr(x: Expr, y: Expr) -> Expr:
    """Remainder with the dividend's sign (C ``fmod``); 0 where an integer ``y`` is 0."""
    if is_float(x.dtype):
        return tir.call("fmod", x, y)
    zero = const(0, x.dtype)
    if not _is_signed_int(x.dtype):
        safe = tir.select(tir.eq(y, zero), const(1, y.dtype), y)
        return tir.select(tir.eq(y, zero), zero, x % safe)
    return tir.select(tir.eq(y, zero), zero, x - trunc_div_expr(x, y) * y)


def divide(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    """``a / b``; integers truncate toward zero (0 where ``b == 0``)."""
    if is_float(a.dtype):
        return broadcast_compute([a, b], lambda x, y: x / y, "divide")
    return broadcast_compute([a, b], trunc_div_expr, "divide")


def mod(a: te.Tensor, b: te.Tensor, fmod: bool = False) -> te.Tensor:
    """Remainder with the divisor's sign, or with the dividend's when ``fmod``."""
    return broadcast_compute([a, b], trunc_mod_expr if fmod else floor_mod_expr, "mod")


def power(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    """``a ** b`` in ``a``'s type: float32/float64 with a same-typed exponent directly (an
    inlined exponent 1 or 2 as a product), any other combination through float64."""
    exponent = constant_scalar(b)
    same_float = a.dtype == b.dtype and a.dtype in ("float32", "float64")
    if same_float and exponent in (1.0, 2.0):
        if exponent == 1.0:
            return broadcast_compute([a, b], lambda x, y: x, "power")
        return broadcast_compute([a, b], lambda x, y: x * x, "power")
    if same_float:
        return broadcast_compute([a, b], lambda x, y: tir.call("pow", x, y), "power")
    return broadcast_compute([a, b], lambda x, y: tir.call("pow", x, y), "power",
                             calc_dtype="float64")


def maximum(*xs: te.Tensor) -> te.Tensor:
    """Elementwise maximum of one or more operands."""
    return broadcast_compute(xs, lambda *v: reduce(tir.max_, v), "maximum")


def minimum(*xs: te.Tensor) -> te.Tensor:
    """Elementwise minimum of one or more operands."""
    return broadcast_compute(xs, lambda *v: reduce(tir.min_, v), "minimum")


def sum_n(*xs: te.Tensor) -> te.Tensor:
    """Elementwise sum of one or more operands, added left to right."""
    return broadcast_compute(xs, lambda *v: reduce(lambda p, q: p + q, v), "sum")


def mean_n(*xs: te.Tensor) -> te.Tensor:
    """Elementwise mean of one or more float operands."""
    n = len(xs)
    return broadcast_compute(xs, lambda *v: reduce(lambda p, q: p + q, v) / float(n), "mean")


# -- comparisons and logic ----------------------------------------------------------------------

def _compare(name: str, fn: Callable[[Expr, Expr], Expr]) -> Callable[..., te.Tensor]:
    def compute(a: te.Tensor, b: te.Tensor) -> te.Tensor:
        return broadcast_compute([a, b], fn, name, out_dtype="bool", calc_dtype=a.dtype)

    compute.__name__ = name
    compute.__doc__ = f"Elementwise ``{name}`` with a bool result."
    return compute


equal = _compare("equal", tir.eq)
less = _compare("less", lambda x, y: x < y)
less_equal = _compare("less_equal", lambda x, y: x <= y)
greater = _compare("greater", lambda x, y: x > y)
greater_equal = _compare("greater_equal", lambda x, y: x >= y)
logical_and = _compare("logical_and", lambda x, y: tir.all_of(x, y))
logical_or = _compare("logical_or", lambda x, y: tir.any_of(x, y))
logical_xor = _compare("logical_xor", tir.ne)


def where(cond: te.Tensor, x: te.Tensor, y: te.Tensor) -> te.Tensor:
    """``x`` where ``cond`` holds, else ``y``."""
    shapes = [dims_of(t) for t in (cond, x, y)]
    out_shape = broadcast_shape(*shapes)
    kind = tag.ELEMWISE if all(shapes_equal(s, out_shape) for s in shapes) else tag.BROADCAST
    return te.compute(out_shape, lambda *i: tir.select(broadcast_read(cond, i),
                                                       broadcast_read(x, i),
                                                       broadcast_read(y, i)),
                      name="where", tag=kind)


def prelu(x: te.Tensor, slope: te.Tensor) -> te.Tensor:
    """``x`` where ``x >= 0``, else ``slope * x`` (slope broadcast to x)."""
    return broadcast_compute([x, slope], lambda v, s: tir.select(v < const(0, v.dtype), v * s, v),
                             "prelu")


def swiglu(a: te.Tensor, b: te.Tensor, alpha: float = 1.0) -> te.Tensor:
    """``a * sigmoid(alpha * a) * b``."""
    def fn(x: Expr, y: Expr) -> Expr:
        gate = 1.0 / (1.0 + tir.exp((-alpha) * x))
        return x * gate * y

    return broadcast_compute([a, b], fn, "swiglu")


# -- graph ops ----------------------------------------------------------------------------------

def _bind(op: str, fn: Callable[..., te.Tensor]) -> None:
    def compute(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
        return [fn(*[t for t in inputs if t is not None])]

    compute.__name__ = f"compute_{op}"
    register_compute(op)(compute)


for _op, _fn in (("Add", add), ("Sub", subtract), ("Mul", multiply), ("Div", divide),
                 ("Pow", power), ("Equal", equal), ("Less", less), ("LessOrEqual", less_equal),
                 ("Greater", greater), ("GreaterOrEqual", greater_equal), ("And", logical_and),
                 ("Or", logical_or), ("Xor", logical_xor), ("Max", maximum), ("Min", minimum),
                 ("Sum", sum_n), ("Mean", mean_n), ("Where", where), ("PRelu", prelu)):
    _bind(_op, _fn)


@register_compute("Mod")
def _mod(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [mod(inputs[0], inputs[1], bool(attrs["fmod"]))]


@register_compute("SwiGLU")
def _swiglu(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [swiglu(inputs[0], inputs[1], attrs["alpha"])]


__all__ = [
    "add", "broadcast_compute", "divide", "equal", "floor_mod_expr", "greater", "greater_equal",
    "less", "less_equal", "logical_and", "logical_or", "logical_xor", "maximum", "mean_n",
    "minimum", "mod", "multiply", "power", "prelu", "subtract", "sum_n", "swiglu",
    "trunc_div_expr", "trunc_mod_expr", "where",
]
