"""What the vta_sim backend claims: quantized conv2d and dense layers in Tessera graphs.

Three ONNX spellings of "int8 layer with int32 accumulation, requantized to int8" are recognized,
each ending in an int8 tensor (the group's root) and starting from one int8 tensor:

``qdq`` (what ``tessera.quantize`` and onnxruntime's QDQ format write)::

    QuantizeLinear( [Relu]( Conv | Gemm | MatMul [-> Add bias] ( DequantizeLinear(x), W, [B] )))

``qlinear``: one ``QLinearConv`` or ``QLinearMatMul`` node.

``integer``::

    QuantizeLinear( [Relu]( [Add bias]( Mul( Cast(ConvInteger | MatMulInteger(x, W)), scale ))))

The graph passes rewrite a ``qdq`` matrix product into the ``integer`` form
(:class:`~tessera.passes.qdq_to_integer.QDQToInteger`); convolutions, and products compiled with
that pass switched off, arrive in the ``qdq`` form.

Weights. Graph passes fold ``DequantizeLinear`` of a constant int8 weight (the importer keeps
it as a node; it is evaluated here where the graph was not folded), so a ``qdq`` layer's ``W``
and ``B`` arrive as float constants. They are matched by value: ``W`` must be exactly
``w_int8 * 2^e`` for some exponent ``e`` (the smallest ``e`` whose integers fit int8 is taken)
and ``B`` exactly ``b_int32 * s_x * 2^e``. Weights quantized with any power-of-two scale pass;
float weights or arbitrary scales do not (their layers stay on the CPU).

Checks. Every int8 tensor must be int8 (uint8 activations, as onnxruntime writes by default, are
not claimed) with a zero point of 0 (absent, or all zeros); scales must be per tensor (or per
channel with one value) and every scale a power of two, so that the requantization scale
``s_x * s_w / s_y`` is ``2^-shift`` with ``0 <= shift <= 31``: VTA requantizes with an
arithmetic shift. Requiring each scale (not only their ratio) to be a power of two makes the
float computation that the ONNX semantics prescribe exact (products and sums of small integers
times powers of two are exact in float32 while ``|accumulator| < 2^24``), so VTA's int32 result
rounded half-to-even (see :mod:`tessera_vta.compiler.conv2d`) is bit-identical to the reference
backend's. A per-channel scale vector with different values would need a shift per lane, which
ALU immediates cannot express (``SHR`` by a second accumulator row could, but is not done).

Convolutions must be 2-D, ``group == 1``, dilation 1, with padding VTA's loads can add; dense
layers take a 2-D input. The layer must fit VTA's buffers (a tiling exists).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import DType
from tessera.ops.quant import dequantize_linear
from tessera.plugin.patterns import Pattern

from .compiler import Conv2dParams, Program, choose_tiling, lower_conv2d
from .compiler.tiling import Tiling
from .config import VTAConfig
from .errors import VTAError

#: Every op a vta_sim group can end with.
ROOT_OPS = ("QuantizeLinear", "QLinearConv", "QLinearMatMul")
#: The requantizing shift's rounding that matches ONNX QuantizeLinear.
ROUNDING = "half_even"


class NotALayer(Exception):
    """A node is not the root of a layer vta_sim can run; the message says why."""


@dataclass
class Layer:
    """One quantized layer found in a graph, with what the VTA compiler needs."""

    kind: str  # "conv2d" or "dense"
    form: str  # "qdq", "qlinear" or "integer"
    root: Node
    nodes: list[Node]  # the matched nodes, root first
    input: Value  # the int8 input
    weight: np.ndarray  # int8, OIHW (conv2d) or (M, K) (dense)
    bias: np.ndarray  # int32 (M,)
    shift: int
    relu: bool
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def output(self) -> Value:
        return self.root.outputs[0]

    def params(self) -> Conv2dParams:
        """The layer as the VTA compiler's convolution parameters (dense: a 1 x N image)."""
        if self.kind == "dense":
            n, k = self.input.type.shape
            return Conv2dParams(
                batch=1,
                in_channels=k,
                height=1,
                width=n,
                out_channels=self.weight.shape[0],
                kernel_h=1,
                kernel_w=1,
                shift=self.shift,
                relu=self.relu,
                rounding=ROUNDING,
            )
        n, c, h, w = self.input.type.shape
        o, _, kh, kw = self.weight.shape
        top, left, bottom, right = self.pads
        return Conv2dParams(
            batch=n,
            in_channels=c,
            height=h,
            width=w,
            out_channels=o,
            kernel_h=kh,
            kernel_w=kw,
            stride_h=self.strides[0],
            stride_w=self.strides[1],
            pad_top=top,
            pad_left=left,
            pad_bottom=bottom,
            pad_right=right,
            shift=self.shift,
            relu=self.relu,
            rounding=ROUNDING,
        )

    def lower(self, config: VTAConfig) -> Program:
        """Compile the layer to a VTA program (raises :class:`tessera_vta.errors.VTAError`)."""
        params = self.params()
        weight = self.weight if self.kind == "conv2d" else self.weight.reshape(
            (*self.weight.shape, 1, 1)
        )
        return lower_conv2d(params, weight, self.bias, config, kind=self.kind,
                            tiling=tiling_for(params, config))

    def describe(self) -> str:
        return (f"{self.kind} {self.name} ({self.form}: {' <- '.join(n.op for n in self.nodes)}; "
                f"weight {list(self.weight.shape)}, shift {self.shift}"
                f"{', relu' if self.relu else ''})")


