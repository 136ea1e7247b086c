"""One compiled module called from many threads: every result equals the single-threaded one.

``Module.run(**inputs)`` gives each concurrent call its own execution state (arenas, bound
kernels) from a pool that grows on demand; the step-by-step form keeps one state per thread;
regions that are not thread safe run one call at a time.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.plugin.backend import Kernel
from tessera.plugin.manager import get_backends
from tessera.runtime.module import Module
from tessera.runtime.plan import workspace_name
from tessera.testing.light_models import load_light_model

THREADS = 4


def _targets() -> list[Any]:
    installed = get_backends()
    # llvm is slow: compiling SqueezeNet for it takes a few seconds
    return [pytest.param(t, marks=pytest.mark.slow if t == "llvm" else ()) if t in installed else
            pytest.param(t, marks=pytest.mark.skip(reason=f"backend {t} not installed"))
            for t in ("ref", "llvm")]


@pytest.fixture(scope="module", params=_targets())
def squeezenet(request: pytest.FixtureRequest) -> tuple[str, Module, list[np.ndarray]]:
    light = load_light_model("squeezenet")
    mod = tessera.compile(light.model, target=request.param, input_shapes=light.input_shapes)
    (name, t), = mod.input_types.items()
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(t.shape).astype(np.float32) for _ in range(THREADS * 2)]
    return name, mod, inputs


def _hammer(mod: Module, name: str, inputs: list[np.ndarray], calls: int
            ) -> list[tuple[int, dict[str, np.ndarray]]]:
    """``THREADS`` threads, each calling ``mod.run`` ``calls`` times on inputs of its own,
    all started together."""
    start = threading.Barrier(THREADS)

    def worker(t: int) -> list[tuple[int, dict[str, np.ndarray]]]:
        start.wait()
        out = []
        for c in range(calls):
            i = (t * calls + c) % len(inputs)
            out.append((i, mod.run(**{name: inputs[i]})))
        return out

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(worker, range(THREADS)))
    return [r for rs in results for r in rs]


def test_threads_calling_one_module_get_the_single_threaded_results(squeezenet):
    name, mod, inputs = squeezenet
    want = [mod.run(**{name: x}) for x in inputs]
    calls = 10 if mod.target.startswith("llvm") else 3
    got = _hammer(mod, name, inputs, calls)
    assert len(got) == THREADS * calls
    wrong = [i for i, out in got
             if any(not np.array_equal(out[k], want[i][k]) for k in want[i])]
    assert not wrong, f"{len(wrong)} of {len(got)} concurrent results differ"
    assert mod.states.created >= 2  # the pool grew: calls did not queue behind one state


@pytest.mark.slow
def test_concurrent_calls_beside_a_busy_neighbour(squeezenet):
    """The same with a CPU-bound neighbour process on the machine: the llvm pool's threads are
    descheduled in turn, its workers sit out and its thread cap moves, and every result still
    equals the single-threaded one."""
    name, mod, inputs = squeezenet
    want = [mod.run(**{name: x}) for x in inputs]
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.05)
        got = _hammer(mod, name, inputs, 6 if mod.target.startswith("llvm") else 2)
        alone = [(i, mod.run(**{name: inputs[i]})) for i in range(len(inputs))]
    finally:
        neighbour.kill()
        neighbour.wait()
    wrong = [i for i, out in got + alone
             if any(not np.array_equal(out[k], want[i][k]) for k in want[i])]
    assert not wrong, f"{len(wrong)} of {len(got) + len(alone)} results differ under load"


def test_step_by_step_form_is_per_thread(squeezenet):
    name, mod, inputs = squeezenet
    out_name = mod.output_names[0]
    want = [mod.run(**{name: x})[out_name] for x in inputs[:THREADS]]
    start = threading.Barrier(THREADS)

    def worker(t: int) -> bool:
        start.wait()
        mod.set_input(name, inputs[t])
        time.sleep(0.01)  # give the other threads time to set theirs
        mod.run()
        return np.array_equal(mod.get_output(out_name), want[t])

    with ThreadPoolExecutor(THREADS) as pool:
        assert all(pool.map(worker, range(THREADS)))


def test_step_form_refuses_inputs_set_in_another_thread(squeezenet):
    name, mod, inputs = squeezenet
    mod.set_input(name, inputs[0])

    def other() -> None:
        with pytest.raises(tessera.errors.RunError, match="not set in this thread"):
            mod.run()

    t = threading.Thread(target=other)
    t.start()
    t.join()


# -- the pool and the contract, on a small model ----------------------------------------------


def _small_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Exp", ["r"], ["e"], name="exp"),
             helper.make_node("Neg", ["e"], ["y"], name="neg")]
    return helper.make_model(helper.make_graph(nodes, "small", [x], [y]))


def _rebuilt(wrap: Any, **region_changes: Any) -> Module:
    """The small model on ``ref`` with every kernel replaced by ``wrap(kernel)`` (and no bound
    sequence: the reference backend's would run the kernels it compiled)."""
    base = tessera.compile(_small_model(), target="ref")
    compiled = {}
    for name, cr in base.compiled.items():
        kernels = [wrap(k) for k in cr.kernels]
        compiled[name] = dataclasses.replace(cr, kernels=kernels, bind_sequence=None,
                                             **region_changes)
    return Module(base.graph, compiled, base.backends, base.target, base.report)


def test_concurrent_calls_run_in_parallel_not_behind_one_lock():
    """Two calls meet inside a kernel: impossible if runs were serialized."""
    meet = threading.Barrier(2, timeout=10)

    def wrap(k: Kernel) -> Kernel:
        def fn(ins: list[Any], outs: list[Any]) -> None:
            if k.op == "Exp":
                meet.wait()
            k.fn(ins, outs)

        return dataclasses.replace(k, fn=fn)

    mod = _rebuilt(wrap)
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda a: mod.run(x=a)["y"], x))
    for a, y in zip(x, outs):
        np.testing.assert_allclose(y, -np.exp(np.maximum(a, 0)), rtol=1e-6)
    assert mod.states.created == 2


