"""The llvm backend and the kernel cache: a second compile of the same model takes its object
code from the cache without running LLVM (and its whole region without lowering it), and gives
the same outputs, bit for bit; another CPU, other size bounds, a damaged entry or the cache
turned off compile again."""

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
    cache = KernelCache(tmp_path)
    assert len(cache.entries()) == 2  # the object code, and the whole region
    for path, _, _ in cache.entries():  # without the region's entry: lowered again,
        if path.parent.parent.name == "llvm-region":  # but LLVM's output from the cache
            path.unlink()

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
    assert len(cache.entries()) == 2 * (2 if generic is not None else 1)  # object, region
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


def _with_weights(model, seed: int):  # noqa: ANN001, ANN202 - the same model, other weights
    other = type(model)()
    other.CopyFrom(model)
    rng = np.random.default_rng(seed)
    for init in other.graph.initializer:
        a = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(
            rng.standard_normal(a.shape).astype(a.dtype), init.name))
    return other


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_a_cached_region_is_not_lowered_and_reads_its_own_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, symbolic: bool) -> None:
    """The whole region comes from the cache (no TIR lowering, no LLVM) when its fused groups
    are the same; the weights are not part of the key, so a model of the same structure with
    other weights hits too, and runs with its own weights."""
    from tessera_llvm import backend

    model = _model(symbolic)
    first = tessera.compile(model, "llvm", kernel_cache=tmp_path)
    assert len(KernelCache(tmp_path).entries()) == 2  # the object code, and the region

    def no_lowering(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("lowered on a region cache hit")

    monkeypatch.setattr(backend, "lower_region", no_lowering)
    monkeypatch.setattr(backend, "ModuleBuilder", no_lowering)
    other = _with_weights(model, 5)
    second = tessera.compile(other, "llvm", kernel_cache=tmp_path)
    assert _cache_states(second) == ["hit"]
    (a,), (b,) = first.compiled.values(), second.compiled.values()
    assert b.info["schedules"] == a.info["schedules"]
    assert [k.name for k in b.kernels] == [k.name for k in a.kernels]
    w, bias = (numpy_helper.to_array(i) for i in other.graph.initializer)
    for shape in [(2, 9, H)] + ([(1, 3, H), (3, 13, H)] if symbolic else []):
        x = RNG.standard_normal(shape).astype(np.float32)
        ref = np.maximum(x @ w + bias, 0)
        ref = np.exp(ref - ref.max(-1, keepdims=True))
        np.testing.assert_allclose(second.run({"x": x})["y"], ref / ref.sum(-1, keepdims=True),
                                   rtol=1e-5, atol=1e-6)
    monkeypatch.undo()
    # other bounds of a symbolic model's sizes: another region key
    if symbolic:
        third = tessera.compile(model, "llvm", kernel_cache=tmp_path,
                                dim_bounds={"batch": (1, 4), "seq": (1, 64)})
        assert _cache_states(third) == ["miss"]


def test_a_region_entry_whose_constants_disagree_is_a_miss(tmp_path: Path) -> None:
    """An entry's kernels read constants of given names, dtypes and shapes; made from the
    graph on a hit, constants that differ (here: the entry altered) make it a miss."""
    import json

    from tessera_llvm import region_cache

    model = _model(False)
    tessera.compile(model, "llvm", kernel_cache=tmp_path)
    cache = KernelCache(tmp_path)
    (path,) = [p for p, _, _ in cache.entries() if p.parent.parent.name == region_cache.NAMESPACE]
    key = path.name
    entry = region_cache.restore(cache, key)
    assert entry is not None and entry.constants
    name = next(iter(entry.constants))
    dtype, shape = entry.constants[name]
    entry.constants[name] = (dtype, (*shape[:-1], shape[-1] + 1))
    region_cache.store(cache, key, entry)
    assert json.loads(cache.get(region_cache.NAMESPACE, key)["meta"])["constants"][name][1][-1] \
        == shape[-1] + 1
    again = tessera.compile(model, "llvm", kernel_cache=tmp_path)
    (r,) = again.compiled.values()
    assert r.info["lower_s"] > 0 and r.info["kernel_cache"] == "hit"  # LLVM's part only
    x = RNG.standard_normal((2, 9, H)).astype(np.float32)
    np.testing.assert_array_equal(again.run({"x": x})["y"],
                                  tessera.compile(model, "llvm", kernel_cache=False)
                                  .run({"x": x})["y"])


def test_other_cpu_features_are_another_region_key(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two hosts whose CPUs LLVM names alike but whose features differ (a VM without
    AVX-512 VNNI) share a cache folder: each gets its own region entry."""
    from tessera_llvm import backend, region_cache

    model = _model(False)
    tessera.compile(model, "llvm", kernel_cache=tmp_path)
    real = region_cache.cpu_and_features

    def fewer(*args):  # noqa: ANN002, ANN202
        name, features = real(*args)
        return name, features + ",-avx512vnni"

    monkeypatch.setattr(region_cache, "cpu_and_features", fewer)
    lowered: list[int] = []
    lower = backend.lower_region
    monkeypatch.setattr(backend, "lower_region",
                        lambda *a, **k: lowered.append(1) or lower(*a, **k))
    tessera.compile(model, "llvm", kernel_cache=tmp_path)
    assert lowered  # the region's key differs: lowered again