@lru_cache(maxsize=512)
def tiling_for(params: Conv2dParams, config: VTAConfig) -> Tiling:
    """The layer's tiling (cached: claim checks and compilation ask for the same layers)."""
    return choose_tiling(params, config)


# -- constants and scales -----------------------------------------------------------------------

def _producer(v: Value | None, what: str) -> Node:
    if v is None or v.producer is None:
        raise NotALayer(f"{what} is not computed by a node")
    return v.producer


def _const(v: Value | None, what: str) -> np.ndarray:
    dq = v.producer if v is not None else None
    if dq is not None and dq.op == "DequantizeLinear" and all(
            i is None or i.is_constant for i in dq.inputs):
        # a constant weight's dequantization, not folded yet (an imported graph before passes)
        data = [i.data if i is not None else None for i in dq.inputs]
        return np.asarray(dequantize_linear(*data, **dq.attrs))
    if v is None or v.data is None:
        raise NotALayer(f"{what} is not a constant")
    return np.asarray(v.data)


def _input(node: Node, index: int) -> Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def pow2_exponent(x: float) -> int | None:
    """``e`` when ``x == 2**e`` exactly, else None."""
    if not math.isfinite(x) or x <= 0:
        return None
    mantissa, exponent = math.frexp(x)
    return exponent - 1 if mantissa == 0.5 else None


def _scale(v: Value | None, what: str) -> int:
    """The exponent of a power-of-two per-tensor scale (a per-channel vector of one value is
    accepted)."""
    data = _const(v, what).astype(np.float64).reshape(-1)
    if data.size == 0 or np.any(data != data[0]):
        raise NotALayer(f"{what} varies per channel")
    exponent = pow2_exponent(float(data[0]))
    if exponent is None:
        raise NotALayer(f"{what} {float(data[0]):g} is not a power of two")
    return exponent


def _zero_point(v: Value | None, what: str) -> None:
    """A zero point must be absent or all zeros, of type int8."""
    if v is None:
        return
    data = _const(v, what)
    if v.type.dtype != DType.int8:
        raise NotALayer(f"{what} is {v.type.dtype}, not int8")
    if np.any(data != 0):
        raise NotALayer(f"{what} is not 0")


def _int8(v: Value | None, what: str) -> None:
    if v is None or v.type.dtype != DType.int8:
        raise NotALayer(f"{what} is {v.type.dtype if v is not None else 'missing'}, not int8")


