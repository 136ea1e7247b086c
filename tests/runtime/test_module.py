"""Module API: run, set_input/run/get_output, input checks, benchmark and profile."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import RunError


def _model() -> onnx.ModelProto:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4])
    b = helper.make_tensor_value_info("b", TensorProto.INT64, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    z = helper.make_tensor_value_info("z", TensorProto.INT64, [4])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Exp", ["r"], ["y"]),
             helper.make_node("Identity", ["b"], ["z"]),
             helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(
                 np.array([1.5, -2.0], np.float32)))]
    graph = helper.make_graph(nodes, "g", [a, b], [y, z, k])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def mod() -> tessera.Module:
    return tessera.compile(_model(), target="ref")


def test_run_returns_every_output_by_name(mod, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.integers(-5, 5, 4)
    out = mod.run(a=a, b=b)
    assert list(out) == ["y", "z", "k"]
    np.testing.assert_allclose(out["y"], np.exp(np.maximum(a, 0)), rtol=1e-6)
    np.testing.assert_array_equal(out["z"], b)
    np.testing.assert_array_equal(out["k"], [1.5, -2.0])


def test_set_input_run_get_output(mod, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    mod.set_input("a", a)
    mod.set_input("b", np.arange(4))
    assert mod.run() is None
    y = mod.get_output(0)
    np.testing.assert_allclose(y, np.exp(np.maximum(a, 0)), rtol=1e-6)
    np.testing.assert_array_equal(mod.get_output("z"), np.arange(4))
    y[:] = 0  # outputs are copies
    mod.run()  # inputs persist between runs
    np.testing.assert_allclose(mod.get_output("y"), np.exp(np.maximum(a, 0)), rtol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"a": np.zeros((3, 4), np.float64), "b": np.arange(4)}, "input 'a': expected dtype float32"),
    ({"a": np.zeros((4, 3), np.float32), "b": np.arange(4)}, r"expected shape \[3, 4\]"),
    ({"a": np.zeros((3, 4), np.float32)}, "missing input"),
    ({"a": np.zeros((3, 4), np.float32), "b": np.arange(4), "c": 1}, "unknown input 'c'"),
    # a misspelt name is said, not only the one it should have been
    ({"a": np.zeros((3, 4), np.float32), "bb": np.arange(4)},
     "unknown input 'bb'; missing input.s. b; the model needs a: float32"),
])
def test_bad_inputs_are_named(mod, kwargs, message):
    with pytest.raises(RunError, match=message):
        mod.run(**kwargs)


def test_run_takes_a_feeds_dict_and_output_names(mod, rng):
    """``run(feeds)`` for input names that are not identifiers, ``output_names=`` for only
    some outputs (in the order asked), ``run(**inputs)`` as before, and a clear error for
    both forms at once, unknown names, and onnxruntime's argument order."""
    x = helper.make_tensor_value_info("gpu_0/data_0", TensorProto.FLOAT, [2])
    f = helper.make_tensor_value_info("feeds", TensorProto.FLOAT, [2])
    graph = helper.make_graph(
        [helper.make_node("Add", ["gpu_0/data_0", "feeds"], ["gpu_0/sum"]),
         helper.make_node("Neg", ["feeds"], ["neg"])], "g", [x, f],
        [helper.make_tensor_value_info("gpu_0/sum", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("neg", TensorProto.FLOAT, [2])])
    odd = tessera.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                          target="ref")
    a, b = rng.standard_normal((2, 2)).astype(np.float32)
    feeds = {"gpu_0/data_0": a, "feeds": b}
    out = odd.run(feeds)
    assert list(out) == ["gpu_0/sum", "neg"]
    np.testing.assert_allclose(out["gpu_0/sum"], a + b, rtol=1e-6)
    only = odd.run(feeds, output_names=["neg"])
    assert list(only) == ["neg"] and np.array_equal(only["neg"], -b)
    assert list(odd.run(feeds, output_names=("neg", "gpu_0/sum"))) == ["neg", "gpu_0/sum"]
    assert np.array_equal(odd.run(**{"gpu_0/data_0": a}, feeds=b)["neg"], -b)  # keywords
    full = {"a": np.zeros((3, 4), np.float32), "b": np.arange(4)}
    assert list(mod.run(full, output_names=["k", "y"])) == ["k", "y"]
    assert list(mod.run(**full, output_names=["z"])) == ["z"]
    with pytest.raises(RunError, match="either as a dict or as keywords, not both"):
        mod.run({"a": full["a"]}, b=full["b"])
    with pytest.raises(RunError, match=r"unknown output\(s\) 'nope'; the model's outputs are "
                                       r"y, z, k"):
        mod.run(full, output_names=["y", "nope"])
    with pytest.raises(RunError, match="expected a list of output names, got str"):
        mod.run(full, output_names="y")
    with pytest.raises(RunError, match=r"feeds must be a dict .* mod.run\(feeds, output_names"):
        mod.run(["y"])  # onnxruntime's order, run(output_names, feeds), with one argument
    with pytest.raises(RunError, match="missing input"):
        mod.run({})
    with pytest.raises(RunError, match="needs the inputs"):
        mod.run(output_names=["y"])


