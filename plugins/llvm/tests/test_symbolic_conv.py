"""Convolutions and pooling over run-time image sizes ("one module for every size"): ONNX
models with symbolic batch, height and width compile ONCE for the llvm backend into one
symbolic module (no per-size fallback) and run at many sizes (odd ones, a width of one, the
register tile's width and its neighbours, the bound) against onnxruntime on random data; the
convolution's kernel keeps a fixed register tile over the run-time width, its last, partial
tile specialised per remainder (no guards on the width left in the loops); ops the backend
cannot take at run-time sizes are refused with an error naming the node."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

import tessera
from plugins.llvm.tests.tile_reads import tile_reads_in_loops
from tessera.errors import CompileError, TesseraError
from tessera.frontend.onnx.importer import import_onnx
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.runtime.module import Module
from tessera.tir import stmt as S
from tessera.tir.functor import post_order_visit
from tessera.tir.transform.hoist_sizes import inline_size_lets
from tessera_llvm.lowering import lower_region
from tessera_llvm.schedules.common import CPUInfo

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(42)
BOUNDS = {"batch": (1, 3), "height": (1, 24), "width": (1, 40)}
#: The CPU the schedule checks lower for: AVX-512's 16 lanes and 32 registers.
CPU = CPUInfo(vector_lanes=16, num_threads=2, vector_registers=32)


# -- models -------------------------------------------------------------------------------------

class _Graph:
    """A small ONNX graph under construction: input ``x`` (batch, channels, height, width)."""

    def __init__(self, channels: int) -> None:
        self.channels = channels
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def const(self, array: np.ndarray, kind: str) -> str:
        name = self.name(kind)
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: Any) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{out}", **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, pad: int = 1,
             group: int = 1, bias: bool = True) -> str:
        w = RNG.standard_normal((cout, cin // group, k, k)) * (1.0 / np.sqrt(cin // group * k * k))
        inputs = [x, self.const(w, "w")]
        if bias:
            inputs.append(self.const(RNG.standard_normal(cout) * 0.1, "b"))
        return self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4, group=group)

    def model(self, y: str, rank: int = 4, batch: int | str = "batch") -> ModelProto:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                          [batch, self.channels, "height", "width"])
        shape: list[Any] = [batch, *([None] * (rank - 1))]
        out = helper.make_tensor_value_info(y, TensorProto.FLOAT, shape)
        graph = helper.make_graph(self.nodes, "g", [x], [out], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                 ir_version=9)


def _single_conv(cin: int, cout: int, **conv: Any) -> ModelProto:
    g = _Graph(cin)
    return g.model(g.conv("x", cin, cout, **conv))


def conv3x3() -> ModelProto:
    return _single_conv(8, 32)


def conv3x3_relu() -> ModelProto:
    g = _Graph(16)
    return g.model(g.node("Relu", [g.conv("x", 16, 32)]))


def conv_strided() -> ModelProto:
    g = _Graph(16)
    return g.model(g.node("Relu", [g.conv("x", 16, 32, stride=2)]))


def conv_stem() -> ModelProto:
    """The first layer of a ResNet: 7x7, stride 2, pad 3, three input channels."""
    g = _Graph(3)
    return g.model(g.node("Relu", [g.conv("x", 3, 16, k=7, stride=2, pad=3)]))


def conv1x1() -> ModelProto:
    return _single_conv(32, 48, k=1, pad=0)


def conv1x1_strided() -> ModelProto:
    return _single_conv(16, 32, k=1, pad=0, stride=2, bias=False)


def depthwise() -> ModelProto:
    g = _Graph(32)
    return g.model(g.node("Relu", [g.conv("x", 32, 32, group=32)]))


def depthwise_strided() -> ModelProto:
    return _single_conv(16, 16, group=16, stride=2)


def grouped() -> ModelProto:
    return _single_conv(32, 32, group=2)


def conv_residual() -> ModelProto:
    """conv + bias, plus the block's input, then relu: the epilogue a ResNet block fuses."""
    g = _Graph(16)
    c = g.conv("x", 16, 16)
    return g.model(g.node("Relu", [g.node("Add", [c, "x"])]))


