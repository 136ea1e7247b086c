"""Regions with run-time sizes on the cuda backend (``CUDABackend.symbolic_extents``): a model
with symbolic input dimensions compiles once into one module whose kernels take the sizes at
run time (fixed tiles, guarded tails, grids that are ceiling divisions of size expressions).

Checked without a GPU in two ways: the lowered regions' CUDA C run on the host at several
sizes of each variable (0, 1, a tile's size and its neighbours, the bound) against numpy, and
whole models compiled for ``cuda`` through the fake driver (the kernels run as host code,
CUDA graphs made per set of sizes) against the reference backend. Convolutions over run-time
sizes are refused with a CompileError naming the node, so ``shape_mode="auto"`` compiles per
size instead. The last test runs the encoder on a real GPU where one is present."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from plugins.cuda.tests.conftest import needs_cxx, needs_gpu, needs_nvrtc
from tessera.errors import CompileError
from tessera.frontend.onnx import import_onnx
from tessera.ir.symbolic import dim_bounds_scope
from tessera.passes import PassManager
from tessera.runtime.module import Module
from tessera_cuda.emulate import run_on_host
from tessera_cuda.graphs import SIZED_GRAPHS
from tessera_cuda.host_exec import HostModule
from tessera_cuda.lowering import LoweredRegion, lower_region
from tessera_cuda.nvrtc import compile_cuda
from tessera_cuda.schedules import GPUInfo

N = helper.make_node
RNG = np.random.default_rng(7)
D = 16  # the encoder's width


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, list[Any]],
           outputs: dict[str, list[Any]], inits: Sequence[onnx.TensorProto] = ()
           ) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "sym",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _const(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _data(*shape: int) -> np.ndarray:
    """Random values away from zero."""
    x = RNG.uniform(0.25, 1.5, shape) * RNG.choice([-1.0, 1.0], shape)
    return x.astype(np.float32)


def encoder_model(heads: int = 2, ff: int = 32) -> onnx.ModelProto:
    """A pre-norm transformer encoder layer, ``x: float32[batch, seq, 16]`` -> ``y`` of its
    shape: layer norm, Q/K/V projections split into heads (Reshape, Transpose), scores
    ``Q K^T`` scaled, a softmax over the sequence, ``@ V``, heads merged, the output
    projection and residual, a second layer norm and a ReLU feed-forward with residual."""
    dh = D // heads
    inits = [_const(f"w{t}", D, D) for t in "qkvo"] + [_const(f"b{t}", D) for t in "qkvo"] + [
        _const("w1", D, ff), _const("b1", ff), _const("w2", ff, D), _const("b2", D),
        numpy_helper.from_array((1 + 0.1 * RNG.standard_normal(D)).astype(np.float32), "g1"),
        numpy_helper.from_array((1 + 0.1 * RNG.standard_normal(D)).astype(np.float32), "g2"),
        _const("e1", D, scale=0.1), _const("e2", D, scale=0.1),
        numpy_helper.from_array(np.array([0, 0, heads, dh], np.int64), "split"),
        numpy_helper.from_array(np.array([0, 0, D], np.int64), "merge"),
        numpy_helper.from_array(np.array(1 / np.sqrt(dh), np.float32), "scale")]
    nodes = [N("LayerNormalization", ["x", "g1", "e1"], ["ln1"], axis=-1, epsilon=1e-5)]
    for t in "qkv":
        nodes += [N("MatMul", ["ln1", f"w{t}"], [f"{t}0"]),
                  N("Add", [f"{t}0", f"b{t}"], [f"{t}1"]),
                  N("Reshape", [f"{t}1", "split"], [f"{t}2"])]
    nodes += [
        N("Transpose", ["q2"], ["q"], perm=[0, 2, 1, 3]),
        N("Transpose", ["k2"], ["kt"], perm=[0, 2, 3, 1]),
        N("Transpose", ["v2"], ["v"], perm=[0, 2, 1, 3]),
        N("MatMul", ["q", "kt"], ["s0"]), N("Mul", ["s0", "scale"], ["s1"]),
        N("Softmax", ["s1"], ["p"], axis=-1),
        N("MatMul", ["p", "v"], ["c0"]), N("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
        N("Reshape", ["c1", "merge"], ["c2"]),
        N("MatMul", ["c2", "wo"], ["o0"]), N("Add", ["o0", "bo"], ["o1"]),
        N("Add", ["x", "o1"], ["r1"]),
        N("LayerNormalization", ["r1", "g2", "e2"], ["ln2"], axis=-1, epsilon=1e-5),
        N("MatMul", ["ln2", "w1"], ["f0"]), N("Add", ["f0", "b1"], ["f1"]),
        N("Relu", ["f1"], ["f2"]), N("MatMul", ["f2", "w2"], ["f3"]),
        N("Add", ["f3", "b2"], ["f4"]), N("Add", ["r1", "f4"], ["y"])]
    return _model(nodes, {"x": ["batch", "seq", D]}, {"y": ["batch", "seq", D]}, inits)


# -- host emulation of lowered symbolic regions ------------------------------------------------

def _lower(model: onnx.ModelProto, bounds: dict[str, tuple[int, int]]
           ) -> tuple[LoweredRegion, HostModule]:
    graph = import_onnx(model, None, None, symbolic=True, dim_bounds=bounds)
    with dim_bounds_scope(bounds):
        graph = PassManager(opt_level=3).run(graph)
    assert graph.is_symbolic
    lowered = lower_region(graph, GPUInfo())
    assert lowered.size_names and all(g.kernels.func.size_vars for g in lowered.groups)
    assert compile_cuda(lowered.source.text, "sm_90").cubin  # NVRTC takes the source
    return lowered, HostModule(lowered.source)


def _run(lowered: LoweredRegion, host: HostModule, inputs: dict[str, np.ndarray],
         sizes: dict[str, int]) -> np.ndarray:
    out = run_on_host(lowered, inputs, sizes=sizes, module=host)
    return next(iter(out.values()))


def _around(tile: int, bound: int, low: int = 0) -> list[int]:
    """0 (or ``low``), 1, a tile's size and its neighbours, and the bound."""
    return sorted({v for v in (low, 1, tile - 1, tile, tile + 1, bound) if low <= v <= bound})


