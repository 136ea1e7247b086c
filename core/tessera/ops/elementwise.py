"""Ops: elementwise family (one input, output shaped like it): activations, math, casts.

Every op here keeps its input's shape; all but the casts and the predicates (``IsNaN``,
``IsInf``) also keep its element type. Conventions shared by the references:

* float16 and bfloat16 inputs are computed in float32 and rounded once at the end, as
  onnxruntime's CPU kernels do (numpy's float16 arithmetic would round after every step of a
  composite formula); bfloat16 is a float type here (ONNX's math ops take it), the other
  low-precision types are not (they are cast, quantized and moved);
* integer inputs of ops that take them (``Abs``, ``Sign``, ``Shrink``, ``Erf``, ...) give
  integer outputs of the same type; formulas that pass through floats truncate toward zero;
* float attributes are Python floats, which numpy treats as "weak" scalars, so they never widen
  an array's type.

``Clip`` keeps ONNX opset 11's form: ``Clip(input, min?, max?)`` with ``min`` and ``max`` as
optional one-element inputs of the input's type (the converter turns opset 6's attributes into
constants). ``Cast`` has one attribute ``to`` (a :class:`~tessera.ir.types.DType`) and converts
like numpy's ``astype``, which on the supported types matches onnxruntime bit for bit, including
out-of-range and NaN float to integer conversions on x86.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.cast import ROUND_MODES, convert
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, register_op, same_as_first

E = OpPattern.ELEMWISE

FLOATS = frozenset({DType.float16, DType.float32, DType.float64, DType.bfloat16})
SIGNED_INTS = frozenset({DType.int8, DType.int16, DType.int32, DType.int64})
UNSIGNED_INTS = frozenset({DType.uint8, DType.uint16, DType.uint32, DType.uint64})
INTS = SIGNED_INTS | UNSIGNED_INTS
NUMERIC = FLOATS | INTS
#: numpy dtypes computed in float32 and rounded back once.
NARROW_FLOATS = (np.dtype(np.float16), DType.bfloat16.numpy)
SIGNED_NUMERIC = FLOATS | SIGNED_INTS
BOOL = frozenset({DType.bool})
ALL = NUMERIC | BOOL


def _describe(allowed: Iterable[DType]) -> str:
    allowed = set(allowed)
    for name, group in (("any type", ALL), ("a numeric type", NUMERIC),
                        ("a signed numeric type", SIGNED_NUMERIC), ("a float type", FLOATS),
                        ("an integer type", INTS), ("bool", BOOL)):
        if allowed == group:
            return name
    return "one of " + ", ".join(sorted(d.value for d in allowed))


def check_dtype(op: str, what: str, t: TensorType, allowed: Iterable[DType]) -> None:
    """Raise :class:`OpError` unless ``t``'s element type is in ``allowed``."""
    allowed = frozenset(allowed)
    if t.dtype not in allowed:
        raise OpError(f"{op}: {what} has element type {t.dtype}; expected {_describe(allowed)}")


def unary_infer(op: str, allowed: Iterable[DType]) -> Callable[..., TensorType]:
    """Inference for a one-input op whose output has its input's type (``allowed`` types)."""
    allowed = frozenset(allowed)

    def infer(x: TensorType, **attrs: Any) -> TensorType:
        check_dtype(op, "the input", x, allowed)
        return x

    infer.__name__ = f"infer_{op}"
    return infer


def predicate_infer(op: str, allowed: Iterable[DType]) -> Callable[..., TensorType]:
    """Inference for a one-input op with a bool output of the input's shape."""
    allowed = frozenset(allowed)

    def infer(x: TensorType, **attrs: Any) -> TensorType:
        check_dtype(op, "the input", x, allowed)
        return x.with_dtype(DType.bool)

    infer.__name__ = f"infer_{op}"
    return infer


