"""Tests of the TIR simplifier and the arithmetic analysis (tessera.tir.simplify, .arith)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tessera import tir
from tessera.tir.arith import const_int_bound, linear_in, struct_equal
from tessera.tir.interpreter import eval_expr, run
from tessera.tir.simplify import can_prove, simplify

I, J, K, N = tir.Var("i"), tir.Var("j"), tir.Var("k"), tir.Var("n")
BOUNDS = {I: (0, 3), J: (0, 7), K: (-5, 20)}


def _s(e: tir.PrimExpr) -> str:
    return str(simplify(e, BOUNDS))


@pytest.mark.parametrize("expr, expected", [
    ((I * 8 + J) - I * 8, "j"),
    ((I * 8 + J) // 8, "i"),
    ((I * 8 + J) % 8, "j"),
    (J // 8, "0"),
    (J % 8, "j"),
    ((K % 8) // 8, "0"),
    ((N // 4) // 2, "(n // 8)"),
    ((N % 16) % 8, "(n % 8)"),
    ((N // 8) * 8 + N % 8, "n"),
    ((N * 4) // 8, "(n // 2)"),
    (N + 0, "n"),
    (N * 1, "n"),
    (N * 0, "0"),
    (N // 1, "n"),
    (N % 1, "0"),
    (tir.min_(N, N), "n"),
    (tir.max_(J, 8), "8"),
    (tir.min_(I, I + 1), "i"),
    (3 * (N + 2) - 6, "(n * 3)"),
    (tir.const(7) // tir.const(-2), "-4"),
    (tir.const(-7) % tir.const(3), "2"),
    (I * 8 + J < 32, "bool(1)"),
    (I * 8 + J >= 32, "bool(0)"),
    (tir.eq(I, 5), "bool(0)"),
])
def test_rewrites(expr: tir.PrimExpr, expected: str) -> None:
    assert _s(expr) == expected


def test_logic_and_select_folding() -> None:
    t = tir.IntImm(1, "bool")
    f = tir.IntImm(0, "bool")
    c = tir.LT(N, tir.const(3))
    assert simplify(tir.And(c, t)) is c
    assert str(simplify(tir.And(c, f))) == "bool(0)"
    assert simplify(tir.Or(f, c)) is c
    assert str(simplify(tir.Or(c, t))) == "bool(1)"
    assert str(simplify(tir.Not(tir.Not(c)))) == "(n < 3)"
    assert str(simplify(tir.Not(c))) == "(n >= 3)"
    x = tir.Var("x", "float32")
    assert simplify(tir.select(I < 4, x, x * 2.0), BOUNDS) is x
    assert simplify(tir.select(c, x, x)) is x
    # float: no reassociation, but identities
    assert simplify(x * 1.0 + 0.0) is x
    assert str(simplify(x - x)) == "(x - x)"


def test_float_constant_folding_uses_dtype() -> None:
    e = tir.const(0.1, "float32") + tir.const(0.2, "float32")
    out = simplify(e)
    assert isinstance(out, tir.FloatImm)
    assert out.value == float(np.float32(0.1) + np.float32(0.2))
    assert str(simplify(tir.Cast("int8", tir.const(300, "int32")))) == "int8(44)"


def test_vector_rules() -> None:
    r = tir.Ramp(I * 8, 1, 8)
    eight = tir.Broadcast(tir.const(8), 8)
    assert str(simplify(r // eight, BOUNDS)) == "x8(i)"
    assert str(simplify(r % eight, BOUNDS)) == "ramp(0, 1, 8)"
    assert str(simplify(r + tir.Broadcast(J, 8))) == "ramp(((i * 8) + j), 1, 8)"
    assert str(simplify(tir.Ramp(I, 1, 4) * tir.Broadcast(tir.const(3), 4))) == \
        "ramp((i * 3), 3, 4)"
    assert str(simplify(tir.Ramp(I, 0, 4))) == "x4(i)"
    cond = tir.LT(tir.Ramp(J, 1, 4), tir.Broadcast(tir.const(11), 4))
    assert str(simplify(cond, BOUNDS)) == "x4(bool(1))"


def test_bounds_and_linear() -> None:
    assert const_int_bound(I * 8 + J, BOUNDS) == (0, 31)
    assert const_int_bound(K % 8, BOUNDS) == (0, 7)
    assert const_int_bound(N) == (None, None)
    assert const_int_bound(tir.Ramp(J, 2, 4), BOUNDS) == (0, 13)
    base, stride = linear_in(I * 8 + J * 3 + 1, J)
    assert str(base) == "((i * 8) + 1)" and str(stride) == "3"
    base, stride = linear_in(I * N + J, I)
    assert str(stride) == "n"
    assert linear_in(J // 4, J) is None
    assert linear_in(J * J, J) is None
    assert can_prove(I * 8 + J < 32, BOUNDS)
    assert not can_prove(I * 8 + J < 31, BOUNDS)
    assert struct_equal(I * 2 + 1, I * 2 + 1)
    assert not struct_equal(I * 2 + 1, J * 2 + 1)


# ---- randomized equivalence -------------------------------------------------------------


def _rand_expr(rng: random.Random, depth: int) -> tir.PrimExpr:
    if depth == 0 or rng.random() < 0.2:
        if rng.random() < 0.3:
            return tir.const(rng.randint(-9, 9))
        return rng.choice([I, J, K])
    a = _rand_expr(rng, depth - 1)
    b = _rand_expr(rng, depth - 1)
    op = rng.choice(["add", "sub", "mul", "div", "mod", "min", "max", "sel", "cmul"])
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "cmul":
        return a * rng.choice([2, 3, 4, 8, -1])
    if op == "div":
        return a // rng.choice([1, 2, 3, 4, 8, 16])
    if op == "mod":
        return a % rng.choice([1, 2, 3, 4, 8, 16])
    if op == "min":
        return tir.min_(a, b)
    if op == "max":
        return tir.max_(a, b)
    return tir.select(a < b, a, b + 1)


@pytest.mark.parametrize("seed", range(6))
def test_random_int_expressions_keep_their_value(seed: int) -> None:
    rng = random.Random(seed)
    points = [{I: rng.randint(0, 3), J: rng.randint(0, 7), K: rng.randint(-5, 20)}
              for _ in range(25)]
    for _ in range(60):
        e = _rand_expr(rng, 4)
        s = simplify(e, BOUNDS)
        for p in points:
            assert eval_expr(s, p) == eval_expr(e, p), (e, s, p)


@pytest.mark.parametrize("seed", range(3))
def test_random_conditions_keep_their_value(seed: int) -> None:
    rng = random.Random(100 + seed)
    points = [{I: rng.randint(0, 3), J: rng.randint(0, 7), K: rng.randint(-5, 20)}
              for _ in range(25)]
    cmps = [tir.LT, tir.LE, tir.GT, tir.GE, tir.EQ, tir.NE]
    for _ in range(60):
        c = rng.choice(cmps)(_rand_expr(rng, 3), _rand_expr(rng, 3))
        if rng.random() < 0.5:
            c = tir.And(c, rng.choice(cmps)(_rand_expr(rng, 2), _rand_expr(rng, 2)))
        if rng.random() < 0.3:
            c = tir.Not(c)
        s = simplify(c, BOUNDS)
        for p in points:
            assert bool(eval_expr(s, p)) == bool(eval_expr(c, p)), (c, s, p)


# ---- statements -------------------------------------------------------------------------


def test_loops_lets_and_ifs() -> None:
    A = tir.decl_buffer((4, 8), "float32", "A")
    B = tir.decl_buffer((4, 8), "float32", "B")
    i, j, u, z, t = (tir.Var(n) for n in "ijuzt")
    body = tir.For(i, 0, 4, tir.ForKind.SERIAL, tir.For(
        u, 0, 1, tir.ForKind.SERIAL, tir.seq(
            tir.For(z, 0, 0, tir.ForKind.SERIAL, tir.BufferStore(B, A[0, 0], [0, 0])),
            tir.For(j, 0, 8, tir.ForKind.SERIAL, tir.LetStmt(t, (i * 8 + j + u) // 8,
                    tir.IfThenElse(tir.all_of(t < 4, j < 8),
                                   tir.BufferStore(B, A[t, (j + u) % 8] * 2.0, [i, j]),
                                   tir.BufferStore(B, A[0, 0], [i, j])))))))
    f = tir.PrimFunc("f", [A, B], body)
    g = simplify(f)
    text = str(g)
    assert "u" not in text.replace("run", "")  # the extent-1 loop is gone
    assert "z" not in text
    assert "if" not in text and "%" not in text and "//" not in text
    assert "B[i, j] = (A[i, j] * 2.0f)" in text
    a = np.random.default_rng(1).standard_normal((4, 8)).astype("float32")
    b1, b2 = np.zeros_like(a), np.zeros_like(a)
    run(f, [a, b1])
    run(g, [a, b2])
    np.testing.assert_array_equal(b1, b2)


def test_if_condition_narrows_ranges() -> None:
    B = tir.decl_buffer((16,), "int64", "B")
    i = tir.Var("i")
    inner = tir.IfThenElse(i < 8, tir.BufferStore(B, i // 8, [i]),
                           tir.BufferStore(B, i // 8 + tir.select(i >= 8, 1, 0), [i]))
    f = tir.PrimFunc("f", [B], tir.For(i, 0, 16, tir.ForKind.SERIAL, inner))
    g = simplify(f)
    text = str(g)
    assert "B[i] = 0" in text and "B[i] = 2" in text
    b1, b2 = np.zeros(16, "int64"), np.zeros(16, "int64")
    run(f, [b1])
    run(g, [b2])
    np.testing.assert_array_equal(b1, b2)


def test_empty_function_body_and_symbolic_extent() -> None:
    B = tir.decl_buffer((4,), "float32", "B")
    i = tir.Var("i")
    body = tir.For(i, 0, 4, tir.ForKind.SERIAL,
                   tir.IfThenElse(i > 10, tir.BufferStore(B, tir.const(1.0, "float32"), [i])))
    g = simplify(tir.PrimFunc("f", [B], body))
    assert isinstance(g.body, tir.Evaluate)
    n = tir.Var("n")
    loop = tir.For(i, 0, n, tir.ForKind.SERIAL,
                   tir.BufferStore(B, tir.const(1.0, "float32"), [i % 4]))
    assert "%" in str(simplify(loop))