def _config(lowered: LoweredRegion, template: str) -> dict[str, Any]:
    group = next(g for g in lowered.groups if g.template == template)
    return group.config


@needs_cxx
@needs_nvrtc
def test_elementwise_chain_and_broadcast_at_run_time_sizes() -> None:
    model = _model([N("Mul", ["x", "w"], ["a"]), N("Add", ["a", "b"], ["c"]),
                    N("Sigmoid", ["c"], ["d"]), N("Mul", ["d", "x"], ["y"])],
                   {"x": ["n", 5]}, {"y": ["n", 5]}, [_const("w", 5), _const("b", 1)])
    w = numpy_helper.to_array(model.graph.initializer[0])
    b = numpy_helper.to_array(model.graph.initializer[1])
    lowered, host = _lower(model, {"n": (0, 300)})
    threads = int(lowered.groups[0].config["threads"])
    for n in _around(threads, 300) + [-(-threads // 5) + 1]:
        x = _data(n, 5)
        c = x * w + b
        want = x / (1 + np.exp(-c))
        np.testing.assert_allclose(_run(lowered, host, {"x": x}, {"n": n}), want,
                                   rtol=1e-5, atol=1e-6)


@needs_cxx
@needs_nvrtc
def test_reduction_over_a_run_time_axis() -> None:
    model = _model([N("ReduceSum", ["x", "axes"], ["s"], keepdims=0),
                    N("Tanh", ["s"], ["y"])],
                   {"x": [3, "n"]}, {"y": [3]},
                   [numpy_helper.from_array(np.array([1], np.int64), "axes")])
    lowered, host = _lower(model, {"n": (0, 200)})
    group = next(g for g in lowered.groups if g.template != "" and "Reduce" in g.op)
    tile = int(group.config.get("threads", 32))
    for n in _around(tile, 200):
        x = _data(3, n) / 8
        np.testing.assert_allclose(_run(lowered, host, {"x": x}, {"n": n}),
                                   np.tanh(x.sum(axis=1)), rtol=1e-5, atol=1e-6)


@needs_cxx
@needs_nvrtc
def test_softmax_over_a_run_time_axis() -> None:
    model = _model([N("Softmax", ["x"], ["y"], axis=-1)], {"x": ["rows", "n"]},
                   {"y": ["rows", "n"]})
    lowered, host = _lower(model, {"rows": (0, 9), "n": (1, 150)})
    threads = max(int(g.config.get("threads", 0)) for g in lowered.groups)
    for rows, n in [(r, n) for n in _around(threads, 150, low=1) for r in (1, 9)] + [(0, 4)]:
        x = _data(rows, n) * 3
        e = np.exp(x - x.max(axis=-1, keepdims=True)) if rows else x
        want = e / e.sum(axis=-1, keepdims=True) if rows else x
        np.testing.assert_allclose(_run(lowered, host, {"x": x}, {"rows": rows, "n": n}),
                                   want, rtol=1e-5, atol=1e-6)


@needs_cxx
@needs_nvrtc
def test_layer_norm_over_run_time_rows() -> None:
    model = _model([N("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
                   {"x": ["batch", "seq", 48]}, {"y": ["batch", "seq", 48]},
                   [_const("g", 48), _const("b", 48)])
    g = numpy_helper.to_array(model.graph.initializer[0])
    b = numpy_helper.to_array(model.graph.initializer[1])
    lowered, host = _lower(model, {"batch": (0, 3), "seq": (0, 70)})
    for batch, seq in [(1, 1), (2, 31), (1, 32), (3, 33), (3, 70), (0, 5), (2, 0)]:
        x = _data(batch, seq, 48)
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        want = (x - mean) / np.sqrt(var + 1e-5) * g + b
        got = _run(lowered, host, {"x": x}, {"batch": batch, "seq": seq})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@needs_cxx
@needs_nvrtc
def test_matmul_with_run_time_rows_and_epilogue() -> None:
    model = _model([N("MatMul", ["x", "w"], ["h"]), N("Add", ["h", "b"], ["hb"]),
                    N("Relu", ["hb"], ["y"])],
                   {"x": ["rows", 24]}, {"y": ["rows", 40]}, [_const("w", 24, 40),
                                                               _const("b", 40)])
    w = numpy_helper.to_array(model.graph.initializer[0])
    b = numpy_helper.to_array(model.graph.initializer[1])
    lowered, host = _lower(model, {"rows": (0, 200)})
    cfg = _config(lowered, "cuda_dense")
    tile = int(cfg["tm"]) * int(cfg["ty"])  # output rows per block
    for rows in _around(tile, 200) + [2 * tile + 1]:
        x = _data(rows, 24)
        want = np.maximum(x @ w + b, 0)
        np.testing.assert_allclose(_run(lowered, host, {"x": x}, {"rows": rows}), want,
                                   rtol=1e-4, atol=1e-5)


@needs_cxx
@needs_nvrtc
def test_attention_shaped_batched_matmuls_over_the_sequence() -> None:
    """``softmax(Q K^T) V`` with the sequence run-time: rows of both products, the reduction
    of the second (through shared memory in steps of ``bk``) and the softmax's axis."""
    model = _model([N("MatMul", ["q", "kt"], ["s"]), N("Softmax", ["s"], ["p"], axis=-1),
                    N("MatMul", ["p", "v"], ["y"])],
                   {"q": ["batch", 2, "seq", 8], "kt": ["batch", 2, 8, "seq"],
                    "v": ["batch", 2, "seq", 8]}, {"y": ["batch", 2, "seq", 8]})
    lowered, host = _lower(model, {"batch": (0, 2), "seq": (1, 80)})
    dense = [g.config for g in lowered.groups if g.template == "cuda_dense"]
    assert len(dense) == 2
    edges = {int(c["tm"]) * int(c["ty"]) for c in dense} | {int(c["bk"]) for c in dense}
    seqs = sorted({s for e in edges for s in _around(e, 80, low=1)})
    for batch, seq in [(2, s) for s in seqs] + [(0, 3), (1, 80)]:
        q, kt, v = _data(batch, 2, seq, 8), _data(batch, 2, 8, seq), _data(batch, 2, seq, 8)
        s = q @ kt
        e = np.exp(s - s.max(axis=-1, keepdims=True)) if s.size else s
        want = (e / e.sum(axis=-1, keepdims=True)) @ v if s.size else np.zeros_like(q)
        got = _run(lowered, host, {"q": q, "kt": kt, "v": v}, {"batch": batch, "seq": seq})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seq={seq}")


# -- whole models through the fake driver ------------------------------------------------------

BOUNDS = {"batch": (0, 3), "seq": (1, 40)}
SIZES = [(1, 1), (2, 7), (1, 31), (3, 32), (2, 33), (3, 40), (0, 5)]


def _reference(model: onnx.ModelProto) -> Module:
    return tessera.compile(model, target="ref", dim_bounds=BOUNDS)


@needs_cxx
@needs_nvrtc
def test_encoder_compiles_once_for_cuda_and_runs_at_every_size(fake_gpu) -> None:  # noqa: ANN001
    model = encoder_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto: no fallback to per-size compiles
        mod = tessera.compile(model, target="cuda", dim_bounds=BOUNDS)
    assert type(mod).__name__ == "Module"
    report = mod.partition_report()
    assert not report.fallback and {r.backend for r in report.regions} == {"cuda"}
    ref = _reference(model)
    for batch, seq in SIZES + [(2, 7)]:
        x = _data(batch, seq, D)
        got = mod.run(x=x)["y"]
        assert got.shape == (batch, seq, D)
        np.testing.assert_allclose(got, ref.run(x=x)["y"], rtol=1e-4, atol=1e-4,
                                   err_msg=f"batch={batch}, seq={seq}")
    # the launches took the sizes of each call (the grids of the last tile's block counts)
    (region,) = [r for r in mod.compiled.values() if r.backend == "cuda"]
    order = [region.size_names.index(n) for n in ("batch", "seq")]
    launched = {tuple(shape[3][k] for k in order) for shape in fake_gpu.launch_shapes
                if shape[3]}
    assert {(b, s) for b, s in SIZES if b} <= launched


@needs_cxx
@needs_nvrtc
def test_symbolic_regions_run_as_cuda_graphs_per_size(fake_gpu) -> None:  # noqa: ANN001
    model = _model([N("MatMul", ["x", "w"], ["h"]), N("Softmax", ["h"], ["y"], axis=1)],
                   {"x": ["batch", "seq", 8]}, {"y": ["batch", "seq", 8]}, [_const("w", 8, 8)])
    before = fake_gpu.live()["graph exec"]
    mod = tessera.compile(model, target="cuda", dim_bounds=BOUNDS, shape_mode="symbolic")
    ref = _reference(model)
    for batch, seq in [(1, 3), (2, 40), (1, 3), (3, 17)]:
        x = _data(batch, seq, 8)
        np.testing.assert_allclose(mod.run(x=x)["y"], ref.run(x=x)["y"], rtol=1e-5, atol=1e-6)
    assert fake_gpu.live()["graph exec"] == before + 3  # one per set of sizes, reused
    for seq in range(1, SIZED_GRAPHS + 4):  # more sizes than are kept: the oldest destroyed
        x = _data(2, seq, 8)
        np.testing.assert_allclose(mod.run(x=x)["y"], ref.run(x=x)["y"], rtol=1e-5, atol=1e-6)
    assert fake_gpu.live()["graph exec"] == before + SIZED_GRAPHS
    (region,) = [r for r in mod.compiled.values() if r.backend == "cuda"]
    assert sorted(region.size_names) == ["batch", "seq"]
    assert region.info["cuda_graph"] is True  # one graph per set of sizes
    captured = {shape[3] for shape in fake_gpu.launch_shapes}
    order = [region.size_names.index(n) for n in ("batch", "seq")]
    assert {tuple(s[k] for k in order) for s in captured if s} >= {(1, 3), (2, 40), (3, 17)}


@needs_cxx
@needs_nvrtc
def test_symbolic_module_round_trips_through_an_artifact(fake_gpu, tmp_path) -> None:  # noqa: ANN001
    model = _model([N("MatMul", ["x", "w"], ["h"]), N("Relu", ["h"], ["y"])],
                   {"x": ["batch", "seq", 8]}, {"y": ["batch", "seq", 12]},
                   [_const("w", 8, 12)])
    mod = tessera.compile(model, target="cuda", dim_bounds=BOUNDS, shape_mode="symbolic")
    path = mod.export(tmp_path / "sym.tar")
    again = tessera.load(path)
    w = numpy_helper.to_array(model.graph.initializer[0])
    for batch, seq in [(1, 1), (3, 33), (2, 40), (0, 2)]:
        x = _data(batch, seq, 8)
        np.testing.assert_allclose(again.run(x=x)["y"], np.maximum(x @ w, 0), rtol=1e-5,
                                   atol=1e-5)


@needs_cxx
@needs_nvrtc
def test_symbolic_module_cross_compiled_without_a_gpu_loads_on_one(tmp_path,  # noqa: ANN001
                                                                   monkeypatch) -> None:  # noqa: ANN001
    """Compiled for a named architecture where no GPU is (its kernels not loaded, the
    module refusing to run), exported, then loaded where the (fake) GPU is: the artifact's
    kernel table keeps the encoded launches and sizes, so it runs at every size."""
    from plugins.cuda.tests.fake_driver import FakeDriver
    from tessera_cuda import backend
    from tessera_cuda.driver import driver_missing, use_driver

    if driver_missing() is None:
        pytest.skip("a CUDA driver is here: cross-compiling is checked without one")
    model = _model([N("Softmax", ["x"], ["s"], axis=-1), N("MatMul", ["s", "w"], ["y"])],
                   {"x": ["batch", "seq", 8]}, {"y": ["batch", "seq", 4]}, [_const("w", 8, 4)])
    fake = FakeDriver()
    real = backend.build_region

    def build(*args: Any, **kwargs: Any) -> Any:
        built = real(*args, **kwargs)
        fake.programs[bytes(built.cubin)] = built.lowered.source
        return built

    monkeypatch.setattr(backend, "build_region", build)
    mod = tessera.compile(model, target="cuda -arch=sm_90", dim_bounds=BOUNDS,
                          shape_mode="symbolic")
    (region,) = [r for r in mod.compiled.values() if r.backend == "cuda"]
    assert region.info["loaded"] is False and sorted(region.size_names) == ["batch", "seq"]
    path = mod.export(tmp_path / "cross.tar")
    ref = _reference(model)
    with use_driver(fake):
        again = tessera.load(path)
        for batch, seq in [(1, 1), (3, 40), (2, 9)]:
            x = _data(batch, seq, 8)
            np.testing.assert_allclose(again.run(x=x)["y"], ref.run(x=x)["y"], rtol=1e-5,
                                       atol=1e-5)


def _conv_model() -> onnx.ModelProto:
    return _model([N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["y"])],
                  {"x": [1, 2, "h", "w"]}, {"y": [1, 3, "h", "w"]}, [_const("w", 3, 2, 3, 3)])


@needs_cxx
@needs_nvrtc
def test_conv_over_run_time_sizes_is_refused_and_auto_compiles_per_size(fake_gpu) -> None:  # noqa: ANN001
    model = _conv_model()
    bounds = {"h": (1, 16), "w": (1, 16)}
    with pytest.raises(CompileError, match=r"node \S+ \(Conv\).*run-time sizes"):
        tessera.compile(model, target="cuda", dim_bounds=bounds, shape_mode="symbolic")
    with pytest.warns(RuntimeWarning, match=r"\(Conv\)"):
        mod = tessera.compile(model, target="cuda", dim_bounds=bounds)
    assert type(mod).__name__ != "Module"
    ref = tessera.compile(model, target="ref", dim_bounds=bounds)
    for h, w in [(5, 7), (16, 1)]:
        x = _data(1, 2, h, w)
        np.testing.assert_allclose(mod.run(x=x)["y"], ref.run(x=x)["y"], rtol=1e-4,
                                   atol=1e-5)


# -- a real GPU ------------------------------------------------------------------------------------

@pytest.mark.gpu
@needs_gpu
def test_encoder_compiled_once_on_the_gpu() -> None:
    model = encoder_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = tessera.compile(model, target="cuda", dim_bounds=BOUNDS)
    assert type(mod).__name__ == "Module"
    report = mod.partition_report()
    assert not report.fallback and {r.backend for r in report.regions} == {"cuda"}
    ref = _reference(model)
    for batch, seq in SIZES + [(3, 40), (1, 1)]:
        x = _data(batch, seq, D)
        np.testing.assert_allclose(mod.run(x=x)["y"], ref.run(x=x)["y"], rtol=1e-4,
                                   atol=1e-4, err_msg=f"batch={batch}, seq={seq}")