def max_pool() -> ModelProto:
    g = _Graph(16)
    c = g.node("Relu", [g.conv("x", 16, 16)])
    return g.model(g.node("MaxPool", [c], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))


def max_pool_unpadded() -> ModelProto:
    g = _Graph(16)
    return g.model(g.node("MaxPool", [g.conv("x", 16, 16)], kernel_shape=[2, 2],
                          strides=[2, 2]))


def max_pool_nchw() -> ModelProto:
    """A pool on the model's input (three channels: not channel-blocked)."""
    g = _Graph(3)
    return g.model(g.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[1, 1],
                          pads=[1] * 4))


def avg_pool_padded() -> ModelProto:
    g = _Graph(16)
    return g.model(g.node("AveragePool", [g.conv("x", 16, 16)], kernel_shape=[3, 3],
                          strides=[2, 2], pads=[1] * 4))


def avg_pool_counting_pads() -> ModelProto:
    g = _Graph(16)
    return g.model(g.node("AveragePool", [g.conv("x", 16, 16)], kernel_shape=[3, 3],
                          strides=[1, 1], pads=[1] * 4, count_include_pad=1))


def avg_pool_unpadded() -> ModelProto:
    g = _Graph(16)
    return g.model(g.node("AveragePool", [g.conv("x", 16, 16)], kernel_shape=[2, 2],
                          strides=[2, 2]))


def global_avg_pool() -> ModelProto:
    g = _Graph(16)
    c = g.node("Relu", [g.conv("x", 16, 32)])
    return g.model(g.node("GlobalAveragePool", [c]))


def global_max_pool() -> ModelProto:
    g = _Graph(16)
    return g.model(g.node("GlobalMaxPool", [g.conv("x", 16, 32)]))


def _basic_block(g: _Graph, x: str, cin: int, cout: int, stride: int) -> str:
    """A ResNet basic block: two 3x3 convs (the first maybe strided), the shortcut a strided
    1x1 conv where the shape changes, added before the last relu."""
    a = g.node("Relu", [g.conv(x, cin, cout, stride=stride)])
    b = g.conv(a, cout, cout)
    short = x if stride == 1 and cin == cout else g.conv(x, cin, cout, k=1, pad=0,
                                                          stride=stride)
    return g.node("Relu", [g.node("Add", [b, short])])


def resnet_block() -> ModelProto:
    g = _Graph(16)
    y = _basic_block(g, "x", 16, 16, 1)
    return g.model(_basic_block(g, y, 16, 32, 2))


def serving_cnn() -> ModelProto:
    """benchmarks/serving.py's "images" CNN (narrower): a 7x7 stride-2 stem, a 3x3 stride-2
    max pool, blocks of two 3x3 convs with relus (stride 1, 2, 2), global average pooling,
    flatten and a fully-connected head."""
    g = _Graph(3)
    y = g.node("Relu", [g.conv("x", 3, 16, k=7, stride=2, pad=3)])
    y = g.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    for cin, cout, stride in ((16, 16, 1), (16, 32, 2), (32, 64, 2)):
        y = g.node("Relu", [g.conv(y, cin, cout, stride=stride, bias=False)])
        y = g.node("Relu", [g.conv(y, cout, cout, bias=False)])
    y = g.node("Flatten", [g.node("GlobalAveragePool", [y])], axis=1)
    w = g.const(RNG.standard_normal((64, 10)), "fc")
    b = g.const(RNG.standard_normal(10) * 0.1, "fcb")
    return g.model(g.node("Gemm", [y, w, b]), rank=2)