def int8_weight(w: np.ndarray) -> tuple[np.ndarray, int]:
    """``(w_int8, e)`` with ``w == w_int8 * 2**e`` exactly, taking the smallest ``e`` whose
    integers fit int8; NotALayer when no exponent works."""
    wide = np.asarray(w, np.float64)
    if not np.all(np.isfinite(wide)):
        raise NotALayer("the weight has non-finite values")
    largest = float(np.max(np.abs(wide))) if wide.size else 0.0
    if largest == 0.0:
        return np.zeros(wide.shape, np.int8), 0
    first = math.floor(math.log2(largest / 128.0))
    for e in range(first, first + 3):
        scaled = wide * 2.0 ** -e
        if scaled.min() >= -128 and scaled.max() <= 127:
            if np.all(scaled == np.rint(scaled)):
                return scaled.astype(np.int8), e
            break
    raise NotALayer("the weight is not exactly int8 times a power of two")


def int32_bias(b: np.ndarray | None, exponent: int, channels: int) -> np.ndarray:
    """A float bias as ``b_int32 * 2**exponent`` exactly (zeros when absent)."""
    if b is None:
        return np.zeros(channels, np.int32)
    scaled = np.asarray(b, np.float64).reshape(-1) * 2.0 ** -exponent
    if scaled.size == 1:
        scaled = np.full(channels, scaled[0])
    if scaled.size != channels:
        raise NotALayer(f"the bias has {scaled.size} values for {channels} channels")
    if not np.all(scaled == np.rint(scaled)):
        raise NotALayer("the bias is not an integer multiple of s_x * s_w")
    info = np.iinfo(np.int32)
    if scaled.min() < info.min or scaled.max() > info.max:
        raise NotALayer("the bias does not fit int32")
    return scaled.astype(np.int32)


def _shift(acc_exponent: int, out_exponent: int) -> int:
    """The right shift that takes accumulators (scale 2^acc) to outputs (scale 2^out)."""
    shift = out_exponent - acc_exponent
    if not 0 <= shift <= 31:
        raise NotALayer(f"the requantization scale 2^{-shift} needs a shift of {shift}, "
                        f"outside 0..31")
    return shift


def _per_channel(c: np.ndarray, out_shape: tuple[int, ...], axis: int) -> np.ndarray:
    """A constant added to a layer's output as one value per channel (``axis``)."""
    padded = (1,) * (len(out_shape) - c.ndim) + tuple(c.shape)
    if len(padded) != len(out_shape) or any(
            d != 1 for i, d in enumerate(padded) if i != axis):
        raise NotALayer(f"the bias {list(c.shape)} is not per channel of {list(out_shape)}")
    return c.reshape(-1)


# -- the layer forms ---------------------------------------------------------------------------

def _float32(v: Value | None, what: str) -> None:
    if v is None or v.type.dtype != DType.float32:
        raise NotALayer(f"{what} is {v.type.dtype if v is not None else 'missing'}, not float32")


def _quantize_output(q: Node) -> int:
    """Checks of a QuantizeLinear root; the exponent of its scale."""
    _int8(q.outputs[0], f"{q.name} output")
    _float32(q.inputs[0], f"{q.name} input")
    if q.attrs.get("block_size"):
        raise NotALayer(f"{q.name} quantizes blockwise")
    precision = q.attrs.get("precision")
    if precision is not None and precision not in (DType.float32, DType.float64):
        raise NotALayer(f"{q.name} divides in {precision}")
    _zero_point(_input(q, 2), f"{q.name} zero point")
    return _scale(_input(q, 1), f"{q.name} scale")


