"""Winograd convolution over run-time image sizes: ONNX models of 3x3 stride-1 pad-1
convolutions (bias + relu, a residual add, a chain) with symbolic batch, height and width
compile ONCE for the llvm backend, their convolutions take the Winograd template (F(4x4) and,
with smaller bounds, F(2x2)), and the one module matches onnxruntime at every size: partial
last tiles along both axes (sizes 1 to 17 around the tile sizes), the bound, non-square
images and several batches."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

import tessera
from tessera.frontend.onnx.importer import import_onnx
from tessera.runtime.module import Module
from tessera.tir import stmt as S
from tessera.tir.functor import post_order_visit
from tessera.tir.transform.hoist_sizes import inline_size_lets
from tessera_llvm.cpu import cpu_info
from tessera_llvm.lowering import lower_region
from tessera_llvm.schedules import winograd

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(7)
#: Bounds whose tile choice (at half the bounds) is F(4x4) (at least 16 x 16) and, with
#: AVX-512's 16 lanes, F(2x2).
BOUNDS_F4 = {"batch": (1, 3), "height": (1, 36), "width": (1, 40)}
BOUNDS_F2 = {"batch": (1, 3), "height": (1, 24), "width": (1, 40)}
CHANNELS = 64


@pytest.fixture(autouse=True)
def _winograd_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Winograd the default for 64 channels on the host CPU (CPUs whose lane count has no
    measured rule, such as NEON's 4, keep the direct convolution otherwise)."""
    lanes = cpu_info().vector_lanes
    if lanes not in winograd.MIN_CHANNELS:
        monkeypatch.setitem(winograd.MIN_CHANNELS, lanes, CHANNELS)


# -- models -------------------------------------------------------------------------------------

def _const(inits: list[Any], array: np.ndarray, name: str) -> str:
    inits.append(numpy_helper.from_array(array.astype(np.float32), name))
    return name


def _conv(nodes: list[Any], inits: list[Any], x: str, cin: int, cout: int, name: str,
          bias: bool = True) -> str:
    w = RNG.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)
    inputs = [x, _const(inits, w, f"{name}_w")]
    if bias:
        inputs.append(_const(inits, RNG.standard_normal(cout) * 0.1, f"{name}_b"))
    nodes.append(helper.make_node("Conv", inputs, [name], name=name, kernel_shape=[3, 3],
                                  strides=[1, 1], pads=[1, 1, 1, 1]))
    return name


