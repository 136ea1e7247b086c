"""Bound inference: regions of attached stages, loop extents, index simplification."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tessera import te, tir
from tessera.te.bound import eval_interval, simplify_index, substitute_vars
from tessera.tir import expr as E
from tessera.tir.interpreter import run

RNG = np.random.default_rng(3)


def region(s: te.Schedule, t: te.Tensor) -> list[tuple[Any, int]]:
    return te.infer_bound(s)[s[t]].region()


def as_str(e: Any) -> str:
    return str(simplify_index(e))


def value_at(e: Any, var: Any, k: int) -> int:
    got = simplify_index(substitute_vars(e, {var: k}))
    assert isinstance(got, E.IntImm), got
    return got.value


def run_check(s: te.Schedule, args: list[te.Tensor], ref: np.ndarray) -> None:
    f = te.lower(s, args)
    inputs = [RNG.standard_normal(t.const_shape()).astype(t.dtype) for t in args[:-1]]
    out = np.zeros(args[-1].const_shape(), args[-1].dtype)
    run(f, [*inputs, out])
    np.testing.assert_allclose(out, ref(*inputs), rtol=1e-5, atol=1e-6)


def chain(n: int, m: int, index: Any) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: index(B, i), name="C")
    return A, B, C


# ---- regions ------------------------------------------------------------------------------


def test_root_stage_covers_whole_shape() -> None:
    A, B, C = chain(8, 8, lambda B, i: B[i] * 2.0)
    s = te.create_schedule(C)
    (lo, ext), = region(s, B)
    assert as_str(lo) == "0" and ext == 8


def test_stencil_region_grows_by_window() -> None:
    A, B, C = chain(16, 18, lambda B, i: B[i] + B[i + 1] + B[i + 2])
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    (lo, ext), = region(s, B)
    assert ext == 6
    assert lo.dtype == "int64" and as_str(lo) == "(i_outer * 4)"  # no clamp: it stays inside


def test_region_is_shifted_only_when_it_could_leave_the_shape() -> None:
    # 15 outputs in strips of 4: the last strip reads past the end unless shifted back
    A, B, C = chain(15, 17, lambda B, i: B[i] + B[i + 2])
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    (lo, ext), = region(s, B)
    assert ext == 6
    assert isinstance(lo, E.Min)
    assert [value_at(lo, io, k) for k in range(4)] == [0, 4, 8, 11]
    run_check(s, [A, C], lambda a: (a[:15] + 1) + (a[2:] + 1))


def test_region_of_reads_at_negative_offsets() -> None:
    A, B, C = chain(8, 8, lambda B, i: B[tir.max_(i - 1, 0)] + B[i])
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    (lo, ext), = region(s, B)
    assert ext == 5
    assert [value_at(lo, io, k) for k in range(2)] == [0, 3]

    def ref(a: np.ndarray) -> np.ndarray:
        b = a + 1
        return b[np.maximum(np.arange(8) - 1, 0)] + b

    run_check(s, [A, C], ref)


@pytest.mark.parametrize("index,ext", [
    (lambda B, i: B[i // 2], 2),          # aligned: strips of 4 read 2 elements
    (lambda B, i: B[(i + 1) // 2], 3),    # unaligned: 3
    (lambda B, i: B[i % 3], 3),           # modulo: its whole range
    (lambda B, i: B[tir.min_(i, 9)], 4),
])
def test_div_mod_min_regions(index: Any, ext: int) -> None:
    A, B, C = chain(12, 12, index)
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    assert region(s, B)[0][1] == ext
    idx = np.arange(12)
    gather = {2: idx // 2, 3: None}.get(ext)
    f = te.lower(s, [A, C])
    a = RNG.standard_normal(12).astype("float32")
    c = np.zeros(12, "float32")
    run(f, [a, c])
    if gather is not None:
        np.testing.assert_allclose(c, (a + 1)[gather], rtol=1e-6)


@pytest.mark.parametrize("kind", ["gather", "product"])
def test_unanalysable_index_falls_back_to_full_extent(kind: str) -> None:
    A = te.placeholder((10,), name="A")
    idx = te.placeholder((6,), "int64", name="idx")
    B = te.compute((10,), lambda i: A[i] * 3.0, name="B")
    if kind == "gather":
        C = te.compute((2, 3), lambda i, j: B[idx[i * 3 + j]], name="C")
    else:
        C = te.compute((3, 3), lambda i, j: B[i * j], name="C")
    s = te.create_schedule(C)
    s[B].compute_at(s[C], s[C].leaf_iter_vars[0])
    (lo, ext), = region(s, B)
    assert as_str(lo) == "0" and ext == 10
    if kind == "gather":  # a gather at a fixed position needs one element
        s[B].compute_at(s[C], s[C].leaf_iter_vars[1])
        assert region(s, B)[0][1] == 1
    f = te.lower(s, [A, idx, C] if kind == "gather" else [A, C])
    a = RNG.standard_normal(10).astype("float32")
    if kind == "gather":
        ix = RNG.integers(0, 10, 6).astype("int64")
        c = np.zeros((2, 3), "float32")
        run(f, [a, ix, c])
        np.testing.assert_allclose(c, a[ix].reshape(2, 3) * 3, rtol=1e-6)
    else:
        c = np.zeros((3, 3), "float32")
        run(f, [a, c])
        i, j = np.meshgrid(np.arange(3), np.arange(3), indexing="ij")
        np.testing.assert_allclose(c, a[i * j] * 3, rtol=1e-6)


def test_loops_outside_attach_point_stay_symbolic() -> None:
    A = te.placeholder((6, 8), name="A")
    B = te.compute((6, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, 8), lambda i, j: B[i, j] + B[i, 7 - j], name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    s[B].compute_at(s[C], i)
    (lo0, e0), (lo1, e1) = region(s, B)
    assert (as_str(lo0), e0) == ("i", 1)
    assert (as_str(lo1), e1) == ("0", 8)
    run_check(s, [A, C], lambda a: 2 * a + 2 * a[:, ::-1])


def test_attach_inside_attached_stage_and_several_readers() -> None:
    """B is read by C (computed at D.yo) and by D itself; both readers are inside D.yo."""
    A = te.placeholder((10, 6), name="A")
    B = te.compute((10, 6), lambda y, x: A[y, x] + 1.0, name="B")
    C = te.compute((10, 6), lambda y, x: B[y, x] * B[y, 5 - x], name="C")
    D = te.compute((8, 6), lambda y, x: C[y + 2, x] - B[y + 1, x], name="D")
    s = te.create_schedule(D)
    yo, yi = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], yo)
    s[B].compute_at(s[D], yo)
    bounds = te.infer_bound(s)
    assert bounds[s[C]].region()[0][1] == 4
    assert bounds[s[B]].region()[0][1] == 5  # rows yo*4+1 .. yo*4+5

    def ref(a: np.ndarray) -> np.ndarray:
        b = a + 1
        c = b * b[:, ::-1]
        return c[2:] - b[1:9]

    run_check(s, [A, D], ref)


def test_range_of_iter_vars() -> None:
    A, B, C = chain(16, 18, lambda B, i: B[i] + B[i + 2])
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    bo, bi = s[B].split(B.op.axis[0], factor=4)
    bounds = te.infer_bound(s)
    assert bounds.range_of(io).extent.value == 4
    assert bounds.range_of(B.op.axis[0]).extent.value == 6
    assert (bounds.range_of(bo).extent.value, bounds.range_of(bi).extent.value) == (2, 4)
    assert len(bounds[s[B]].guards) == 1  # 6 is not a multiple of 4


# ---- arithmetic helpers ------------------------------------------------------------------------


def test_simplify_index() -> None:
    i, j = E.Var("i"), E.Var("j")
    assert as_str((i * 8 + j) - i * 8) == "j"
    assert as_str((i * 8 + j) // 8) == "(i + (j // 8))"
    assert as_str((i * 8 + 3) % 8) == "3"
    assert as_str((i * 8 + 3) // 8) == "i"
    assert as_str(tir.min_(i + 1, i)) == "i"
    assert as_str(tir.max_(i + 1, i)) == "(i + 1)"
    assert as_str(i * 1 + 0) == "i"
    x = E.Var("x", "float32")
    assert str(simplify_index(x * E.Cast("float32", i * 1))) == str(x * E.Cast("float32", i))


def test_eval_interval() -> None:
    i, j, k = E.Var("i"), E.Var("j"), E.Var("k")
    relax = {j: (0, 3), k: (0, 2)}
    got = eval_interval(i * 4 + j + k, relax)
    assert (as_str(got.lo), as_str(got.hi)) == ("(i * 4)", "((i * 4) + 5)")
    got = eval_interval(j - k, relax)
    assert (as_str(got.lo), as_str(got.hi)) == ("-2", "3")
    got = eval_interval((i * 4 + j) // 2, relax)
    assert (as_str(got.lo), as_str(got.hi)) == ("(i * 2)", "((i * 2) + 1)")
    got = eval_interval(i * 3, relax)
    assert got.lo is got.hi
    assert eval_interval(j * k, relax) is None


# ---- flattened pairs of axes ----------------------------------------------------------------


def test_div_mod_pair_of_a_flattened_index_merges() -> None:
    f, j = E.Var("f"), E.Var("j")
    assert as_str((f // 7) * 7 + f % 7) == "f"
    flat = ((f * 6 + j) // 7) * 21 + ((f * 6 + j) % 7) * 3 + 1
    assert as_str(flat) == "(((f * 18) + (j * 3)) + 1)"
    # not a pair: different divisors, different operands, a coefficient that does not match
    assert "//" in as_str((f // 7) * 8 + f % 7)
    assert "//" in as_str((f // 7) * 7 + j % 7)
    assert "//" in as_str((f // 6) * 7 + f % 7)
    for k in (0, 5, 6, 7, 48):  # the merge keeps the value
        e = ((f * 6 + 5) // 7) * 7 + (f * 6 + 5) % 7
        assert value_at(e, f, k) == k * 6 + 5


def test_region_of_a_flat_stage_read_through_fused_rows_is_one_tile() -> None:
    """A 7x7 output written with its rows fused and split by 5 reads 5 consecutive elements
    of a flat (49) producer per tile: the last tile is shifted back to stay inside."""
    A = te.placeholder((49,), name="A")
    F = te.compute((49,), lambda p: A[p] * 2.0, name="F")
    C = te.compute((7, 7), lambda y, x: F[y * 7 + x] + 1.0, name="C")
    s = te.create_schedule(C)
    fo, fi = s[C].split(s[C].fuse(*C.op.axis), factor=5)
    s[F].compute_at(s[C], fo)
    (lo, ext), = region(s, F)
    assert ext == 5
    assert [value_at(lo, fo.var, k) for k in (0, 1, 9)] == [0, 5, 44]
    run_check(s, [A, C], lambda a: (a * 2.0 + 1.0).reshape(7, 7))
