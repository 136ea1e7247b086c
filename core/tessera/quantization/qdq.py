"""QDQ insertion: rewrite a float ONNX graph so that chosen layers compute on int8.

For every chosen ``Conv`` / ``Gemm`` / ``MatMul`` with constant weights (the layer's output taken
after a ``Relu`` that alone reads it), the rewritten graph reads::

    x -> QuantizeLinear -> DequantizeLinear -> Conv(W: DequantizeLinear(int8),
                                                    B: DequantizeLinear(int32)) [-> Relu]
      -> QuantizeLinear -> DequantizeLinear -> (the layer's readers)

Activations have one scale per tensor: int8 with zero point 0 (symmetric), or uint8 with a zero
point (asymmetric, the CPU scheme). Weights are int8 with zero point 0, one scale per tensor
(VTA's power of two, or ``max|w| / 127``) or one per output channel (``axis`` of the
``DequantizeLinear``: 0 for Conv and Gemm with ``transB``, 1 for MatMul and Gemm without); the
bias is int32 with scale ``s_x * s_w`` (per channel with the weights). Each quantized layer gets
its own ``DequantizeLinear`` of its input, so
that a backend can take the group ``DequantizeLinear -> layer -> QuantizeLinear`` as one int8
layer; other readers of a layer's output share one ``DequantizeLinear``. A tensor that only
passes through shape ops (MaxPool, Reshape, Flatten, ...) between two quantized layers keeps
the scale of the first, so requantizing it loses nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tessera.quantization.calibration import QuantizeError
from tessera.quantization.scales import (
    channel_scales,
    quantize_array,
    tensor_scale,
    weight_scale,
)

#: Ops whose weights are quantized.
LAYER_OPS = ("Conv", "Gemm", "MatMul")
#: Ops whose output holds values of their (first) input: a scale carries through them.
PASS_THROUGH = ("MaxPool", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity")
#: Default-domain opset the rewritten model needs at least (QuantizeLinear with int32 inputs),
#: and with per-channel weights (a ``DequantizeLinear`` with ``axis``).
MIN_QDQ_OPSET = 10
MIN_PER_CHANNEL_OPSET = 13
#: How weights are scaled: VTA's per-tensor power of two, any per-tensor scale, per channel.
WEIGHT_MODES = ("pow2", "per_tensor", "per_channel")
ZERO_INT8 = "tessera_qdq_zero_int8"
ZERO_INT32 = "tessera_qdq_zero_int32"


@dataclass(frozen=True)
class ActQuant:
    """How an activation tensor is quantized: ``scale``, ``zero_point`` and the integer
    ``dtype`` (``np.int8`` or ``np.uint8``)."""

    scale: float
    zero_point: int = 0
    dtype: type = np.int8


def weight_axis(op: str, node_trans_b: bool) -> int:
    """The output-channel axis of a layer's weight: 0 for Conv (O, I, kh, kw) and Gemm with
    ``transB`` (N, K); 1 for MatMul and Gemm without (K, N)."""
    return 0 if op == "Conv" or (op == "Gemm" and node_trans_b) else 1


@dataclass
class QuantLayer:
    """A layer that can be quantized: its node and the tensors around it."""

    index: int
    name: str
    op: str
    input: str
    weight: str
    bias: str | None
    #: the tensor that gets the output QuantizeLinear (a following Relu's output)
    output: str
    relu: bool = False
    skipped: str = ""


@dataclass
class QDQPlan:
    """Which layers are quantized (and why others are not) and the tensors to calibrate."""

    layers: list[QuantLayer]
    skipped: list[QuantLayer] = field(default_factory=list)

    def tensors(self) -> list[str]:
        """The activation tensors that get a QuantizeLinear, in graph order."""
        out: list[str] = []
        for layer in self.layers:
            out += [layer.input, layer.output]
        return list(dict.fromkeys(out))


def node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{node.output[0] if node.output else index}"


def _attr(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)  # type: ignore[no-any-return]
    return default


def _float_initializer(inits: Mapping[str, TensorProto], name: str) -> bool:
    t = inits.get(name)
    return t is not None and t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE,
                                             TensorProto.FLOAT16)


def find_layers(graph: onnx.GraphProto) -> tuple[list[QuantLayer], list[QuantLayer]]:
    """Quantizable layers in graph order, and the layers of those ops that are not (reason in
    ``skipped``)."""
    inits = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    found: list[QuantLayer] = []
    refused: list[QuantLayer] = []
    for i, node in enumerate(graph.node):
        if node.op_type not in LAYER_OPS or node.domain not in ("", "ai.onnx"):
            continue
        name = node_name(node, i)
        x = node.input[0] if node.input else ""
        w = node.input[1] if len(node.input) > 1 else ""
        b = node.input[2] if len(node.input) > 2 and node.input[2] else None
        layer = QuantLayer(i, name, node.op_type, x, w, b, node.output[0])
        reason = ""
        if not x or x in inits:
            reason = "its input is a constant"
        elif not _float_initializer(inits, w):
            reason = "its weight is not a float constant"
        elif b is not None and not _float_initializer(inits, b):
            reason = "its bias is not a float constant"
        elif node.op_type == "Gemm" and (int(_attr(node, "transA", 0))
                                         or float(_attr(node, "alpha", 1.0)) != 1.0
                                         or (b is not None and float(_attr(node, "beta", 1.0))
                                             != 1.0)):
            reason = "Gemm with transA, alpha or beta"
        elif node.op_type == "MatMul" and len(inits[w].dims) != 2:
            reason = "MatMul weight is not a matrix"
        elif b is not None and not _per_output_channel(node, inits[w], inits[b]):
            reason = "its bias is not one value per output channel"
        if reason:
            layer.skipped = reason
            refused.append(layer)
            continue
        after = readers.get(node.output[0], [])
        if (len(after) == 1 and after[0].op_type == "Relu" and node.output[0] not in outputs):
            layer.output = after[0].output[0]
            layer.relu = True
        found.append(layer)
    return found, refused


def _per_output_channel(node: onnx.NodeProto, w: TensorProto, b: TensorProto) -> bool:
    channels = w.dims[0] if node.op_type == "Conv" else (
        w.dims[0] if node.op_type == "Gemm" and int(_attr(node, "transB", 0)) else w.dims[-1])
    size = int(np.prod(b.dims)) if b.dims else 1
    if node.op_type == "Conv":
        return list(b.dims) == [channels]
    return size in (1, channels) and all(d == 1 for d in list(b.dims)[:-1])


def plan_layers(graph: onnx.GraphProto, skip_first_conv: bool = True,
                skip_last_dense: bool = True, exclude: Iterable[str] = ()) -> QDQPlan:
    """Choose the layers to quantize: every quantizable one except the first convolution and
    the last Gemm/MatMul (the classifier), as TVM's VTA flow keeps them in float, and except
    the nodes named in ``exclude``."""
    layers, refused = find_layers(graph)
    excluded = set(exclude)
    known = {layer.name for layer in layers + refused}
    unknown = sorted(excluded - known)
    if unknown:
        raise QuantizeError(f"exclude names node(s) {', '.join(unknown)} that are not "
                            f"Conv/Gemm/MatMul layers of the model (layers: "
                            f"{', '.join(sorted(known)) or 'none'})")
    convs = [layer for layer in layers if layer.op == "Conv"]
    dense = [layer for layer in layers if layer.op in ("Gemm", "MatMul")]
    first = convs[0] if skip_first_conv and convs else None
    last = dense[-1] if skip_last_dense and dense else None
    chosen: list[QuantLayer] = []
    for layer in layers:
        if layer is first:
            layer.skipped = "first convolution (kept in float)"
        elif layer is last:
            layer.skipped = "last dense layer, the classifier (kept in float)"
        elif layer.name in excluded:
            layer.skipped = "excluded"
        if layer.skipped:
            refused.append(layer)
        else:
            chosen.append(layer)
    refused.sort(key=lambda layer: layer.index)
    return QDQPlan(chosen, refused)


def carried_scales(graph: onnx.GraphProto, plan: QDQPlan) -> dict[str, str]:
    """For layer inputs reached from another layer's output through shape ops only: input ->
    that output (whose scale the input keeps)."""
    producer = {o: node for node in graph.node for o in node.output}
    outputs = {layer.output for layer in plan.layers}
    carried: dict[str, str] = {}
    for layer in plan.layers:
        name = layer.input
        while name not in outputs:
            node = producer.get(name)
            if node is None or node.op_type not in PASS_THROUGH or not node.input:
                break
            name = node.input[0]
        if name in outputs and name != layer.input:
            carried[layer.input] = name
    return carried


class _Builder:
    """The new node list and initializers of the rewritten graph."""

    def __init__(self, graph: onnx.GraphProto, params: Mapping[str, ActQuant]):
        self.graph = graph
        self.params = params
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.names = {n for node in graph.node for n in [*node.input, *node.output]}
        self.names |= {t.name for t in graph.initializer} | {i.name for i in graph.input}
        self.quantized: dict[str, str] = {}
        self.scale_names: dict[str, str] = {}
        self.zero_names: dict[str, str] = {}

    def fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self.names:
            name = f"{hint}_{k}"
            k += 1
        self.names.add(name)
        return name

    def constant(self, hint: str, array: np.ndarray) -> str:
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def scale_of(self, tensor: str) -> str:
        if tensor not in self.scale_names:
            self.scale_names[tensor] = self.constant(
                f"{tensor}_scale", np.array(self.params[tensor].scale, np.float32))
        return self.scale_names[tensor]

    def zero_of(self, tensor: str) -> str:
        q = self.params[tensor]
        if q.dtype is np.int8 and q.zero_point == 0:
            return ZERO_INT8
        if tensor not in self.zero_names:
            self.zero_names[tensor] = self.constant(f"{tensor}_zero_point",
                                                    np.array(q.zero_point, q.dtype))
        return self.zero_names[tensor]

    def quantize(self, tensor: str) -> None:
        q = self.fresh(f"{tensor}_quantized")
        self.nodes.append(helper.make_node("QuantizeLinear", [tensor, self.scale_of(tensor),
                                                               self.zero_of(tensor)], [q],
                                           name=self.fresh(f"{tensor}_QuantizeLinear")))
        self.quantized[tensor] = q

    def dequantize(self, tensor: str, hint: str) -> str:
        out = self.fresh(hint)
        self.nodes.append(helper.make_node("DequantizeLinear", [self.quantized[tensor],
                                                                 self.scale_of(tensor),
                                                                 self.zero_of(tensor)], [out],
                                           name=self.fresh(f"{out}_DequantizeLinear")))
        return out

    def constant_dq(self, hint: str, array: np.ndarray, scale: float | np.ndarray,
                    zero: str, axis: int | None = None) -> str:
        """A constant integer ``array`` dequantized with ``scale``: one value, or (``axis``)
        one per index of that axis, with zero points 0 of the array's type."""
        q = self.constant(f"{hint}_quantized", array)
        if axis is None:
            s = self.constant(f"{hint}_scale", np.array(scale, np.float32))
            inputs, attrs = [q, s, zero], {}
        else:
            scales = np.asarray(scale, np.float32).reshape(-1)
            s = self.constant(f"{hint}_scale", scales)
            z = self.constant(f"{hint}_zero_point", np.zeros(scales.shape, array.dtype))
            inputs, attrs = [q, s, z], {"axis": axis}
        out = self.fresh(f"{hint}_dequantized")
        self.nodes.append(helper.make_node("DequantizeLinear", inputs, [out],
                                           name=self.fresh(f"{out}_DequantizeLinear"), **attrs))
        return out


