"""ONNX converters: recurrent, attention, signal and miscellaneous sequence ops.

Operands that fix output shapes (DFT ``dft_length``/``axis``, STFT ``frame_step``/
``frame_length``, window sizes, MelWeightMatrix arguments) must be compile-time constants and
become IR attributes; the window and mel-matrix generators are then folded to constants.
Recurrent and attention IR ops always produce all of their outputs; the importer keeps the
ones the ONNX node names.
"""

from __future__ import annotations

from typing import Any

from tessera.errors import NeedsConstantError
from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.frontend.onnx.registry import converter, simple
from tessera.ir.graph import Value
from tessera.ops.registry import get_schema

# ONNX TensorProto.BFLOAT16: no Tessera dtype; softmax runs in float32 instead (more precise).
_ONNX_BFLOAT16 = 16
_ONNX_FLOAT = 1


def _fold(ctx: ConvertContext, op: str, **attrs: Any) -> Value:
    """Evaluate a generator op (no inputs, every argument an attribute) to a constant."""
    schema = get_schema(op)
    full = schema.check(ctx.node_name or op, [], attrs)
    schema.infer_types(ctx.node_name or op, [], full)  # validates the arguments
    (array,) = schema.evaluate([], full)
    name = ctx.output_names[0] if ctx.output_names and ctx.output_names[0] else op.lower()
    return ctx.const(array, name=name)


def _require_constants(ctx: ConvertContext, operands: dict[str, Value | None]) -> None:
    """Raise one NeedsConstantError naming every graph input that the non-constant operands
    depend on (so that all of them can be bound at once)."""
    missing: list[str] = []
    deps: set[str] = set()
    for what, value in operands.items():
        try:
            ctx.const_value(value, what)
        except NeedsConstantError as e:
            missing.append(what)
            deps.update(e.inputs)
    if missing:
        raise NeedsConstantError(
            f"node {ctx.node_name!r} ({ctx.op_type}): {', '.join(missing)} must be constants "
            f"known at compile time, but depend on graph input(s) {', '.join(sorted(deps))}; "
            f"bind them with freeze_inputs={{name: array}}", sorted(deps))


def _scalar(ctx: ConvertContext, value: Value | None, what: str) -> Any:
    data = ctx.const_value(value, what)
    if data is None:
        return None
    if data.size != 1:
        raise ctx.error(f"{what} must be a scalar, got shape {list(data.shape)}")
    return data.reshape(-1)[0].item()


# -- recurrent layers ----------------------------------------------------------------------------

