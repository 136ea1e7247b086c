"""Loop partitioning of symbolic kernels (tessera.tir.transform.loop_partition) and the default
pipeline on them: every lowered function is compared with the interpreter on the original at
sizes around the tile (0, 1, tile - 1, tile, tile + 1, 3*tile + 5 and the bound), and the main
loops must come out guard-free and vectorized."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tessera import tir
from tessera.tir.functor import nodes_of
from tessera.tir.interpreter import run
from tessera.tir.transform import loop_partition, lower_pipeline
from tessera.tir.transform.hoist_sizes import inline_size_lets
from tessera.tir.verifier import verify

F = tir.ForKind
F32 = "float32"


def _sizes(tile: int, bound: int) -> list[int]:
    return sorted({0, 1, tile - 1, tile, tile + 1, 3 * tile + 5, bound})


def _random(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(shape).astype(F32)


def _compare(before: tir.PrimFunc, after: tir.PrimFunc, shapes: Callable[..., list],
             sizes: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Run both on the same random arrays (shapes from the sizes); all must agree."""
    rng = np.random.default_rng(seed)
    args = [_random(s, rng) for s in shapes(**sizes)]
    a1 = [a.copy() for a in args]
    a2 = [a.copy() for a in args]
    run(before, a1, sizes=sizes)
    run(after, a2, sizes=sizes)
    for b, x, y in zip(before.params, a1, a2):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6, err_msg=f"{b.name} {sizes}")
    return a1


def _ramp_store_loops(func: tir.PrimFunc) -> list[tir.For]:
    """Loops whose body holds a vector store and no if or select."""
    out = []
    for loop in nodes_of(func.body, tir.For):
        stores = nodes_of(loop.body, tir.BufferStore)
        if any(isinstance(s.indices[-1], tir.Ramp) for s in stores) and not nodes_of(
                loop.body, tir.IfThenElse) and not nodes_of(loop.body, tir.Select):
            out.append(loop)
    return out


# ---- 1-D: C = A + B split by 8 --------------------------------------------------------------


def _add(kind: F, bound: int | None = None) -> tir.PrimFunc:
    n = tir.Var("n")
    A, B, C = (tir.decl_buffer((n,), F32, x) for x in "ABC")
    io, ii = tir.Var("io"), tir.Var("ii")
    i = io * 8 + ii
    body = tir.For(io, 0, (n + 7) // 8, kind, tir.For(ii, 0, 8, F.VECTORIZED, tir.IfThenElse(
        i < n, tir.BufferStore(C, A[i] + B[i] * tir.const(3.0, F32), [i]))))
    return tir.PrimFunc("add", [A, B, C], body,
                        size_bounds={n: (0, bound)} if bound is not None else None)


@pytest.mark.parametrize("kind", [F.SERIAL, F.PARALLEL])
def test_add_is_partitioned_and_vectorized(kind: F) -> None:
    f = _add(kind, bound=100)
    g = inline_size_lets(lower_pipeline(f))
    verify(g, lowered=True)
    top = g.body.seq if isinstance(g.body, tir.SeqStmt) else [g.body]
    assert len(top) == 2, g  # main, then tail
    main, tail = top
    assert isinstance(main, tir.For) and main.kind == kind
    assert nodes_of(main, tir.IfThenElse) == [] and _ramp_store_loops(g) == [main]
    assert isinstance(tail, tir.For) and tail.kind == F.SERIAL
    assert nodes_of(tail, tir.IfThenElse)  # the partial tile stays guarded
    for n in _sizes(8, 100):
        a, b, c = _compare(f, g, lambda n: [(n,)] * 3, {"n": n}, seed=n)
        np.testing.assert_allclose(c, a + b * 3.0, rtol=1e-6)


def test_without_partitioning_the_guarded_loop_is_not_vectorized() -> None:
    f = _add(F.SERIAL)
    g = lower_pipeline(f, {"loop_partition": False})
    assert _ramp_store_loops(g) == []
    assert nodes_of(g.body, tir.IfThenElse)
    for n in (0, 5, 16, 29):
        _compare(f, g, lambda n: [(n,)] * 3, {"n": n}, seed=n)


