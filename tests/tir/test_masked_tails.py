"""The vectorizer's masked partial vectors (``predicate=True`` /
``lower_pipeline(opts={"predicate_tails": True})``): the guard of the last vector of a loop
with a run-time extent becomes masked loads and stores, exactly equivalent to the guarded
scalar code (the TIR interpreter on the original is the oracle, at sizes around the vector
width); the conditions and bodies it must not mask stay scalar."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.tir import expr as E
from tessera.tir.functor import nodes_of
from tessera.tir.interpreter import run
from tessera.tir.transform import flatten_buffers, lower_pipeline, vectorize
from tessera.tir.verifier import verify

F = tir.ForKind
W = 16
SIZES = [0, 1, W - 1, W, W + 1, 3 * W + 5, 100]


def _masked(func: tir.PrimFunc) -> tuple[int, int]:
    """(masked loads, masked stores) in ``func``."""
    calls = [c.name for c in nodes_of(func.body, E.Call)]
    return calls.count(E.MASKED_LOAD), calls.count(E.MASKED_STORE)


def _rows(dtype: str = "float32") -> tir.PrimFunc:
    """Per row r < 3 of length n (run-time): ``C[r, i] = exp(A[r, i] - M[r]) * B[i] + i``,
    split by W with the last, partial vector guarded."""
    n = tir.Var("n", "int64")
    r, io, ii = (tir.Var(x, "int64") for x in ("r", "io", "ii"))
    A, C = tir.Buffer("A", (3, n), dtype), tir.Buffer("C", (3, n), dtype)
    B, M = tir.Buffer("B", (n,), dtype), tir.Buffer("M", (3,), dtype)
    i = io * W + ii
    value = tir.exp(A[r, i] - M[r]) * B[i] + tir.cast(dtype, i)
    body = tir.For(r, 0, 3, F.SERIAL, tir.For(io, 0, (n + W - 1) // W, F.SERIAL, tir.For(
        ii, 0, W, F.VECTORIZED, tir.IfThenElse(i < n, tir.BufferStore(C, value, [r, i])))))
    return tir.PrimFunc("rows", [A, B, M, C], body, size_bounds={n: (0, 4096)})


def _compare(before: tir.PrimFunc, after: tir.PrimFunc, n: int, seed: int = 0) -> None:
    """Both on the same random arrays (the output NaN first, so unwritten lanes show)."""
    rng = np.random.default_rng(seed)
    env = {v: n for v in before.size_vars}
    args = []
    for k, p in enumerate(before.params):
        shape = tuple(int(tir.interpreter.eval_expr(d, env)) for d in p.shape)
        a = rng.standard_normal(shape).astype(p.dtype)
        args.append(np.full(shape, np.nan, p.dtype) if k == len(before.params) - 1 else a)
    a1, a2 = [a.copy() for a in args], [a.copy() for a in args]
    run(before, a1, sizes={"n": n})
    run(after, a2, sizes={"n": n})
    for p, x, y in zip(before.params, a1, a2):
        np.testing.assert_allclose(y, x, rtol=1e-6, atol=1e-6, err_msg=f"{p.name} n={n}")


@pytest.mark.parametrize("n", SIZES)
def test_the_partial_vector_is_masked_and_exact(n: int) -> None:
    f = _rows()
    g = lower_pipeline(f, {"predicate_tails": True})
    loads, stores = _masked(g)
    assert loads == 2 and stores == 1  # A and B read under the mask, C written under it
    verify(g, lowered=True)
    _compare(f, g, n)


def test_without_the_option_the_tail_stays_scalar() -> None:
    g = lower_pipeline(_rows())
    assert _masked(g) == (0, 0)
    _compare(_rows(), g, 21)


def test_a_mask_runs_under_its_first_lanes_condition() -> None:
    """The masked statement sits under ``if base < n``: a load that does not depend on the
    lane (``M[r]``) runs only when some lane is inside."""
    g = vectorize(flatten_buffers(_rows()), predicate=True)
    guards = [s for s in nodes_of(g.body, tir.IfThenElse) if s.condition.lanes == 1]
    assert guards and all(_masked(tir.PrimFunc("x", [], s.then_case)) == (2, 1)
                          for s in guards)


def _guarded(cond: str) -> tir.PrimFunc:
    n = tir.Var("n", "int64")
    io, ii = tir.Var("io", "int64"), tir.Var("ii", "int64")
    A, C = tir.Buffer("A", (n,), "int32"), tir.Buffer("C", (n,), "int32")
    D = tir.Buffer("D", (n,), "int32")
    i = io * W + ii
    if cond == "divides":
        value, guard = A[i] // (D[i] * D[i] + 1), i < n
    elif cond == "square":
        value, guard = A[i] + 1, i * i < n
    else:  # "else": an else branch cannot be masked
        value, guard = A[i] + 1, i < n
    other = tir.BufferStore(C, A[0] * 0, [i]) if cond == "else" else None
    body = tir.For(io, 0, n // W, F.SERIAL, tir.For(ii, 0, W, F.VECTORIZED, tir.IfThenElse(
        guard, tir.BufferStore(C, value, [i]), other)))
    return tir.PrimFunc("g", [A, D, C], body, size_bounds={n: (0, 4096)})


@pytest.mark.parametrize("cond", ["divides", "square", "else"])
def test_what_cannot_be_masked_stays_scalar(cond: str) -> None:
    f = _guarded(cond)
    g = vectorize(f, predicate=True)
    assert _masked(g) == (0, 0)
    rng = np.random.default_rng(3)
    for n in (W, 3 * W):
        a = rng.integers(-50, 50, n).astype(np.int32)
        d = rng.integers(-5, 5, n).astype(np.int32)
        want, got = np.zeros(n, np.int32), np.zeros(n, np.int32)
        run(f, [a, d, want], sizes={"n": n})
        run(g, [a, d, got], sizes={"n": n})
        np.testing.assert_array_equal(got, want)


def test_the_interpreter_reads_and_writes_only_the_lanes_inside() -> None:
    """At the end of a buffer the lanes outside the mask address memory past it: the
    interpreter must neither read nor write them (nor complain)."""
    A, C = tir.Buffer("A", (5,), "float32"), tir.Buffer("C", (5,), "float32")
    mask = E.LT(E.Ramp(E.IntImm(0, "int64"), E.IntImm(1, "int64"), 8),
                E.Broadcast(E.IntImm(5, "int64"), 8))
    ramp = E.Ramp(E.IntImm(0, "int64"), E.IntImm(1, "int64"), 8)
    load = E.Call(E.MASKED_LOAD, [E.BufferLoad(A, [ramp]), mask], "float32")
    store = tir.BufferStore(C, E.Call(E.MASKED_STORE, [load * 2.0, mask], "float32"), [ramp])
    a = np.arange(5, dtype=np.float32) + 1
    c = np.zeros(5, np.float32)
    run(tir.PrimFunc("m", [A, C], store), [a, c])
    np.testing.assert_array_equal(c, a * 2)


def _transposed() -> tir.PrimFunc:
    """``C[r, i] = A[i, r] * 2 + i`` for r < 3 and i < n (run-time): the partial vector's
    load of A is strided (a gather)."""
    n = tir.Var("n", "int64")
    r, io, ii = (tir.Var(x, "int64") for x in ("r", "io", "ii"))
    A, C = tir.Buffer("A", (n, 3), "float32"), tir.Buffer("C", (3, n), "float32")
    i = io * W + ii
    value = A[i, r] * 2.0 + tir.cast("float32", i)
    body = tir.For(r, 0, 3, F.SERIAL, tir.For(io, 0, (n + W - 1) // W, F.SERIAL, tir.For(
        ii, 0, W, F.VECTORIZED, tir.IfThenElse(i < n, tir.BufferStore(C, value, [r, i])))))
    return tir.PrimFunc("transposed", [A, C], body, size_bounds={n: (0, 4096)})


@pytest.mark.parametrize("n", SIZES)
def test_a_strided_load_under_a_mask_reads_the_first_lane_outside_it(n: int) -> None:
    """The last vector of a transpose is one masked store of a gather whose lanes outside
    the mask read the first lane's element (never one past the loop), not 16 guarded scalar
    statements."""
    f = _transposed()
    g = lower_pipeline(f, {"predicate_tails": True})
    assert _masked(g) == (0, 1)
    stores = [s for s in nodes_of(g.body, tir.BufferStore) if s.buffer.name == "C"]
    assert len(stores) == 2 and all(s.value.lanes == W for s in stores)
    gathers = [e for e in nodes_of(g.body, E.BufferLoad)
               if e.buffer.name == "A" and isinstance(e.indices[0], E.Select)]
    assert len(gathers) == 1
    verify(g, lowered=True)
    _compare(f, g, n)