def _recurrent(op: str, num_outputs: int) -> None:
    def convert(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Any:
        return ctx.node(op, inputs, attrs, num_outputs=num_outputs)

    convert.__name__ = f"convert_{op}"
    # Opset 7 and 14 differ only by the ``layout`` attribute (default 0); 22 adds bfloat16.
    converter(op, since=7)(convert)


_recurrent("RNN", 2)
_recurrent("GRU", 2)
_recurrent("LSTM", 3)


# -- attention -------------------------------------------------------------------------------------

@converter("Attention", since=23)
def convert_attention(ctx: ConvertContext, inputs: list[Value | None],
                      attrs: dict[str, Any]) -> list[Value]:
    """Attention 23-25 (24 adds ``nonpad_kv_seqlen``, 25 the sliding window attributes)."""
    attrs = dict(attrs)
    precision = attrs.pop("softmax_precision", None)
    if precision is not None:
        if precision == _ONNX_BFLOAT16:
            precision = _ONNX_FLOAT
        attrs["softmax_precision"] = onnx_dtype(precision, "softmax_precision")
    return ctx.node("Attention", inputs, attrs, num_outputs=4)


simple("RotaryEmbedding", since=23)
simple("LinearAttention", since=27)
simple("CausalConvWithState", since=27)
# TensorScatter (opset 24): its IR op is defined in tessera.ops.attention; the one-to-one
# converter is registered with the tensor family (converters/tensor.py).
simple("SwiGLU", since=28)


# -- signal processing -----------------------------------------------------------------------------

def _dft(ctx: ConvertContext, x: Value, dft_length: Value | None, axis: int,
         attrs: dict[str, Any]) -> Value:
    length = _scalar(ctx, dft_length, "dft_length")
    rank = len(x.type.shape)
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for an input of rank {rank}")
    return ctx.op("DFT", x, axis=axis % rank, inverse=attrs.get("inverse", 0),
                  onesided=attrs.get("onesided", 0),
                  dft_length=None if length is None else int(length))


@converter("DFT", since=17)
def convert_dft_17(ctx: ConvertContext, inputs: list[Value | None],
                   attrs: dict[str, Any]) -> Value:
    """Opset 17: ``axis`` is an attribute (default 1)."""
    _require_constants(ctx, {"dft_length": inputs[1] if len(inputs) > 1 else None})
    return _dft(ctx, inputs[0], inputs[1] if len(inputs) > 1 else None, attrs.get("axis", 1),
                attrs)


@converter("DFT", since=20)
def convert_dft_20(ctx: ConvertContext, inputs: list[Value | None],
                   attrs: dict[str, Any]) -> Value:
    """Opset 20: ``axis`` is a (constant) input, default -2."""
    _require_constants(ctx, {"dft_length": inputs[1] if len(inputs) > 1 else None,
                             "axis": inputs[2] if len(inputs) > 2 else None})
    axis = _scalar(ctx, inputs[2], "axis") if len(inputs) > 2 else None
    return _dft(ctx, inputs[0], inputs[1] if len(inputs) > 1 else None,
                -2 if axis is None else int(axis), attrs)


@converter("STFT", since=17)
def convert_stft(ctx: ConvertContext, inputs: list[Value | None],
                 attrs: dict[str, Any]) -> Value:
    _require_constants(ctx, {"frame_step": inputs[1],
                             "frame_length": inputs[3] if len(inputs) > 3 else None})
    step = _scalar(ctx, inputs[1], "frame_step")
    window = inputs[2] if len(inputs) > 2 else None
    length = _scalar(ctx, inputs[3], "frame_length") if len(inputs) > 3 else None
    return ctx.op("STFT", inputs[0], window, frame_step=int(step),
                  frame_length=None if length is None else int(length),
                  onesided=attrs.get("onesided", 1))


def _window(op: str) -> None:
    def convert(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Value:
        size = _scalar(ctx, inputs[0], "size")
        dtype = onnx_dtype(attrs.get("output_datatype", _ONNX_FLOAT), "output_datatype")
        return _fold(ctx, op, size=int(size), output_datatype=dtype,
                     periodic=attrs.get("periodic", 1))

    convert.__name__ = f"convert_{op}"
    converter(op, since=17)(convert)


for _op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    _window(_op)


@converter("MelWeightMatrix", since=17)
def convert_mel_weight_matrix(ctx: ConvertContext, inputs: list[Value | None],
                              attrs: dict[str, Any]) -> Value:
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    _require_constants(ctx, dict(zip(names, inputs)))
    args = {name: _scalar(ctx, v, name) for name, v in zip(names, inputs)}
    for name in names[:3]:
        args[name] = int(args[name])
    for name in names[3:]:
        args[name] = float(args[name])
    dtype = onnx_dtype(attrs.get("output_datatype", _ONNX_FLOAT), "output_datatype")
    return _fold(ctx, "MelWeightMatrix", output_datatype=dtype, **args)


# -- miscellaneous -------------------------------------------------------------------------------

simple("Det", since=11)


@converter("TfIdfVectorizer", since=9)
def convert_tfidf(ctx: ConvertContext, inputs: list[Value | None],
                  attrs: dict[str, Any]) -> Value:
    attrs = dict(attrs)
    if attrs.pop("pool_strings", None):
        raise ctx.error("string n-grams (pool_strings) are not supported: Tessera has no string "
                        "tensors; use pool_int64s")
    if "pool_int64s" not in attrs:
        raise ctx.error("pool_int64s is required")
    return ctx.op("TfIdfVectorizer", inputs[0], **attrs)
