"""Weight prefetching (tessera_llvm.prefetch): inserted where asked, results unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.functor import post_order_visit
from tessera_llvm.build import build_module
from tessera_llvm.prefetch import prefetch_next_slice


def _sum_slices(slices: int, slice_elems: int, rows: int, outer: int = 0) -> S.PrimFunc:
    """out[p] = sum of weight slice (p // rows) times (p % rows + 1), a parallel loop over p;
    the sum is one loop, or ``outer`` iterations of an inner loop when ``outer`` is given."""
    w = tir.decl_buffer((slices * slice_elems,), "float32", "w")
    out = tir.decl_buffer((slices * rows,), "float32", "out")
    p, k, j = tir.Var("p"), tir.Var("k"), tir.Var("j")
    acc = tir.decl_buffer((1,), "float32", "acc", scope="local")
    scale = tir.cast("float32", p % rows + 1)
    if outer:
        inner = slice_elems // outer
        loop = tir.For(k, 0, outer, "serial", tir.For(j, 0, inner, "serial", tir.BufferStore(
            acc, acc[0] + w[(p // rows) * slice_elems + k * inner + j] * scale, [0])))
    else:
        loop = tir.For(k, 0, slice_elems, "serial", tir.BufferStore(
            acc, acc[0] + w[(p // rows) * slice_elems + k] * scale, [0]))
    body = tir.Allocate(acc, tir.seq(
        tir.BufferStore(acc, tir.const(0.0, "float32"), [0]), loop,
        tir.BufferStore(out, acc[0], [p])))
    return tir.PrimFunc("sum_slices", [w, out], tir.For(p, 0, slices * rows, "parallel", body))


def _prefetches(func: S.PrimFunc) -> list[E.Call]:
    found: list[E.Call] = []
    post_order_visit(func.body, lambda n: found.append(n)
                     if isinstance(n, E.Call) and n.name == "prefetch" else None)
    return found


def test_prefetch_is_inserted_and_changes_nothing() -> None:
    slices, slice_elems, rows = 5, 1000, 3
    func = _sum_slices(slices, slice_elems, rows)
    with_pf = prefetch_next_slice(func, "w", slices, slice_elems, rows)
    assert not _prefetches(func) and len(_prefetches(with_pf)) == 1
    w = np.random.default_rng(0).standard_normal(slices * slice_elems).astype(np.float32)
    want = np.repeat(w.reshape(slices, slice_elems).sum(1, dtype=np.float64), rows) * \
        np.tile(np.arange(1, rows + 1), slices)
    for f in (func, with_pf):
        lib = build_module([f], "m").load()
        out = np.zeros(slices * rows, np.float32)
        lib.get("sum_slices")([w, out])
        np.testing.assert_allclose(out, want, rtol=1e-4)
    assert "llvm.prefetch" in build_module([with_pf], "m").llvm_ir


def test_prefetch_skips_functions_without_the_weight() -> None:
    func = _sum_slices(2, 10, 2)
    assert prefetch_next_slice(func, "nope", 2, 10, 2) is func


@pytest.mark.parametrize("outer", [pytest.param(0, marks=pytest.mark.slow), 5])
def test_prefetches_cover_the_next_slice_spread_over_the_loop(outer: int) -> None:
    """Task p of slice s prefetches its share of slice s + 1, a few lines per iteration of its
    reduction loop; together the tasks of a slice touch every line of the next one, and the
    last slice prefetches nothing."""
    from tessera.tir.functor import substitute
    from tessera.tir.simplify import simplify

    slices, slice_elems, rows = 4, 800, 3
    func = prefetch_next_slice(_sum_slices(slices, slice_elems, rows, outer), "w", slices,
                               slice_elems, rows)
    guards: list[S.IfThenElse] = []
    post_order_visit(func.body, lambda n: guards.append(n) if isinstance(n, S.IfThenElse) else None)
    # one prefetch per iteration of the single loop; 17 lines per task over the 5 outer ones
    assert len(guards) == (4 if outer else 1)
    calls = [g.then_case.value for g in guards]
    loops: list[S.For] = []
    post_order_visit(func.body, lambda n: loops.append(n) if isinstance(n, S.For) else None)
    k = next(loop for loop in loops if loop.loop_var.name == "k").loop_var
    p = next(loop for loop in loops if loop.kind == S.ForKind.PARALLEL).loop_var
    for s in range(slices):
        lines = set()
        for task in range(rows):
            for it in range(outer or slice_elems):
                env = {p: tir.const(s * rows + task, p.dtype), k: tir.const(it, k.dtype)}
                for guard, call in zip(guards, calls):
                    if simplify(substitute(guard.condition, env)).value:
                        index = simplify(substitute(call.args[0].indices[0], env)).value
                        lines.add(index // 16)
        nxt = range((s + 1) * slice_elems // 16, -(-(s + 2) * slice_elems // 16))
        assert lines == (set(nxt) if s + 1 < slices else set()), s
