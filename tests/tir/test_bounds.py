"""Tests of tessera.tir.transform.remove_redundant_checks (conditions decided by loop
ranges)."""

from __future__ import annotations

import pytest

from tessera import tir
from tessera.tir.functor import post_order_visit
from tessera.tir.transform import remove_redundant_checks
from tessera.tir.transform.remove_checks import decide_by_enumeration

F = tir.ForKind


def _count(func: tir.PrimFunc, cls: type) -> int:
    n = 0

    def f(x: object) -> None:
        nonlocal n
        n += isinstance(x, cls)

    post_order_visit(func.body, f)
    return n


def _split_guard(n: int, factor: int) -> tir.PrimFunc:
    """B[i] = A[i] + 1 over a split loop guarded by i < n (the TE pattern)."""
    A = tir.decl_buffer((n,), "float32", "A")
    B = tir.decl_buffer((n,), "float32", "B")
    io, ii = tir.Var("io"), tir.Var("ii")
    i = io * factor + ii
    outer = (n + factor - 1) // factor
    body = tir.For(io, 0, outer, F.SERIAL, tir.For(ii, 0, factor, F.SERIAL, tir.IfThenElse(
        i < n, tir.BufferStore(B, A[i] + 1.0, [i]))))
    return tir.PrimFunc("split", [A, B], body)


@pytest.mark.parametrize("n, factor, removable", [(16, 4, True), (12, 4, True),
                                                  (10, 4, False), (7, 8, False)])
def test_split_guard(n: int, factor: int, removable: bool, same) -> None:
    f = _split_guard(n, factor)
    g = remove_redundant_checks(f)
    assert (_count(g, tir.IfThenElse) == 0) == removable
    same(f, g)


def test_padding_select_and_else_branch(same) -> None:
    # select(1 <= y + r - 1 < H + 1 ...) with r fixed to the interior is always true
    A = tir.decl_buffer((6, 8), "float32", "A")
    B = tir.decl_buffer((4, 8), "float32", "B")
    y, x, r = tir.Var("y"), tir.Var("x"), tir.Var("r")
    row = y + r
    cond = tir.all_of(row >= 0, row < 6, x >= 0)
    val = tir.select(cond, A[row, x], tir.const(0.0, "float32"))
    body = tir.For(y, 0, 4, F.SERIAL, tir.For(x, 0, 8, F.SERIAL, tir.For(r, 0, 3, F.SERIAL,
        tir.IfThenElse(tir.LT(x, tir.const(0)),
                       tir.BufferStore(B, tir.const(-1.0, "float32"), [y, x]),
                       tir.BufferStore(B, B[y, x] + val, [y, x])))))
    f = tir.PrimFunc("pad", [A, B], body)
    g = remove_redundant_checks(f)
    assert _count(g, tir.Select) == 0 and _count(g, tir.IfThenElse) == 0
    assert "-1.0" not in str(g)
    same(f, g)


def test_needed_checks_stay(same) -> None:
    A = tir.decl_buffer((6, 8), "float32", "A")
    B = tir.decl_buffer((4, 8), "float32", "B")
    y, x, r = tir.Var("y"), tir.Var("x"), tir.Var("r")
    row = y + r - 1
    val = tir.select(tir.all_of(row >= 0, row < 4), A[row + 1, x], tir.const(0.0, "float32"))
    body = tir.For(y, 0, 4, F.SERIAL, tir.For(x, 0, 8, F.SERIAL, tir.For(r, 0, 3, F.SERIAL,
        tir.BufferStore(B, B[y, x] + val, [y, x]))))
    f = tir.PrimFunc("pad", [A, B], body)
    g = remove_redundant_checks(f)
    assert _count(g, tir.Select) == 1
    same(f, g)


def test_enumeration_decides_non_linear_conditions(same) -> None:
    A = tir.decl_buffer((64,), "float32", "A")
    i, j = tir.Var("i"), tir.Var("j")
    cond = tir.LT((i * 3 + j) % 7 + (i * 8 + j) // 4, tir.const(24))
    body = tir.For(i, 0, 4, F.SERIAL, tir.For(j, 0, 8, F.SERIAL, tir.IfThenElse(
        cond, tir.BufferStore(A, A[i * 8 + j] * 2.0, [i * 8 + j]))))
    f = tir.PrimFunc("f", [A], body)
    g = remove_redundant_checks(f)
    assert _count(g, tir.IfThenElse) == 0
    same(f, g)
    assert decide_by_enumeration(tir.LT(i * i, tir.const(10)), {i: (0, 3)}) is True
    assert decide_by_enumeration(tir.LT(i * i, tir.const(0)), {i: (0, 3)}) is False
    assert decide_by_enumeration(tir.LT(i * i, tir.const(5)), {i: (0, 3)}) is None
    assert decide_by_enumeration(tir.LT(i, j), {i: (0, 3)}) is None


def test_let_bound_condition(same) -> None:
    A = tir.decl_buffer((8,), "float32", "A")
    i, t = tir.Var("i"), tir.Var("t")
    body = tir.For(i, 0, 8, F.SERIAL, tir.LetStmt(t, (i * 5) % 8, tir.IfThenElse(
        tir.LT(t, tir.const(8)), tir.BufferStore(A, A[t] + 1.0, [t]))))
    f = tir.PrimFunc("f", [A], body)
    g = remove_redundant_checks(f)
    assert _count(g, tir.IfThenElse) == 0
    same(f, g)


def test_condition_on_loads_is_kept(same) -> None:
    A = tir.decl_buffer((8,), "float32", "A")
    i = tir.Var("i")
    body = tir.For(i, 0, 8, F.SERIAL, tir.IfThenElse(
        A[i] > tir.const(0.0, "float32"), tir.BufferStore(A, A[i] * 2.0, [i])))
    f = tir.PrimFunc("f", [A], body)
    g = remove_redundant_checks(f)
    assert _count(g, tir.IfThenElse) == 1
    same(f, g)