def float_math(x: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Apply ``fn`` to a float array, in float32 for float16/bfloat16 input, and return x's
    type."""
    if x.dtype in NARROW_FLOATS:
        return np.asarray(fn(x.astype(np.float32))).astype(x.dtype)
    return np.asarray(fn(x)).astype(x.dtype, copy=False)


def numeric_math(x: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Like :func:`float_math`, but integer input is computed in float64 and truncated back."""
    if x.dtype.kind in "iu":
        return np.asarray(fn(x.astype(np.float64))).astype(x.dtype)
    return float_math(x, fn)


@functools.cache
def _vectorized_erf() -> Callable[[np.ndarray], np.ndarray] | None:
    """scipy's erf when scipy is installed (imported on first use: it is slow to import)."""
    try:
        from scipy.special import erf as scipy_erf
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return scipy_erf


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of a float array (scipy's when installed, else ``math.erf``)."""
    fast = _vectorized_erf()
    if fast is not None:
        return np.asarray(fast(x))
    return _erf_slow(x)


def _erf_slow(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _ufunc_op(name: str, fn: Callable[[np.ndarray], np.ndarray],
              allowed: Iterable[DType] = FLOATS) -> None:
    """Register a float math op ``name`` computing ``fn`` (float16 in float32)."""

    def reference(x: np.ndarray) -> np.ndarray:
        return numeric_math(x, fn)

    reference.__name__ = name.lower()
    reference.__doc__ = f"{name}: elementwise {getattr(fn, '__name__', name)}."
    register_op(name, infer=unary_infer(name, allowed), pattern=E)(reference)


@register_op("Identity", infer=same_as_first, pattern=E)
def identity(x: np.ndarray) -> np.ndarray:
    return x.copy()


@register_op("Relu", infer=same_as_first, pattern=E)
def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


# -- plain math ---------------------------------------------------------------------------------

def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


_ufunc_op("Sigmoid", _sigmoid)
_ufunc_op("Tanh", np.tanh)
_ufunc_op("Exp", np.exp)
_ufunc_op("Log", np.log)
_ufunc_op("Sqrt", np.sqrt)
_ufunc_op("Erf", erf, NUMERIC)
_ufunc_op("Ceil", np.ceil)
_ufunc_op("Floor", np.floor)
_ufunc_op("Round", np.rint)  # rint rounds half to even, as ONNX specifies
_ufunc_op("Reciprocal", np.reciprocal)
_ufunc_op("Sin", np.sin)
_ufunc_op("Cos", np.cos)
_ufunc_op("Tan", np.tan)
_ufunc_op("Asin", np.arcsin)
_ufunc_op("Acos", np.arccos)
_ufunc_op("Atan", np.arctan)
_ufunc_op("Sinh", np.sinh)
_ufunc_op("Cosh", np.cosh)
_ufunc_op("Asinh", np.arcsinh)
_ufunc_op("Acosh", np.arccosh)
_ufunc_op("Atanh", np.arctanh)


@register_op("Abs", infer=unary_infer("Abs", NUMERIC), pattern=E)
def abs_(x: np.ndarray) -> np.ndarray:
    """Absolute value; the most negative integer stays itself (two's complement wrap)."""
    return np.abs(x)


@register_op("Neg", infer=unary_infer("Neg", SIGNED_NUMERIC), pattern=E)
def neg(x: np.ndarray) -> np.ndarray:
    return np.negative(x)


@register_op("Sign", infer=unary_infer("Sign", NUMERIC), pattern=E)
def sign(x: np.ndarray) -> np.ndarray:
    """-1, 0 or 1 in the input's type (NaN stays NaN)."""
    return np.sign(x)


# -- activations --------------------------------------------------------------------------------

@register_op("Elu", attrs={"alpha": Attr.float(1.0)}, infer=unary_infer("Elu", FLOATS), pattern=E)
def elu(x: np.ndarray, *, alpha: float) -> np.ndarray:
    return float_math(x, lambda v: np.where(v > 0, v, alpha * (np.exp(v) - 1)))


_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875


@register_op("Selu", attrs={"alpha": Attr.float(_SELU_ALPHA), "gamma": Attr.float(_SELU_GAMMA)},
             infer=unary_infer("Selu", FLOATS), pattern=E)
def selu(x: np.ndarray, *, alpha: float, gamma: float) -> np.ndarray:
    return float_math(x, lambda v: np.where(v > 0, gamma * v, gamma * (alpha * np.exp(v) - alpha)))


@register_op("LeakyRelu", attrs={"alpha": Attr.float(0.01)},
             infer=unary_infer("LeakyRelu", FLOATS), pattern=E)
def leaky_relu(x: np.ndarray, *, alpha: float) -> np.ndarray:
    return float_math(x, lambda v: np.where(v >= 0, v, v * alpha))


@register_op("HardSigmoid", attrs={"alpha": Attr.float(0.2), "beta": Attr.float(0.5)},
             infer=unary_infer("HardSigmoid", FLOATS), pattern=E)
def hard_sigmoid(x: np.ndarray, *, alpha: float, beta: float) -> np.ndarray:
    return float_math(x, lambda v: np.clip(alpha * v + beta, 0, 1))


@register_op("HardSwish", infer=unary_infer("HardSwish", FLOATS), pattern=E)
def hard_swish(x: np.ndarray) -> np.ndarray:
    """x * HardSigmoid(x) with alpha = 1/6, beta = 0.5."""
    return float_math(x, lambda v: v * np.clip(v * (1 / 6) + 0.5, 0, 1))


def _softplus(v: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, v)  # log(1 + exp(v)) without overflow


@register_op("Softplus", infer=unary_infer("Softplus", FLOATS), pattern=E)
def softplus(x: np.ndarray) -> np.ndarray:
    return float_math(x, _softplus)


@register_op("Softsign", infer=unary_infer("Softsign", FLOATS), pattern=E)
def softsign(x: np.ndarray) -> np.ndarray:
    return float_math(x, lambda v: v / (1 + np.abs(v)))


def _gelu_infer(x: TensorType, *, approximate: str) -> TensorType:
    check_dtype("Gelu", "the input", x, FLOATS)
    if approximate not in ("none", "tanh"):
        raise OpError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return x


@register_op("Gelu", attrs={"approximate": Attr.str("none")}, infer=_gelu_infer,
             pattern=E)
def gelu(x: np.ndarray, *, approximate: str) -> np.ndarray:
    """Gaussian error linear unit; ``approximate="tanh"`` uses the tanh formula."""
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        return float_math(x, lambda v: 0.5 * v * (1 + np.tanh(c * (v + 0.044715 * v ** 3))))
    return float_math(x, lambda v: 0.5 * v * (1 + erf(v * (1 / math.sqrt(2)))))


@register_op("Mish", infer=unary_infer("Mish", FLOATS), pattern=E)
def mish(x: np.ndarray) -> np.ndarray:
    """x * tanh(softplus(x))."""
    return float_math(x, lambda v: v * np.tanh(_softplus(v)))


def _celu_infer(x: TensorType, *, alpha: float) -> TensorType:
    check_dtype("Celu", "the input", x, FLOATS)
    if alpha == 0:
        raise OpError("Celu: alpha must not be 0")
    return x


@register_op("Celu", attrs={"alpha": Attr.float(1.0)}, infer=_celu_infer, pattern=E)
def celu(x: np.ndarray, *, alpha: float) -> np.ndarray:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    return float_math(x, lambda v: np.maximum(v, 0) + np.minimum(0, alpha * np.expm1(v / alpha)))


@register_op("ThresholdedRelu", attrs={"alpha": Attr.float(1.0)},
             infer=unary_infer("ThresholdedRelu", FLOATS), pattern=E)
def thresholded_relu(x: np.ndarray, *, alpha: float) -> np.ndarray:
    return float_math(x, lambda v: np.where(v > alpha, v, 0))


@register_op("Shrink", attrs={"lambd": Attr.float(0.5), "bias": Attr.float(0.0)},
             infer=unary_infer("Shrink", NUMERIC), pattern=E)
def shrink(x: np.ndarray, *, lambd: float, bias: float) -> np.ndarray:
    """x + bias where x < -lambd, x - bias where x > lambd, else 0 (integers truncated)."""

    def fn(v: np.ndarray) -> np.ndarray:
        return np.where(v < -lambd, v + bias, np.where(v > lambd, v - bias, 0))

    return numeric_math(x, fn)


@register_op("Swish", attrs={"alpha": Attr.float(1.0)}, infer=unary_infer("Swish", FLOATS),
             pattern=E)
def swish(x: np.ndarray, *, alpha: float) -> np.ndarray:
    """x * sigmoid(alpha * x)."""
    return float_math(x, lambda v: v * _sigmoid(alpha * v))


# -- ops with extra operands --------------------------------------------------------------------

PRELU_TYPES = FLOATS | frozenset({DType.int32, DType.int64, DType.uint32, DType.uint64})


def _prelu_infer(x: TensorType, slope: TensorType) -> TensorType:
    check_dtype("PRelu", "X", x, PRELU_TYPES)
    if slope.dtype != x.dtype:
        raise OpError(f"PRelu: slope has element type {slope.dtype}; expected X's {x.dtype}")
    try:
        shape = np.broadcast_shapes(x.shape, slope.shape)
    except ValueError:
        shape = None
    if shape != x.shape:
        raise OpError(f"PRelu: slope shape {list(slope.shape)} does not broadcast to X's shape "
                      f"{list(x.shape)}")
    return x


@register_op("PRelu", inputs=2, infer=_prelu_infer, pattern=OpPattern.BROADCAST)
def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """x where x >= 0, else slope * x; slope broadcasts to x (unidirectionally)."""
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)


def _clip_bound(op: str, what: str, x: TensorType, bound: TensorType | None) -> None:
    if bound is None:
        return
    if bound.dtype != x.dtype:
        raise OpError(f"{op}: {what} has element type {bound.dtype}; expected the input's "
                      f"{x.dtype}")
    if bound.size != 1:
        raise OpError(f"{op}: {what} must be a scalar, got shape {list(bound.shape)}")


def _clip_infer(x: TensorType, lo: TensorType | None = None,
                hi: TensorType | None = None) -> TensorType:
    check_dtype("Clip", "the input", x, NUMERIC)
    _clip_bound("Clip", "min", x, lo)
    _clip_bound("Clip", "max", x, hi)
    return x


@register_op("Clip", inputs=(1, 3), infer=_clip_infer, pattern=E)
def clip(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    """Clamp to [min, max] (each an optional scalar input); where min > max the result is max."""
    y = x
    if lo is not None:
        y = np.maximum(y, np.asarray(lo).reshape(()))
    if hi is not None:
        y = np.minimum(y, np.asarray(hi).reshape(()))
    return y.astype(x.dtype, copy=y is x)


def _cast_infer(x: TensorType, *, to: DType, saturate: int = 1,
                round_mode: str = "up") -> TensorType:
    if round_mode not in ROUND_MODES:
        raise OpError(f"Cast: round_mode {round_mode!r} is not one of {', '.join(ROUND_MODES)}")
    return x.with_dtype(to)


@register_op("Cast", attrs={"to": Attr.dtype(), "saturate": Attr.int(1),
                            "round_mode": Attr.str("up")}, infer=_cast_infer, pattern=E)
def cast(x: np.ndarray, *, to: DType, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """Convert to element type ``to`` as numpy's ``astype`` does, except that floats convert to
    integers by saturating: truncated toward zero, values beyond the target's range (``±inf``
    included) clamp to its minimum/maximum and NaN gives 0 (ONNX leaves these undefined; see
    :mod:`tessera.ir.cast`). To bool is ``x != 0``; integers to narrower integers wrap. The
    low-precision types convert as ONNX says (``saturate``: float8 targets; ``round_mode``:
    float8 e8m0 targets; see :mod:`tessera.ir.cast`)."""
    return convert(x, to, bool(saturate), round_mode)


# -- predicates and logic -----------------------------------------------------------------------

@register_op("IsNaN", infer=predicate_infer("IsNaN", FLOATS), pattern=E)
def is_nan(x: np.ndarray) -> np.ndarray:
    return np.isnan(x)


@register_op("IsInf", attrs={"detect_negative": Attr.int(1), "detect_positive": Attr.int(1)},
             infer=predicate_infer("IsInf", FLOATS), pattern=E)
def is_inf(x: np.ndarray, *, detect_negative: int, detect_positive: int) -> np.ndarray:
    out = np.zeros(x.shape, bool)
    if detect_negative:
        out |= np.isneginf(x)
    if detect_positive:
        out |= np.isposinf(x)
    return out


@register_op("Not", infer=unary_infer("Not", BOOL), pattern=E)
def not_(x: np.ndarray) -> np.ndarray:
    return np.logical_not(x)


@register_op("BitwiseNot", infer=unary_infer("BitwiseNot", INTS), pattern=E)
def bitwise_not(x: np.ndarray) -> np.ndarray:
    return np.invert(x)
