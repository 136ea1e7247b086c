"""Symbolic shape rules: output shapes of ops whose inputs have symbolic dimensions.

Each rule takes the op's input types and attributes (as its ``infer`` does) and returns the
output shapes, with size expressions where the inputs or attributes have them
(``OpSchema.symbolic_infer``). The op's static ``infer`` still gives the dtypes and checks
the rule at a probe size (:mod:`tessera.ir.probe`); ops without a rule are probed.

The rules cover a transformer encoder's op set and the other common shape-preserving ops:
elementwise (unary and broadcasting), ``Where``, ``Cast``, ``Gather``, ``MatMul``,
``Reshape`` (``0`` and ``-1`` resolved symbolically), ``Transpose``, ``Unsqueeze``,
``Squeeze``, ``Flatten``, ``Slice`` (starts and ends may be expressions), ``Concat``,
``Expand``, the normalizations, ``Softmax``, the reductions, and the size ops of
:mod:`tessera.ops.shape`. Dimensions are compared structurally (or proved equal), never with
``==`` on expressions; two that may differ where an op needs them equal raise an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tessera.errors import OpError
from tessera.ir.schema import get_schema, has_op
from tessera.ir.symbolic import (
    ShapeDim,
    broadcast_dims,
    dim_algebra,
    dim_str,
    dims_equal,
    format_shape,
    is_dim_expr,
    normalize_dim,
    prod_dims,
)
from tessera.ir.types import TensorType

# The families whose ops get rules here, registered before the rules attach to them.
from tessera.ops import (  # noqa: F401
    binary,
    bitcast,
    elementwise,
    linalg,
    nn,
    tensor,
)
from tessera.ops import conv as _conv  # noqa: F401
from tessera.ops import layout as _layout  # noqa: F401
from tessera.ops import norm as _norm  # noqa: F401
from tessera.ops import pool as _pool  # noqa: F401
from tessera.ops import reduce as _reduce
from tessera.ops import shape as _shape
from tessera.ops.registry import normalize_axis

Shape = tuple[ShapeDim, ...]
Rule = Callable[..., Any]

#: Ops whose first output has the first input's shape (their other outputs, if any, too).
SAME_SHAPE = (
    "Identity", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Neg",
    "Abs", "Sign", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
    "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "Elu", "Selu",
    "LeakyRelu", "HardSigmoid", "HardSwish", "Gelu", "Mish", "Celu", "ThresholdedRelu",
    "Shrink", "Swish", "IsNaN", "IsInf", "Not", "BitwiseNot", "Cast", "Softmax", "LogSoftmax",
    "Hardmax", "Clip", "Dropout", "CumSum", "CumProd", "BitCast",
)

#: Ops whose output is the broadcast of their inputs.
BROADCAST = (
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitShift",
    "Max", "Min", "Sum", "Mean", "Where", "PRelu",
)


def register_symbolic(*ops: str) -> Callable[[Rule], Rule]:
    """Make the decorated function the symbolic shape rule of ``ops`` (those registered)."""
    def deco(fn: Rule) -> Rule:
        for op in ops:
            if has_op(op):
                get_schema(op).symbolic_infer = fn
        return fn
    return deco


def _equal_or_fail(a: ShapeDim, b: ShapeDim, what: str) -> None:
    if dims_equal(a, b):
        return
    if isinstance(a, int) and isinstance(b, int):
        raise OpError(f"{what}: {a} and {b} differ")
    alg = dim_algebra()
    if not alg.prove(alg.eq(a, b)):
        raise OpError(f"{what}: {dim_str(a)} and {dim_str(b)} may differ")


@register_symbolic(*SAME_SHAPE)
def same_shape(x: TensorType, *rest: Any, **attrs: Any) -> list[Shape]:
    return [x.shape, x.shape]


@register_symbolic(*BROADCAST)
def broadcast(*types: TensorType | None, **attrs: Any) -> list[Shape]:
    return [broadcast_dims(*(t.shape for t in types if t is not None))]


@register_symbolic("LayerNormalization", "RMSNormalization")
def layer_norm(x: TensorType, *rest: Any, axis: int, **attrs: Any) -> list[Shape]:
    a = normalize_axis(axis, x.ndim)
    for t in rest:
        if isinstance(t, TensorType):
            broadcast_dims(t.shape, x.shape[a:])  # the scale and bias fit the normalized axes
    stat = (*x.shape[:a], *([1] * (x.ndim - a)))
    return [x.shape, stat, stat]


@register_symbolic("MatMul")
def matmul(a: TensorType, b: TensorType) -> list[Shape]:
    sa, sb = list(a.shape), list(b.shape)
    if not sa or not sb:
        raise OpError("MatMul: operands must have rank 1 or more")
    one_a, one_b = len(sa) == 1, len(sb) == 1
    if one_a:
        sa = [1, *sa]
    if one_b:
        sb = [*sb, 1]
    _equal_or_fail(sa[-1], sb[-2], f"MatMul: inner dimensions of {a} and {b}")
    out = [*broadcast_dims(sa[:-2], sb[:-2]), sa[-2], sb[-1]]
    if one_a:
        del out[-2]
    if one_b:
        del out[-1]
    return [tuple(out)]


@register_symbolic("Gather")
def gather(data: TensorType, indices: TensorType, *, axis: int) -> list[Shape]:
    a = normalize_axis(axis, data.ndim)
    return [(*data.shape[:a], *indices.shape, *data.shape[a + 1:])]


def reshape_shape(in_shape: Sequence[ShapeDim], shape: Sequence[Any], allowzero: int) -> Shape:
    """ONNX Reshape's output shape with symbolic dimensions: ``0`` copies the input's
    dimension (unless ``allowzero``), one ``-1`` is the quotient of the element counts."""
    out: list[Any] = []
    unknown = None
    for i, d in enumerate(shape):
        if is_dim_expr(d):
            out.append(normalize_dim(d))
        elif d == -1:
            if unknown is not None:
                raise OpError(f"Reshape: shape {format_shape(shape)} has more than one -1")
            unknown = i
            out.append(None)
        elif d == 0 and not allowzero:
            if i >= len(in_shape):
                raise OpError(f"Reshape: 0 at position {i} copies a dimension the input "
                              f"{format_shape(in_shape)} does not have")
            out.append(in_shape[i])
        elif d < 0:
            raise OpError(f"Reshape: shape {format_shape(shape)} has a negative dimension {d}")
        else:
            out.append(int(d))
    total = prod_dims(in_shape)
    known = prod_dims([d for d in out if d is not None])
    if unknown is not None:
        if isinstance(total, int) and isinstance(known, int):
            if known == 0 or total % known:
                raise OpError(f"Reshape: cannot reshape {format_shape(in_shape)} to "
                              f"{format_shape(shape)}")
            out[unknown] = total // known
        else:
            out[unknown] = normalize_dim(total // known)
    else:
        _equal_or_fail(total, known, f"Reshape of {format_shape(in_shape)} to "
                                     f"{format_shape(out)}: element counts")
    return tuple(out)


@register_symbolic("Reshape")
def reshape(x: TensorType, *, shape: list[Any], allowzero: int) -> list[Shape]:
    return [reshape_shape(x.shape, shape, allowzero)]


@register_symbolic("Transpose")
def transpose(x: TensorType, *, perm: list[int] | None) -> list[Shape]:
    p = list(range(x.ndim))[::-1] if perm is None else [normalize_axis(a, x.ndim) for a in perm]
    if sorted(p) != list(range(x.ndim)):
        raise OpError(f"Transpose: perm {perm} is not a permutation of rank {x.ndim}")
    return [tuple(x.shape[a] for a in p)]


@register_symbolic("Unsqueeze")
def unsqueeze(x: TensorType, *, axes: list[int]) -> list[Shape]:
    rank = x.ndim + len(axes)
    norm = sorted(normalize_axis(a, rank) for a in axes)
    dims: list[ShapeDim] = list(x.shape)
    for a in norm:
        dims.insert(a, 1)
    return [tuple(dims)]


@register_symbolic("Squeeze")
def squeeze(x: TensorType, *, axes: list[int] | None) -> list[Shape]:
    if axes is None:
        if any(is_dim_expr(d) for d in x.shape):
            raise OpError(f"Squeeze without axes on {x}: a symbolic dimension may be 1 or not")
        keep = [d for d in x.shape if d != 1]
        return [tuple(keep)]
    norm = {normalize_axis(a, x.ndim) for a in axes}
    for a in norm:
        d = x.shape[a]
        if is_dim_expr(d) or d != 1:
            raise OpError(f"Squeeze: dimension {a} of {x} is {dim_str(d)}, not 1")
    return [tuple(d for i, d in enumerate(x.shape) if i not in norm)]


@register_symbolic("Flatten")
def flatten(x: TensorType, *, axis: int) -> list[Shape]:
    r = x.ndim
    if not -r <= axis <= r:
        raise OpError(f"Flatten: axis {axis} out of range for rank {r}")
    a = axis + r if axis < 0 else axis
    return [(prod_dims(x.shape[:a]), prod_dims(x.shape[a:]))]


@register_symbolic("Concat")
def concat(*xs: TensorType, axis: int) -> list[Shape]:
    first = xs[0]
    a = normalize_axis(axis, first.ndim)
    total: Any = 0
    for x in xs:
        if x.ndim != first.ndim:
            raise OpError(f"Concat: inputs {first} and {x} differ in rank")
        for i in range(first.ndim):
            if i != a:
                _equal_or_fail(first.shape[i], x.shape[i],
                               f"Concat: dimension {i} of {first} and {x}")
        total = total + x.shape[a]
    shape = list(first.shape)
    shape[a] = normalize_dim(total)
    return [tuple(shape)]


@register_symbolic("Expand")
def expand(x: TensorType, *, shape: list[Any]) -> list[Shape]:
    return [broadcast_dims(x.shape, [normalize_dim(d) for d in shape])]


_HUGE = 1 << 31


def _index(v: Any, dim: ShapeDim) -> Any:
    """A slice bound counted from the end when negative (an expression: a select)."""
    if isinstance(v, int):
        return normalize_dim(v + dim) if v < 0 else v
    return dim_algebra().select(v < 0, v + dim, v)


def _clamp(v: Any, lo: Any, hi: Any) -> Any:
    alg = dim_algebra()
    return alg.minimum(alg.maximum(v, lo), hi)


def slice_dim(dim: ShapeDim, start: Any, end: Any, step: int) -> ShapeDim:
    """The length of ONNX Slice ``start:end:step`` of a dimension (clamped like ONNX)."""
    if step == 0:
        raise OpError("Slice: step cannot be 0")
    if isinstance(dim, int) and isinstance(start, int) and isinstance(end, int):
        s = start + dim if start < 0 else start
        e = end + dim if end < 0 else end
        if step > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            return max((e - s + step - 1) // step, 0)
        s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        return max((s - e - step - 1) // -step, 0)
    lo, hi = (0, dim) if step > 0 else (-1, normalize_dim(dim - 1))

    def bound(v: Any) -> Any:
        if isinstance(v, int) and v >= _HUGE:
            return hi
        if isinstance(v, int) and v <= -_HUGE:
            return lo
        return _clamp(_index(v, dim), lo, hi)

    first, last = bound(start), bound(end)
    span = last - first if step > 0 else first - last
    size = step if step > 0 else -step
    return dim_algebra().maximum(normalize_dim((span + (size - 1)) // size), 0)


@register_symbolic("Slice")
def slice_(x: TensorType, *, starts: list[Any], ends: list[Any], axes: list[int] | None,
           steps: list[int] | None) -> list[Shape]:
    n = len(starts)
    axes = list(range(n)) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
    steps = [1] * n if steps is None else list(steps)
    if len(ends) != n or len(axes) != n or len(steps) != n:
        raise OpError("Slice: starts, ends, axes and steps differ in length")
    if any(is_dim_expr(s) for s in steps):
        raise OpError("Slice: steps must be ints")
    dims = list(x.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        dims[axis] = slice_dim(x.shape[axis], start, end, int(step))
    return [tuple(dims)]


@register_symbolic("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                   "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
def reduction(x: TensorType, *, axes: list[int] | None, keepdims: int) -> list[Shape]:
    axes_t = _reduce.reduce_axes(x.ndim, axes)
    return [_reduce.reduced_shape(x.shape, axes_t, keepdims)]


@register_symbolic("Shape")
def shape_(x: TensorType, *, start: int, end: int | None) -> list[Shape]:
    return [_shape._shape_infer(x, start=start, end=end).shape]


@register_symbolic("ShapeValues")
def shape_values(*, values: list[Any], shape: list[int], dtype: Any) -> list[Shape]:
    return [tuple(shape)]


@register_symbolic("Range")
def range_(*, start: Any, limit: Any, delta: Any, dtype: Any) -> list[Shape]:
    return [(_shape._range_length(start, limit, delta),)]


@register_symbolic("ConstantOfShape")
def constant_of_shape(*, shape: list[Any], value: Any) -> list[Shape]:
    return [tuple(normalize_dim(d) for d in shape)]


# -- windows (convolutions, pooling) over run-time spatial sizes --------------------------------

def window_dims(spatial: Sequence[ShapeDim], kernel: Sequence[int], strides: Sequence[int] | None,
                pads: Sequence[int] | None, dilations: Sequence[int] | None,
                op: str) -> list[ShapeDim]:
    """The output sizes of a window op (a convolution, or a pool without ``ceil_mode``):
    ``(d + pad_begin + pad_end - span) // stride + 1`` per spatial size, an expression where
    the size is one."""
    n = len(spatial)
    s = list(strides) if strides else [1] * n
    p = list(pads) if pads else [0] * (2 * n)
    dl = list(dilations) if dilations else [1] * n
    if len(kernel) != n or len(s) != n or len(p) != 2 * n or len(dl) != n:
        raise OpError(f"{op}: kernel {list(kernel)}, strides {s}, pads {p} and dilations {dl} "
                      f"do not fit {n} spatial dims")
    out: list[ShapeDim] = []
    for i, d in enumerate(spatial):
        rest = p[i] + p[i + n] - (kernel[i] - 1) * dl[i] - 1
        if isinstance(d, int):
            size = (d + rest) // s[i] + 1
            if size <= 0:
                raise OpError(f"{op}: spatial size {d} gives an empty output")
            out.append(size)
        else:
            out.append(normalize_dim((d + rest) // s[i] + 1 if s[i] > 1 else d + (rest + 1)))
    return out


@register_symbolic("Conv")
def conv(x: TensorType, w: TensorType, b: TensorType | None = None, *,
         kernel_shape: list[int] | None, strides: list[int] | None, pads: list[int] | None,
         dilations: list[int] | None, group: int, **attrs: Any) -> list[Shape]:
    kernel = [int(k) for k in w.shape[2:]]
    return [(x.shape[0], w.shape[0], *window_dims(x.shape[2:], kernel, strides, pads,
                                                  dilations, "Conv"))]


@register_symbolic("ConvNCHWc")
def conv_nchwc(x: TensorType, w: TensorType, b: TensorType | None = None, *,
               strides: list[int] | None, pads: list[int] | None,
               dilations: list[int] | None, **attrs: Any) -> list[Shape]:
    kernel = [int(k) for k in w.shape[2:4]]
    oh, ow = window_dims(x.shape[2:4], kernel, strides, pads, dilations, "ConvNCHWc")
    return [(x.shape[0], w.shape[0], oh, ow, w.shape[5])]


def _pool_dims(x: TensorType, kernel_shape: list[int], strides: list[int] | None,
               pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
               op: str, spatial: int) -> list[ShapeDim]:
    dims = x.shape[2:2 + spatial]
    if all(isinstance(d, int) for d in dims):  # static windows (a run-time batch only)
        n = len(dims)
        return list(_pool.pool_output_shape(
            [int(d) for d in dims], kernel_shape, list(strides or [1] * n),
            list(pads or [0] * (2 * n)), list(dilations or [1] * n), ceil_mode, op))
    if ceil_mode:
        raise OpError(f"{op}: ceil_mode over run-time spatial sizes is not supported")
    return window_dims(dims, kernel_shape, strides, pads, dilations, op)


@register_symbolic("MaxPool", "AveragePool", "LpPool")
def pool(x: TensorType, *, kernel_shape: list[int], strides: list[int] | None,
         pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
         **attrs: Any) -> list[Shape]:
    out = (*x.shape[:2], *_pool_dims(x, kernel_shape, strides, pads, dilations, ceil_mode,
                                     "Pool", x.ndim - 2))
    return [out, out]


@register_symbolic("PoolNCHWc")
def pool_nchwc(x: TensorType, *, global_pool: int, kernel_shape: list[int] | None,
               strides: list[int] | None, pads: list[int] | None,
               dilations: list[int] | None, ceil_mode: int, **attrs: Any) -> list[Shape]:
    if global_pool:
        return [(x.shape[0], x.shape[1], 1, 1, x.shape[4])]
    if kernel_shape is None:
        raise OpError("PoolNCHWc: kernel_shape is required unless global_pool is set")
    oh, ow = _pool_dims(x, kernel_shape, strides, pads, dilations, ceil_mode, "PoolNCHWc", 2)
    return [(x.shape[0], x.shape[1], oh, ow, x.shape[4])]


@register_symbolic("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(x: TensorType, **attrs: Any) -> list[Shape]:
    return [(*x.shape[:2], *([1] * (x.ndim - 2)))]


@register_symbolic("LayoutTransform")
def layout_transform(x: TensorType, *, src_layout: str, dst_layout: str,
                     channels: int) -> list[Shape]:
    """Only the channels are blocked: the static rule, which keeps the other dimensions."""
    y = _layout._layout_transform_infer(x, src_layout=src_layout, dst_layout=dst_layout,
                                        channels=channels)
    return [y.shape]