def insert_qdq(model: onnx.ModelProto, plan: QDQPlan,
               scales: Mapping[str, float | ActQuant],
               weights: str = "pow2") -> onnx.ModelProto:
    """The model with QuantizeLinear/DequantizeLinear around ``plan``'s layers, using
    ``scales`` for the activations (tensor -> a scale of int8 with zero point 0, or an
    :class:`ActQuant`) and ``weights`` (:data:`WEIGHT_MODES`) for the weights."""
    if weights not in WEIGHT_MODES:
        raise ValueError(f"unknown weight mode {weights!r}: expected one of "
                         f"{', '.join(WEIGHT_MODES)}")
    params = {t: q if isinstance(q, ActQuant) else ActQuant(float(q))
              for t, q in scales.items()}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {t.name: t for t in graph.initializer}
    by_index = {layer.index: layer for layer in plan.layers}
    layer_outputs = {layer.output for layer in plan.layers}
    act = set(plan.tensors())
    b = _Builder(graph, params)
    b.inits += [numpy_helper.from_array(np.array(0, np.int8), ZERO_INT8),
                numpy_helper.from_array(np.array(0, np.int32), ZERO_INT32)]
    readers_elsewhere: set[str] = set()
    for i, node in enumerate(graph.node):
        layer = by_index.get(i)
        for k, name in enumerate(node.input):
            if name in layer_outputs and (layer is None or k != 0):
                readers_elsewhere.add(name)
    rename: dict[str, str] = {}
    for vi in graph.input:
        if vi.name in act:
            b.quantize(vi.name)
    for i, node in enumerate(graph.node):
        new = onnx.NodeProto()
        new.CopyFrom(node)
        layer = by_index.get(i)
        if layer is not None:
            x_dq = b.dequantize(layer.input, f"{layer.input}_dequantized_for_{layer.name}")
            w = numpy_helper.to_array(inits[layer.weight]).astype(np.float64)
            axis = weight_axis(layer.op, bool(_attr(node, "transB", 0))) \
                if weights == "per_channel" else None
            if axis is not None:
                s_w: float | np.ndarray = channel_scales(w, axis)
            else:
                s_w = weight_scale(w) if weights == "pow2" else tensor_scale(w)
            w_dq = b.constant_dq(f"{layer.name}_weight", quantize_array(w, s_w, axis=axis),
                                 s_w, ZERO_INT8, axis)
            new.input[0] = x_dq
            new.input[1] = w_dq
            if layer.bias is not None:
                s_b = params[layer.input].scale * np.asarray(s_w)
                bias = numpy_helper.to_array(inits[layer.bias]).astype(np.float64)
                if axis is not None:  # one value per output channel, along the bias's last axis
                    bias = np.broadcast_to(bias.reshape(-1), s_b.shape) if bias.size == 1 \
                        else bias
                    new.input[2] = b.constant_dq(
                        f"{layer.name}_bias", quantize_array(bias, s_b, np.int32,
                                                             axis=bias.ndim - 1),
                        s_b, ZERO_INT32, bias.ndim - 1)
                else:
                    s_b = float(s_b)
                    new.input[2] = b.constant_dq(f"{layer.name}_bias",
                                                 quantize_array(bias, s_b, np.int32), s_b,
                                                 ZERO_INT32)
        else:
            for k, name in enumerate(new.input):
                if name in rename:
                    new.input[k] = rename[name]
        b.nodes.append(new)
        for name in node.output:
            if name not in act:
                continue
            b.quantize(name)
            if name in readers_elsewhere:
                # every other reader of a quantized layer's output reads the int8 value (a graph
                # output keeps the float value: it is read before the QuantizeLinear)
                rename[name] = b.dequantize(name, f"{name}_dequantized")
    del graph.node[:]
    graph.node.extend(b.nodes)
    used = {n for node in graph.node for n in node.input}
    keep = [t for t in graph.initializer if t.name in used]
    dropped = {t.name for t in graph.initializer} - {t.name for t in keep}
    del graph.initializer[:]
    graph.initializer.extend(keep + [t for t in b.inits if t.name in used])
    inputs = [vi for vi in graph.input if vi.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)
    _ensure_opset(out, MIN_PER_CHANNEL_OPSET if weights == "per_channel" else MIN_QDQ_OPSET,
                  "per-channel weights" if weights == "per_channel" else "QDQ quantization")
    return out


def _ensure_opset(model: onnx.ModelProto, least: int = MIN_QDQ_OPSET,
                  what: str = "QDQ quantization") -> None:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            if opset.version < least:
                raise QuantizeError(f"the model uses opset {opset.version}; {what} needs "
                                    f"opset {least} or later (convert it with "
                                    f"onnx.version_converter first)")
            return
