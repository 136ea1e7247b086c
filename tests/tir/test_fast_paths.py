"""The shortcuts that make lowering fast give what the plain definitions give: structural
equality node by node, the polynomial match without building the expression, the
simplifier's memo, table dispatch in visitors, and heavy work (tessera.tir.heavy)."""

from __future__ import annotations

import gc
import random
import threading

import pytest

from tessera import tir
from tessera.te.tensor import IterVar, Range
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import Poly, poly_is, struct_equal, struct_key, to_poly, uses_var
from tessera.tir.buffer import Buffer
from tessera.tir.functor import IRMutator, IRVisitor, contains, post_order_visit
from tessera.tir.heavy import GC_THRESHOLD, heavy_work, run_heavy_work
from tessera.tir.simplify import Simplifier

I, J, K = tir.Var("i"), tir.Var("j"), tir.Var("k")
BUF = Buffer("b", [64], "float32")


def _random_expr(rng: random.Random, depth: int) -> E.PrimExpr:
    """A random int64 index expression over i, j, k and small constants."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([I, J, K, E.IntImm(rng.randint(-3, 9)), E.IntImm(0)])
    a, b = _random_expr(rng, depth - 1), _random_expr(rng, depth - 1)
    kind = rng.randrange(8)
    if kind == 0:
        return a + b
    if kind == 1:
        return a - b
    if kind == 2:
        return a * b
    if kind == 3:
        return a // E.IntImm(rng.randint(1, 8))
    if kind == 4:
        return a % E.IntImm(rng.randint(1, 8))
    if kind == 5:
        return tir.min_(a, b)
    if kind == 6:
        return tir.select(a < b, a, b)
    return E.BufferLoad(BUF, [a]).astype("int64")


def test_struct_equal_is_equality_of_struct_keys() -> None:
    rng = random.Random(0)
    exprs = [_random_expr(rng, 4) for _ in range(300)]
    exprs += [E.FloatImm(0.0), E.FloatImm(-0.0), E.FloatImm(float("nan")),
              E.FloatImm(float("nan")), E.IntImm(1, "int32"), E.IntImm(1, "int64"),
              E.Ramp(I, 1, 4), E.Ramp(I, 1, 8), E.Broadcast(I, 4), IterVar(Range(0, 4), "t")]
    for _ in range(4000):
        a, b = rng.choice(exprs), rng.choice(exprs)
        if rng.random() < 0.3:  # a rebuilt copy: equal structure, other objects
            b = tir.functor.substitute(a, {K: K + 0}) if rng.random() < 0.5 else a
        assert struct_equal(a, b) == (struct_key(a) == struct_key(b)), (a, b)
    twins = [(E.IntImm(3) + I, E.IntImm(3) + I), (I * J, I * J), (I - J, J - I)]
    for a, b in twins:
        assert struct_equal(a, b) == (struct_key(a) == struct_key(b))


def test_poly_is_matches_to_expr_without_false_positives() -> None:
    rng = random.Random(1)
    for _ in range(2000):
        e = _random_expr(rng, 4)
        p = to_poly(e)
        built = p.to_expr()
        assert poly_is(p, built), (p.to_expr(), e)  # what to_expr builds matches itself
        assert not poly_is(p, e) or struct_equal(built, e), (built, e)
    # the shapes of to_expr: negative terms only, a negative constant, no terms
    for p in (Poly("int64", -4), Poly("int64", 0)):
        assert poly_is(p, p.to_expr())
    neg = to_poly(E.IntImm(0) - I * 3)
    assert str(neg.to_expr()) == str(I * -3) and poly_is(neg, neg.to_expr())
    mixed = to_poly(I * 2 - J - 5)
    assert poly_is(mixed, mixed.to_expr()) and not poly_is(mixed, I * 2 - J - 4)


def _unrollable_body() -> S.Stmt:
    acc = Buffer("acc", [16], "float32")
    a = Buffer("a", [64], "float32")
    shared = E.BufferLoad(a, [(K * 4 + 3) // 2])  # the same subtree in every statement
    stores = [S.BufferStore(acc, E.BufferLoad(acc, [I * 4 + j]) + shared, [I * 4 + j])
              for j in range(4)]
    inner = S.For(J, 0, 3, S.ForKind.SERIAL,
                  S.BufferStore(acc, shared, [(I * 4 + J) % 16]))
    return S.SeqStmt([*stores, inner, S.LetStmt(K, I + 1, S.SeqStmt(stores))])


def test_the_simplifier_memo_changes_no_result() -> None:
    body = _unrollable_body()
    bounds = {I: (0, 3), K: (0, 7)}
    plain, memo = Simplifier(bounds), Simplifier(bounds, memo=True)
    for _ in range(2):  # again: the second time from the memo
        assert repr(memo.visit(body)) == repr(plain.visit(body))
    copies = [tir.functor.substitute(body, {I: E.IntImm(v)}) for v in range(4)]
    for c in copies:
        assert repr(memo.visit(c)) == repr(plain.visit(c))
    seq = S.SeqStmt([plain.visit(c) for c in copies])
    assert repr(memo.visit(seq)) == repr(plain.visit(seq))


def test_visitors_dispatch_on_the_nearest_base_class() -> None:
    t = IterVar(Range(0, 4), "t")

    class Rename(IRMutator):
        def visit_Var(self, v: E.Var) -> E.PrimExpr:
            return E.IntImm(7) if v is t else v

    class Count(IRVisitor):
        def __init__(self) -> None:
            self.binary = 0

        def visit_BinaryOp(self, e: E.BinaryOp) -> None:
            self.binary += 1
            self.generic_visit(e)

    e = (t + I) * (J - 1)
    assert str(Rename().visit(e)) == str((E.IntImm(7) + I) * (J - 1))
    untouched = I + J * 2
    assert Rename().visit(untouched) is untouched  # nothing changed: the same object
    counter = Count()
    counter.visit(e)
    assert counter.binary == 3
    order: list[str] = []
    post_order_visit(e, lambda n: order.append(type(n).__name__))
    assert order == ["IterVar", "Var", "Add", "Var", "IntImm", "Sub", "Mul"]


def test_heavy_work_passes_results_and_errors_and_restores_the_collector() -> None:
    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []

    @heavy_work
    def deep(n: int) -> int:
        seen.append(gc.get_threshold())
        return 0 if n == 0 else 1 + deep(n - 1)  # nested: runs directly

    assert deep(200) == 200
    assert seen[0][0] >= GC_THRESHOLD and gc.get_threshold() == before
    with pytest.raises(ZeroDivisionError):
        run_heavy_work(lambda: 1 // 0)
    assert gc.get_threshold() == before
    assert deep.__name__ == "deep"

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(deep(50))) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [50] * 4 and gc.get_threshold() == before


def test_contains_agrees_with_a_full_walk() -> None:
    """``contains`` (what ``uses_var`` asks, stopping at the first occurrence) finds exactly
    the variables a full post-order walk meets, in expressions and statements."""
    rng = random.Random(5)
    other = tir.Var("other")
    for _ in range(200):
        e = _random_expr(rng, 5)
        stmt = S.LetStmt(other, e, S.BufferStore(BUF, E.Cast("float32", other + J), [I]))
        for node in (e, stmt):
            seen: set[int] = set()
            post_order_visit(node, lambda n, seen=seen: seen.add(id(n)))
            for v in (I, J, K, other):
                assert contains(node, v) == (id(v) in seen) == uses_var(node, v)