def _conv_geometry(node: Node, x: Value, w_shape: tuple[int, ...]) -> tuple[tuple[int, int],
                                                                           tuple[int, ...]]:
    if x.type.ndim != 4 or len(w_shape) != 4:
        raise NotALayer(f"{node.name} is not a 2-D convolution")
    if int(node.attrs.get("group", 1)) != 1:
        raise NotALayer(f"{node.name} is a grouped convolution")
    if any(int(d) != 1 for d in node.attrs.get("dilations") or (1, 1)):
        raise NotALayer(f"{node.name} is dilated")
    strides = tuple(int(s) for s in node.attrs.get("strides") or (1, 1))
    pads = tuple(int(p) for p in node.attrs.get("pads") or (0, 0, 0, 0))
    if len(strides) != 2 or len(pads) != 4:
        raise NotALayer(f"{node.name} has unexpected strides/pads")
    return (strides[0], strides[1]), pads


def _quantize_and_relu(q: Node) -> tuple[int, list[Node], Node, bool]:
    """Match ``QuantizeLinear([Relu](prev))`` at the root ``q``: (the output scale's exponent,
    the matched nodes, ``prev``, whether the Relu is there)."""
    out_exp = _quantize_output(q)
    nodes = [q]
    prev = _producer(q.inputs[0], f"{q.name} input")
    relu = prev.op == "Relu"
    if relu:
        nodes.append(prev)
        prev = _producer(prev.inputs[0], f"{prev.name} input")
    return out_exp, nodes, prev, relu


def _split_constant(node: Node) -> tuple[Value | None, Value | None]:
    """(the other operand, the constant operand) of a binary node: the second operand when it
    is a constant, else the first."""
    a, b = node.inputs[0], node.inputs[1]
    return (a, b) if b is not None and b.is_constant else (b, a)


def _from_qdq(q: Node) -> Layer:
    out_exp, nodes, prev, relu = _quantize_and_relu(q)
    bias_value: np.ndarray | None = None
    core = prev
    if core.op == "Add":
        nodes.append(core)
        mm, c = _split_constant(core)
        bias_value = _const(c, f"{core.name} bias")
        core = _producer(mm, f"{core.name} input")
        if core.op != "MatMul":
            raise NotALayer(f"{core.name} ({core.op}) is not a MatMul")
        bias_value = _per_channel(bias_value, core.outputs[0].type.shape,
                                  core.outputs[0].type.ndim - 1)
    if core.op not in ("Conv", "Gemm", "MatMul"):
        raise NotALayer(f"{core.name} ({core.op}) is not a Conv, Gemm or MatMul")
    nodes.append(core)
    dq = _producer(core.inputs[0], f"{core.name} input")
    if dq.op != "DequantizeLinear":
        raise NotALayer(f"{core.name}'s input is not dequantized int8 ({dq.op})")
    nodes.append(dq)
    x = dq.inputs[0]
    assert x is not None
    _int8(x, f"{dq.name} input")
    _float32(dq.outputs[0], f"{dq.name} output")
    _float32(core.outputs[0], f"{core.name} output")
    _zero_point(_input(dq, 2), f"{dq.name} zero point")
    if dq.attrs.get("block_size"):
        raise NotALayer(f"{dq.name} dequantizes blockwise")
    x_exp = _scale(_input(dq, 1), f"{dq.name} scale")

    w = _const(_input(core, 1), f"{core.name} weight")
    strides, pads = (1, 1), (0, 0, 0, 0)
    if core.op == "Conv":
        kind = "conv2d"
        strides, pads = _conv_geometry(core, x, w.shape)
        b = _input(core, 2)
        bias_value = None if b is None else _const(b, f"{core.name} bias")
    else:
        kind = "dense"
        if x.type.ndim != 2 or w.ndim != 2:
            raise NotALayer(f"{core.name} is not a 2-D matrix product")
        if core.op == "Gemm":
            if core.attrs.get("transA") or float(core.attrs.get("alpha", 1.0)) != 1.0:
                raise NotALayer(f"{core.name} has transA or alpha != 1")
            w = w if core.attrs.get("transB") else w.T
            c = _input(core, 2)
            if c is not None:
                if float(core.attrs.get("beta", 1.0)) != 1.0:
                    raise NotALayer(f"{core.name} has beta != 1")
                bias_value = _per_channel(_const(c, f"{core.name} C"), core.outputs[0].type.shape,
                                          1)
        else:
            w = w.T
    w_int, w_exp = int8_weight(w)
    bias = int32_bias(bias_value, x_exp + w_exp, w_int.shape[0])
    return Layer(kind, "qdq", q, nodes, x, w_int, bias, _shift(x_exp + w_exp, out_exp), relu,
                 strides, pads)


