"""Symbolic extents in the TIR simplifier, the interpreter, the verifier, the features and the
passes other than loop partitioning: size variables are non-negative (and within their
bounds), loops with symbolic ranges bound their variables symbolically, and static kernels
simplify as before."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.errors import CompileError
from tessera.tir.arith import exact_quotient, struct_equal, to_poly
from tessera.tir.features import FEATURE_NAMES, REPRESENTATIVE_SIZE, loop_features
from tessera.tir.functor import nodes_of, substitute
from tessera.tir.interpreter import run
from tessera.tir.simplify import Simplifier, can_prove, simplify
from tessera.tir.transform import (
    flatten_buffers,
    remove_redundant_checks,
    storage_rewrite,
    unroll,
    vectorize,
)
from tessera.tir.verifier import verify

F = tir.ForKind
F32 = "float32"


def _is_true(e: tir.PrimExpr) -> bool:
    return isinstance(e, tir.IntImm) and e.value == 1


def _is_false(e: tir.PrimExpr) -> bool:
    return isinstance(e, tir.IntImm) and e.value == 0


def _guarded_copy(n: tir.Var, extent: tir.PrimExpr, cond, **kw: object) -> tir.PrimFunc:
    """``for io in range(extent): for ii in range(8): if cond(io, ii): C[i] = A[i] * 2``."""
    A = tir.decl_buffer((n,), F32, "A")
    C = tir.decl_buffer((n,), F32, "C")
    io, ii = tir.Var("io"), tir.Var("ii")
    i = io * 8 + ii
    body = tir.For(io, 0, extent, F.SERIAL, tir.For(ii, 0, 8, F.VECTORIZED, tir.IfThenElse(
        cond(io, ii), tir.BufferStore(C, A[i] * tir.const(2.0, F32), [i]))))
    return tir.PrimFunc("copy", [A, C], body, **kw)


# ---- facts about size variables ---------------------------------------------------------------


def test_floordiv_facts() -> None:
    n = tir.Var("n")
    assert _is_true(simplify(n // 8 * 8 <= n))
    assert _is_true(simplify((n + 7) // 8 * 8 >= n))
    assert _is_true(simplify((n + 7) // 8 * 8 < n + 8))
    # n // 8 * 8 == n only when 8 divides n: undecided
    assert not isinstance(simplify(n // 8 * 8 < n), tir.IntImm)
    assert not isinstance(simplify((n + 7) // 8 * 8 > n), tir.IntImm)
    assert struct_equal(simplify(tir.min_(n // 8, (n + 7) // 8), {n: (0, None)}), n // 8)
    assert struct_equal(simplify(tir.max_((n + 7) // 8, n // 8)), (n + 7) // 8)
    # (n - 8) // 8 + 1 is n // 8: the split point of a partitioned loop
    assert struct_equal(simplify((n - 8) // 8 + 1), n // 8)


def test_size_variables_are_non_negative_in_a_function() -> None:
    n = tir.Var("n")
    A = tir.decl_buffer((n,), F32, "A")
    i = tir.Var("i")
    store = tir.BufferStore(A, tir.const(1.0, F32), [0])
    body = tir.seq(tir.IfThenElse(n >= 0, store), tir.IfThenElse(n // 8 >= 0, store),
                   tir.IfThenElse(n <= 1000, store),
                   tir.For(i, 0, n, F.SERIAL, tir.IfThenElse(i < n, store)))
    f = tir.PrimFunc("f", [A], body)
    out = simplify(f)
    # n >= 0 and n // 8 >= 0 hold; n <= 1000 is unknown; i < n holds in range(n)
    assert [repr(c.condition) for c in nodes_of(out.body, tir.IfThenElse)] == [repr(n <= 1000)]
    # size_bounds narrow the range
    g = tir.PrimFunc("g", [A], body, size_bounds={n: (1, 1000)})
    assert nodes_of(simplify(g).body, tir.IfThenElse) == []
    # a plain statement simplified without the function knows nothing of n
    assert len(nodes_of(simplify(body), tir.IfThenElse)) >= 3


def test_loop_variable_bounded_by_a_symbolic_extent() -> None:
    n = tir.Var("n")
    out = simplify(_guarded_copy(n, n // 8, lambda io, ii: io * 8 + ii < n))
    assert nodes_of(out.body, tir.IfThenElse) == []  # the main part of a split needs no guard
    # over the ceil-divided range the guard is needed and must stay
    ceil = _guarded_copy(n, (n + 7) // 8, lambda io, ii: io * 8 + ii < n)
    assert len(nodes_of(simplify(ceil).body, tir.IfThenElse)) == 1
    # and a guard that is sometimes false inside range(n // 8) stays too
    off = _guarded_copy(n, n // 8, lambda io, ii: io * 8 + ii < n - 1)
    assert len(nodes_of(simplify(off).body, tir.IfThenElse)) == 1
    # range(n) decides i < n and i <= n - 1, not i < n - 1
    i = tir.Var("i")
    for cond, decided in ((i < n, True), (i <= n - 1, True), (i >= n, False),
                          (i < n - 1, None)):
        loop = tir.For(i, 0, n, F.SERIAL, tir.Evaluate(tir.call("f", tir.select(
            cond, tir.const(1.0, F32), tir.const(0.0, F32)))))
        sel = nodes_of(simplify(loop, {n: (0, None)}), tir.Select)
        assert (sel == []) == (decided is not None), cond


def test_tail_loop_bounds_are_symbolic() -> None:
    """In ``range(n // 8, (n + 7) // 8)``: ``io*8 < n`` holds, ``io*8 + 7 < n`` never does."""
    n = tir.Var("n")
    io = tir.Var("io")
    simp = Simplifier({n: (0, None)}, size_vars=[n],
                      sym_bounds={io: [(n // 8, (n + 7) // 8 - 1)]})
    simp.bounds[io] = (0, float("inf"))
    assert _is_true(simp.visit(io * 8 < n))
    assert _is_false(simp.visit(io * 8 + 7 < n))
    assert not isinstance(simp.visit(io * 8 + 3 < n), tir.IntImm)


def test_symbolic_facts_from_an_if() -> None:
    n, m = tir.Var("n"), tir.Var("m")
    A = tir.decl_buffer((n,), F32, "A")
    i = tir.Var("i")
    clamp = tir.BufferStore(A, A[tir.min_(i, n - 1)], [tir.min_(i, n - 1)])
    inner = tir.IfThenElse(i < n, clamp)
    f = tir.PrimFunc("f", [A], tir.For(i, 0, m, F.SERIAL, inner), size_vars=[n, m])
    out = simplify(f)
    assert nodes_of(out.body, tir.Min) == []  # min(i, n - 1) is i where i < n
    assert len(nodes_of(out.body, tir.IfThenElse)) == 1


def test_sym_interval_and_div_interval() -> None:
    n = tir.Var("n")
    simp = Simplifier({n: (0, None)}, size_vars=[n])
    assert simp.div_interval(to_poly((n + 7) // 8 * 8 - n)) == (0, 7)
    assert simp.div_interval(to_poly(n // 8 * 8 - n)) == (-7, 0)
    assert simp.div_interval(to_poly(n // 8 - (n + 7) // 8)) == (-1, 0)
    i = tir.Var("i")
    simp.bounds[i] = (0, float("inf"))
    simp.sym[i] = [(None, n - 1)]
    assert simp.sym_interval(to_poly(i - n))[1] == -1
    assert simp.sym_interval(to_poly(n - i))[0] == 1


def test_can_prove_keeps_its_meaning() -> None:
    n = tir.Var("n")
    assert can_prove(n // 4 * 4 <= n)
    assert not can_prove(n // 4 * 4 == n)


def test_simplified_symbolic_functions_compute_the_same() -> None:
    n = tir.Var("n")
    for extent, cond in (((n + 7) // 8, lambda io, ii: io * 8 + ii < n),
                         (n // 8, lambda io, ii: io * 8 + ii < n),
                         ((n + 7) // 8, lambda io, ii: tir.all_of(io * 8 + ii >= 3,
                                                                  io * 8 + ii < n - 2))):
        f = _guarded_copy(n, extent, cond)
        g = simplify(f)
        for size in (0, 1, 7, 8, 9, 29):
            rng = np.random.default_rng(size)
            a = rng.standard_normal(size).astype(F32)
            c1, c2 = rng.standard_normal(size).astype(F32), None
            c2 = c1.copy()
            run(f, [a, c1])
            run(g, [a, c2])
            np.testing.assert_array_equal(c1, c2)


def test_static_kernels_simplify_as_before() -> None:
    """Without size variables the simplifier has no symbolic facts: a static loop nest with a
    non-divisible guard keeps it (the pipeline's other passes decide what they did before)."""
    A = tir.decl_buffer((30,), F32, "A")
    C = tir.decl_buffer((30,), F32, "C")
    io, ii = tir.Var("io"), tir.Var("ii")
    i = io * 8 + ii
    body = tir.For(io, 0, 4, F.SERIAL, tir.For(ii, 0, 8, F.VECTORIZED, tir.IfThenElse(
        i < 30, tir.BufferStore(C, A[i], [i]))))
    f = tir.PrimFunc("s", [A, C], body)
    assert not f.is_symbolic
    out = simplify(f)
    assert out.body is f.body


# ---- the other passes accept symbolic extents ---------------------------------------------------


def _symbolic_2d() -> tuple[tir.PrimFunc, tir.Var, tir.Var]:
    n, m = tir.Var("n"), tir.Var("m")
    A = tir.decl_buffer((n, m), F32, "A")
    B = tir.decl_buffer((n, m), F32, "B")
    i, j = tir.Var("i"), tir.Var("j")
    tmp = tir.decl_buffer((m,), F32, "tmp", scope="local")
    row = tir.For(j, 0, m, F.VECTORIZED, tir.BufferStore(tmp, A[i, j] * 3.0, [j]))
    jj = tir.Var("jj")
    body = tir.For(i, 0, n, F.PARALLEL, tir.Allocate(tmp, tir.seq(row, tir.For(
        jj, 0, m, F.UNROLLED, tir.BufferStore(B, tmp[jj] + A[i, jj], [i, jj])))))
    return tir.PrimFunc("sym2d", [A, B], body, size_bounds={m: (0, 64)}), n, m


def test_passes_accept_symbolic_extents() -> None:
    f, n, m = _symbolic_2d()
    verify(f)
    flat = flatten_buffers(f)
    assert [repr(b.shape) for b in flat.params] == [repr((n * m,))] * 2
    verify(flat)
    vec = vectorize(flat)
    assert F.VECTORIZED not in [lp.kind for lp in nodes_of(vec.body, tir.For)]
    unrolled = unroll(vec)
    assert F.UNROLLED not in [lp.kind for lp in nodes_of(unrolled.body, tir.For)]
    rewritten = storage_rewrite(unrolled)
    allocs = nodes_of(rewritten.body, tir.Allocate)
    assert len(allocs) == 1  # a symbolic allocation is not hoisted out of its loop
    checked = remove_redundant_checks(rewritten)
    verify(checked, lowered=True)
    rng = np.random.default_rng(3)
    for N, M in ((0, 3), (1, 1), (5, 9), (3, 64)):
        a = rng.standard_normal((N, M)).astype(F32)
        b1 = rng.standard_normal((N, M)).astype(F32)
        b2 = b1.copy()
        run(f, [a, b1])
        run(checked, [a, b2], sizes={"n": N, "m": M})
        np.testing.assert_allclose(b2, a * 4.0, rtol=1e-6)
        np.testing.assert_array_equal(b1, b2)


def test_remove_checks_with_symbolic_ranges() -> None:
    n = tir.Var("n")
    A = tir.decl_buffer((n,), F32, "A")
    i, j = tir.Var("i"), tir.Var("j")
    store = tir.BufferStore(A, tir.const(1.0, F32), [i])
    body = tir.For(i, 0, n, F.SERIAL, tir.seq(
        tir.IfThenElse(i < n, store),  # decided by the symbolic range
        tir.IfThenElse(i < 40, store),  # undecided (n is unbounded)
        tir.For(j, 0, 4, F.SERIAL, tir.IfThenElse((i * 4 + j) % 7 < 7, store))))
    f = tir.PrimFunc("f", [A], body)
    out = remove_redundant_checks(f)
    assert [repr(c.condition) for c in nodes_of(out.body, tir.IfThenElse)] == [repr(i < 40)]
    g = remove_redundant_checks(tir.PrimFunc("g", [A], body, size_bounds={n: (0, 40)}))
    assert nodes_of(g.body, tir.IfThenElse) == []  # i <= 39 with n <= 40: enumerated


# ---- verifier -----------------------------------------------------------------------------------


def test_verifier_on_size_variables() -> None:
    f, n, m = _symbolic_2d()
    verify(f)
    A = tir.decl_buffer((n,), F32, "A")
    # a size variable that no shape mentions is defined all the same
    k = tir.Var("k")
    g = tir.PrimFunc("g", [A], tir.For(tir.Var("i"), 0, k, F.SERIAL,
                                       tir.BufferStore(A, tir.const(0.0, F32), [0])),
                     size_vars=[n, k])
    verify(g)
    # ... but one that is not declared is not
    h = tir.PrimFunc("h", [A], g.body)
    with pytest.raises(CompileError, match="variable k is used outside"):
        verify(h)
    # a loop may not bind a size variable
    bad = tir.PrimFunc("bad", [A], tir.For(n, 0, 4, F.SERIAL,
                                           tir.BufferStore(A, tir.const(0.0, F32), [0])))
    with pytest.raises(CompileError, match="size variable n is bound again"):
        verify(bad)
    with pytest.raises(CompileError, match="empty range"):
        verify(tir.PrimFunc("e", [A], g.body, size_vars=[n, k], size_bounds={k: (5, 2)}))
    with pytest.raises(CompileError, match="not a scalar integer"):
        verify(tir.PrimFunc("e", [A], g.body, size_vars=[n, k, tir.Var("x", F32)]))


# ---- interpreter --------------------------------------------------------------------------------


def test_interpreter_binds_sizes() -> None:
    n = tir.Var("n")
    k = tir.Var("k")
    A = tir.decl_buffer((n,), F32, "A")
    B = tir.decl_buffer((n * 2,), F32, "B")
    i = tir.Var("i")
    body = tir.For(i, 0, k, F.SERIAL, tir.BufferStore(B, A[i] + 1.0, [i * 2]))
    f = tir.PrimFunc("f", [A, B], body, size_vars=[n, k], size_bounds={k: (1, 6)})
    rng = np.random.default_rng(7)
    a = rng.standard_normal(6).astype(F32)
    b = rng.standard_normal(12).astype(F32)
    expect = b.copy()
    expect[0:8:2] = a[:4] + 1.0
    out = b.copy()
    run(f, [a, out], sizes={"k": 4})  # n from A's shape, k by name
    np.testing.assert_array_equal(out, expect)
    out = b.copy()
    run(f, [a, out], sizes={k: 4, n: 6})  # by variable
    np.testing.assert_array_equal(out, expect)
    with pytest.raises(ValueError, match="size variable k is not bound"):
        run(f, [a, b.copy()])
    with pytest.raises(ValueError, match=r"size k = 7 is outside its range \[1, 6\]"):
        run(f, [a, b.copy()], sizes={"k": 7})
    with pytest.raises(ValueError, match=r"size k = 0 is outside"):
        run(f, [a, b.copy()], sizes={"k": 0})
    with pytest.raises(ValueError, match="'q' is not a size variable"):
        run(f, [a, b.copy()], sizes={"q": 1, "k": 1})
    with pytest.raises(ValueError, match="size n = -1 is outside its range"):
        run(f, [a, b.copy()], sizes={"n": -1, "k": 1})
    # two arrays that disagree on n
    C = tir.decl_buffer((n,), F32, "C")
    g = tir.PrimFunc("g", [A, C], tir.For(i, 0, n, F.SERIAL, tir.BufferStore(C, A[i], [i])))
    with pytest.raises(ValueError, match="size n is 6 from the array of A but 5"):
        run(g, [a, np.zeros(5, F32)])


# ---- features -----------------------------------------------------------------------------------


def test_features_of_symbolic_functions() -> None:
    f, n, m = _symbolic_2d()
    values = dict(zip(FEATURE_NAMES, loop_features(f)))
    assert len(values) == len(FEATURE_NAMES)
    assert all(np.isfinite(v) for v in values.values())
    # the parallel loop over n runs REPRESENTATIVE_SIZE times, the row loops m's bound (64)
    assert values["par_extent"] == pytest.approx(np.log2(1 + REPRESENTATIVE_SIZE))
    assert values["loop0_extent"] == pytest.approx(np.log2(1 + 64))
    lowered = tir.transform.lower_pipeline(f)
    assert len(loop_features(lowered)) == len(FEATURE_NAMES)


def test_division_bounds_of_nested_divisions() -> None:
    """``((w + 3) // 4) * 4 + 1 - w`` with ``w = (x + 1) // 2`` (a CNN's width after a
    stride-2 layer, rounded up to whole tiles): rewriting the outer division cancels the ``w``
    term the inner one had, and the bound must still come out (it is at least 1)."""
    x = tir.Var("x")
    two, four = tir.IntImm(2, "int64"), tir.IntImm(4, "int64")
    w = tir.expr.FloorDiv(x + 1, two)
    e = tir.expr.FloorDiv(w + 3, four) * 4 + 1 - w
    assert can_prove(e >= 1)
    assert simplify(e < 0).value == 0


def test_exact_quotient_of_size_products() -> None:
    """arith.exact_quotient divides a polynomial by one monomial when every term holds it
    (checked by evaluating both sides at random sizes), and says None otherwise."""
    b, h, w = tir.Var("batch"), tir.Var("h"), tir.Var("w")
    cases = [(b * h, h, "b"), (b * h * 8, h * 8, "b"), (b * h * 8 + h * w * 16, h * 8, "b+2w"),
             (h * h * b, h, "hb")]
    rng = np.random.default_rng(5)
    for num, den, _ in cases:
        q = exact_quotient(num, den)
        assert q is not None, (num, den)
        for _ in range(20):
            env = {b: int(rng.integers(0, 50)), h: int(rng.integers(1, 50)),
                   w: int(rng.integers(0, 50))}
            assert _evaluate(q, env) * _evaluate(den, env) == _evaluate(num, env)
    for num, den in [(b * h + 1, h), (b * h * 3, h * 2), (b * w, h), (b + h, b * h)]:
        assert exact_quotient(num, den) is None, (num, den)


def _evaluate(e: object, env: dict) -> int:
    out = simplify(substitute(e, {v: tir.const(x, v.dtype) for v, x in env.items()}))
    assert isinstance(out, tir.IntImm), out
    return out.value


# ---- indices rebuilt from run-time sizes ------------------------------------------------------


def _mask_gather(clamp_hi: tir.PrimExpr | None = None) -> tir.PrimFunc:
    """``out[b, j] = mask[idx // s * s + idx % s]`` with ``idx = min(j + b*s, max(B*s - 1,
    0))``: a flattened ``[B, s]`` mask gathered at positions made from ``Range``s (what a
    symbolic attention mask's index becomes: the Gather's clamp, then its reshape back)."""
    bsz, s = tir.Var("B"), tir.Var("s")
    mask = tir.decl_buffer((bsz * s,), "int64", "mask")
    out = tir.decl_buffer((bsz, s), "int64", "out")
    b, j = tir.Var("b"), tir.Var("j")
    hi = clamp_hi if clamp_hi is not None else tir.max_(bsz * s - 1, tir.const(0, "int64"))
    idx = tir.min_(j + b * s, hi)
    body = tir.For(b, 0, bsz, F.SERIAL, tir.For(j, 0, s, F.SERIAL, tir.BufferStore(
        out, mask[idx // s * s + idx % s], [b, j])))
    return tir.PrimFunc("f", [mask, out], body, size_vars=[bsz, s],
                        size_bounds={bsz: (0, 16), s: (0, 1024)})


def test_quotient_and_remainder_of_a_run_time_size_fuse_back() -> None:
    """``(x // s) * s + x % s`` is ``x`` for a divisor that is a size, as for a constant one
    (times a common factor too); with another factor on one side it stays."""
    s, x = tir.Var("s"), tir.Var("x")
    assert struct_equal(simplify(x // s * s + x % s), x)
    assert struct_equal(simplify((x // s * s + x % s) * 3), simplify(x * 3))
    m = tir.min_(x, s * 4 - 1)
    assert struct_equal(simplify(m // s * s + m % s), m)
    kept = simplify(x // s * s * 2 + x % s)
    assert nodes_of(kept, tir.FloorMod) and nodes_of(kept, tir.FloorDiv)


def test_a_clamp_that_a_product_of_loop_ranges_cannot_reach_goes() -> None:
    """``j + b*s`` with ``b < B`` and ``j < s`` is at most ``B*s - 1``: the clamp (of a
    Gather's index) goes and the load is ``mask[j + b*s]``, the same values at every size;
    a clamp the index can reach stays."""
    f = _mask_gather()
    g = simplify(f)
    assert nodes_of(g.body, tir.Min) == [] and nodes_of(g.body, tir.Max) == []
    assert nodes_of(g.body, tir.FloorDiv) == [] and nodes_of(g.body, tir.FloorMod) == []
    for bsz, s in ((0, 3), (1, 1), (1, 7), (3, 5), (2, 33)):
        rng = np.random.default_rng(bsz * 100 + s)
        mask = rng.integers(-5, 5, bsz * s)
        want = np.zeros((bsz, s), np.int64)
        got = np.zeros((bsz, s), np.int64)
        run(f, [mask, want])
        run(g, [mask, got])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got.reshape(-1), mask)
    bsz, s = f.size_vars
    tight = simplify(_mask_gather(bsz * s - 2))  # the last element is clamped: kept
    assert len(nodes_of(tight.body, tir.Min)) == 1


def test_min_and_max_operands_bound_a_difference() -> None:
    """``max(a, b) >= a`` and ``min(a, b) <= a`` decide comparisons of symbolic values."""
    n, m = tir.Var("n"), tir.Var("m")
    simp = Simplifier({n: (0, 1024), m: (0, 1024)}, size_vars=[n, m])
    assert _is_true(simp.visit(n <= tir.max_(n, m)))
    assert _is_true(simp.visit(tir.min_(n, m * 2) <= m * 2))
    assert _is_true(simp.visit(tir.min_(n - 1, m) < n))
    assert not isinstance(simp.visit(tir.min_(n, m) < n), tir.IntImm)