def test_select_guard_with_padded_output() -> None:
    """``P[i] = select(i < n, A[min(i, n - 1)], 0)`` into a buffer padded to whole tiles."""
    n = tir.Var("n")
    A = tir.decl_buffer((n,), F32, "A")
    P = tir.decl_buffer(((n + 7) // 8 * 8,), F32, "P")
    io, ii = tir.Var("io"), tir.Var("ii")
    i = io * 8 + ii
    value = tir.select(i < n, A[tir.min_(i, n - 1)] * 2.0, tir.const(0.0, F32))
    body = tir.For(io, 0, (n + 7) // 8, F.PARALLEL,
                   tir.For(ii, 0, 8, F.VECTORIZED, tir.BufferStore(P, value, [i])))
    f = tir.PrimFunc("pad", [A, P], body, size_vars=[n])
    g = lower_pipeline(f)
    main = _ramp_store_loops(g)
    assert len(main) == 1 and main[0].kind == F.PARALLEL
    assert nodes_of(main[0], tir.Min) == []  # the clamp is gone with its guard
    for size in _sizes(8, 61):
        a, p = _compare(f, g, lambda n: [(n,), ((n + 7) // 8 * 8,)], {"n": size}, seed=size)
        np.testing.assert_allclose(p[:size], a * 2.0, rtol=1e-6)
        assert not p[size:].any()


def test_guard_through_a_let_and_an_else_branch() -> None:
    n = tir.Var("n")
    A = tir.decl_buffer((n,), F32, "A")
    C = tir.decl_buffer(((n + 3) // 4 * 4,), F32, "C")
    io, ii, j = tir.Var("io"), tir.Var("ii"), tir.Var("j")
    body = tir.For(io, 0, (n + 3) // 4, F.SERIAL, tir.For(ii, 0, 4, F.VECTORIZED, tir.LetStmt(
        j, io * 4 + ii, tir.IfThenElse(j < n, tir.BufferStore(C, A[j] + 1.0, [j]),
                                       tir.BufferStore(C, tir.const(-1.0, F32), [j])))))
    f = tir.PrimFunc("let", [A, C], body)
    g = lower_pipeline(f)
    assert len(_ramp_store_loops(g)) == 1
    for size in _sizes(4, 23):
        a, c = _compare(f, g, lambda n: [(n,), ((n + 3) // 4 * 4,)], {"n": size}, seed=size)
        np.testing.assert_allclose(c[:size], a + 1.0)
        assert (c[size:] == -1.0).all()


def test_head_and_tail_of_a_padded_window() -> None:
    """``B[i] = A[i - 2] if 2 <= i < n + 2 else 0`` for ``i`` in ``range(n + 4)``: a guard
    with a lower and an upper end gives head, main and tail."""
    n = tir.Var("n")
    A = tir.decl_buffer((n,), F32, "A")
    B = tir.decl_buffer((n + 4,), F32, "B")
    i = tir.Var("i")
    body = tir.For(i, 0, n + 4, F.SERIAL, tir.IfThenElse(
        tir.all_of(i >= 2, i < n + 2), tir.BufferStore(B, A[i - 2] * 0.5, [i]),
        tir.BufferStore(B, tir.const(0.0, F32), [i])))
    f = tir.PrimFunc("window", [A, B], body)
    g = loop_partition(f)
    loops = g.body.seq
    assert len(loops) == 3 and all(isinstance(x, tir.For) for x in loops)
    assert [bool(nodes_of(x, tir.IfThenElse)) for x in loops] == [True, False, True]
    lowered = lower_pipeline(f)
    for size in _sizes(4, 40):
        a, b = _compare(f, g, lambda n: [(n,), (n + 4,)], {"n": size}, seed=size)
        np.testing.assert_allclose(b[2:size + 2], a * 0.5)
        assert not b[:2].any() and not b[size + 2:].any()
        _compare(f, lowered, lambda n: [(n,), (n + 4,)], {"n": size}, seed=size)


# ---- 2-D: a register-tiled matrix product --------------------------------------------------------


def _matmul(kb: int = 4, jb: int = 8, depth: int = 5) -> tir.PrimFunc:
    """``C[n, m] = A[n, depth] @ B[depth, m]`` tiled kb x jb with an accumulator in local
    memory, guarded in both dimensions (selects in the update, ifs in the write-back)."""
    n, m = tir.Var("n"), tir.Var("m")
    A = tir.decl_buffer((n, depth), F32, "A")
    B = tir.decl_buffer((depth, m), F32, "B")
    C = tir.decl_buffer((n, m), F32, "C")
    acc = tir.decl_buffer((kb, jb), F32, "acc", scope="local")
    io, jo, ii, ji, k = (tir.Var(x) for x in ("io", "jo", "ii", "ji", "k"))
    i, j = io * kb + ii, jo * jb + ji

    def tile(st: tir.Stmt) -> tir.Stmt:
        return tir.For(ii, 0, kb, F.UNROLLED, tir.For(ji, 0, jb, F.VECTORIZED, st))

    inside = tir.all_of(i < n, j < m)
    init = tile(tir.BufferStore(acc, tir.const(0.0, F32), [ii, ji]))
    update = tir.For(k, 0, depth, F.SERIAL, tile(tir.BufferStore(acc, acc[ii, ji] + tir.select(
        inside, A[tir.min_(i, n - 1), k] * B[k, tir.min_(j, m - 1)], tir.const(0.0, F32)),
        [ii, ji])))
    write = tile(tir.IfThenElse(inside, tir.BufferStore(C, acc[ii, ji], [i, j])))
    body = tir.For(io, 0, (n + kb - 1) // kb, F.PARALLEL, tir.For(
        jo, 0, (m + jb - 1) // jb, F.SERIAL, tir.Allocate(acc, tir.seq(init, update, write))))
    return tir.PrimFunc("matmul", [A, B, C], body, size_bounds={n: (0, 37)})


def test_register_tiled_matmul() -> None:
    depth = 5
    f = _matmul(depth=depth)
    g = lower_pipeline(f)
    verify(g, lowered=True)
    # the main block (both guards gone) is vector code: the update and the write-back
    main = [lp for lp in _ramp_store_loops(g) if lp.loop_var.name == "jo"]
    assert len(main) == 1
    assert not nodes_of(main[0], tir.Min)
    ramps = [s for s in nodes_of(main[0], tir.BufferStore) if isinstance(s.indices[0], tir.Ramp)]
    assert {s.buffer.name for s in ramps} == {"acc", "C"}
    # it is inside the parallel main part over full row tiles
    parallel = [lp for lp in nodes_of(g.body, tir.For) if lp.kind == F.PARALLEL]
    assert len(parallel) == 1 and nodes_of(parallel[0], tir.For).count(main[0]) == 1
    shapes = lambda n, m: [(n, depth), (depth, m), (n, m)]  # noqa: E731
    # every size of n at the tile edges, each with an m at the other tile's edges
    pairs = list(zip(_sizes(4, 37), [9, 8, 7, 1, 29, 13, 0])) + [(5, 8), (4, 9)]
    for n, m in pairs:
        a, b, c = _compare(f, g, shapes, {"n": n, "m": m}, seed=n * 100 + m)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)


def test_only_the_tail_tiles_keep_guards() -> None:
    g = loop_partition(_matmul())
    # io: main + tail; in each, jo: main + tail -> four tile loops, one of them unguarded
    jo_loops = [lp for lp in nodes_of(g.body, tir.For) if lp.loop_var.name == "jo"]
    assert len(jo_loops) == 4
    guarded = [bool(nodes_of(lp, tir.IfThenElse) or nodes_of(lp, tir.Select)) for lp in jo_loops]
    assert guarded.count(False) == 1
    # partition gives every copy its own variables and buffers
    loop_vars = [lp.loop_var for lp in nodes_of(g.body, tir.For)
                 if lp.loop_var.name in ("io", "jo")]
    assert len(loop_vars) == 6 and len({id(v) for v in loop_vars}) == 6
    allocs = [a.buffer for a in nodes_of(g.body, tir.Allocate)]
    assert len({id(b) for b in allocs}) == len(allocs) == 4
    verify(g)


# ---- what is left alone ----------------------------------------------------------------------


def test_static_kernels_are_unchanged() -> None:
    A = tir.decl_buffer((30,), F32, "A")
    C = tir.decl_buffer((30,), F32, "C")
    io, ii = tir.Var("io"), tir.Var("ii")
    i = io * 8 + ii
    body = tir.For(io, 0, 4, F.PARALLEL, tir.For(ii, 0, 8, F.VECTORIZED, tir.IfThenElse(
        i < 30, tir.BufferStore(C, A[i] + 1.0, [i]))))
    f = tir.PrimFunc("static", [A, C], body)
    assert loop_partition(f) is f
    assert repr(lower_pipeline(f)) == repr(lower_pipeline(f, {"loop_partition": False}))
    # on request, constant guards are partitioned too (the result still computes the same)
    g = loop_partition(f, partition_static=True)
    assert len(g.body.seq) == 2
    rng = np.random.default_rng(1)
    a = _random((30,), rng)
    c1, c2 = _random((30,), rng), None
    c2 = c1.copy()
    run(f, [a, c1])
    run(lower_pipeline(f, {"partition_static": True}), [a, c2])
    np.testing.assert_array_equal(c1, c2)


def test_guards_that_do_not_qualify() -> None:
    """A guard reading memory, one over a variable of an inner loop with a symbolic range,
    and a guard inside an unrolled loop do not split the loop around them."""
    n = tir.Var("n")
    A = tir.decl_buffer((n,), F32, "A")
    L = tir.decl_buffer((n,), "int64", "L")
    i, j, u = tir.Var("i"), tir.Var("j"), tir.Var("u")
    store = tir.BufferStore(A, A[i] + 1.0, [i])
    by_load = tir.For(i, 0, n, F.SERIAL, tir.IfThenElse(L[i] < n, store))
    unrolled = tir.For(u, 0, 4, F.UNROLLED, tir.IfThenElse(u < n, tir.BufferStore(
        A, A[u] + 1.0, [u])))
    for body in (by_load, unrolled):
        f = tir.PrimFunc("f", [A, L], body)
        assert loop_partition(f) is f
    # i + j < n with j in range(n): the loop over i stays whole, the one over j is split
    by_inner = tir.For(i, 0, n, F.SERIAL, tir.For(j, 0, n, F.SERIAL, tir.IfThenElse(
        i + j < n, store)))
    f = tir.PrimFunc("tri", [A], by_inner)
    g = loop_partition(f)
    assert isinstance(g.body, tir.For) and g.body.loop_var is i
    inner = g.body.body.seq
    assert len(inner) == 2 and not nodes_of(inner[0], tir.IfThenElse)
    for size in (0, 1, 6):
        a, = _compare(f, g, lambda n: [(n,)], {"n": size}, seed=size)


def test_loop_extent_guard_is_removed_from_a_serial_loop_order_kept() -> None:
    """A serial recurrence guarded by ``i < m``: the partitioned loop keeps the order."""
    n, m = tir.Var("n"), tir.Var("m")
    A = tir.decl_buffer((n,), F32, "A")
    i = tir.Var("i")
    body = tir.For(i, 1, n - 1, F.SERIAL, tir.IfThenElse(
        i < m, tir.BufferStore(A, A[i - 1] * 0.5 + A[i], [i])))
    f = tir.PrimFunc("scan", [A], body, size_vars=[n, m])
    g = loop_partition(f)
    assert len(g.body.seq) == 2 and not nodes_of(g.body.seq[0], tir.IfThenElse)
    for size in (0, 1, 2, 9):
        for mm in (0, 1, 4, 12):
            _compare(f, g, lambda n, m: [(n,)], {"n": size, "m": mm}, seed=size + mm)
            _compare(f, lower_pipeline(f), lambda n, m: [(n,)], {"n": size, "m": mm})


def test_tiled_range_with_a_symbolic_start() -> None:
    """``C[i] = A[i] * 2`` for ``s <= i < n`` over tiles of 4: a lower guard with a
    coefficient of 4 (its bound rounds up) and an upper one."""
    n, s = tir.Var("n"), tir.Var("s")
    A = tir.decl_buffer((n,), F32, "A")
    C = tir.decl_buffer((n,), F32, "C")
    io, ii = tir.Var("io"), tir.Var("ii")
    i = io * 4 + ii
    body = tir.For(io, 0, (n + 3) // 4, F.PARALLEL, tir.For(ii, 0, 4, F.VECTORIZED, tir.IfThenElse(
        tir.all_of(i >= s, i < n), tir.BufferStore(C, A[i] * 2.0, [i]))))
    f = tir.PrimFunc("range", [A, C], body, size_vars=[n, s])
    g = lower_pipeline(f)
    assert len(_ramp_store_loops(g)) == 1
    for size in _sizes(4, 30):
        for start in (0, 1, 3, 4, 5, 13):
            a, c = _compare(f, g, lambda n, s: [(n,), (n,)], {"n": size, "s": start},
                            seed=size * 31 + start)
            np.testing.assert_allclose(c[start:], a[start:] * 2.0)


def test_loops_with_a_barrier_are_not_split() -> None:
    """Inside a thread block the split point may differ per thread: a loop holding a barrier
    must run as many times in every thread."""
    n = tir.Var("n")
    A = tir.decl_buffer((n,), F32, "A")
    tx, k = tir.Var("tx"), tir.Var("k")
    body = tir.For(tx, 0, 32, F.THREAD_BINDING, tir.For(k, 0, (n + 31) // 32, F.SERIAL, tir.seq(
        tir.IfThenElse(k * 32 + tx < n, tir.BufferStore(A, A[k * 32 + tx] + 1.0,
                                                        [k * 32 + tx])),
        tir.Barrier("shared"))), thread_tag="threadIdx.x")
    f = tir.PrimFunc("sync", [A], body)
    assert loop_partition(f) is f
