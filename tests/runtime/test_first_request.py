"""What a service's first request must not pay for: a compile's garbage (collected before
``compile`` returns), the BLAS pools' discovery (done when a reference region compiles) and
huge-page faults in an arena planned at the size bounds (a symbolic module's arena comes from
``Device.allocate_sparse``)."""

from __future__ import annotations

import gc
import mmap
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import api
from tessera.backends.reference import blas
from tessera.ir.types import TensorType
from tessera.plugin.device import ALIGNMENT, CPUDevice
from tessera.runtime.module import Module


def _symbolic_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _static_model() -> onnx.ModelProto:
    model = _symbolic_model()
    for v in (*model.graph.input, *model.graph.output):
        v.type.tensor_type.shape.dim[0].dim_value = 3
    return model


@pytest.mark.parametrize("size", [1, 63, 64, 4097, 3 << 20])
def test_sparse_arena_is_aligned_writable_and_zero(size: int) -> None:
    arena = CPUDevice().allocate_sparse(size)
    assert arena.dtype == np.uint8 and arena.shape == (size,)
    assert arena.ctypes.data % ALIGNMENT == 0 and arena.flags.writeable
    assert not arena[:: max(size // 97, 1)].any()
    arena[-1] = 7
    view = CPUDevice().view(arena, 0, TensorType((size // 4,), "float32"))
    view[...] = 1.5
    assert float(view.sum()) == 1.5 * (size // 4)


def test_a_symbolic_module_runs_in_a_sparse_arena(monkeypatch: pytest.MonkeyPatch,
                                                   rng: np.random.Generator) -> None:
    calls: list[str] = []
    original_sparse, original = CPUDevice.allocate_sparse, CPUDevice.allocate

    def sparse(self: CPUDevice, nbytes: int) -> Any:
        calls.append("sparse")
        return original_sparse(self, nbytes)

    def dense(self: CPUDevice, nbytes: int) -> Any:
        calls.append("dense")
        return original(self, nbytes)

    monkeypatch.setattr(CPUDevice, "allocate_sparse", sparse)
    monkeypatch.setattr(CPUDevice, "allocate", dense)
    mod = tessera.compile(_symbolic_model(), "ref", dim_bounds={"n": (0, 5000)})
    assert isinstance(mod, Module)
    for n in (1, 17, 5000):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_array_equal(mod.run(x=x)["y"], -np.maximum(x, 0))
    assert calls == ["sparse"]
    static = tessera.compile(_static_model(), "ref")
    x = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_array_equal(static.run(x=x)["y"], -np.maximum(x, 0))
    assert calls == ["sparse", "dense"]


@pytest.mark.skipif(not hasattr(mmap, "MADV_NOHUGEPAGE"), reason="no MADV_NOHUGEPAGE here")
def test_sparse_arena_asks_for_small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    original = mmap.mmap.madvise

    class Recording(mmap.mmap):
        def madvise(self, option: int, *rest: Any) -> None:
            seen.append(option)
            original(self, option, *rest)

    monkeypatch.setattr(mmap, "mmap", Recording)
    CPUDevice().allocate_sparse(1 << 22)
    assert seen == [mmap.MADV_NOHUGEPAGE]


def test_a_long_compile_collects_its_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    collected: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(a) or 0)
    monkeypatch.setattr(api, "GC_AFTER_COMPILE_S", 0.0)
    tessera.compile(_static_model(), "ref")
    assert collected == [()]
    monkeypatch.setattr(api, "GC_AFTER_COMPILE_S", 1e9)  # a short compile skips it
    tessera.compile(_static_model(), "ref")
    assert collected == [()]


def test_compiling_a_reference_region_finds_the_blas_pools(
        monkeypatch: pytest.MonkeyPatch) -> None:
    limit = blas.BlasLimit()
    found: list[int] = []
    monkeypatch.setattr(blas, "_controller", lambda: found.append(1) or False)
    monkeypatch.setattr(blas, "configured_threads", lambda: 1)
    monkeypatch.setattr("tessera.backends.reference.backend.BLAS_THREADS", limit)
    mod = tessera.compile(_static_model(), "ref")
    assert found == [1]
    mod.run(x=np.ones((3, 8), np.float32))
    assert found == [1]  # not again at the first run


def test_sizes_only_outputs_are_right_from_many_threads_at_many_sizes() -> None:
    """The reference backend keeps a sizes-only node's outputs per binding (and per execution
    state): threads calling one module at interleaved sizes each get their own size's."""
    import threading

    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["n"], axis=0),
             helper.make_node("Range", ["zero", "n", "one"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "posf"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(v, np.int64), k)
             for k, v in (("zero", 0), ("one", 1))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n"])
    model = helper.make_model(helper.make_graph(nodes, "pos", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    mod = tessera.compile(model, "ref", dim_bounds={"n": (0, 200)})
    assert isinstance(mod, Module)
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(60):
            n = int(rng.integers(0, 201))
            xs = rng.standard_normal((2, n)).astype(np.float32)
            got = mod.run(x=xs)["y"]
            if not np.array_equal(got, xs + np.arange(n, dtype=np.float32)):
                errors.append(f"n={n}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
