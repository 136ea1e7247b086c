"""ONNX converters: tensor family (shapes, data movement, indexing, padding, resizing).

Operands that fix an output shape (Reshape's shape, Slice's starts/ends/axes/steps, Pad's pads,
Resize's scales/sizes, ...) become IR attributes through ``ctx.const_ints``; the opset versions of
an op all map onto its one IR form. Ops answered by static shapes alone (Shape, Size, EyeLike,
ConstantOfShape, Range on constants) become constants.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import numpy_helper

from tessera.errors import NeedsConstantError
from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.converters.dynamic_slice import dynamic_slice_of
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.frontend.onnx.registry import converter, simple
from tessera.ir.graph import Value, contents_of
from tessera.ir.symbolic import dim_str, dims_equal, is_dim_expr
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import normalize_axis

Inputs = list[Value | None]
Attrs = dict[str, Any]


def _input(inputs: Inputs, i: int) -> Value | None:
    return inputs[i] if i < len(inputs) else None


def _out_name(ctx: ConvertContext, i: int = 0) -> str:
    names = ctx.output_names
    return names[i] if i < len(names) and names[i] else (ctx.op_type.lower() or "const")


def const_operands(ctx: ConvertContext, *operands: tuple[Value | None, str]
                   ) -> list[np.ndarray | None]:
    """The data of several operands that must be compile-time constants (None for omitted ones).

    Unlike one ``ctx.const_value`` call after another, names every graph input that would have
    to be frozen in one :class:`NeedsConstantError`.
    """
    found: list[np.ndarray | None] = []
    missing: list[str] = []
    deps: set[str] = set()
    for value, what in operands:
        try:
            found.append(ctx.const_value(value, what))
        except NeedsConstantError as e:
            found.append(None)
            missing.append(what)
            deps.update(e.inputs)
    if missing:
        verb = "must be a constant" if len(missing) == 1 else "must be constants"
        raise NeedsConstantError(
            f"node {ctx.node_name!r} ({ctx.op_type}): {', '.join(missing)} {verb} known at "
            f"compile time, but {'it depends' if len(missing) == 1 else 'they depend'} on graph "
            f"input(s) {', '.join(sorted(deps))}; bind them with freeze_inputs={{name: array}}",
            sorted(deps))
    return found


def _ints(data: np.ndarray | None) -> list[int] | None:
    return None if data is None else [int(v) for v in np.asarray(data).reshape(-1)]


def _const_data(ctx: ConvertContext, value: Value, what: str) -> np.ndarray:
    """The data of an operand of an op whose output shape depends on input values."""
    if value.data is not None:
        return value.data
    try:
        ctx.const_value(value, what)
    except NeedsConstantError as e:
        raise NeedsConstantError(
            f"node {ctx.node_name!r} ({ctx.op_type}): the output shape depends on input values; "
            f"not supported with static shapes unless its {what} is a compile-time constant "
            f"(it depends on graph input(s) {', '.join(e.inputs) or '?'}; bind them with "
            f"freeze_inputs={{name: array}})", e.inputs) from None
    raise AssertionError("unreachable")


# -- constants and shapes ------------------------------------------------------------------------

def _sparse_to_dense(sparse: Any) -> np.ndarray:
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(int(d) for d in sparse.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 1:  # linearized indices
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


@converter("Constant", since=1)
def convert_constant(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    if "value" in attrs:
        array = np.asarray(attrs["value"])
    elif "value_float" in attrs:
        array = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        array = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        array = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        array = np.array(attrs["value_ints"], dtype=np.int64)
    elif "sparse_value" in attrs:
        array = _sparse_to_dense(attrs["sparse_value"])
    elif "value_string" in attrs or "value_strings" in attrs:
        raise ctx.error("string constants are not supported")
    else:
        raise ctx.error("Constant has no value attribute")
    return ctx.const(array, name=_out_name(ctx))


def _size_values(ctx: ConvertContext, values: list[Any], shape: list[int]) -> Value:
    """Ints as an int64 constant; with size expressions among them, a ``ShapeValues`` node
    (a graph with symbolic shapes)."""
    if not any(is_dim_expr(v) for v in values):
        return ctx.const(np.array(values, dtype=np.int64).reshape(shape), name=_out_name(ctx))
    return ctx.op("ShapeValues", values=values, shape=shape, dtype=DType.int64)


@converter("Shape", since=1)
def convert_shape(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    dims = list(x.type.shape[attrs.get("start", 0):attrs.get("end")])
    return _size_values(ctx, dims, [len(dims)])


@converter("Size", since=1)
def convert_size(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    return _size_values(ctx, [x.type.size], [])


@converter("ConstantOfShape", since=9)
def convert_constant_of_shape(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    shape = ctx.const_ints(inputs[0], "shape") or []
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        raise ctx.error(f"value must hold one element, got shape {list(value.shape)}")
    if any(is_dim_expr(d) for d in shape):  # sizes known at run time: a node
        return ctx.op("ConstantOfShape", shape=shape, value=value.reshape(-1))
    if any(d < 0 for d in shape):
        raise ctx.error(f"shape {shape} has a negative dimension")
    ctx.check_size(TensorType(tuple(shape), DType.from_numpy(value.dtype)), "the result")
    return ctx.const(np.full(shape, value.reshape(-1)[0], dtype=value.dtype), name=_out_name(ctx))


def _symbolic_scalars(ctx: ConvertContext, operands: Inputs) -> list[Any] | None:
    """Each operand's one element where some is a size expression (a graph with symbolic
    shapes), else None."""
    found = []
    for v in operands:
        contents = ctx.const_ints(v) if v is not None and v.data is None and \
            v.type.dtype.is_int and contents_of(v) is not None else None
        if contents is None:
            if v is None or v.data is None or np.asarray(v.data).size != 1:
                return None
            contents = [np.asarray(v.data).reshape(-1)[0].item()]
        if len(contents) != 1:
            return None
        found.append(contents[0])
    return found if any(is_dim_expr(x) for x in found) else None


@converter("Range", since=11)
def convert_range(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    symbolic = _symbolic_scalars(ctx, inputs[:3])
    if symbolic is not None:  # a bound depends on the sizes: a node
        assert inputs[0] is not None
        if not inputs[0].type.dtype.is_int or not all(
                isinstance(x, int) or is_dim_expr(x) for x in symbolic):
            raise ctx.error("a Range whose bounds depend on the sizes must be on integers")
        start, limit, delta = symbolic
        return ctx.op("Range", start=start, limit=limit, delta=delta,
                      dtype=inputs[0].type.dtype)
    start, limit, delta = const_operands(ctx, (inputs[0], "start"), (inputs[1], "limit"),
                                         (inputs[2], "delta"))
    assert start is not None and limit is not None and delta is not None
    dtype = start.dtype
    if delta.item() == 0:
        raise ctx.error("delta is 0")
    # like the onnx reference: floats in float64, float16 from opset 27 in its stash_type
    compute: Any = np.float64 if dtype.kind == "f" else np.int64
    if dtype == np.float16 and ctx.opset >= 27 and attrs.get("stash_type", 1) == 1:
        compute = np.float32
    span = (limit.astype(compute).item() - start.astype(compute).item()) \
        / delta.astype(compute).item()
    if not math.isfinite(span):
        raise ctx.error(f"start {start.item()}, limit {limit.item()} and delta {delta.item()} "
                        "give no finite length")
    count = math.ceil(span)
    ctx.check_size(TensorType((max(count, 0),), DType.from_numpy(dtype)), "the result")
    result = np.arange(start.astype(compute).item(), limit.astype(compute).item(),
                       delta.astype(compute).item(), dtype=compute).astype(dtype)
    return ctx.const(result, name=_out_name(ctx))


@converter("EyeLike", since=9)
def convert_eye_like(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    shape = x.type.shape
    if len(shape) not in (1, 2):
        raise ctx.error(f"input must be 2-D, got shape {list(shape)}")
    rows, cols = (shape[0], shape[0]) if len(shape) == 1 else shape
    dtype = onnx_dtype(attrs["dtype"], "dtype") if "dtype" in attrs else x.type.dtype
    eye = np.eye(rows, cols, k=attrs.get("k", 0), dtype=dtype.numpy)
    return ctx.const(eye, name=_out_name(ctx))


# -- reshaping -----------------------------------------------------------------------------------

@converter("Reshape", since=5)
def convert_reshape(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    shape = ctx.const_ints(inputs[1], "shape")
    return ctx.op("Reshape", inputs[0], shape=shape, allowzero=attrs.get("allowzero", 0))


simple("Flatten", since=1)
simple("Concat", since=4)


@converter("Transpose", since=1)
def convert_transpose(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    perm = attrs.get("perm")
    perm = list(range(x.type.ndim))[::-1] if perm is None else [int(p) for p in perm]
    return ctx.op("Transpose", x, perm=perm)


def _axes_list(ctx: ConvertContext, inputs: Inputs, attrs: Attrs, since: int) -> list[int] | None:
    """Axes from the attribute (opset < ``since``) or the second input."""
    if ctx.opset >= since:
        return ctx.const_ints(_input(inputs, 1), "axes")
    axes = attrs.get("axes")
    return None if axes is None else [int(a) for a in axes]


@converter("Squeeze", since=1)
def convert_squeeze(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    axes = _axes_list(ctx, inputs, attrs, 13)
    x = inputs[0]
    assert x is not None
    if axes is None:
        axes = [i for i, d in enumerate(x.type.shape) if d == 1]
    return ctx.op("Squeeze", x, axes=sorted(normalize_axis(a, x.type.ndim) for a in axes))


@converter("Unsqueeze", since=1)
def convert_unsqueeze(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    axes = _axes_list(ctx, inputs, attrs, 13)
    x = inputs[0]
    assert x is not None
    if axes is None:
        raise ctx.error("axes are required")
    rank = x.type.ndim + len(axes)
    return ctx.op("Unsqueeze", x, axes=sorted(normalize_axis(a, rank) for a in axes))


# -- Split and Slice -----------------------------------------------------------------------------

@converter("Split", since=1)
def convert_split(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    axis = normalize_axis(attrs.get("axis", 0), x.type.ndim)
    dim = x.type.shape[axis]
    if ctx.opset >= 13:
        sizes = ctx.const_ints(_input(inputs, 1), "split")
    else:
        sizes = attrs.get("split")
    if sizes:
        sizes = [int(s) for s in sizes]
        if len(sizes) != ctx.num_outputs:
            raise ctx.error(f"split {sizes} has {len(sizes)} sizes for {ctx.num_outputs} outputs")
    elif "num_outputs" in attrs:
        n = int(attrs["num_outputs"])
        chunk = -(-dim // n)
        sizes = [min(chunk, max(dim - chunk * i, 0)) for i in range(n)]
    else:
        n = ctx.num_outputs
        if dim % n:
            raise ctx.error(f"dimension {axis} of size {dim} does not split evenly into {n}")
        sizes = [dim // n] * n
    return ctx.node("Split", [x], {"axis": axis, "split": sizes}, num_outputs=len(sizes))


def _slice(ctx: ConvertContext, x: Value, starts: list[int], ends: list[int],
           axes: list[int] | None, steps: list[int] | None) -> Value:
    rank = x.type.ndim
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if any(s == 0 for s in steps):
        raise ctx.error(f"steps {steps} contain 0")
    return ctx.op("Slice", x, starts=starts, ends=ends, axes=axes, steps=steps)


@converter("Slice", since=1)
def convert_slice_1(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    return _slice(ctx, x, list(attrs["starts"]), list(attrs["ends"]), attrs.get("axes"), None)


@converter("Slice", since=10)
def convert_slice_10(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    operands = [inputs[1], inputs[2], _input(inputs, 3), _input(inputs, 4)]
    if any(v is not None and v.data is None and contents_of(v) is not None for v in operands):
        # size expressions among them (a graph with symbolic shapes)
        starts, ends, axes, steps = (ctx.const_ints(v, what) if v is not None else None
                                     for v, what in zip(operands, ("starts", "ends", "axes",
                                                                   "steps")))
        if any(is_dim_expr(a) for a in (axes or []) + (steps or [])):
            raise ctx.error("axes and steps must be constants")
        return _slice(ctx, x, starts or [], ends or [], axes, steps)
    try:
        data = const_operands(ctx, (inputs[1], "starts"), (inputs[2], "ends"),
                              (_input(inputs, 3), "axes"), (_input(inputs, 4), "steps"))
    except NeedsConstantError:
        # run-time starts, but ends - starts constant (x[i:i+k]): a static-size DynamicSlice
        dynamic = dynamic_slice_of(ctx, x, inputs[1:])
        if dynamic is None:
            raise
        return dynamic
    starts, ends, axes, steps = (_ints(d) for d in data)
    return _slice(ctx, x, starts or [], ends or [], axes, steps)


# -- indexing ------------------------------------------------------------------------------------

@converter("Gather", since=1)
def convert_gather(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    x, index = inputs[0], inputs[1] if len(inputs) > 1 else None
    if x is not None and index is not None and index.data is not None and x.type.ndim:
        axis = normalize_axis(int(attrs.get("axis", 0)), x.type.ndim, ctx.node_name)
        dim = x.type.shape[axis]
        idx = np.asarray(index.data)
        if isinstance(dim, int) and idx.dtype.kind in "iu" and idx.size and (
                idx.min() < -dim or idx.max() >= dim):
            bad = idx[(idx < -dim) | (idx >= dim)].reshape(-1)[0]
            raise ctx.error(f"constant index {int(bad)} is out of range for axis {axis} of "
                            f"size {dim} (indices must be in [{-dim}, {dim}))")
    return ctx.node("Gather", inputs, attrs)


simple("GatherElements", since=11)
simple("GatherND", since=11)
simple("ScatterElements", since=11)
simple("Scatter", since=9, ir_op="ScatterElements")
simple("ScatterND", since=11)
simple("TensorScatter", since=24)  # the IR op is defined in tessera.ops.attention
simple("ReverseSequence", since=10)


@converter("Compress", since=9)
def convert_compress(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x, cond_v = inputs[0], inputs[1]
    assert x is not None and cond_v is not None
    cond = _const_data(ctx, cond_v, "condition").reshape(-1).astype(bool)
    axis = attrs.get("axis")
    if axis is None:
        x = ctx.op("Reshape", x, shape=[-1])
        axis = 0
    axis = normalize_axis(axis, x.type.ndim)
    if cond.size > x.type.shape[axis]:
        raise ctx.error(f"condition has {cond.size} entries for an axis of size "
                        f"{x.type.shape[axis]}")
    index = ctx.const(np.nonzero(cond)[0].astype(np.int64), name="compress_index")
    return ctx.op("Gather", x, index, axis=axis)


@converter("NonZero", since=9)
def convert_non_zero(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    _const_data(ctx, x, "input")
    return ctx.op("NonZero", x)


@converter("Unique", since=11)
def convert_unique(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    _const_data(ctx, x, "input")
    return ctx.node("Unique", [x], {"axis": attrs.get("axis"), "sorted": attrs.get("sorted", 1)})


# -- Expand, Tile, Pad, Trilu, OneHot, CenterCropPad ---------------------------------------------

@converter("Expand", since=8)
def convert_expand(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    return ctx.op("Expand", inputs[0], shape=ctx.const_ints(inputs[1], "shape"))


@converter("Tile", since=6)
def convert_tile(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    return ctx.op("Tile", inputs[0], repeats=ctx.const_ints(inputs[1], "repeats"))


def _full_pads(ctx: ConvertContext, rank: int, pads: list[int], axes: list[int] | None
               ) -> list[int]:
    if axes is None:
        if len(pads) != 2 * rank:
            raise ctx.error(f"pads {pads} must have 2 * rank = {2 * rank} numbers")
        return pads
    n = len(axes)
    if len(pads) != 2 * n:
        raise ctx.error(f"pads {pads} must have 2 * len(axes) = {2 * n} numbers")
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        a = normalize_axis(a, rank)
        full[a], full[a + rank] = pads[i], pads[i + n]
    return full


@converter("Pad", since=2)
def convert_pad_2(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    mode = attrs.get("mode", "constant")
    pads = _full_pads(ctx, x.type.ndim, [int(p) for p in attrs["pads"]], None)
    value = float(attrs.get("value", 0.0))
    fill = ctx.const(np.array(value, dtype=x.type.dtype.numpy), name="pad_value") \
        if mode == "constant" and value != 0 else None
    return ctx.op("Pad", x, fill, pads=pads, mode=mode)


@converter("Pad", since=11)
def convert_pad_11(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    mode = attrs.get("mode", "constant")
    pads, axes = (_ints(d) for d in const_operands(ctx, (inputs[1], "pads"),
                                                    (_input(inputs, 3), "axes")))
    full = _full_pads(ctx, x.type.ndim, pads or [], axes)
    fill = _input(inputs, 2) if mode == "constant" else None
    if fill is not None and fill.type.size == 0:
        fill = None
    return ctx.op("Pad", x, fill, pads=full, mode=mode)


@converter("Trilu", since=14)
def convert_trilu(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    k = ctx.const_ints(_input(inputs, 1), "k")
    return ctx.op("Trilu", inputs[0], upper=attrs.get("upper", 1), k=k[0] if k else 0)


@converter("OneHot", since=9)
def convert_one_hot(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    depth = ctx.const_value(inputs[1], "depth")
    assert depth is not None
    if depth.size != 1:
        raise ctx.error(f"depth must hold one number, got shape {list(depth.shape)}")
    return ctx.op("OneHot", inputs[0], inputs[2], depth=int(depth.reshape(-1)[0]),
                  axis=attrs.get("axis", -1))


@converter("CenterCropPad", since=18)
def convert_center_crop_pad(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    shape = ctx.const_ints(inputs[1], "shape") or []
    rank = x.type.ndim
    axes = [normalize_axis(a, rank) for a in attrs.get("axes", range(rank))]
    if len(axes) != len(shape):
        raise ctx.error(f"shape {shape} has {len(shape)} sizes for axes {axes}")
    starts, ends, crop_axes = [], [], []
    pads = [0] * (2 * rank)
    for a, size in zip(axes, shape):
        dim = x.type.shape[a]
        if size < dim:
            begin = (dim - size) // 2
            starts.append(begin)
            ends.append(begin + size)
            crop_axes.append(a)
        elif size > dim:
            extra = size - dim
            pads[a], pads[a + rank] = extra // 2, extra - extra // 2
    out = x
    if crop_axes:
        out = ctx.op("Slice", out, starts=starts, ends=ends, axes=crop_axes,
                     steps=[1] * len(crop_axes))
    if any(pads):
        out = ctx.op("Pad", out, None, pads=pads, mode="constant")
    if out is x:
        out = ctx.op("Identity", x)
    return out


# -- Resize and Upsample -------------------------------------------------------------------------

def _present(value: Value | None) -> Value | None:
    """An optional operand, None when omitted or empty (ONNX passes empty tensors for those)."""
    return None if value is None or value.type.size == 0 else value


def _floats(data: np.ndarray | None) -> list[float] | None:
    return None if data is None else [float(v) for v in np.asarray(data).reshape(-1)]


def _resize(ctx: ConvertContext, x: Value, *, mode: str, scales: list[float] | None,
            sizes: list[int] | None, roi: list[float] | None, attrs: Attrs,
            coordinate_transformation_mode: str, nearest_mode: str) -> Value:
    """Build the IR Resize from ONNX operands: full-rank ``scales`` and ``sizes``."""
    in_shape = x.type.shape
    rank = len(in_shape)
    axes = [normalize_axis(a, rank) for a in attrs.get("axes", range(rank))]
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if mode == "bilinear":
        mode = "linear"
    if sizes is not None:
        if len(sizes) != len(axes):
            raise ctx.error(f"sizes {sizes} must have one entry per resized axis {axes}")
        out = list(in_shape)
        for a, s in zip(axes, sizes):
            out[a] = s
        full_scales = [1.0 if is_dim_expr(out[i]) or is_dim_expr(in_shape[i])
                       else out[i] / in_shape[i] if in_shape[i] else 1.0 for i in range(rank)]
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            if policy not in ("not_larger", "not_smaller"):
                raise ctx.error(f"unknown keep_aspect_ratio_policy {policy!r}")
            scale = pick(full_scales[a] for a in axes)
            for a in axes:
                full_scales[a] = scale
                out[a] = int(scale * in_shape[a] + 0.5)
    elif scales is not None:
        if len(scales) != len(axes):
            raise ctx.error(f"scales {scales} must have one entry per resized axis {axes}")
        full_scales = [1.0] * rank
        for a, s in zip(axes, scales):
            full_scales[a] = s
        if any(s <= 0 for s in full_scales):
            raise ctx.error(f"scales {scales} must be positive")
        out = [int(math.floor(d * s)) for d, s in zip(in_shape, full_scales)]
    else:
        raise ctx.error("one of scales and sizes is required")
    full_roi = None
    if coordinate_transformation_mode == "tf_crop_and_resize":
        if roi is None:
            raise ctx.error("coordinate_transformation_mode tf_crop_and_resize needs roi")
        n = len(axes)
        if len(roi) != 2 * n:
            raise ctx.error(f"roi {roi} must have 2 * {n} numbers")
        full_roi = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full_roi[a], full_roi[a + rank] = roi[i], roi[i + n]
    return ctx.op("Resize", x, mode=mode,
                  coordinate_transformation_mode=coordinate_transformation_mode,
                  nearest_mode=nearest_mode, cubic_coeff_a=attrs.get("cubic_coeff_a", -0.75),
                  exclude_outside=attrs.get("exclude_outside", 0),
                  extrapolation_value=attrs.get("extrapolation_value", 0.0),
                  antialias=attrs.get("antialias", 0), scales=full_scales, sizes=out,
                  roi=full_roi)


def _kept_sizes(ctx: ConvertContext, x: Value, contents: list[Any], attrs: Attrs) -> list[Any]:
    """Resize ``sizes`` holding size expressions (a graph with symbolic shapes): taken where
    every expression is the input's own dimension on its axis (a run-time batch resized by
    1); any other is the usual error (the op needs the sizes at compile time)."""
    rank = len(x.type.shape)
    axes = [normalize_axis(a, rank) for a in attrs.get("axes", range(rank))]
    if len(contents) == len(axes) and all(
            not is_dim_expr(c) or dims_equal(c, x.type.shape[a])
            for c, a in zip(contents, axes)):
        return list(contents)
    raise ctx.error(f"sizes depends on the sizes ({', '.join(map(dim_str, contents))}); this "
                    f"op needs it as a compile-time constant (import with fixed input_shapes)")


@converter("Resize", since=11)
def convert_resize_11(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    roi_v = _present(_input(inputs, 1)) if ctm == "tf_crop_and_resize" else None
    sizes_v = _present(_input(inputs, 3))
    sized: list[Any] | None = None
    if sizes_v is not None and sizes_v.data is None and not sizes_v.is_held:
        contents = contents_of(sizes_v)  # sizes read from a symbolic shape
        if contents is not None and any(is_dim_expr(c) for c in contents):
            sized, sizes_v = _kept_sizes(ctx, x, contents, attrs), None
    roi_d, scales_d, sizes_d = const_operands(ctx, (roi_v, "roi"),
                                              (_present(_input(inputs, 2)), "scales"),
                                              (sizes_v, "sizes"))
    roi, scales, sizes = _floats(roi_d), _floats(scales_d), _ints(sizes_d)
    if sized is not None:
        sizes = sized
    if scales is not None and sizes is not None:
        raise ctx.error("only one of scales and sizes may be given")
    return _resize(ctx, x, mode=attrs.get("mode", "nearest"), scales=scales, sizes=sizes,
                   roi=roi, attrs=attrs, coordinate_transformation_mode=ctm,
                   nearest_mode=attrs.get("nearest_mode", "round_prefer_floor"))


def _upsample(ctx: ConvertContext, x: Value, attrs: Attrs, scales: list[float] | None) -> Value:
    """Upsample semantics: asymmetric coordinates, and onnxruntime's "simple" nearest rounding
    (floor when enlarging, ceil when shrinking)."""
    return _resize(ctx, x, mode=attrs.get("mode", "nearest"), scales=scales, sizes=None,
                   roi=None, attrs={}, coordinate_transformation_mode="asymmetric",
                   nearest_mode="simple")


@converter("Upsample", since=7)
def convert_upsample_7(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    return _upsample(ctx, x, attrs, [float(s) for s in attrs["scales"]])


@converter("Upsample", since=9)
@converter("Resize", since=10)
def convert_upsample_9(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    """Upsample-9 (scales as an input) and Resize-10, which is Upsample-9 that may shrink."""
    x = inputs[0]
    assert x is not None
    return _upsample(ctx, x, attrs, _floats(ctx.const_value(_present(inputs[1]), "scales")))