def test_regions_that_are_not_thread_safe_run_one_call_at_a_time():
    inside = [0]
    most = [0]
    lock = threading.Lock()

    def wrap(k: Kernel) -> Kernel:
        def fn(ins: list[Any], outs: list[Any]) -> None:
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.002)
            k.fn(ins, outs)
            with lock:
                inside[0] -= 1

        return dataclasses.replace(k, fn=fn)

    rng = np.random.default_rng(1)
    x = rng.standard_normal((THREADS, 4, 8)).astype(np.float32)
    for thread_safe, expect_overlap in ((False, False), (True, True)):
        mod = _rebuilt(wrap, thread_safe=thread_safe)
        most[0] = 0
        with ThreadPoolExecutor(THREADS) as pool:
            outs = list(pool.map(lambda a, m=mod: [m.run(x=a)["y"] for _ in range(5)], x))
        for a, ys in zip(x, outs):
            for y in ys:
                np.testing.assert_allclose(y, -np.exp(np.maximum(a, 0)), rtol=1e-6)
        assert (most[0] > 1) == expect_overlap, (thread_safe, most[0])


def test_pool_grows_on_demand_and_keeps_a_bounded_number_idle():
    mod = tessera.compile(_small_model(), target="ref")
    assert mod.states.created == 1 and mod.states.idle == 1  # built at compile time
    held = [mod.states.acquire() for _ in range(5)]
    assert mod.states.created == 5 and len({id(s) for s in held}) == 5
    assert len({id(s.arenas["cpu"]) for s in held}) == 5  # arenas of their own
    mod.states.max_idle = 3
    for s in held:
        mod.states.release(s)
    assert mod.states.idle == 3
    x = np.ones((4, 8), np.float32)
    np.testing.assert_allclose(mod.run(x=x)["y"], -np.exp(x), rtol=1e-6)
    assert mod.states.created == 5  # an idle state was reused


def test_bad_input_in_a_concurrent_call_leaves_the_others_alone():
    mod = tessera.compile(_small_model(), target="ref")
    good = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)

    def call(i: int) -> Any:
        if i % 2:
            with pytest.raises(tessera.errors.RunError, match="expected shape"):
                mod.run(x=np.ones((3, 8), np.float32))
            return None
        return mod.run(x=good)["y"]

    with ThreadPoolExecutor(THREADS) as pool:
        outs = [y for y in pool.map(call, range(16)) if y is not None]
    for y in outs:
        np.testing.assert_allclose(y, -np.exp(np.maximum(good, 0)), rtol=1e-6)


def test_each_state_has_its_own_kernel_workspaces():
    """A kernel that asks for workspace gets one planned buffer per execution state, passed
    after its outputs; it must not be shared by concurrent calls."""
    seen: dict[int, list[int]] = {}

    def wrap(k: Kernel) -> Kernel:
        if k.op != "Exp":
            return k

        def fn(ins: list[Any], outs: list[Any]) -> None:
            y, ws = outs
            assert ws.dtype == np.uint8 and ws.size == 1000
            seen.setdefault(threading.get_ident(), []).append(ws.ctypes.data)
            k.fn(ins, [y])

        return dataclasses.replace(k, fn=fn, workspace_bytes=1000)

    mod = _rebuilt(wrap)
    ws = workspace_name(next(s.name for s in mod.plan.steps if s.op == "Exp"))
    assert ws in mod.plan.tensors and mod.plan.tensors[ws].type.nbytes == 1000
    a, b = mod.states.acquire(), mod.states.acquire()
    assert a.buffers[ws].ctypes.data != b.buffers[ws].ctypes.data
    mod.states.release(a)
    mod.states.release(b)
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(mod.run(x=x)["y"], -np.exp(np.maximum(x, 0)), rtol=1e-6)


def test_a_memory_plan_larger_than_the_machine_is_refused_before_allocating(monkeypatch):
    """Each tensor under the limit, the whole plan over it: a CompileError naming the largest
    tensors, not a lazily committed arena that kills the process on its first run."""
    monkeypatch.setenv("TESSERA_MAX_TENSOR_BYTES", str(4 * 8 * 4 + 200))
    with pytest.raises(tessera.errors.CompileError,
                       match=r"device cpu needs 384 bytes.*largest tensors: 'x' float32\[4, 8\]"):
        tessera.compile(_small_model(), target="ref")
