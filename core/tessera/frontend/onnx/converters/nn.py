"""ONNX converters: nn family (convolutions, pools, normalizations, softmax, matrix products,
losses, sampling).

Opset differences are mapped onto one IR form per op: ``auto_pad`` becomes explicit ``pads``;
ConvTranspose's ``output_shape`` becomes ``pads``/``output_padding``; softmax-like ops of
opset < 13 ("coerce to 2-D at axis") become the single-axis op between two Reshapes; shape-like
operands (Col2Im's image/block shapes, AffineGrid's size, MaxUnpool's output_shape) become
attributes; inference-mode Dropout disappears.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import helper

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.registry import converter, simple
from tessera.ir.graph import Value
from tessera.ir.types import DType
from tessera.ops.registry import normalize_axis
from tessera.ops.spatial import resolve_auto_pad

Inputs = list[Value | None]
Attrs = dict[str, Any]


def _input(inputs: Inputs, i: int) -> Value | None:
    return inputs[i] if i < len(inputs) else None


def operands(*values: Value | None) -> list[Value | None]:
    """IR node operands without trailing omitted (``None``) optionals."""
    out = list(values)
    while out and out[-1] is None:
        out.pop()
    return out


def onnx_elem_dtype(ctx: ConvertContext, elem: int, what: str) -> DType:
    """The DType of an ONNX ``TensorProto.DataType`` number (an import error when unsupported)."""
    try:
        return DType.from_numpy(helper.tensor_dtype_to_np_dtype(elem))
    except Exception:  # noqa: BLE001
        raise ctx.error(f"{what}: element type {elem} is not supported") from None


def _window_attrs(ctx: ConvertContext, x: Value, attrs: Attrs,
                  kernel: list[int]) -> dict[str, Any]:
    """kernel_shape, strides, dilations and explicit pads (auto_pad resolved)."""
    n = x.type.ndim - 2
    if n < 1:
        raise ctx.error(f"input {x.type} must have rank >= 3")
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    pads = resolve_auto_pad(attrs.get("auto_pad", "NOTSET"), x.type.shape[2:], kernel, strides,
                            dilations, attrs.get("pads"))
    return {"kernel_shape": list(kernel), "strides": strides, "pads": pads,
            "dilations": dilations}


def conv_window_attrs(ctx: ConvertContext, x: Value, w: Value, attrs: Attrs) -> dict[str, Any]:
    """:func:`_window_attrs` of a convolution: kernel_shape defaults to the weight's spatial
    shape."""
    return _window_attrs(ctx, x, attrs, list(attrs.get("kernel_shape") or w.type.shape[2:]))


# -- convolutions --------------------------------------------------------------------------------

@converter("Conv", since=1)
def convert_conv(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x, w = inputs[0], inputs[1]
    assert x is not None and w is not None
    return ctx.op("Conv", *operands(x, w, _input(inputs, 2)), group=attrs.get("group", 1),
                  **conv_window_attrs(ctx, x, w, attrs))


def conv_transpose_pads(ctx: ConvertContext, x_shape: tuple[int, ...], kernel: list[int],
                        attrs: Attrs) -> tuple[list[int], list[int], list[int], list[int]]:
    """(strides, dilations, pads, output_padding) with auto_pad and output_shape resolved."""
    n = len(x_shape) - 2
    in_sp = x_shape[2:]
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    out_pad = list(attrs.get("output_padding") or [0] * n)
    auto_pad = str(attrs.get("auto_pad", "NOTSET")).upper()
    output_shape = attrs.get("output_shape")
    if output_shape:
        output_shape = list(output_shape)[-n:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [in_sp[i] * strides[i] for i in range(n)]
    if output_shape:
        if len(output_shape) != n:
            raise ctx.error(f"output_shape {output_shape} does not fit {n} spatial dims")
        begin, end = [], []
        for i in range(n):
            total = (strides[i] * (in_sp[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i]
                     + 1 - output_shape[i])
            # Floor division: a negative total (output larger than the natural size) grows
            # the end for NOTSET/SAME_LOWER, as onnxruntime and ONNX's reference do.
            small = total // 2
            if auto_pad == "SAME_UPPER":
                begin.append(small)
                end.append(total - small)
            else:
                begin.append(total - small)
                end.append(small)
        return strides, dilations, begin + end, out_pad
    pads = [0] * (2 * n)
    if auto_pad in ("NOTSET", "") and attrs.get("pads"):
        pads = list(attrs["pads"])
    return strides, dilations, pads, out_pad


@converter("ConvTranspose", since=1)
def convert_conv_transpose(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x, w = inputs[0], inputs[1]
    assert x is not None and w is not None
    kernel = list(attrs.get("kernel_shape") or w.type.shape[2:])
    strides, dilations, pads, out_pad = conv_transpose_pads(ctx, x.type.shape, kernel, attrs)
    return ctx.op("ConvTranspose", *operands(x, w, _input(inputs, 2)), kernel_shape=kernel,
                  strides=strides, dilations=dilations, pads=pads, output_padding=out_pad,
                  group=attrs.get("group", 1))


@converter("DeformConv", since=19)
def convert_deform_conv(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x, w = inputs[0], inputs[1]
    assert x is not None and w is not None
    return ctx.op("DeformConv", *operands(x, w, inputs[2], _input(inputs, 3), _input(inputs, 4)),
                  group=attrs.get("group", 1), offset_group=attrs.get("offset_group", 1),
                  **conv_window_attrs(ctx, x, w, attrs))


@converter("Col2Im", since=18)
def convert_col2im(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    image_shape = ctx.const_ints(inputs[1], "image_shape")
    block_shape = ctx.const_ints(inputs[2], "block_shape")
    return ctx.op("Col2Im", inputs[0], image_shape=image_shape, block_shape=block_shape,
                  dilations=attrs.get("dilations"), pads=attrs.get("pads"),
                  strides=attrs.get("strides"))


# -- pools ---------------------------------------------------------------------------------------

def _pool(ctx: ConvertContext, op: str, inputs: Inputs, attrs: Attrs,
          extra: dict[str, Any]) -> list[Value]:
    x = inputs[0]
    assert x is not None
    if "kernel_shape" not in attrs:
        raise ctx.error("attribute kernel_shape is required")
    ir = _window_attrs(ctx, x, attrs, list(attrs["kernel_shape"]))
    ir["ceil_mode"] = attrs.get("ceil_mode", 0)
    ir.update(extra)
    return ctx.node(op, [x], ir)


@converter("MaxPool", since=1)
def convert_max_pool(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return _pool(ctx, "MaxPool", inputs, attrs, {"storage_order": attrs.get("storage_order", 0)})


@converter("AveragePool", since=1)
def convert_average_pool(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return _pool(ctx, "AveragePool", inputs, attrs,
                 {"count_include_pad": attrs.get("count_include_pad", 0)})


@converter("LpPool", since=1)
def convert_lp_pool(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    return _pool(ctx, "LpPool", inputs, attrs, {"p": int(attrs.get("p", 2))})


simple("GlobalAveragePool")
simple("GlobalMaxPool")


@converter("GlobalLpPool", since=1)
def convert_global_lp_pool(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    return ctx.op("GlobalLpPool", inputs[0], p=int(attrs.get("p", 2)))


@converter("MaxUnpool", since=9)
def convert_max_unpool(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    output_shape = ctx.const_ints(_input(inputs, 2), "output_shape")
    return ctx.op("MaxUnpool", inputs[0], inputs[1], kernel_shape=attrs["kernel_shape"],
                  strides=attrs.get("strides"), pads=attrs.get("pads"),
                  output_shape=output_shape)


# -- normalizations ------------------------------------------------------------------------------

@converter("BatchNormalization", since=1)
def convert_batch_norm_legacy(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    # Opsets 7-13: extra outputs (mean, var, saved_mean, saved_var) exist only in training.
    if ctx.num_outputs > 1 and any(ctx.output_names[1:]):
        raise ctx.error("training-mode outputs of BatchNormalization before opset 14 are not "
                        "supported; export the model in inference mode")
    return ctx.op("BatchNormalization", *inputs[:5], epsilon=attrs.get("epsilon", 1e-5))


@converter("BatchNormalization", since=14)
def convert_batch_norm(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    training = int(attrs.get("training_mode", 0))
    ir = {"epsilon": attrs.get("epsilon", 1e-5), "momentum": attrs.get("momentum", 0.9),
          "training_mode": training}
    if not training:
        if ctx.num_outputs > 1 and any(ctx.output_names[1:]):
            raise ctx.error("running_mean/running_var outputs need training_mode=1")
        return [ctx.op("BatchNormalization", *inputs[:5], **ir)]
    return ctx.node("BatchNormalization", inputs[:5], ir)


simple("InstanceNormalization", drop=("consumed_inputs",))


def _stash_type(ctx: ConvertContext, attrs: Attrs) -> DType:
    return onnx_elem_dtype(ctx, int(attrs.get("stash_type", 1)), "stash_type")


@converter("LayerNormalization", since=17)
def convert_layer_norm(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    ir = {"axis": attrs.get("axis", -1), "epsilon": attrs.get("epsilon", 1e-5),
          "stash_type": _stash_type(ctx, attrs)}
    return ctx.node("LayerNormalization", inputs[:3], ir)


@converter("GroupNormalization", since=18)
def convert_group_norm(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x, scale, bias = inputs[0], inputs[1], inputs[2]
    assert x is not None and scale is not None and bias is not None
    groups = int(attrs["num_groups"])
    c = x.type.shape[1] if x.type.ndim > 1 else 0
    if ctx.opset < 21 and groups and c % groups == 0:
        # Opset 18: scale and bias are per group; the IR form is per channel.
        scale = _per_channel(ctx, scale, c // groups)
        bias = _per_channel(ctx, bias, c // groups)
    return ctx.op("GroupNormalization", x, scale, bias, num_groups=groups,
                  epsilon=attrs.get("epsilon", 1e-5), stash_type=_stash_type(ctx, attrs))


def _per_channel(ctx: ConvertContext, v: Value, repeat: int) -> Value:
    """A per-group vector repeated per channel (constants only; the reference op also accepts
    the per-group form, so a runtime vector is passed through)."""
    if repeat == 1 or not v.is_constant:
        return v
    return ctx.const(np.repeat(v.data, repeat), name=v.name)


@converter("RMSNormalization", since=23)
def convert_rms_norm(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    return ctx.op("RMSNormalization", inputs[0], inputs[1], axis=attrs.get("axis", -1),
                  epsilon=attrs.get("epsilon", 1e-5), stash_type=_stash_type(ctx, attrs))


simple("LRN")
simple("MeanVarianceNormalization")
simple("LpNormalization")


# -- softmax family ------------------------------------------------------------------------------

def _coerced_2d(op: str):
    """Opset < 13: the op works on the input coerced to 2-D at ``axis`` (default 1)."""

    def convert(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
        x = inputs[0]
        assert x is not None
        shape = list(x.type.shape)
        if not shape:
            return ctx.op(op, x, axis=-1)
        axis = normalize_axis(int(attrs.get("axis", 1)), len(shape))
        if math.prod(shape[axis + 1:]) == 1 and axis < len(shape):
            return ctx.op(op, x, axis=axis)
        flat = ctx.op("Reshape", x, shape=[math.prod(shape[:axis]), math.prod(shape[axis:])])
        y = ctx.op(op, flat, axis=1)
        return ctx.op("Reshape", y, shape=shape)

    convert.__name__ = f"convert_{op}_coerced_2d"
    return convert


for _op in ("Softmax", "LogSoftmax", "Hardmax"):
    converter(_op, since=1)(_coerced_2d(_op))
    simple(_op, since=13)


# -- matrix products -----------------------------------------------------------------------------

simple("Gemm", drop=("broadcast",))
simple("MatMul")
simple("Einsum", since=12)


# -- Dropout -------------------------------------------------------------------------------------

def _dropout_outputs(ctx: ConvertContext, x: Value, mask_dtype: Any) -> list[Value]:
    outs = [x]
    if ctx.num_outputs > 1:
        outs.append(ctx.const(np.ones(x.type.shape, mask_dtype), name=ctx.output_names[1]
                              or "mask"))
    return outs


@converter("Dropout", since=1)
def convert_dropout_legacy(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    # Opsets 7-11 have no training switch: an inference compiler runs them as identity.
    x = inputs[0]
    assert x is not None
    mask_dtype = bool if ctx.opset >= 10 else x.type.dtype.numpy
    return _dropout_outputs(ctx, x, mask_dtype)


@converter("Dropout", since=12)
def convert_dropout(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    training = _input(inputs, 2)
    train = bool(np.asarray(ctx.const_value(training, "training_mode")).reshape(-1)[0]) \
        if training is not None else False
    if not train:  # inference: the ratio does not matter (it may even be a runtime input)
        return _dropout_outputs(ctx, x, bool)
    ratio_v = _input(inputs, 1)
    ratio = float(np.asarray(ctx.const_value(ratio_v, "ratio")).reshape(-1)[0]) \
        if ratio_v is not None else 0.5
    if ratio == 0.0:
        return _dropout_outputs(ctx, x, bool)
    return ctx.node("Dropout", [x], {"ratio": ratio, "seed": attrs.get("seed")},
                    num_outputs=max(ctx.num_outputs, 1))


# -- data movement -------------------------------------------------------------------------------

simple("DepthToSpace")
simple("SpaceToDepth")


# -- sampling ------------------------------------------------------------------------------------

@converter("RoiAlign", since=10)
def convert_roi_align_10(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    # Opset 10 had no coordinate_transformation_mode; its behaviour is "output_half_pixel".
    return ctx.op("RoiAlign", *inputs[:3], coordinate_transformation_mode="output_half_pixel",
                  **{k: v for k, v in attrs.items() if k != "coordinate_transformation_mode"})


simple("RoiAlign", since=16)

_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic"}


@converter("GridSample", since=16)
def convert_grid_sample(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    mode = str(attrs.get("mode", "linear" if ctx.opset >= 20 else "bilinear"))
    return ctx.op("GridSample", inputs[0], inputs[1], mode=_GRID_MODES.get(mode, mode),
                  padding_mode=attrs.get("padding_mode", "zeros"),
                  align_corners=attrs.get("align_corners", 0))


@converter("AffineGrid", since=20)
def convert_affine_grid(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    size = ctx.const_ints(inputs[1], "size")
    return ctx.op("AffineGrid", inputs[0], size=size,
                  align_corners=attrs.get("align_corners", 0))


# -- losses --------------------------------------------------------------------------------------

simple("NegativeLogLikelihoodLoss", since=12)
simple("SoftmaxCrossEntropyLoss", since=12)