MODELS = [conv3x3, conv3x3_relu, conv_strided, conv_stem, conv1x1, conv1x1_strided, depthwise,
          depthwise_strided, grouped, conv_residual, max_pool, max_pool_unpadded,
          max_pool_nchw, avg_pool_padded, avg_pool_counting_pads, avg_pool_unpadded,
          global_avg_pool, global_max_pool, resnet_block, serving_cnn]


# -- compiling once, running at every size ------------------------------------------------------

def compile_once(model: ModelProto) -> Module:
    """The model compiled for every size within :data:`BOUNDS`, failing on any warning (a
    symbolic compile that falls back to per-size modules warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = tessera.compile(model, "llvm", dim_bounds=BOUNDS)
    assert isinstance(mod, Module), type(mod)
    (region,) = mod.compiled.values()
    assert region.backend == "llvm"
    assert set(region.size_names) <= set(BOUNDS) and "width" in region.size_names
    return mod


def width_tile() -> int:
    """The register tile's width of a run-time-width convolution on the host CPU."""
    fn = import_onnx(conv3x3(), symbolic=True, dim_bounds=BOUNDS)
    (kernel,) = [k for k in lower_region(fn, _host_cpu()).kernels if "Conv" in k.op]
    return int(kernel.config["reg_n"])


def _host_cpu() -> CPUInfo:
    from tessera_llvm.cpu import cpu_info

    return cpu_info()


def sizes(tile: int) -> list[tuple[int, int, int]]:
    """(batch, height, width): widths of one, odd ones, around the tile and twice the tile
    (the strided models' output widths; 16 and 32 too: a tile of one output block is 16
    columns wide with 32 registers), and the bound."""
    top_h, top_w = BOUNDS["height"][1], BOUNDS["width"][1]
    around = {tile - 1, tile, tile + 1, 2 * tile - 1, 2 * tile, 2 * tile + 1}
    widths = sorted(({1, 3, 7, 15, 16, 17, top_w} | around) - {0})
    widths = [w for w in widths if w <= top_w]
    heights = [5, 1, 8, 3, top_h, 2, 11]
    batches = [1, 2, 1, 3]
    return [(batches[i % len(batches)], heights[i % len(heights)], w)
            for i, w in enumerate(widths)]


@pytest.fixture(scope="module")
def tile() -> int:
    return width_tile()


@pytest.mark.parametrize("make", MODELS, ids=[m.__name__ for m in MODELS])
def test_one_module_matches_onnxruntime_at_every_size(make: Any, tile: int) -> None:
    model = make()
    mod = compile_once(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    channels = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    checked = 0
    for n, h, w in sizes(tile):
        if make in (max_pool_unpadded, avg_pool_unpadded) and min(h, w) < 2:
            continue  # smaller than the 2x2 window: no output (onnxruntime truncates to one)
        x = RNG.standard_normal((n, channels, h, w)).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        got = next(iter(mod.run(x=x).values()))
        assert got.shape == want.shape, (n, h, w)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"batch {n}, height {h}, width {w}")
        checked += 1
    assert checked >= 6


# -- the kernel over a run-time width -----------------------------------------------------------

def _conv_kernels(model: ModelProto) -> list[Any]:
    fn = import_onnx(model, symbolic=True, dim_bounds=BOUNDS)
    return [k for k in lower_region(fn, CPU).kernels if "ConvNCHWc" in k.op]


@pytest.mark.parametrize("make", [conv3x3_relu, conv_strided, depthwise, conv_residual],
                         ids=["conv3x3_relu", "conv_strided", "depthwise", "conv_residual"])
