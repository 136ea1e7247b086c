"""Tests of tessera.tir.transform.unroll."""

from __future__ import annotations

import pytest

from tessera import tir
from tessera.tir.functor import post_order_visit
from tessera.tir.transform import flatten_buffers, unroll

F = tir.ForKind


def _nodes(func: tir.PrimFunc, cls: type) -> list:
    out: list = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, cls) else None)
    return out


def _tile(mb: int, nb: int) -> tir.PrimFunc:
    """C[i, j] = sum_k A[i, k] * B[k, j] with an mb x nb accumulator tile unrolled."""
    m, n, kk = mb * 2, nb * 2, 3
    A = tir.decl_buffer((m, kk), "float32", "A")
    B = tir.decl_buffer((kk, n), "float32", "B")
    C = tir.decl_buffer((m, n), "float32", "C")
    acc = tir.decl_buffer((mb, nb), "float32", "acc", scope="local")
    io, jo, k, ii, ji = (tir.Var(x) for x in ("io", "jo", "k", "ii", "ji"))
    i, j = io * mb + ii, jo * nb + ji

    def tile(stmt: tir.Stmt) -> tir.Stmt:
        return tir.For(ii, 0, mb, F.UNROLLED, tir.For(ji, 0, nb, F.UNROLLED, stmt))

    body = tir.For(io, 0, 2, F.SERIAL, tir.For(jo, 0, 2, F.SERIAL, tir.Allocate(acc, tir.seq(
        tile(tir.BufferStore(acc, tir.const(0.0, "float32"), [ii, ji])),
        tir.For(k, 0, kk, F.SERIAL,
                tile(tir.BufferStore(acc, acc[ii, ji] + A[i, k] * B[k, j], [ii, ji]))),
        tile(tir.BufferStore(C, acc[ii, ji], [i, j]))))))
    return tir.PrimFunc("mm", [A, B, C], body)


@pytest.mark.parametrize("mb, nb", [(1, 1), (2, 3), (4, 4)])
def test_accumulator_tile_indexed_by_constants(mb: int, nb: int, same) -> None:
    f = flatten_buffers(_tile(mb, nb))
    g = unroll(f)
    assert all(loop.kind == F.SERIAL for loop in _nodes(g, tir.For))
    assert len(_nodes(g, tir.For)) == 3
    for node in _nodes(g, tir.BufferLoad) + _nodes(g, tir.BufferStore):
        if node.buffer.name == "acc":
            assert isinstance(node.indices[0], tir.IntImm)
    stores = [s for s in _nodes(g, tir.BufferStore) if s.buffer.name == "acc"]
    assert len(stores) == 2 * mb * nb
    same(f, g)


def test_unroll_renames_inner_binders(same) -> None:
    A = tir.decl_buffer((3, 4), "float32", "A")
    u, k, t = tir.Var("u"), tir.Var("k"), tir.Var("t")
    body = tir.For(u, 0, 3, F.UNROLLED, tir.LetStmt(t, u * 4, tir.For(
        k, 0, 4, F.SERIAL, tir.BufferStore(A, A[u, k] + tir.cast("float32", t + k), [u, k]))))
    f = tir.PrimFunc("f", [A], body)
    g = unroll(f)
    loops = _nodes(g, tir.For)
    assert len(loops) == 3
    assert len({id(loop.loop_var) for loop in loops}) == 3
    same(f, g)


def test_auto_unroll_small_serial_innermost(same) -> None:
    A = tir.decl_buffer((8, 3), "float32", "A")
    i, k = tir.Var("i"), tir.Var("k")
    body = tir.For(i, 0, 8, F.SERIAL, tir.For(k, 0, 3, F.SERIAL, tir.BufferStore(
        A, A[i, k] * 2.0, [i, k])))
    f = tir.PrimFunc("f", [A], body)
    assert len(_nodes(unroll(f), tir.For)) == 2
    g = unroll(f, auto_max_extent=4)
    loops = _nodes(g, tir.For)
    assert len(loops) == 1 and loops[0].loop_var is i
    same(f, g)


def test_symbolic_or_huge_unrolled_loops_become_serial(same) -> None:
    A = tir.decl_buffer((64,), "float32", "A")
    i = tir.Var("i")
    f = tir.PrimFunc("f", [A], tir.For(i, 0, 64, F.UNROLLED,
                                       tir.BufferStore(A, A[i] + 1.0, [i])))
    g = unroll(f, max_nodes=10)
    assert [loop.kind for loop in _nodes(g, tir.For)] == [F.SERIAL]
    same(f, g)
    n = tir.Var("n")
    loop = tir.For(i, 0, n, F.UNROLLED, tir.BufferStore(A, A[i] + 1.0, [i]))
    h = unroll(tir.PrimFunc("h", [A], loop))
    assert h.body.kind == F.SERIAL


def test_unrolled_extent_zero_and_offset_min(same) -> None:
    A = tir.decl_buffer((8,), "float32", "A")
    i, z = tir.Var("i"), tir.Var("z")
    body = tir.seq(
        tir.For(z, 0, 0, F.UNROLLED, tir.BufferStore(A, tir.const(9.0, "float32"), [z])),
        tir.For(i, 3, 4, F.UNROLLED, tir.BufferStore(A, A[i] * 3.0, [i])))
    f = tir.PrimFunc("f", [A], body)
    g = unroll(f)
    assert not _nodes(g, tir.For)
    assert "A[3] = (A[3] * 3.0f)" in str(g)
    same(f, g)
