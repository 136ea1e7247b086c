"""te.lower with run-time extents ("compile once, serve any size"): shapes and reduce axes use
``tir.Var`` sizes; one lowered function per test runs in the TIR interpreter at every size of
{0 where meaningful, 1, f - 1, f, f + 1, 3f + 5} (f: the schedule's split factor) and is
compared with numpy on random data."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from tessera import te, tir
from tessera.te.bound import as_extent
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.functor import post_order_visit
from tessera.tir.interpreter import run
from tessera.tir.verifier import verify

RNG = np.random.default_rng(11)


def sizes_for(f: int, zero: bool = True) -> list[int]:
    out = [0] if zero else []
    for v in (1, f - 1, f, f + 1, 3 * f + 5):
        if v >= 0 and v not in out:
            out.append(v)
    return out


def nodes(func: S.PrimFunc, kind: type) -> list[Any]:
    found: list[Any] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


def loops(func: S.PrimFunc) -> dict[str, S.For]:
    return {f.loop_var.name: f for f in nodes(func, S.For)}


def allocs(func: S.PrimFunc) -> dict[str, S.Allocate]:
    return {a.buffer.name: a for a in nodes(func, S.Allocate)}


def const(e: E.PrimExpr) -> int | None:
    return e.value if isinstance(e, E.IntImm) else None


def uses(e: Any, var: E.Var) -> bool:
    found: list[Any] = []
    post_order_visit(e, lambda n: found.append(n) if n is var else None)
    return bool(found)


def rand(shape: Sequence[int]) -> np.ndarray:
    return RNG.standard_normal(tuple(shape)).astype("float32")


def execute(func: S.PrimFunc, inputs: list[np.ndarray], out_shapes: list[tuple[int, ...]],
            sizes: dict[str, int] | None = None) -> list[np.ndarray]:
    """Run ``func`` on ``inputs`` and outputs pre-filled with garbage (so a missed element
    shows)."""
    outs = [np.full(shape, 12345.0, dtype="float32") for shape in out_shapes]
    run(func, [*inputs, *outs], sizes=sizes)
    return outs


# ---- elementwise ----------------------------------------------------------------------------


def test_elementwise_split_vectorize_parallel() -> None:
    n = tir.Var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(ii)
    s[B].parallel(io)
    assert const(ii.dom.extent) == 8 and uses(io.dom.extent, n)
    func = te.lower(s, [A, B])
    verify(func)
    assert func.size_vars == [n]
    lp = loops(func)
    assert lp["i_inner"].kind == S.ForKind.VECTORIZED and const(lp["i_inner"].extent) == 8
    assert lp["i_outer"].kind == S.ForKind.PARALLEL and uses(lp["i_outer"].extent, n)
    assert len(nodes(func, S.IfThenElse)) == 1  # the tail guard
    for size in sizes_for(8):
        a = rand((size,))
        (b,) = execute(func, [a], [(size,)])
        np.testing.assert_allclose(b, a * 2.0 + 1.0, rtol=1e-6)


def test_split_of_a_multiple_needs_no_guard() -> None:
    n = tir.Var("n")
    A = te.placeholder((n * 8,), name="A")
    B = te.compute((n * 8,), lambda i: A[i] - 3.0, name="B")
    s = te.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(ii)
    func = te.lower(s, [A, B])
    assert func.size_vars == [n]
    assert loops(func)["i_outer"].extent is n
    assert not nodes(func, S.IfThenElse)
    for size in sizes_for(2):
        a = rand((size * 8,))
        (b,) = execute(func, [a], [(size * 8,)], sizes={"n": size})
        np.testing.assert_allclose(b, a - 3.0)


@pytest.mark.parametrize("schedule", ["rows", "fused"])
def test_broadcast_add_2d(schedule: str) -> None:
    n = tir.Var("n")
    A = te.placeholder((n, 64), name="A")
    b = te.placeholder((64,), name="b")
    C = te.compute((n, 64), lambda i, j: A[i, j] + b[j], name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    if schedule == "rows":
        jo, ji = s[C].split(j, factor=16)
        s[C].vectorize(ji)
        s[C].parallel(i)
    else:
        fo, fi = s[C].split(s[C].fuse(i, j), factor=16)  # n*64 is a multiple of 16
        s[C].vectorize(fi)
        s[C].parallel(fo)
        ext = loops(te.lower(s, [A, b, C]))[fo.name].extent
        assert isinstance(ext, E.Mul) and ext.a is n and const(ext.b) == 4
    func = te.lower(s, [A, b, C])
    verify(func)
    assert func.size_vars == [n]
    assert not nodes(func, S.IfThenElse)  # every split divides
    vec = [f for f in nodes(func, S.For) if f.kind == S.ForKind.VECTORIZED]
    assert len(vec) == 1 and const(vec[0].extent) == 16
    for size in sizes_for(16):
        a, bb = rand((size, 64)), rand((64,))
        (c,) = execute(func, [a, bb], [(size, 64)])
        np.testing.assert_allclose(c, a + bb[None, :], rtol=1e-6)


def test_fuse_of_two_symbolic_extents() -> None:
    n, m = tir.Var("n"), tir.Var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * A[i, j], name="B")
    s = te.create_schedule(B)
    fused = s[B].fuse(*B.op.axis)
    fo, fi = s[B].split(fused, factor=8)
    s[B].unroll(fi)
    func = te.lower(s, [A, B])
    verify(func)
    assert func.size_vars == [n, m]
    assert loops(func)[fi.name].kind == S.ForKind.UNROLLED
    for rows, cols in [(0, 5), (5, 0), (1, 1), (1, 7), (3, 3), (2, 4), (3, 9), (29, 3)]:
        a = rand((rows, cols))
        (out,) = execute(func, [a], [(rows, cols)])
        np.testing.assert_allclose(out, a * a, rtol=1e-6)


def test_fused_run_time_outer_axis_needs_no_guard() -> None:
    """A stage computed inside a loop that fuses a run-time batch with run-time rows (a
    convolution's parallel loop over images and rows): the batch index ``f // rows`` of
    ``f`` below ``batch * rows`` stays below ``batch`` (bound inference divides the extent
    exactly), so no guard is left on it; results at every size, zero included."""
    b, h = tir.Var("batch"), tir.Var("rows")
    A = te.placeholder((b, h, 16), name="A")
    acc = te.compute((b, h, 16), lambda i, j, k: A[i, j, k] * 2.0, name="acc")
    out = te.compute((b, h, 16), lambda i, j, k: acc[i, j, k] + 1.0, name="out")
    s = te.create_schedule(out)
    n, r, c = out.op.axis
    fused = s[out].fuse(n, r)
    s[out].parallel(fused)
    s[acc].compute_at(s[out], fused)
    func = te.lower(s, [A, out])
    verify(func)
    assert not [x for x in nodes(func, S.IfThenElse) if uses(x.condition, b)], func
    for batch, rows in [(0, 3), (3, 0), (1, 1), (2, 5), (4, 3)]:
        a = rand((batch, rows, 16))
        (got,) = execute(func, [a], [(batch, rows, 16)], {"batch": batch, "rows": rows})
        np.testing.assert_allclose(got, a * 2.0 + 1.0, rtol=1e-6)


def test_split_into_nparts_of_a_symbolic_extent() -> None:
    n = tir.Var("n")
    A = te.placeholder((n, 3), name="A")
    B = te.compute((n, 3), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B)
    po, pi = s[B].split(B.op.axis[0], nparts=4)
    s[B].parallel(po)
    func = te.lower(s, [A, B])
    assert const(loops(func)[po.name].extent) == 4
    assert uses(loops(func)[pi.name].extent, n)
    for size in sizes_for(4):
        a = rand((size, 3))
        (out,) = execute(func, [a], [(size, 3)])
        np.testing.assert_allclose(out, a + 1.0)


# ---- reductions -----------------------------------------------------------------------------


_REDUCERS: dict[str, tuple[Callable[..., Any], Callable[..., np.ndarray]]] = {
    "sum": (te.sum, lambda x: x.sum(axis=1)),
    "max": (te.max, lambda x: x.max(axis=1)),
}


@pytest.mark.parametrize("combiner", ["sum", "max"])
def test_row_reduction_over_a_symbolic_axis(combiner: str) -> None:
    m, n = tir.Var("m"), tir.Var("n")
    fn, ref = _REDUCERS[combiner]
    X = te.placeholder((m, n), name="X")
    k = te.reduce_axis((0, n), name="k")
    R = te.compute((m,), lambda i: fn(X[i, k], axis=k), name="R")
    s = te.create_schedule(R)
    ko, ki = s[R].split(k, factor=4)
    s[R].parallel(R.op.axis[0])
    func = te.lower(s, [X, R])
    verify(func)
    assert func.size_vars == [m, n]
    assert const(loops(func)[ki.name].extent) == 4 and uses(loops(func)[ko.name].extent, n)
    for cols in sizes_for(4, zero=combiner == "sum"):  # the max of nothing is not defined
        for rows in (0, 1, 3):
            x = rand((rows, cols))
            (out,) = execute(func, [x], [(rows,)])
            np.testing.assert_allclose(out, ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("combiner", ["sum", "max"])
def test_row_reduction_over_a_constant_axis_with_symbolic_rows(combiner: str) -> None:
    n = tir.Var("n")
    fn, ref = _REDUCERS[combiner]
    X = te.placeholder((n, 48), name="X")
    k = te.reduce_axis((0, 48), name="k")
    R = te.compute((n,), lambda i: fn(X[i, k], axis=k), name="R")
    s = te.create_schedule(R)
    io, ii = s[R].split(R.op.axis[0], factor=4)
    ko, ki = s[R].split(k, factor=16)
    s[R].reorder(io, ko, ki, ii)
    s[R].vectorize(ii)
    s[R].parallel(io)
    func = te.lower(s, [X, R])
    verify(func)
    assert const(loops(func)[ko.name].extent) == 3 and const(loops(func)[ii.name].extent) == 4
    for rows in sizes_for(4):
        x = rand((rows, 48))
        (out,) = execute(func, [x], [(rows,)])
        np.testing.assert_allclose(out, ref(x), rtol=1e-5, atol=1e-5)


def test_a_size_only_in_a_reduce_axis_is_a_size_var() -> None:
    m, k = tir.Var("m"), tir.Var("k")
    X = te.placeholder((m, 64), name="X")
    r = te.reduce_axis((0, k), name="r")
    R = te.compute((m,), lambda i: te.sum(X[i, r] * 2.0, axis=r), name="R")
    s = te.create_schedule(R)
    s[R].split(r, factor=8)
    func = te.lower(s, [X, R], "prefix_sum", size_bounds={k: (0, 64)})
    verify(func)
    assert func.size_vars == [m, k]
    assert func.size_bounds == {k: (0, 64)}
    assert func.var_bounds()[k] == (0, 64)
    for kk in sizes_for(8):
        for rows in (1, 5):
            x = rand((rows, 64))
            (out,) = execute(func, [x], [(rows,)], sizes={"k": kk})
            np.testing.assert_allclose(out, 2.0 * x[:, :kk].sum(axis=1), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="size variable k is not bound"):
        execute(func, [rand((2, 64))], [(2,)])


def test_size_bounds_of_unused_variables_are_left_out() -> None:
    """te.lower takes a whole region's bounds; a PrimFunc itself refuses a bound on a variable
    that is not one of its size_vars."""
    n, z = tir.Var("n"), tir.Var("z")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B)
    f = te.lower(s, [A, B], size_bounds={z: (0, 8), n: (1, 16)})
    assert f.size_vars == [n] and f.size_bounds == {n: (1, 16)}
    with pytest.raises(ValueError, match="size_vars"):
        tir.PrimFunc("f", f.params, f.body, size_vars=[n], size_bounds={z: (0, 8)})


# ---- softmax --------------------------------------------------------------------------------


@pytest.mark.parametrize("exp_stage", ["compute_at", "inline"])
def test_softmax_over_rows_of_symbolic_length(exp_stage: str) -> None:
    m, n = tir.Var("m"), tir.Var("n")
    X = te.placeholder((m, n), name="X")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((m,), lambda i: te.max(X[i, k1], axis=k1), name="mx")
    ex = te.compute((m, n), lambda i, j: E.exp(X[i, j] - mx[i]), name="ex")
    k2 = te.reduce_axis((0, n), name="k2")
    sm = te.compute((m,), lambda i: te.sum(ex[i, k2], axis=k2), name="sm")
    Y = te.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="Y")
    s = te.create_schedule(Y)
    i, j = Y.op.axis
    s[mx].compute_at(s[Y], i)
    s[sm].compute_at(s[Y], i)
    if exp_stage == "inline":
        s[ex].compute_inline()
    else:
        s[ex].compute_at(s[Y], i)
    jo, ji = s[Y].split(j, factor=4)
    s[Y].vectorize(ji)
    s[Y].parallel(i)
    func = te.lower(s, [X, Y])
    verify(func)
    assert func.size_vars == [m, n]
    al = allocs(func)
    # one row per iteration of the row loop: constant sizes
    assert [const(d) for d in al["mx"].buffer.shape] == [1]
    assert [const(d) for d in al["sm"].buffer.shape] == [1]
    if exp_stage == "compute_at":
        shape = al["ex"].buffer.shape
        assert const(shape[0]) == 1 and shape[1] is n  # a row of the run-time length
    # rows never pass m inside the row loop: only the split's tail guard remains
    assert len(nodes(func, S.IfThenElse)) == 1
    for cols in sizes_for(4):
        for rows in (0, 1, 3):
            x = rand((rows, cols)) * 4.0
            (y,) = execute(func, [x], [(rows, cols)])
            if cols:
                e = np.exp(x - x.max(axis=1, keepdims=True))
                np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5,
                                           atol=1e-6)


# ---- matmul ---------------------------------------------------------------------------------


def _tiled_matmul(m: Any, k: Any, n: int) -> tuple[te.Schedule, list[te.Tensor], Any]:
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(io, jo, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    s[CL].compute_at(s[C], jo)
    ci, cj = s[CL].op.axis
    (cr,) = s[CL].op.reduce_axis
    ro, ri = s[CL].split(cr, factor=4)
    s[CL].reorder(ro, ri, ci, cj)
    s[CL].vectorize(cj)
    return s, [A, B, C], CL


def test_matmul_with_symbolic_rows() -> None:
    m = tir.Var("m")
    s, args, CL = _tiled_matmul(m, 8, 24)  # 24 columns: a shifted last column tile
    func = te.lower(s, args)
    verify(func)
    assert func.size_vars == [m]
    tile = allocs(func)[CL.name].buffer
    assert tile.scope == "local" and [const(d) for d in tile.shape] == [4, 16]
    for rows in sizes_for(4):
        a, b = rand((rows, 8)), rand((8, 24))
        (c,) = execute(func, [a, b], [(rows, 24)])
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_with_symbolic_reduction_length() -> None:
    k = tir.Var("k")
    s, args, CL = _tiled_matmul(6, k, 24)
    func = te.lower(s, args)
    verify(func)
    assert func.size_vars == [k]
    tile = allocs(func)[CL.name].buffer
    assert [const(d) for d in tile.shape] == [4, 16]
    for depth in sizes_for(4):
        a, b = rand((6, depth)), rand((depth, 24))
        (c,) = execute(func, [a, b], [(6, 24)])
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_with_all_sizes_symbolic() -> None:
    m, k, n = tir.Var("m"), tir.Var("k"), tir.Var("n")
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*C.op.axis, 4, 8)
    s[CL].compute_at(s[C], jo)
    func = te.lower(s, [A, B, C])
    verify(func)
    assert func.size_vars == [m, k, n]
    assert [const(d) for d in allocs(func)[CL.name].buffer.shape] == [4, 8]
    for rows, depth, cols in [(0, 3, 5), (3, 0, 9), (1, 1, 1), (5, 7, 8), (9, 2, 29)]:
        a, b = rand((rows, depth)), rand((depth, cols))
        (c,) = execute(func, [a, b], [(rows, cols)])
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


# ---- compute_at regions and caches ----------------------------------------------------------


def test_stencil_tile_keeps_a_constant_size() -> None:
    n = tir.Var("n")
    X = te.placeholder((n + 1,), name="X")
    B = te.compute((n + 1,), lambda i: X[i] * 3.0, name="B")
    C = te.compute((n,), lambda i: B[i] + B[i + 1], name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], io)
    bounds = te.infer_bound(s)
    (lo, ext), = bounds[s[B]].region()
    assert ext == 9  # 8 outputs read 9 inputs, whatever n is
    assert len(bounds[s[B]].guards) == 1  # the tile may pass n + 1 on the last iteration
    func = te.lower(s, [X, C])
    verify(func)
    assert [const(d) for d in allocs(func)["B"].buffer.shape] == [9]
    for size in sizes_for(8):
        x = rand((size + 1,))
        (c,) = execute(func, [x], [(size,)], sizes={"n": size})
        np.testing.assert_allclose(c, 3.0 * x[:-1] + 3.0 * x[1:], rtol=1e-6)


def test_cache_read_tile_of_symbolic_rows() -> None:
    n = tir.Var("n")
    X = te.placeholder((n, 32), name="X")
    Y = te.compute((n, 32), lambda i, j: X[i, j] * X[i, 31 - j], name="Y")
    s = te.create_schedule(Y)
    XL = s.cache_read(X, "local", [Y])
    io, ii = s[Y].split(Y.op.axis[0], factor=4)
    s[XL].compute_at(s[Y], io)
    func = te.lower(s, [X, Y])
    verify(func)
    assert [const(d) for d in allocs(func)[XL.name].buffer.shape] == [4, 32]
    for size in sizes_for(4):
        x = rand((size, 32))
        (y,) = execute(func, [x], [(size, 32)])
        np.testing.assert_allclose(y, x * x[:, ::-1], rtol=1e-6)


def test_bound_extents_are_ints_when_static_and_expressions_when_symbolic() -> None:
    n = tir.Var("n")

    def add_one(A: te.Tensor) -> te.Tensor:
        return te.compute(A.shape, lambda i, j: A[i, j] + 1.0, name="B")

    for rows in (n, 12):
        B = add_one(te.placeholder((rows, 8), name="A"))
        s = te.create_schedule(B)
        io, ii = s[B].split(B.op.axis[0], factor=5)
        sb = te.infer_bound(s)[s[B]]
        assert sb.extent[ii] == 5 and sb.extent[B.op.axis[1]] == 8
        if rows is n:
            assert isinstance(sb.extent[io], E.PrimExpr) and not sb.is_static()
            assert str(sb.extent[io]) == str(as_extent((n + 4) // 5))
        else:
            assert sb.extent[io] == 3 and sb.is_static()
        assert len(sb.guards) == 1


# ---- GPU-style schedules --------------------------------------------------------------------


def test_cross_thread_reduction_over_a_symbolic_axis() -> None:
    rows, cols = tir.Var("rows"), tir.Var("cols")
    A = te.placeholder((rows, cols), name="A")
    r = te.reduce_axis((0, cols), name="r")
    C = te.compute((rows,), lambda i: te.sum(A[i, r], axis=r), name="C")
    s = te.create_schedule(C)
    ro, ri = s[C].split(r, factor=32)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(ri, te.thread_axis("threadIdx.x"))
    func = te.lower(s, [A, C])
    assert func.size_vars == [rows, cols]
    tagged = {f.thread_tag: f.extent for f in nodes(func, S.For) if f.thread_tag}
    assert tagged["blockIdx.x"] is rows and const(tagged["threadIdx.x"]) == 32
    shared = [a.buffer for a in nodes(func, S.Allocate) if a.buffer.scope == "shared"]
    assert [const(d) for d in shared[0].shape] == [32]
    assert uses(loops(func)[ro.name].extent, cols)

    s2 = te.create_schedule(C)
    s2[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s2[C].bind(C.op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ValueError, match="symbolic extent"):
        te.lower(s2, [A, C])


# ---- through the CPU pipeline ---------------------------------------------------------------


def test_symbolic_kernels_through_the_tir_pipeline() -> None:
    from tessera.tir.transform.pipeline import lower_pipeline

    m = tir.Var("m")
    s, args, _ = _tiled_matmul(m, 12, 40)
    func = lower_pipeline(te.lower(s, args))
    for rows in sizes_for(4):
        a, b = rand((rows, 12)), rand((12, 40))
        (c,) = execute(func, [a, b], [(rows, 40)], sizes={"m": rows})
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