def _from_qlinear(node: Node) -> Layer:
    x = node.inputs[0]
    assert x is not None
    _int8(x, f"{node.name} input")
    _int8(node.outputs[0], f"{node.name} output")
    if node.op == "QLinearConv":
        xs, xz, w, ws, wz, ys, yz = node.inputs[1:8]
        b = _input(node, 8)
    else:
        xs, xz, w, ws, wz, ys, yz = node.inputs[1:8]
        b = None
    _int8(w, f"{node.name} weight")
    for zp, what in ((xz, "input"), (wz, "weight"), (yz, "output")):
        _zero_point(zp, f"{node.name} {what} zero point")
    acc_exp = _scale(xs, f"{node.name} input scale") + _scale(ws, f"{node.name} weight scale")
    out_exp = _scale(ys, f"{node.name} output scale")
    weight = _const(w, f"{node.name} weight").astype(np.int8)
    strides, pads = (1, 1), (0, 0, 0, 0)
    if node.op == "QLinearConv":
        kind = "conv2d"
        strides, pads = _conv_geometry(node, x, weight.shape)
        bias = (np.zeros(weight.shape[0], np.int32) if b is None
                else _const(b, f"{node.name} bias").astype(np.int32).reshape(-1))
    else:
        kind = "dense"
        if x.type.ndim != 2 or weight.ndim != 2:
            raise NotALayer(f"{node.name} is not a 2-D matrix product")
        weight = np.ascontiguousarray(weight.T)
        bias = np.zeros(weight.shape[0], np.int32)
    return Layer(kind, "qlinear", node, [node], x, weight, bias, _shift(acc_exp, out_exp), False,
                 strides, pads)


def _from_integer(q: Node) -> Layer:
    out_exp, nodes, prev, relu = _quantize_and_relu(q)
    bias_value: np.ndarray | None = None
    if prev.op == "Add":
        nodes.append(prev)
        inner, c = _split_constant(prev)
        out_type = prev.outputs[0].type
        bias_value = _per_channel(_const(c, f"{prev.name} bias"), out_type.shape,
                                  1 if out_type.ndim == 4 else out_type.ndim - 1)
        prev = _producer(inner, f"{prev.name} input")
    if prev.op != "Mul":
        raise NotALayer(f"{prev.name} ({prev.op}) is not the requantizing Mul")
    nodes.append(prev)
    cast_v, scale_v = _split_constant(prev)
    acc_exp = _scale(scale_v, f"{prev.name} scale")
    cast = _producer(cast_v, f"{prev.name} input")
    if cast.op != "Cast" or cast.outputs[0].type.dtype != DType.float32:
        raise NotALayer(f"{cast.name} ({cast.op}) is not a Cast to float32")
    nodes.append(cast)
    core = _producer(cast.inputs[0], f"{cast.name} input")
    if core.op not in ("ConvInteger", "MatMulInteger"):
        raise NotALayer(f"{core.name} ({core.op}) is not ConvInteger or MatMulInteger")
    nodes.append(core)
    x, w = core.inputs[0], core.inputs[1]
    assert x is not None
    _int8(x, f"{core.name} input")
    _int8(w, f"{core.name} weight")
    _zero_point(_input(core, 2), f"{core.name} input zero point")
    _zero_point(_input(core, 3), f"{core.name} weight zero point")
    weight = _const(w, f"{core.name} weight").astype(np.int8)
    strides, pads = (1, 1), (0, 0, 0, 0)
    if core.op == "ConvInteger":
        kind = "conv2d"
        strides, pads = _conv_geometry(core, x, weight.shape)
    else:
        kind = "dense"
        if x.type.ndim != 2 or weight.ndim != 2:
            raise NotALayer(f"{core.name} is not a 2-D matrix product")
        weight = np.ascontiguousarray(weight.T)
    bias = int32_bias(bias_value, acc_exp, weight.shape[0])
    return Layer(kind, "integer", q, nodes, x, weight, bias, _shift(acc_exp, out_exp), relu,
                 strides, pads)


