"""Tests of tessera.tir.transform.storage_rewrite (hoisting and sharing allocations)."""

from __future__ import annotations

from tessera import tir
from tessera.tir.functor import post_order_visit
from tessera.tir.transform import flatten_buffers, storage_rewrite

F = tir.ForKind


def _allocs(node: object) -> list[tir.Allocate]:
    out: list = []
    post_order_visit(node, lambda n: out.append(n) if isinstance(n, tir.Allocate) else None)
    return out


def _two_stage(kind: tir.ForKind) -> tir.PrimFunc:
    """Per row: T1 = A*2, T2 = T1+1 (T1 dead after), T3 = T2*T2 (T2 dead after), B = T3."""
    n, m = 4, 6
    A = tir.decl_buffer((n, m), "float32", "A")
    B = tir.decl_buffer((n, m), "float32", "B")
    T1 = tir.decl_buffer((m,), "float32", "T1")
    T2 = tir.decl_buffer((m,), "float32", "T2")
    T3 = tir.decl_buffer((m,), "float32", "T3")
    i, j = tir.Var("i"), tir.Var("j")

    def loop(stmt: tir.Stmt) -> tir.Stmt:
        return tir.For(j, 0, m, F.SERIAL, stmt)

    body = tir.For(i, 0, n, kind, tir.Allocate(T1, tir.Allocate(T2, tir.Allocate(T3, tir.seq(
        loop(tir.BufferStore(T1, A[i, j] * 2.0, [j])),
        loop(tir.BufferStore(T2, T1[j] + 1.0, [j])),
        loop(tir.BufferStore(T3, T2[j] * T2[j], [j])),
        loop(tir.BufferStore(B, T3[j], [i, j])))))))
    return flatten_buffers(tir.PrimFunc("stages", [A, B], body))


def test_hoist_to_function_top_and_reuse(same) -> None:
    f = _two_stage(F.SERIAL)
    g = storage_rewrite(f)
    assert isinstance(g.body, tir.Allocate)  # hoisted out of the loop
    allocs = _allocs(g.body)
    # T1 and T3 have disjoint lifetimes: they share one allocation
    assert len(allocs) == 2
    assert sorted(a.buffer.name for a in allocs) == ["T1", "T2"]
    same(f, g)
    g2 = storage_rewrite(f, reuse=False)
    assert len(_allocs(g2.body)) == 3 and isinstance(g2.body, tir.Allocate)
    same(f, g2)


def test_hoist_stops_at_parallel_loop(same) -> None:
    f = _two_stage(F.PARALLEL)
    g = storage_rewrite(f)
    assert isinstance(g.body, tir.For) and g.body.kind == F.PARALLEL
    assert isinstance(g.body.body, tir.Allocate)
    same(f, g)


def test_loop_lifetimes_overlap_and_dtypes_differ(same) -> None:
    A = tir.decl_buffer((4,), "float32", "A")
    B = tir.decl_buffer((4,), "int32", "B")
    T = tir.decl_buffer((4,), "float32", "T", scope="local")
    U = tir.decl_buffer((4,), "float32", "U", scope="local")
    V = tir.decl_buffer((4,), "int32", "V", scope="local")
    i = tir.Var("i")
    # T and U are used in the same loop (overlap); V is int32 (no sharing with float)
    body = tir.Allocate(T, tir.Allocate(U, tir.Allocate(V, tir.seq(
        tir.For(i, 0, 4, F.SERIAL, tir.seq(
            tir.BufferStore(T, A[i] + 1.0, [i]),
            tir.BufferStore(U, T[i] * 2.0, [i]),
            tir.BufferStore(A, U[i], [i]))),
        tir.For(i, 0, 4, F.SERIAL, tir.seq(
            tir.BufferStore(V, B[i] * tir.const(3, "int32"), [i]),
            tir.BufferStore(B, V[i], [i])))))))
    f = tir.PrimFunc("f", [A, B], body)
    g = storage_rewrite(f)
    names = sorted(a.buffer.name for a in _allocs(g.body))
    assert names == ["T", "U", "V"]
    same(f, g)


def test_unrolled_duplicate_allocations_are_hoisted_once(same) -> None:
    A = tir.decl_buffer((3, 2), "float32", "A")
    T = tir.decl_buffer((2,), "float32", "T", scope="local")
    seqs = []
    for r in range(3):
        seqs.append(tir.Allocate(T, tir.seq(
            tir.BufferStore(T, A[r, 0] * 2.0, [0]),
            tir.BufferStore(T, A[r, 1] * 3.0, [1]),
            tir.BufferStore(A, T[0] + T[1], [r, 0]))))
    f = tir.PrimFunc("f", [A], tir.seq(*seqs))
    g = storage_rewrite(f)
    assert len(_allocs(g.body)) == 1 and isinstance(g.body, tir.Allocate)
    same(f, g)


def test_symbolic_size_allocation_stays() -> None:
    n = tir.Var("n")
    A = tir.decl_buffer((8,), "float32", "A")
    T = tir.decl_buffer((n,), "float32", "T")
    i = tir.Var("i")
    body = tir.LetStmt(n, tir.const(8), tir.For(i, 0, 2, F.SERIAL, tir.Allocate(
        T, tir.BufferStore(T, A[i], [i]))))
    g = storage_rewrite(tir.PrimFunc("f", [A], body))
    loop = g.body.body
    assert isinstance(loop, tir.For) and isinstance(loop.body, tir.Allocate)


def test_reuse_grows_to_largest(same) -> None:
    A = tir.decl_buffer((8,), "float32", "A")
    S1 = tir.decl_buffer((2,), "float32", "S1")
    S2 = tir.decl_buffer((8,), "float32", "S2")
    i = tir.Var("i")
    body = tir.Allocate(S1, tir.Allocate(S2, tir.seq(
        tir.For(i, 0, 2, F.SERIAL, tir.BufferStore(S1, A[i] * 2.0, [i])),
        tir.For(i, 0, 2, F.SERIAL, tir.BufferStore(A, S1[i], [i])),
        tir.For(i, 0, 8, F.SERIAL, tir.BufferStore(S2, A[i] + 1.0, [i])),
        tir.For(i, 0, 8, F.SERIAL, tir.BufferStore(A, S2[i] * S2[i], [i])))))
    f = tir.PrimFunc("f", [A], body)
    g = storage_rewrite(f)
    allocs = _allocs(g.body)
    assert len(allocs) == 1 and allocs[0].buffer.shape[0].value == 8
    same(f, g)