def _model(nodes: list[Any], inits: list[Any], y: str, cin: int) -> ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", cin, "height", "width"])
    out = helper.make_tensor_value_info(y, TensorProto.FLOAT, ["batch", None, None, None])
    graph = helper.make_graph(nodes, "g", [x], [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def conv_bias_relu() -> ModelProto:
    nodes: list[Any] = []
    inits: list[Any] = []
    c = _conv(nodes, inits, "x", CHANNELS, CHANNELS, "conv")
    nodes.append(helper.make_node("Relu", [c], ["y"], name="relu"))
    return _model(nodes, inits, "y", CHANNELS)


def conv_residual() -> ModelProto:
    """conv + bias, plus the block's input, then relu: a ResNet block's epilogue."""
    nodes: list[Any] = []
    inits: list[Any] = []
    c = _conv(nodes, inits, "x", CHANNELS, CHANNELS, "conv")
    nodes.append(helper.make_node("Add", [c, "x"], ["sum"], name="add"))
    nodes.append(helper.make_node("Relu", ["sum"], ["y"], name="relu"))
    return _model(nodes, inits, "y", CHANNELS)


def conv_chain() -> ModelProto:
    """Two convolutions (the second without bias, wider) with relus."""
    nodes: list[Any] = []
    inits: list[Any] = []
    a = _conv(nodes, inits, "x", CHANNELS, CHANNELS, "conv1")
    nodes.append(helper.make_node("Relu", [a], ["r1"], name="relu1"))
    b = _conv(nodes, inits, "r1", CHANNELS, 2 * CHANNELS, "conv2", bias=False)
    nodes.append(helper.make_node("Relu", [b], ["y"], name="relu2"))
    return _model(nodes, inits, "y", CHANNELS)


MODELS = [conv_bias_relu, conv_residual, conv_chain]


def sizes(bounds: dict[str, tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(batch, height, width): 1 to 17 around the tiles (both axes, mostly non-square), the
    bound, several batches."""
    top_h, top_w = bounds["height"][1], bounds["width"][1]
    sides = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17]
    out = [(1, top_h, top_w), (2, top_h, top_w), (3, 1, 1), (1, 4, 4), (2, 8, 8)]
    for i, s in enumerate(sides):
        other = sides[(i + 3) % len(sides)]
        out.append((1 + i % 3, min(s, top_h), min(other, top_w)))
        out.append((1 + (i + 1) % 3, min(other, top_h), min(s, top_w)))
    return out


def compile_once(model: ModelProto, bounds: dict[str, tuple[int, int]]) -> Module:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to per-size modules warns
        mod = tessera.compile(model, "llvm", dim_bounds=bounds)
    assert isinstance(mod, Module), type(mod)
    return mod


def conv_configs(mod: Module) -> list[dict[str, Any]]:
    (region,) = mod.compiled.values()
    return [s["config"] for s in region.info["schedules"].values()
            if s["template"] == "conv2d_NCHWc"]


@pytest.mark.parametrize("bounds", [BOUNDS_F4, BOUNDS_F2], ids=["F4", "F2"])
@pytest.mark.parametrize("make", MODELS, ids=[m.__name__ for m in MODELS])
def test_symbolic_winograd_matches_onnxruntime(make: Any,
                                               bounds: dict[str, tuple[int, int]]) -> None:
    model = make()
    mod = compile_once(model, bounds)
    configs = conv_configs(mod)
    assert configs and all(c.get("template") == "winograd" for c in configs), configs
    # the tile is chosen at half the bounds (output size = input size here)
    tile = winograd.default_tile(bounds["height"][1] // 2, bounds["width"][1] // 2, CHANNELS,
                                 cpu_info().vector_lanes)
    assert all(c["winograd_tile"] == tile for c in configs), configs
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n, h, w in sizes(bounds):
        x = RNG.standard_normal((n, CHANNELS, h, w)).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        got = next(iter(mod.run(x=x).values()))
        assert got.shape == want.shape, (n, h, w)
        scale = float(np.abs(want).max()) or 1.0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale,
                                   err_msg=f"batch {n}, height {h}, width {w}")


def test_product_over_runtime_tiles_has_no_guards() -> None:
    """The batched product's last, partial register tile over the run-time tile count is one
    copy per remainder (``tiles % reg_n == r``), no other condition in its loops; the output
    transform stores only pixels inside (its guards name the height and the width)."""
    fn = import_onnx(conv_bias_relu(), symbolic=True, dim_bounds=BOUNDS_F4)
    (kernel,) = [k for k in lower_region(fn, cpu_info()).kernels if "Conv" in k.op]
    assert kernel.config["template"] == "winograd"
    body = inline_size_lets(kernel.func).body
    conds: list[str] = []
    post_order_visit(body, lambda n: conds.append(repr(n.condition))
                     if isinstance(n, S.IfThenElse) else None)
    loops: list[S.For] = []
    post_order_visit(body, lambda n: loops.append(n) if isinstance(n, S.For)
                     and n.kind == S.ForKind.PARALLEL else None)
    gemm = []
    for loop in loops:
        stores: set[str] = set()
        guards: list[str] = []

        def visit(n: Any, stores: set[str] = stores, guards: list[str] = guards) -> None:
            if isinstance(n, S.BufferStore):
                stores.add(n.buffer.name)
            if isinstance(n, S.IfThenElse):
                guards.append(repr(n.condition))

        post_order_visit(loop.body, visit)
        if any(name.endswith("winograd_gemm") for name in stores):
            gemm.append(guards)
    assert len(gemm) == 1, f"{len(gemm)} loops store the product"
    reg_n = int(kernel.config["winograd_reg_n"])
    switch = [c for c in gemm[0] if re.fullmatch(rf"\(\(.*batch.* % {reg_n}\) == \d+\)", c)]
    assert len(switch) == reg_n - 1 and len(gemm[0]) == len(switch), gemm[0]
    assert any("height" in c for c in conds) and any("width" in c for c in conds), conds