def test_bad_output_lookup(mod):
    with pytest.raises(RunError, match="unknown output"):
        mod.get_output("nope")
    with pytest.raises(RunError, match="out of range"):
        mod.get_output(7)


def test_benchmark_and_profile(mod):
    result = mod.benchmark(repeat=3, number=2)
    assert len(result.results_ms) == 3
    assert result.min <= result.median <= result.max
    assert "median" in str(result)
    prof = mod.profile()
    assert {k.op for k in prof.kernels} >= {"Relu", "Exp"}
    assert set(prof.by_backend()) == {"ref"}
    assert "per backend" in prof.table()


def test_caller_runs_positionally(mod, rng):
    call = mod.caller(["b", "a"], ["z", "y"])
    for _ in range(3):
        a = rng.standard_normal((3, 4)).astype(np.float32)
        b = rng.integers(-5, 5, 4)
        z, y = call(b, a)
        np.testing.assert_allclose(y, np.exp(np.maximum(a, 0)), rtol=1e-6)
        np.testing.assert_array_equal(z, b)
        assert not np.shares_memory(z, b)  # new arrays, never the state's buffers
    y2, z2, k = mod.caller()(a, b)  # every input and output, in the module's order
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_array_equal(k, [1.5, -2.0])
    k[:] = 0  # a constant output is a copy too
    np.testing.assert_array_equal(mod.caller(output_names=["k"])(a, b)[0], [1.5, -2.0])
    assert isinstance(call(b.tolist(), a)[0], np.ndarray)  # array-likes are converted


@pytest.mark.parametrize("args, message", [
    ((np.arange(4), np.zeros((3, 4), np.float64)), "input 'a': expected dtype float32"),
    ((np.arange(4), np.zeros((4, 3), np.float32)), r"input 'a': expected shape \[3, 4\]"),
    ((np.arange(4),), "expected 2 inputs"),
])
def test_caller_checks_its_inputs(mod, args, message):
    with pytest.raises(RunError, match=message):
        mod.caller(["b", "a"])(*args)


def test_run_in_any_order_keeps_a_bounded_set_of_calls(mod, rng, monkeypatch):
    # run() calls a generated caller per order of names it meets; more orders than it keeps
    # start the set again, and every answer stays right
    import tessera.runtime.module as module_py

    monkeypatch.setattr(module_py, "_MAX_CALLERS", 2)
    mod._callers.clear()
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.integers(-5, 5, 4)
    for feeds, names in [({"a": a, "b": b}, None), ({"b": b, "a": a}, None),
                         ({"a": a, "b": b}, ["z", "y"]), ({"b": b, "a": a}, ["k"]),
                         ({"a": a, "b": b}, None)]:
        out = mod.run(feeds, output_names=names)
        assert list(out) == (names or ["y", "z", "k"])
        if "y" in out:
            np.testing.assert_allclose(out["y"], np.exp(np.maximum(a, 0)), rtol=1e-6)
        if "z" in out:
            np.testing.assert_array_equal(out["z"], b)
        assert len(mod._callers) <= 2
    with pytest.raises(RunError, match="missing input"):  # not every input: run's own check
        mod.run({"a": a})
    with pytest.raises(RunError, match="unknown output"):
        mod.run({"a": a, "b": b}, output_names=["nope"])


def test_caller_names_must_be_the_modules(mod):
    with pytest.raises(RunError, match="expected every input once"):
        mod.caller(["a", "a"])
    with pytest.raises(RunError, match="unknown output"):
        mod.caller(output_names=["nope"])


def test_caller_from_many_threads(rng):
    import threading

    mod = tessera.compile(_model(), target="ref")
    call = mod.caller()
    errors: list[str] = []

    def worker(seed: int) -> None:
        r = np.random.default_rng(seed)
        for _ in range(50):
            a = r.standard_normal((3, 4)).astype(np.float32)
            b = r.integers(-5, 5, 4)
            y, z, _k = call(a, b)
            if not (np.allclose(y, np.exp(np.maximum(a, 0)), rtol=1e-6)
                    and np.array_equal(z, b)):
                errors.append(f"thread {seed}: wrong result")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
