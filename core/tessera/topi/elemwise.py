"""Elementwise computes (one input, output shaped like it): activations, math, casts, predicates.

Each public function takes a tensor and the op's parameters and returns a compute tagged
``"elemwise"``. float16 inputs are computed in float32 and rounded once at the end, as the numpy
references do; integer inputs of ops that accept them (``Erf``, ``Shrink``) are computed in
float64 and truncated back. The scalar formulas are the references' own (``exp(v) - 1`` where
the reference writes that, a cancellation-free ``log1p`` where it calls ``logaddexp``).

Intrinsics used beyond TIR's standard set (``exp log sqrt tanh erf fabs floor ceil round pow
sigmoid``): ``sin cos tan asin acos atan sinh cosh asinh acosh atanh`` (libm semantics).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tessera import te, tir
from tessera.topi import tag
from tessera.topi.registry import register_compute
from tessera.topi.utils import cast, compute_dtype, const, is_float, read, scalar

Expr = tir.PrimExpr
ScalarFn = Callable[[Expr], Expr]


def elemwise(x: te.Tensor, fn: ScalarFn, name: str, out_dtype: str | None = None,
             calc_dtype: str | None = None) -> te.Tensor:
    """``out[i] = fn(x[i])``: the value is cast to ``calc_dtype`` (default: float16 ->
    float32, else x's dtype) before ``fn`` and the result to ``out_dtype`` (default x's)."""
    ct = calc_dtype or compute_dtype(x.dtype)
    out = out_dtype or x.dtype

    def body(*i: Any) -> Expr:
        return cast(fn(cast(read(x, i), ct)), out)

    return te.compute(x.shape, body, name=name, tag=tag.ELEMWISE)


def _float_or_int(x: te.Tensor) -> str:
    """Compute dtype of ops that take integers through float64 (``numeric_math``)."""
    return "float64" if not is_float(x.dtype) else compute_dtype(x.dtype)


# -- scalar formulas ----------------------------------------------------------------------------

def log1p(y: Expr) -> Expr:
    """``log(1 + y)`` without cancellation for small ``y`` (Kahan's formula)."""
    u = 1.0 + y
    return tir.select(tir.eq(u, 1.0), y, tir.log(u) * (y / (u - 1.0)))


def expm1(y: Expr) -> Expr:
    """``exp(y) - 1`` without cancellation for small ``y`` (Kahan's formula)."""
    u = tir.exp(y)
    return tir.select(tir.eq(u, 1.0), y,
                      tir.select(tir.eq(u - 1.0, -1.0), const(-1, y.dtype),
                                 (u - 1.0) * (y / tir.log(u))))


def softplus_expr(v: Expr) -> Expr:
    """``log(1 + exp(v))`` as numpy's ``logaddexp(0, v)``: ``max(v, 0) + log1p(exp(-|v|))``."""
    return tir.max_(v, 0.0) + log1p(tir.exp(0.0 - tir.fabs(v)))


def sigmoid_expr(v: Expr) -> Expr:
    return tir.call("sigmoid", v)


def trunc(v: Expr) -> Expr:
    """Round toward zero."""
    return tir.select(v < 0.0, tir.ceil(v), tir.floor(v))


# -- computes -----------------------------------------------------------------------------------

def identity(x: te.Tensor) -> te.Tensor:
    """A copy of ``x``."""
    return te.compute(x.shape, lambda *i: read(x, i), name="identity", tag=tag.ELEMWISE)


def relu(x: te.Tensor) -> te.Tensor:
    """``max(x, 0)``."""
    if x.dtype == "bool" or x.dtype.startswith("uint"):
        return identity(x)
    return elemwise(x, lambda v: tir.max_(v, const(0, v.dtype)), "relu")


def _intrinsic(name: str) -> Callable[[te.Tensor], te.Tensor]:
    def compute(x: te.Tensor) -> te.Tensor:
        return elemwise(x, lambda v: tir.call(name, v), name)

    compute.__name__ = name
    compute.__doc__ = f"Elementwise ``{name}``."
    return compute


sigmoid = _intrinsic("sigmoid")
tanh = _intrinsic("tanh")
exp = _intrinsic("exp")
log = _intrinsic("log")
sqrt = _intrinsic("sqrt")
ceil = _intrinsic("ceil")
floor = _intrinsic("floor")
round_even = _intrinsic("round")
sin = _intrinsic("sin")
cos = _intrinsic("cos")
tan = _intrinsic("tan")
asin = _intrinsic("asin")
acos = _intrinsic("acos")
atan = _intrinsic("atan")
sinh = _intrinsic("sinh")
cosh = _intrinsic("cosh")
asinh = _intrinsic("asinh")
acosh = _intrinsic("acosh")
atanh = _intrinsic("atanh")


def erf(x: te.Tensor) -> te.Tensor:
    """The error function (integers through float64, truncated back)."""
    return elemwise(x, tir.erf, "erf", calc_dtype=_float_or_int(x))


def reciprocal(x: te.Tensor) -> te.Tensor:
    """``1 / x``."""
    return elemwise(x, lambda v: 1.0 / v, "reciprocal")


def abs(x: te.Tensor) -> te.Tensor:  # noqa: A001 - TVM's name
    """``|x|`` (the most negative integer stays itself)."""
    if is_float(x.dtype):
        return elemwise(x, tir.fabs, "abs")
    if x.dtype.startswith("uint"):
        return identity(x)
    return elemwise(x, lambda v: tir.select(v < 0, 0 - v, v), "abs")


def negative(x: te.Tensor) -> te.Tensor:
    """``-x``."""
    return elemwise(x, lambda v: const(0, v.dtype) - v, "negative")


def sign(x: te.Tensor) -> te.Tensor:
    """-1, 0 or 1 (NaN stays NaN, zeros keep themselves)."""
    def fn(v: Expr) -> Expr:
        zero, one = const(0, v.dtype), const(1, v.dtype)
        if v.dtype.startswith("uint"):
            return tir.select(v > zero, one, zero)
        rest = v if is_float(v.dtype) else zero
        return tir.select(v > zero, one, tir.select(v < zero, const(-1, v.dtype), rest))

    return elemwise(x, fn, "sign")


def elu(x: te.Tensor, alpha: float = 1.0) -> te.Tensor:
    """``x`` where positive, else ``alpha * (exp(x) - 1)``."""
    return elemwise(x, lambda v: tir.select(v > 0.0, v, alpha * (tir.exp(v) - 1.0)), "elu")


def selu(x: te.Tensor, alpha: float, gamma: float) -> te.Tensor:
    """``gamma * x`` where positive, else ``gamma * (alpha * exp(x) - alpha)``."""
    return elemwise(x, lambda v: tir.select(v > 0.0, gamma * v,
                                            gamma * (alpha * tir.exp(v) - alpha)), "selu")


def leaky_relu(x: te.Tensor, alpha: float = 0.01) -> te.Tensor:
    """``x`` where ``x >= 0``, else ``alpha * x``."""
    return elemwise(x, lambda v: tir.select(v >= 0.0, v, v * alpha), "leaky_relu")


def _clip01(v: Expr) -> Expr:
    return tir.min_(tir.max_(v, 0.0), 1.0)


def hard_sigmoid(x: te.Tensor, alpha: float = 0.2, beta: float = 0.5) -> te.Tensor:
    """``clip(alpha * x + beta, 0, 1)``."""
    return elemwise(x, lambda v: _clip01(alpha * v + beta), "hard_sigmoid")


def hard_swish(x: te.Tensor) -> te.Tensor:
    """``x * clip(x / 6 + 0.5, 0, 1)``."""
    return elemwise(x, lambda v: v * _clip01(v * (1 / 6) + 0.5), "hard_swish")


def softplus(x: te.Tensor) -> te.Tensor:
    """``log(1 + exp(x))`` (overflow-free)."""
    return elemwise(x, softplus_expr, "softplus")


def softsign(x: te.Tensor) -> te.Tensor:
    """``x / (1 + |x|)``."""
    return elemwise(x, lambda v: v / (1.0 + tir.fabs(v)), "softsign")


def gelu(x: te.Tensor, approximate: str = "none") -> te.Tensor:
    """Gaussian error linear unit (``approximate="tanh"``: the tanh formula)."""
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        return elemwise(x, lambda v: 0.5 * v * (1.0 + tir.tanh(c * (v + 0.044715 * (v * v * v)))),
                        "gelu")
    return elemwise(x, lambda v: 0.5 * v * (1.0 + tir.erf(v * (1 / math.sqrt(2)))), "gelu")


def mish(x: te.Tensor) -> te.Tensor:
    """``x * tanh(softplus(x))``."""
    return elemwise(x, lambda v: v * tir.tanh(softplus_expr(v)), "mish")


def celu(x: te.Tensor, alpha: float = 1.0) -> te.Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    return elemwise(x, lambda v: tir.max_(v, 0.0) + tir.min_(0.0, alpha * expm1(v / alpha)),
                    "celu")


def thresholded_relu(x: te.Tensor, alpha: float = 1.0) -> te.Tensor:
    """``x`` where ``x > alpha``, else 0."""
    return elemwise(x, lambda v: tir.select(v > alpha, v, const(0, v.dtype)), "thresholded_relu")


def binarizer(x: te.Tensor, threshold: float = 0.0) -> te.Tensor:
    """``ai.onnx.ml`` Binarizer: 1 where ``x > threshold``, else 0 (NaN included; integers
    are compared in float64, as the reference does)."""
    def fn(v: Expr) -> Expr:
        return tir.select(v > threshold, const(1, v.dtype), const(0, v.dtype))

    return elemwise(x, fn, "binarizer", calc_dtype=None if is_float(x.dtype) else "float64")


def shrink(x: te.Tensor, lambd: float = 0.5, bias: float = 0.0) -> te.Tensor:
    """``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0."""
    def fn(v: Expr) -> Expr:
        return tir.select(v < -lambd, v + bias,
                          tir.select(v > lambd, v - bias, const(0, v.dtype)))

    return elemwise(x, fn, "shrink", calc_dtype=_float_or_int(x))


def swish(x: te.Tensor, alpha: float = 1.0) -> te.Tensor:
    """``x * sigmoid(alpha * x)``."""
    return elemwise(x, lambda v: v * sigmoid_expr(alpha * v), "swish")


def clip(x: te.Tensor, lo: te.Tensor | float | None = None,
         hi: te.Tensor | float | None = None) -> te.Tensor:
    """``min(max(x, lo), hi)``; the bounds are one-element tensors or numbers."""
    def bound(b: te.Tensor | float) -> Expr:
        return scalar(b) if isinstance(b, te.Tensor) else const(b, x.dtype)

    def body(*i: Any) -> Expr:
        v = read(x, i)
        if lo is not None:
            v = tir.max_(v, bound(lo))
        if hi is not None:
            v = tir.min_(v, bound(hi))
        return v

    return te.compute(x.shape, body, name="clip", tag=tag.ELEMWISE)


def cast_to(x: te.Tensor, dtype: str) -> te.Tensor:
    """``x`` converted to ``dtype`` (numpy ``astype``; to bool: ``x != 0``)."""
    def body(*i: Any) -> Expr:
        v = read(x, i)
        if dtype == "bool" and x.dtype != "bool":
            return tir.ne(v, const(0, x.dtype))
        return cast(v, dtype)

    return te.compute(x.shape, body, name="cast", tag=tag.ELEMWISE)


def isnan(x: te.Tensor) -> te.Tensor:
    """Whether each element is NaN."""
    return te.compute(x.shape, lambda *i: tir.ne(read(x, i), read(x, i)), name="isnan",
                      tag=tag.ELEMWISE)


def isinf(x: te.Tensor, detect_negative: bool = True, detect_positive: bool = True) -> te.Tensor:
    """Whether each element is -inf (when ``detect_negative``) or +inf (``detect_positive``)."""
    def body(*i: Any) -> Expr:
        v = read(x, i)
        conds = []
        if detect_negative:
            conds.append(tir.eq(v, tir.min_value(x.dtype)))
        if detect_positive:
            conds.append(tir.eq(v, tir.max_value(x.dtype)))
        return tir.any_of(*conds)

    return te.compute(x.shape, body, name="isinf", tag=tag.ELEMWISE)


def logical_not(x: te.Tensor) -> te.Tensor:
    """``not x`` of a bool tensor."""
    return te.compute(x.shape, lambda *i: tir.Not(read(x, i)), name="logical_not",
                      tag=tag.ELEMWISE)


# -- graph ops ----------------------------------------------------------------------------------

def _bind(op: str, fn: Callable[..., te.Tensor], *keys: str) -> None:
    """Register ``fn(x, *attrs[keys])`` as the compute of one-input op ``op``."""

    def compute(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
        return [fn(inputs[0], *(attrs[k] for k in keys))]

    compute.__name__ = f"compute_{op}"
    register_compute(op)(compute)


for _op, _fn in (("Identity", identity), ("Relu", relu), ("Sigmoid", sigmoid), ("Tanh", tanh),
                 ("Exp", exp), ("Log", log), ("Sqrt", sqrt), ("Erf", erf), ("Ceil", ceil),
                 ("Floor", floor), ("Round", round_even), ("Reciprocal", reciprocal),
                 ("Sin", sin), ("Cos", cos), ("Tan", tan), ("Asin", asin), ("Acos", acos),
                 ("Atan", atan), ("Sinh", sinh), ("Cosh", cosh), ("Asinh", asinh),
                 ("Acosh", acosh), ("Atanh", atanh), ("Abs", abs), ("Neg", negative),
                 ("Sign", sign), ("HardSwish", hard_swish), ("Softplus", softplus),
                 ("Softsign", softsign), ("Mish", mish), ("Not", logical_not),
                 ("IsNaN", isnan)):
    _bind(_op, _fn)
_bind("Elu", elu, "alpha")
_bind("Selu", selu, "alpha", "gamma")
_bind("LeakyRelu", leaky_relu, "alpha")
_bind("HardSigmoid", hard_sigmoid, "alpha", "beta")
_bind("Gelu", gelu, "approximate")
_bind("Celu", celu, "alpha")
_bind("ThresholdedRelu", thresholded_relu, "alpha")
_bind("Binarizer", binarizer, "threshold")
_bind("Shrink", shrink, "lambd", "bias")
_bind("Swish", swish, "alpha")
_bind("IsInf", isinf, "detect_negative", "detect_positive")


@register_compute("Clip")
def _clip(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x = inputs[0]
    lo = inputs[1] if len(inputs) > 1 else None
    hi = inputs[2] if len(inputs) > 2 else None
    return [clip(x, lo, hi)]


@register_compute("Cast")
def _cast(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [cast_to(inputs[0], out_types[0].dtype.value)]


__all__ = [
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cast_to", "ceil", "celu", "clip",
    "cos", "cosh", "elemwise", "elu", "erf", "exp", "expm1", "floor", "gelu", "hard_sigmoid",
    "hard_swish", "identity", "isinf", "isnan", "leaky_relu", "log", "log1p", "logical_not",
    "mish", "negative", "reciprocal", "relu", "round_even", "selu", "shrink", "sigmoid",
    "sigmoid_expr", "sign", "sin", "sinh", "softplus", "softplus_expr", "softsign", "sqrt",
    "swish", "tan", "tanh", "thresholded_relu", "trunc",
]