def test_width_tail_is_specialised_not_guarded(make: Any) -> None:
    """The tile loop over a run-time width runs whole tiles unguarded; the last, partial tile
    is one copy per remainder (``width % tile == r``); no other condition on the width (a
    guard per column or per accumulator) is left in the kernel, nor one on the batch or the
    rows (the parallel loop's indices stay within their extents)."""
    (kernel,) = _conv_kernels(make())
    tile = int(kernel.config["reg_n"])
    assert tile > 1 and not kernel.config.get("flat_tiles")
    # fewer channels than Winograd's default rule asks for: the direct convolution
    assert kernel.config.get("template", "direct") == "direct"
    conds: list[str] = []
    parallel: list[S.For] = []

    def visit(n: Any) -> None:
        if isinstance(n, S.IfThenElse):
            conds.append(repr(n.condition))
        if isinstance(n, S.For) and n.kind == S.ForKind.PARALLEL:
            parallel.append(n)

    post_order_visit(inline_size_lets(kernel.func).body, visit)
    switch = [c for c in conds if re.fullmatch(rf"\(\(.*width.* % {tile}\) == \d+\)", c)]
    assert len(switch) == tile - 1, conds
    others = [c for c in conds if c not in switch]
    assert not [c for c in others if re.search(r"\b(width|height|batch)\b", c)], others
    assert parallel, "no parallel loop"


@pytest.mark.parametrize("make", [conv3x3_relu, conv_strided, depthwise, conv_residual],
                         ids=["conv3x3_relu", "conv_strided", "depthwise", "conv_residual"])
def test_tiles_are_written_out_in_straight_line_code(make: Any) -> None:
    """Each register tile (its columns, its output-channel blocks) is read out without a loop
    (which would read the accumulator at a variable offset and keep it in memory), in the
    whole tiles and in every copy for a remainder of the width."""
    (kernel,) = _conv_kernels(make())
    assert tile_reads_in_loops(kernel.func) == []


def test_static_convolution_keeps_its_schedule() -> None:
    """A model whose sizes are all static takes the static schedule (its knobs, Winograd
    among them for a 3x3 stride-1 convolution), not the run-time-size one."""
    fn = import_onnx(conv3x3_relu(), {"x": [1, 16, 14, 14]})
    (kernel,) = [k for k in lower_region(fn, CPU).kernels if "Conv" in k.op]
    assert "template" in kernel.config and "ic_block" in kernel.config


# -- what stays refused -------------------------------------------------------------------------

def test_resize_over_runtime_sizes_is_refused_naming_the_node() -> None:
    """Resizing a run-time-size image to a fixed size: the llvm backend refuses it (a
    CompileError naming the node) rather than compiling it wrong."""
    fn = Function("g", attrs={"dim_bounds": {"height": (1, 24), "width": (1, 40)}})
    x = fn.add_input("x", TensorType((1, 16, "height", "width"), DType.float32))
    fn.outputs = [fn.op("Resize", x, scales=[1.0, 1.0, 2.0, 2.0], sizes=[1, 16, 32, 32],
                        mode="nearest", name="up")]
    assert fn.outputs[0].type.shape == (1, 16, 32, 32)
    with pytest.raises(CompileError, match=r"node up \(Resize\).*run-time sizes"):
        tessera.compile(fn, "llvm")


def test_lp_pool_over_runtime_sizes_is_refused_naming_the_node() -> None:
    g = _Graph(16)
    y = g.node("LpPool", [g.conv("x", 16, 16)], kernel_shape=[2, 2], strides=[2, 2], p=2)
    with pytest.raises(CompileError, match=rf"LpPool_{y} \(LpPool\).*run-time sizes"):
        tessera.compile(g.model(y), "llvm", shape_mode="symbolic", dim_bounds=BOUNDS)


def test_ceil_mode_pool_over_runtime_sizes_is_an_error() -> None:
    g = _Graph(16)
    y = g.node("MaxPool", [g.conv("x", 16, 16)], kernel_shape=[3, 3], strides=[2, 2],
               ceil_mode=1)
    with pytest.raises(TesseraError, match="ceil_mode"):
        tessera.compile(g.model(y), "llvm", shape_mode="symbolic", dim_bounds=BOUNDS)
