"""The llvm backend and the kernel cache: a second compile of the same model takes its object
code from the cache without running LLVM, and gives the same outputs, bit for bit; another CPU,
a damaged entry or the cache turned off compile again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.plugin.kernel_cache import KernelCache
from tessera_llvm import build

RNG = np.random.default_rng(11)
H = 40


def _model(symbolic: bool):  # noqa: ANN202 - an onnx ModelProto
    w = (RNG.standard_normal((H, H)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(H).astype(np.float32)
    dims: list = ["batch", "seq", H] if symbolic else [2, 9, H]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Add", ["m", "B"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _cache_states(mod: tessera.Module) -> list[str]:
    return [r.info["kernel_cache"] for r in mod.compiled.values() if r.backend == "llvm"]


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_a_second_compile_runs_no_llvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       symbolic: bool) -> None:
    model = _model(symbolic)
    first = tessera.compile(model, "llvm", kernel_cache=tmp_path)
    assert _cache_states(first) == ["miss"]
    assert len(KernelCache(tmp_path).entries()) == 1

    def no_llvm(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("LLVM ran on a kernel cache hit")

    monkeypatch.setattr(build, "compile_ir", no_llvm)
    second = tessera.compile(model, "llvm", kernel_cache=tmp_path)
    assert _cache_states(second) == ["hit"]
    (a,), (b,) = first.compiled.values(), second.compiled.values()
    assert a.info["object_bytes"] == b.info["object_bytes"]
    for shape in ([(2, 9, H)] if not symbolic else [(1, 1, H), (2, 9, H), (3, 17, H)]):
        x = RNG.standard_normal(shape).astype(np.float32)
        want = first.run({"x": x})["y"]
        got = second.run({"x": x})["y"]
        np.testing.assert_array_equal(got, want)
        ref = np.maximum(x @ numpy_helper.to_array(model.graph.initializer[0])
                         + numpy_helper.to_array(model.graph.initializer[1]), 0)
        ref = np.exp(ref - ref.max(-1, keepdims=True))
        np.testing.assert_allclose(got, ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    # the module from the cache exports and loads like any other
    second.export(tmp_path / "m.tar")
    x = RNG.standard_normal((2, 9, H)).astype(np.float32)
    np.testing.assert_array_equal(tessera.load(tmp_path / "m.tar").run({"x": x})["y"],
                                  first.run({"x": x})["y"])


def test_another_cpu_or_a_damaged_entry_compiles_again(tmp_path: Path) -> None:
    model = _model(False)
    x = RNG.standard_normal((2, 9, H)).astype(np.float32)
    want = tessera.compile(model, "llvm", kernel_cache=tmp_path).run({"x": x})["y"]
    generic = tessera.compile(model, "llvm -mcpu=x86-64", kernel_cache=tmp_path) \
        if build.host_triple().startswith("x86_64") else None
    if generic is not None:  # another CPU: another key
        assert _cache_states(generic) == ["miss"]
        np.testing.assert_allclose(generic.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    cache = KernelCache(tmp_path)
    assert len(cache.entries()) == (2 if generic is not None else 1)
    for path, _, _ in cache.entries():
        path.write_bytes(path.read_bytes()[:-10])  # truncated
    again = tessera.compile(model, "llvm", kernel_cache=tmp_path)
    assert _cache_states(again) == ["miss"]  # damaged: compiled again and stored again
    np.testing.assert_array_equal(again.run({"x": x})["y"], want)
    assert _cache_states(tessera.compile(model, "llvm", kernel_cache=tmp_path)) == ["hit"]


def test_the_cache_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(False)
    mod = tessera.compile(model, "llvm", kernel_cache=False)
    assert _cache_states(mod) == ["off"]
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TESSERA_KERNEL_CACHE", "0")
    assert _cache_states(tessera.compile(model, "llvm")) == ["off"]
    assert not any(tmp_path.iterdir())
    monkeypatch.setenv("TESSERA_KERNEL_CACHE", "1")
    assert _cache_states(tessera.compile(model, "llvm")) == ["miss"]
    assert _cache_states(tessera.compile(model, "llvm")) == ["hit"]
