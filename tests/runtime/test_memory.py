"""Memory planner: lifetimes, reuse, no overlap between simultaneously live tensors."""

from __future__ import annotations

import numpy as np

import tessera
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.runtime.memory import lifetimes, plan_memory


def _chain(n: int, shape=(64, 64)) -> Function:
    fn = Function("chain")
    x = fn.add_input("x", TensorType(shape, DType.float32))
    cur = x
    for i in range(n):
        cur = fn.op("Relu" if i % 2 else "Neg", cur, name=f"n{i}")
    fn.outputs = [cur]
    fn.attrs["output_names"] = ["y"]
    return fn


def _overlaps(plan, memory) -> list[tuple[str, str]]:
    life = lifetimes(plan)
    bad = []
    for dp in memory.devices.values():
        names = list(dp.offsets)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                (s1, e1), (s2, e2) = life[a], life[b]
                live_together = not (e1 < s2 or e2 < s1)
                o1, o2 = dp.offsets[a], dp.offsets[b]
                space = not (o1 + dp.sizes[a] <= o2 or o2 + dp.sizes[b] <= o1)
                if live_together and space:
                    bad.append((a, b))
    return bad


def test_chain_reuses_two_buffers_plus_io(rng):
    mod = tessera.compile(_chain(10), target="ref")
    dp = mod.memory.devices["cpu"]
    size = 64 * 64 * 4
    assert dp.no_reuse_bytes == 11 * size
    # the input lives throughout; intermediates and the output ping-pong in two buffers
    assert dp.total_bytes == 3 * size
    assert not _overlaps(mod.plan, mod.memory)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(mod.run(x=x)["y"], _expected_chain(x, 10))
    text = str(mod.memory_report())
    assert "planned" in text and "no-reuse" in text


def _expected_chain(x: np.ndarray, n: int) -> np.ndarray:
    for i in range(n):
        x = np.maximum(x, 0) if i % 2 else -x
    return x


def test_branches_never_share_live_memory(rng):
    fn = Function("branches")
    x = fn.add_input("x", TensorType((8, 16), DType.float32))
    a = fn.op("Neg", x, name="a")
    b = fn.op("Relu", x, name="b")
    c = fn.op("Exp", a, name="c")
    d = fn.op("Add", b, c, name="d")
    e = fn.op("Mul", d, a, name="e")
    fn.outputs = [e, b]
    mod = tessera.compile(fn, target="ref")
    assert not _overlaps(mod.plan, mod.memory)
    x_val = rng.standard_normal((8, 16)).astype(np.float32)
    out = mod.run(x=x_val)
    a_, b_ = -x_val, np.maximum(x_val, 0)
    np.testing.assert_allclose(out[mod.output_names[0]], (b_ + np.exp(a_)) * a_, rtol=1e-6)
    np.testing.assert_allclose(out[mod.output_names[1]], b_)


def test_plan_memory_directly_matches_module():
    mod = tessera.compile(_chain(4), target="ref")
    again = plan_memory(mod.plan)
    assert again.devices["cpu"].offsets == mod.memory.devices["cpu"].offsets
