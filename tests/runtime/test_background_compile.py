"""Background compiles (``background_compile=True``): a call at a size not compiled yet runs on
the evaluator (the model in numpy) while its module compiles in a background thread; results
match onnx's reference evaluator either way; failures are kept for the next call."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.errors import CompileError, RunError
from tessera.ir.symbolic import InputSpec, ShapeVars
from tessera.ir.types import DType
from tessera.plugin.manager import get_backends
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.split import model_evaluator

TARGET = "llvm" if "llvm" in get_backends() else "ref"


def _model() -> onnx.ModelProto:
    """y = softmax(x @ w + b) over x: [batch, seq, 8]."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["z"]),
         helper.make_node("Softmax", ["z"], ["y"], axis=-1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 5])],
        [numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(batch: int, seq: int) -> np.ndarray:
    return np.random.default_rng(batch * 100 + seq).standard_normal(
        (batch, seq, 8)).astype(np.float32)


def test_first_calls_are_evaluated_then_the_module_runs() -> None:
    model = _model()
    want = ReferenceEvaluator(model)
    mod = tessera.compile(model, TARGET, background_compile=True)
    for batch, seq in ((2, 3), (2, 3), (1, 9)):
        x = _x(batch, seq)
        np.testing.assert_allclose(mod.run(x=x)["y"], want.run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-6)
    assert mod.cache_info().evaluated >= 1
    assert mod.wait_compiles(timeout=120)
    info = mod.cache_info()
    assert info.compiles == 2 and info.pending == 0
    evaluated = info.evaluated
    x = _x(2, 3)
    np.testing.assert_allclose(mod.run(x=x)["y"], want.run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)
    assert mod.cache_info().evaluated == evaluated  # the compiled module ran
    assert mod.cache_info().hits >= 1
    # measuring waits for the compiled module rather than timing the evaluator
    assert mod.benchmark(repeat=1, number=1, x=_x(3, 4)).median > 0
    assert mod.cache_info().compiles == 3


def test_threads_meet_new_sizes_while_compiling() -> None:
    model = _model()
    want = ReferenceEvaluator(model)
    mod = tessera.compile(model, TARGET, background_compile=True)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(6):
                x = _x(1 + (seed + i) % 3, 2 + i % 2)
                np.testing.assert_allclose(mod.run(x=x)["y"], want.run(None, {"x": x})[0],
                                           rtol=1e-5, atol=1e-6)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert mod.wait_compiles(timeout=120)
    assert mod.cache_info().compiles == 6  # each size compiled once


def test_a_failed_background_compile_is_the_next_calls_error() -> None:
    model = _model()
    specs = (InputSpec("x", ("batch", "seq", 8), DType.float32),)

    def specializer(shapes: dict[str, list[int]]) -> tessera.Module:
        raise CompileError(f"no code for {shapes['x']}")

    mod = DynamicModule(ShapeVars(specs, {}), ["y"], specializer, "test",
                        evaluator=lambda: model_evaluator(model), background_compile=True)
    x = _x(2, 3)
    assert mod.run(x=x)["y"].shape == (2, 3, 5)  # evaluated; the compile fails behind it
    mod.wait_compiles(timeout=60)
    with pytest.raises(RunError, match=r"compiling the model for batch=2, seq=3 failed: no "
                                       r"code for \[2, 3, 8\]"):
        mod.run(x=x)  # as a compile in the calling thread would say
    with pytest.raises(RunError, match="unknown output"):
        DynamicModule(ShapeVars(specs, {}), ["y"], specializer, "test",
                      evaluator=lambda: model_evaluator(model),
                      background_compile=True).run({"x": _x(1, 1)}, output_names=["z"])


def test_off_by_default_and_switchable() -> None:
    mod = tessera.compile(_model(), "ref", shape_mode="specialize")
    assert mod.background_compile is False
    mod.run(x=_x(1, 2))
    assert mod.cache_info().compiles == 1 and mod.cache_info().evaluated == 0
    mod.background_compile = True
    mod.run(x=_x(1, 3))
    assert mod.cache_info().evaluated == 1
    assert mod.wait_compiles(timeout=60)


def test_profile_waits_for_the_compiled_module() -> None:
    mod = tessera.compile(_model(), TARGET, background_compile=True)
    profile = mod.profile(x=_x(2, 5))
    assert profile.kernels and mod.cache_info().compiles == 1


def test_at_exit_queued_compiles_are_abandoned_and_the_running_one_ends() -> None:
    """What the atexit hook does (tests/runtime/test_exit_while_compiling.py runs the real
    exit): the compile under way finishes, the queued ones fail as abandoned, and later calls
    at new sizes are evaluated without starting a compile."""
    model = _model()
    want = ReferenceEvaluator(model)
    specs = (InputSpec("x", ("batch", "seq", 8), DType.float32),)
    started, release = threading.Event(), threading.Event()
    compiled: list[list[int]] = []

    def specializer(shapes: dict[str, list[int]]) -> tessera.Module:
        started.set()
        release.wait(30)
        compiled.append(shapes["x"])
        return tessera.compile(model, "ref", input_shapes=shapes)

    mod = DynamicModule(ShapeVars(specs, {}), ["y"], specializer, "ref",
                        evaluator=lambda: model_evaluator(model), background_compile=True)
    for seq in (1, 2, 3):
        mod.run(x=_x(1, seq))
    assert started.wait(30)
    pending = dict(mod._pending)
    stopper = threading.Thread(target=mod._stop_background)
    stopper.start()
    release.set()
    stopper.join(30)
    assert not stopper.is_alive()
    assert compiled == [[1, 1, 8]]  # the one under way ended; the others never started
    abandoned = [f for f in pending.values() if f.exception() is not None]
    assert len(abandoned) == 2
    assert "abandoned: the process is exiting" in str(abandoned[0].exception())
    assert mod.wait_compiles(timeout=1)
    x = _x(1, 4)
    np.testing.assert_allclose(mod.run(x=x)["y"], want.run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)
    assert compiled == [[1, 1, 8]] and mod.cache_info().pending == 0
