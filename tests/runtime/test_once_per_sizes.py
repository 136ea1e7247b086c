"""Steps that read only constants and sizes (``ExecutionPlan.once_per_sizes``) run once per
binding of the sizes in each execution state: a symbolic model's position tables, built from
its sizes, cost what a static compile's folded constants cost on every call after the first
at a size, and stay right when the sizes change, between threads and after a failed run."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tessera
from tessera.errors import RunError
from tessera.frontend.onnx import import_onnx
from tessera.kernel.fuse_ops import fuse_ops
from tessera.runtime.executor import Executor
from tessera.runtime.memory import lifetimes, plan_memory
from tessera.testing.size_models import positions_expected, positions_model


def _x(batch: int, seq: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, seq)).astype(np.float32)


def test_a_costly_table_of_sizes_is_its_own_kernel_and_a_cheap_one_is_fused() -> None:
    fn = import_onnx(positions_model(), symbolic=True)
    groups = fuse_ops(fn)
    last = groups[-1]
    assert [n.op for n in last.nodes] == ["Add"], [g.ops for g in groups]
    # without the transcendental ops the table fuses into the add that reads the data
    cheap = positions_model()
    graph = cheap.graph
    keep = [n for n in graph.node if n.output[0] not in ("lg", "nf", "m", "table")]
    keep[-1].input[1] = "p1"
    del graph.node[:]
    graph.node.extend(keep)
    groups = fuse_ops(import_onnx(cheap, symbolic=True))
    assert "Add" in groups[-1].ops and len(groups[-1].nodes) > 1, [g.ops for g in groups]


@pytest.mark.parametrize("target", ["llvm", "ref"])
def test_the_table_is_right_whenever_the_sizes_change(target: str) -> None:
    mod = tessera.compile(positions_model(), target)
    once = mod.plan.once_per_sizes
    assert once.steps and once.kept
    for batch, seq in [(1, 7), (1, 7), (2, 9), (1, 7), (3, 1), (3, 1), (2, 40), (1, 7)]:
        x = _x(batch, seq, seed=seq)
        np.testing.assert_allclose(mod.run(x=x)["y"], positions_expected(x), rtol=1e-5, atol=1e-5)


def test_the_steps_run_once_per_binding_and_again_after_a_change() -> None:
    mod = tessera.compile(positions_model(), "ref")
    once = mod.plan.once_per_sizes.steps
    mod.plan.sequences.clear()  # every kernel through its own call, counted
    calls: list[int] = []
    for i, step in enumerate(mod.plan.steps):
        inner = step.fn

        def counted(ins, outs, *sizes, _i=i, _fn=inner):  # type: ignore[no-untyped-def]
            calls.append(_i)
            _fn(ins, outs, *sizes)
        step.fn = counted
    ex = Executor(mod.plan, mod.memory, mod._devices)
    every = set(range(len(mod.plan.steps)))

    def run(batch: int, seq: int) -> set[int]:
        calls.clear()
        x = _x(batch, seq, seed=batch * seq)
        ex.set_sizes({"batch": batch, "seq": seq})
        ex.set_input("x", x)
        ex.run()
        np.testing.assert_allclose(ex.get("y"), positions_expected(x), rtol=1e-5, atol=1e-5)
        return set(calls)

    assert run(2, 5) == every
    assert run(2, 5) == every - once  # the table is still there
    assert run(3, 5) == every  # another batch: another binding of the sizes
    assert run(3, 6) == every
    assert run(3, 6) == every - once
    ex.set_sizes({"batch": 3, "seq": 6})
    ex.run_timed()  # a profile runs every step, at the current sizes
    assert run(3, 6) == every - once


def test_a_run_that_stops_part_way_runs_the_steps_again() -> None:
    mod = tessera.compile(positions_model(), "ref")
    mod.plan.sequences.clear()
    last = mod.plan.steps[-1]
    assert len(mod.plan.steps) - 1 not in mod.plan.once_per_sizes.steps
    inner = last.fn
    fail = [False]

    def failing(ins, outs, *sizes):  # type: ignore[no-untyped-def]
        if fail[0]:
            raise RunError("stopped")
        inner(ins, outs, *sizes)
    last.fn = failing
    ex = Executor(mod.plan, mod.memory, mod._devices)
    ex.set_sizes({"batch": 1, "seq": 4})
    ex.set_input("x", _x(1, 4))
    ex.run()
    # at another size the run fails after the table was rewritten; then back at the first
    fail[0] = True
    ex.set_sizes({"batch": 1, "seq": 8})
    ex.set_input("x", _x(1, 8))
    with pytest.raises(RunError):
        ex.run()
    fail[0] = False
    x = _x(1, 4, seed=3)
    ex.set_sizes({"batch": 1, "seq": 4})
    ex.set_input("x", x)
    ex.run()
    np.testing.assert_allclose(ex.get("y"), positions_expected(x), rtol=1e-5, atol=1e-5)


def test_what_the_steps_keep_has_memory_of_its_own() -> None:
    mod = tessera.compile(positions_model(), "llvm")
    plan = mod.plan
    kept = plan.once_per_sizes.kept
    life = lifetimes(plan)
    memory = plan_memory(plan)
    dev = "cpu"
    dp = memory.devices[dev]
    for name in kept:
        assert life[name] == (-1, len(plan.steps))
        lo, hi = dp.offsets[name], dp.offsets[name] + dp.sizes[name]
        for other, off in dp.offsets.items():
            if other != name:
                assert off + dp.sizes[other] <= lo or hi <= off, (name, other)


def test_threads_at_different_sizes_share_one_module() -> None:
    mod = tessera.compile(positions_model(), "llvm")
    errors: list[BaseException] = []

    def worker(seq: int) -> None:
        try:
            for k in range(30):
                x = _x(1 + k % 2, seq, seed=k)
                np.testing.assert_allclose(mod.run(x=x)["y"], positions_expected(x), rtol=1e-5,
                                           atol=1e-5)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(seq,)) for seq in (3, 17, 64, 17)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
