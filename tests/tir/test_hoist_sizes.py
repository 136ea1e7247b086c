"""hoist_size_exprs (tessera.tir.transform.hoist_sizes): index arithmetic of symbolic kernels
bound once per scope. The interpreter runs each function before and after, on random data at
sizes around the tiles (0, 1, tile - 1, tile, tile + 1 and the bound), and the results must
be equal; then where each expression went is checked."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.tir.functor import nodes_of, post_order_visit
from tessera.tir.interpreter import run
from tessera.tir.transform import lower_pipeline
from tessera.tir.transform.hoist_sizes import hoist_size_exprs
from tessera.tir.verifier import verify

F = tir.ForKind
F32 = "float32"


def _lets(stmt: object) -> list[tir.LetStmt]:
    """The chain of let statements at the top of ``stmt``."""
    out = []
    while isinstance(stmt, tir.LetStmt):
        out.append(stmt)
        stmt = stmt.body
    return out


def _pooled(kind: F) -> tuple[tir.PrimFunc, tir.Var, tir.Var]:
    """Sum pooling by 2 over a run-time height and width, unrolled by hand: every store and
    load repeats the output width ``(w + 1) // 2`` and the row ``r // that``."""
    h, w = tir.Var("h"), tir.Var("w")
    A = tir.decl_buffer((h * w,), F32, "A")
    oh, ow = (h + 1) // 2, (w + 1) // 2
    B = tir.decl_buffer((oh * ow,), F32, "B")
    r = tir.Var("r")
    y, x = r // ow, r % ow
    stores = []
    for dy in range(2):
        for dx in range(2):
            src = (y * 2 + dy) * w + x * 2 + dx
            inside = tir.And(y * 2 + dy < h, x * 2 + dx < w)
            stores.append(tir.IfThenElse(inside, tir.BufferStore(B, B[r] + A[src], [r])))
    body = tir.For(r, 0, oh * ow, kind, tir.SeqStmt(stores))
    return (tir.PrimFunc("pool", [A, B], body, size_bounds={h: (0, 40), w: (0, 40)}), h, w)


@pytest.mark.parametrize("kind", [F.SERIAL, F.PARALLEL])
@pytest.mark.parametrize("h,w", [(0, 0), (0, 3), (1, 1), (1, 2), (2, 2), (3, 5), (7, 8),
                                 (40, 40), (13, 1)])
def test_results_are_unchanged(kind: F, h: int, w: int) -> None:
    f, _, _ = _pooled(kind)
    g = hoist_size_exprs(f)
    verify(g)
    rng = np.random.default_rng(h * 41 + w)
    a = rng.standard_normal(h * w).astype(F32)
    b = rng.standard_normal(((h + 1) // 2) * ((w + 1) // 2)).astype(F32)
    want, got = [a.copy(), b.copy()], [a.copy(), b.copy()]
    run(f, want, sizes={"h": h, "w": w})
    run(g, got, sizes={"h": h, "w": w})
    np.testing.assert_array_equal(got[1], want[1])


def test_each_expression_is_bound_once_in_its_scope() -> None:
    f, h, w = _pooled(F.SERIAL)
    g = hoist_size_exprs(f)
    top = _lets(g.body)
    # the sizes' expressions at the top: (w + 1) // 2 and the extent's product, each once
    values = [repr(s.value) for s in top]
    assert len(values) == len(set(values))
    assert any(repr((w + 1) // 2) == v for v in values), values
    for s in top:
        assert _vars(s.value) <= {h, w} | {t.var for t in top}, repr(s.value)
    (loop,) = nodes_of(g.body, tir.For)
    inner = _lets(loop.body)
    # the row and column of r, once each, at the top of the loop's body
    assert inner, "nothing bound in the loop"
    assert all(loop.loop_var in _vars(s.value) for s in inner)
    stores = nodes_of(loop.body, tir.BufferStore)
    assert len(stores) == 4
    for st in stores:  # no division left in the loads and stores: their parts are bound
        assert not nodes_of(st, tir.FloorDiv) and not nodes_of(st, tir.FloorMod), repr(st)


def _vars(e: object) -> set:
    out: set = set()
    post_order_visit(e, lambda n: out.add(n) if isinstance(n, tir.Var) else None)
    return out


def test_static_functions_and_loads_stay() -> None:
    """A function without size variables is returned as it is; an expression that reads a
    buffer is never bound (its value may change between statements)."""
    n = 16
    A = tir.decl_buffer((n,), "int64", "A")
    B = tir.decl_buffer((n,), "int64", "B")
    i = tir.Var("i")
    body = tir.For(i, 0, n, F.SERIAL, tir.BufferStore(B, A[i] * 3 + i // 2, [i]))
    f = tir.PrimFunc("static", [A, B], body)
    assert hoist_size_exprs(f) is f
    m = tir.Var("m")
    C = tir.decl_buffer((m,), "int64", "C")
    body = tir.For(i, 0, m, F.SERIAL, tir.SeqStmt([
        tir.BufferStore(C, C[i] + (m // 3) * C[i], [i]),
        tir.BufferStore(C, C[i] + (m // 3) * C[i], [i])]))
    g = hoist_size_exprs(tir.PrimFunc("loads", [C], body, size_bounds={m: (0, 64)}))
    assert [repr(s.value) for s in _lets(g.body)] == [repr(m // 3)]
    assert len(nodes_of(g.body, tir.BufferLoad)) == 4


def test_lowered_kernel_keeps_its_results() -> None:
    """After the default pipeline (partitioned, vectorized, unrolled), the pass still gives
    the same results."""
    f, _, _ = _pooled(F.PARALLEL)
    g = lower_pipeline(f)
    k = hoist_size_exprs(g)
    verify(k, lowered=True)
    for h, w in [(0, 0), (1, 1), (5, 9), (40, 40)]:
        rng = np.random.default_rng(h + w)
        a = rng.standard_normal(h * w).astype(F32)
        b = rng.standard_normal(((h + 1) // 2) * ((w + 1) // 2)).astype(F32)
        want, got = [a.copy(), b.copy()], [a.copy(), b.copy()]
        run(g, want, sizes={"h": h, "w": w})
        run(k, got, sizes={"h": h, "w": w})
        np.testing.assert_array_equal(got[1], want[1])
