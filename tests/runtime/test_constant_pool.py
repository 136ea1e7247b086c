"""Constants kept once per process: two specialisations of a model share their weights'
memory, results unchanged; the pool compares bytes, keeps alignment, makes shared arrays
read-only and lets go with the last module."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.plugin.manager import get_backends
from tessera.runtime.constant_pool import MIN_BYTES, ConstantPool


def _model() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 128])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _host_constants(module: tessera.Module) -> list[np.ndarray]:
    return [v for cr in module.model.compiled.values() for v in cr.constants.values()
            if isinstance(v, np.ndarray) and v.nbytes >= MIN_BYTES]


@pytest.mark.skipif("llvm" not in get_backends(), reason="needs tessera-llvm (64-byte aligned "
                    "weights: the reference backend's land wherever malloc puts them)")
def test_specialisations_share_their_weights() -> None:
    mod = tessera.compile(_model(), "llvm", shape_mode="specialize")
    a, b = mod.specialize(batch=1), mod.specialize(batch=5)
    ca, cb = _host_constants(a), _host_constants(b)
    assert ca and all(any(x is y for y in ca) for x in cb)  # b holds a's arrays
    assert all(not x.flags.writeable for x in ca)
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    w = numpy_helper.to_array(_model().graph.initializer[0])
    np.testing.assert_allclose(mod.run(x=x)["y"], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


def _placed(values: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``values`` whose data starts ``offset`` bytes after a 64-byte boundary."""
    raw = np.empty(values.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    out = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


def test_pool_compares_bytes_and_keeps_alignment() -> None:
    pool = ConstantPool()
    base = np.arange(MIN_BYTES, dtype=np.float32)
    first = pool.share(_placed(base, 0))
    same = _placed(base, 0)
    assert pool.share(same) is first and pool.saved_bytes == same.nbytes
    other = _placed(base, 0)
    other[-1] = -1.0  # one element differs (outside the sampled bytes, too)
    assert pool.share(other) is other
    plus_zero = _placed(np.zeros(MIN_BYTES, np.float32), 0)
    minus_zero = _placed(np.zeros(MIN_BYTES, np.float32), 0)
    minus_zero[3] = -0.0  # equal as numbers, not as bytes
    pool.share(plus_zero)
    assert pool.share(minus_zero) is minus_zero
    small = np.ones(4, np.float32)
    assert pool.share(small) is small and small.flags.writeable  # not worth sharing
    # a 64-byte aligned array is never replaced by a less aligned one; the other way is fine
    sevens = np.full(MIN_BYTES, 7.0, np.float32)
    unaligned = pool.share(_placed(sevens, 4))
    aligned = _placed(sevens, 0)
    assert pool.share(aligned) is aligned  # not the 4-byte aligned array held already
    assert pool.share(_placed(sevens, 8)) is aligned  # 8-byte aligned: the 64-byte one
    assert pool.share(_placed(sevens, 4)) is unaligned  # as aligned as the first


def test_entries_go_with_the_last_module() -> None:
    pool = ConstantPool()
    a = np.full(MIN_BYTES, 2.0, np.float32)
    pool.share(a)
    del a
    gc.collect()
    b = np.full(MIN_BYTES, 2.0, np.float32)
    assert pool.share(b) is b  # the first array is gone: nothing to share with
