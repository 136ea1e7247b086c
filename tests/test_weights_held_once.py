"""A compiled module holds each weight once: the importer reads initializers into 64-byte
aligned arrays (tessera.ir.aligned), a backend that keeps a weight as it is uses that array,
and after the compile the graph drops its data of every constant the region's backend keeps
in its compiled form (held, as in a module loaded from an artifact)."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import ModelImportError
from tessera.frontend.onnx.dtypes import read_initializer
from tessera.ir.aligned import aligned_copy, aligned_empty, as_aligned, is_aligned

RNG = np.random.default_rng(21)
VOCAB, H, FF = 3000, 128, 512


def _model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """An embedding (Gather: kept as it is) and two dense layers (packed into panels)."""
    w = {"emb": RNG.standard_normal((VOCAB, H)).astype(np.float32),
         "w1": (RNG.standard_normal((H, FF)) * 0.1).astype(np.float32),
         "b1": RNG.standard_normal(FF).astype(np.float32),
         "w2": (RNG.standard_normal((FF, H)) * 0.1).astype(np.float32)}
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", H])
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [ids], [y],
                              [numpy_helper.from_array(a, n) for n, a in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=9)
    return model, w


def _reference(w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    return np.maximum(w["emb"][ids] @ w["w1"] + w["b1"], 0) @ w["w2"]


def test_the_graph_drops_what_the_backend_keeps(tmp_path: Path) -> None:
    model, w = _model()
    mod = tessera.compile(model, "llvm", kernel_cache=False)
    (region,) = mod.compiled.values()
    consts = region.region.constants()
    assert consts and all(v.is_held and v.held_by == "llvm" for v in consts)
    # the embedding as the importer read it: aligned, and not copied by the backend
    emb = region.constants["emb"]
    assert is_aligned(emb) and np.array_equal(emb, w["emb"])
    ids = RNG.integers(0, VOCAB, (2, 7))
    np.testing.assert_allclose(mod.run(ids=ids)["y"], _reference(w, ids), rtol=1e-4, atol=1e-4)
    # a module whose constants are held exports and loads like one loaded from an artifact
    mod.export(tmp_path / "m.tar")
    loaded = tessera.load(tmp_path / "m.tar")
    np.testing.assert_array_equal(loaded.run(ids=ids)["y"], mod.run(ids=ids)["y"])


def test_a_compiled_module_holds_its_weights_once() -> None:
    """What numpy holds after the compile (traced allocations still alive) against the
    weights' bytes: each weight once, in the form the kernels read (the dense layers' panels
    replace their matrices), and nothing of the import or the packing left over."""
    model, w = _model()
    weights = sum(a.nbytes for a in w.values())
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        mod = tessera.compile(model, "llvm", kernel_cache=False)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert weights <= held < 1.15 * weights + (1 << 20), (held, weights)
    ids = RNG.integers(0, VOCAB, (1, 5))
    np.testing.assert_allclose(mod.run(ids=ids)["y"], _reference(w, ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.uint8,
                                   np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                   np.uint64, np.bool_])
@pytest.mark.parametrize("shape", [(), (1,), (3, 5), (2, 3, 7)])
def test_initializers_are_read_aligned(dtype: type, shape: tuple[int, ...]) -> None:
    a = (RNG.standard_normal(shape) * 50).astype(dtype)
    t = numpy_helper.from_array(a, "t")
    got = read_initializer(t)
    assert is_aligned(got) and got.dtype == a.dtype and got.shape == a.shape
    np.testing.assert_array_equal(got, numpy_helper.to_array(t))


def test_initializers_of_other_storage_are_read_aligned_too() -> None:
    # typed fields (float_data) rather than raw bytes
    t = helper.make_tensor("t", TensorProto.FLOAT, [2, 3], [1.5, 2, 3, 4, 5, 6])
    got = read_initializer(t)
    assert is_aligned(got)
    np.testing.assert_array_equal(got, np.array([[1.5, 2, 3], [4, 5, 6]], np.float32))
    short = numpy_helper.from_array(np.arange(6, dtype=np.float32), "short")
    short.raw_data = short.raw_data[:-4]
    with pytest.raises(ModelImportError, match="initializer 'short' cannot be read"):
        read_initializer(short)


def test_aligned_helpers() -> None:
    a = aligned_empty((3, 5), np.float32)
    assert is_aligned(a) and a.shape == (3, 5) and a.dtype == np.float32
    for align in (16, 64, 4096):
        assert aligned_empty(7, np.int8, align).ctypes.data % align == 0
    raw = np.zeros(64 + 4 + 40, np.uint8)
    off = (-raw.ctypes.data) % 64 + 4  # 4 bytes past a boundary
    view = raw[off:off + 40].view(np.float32)
    assert not is_aligned(view)
    copied = as_aligned(view)
    assert is_aligned(copied) and copied is not view and np.array_equal(copied, view)
    assert as_aligned(copied) is copied
    swapped = np.arange(4, dtype=">i4")
    out = aligned_copy(swapped)
    assert out.dtype.isnative and list(out) == [0, 1, 2, 3]
    assert not is_aligned(np.arange(8.0)[::2])  # not contiguous


def test_the_memory_report_counts_the_weights_once() -> None:
    model, w = _model()
    weights = sum(a.nbytes for a in w.values())
    mod = tessera.compile(model, "llvm", kernel_cache=False)
    report = mod.memory_report()
    ((dev, kernels, graph),) = report.weights
    assert dev == "cpu" and graph == 0
    assert weights <= kernels < 1.05 * weights  # packed panels: the same bytes, reordered
    assert "weights (kernels' form)" in str(report)
    del mod  # (else the next module's kernels share its arrays: runtime/constant_pool.py)
    gc.collect()
    kept = tessera.compile(model, "llvm", kernel_cache=False,
                           keep_graph_weights=True).memory_report()
    ((_, kernels_kept, graph_kept),) = kept.weights
    assert kernels_kept == kernels
    # the dense layers' matrices besides their panels; the embedding is one array for both
    assert graph_kept == w["w1"].nbytes + w["w2"].nbytes