def extract_layer(root: Node) -> Layer:
    """The layer ending at ``root``; NotALayer (with the reason) when it is none."""
    if root.op in ("QLinearConv", "QLinearMatMul"):
        return _from_qlinear(root)
    if root.op != "QuantizeLinear":
        raise NotALayer(f"{root.name} ({root.op}) does not end a quantized layer")
    prev = _producer(root.inputs[0], f"{root.name} input")
    if prev.op == "Relu":
        prev = _producer(prev.inputs[0], f"{prev.name} input")
    if prev.op == "Add":
        inner = [v for v in prev.inputs if v is not None and not v.is_constant]
        prev = _producer(inner[0] if inner else None, f"{prev.name} input")
    if prev.op == "Mul":
        return _from_integer(root)
    return _from_qdq(root)


def check_layer(root: Node, config: VTAConfig) -> Layer:
    """:func:`extract_layer` plus the checks that need the hardware configuration."""
    layer = extract_layer(root)
    try:
        tiling_for(layer.params(), config)
    except VTAError as err:
        raise NotALayer(f"{layer.name}: {err}") from None
    return layer


# -- patterns ----------------------------------------------------------------------------------

def _both_orders(op: str, sub: Pattern) -> list[Pattern]:
    """A commutative binary op with ``sub`` as either operand."""
    return [Pattern(op, [sub]), Pattern(op, [None, sub])]


def _with_relu(core: Pattern, check: Callable[[Node], bool], name: str) -> list[Pattern]:
    return [Pattern("QuantizeLinear", [Pattern("Relu", [core])], check, f"vta:{name}+relu"),
            Pattern("QuantizeLinear", [core], check, f"vta:{name}")]


def layer_patterns(check: Callable[[Node], bool]) -> list[Pattern]:
    """Every composite pattern vta_sim claims, each rooted at an int8 output, with ``check``
    (which validates the whole layer) on the root."""
    dq = Pattern("DequantizeLinear")
    patterns: list[Pattern] = []
    for core in [Pattern(("Conv", "Gemm", "MatMul"), [dq])] + _both_orders(
            "Add", Pattern("MatMul", [dq])):
        patterns += _with_relu(core, check, "qdq")
    casts = [Pattern("Cast", [Pattern(op)]) for op in ("ConvInteger", "MatMulInteger")]
    muls = [m for c in casts for m in _both_orders("Mul", c)]
    for core in muls + [a for m in muls for a in _both_orders("Add", m)]:
        patterns += _with_relu(core, check, "integer")
    patterns += [Pattern("QLinearConv", None, check, "vta:qlinear_conv"),
                 Pattern("QLinearMatMul", None, check, "vta:qlinear_matmul")]
    return patterns


def find_layers(region: Function) -> list[Layer]:
    """The layers of a region vta_sim claimed, in node order; every node must belong to one."""
    layers: list[Layer] = []
    owned: dict[int, str] = {}
    for node in region.nodes:
        if node.op not in ROOT_OPS:
            continue
        layer = extract_layer(node)
        for n in layer.nodes:
            if id(n) in owned:
                raise NotALayer(f"{n.name} belongs to both {owned[id(n)]} and {layer.name}")
            owned[id(n)] = layer.name
        layers.append(layer)
    stray = [f"{n.name} ({n.op})" for n in region.nodes if id(n) not in owned]
    if stray:
        raise NotALayer(f"node(s) {', '.join(stray)} belong to no quantized layer")
    return layers
