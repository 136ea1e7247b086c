"""te.lower: scheduled tensor expressions lowered to TIR and run by the TIR interpreter against
numpy on random data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tiers import SLOW

from tessera import te, tir
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.functor import post_order_visit
from tessera.tir.interpreter import run
from tessera.tir.verifier import verify

RNG = np.random.default_rng(7)

TIR_CLASSES = {
    cls for mod in (E, S) for cls in vars(mod).values() if isinstance(cls, type)
} - {E.ProducerLoad, E.Reduce}


def random(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    if dtype.startswith("int"):
        return RNG.integers(-50, 50, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def nodes(func: S.PrimFunc) -> list[Any]:
    found: list[Any] = []
    post_order_visit(func.body, found.append)
    return found


def check_tir_only(func: S.PrimFunc) -> None:
    for n in nodes(func):
        assert type(n) in TIR_CLASSES, f"{type(n).__name__} left in the lowered function"
    verify(func)  # scopes of variables and buffers, dtypes


def execute(func: S.PrimFunc, inputs: list[np.ndarray], outputs: list[te.Tensor]) -> list:
    check_tir_only(func)
    outs = [np.full(t.const_shape(), 12345, dtype=t.dtype) for t in outputs]
    run(func, [*inputs, *outs])
    return outs


def loops(func: S.PrimFunc) -> list[S.For]:
    return [n for n in nodes(func) if isinstance(n, S.For)]


def allocs(func: S.PrimFunc) -> dict[str, S.Allocate]:
    return {n.buffer.name: n for n in nodes(func) if isinstance(n, S.Allocate)}


# ---- matmul --------------------------------------------------------------------------------


def matmul(n: int, m: int, k: int, dtype: str = "float32") -> tuple:
    A = te.placeholder((n, k), dtype, name="A")
    B = te.placeholder((k, m), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


@pytest.mark.parametrize("n,m,k,fi,fj", [(8, 16, 5, 4, 8), (10, 12, 7, 4, 5), (3, 5, 2, 8, 16),
                                         (1, 1, 1, 2, 2)])
def test_matmul_split_reorder_vectorize_parallel(n: int, m: int, k: int, fi: int,
                                                 fj: int) -> None:
    A, B, C = matmul(n, m, k)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    (r,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, factor=fi)
    jo, ji = s[C].split(j, factor=fj)
    ko, ki = s[C].split(r, factor=2)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    s[C].unroll(ii)
    f = te.lower(s, [A, B, C], "mm")
    check_tir_only(f)
    assert [b.name for b in f.params] == ["A", "B", "C"]
    assert all(b.scope == "global" and b.ndim == 2 for b in f.params)
    kinds = {lp.loop_var.name: lp.kind for lp in loops(f)}
    assert kinds["i_outer"] == S.ForKind.PARALLEL
    assert kinds["j_inner"] == S.ForKind.VECTORIZED
    assert kinds["i_inner"] == S.ForKind.UNROLLED
    a, b = random((n, k)), random((k, m))
    (c,) = execute(f, [a, b], [C])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_split_is_affine_without_div_mod_and_guard_only_when_needed() -> None:
    A, B, C = matmul(8, 12, 4)
    s = te.create_schedule(C)
    i, j = C.op.axis
    s[C].split(i, factor=4)
    s[C].split(j, factor=5)  # 12 % 5 != 0
    f = te.lower(s, [A, B, C])
    ns = nodes(f)
    assert not any(isinstance(n, E.FloorDiv | E.FloorMod) for n in ns)
    guards = [n for n in ns if isinstance(n, S.IfThenElse)]
    assert guards, "a non-divisible split needs a guard"
    text = " ".join(str(g.condition) for g in guards)
    assert "j_outer" in text and "i_outer" not in text


def test_reduce_axes_outside_data_axes_init_nest() -> None:
    A, B, C = matmul(6, 9, 5)
    s = te.create_schedule(C)
    i, j = C.op.axis
    (r,) = C.op.reduce_axis
    jo, ji = s[C].split(j, factor=4)
    s[C].reorder(r, i, jo, ji)
    f = te.lower(s, [A, B, C])
    top = f.body
    assert isinstance(top, S.SeqStmt) and len(top.seq) == 2  # init nest, then reduce loop
    assert isinstance(top.seq[1], S.For) and top.seq[1].loop_var.name == "k"
    a, b = random((6, 5)), random((5, 9))
    (c,) = execute(f, [a, b], [C])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_tile_and_fuse() -> None:
    A, B, C = matmul(12, 10, 3)
    D = te.compute((12, 10), lambda i, j: C[i, j] * 2.0 + 1.0, name="D")
    s = te.create_schedule(D)
    xo, yo, xi, yi = s[D].tile(D.op.axis[0], D.op.axis[1], 4, 3)
    fused = s[D].fuse(xo, yo)
    s[D].parallel(fused)
    ci, cj = C.op.axis
    cf = s[C].fuse(ci, cj)
    s[C].split(cf, nparts=7)
    f = te.lower(s, [A, B, D])
    assert any(isinstance(n, E.FloorDiv) for n in nodes(f))
    a, b = random((12, 3)), random((3, 10))
    (d,) = execute(f, [a, b], [D])
    np.testing.assert_allclose(d, (a @ b) * 2 + 1, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,factors", [((7, 5), (3, 2)), ((13,), (4,)), ((6, 9), (4, 4))])
def test_non_divisible_splits(shape: tuple[int, ...], factors: tuple[int, ...]) -> None:
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda *i: A[i] * 3.0, name="B")
    s = te.create_schedule(B)
    for axis, f in zip(B.op.axis, factors):
        o, i = s[B].split(axis, factor=f)
        s[B].split(o, nparts=2)
    f = te.lower(s, [A, B])
    a = random(shape)
    (b,) = execute(f, [a], [B])
    np.testing.assert_allclose(b, a * 3)


def test_split_factor_larger_than_extent_needs_no_guard() -> None:
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(i)
    f = te.lower(s, [A, B])
    assert not any(isinstance(n, S.IfThenElse) for n in nodes(f))
    assert {lp.loop_var.name: lp.extent.value for lp in loops(f)} == {"i_outer": 1, "i_inner": 5}


# ---- reductions ----------------------------------------------------------------------------


def test_reduction_with_where() -> None:
    n = 9
    A = te.placeholder((n, n), name="A")
    r = te.reduce_axis((0, n), name="r")
    # lower-triangular row sums
    B = te.compute((n,), lambda i: te.sum(A[i, r], axis=r, where=r <= i), name="B")
    s = te.create_schedule(B)
    ro, ri = s[B].split(r, factor=4)
    s[B].reorder(ro, B.op.axis[0], ri)
    f = te.lower(s, [A, B])
    a = random((n, n))
    (b,) = execute(f, [a], [B])
    np.testing.assert_allclose(b, np.tril(a).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_max_min_reductions(kind: str) -> None:
    A = te.placeholder((4, 6, 5), name="A")
    r1 = te.reduce_axis((0, 6), name="r1")
    r2 = te.reduce_axis((1, 5), name="r2")  # a reduce axis that does not start at 0
    red = te.max if kind == "max" else te.min
    B = te.compute((4,), lambda i: red(A[i, r1, r2], axis=[r1, r2]), name="B")
    s = te.create_schedule(B)
    fused = s[B].fuse(r1, r2)
    s[B].split(fused, factor=7)
    f = te.lower(s, [A, B])
    a = random((4, 6, 5))
    (b,) = execute(f, [a], [B])
    ref = getattr(a[:, :, 1:], kind)(axis=(1, 2))
    np.testing.assert_allclose(b, ref)


def test_integer_reduction_and_scalar_output() -> None:
    A = te.placeholder((5, 7), "int32", name="A")
    r = te.reduce_axis((0, 5), name="r")
    c = te.reduce_axis((0, 7), name="c")
    B = te.compute((), lambda: te.sum(A[r, c], axis=[r, c]), name="B")
    s = te.create_schedule(B)
    f = te.lower(s, [A, B])
    a = random((5, 7), "int32")
    (b,) = execute(f, [a], [B])
    assert b.shape == () and int(b) == int(a.sum())


def test_reduction_with_init() -> None:
    A = te.placeholder((3, 4), name="A")
    r = te.reduce_axis((0, 4), name="r")
    B = te.compute((3,), lambda i: te.sum(A[i, r], axis=r, init=10.0), name="B")
    f = te.lower(te.create_schedule(B), [A, B])
    a = random((3, 4))
    (b,) = execute(f, [a], [B])
    np.testing.assert_allclose(b, a.sum(axis=1) + 10, rtol=1e-5)


# ---- caches and attachment -------------------------------------------------------------------


def dense_epilogue(m: int, n: int, k: int) -> tuple:
    A, W, C = matmul(m, n, k)
    bias = te.placeholder((n,), name="bias")
    badd = te.compute((m, n), lambda i, j: C[i, j] + bias[j], name="badd")
    out = te.compute((m, n), lambda i, j: tir.max_(badd[i, j], tir.const(0.0, "float32")),
                     name="relu")
    return A, W, bias, C, badd, out


def ref_dense(a: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a @ w + b, 0)


@pytest.mark.parametrize("m,n,k,mr,nr,vec", [(8, 32, 6, 4, 16, 8), (6, 20, 5, 3, 10, 5),
                                             (7, 9, 3, 4, 4, 2)])
def test_cache_write_reduction_with_fused_epilogue(m: int, n: int, k: int, mr: int, nr: int,
                                                   vec: int) -> None:
    """The dense schedule: a register tile accumulated in a local cache stage, written out
    with bias and relu by the output stage."""
    A, W, bias, C, badd, out = dense_epilogue(m, n, k)
    s = te.create_schedule(out)
    s[badd].compute_inline()
    acc = s.cache_write(C, "local")
    assert s[C].op.reduce_axis == [] and len(acc.op.reduce_axis) == 1
    s[C].compute_inline()  # the copy-out is folded into the epilogue
    ws = s[out]
    row, col = out.op.axis
    ro, ri = ws.split(row, factor=mr)
    co, ci = ws.split(col, factor=nr)
    ws.reorder(ro, co, ri, ci)
    par = ws.fuse(ro, co)
    ws.parallel(par)
    cio, cii = ws.split(ci, factor=vec)
    ws.vectorize(cii)
    s[acc].compute_at(ws, par)
    cs = s[acc]
    crow, ccol = acc.op.axis
    (kk,) = acc.op.reduce_axis
    cco, cci = cs.split(ccol, factor=vec)
    cs.reorder(kk, crow, cco, cci)
    cs.unroll(crow)
    cs.vectorize(cci)
    f = te.lower(s, [A, W, bias, out], "dense")
    check_tir_only(f)
    tile = allocs(f)["C_local"].buffer
    assert tile.scope == "local"
    assert tile.const_shape() == (min(mr, m), min(nr, n))
    a, w, b = random((m, k)), random((k, n)), random((n,))
    (o,) = execute(f, [a, w, b], [out])
    np.testing.assert_allclose(o, ref_dense(a, w, b), rtol=1e-5, atol=1e-5)


def test_cache_write_keeps_the_stage_for_the_original_tensor() -> None:
    A, W, bias, C, badd, out = dense_epilogue(8, 16, 4)
    s = te.create_schedule(C)
    acc = s.cache_write(C, "local")
    # the original stage now copies the cache out: scheduling it through C still works
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[acc].compute_at(s[C], io)
    f = te.lower(s, [A, W, C])
    assert allocs(f)["C_local"].buffer.const_shape() == (4, 16)
    a, w = random((8, 4)), random((4, 16))
    (c,) = execute(f, [a, w], [C])
    np.testing.assert_allclose(c, a @ w, rtol=1e-5, atol=1e-5)


def test_local_accumulator_at_epilogue_loop() -> None:
    """The schedule with an epilogue: the reduction itself set to local scope and computed at
    the output's tile loop (no cache_write)."""
    m, n, k = 10, 24, 5
    A, W, bias, C, badd, out = dense_epilogue(m, n, k)
    s = te.create_schedule(out)
    s[badd].compute_inline()
    s[C].set_scope("local")
    ws = s[out]
    ro, co, ri, ci = ws.tile(out.op.axis[0], out.op.axis[1], 4, 8)
    ws.vectorize(ci)
    s[C].compute_at(ws, co)
    cs = s[C]
    cs.reorder(C.op.reduce_axis[0], *C.op.axis)
    cs.vectorize(C.op.axis[1])
    f = te.lower(s, [A, W, bias, out])
    assert allocs(f)["C"].buffer.const_shape() == (4, 8)
    a, w, b = random((m, k)), random((k, n)), random((n,))
    (o,) = execute(f, [a, w, b], [out])
    np.testing.assert_allclose(o, ref_dense(a, w, b), rtol=1e-5, atol=1e-5)


def test_cache_read_at_reduction_loop() -> None:
    A, B, C = matmul(8, 8, 12)
    s = te.create_schedule(C)
    AL = s.cache_read(A, "local", [C])
    BL = s.cache_read(B, "local", [C])
    i, j = C.op.axis
    (r,) = C.op.reduce_axis
    ko, ki = s[C].split(r, factor=4)
    io, ii = s[C].split(i, factor=2)
    s[C].reorder(io, ko, ii, j, ki)
    s[AL].compute_at(s[C], ko)
    s[BL].compute_at(s[C], ko)
    f = te.lower(s, [A, B, C])
    al = allocs(f)
    assert al["A_local"].buffer.const_shape() == (2, 4)
    assert al["B_local"].buffer.const_shape() == (4, 8)
    a, b = random((8, 12)), random((12, 8))
    (c,) = execute(f, [a, b], [C])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,factor", [(16, 4), (15, 4), (7, 3), (5, 8)])
def test_stencil_compute_at_grows_region(n: int, factor: int) -> None:
    A = te.placeholder((n + 2,), name="A")
    B = te.compute((n + 2,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + B[i + 1] + B[i + 2], name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=factor)
    s[B].compute_at(s[C], io)
    f = te.lower(s, [A, C])
    assert allocs(f)["B"].buffer.const_shape() == (min(factor, n) + 2,)
    a = random((n + 2,))
    (c,) = execute(f, [a], [C])
    np.testing.assert_allclose(c, 2 * (a[:-2] + a[1:-1] + a[2:]), rtol=1e-5)


def test_2d_stencil_chain_of_attachments() -> None:
    h, w = 9, 11
    A = te.placeholder((h + 4, w + 4), name="A")
    B = te.compute((h + 4, w + 2), lambda y, x: A[y, x] + A[y, x + 1] + A[y, x + 2], name="B")
    C = te.compute((h + 2, w + 2), lambda y, x: B[y, x] + B[y + 1, x] + B[y + 2, x], name="C")
    D = te.compute((h, w), lambda y, x: C[y + 1, x + 1] - C[y, x] * 0.5 + C[y + 2, x + 2],
                   name="D")
    s = te.create_schedule(D)
    yo, xo, yi, xi = s[D].tile(D.op.axis[0], D.op.axis[1], 4, 4)
    s[C].compute_at(s[D], xo)
    cy, cx = C.op.axis
    s[B].compute_at(s[C], cy)
    f = te.lower(s, [A, D])
    al = allocs(f)
    assert al["C"].buffer.const_shape() == (6, 6)
    assert al["B"].buffer.const_shape() == (3, 6)
    a = random((h + 4, w + 4))
    b = a[:, :-2] + a[:, 1:-1] + a[:, 2:]
    c = b[:-2] + b[1:-1] + b[2:]
    ref = c[1:-1, 1:-1] - c[:-2, :-2] * 0.5 + c[2:, 2:]
    (d,) = execute(f, [a], [D])
    np.testing.assert_allclose(d, ref, rtol=1e-4, atol=1e-5)


def test_compute_at_fused_loop() -> None:
    A = te.placeholder((6, 10), name="A")
    B = te.compute((6, 10), lambda i, j: A[i, j] * A[i, j], name="B")
    C = te.compute((6, 10), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    fused = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(fused, factor=8)
    s[B].compute_at(s[C], fo)
    f = te.lower(s, [A, C])
    a = random((6, 10))
    (c,) = execute(f, [a], [C])
    np.testing.assert_allclose(c, a * a + 1, rtol=1e-6)


# ---- inlining and convolution ----------------------------------------------------------------


def conv_graph(n: int, icc: int, h: int, w: int, ib: int, occ: int, ob: int, k: int,
               pad: int, stride: int) -> dict[str, Any]:
    data = te.placeholder((n, icc, h, w, ib), name="data")
    kernel = te.placeholder((occ, icc, k, k, ib, ob), name="kernel")
    bias = te.placeholder((occ, ob), name="bias")
    hp, wp = h + 2 * pad, w + 2 * pad

    def pad_fn(b: Any, c: Any, y: Any, x: Any, v: Any) -> Any:
        inside = tir.all_of(y >= pad, y < h + pad, x >= pad, x < w + pad)
        yy = tir.max_(tir.min_(y - pad, h - 1), 0)
        xx = tir.max_(tir.min_(x - pad, w - 1), 0)
        return tir.select(inside, data[b, c, yy, xx, v], tir.const(0.0, "float32"))

    dp = te.compute((n, icc, hp, wp, ib), pad_fn, name="data_pad", tag="pad")
    oh, ow = (hp - k) // stride + 1, (wp - k) // stride + 1
    rc = te.reduce_axis((0, icc), "icc")
    ry = te.reduce_axis((0, k), "kh")
    rx = te.reduce_axis((0, k), "kw")
    rb = te.reduce_axis((0, ib), "ib")
    conv = te.compute(
        (n, occ, oh, ow, ob),
        lambda b, c, y, x, v: te.sum(dp[b, rc, y * stride + ry, x * stride + rx, rb]
                                     * kernel[c, rc, ry, rx, rb, v], axis=[rc, ry, rx, rb]),
        name="conv", tag="conv2d_NCHWc")
    badd = te.compute(conv.shape, lambda b, c, y, x, v: conv[b, c, y, x, v] + bias[c, v],
                      name="badd")
    out = te.compute(conv.shape, lambda *i: tir.max_(badd[i], tir.const(0.0, "float32")),
                     name="relu")
    return dict(data=data, kernel=kernel, bias=bias, pad=dp, conv=conv, badd=badd, out=out,
                pad_amount=pad, stride=stride)


def ref_conv(d: np.ndarray, kern: np.ndarray, b: np.ndarray, pad: int, stride: int) -> np.ndarray:
    k = kern.shape[2]
    dp = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0))).astype(np.float64)
    oh = (dp.shape[2] - k) // stride + 1
    ow = (dp.shape[3] - k) // stride + 1
    out = np.zeros((d.shape[0], kern.shape[0], oh, ow, kern.shape[5]))
    for y in range(k):
        for x in range(k):
            win = dp[:, :, y:y + stride * oh:stride, x:x + stride * ow:stride, :]
            out += np.einsum("nchwi,acio->nahwo", win, kern[:, :, y, x])
    return np.maximum(out + b[None, :, None, None, :], 0)


def run_conv(g: dict[str, Any], f: S.PrimFunc) -> None:
    d = random(g["data"].const_shape())
    kern = random(g["kernel"].const_shape())
    b = random(g["bias"].const_shape())
    (o,) = execute(f, [d, kern, b], [g["out"]])
    np.testing.assert_allclose(o, ref_conv(d, kern, b, g["pad_amount"], g["stride"]),
                               rtol=1e-4, atol=1e-4)


CONV_SHAPES = [
    dict(n=1, icc=2, h=4, w=8, ib=2, occ=2, ob=4, k=3, pad=1, stride=1),
    dict(n=2, icc=1, h=5, w=7, ib=2, occ=1, ob=4, k=3, pad=1, stride=2),
    dict(n=1, icc=2, h=3, w=5, ib=3, occ=2, ob=4, k=1, pad=0, stride=1),
]


def _conv_shapes(shapes: list[dict[str, int]]) -> list:
    """The shapes as parameters: the first (1 to 4 s per test) is slow."""
    return [pytest.param(s, id=f"shape{i}", marks=SLOW if i == 0 else ())
            for i, s in enumerate(shapes)]


@pytest.mark.parametrize("shape", _conv_shapes(CONV_SHAPES))
@pytest.mark.parametrize("reg_n", [4, 5])
def test_conv_nchwc_register_blocking(shape: dict[str, int], reg_n: int) -> None:
    """The NCHWc schedule: padding materialised at root (fused, parallel, vectorized), the
    output strip split by reg_n, a local accumulator tile computed at the strip loop with the
    reduction outside and the unrolled ow / vectorized oc block inside."""
    g = conv_graph(**shape)
    conv, out = g["conv"].op, g["out"].op
    s = te.create_schedule(out)
    s[g["badd"]].compute_inline()
    ps = s[g["pad"]]
    pax = list(g["pad"].op.axis)
    ps.parallel(ps.fuse(*pax[:3]))
    ps.vectorize(pax[-1])
    s[conv].set_scope("local")
    ws = s[out]
    b, c, y, x, v = out.axis
    xo, xi = ws.split(x, factor=reg_n)
    ws.reorder(b, c, y, xo, xi, v)
    par = ws.fuse(b, c, y)
    ws.parallel(par)
    ws.vectorize(v)
    s[conv].compute_at(ws, xo)
    cs = s[conv]
    rc, ry, rx, rb = conv.reduce_axis
    _, _, _, cx, cv = conv.axis
    cs.reorder(rc, ry, rx, rb, cx, cv)
    cs.unroll(cx)
    cs.vectorize(cv)
    f = te.lower(s, [g["data"], g["kernel"], g["bias"], g["out"]], "conv")
    check_tir_only(f)
    assert allocs(f)["conv"].buffer.const_shape() == (1, 1, 1, min(reg_n, out.axis[3].dom
                                                                    .extent.value), shape["ob"])
    run_conv(g, f)


@pytest.mark.slow
@pytest.mark.parametrize("shape", CONV_SHAPES[:2])
def test_conv_cache_write_with_inlined_padding(shape: dict[str, int]) -> None:
    """Padding inlined into the convolution; the output is the convolution itself, its tile
    accumulated in a cache_write stage and the bias + relu epilogue computed at its loop."""
    g = conv_graph(**shape)
    s = te.create_schedule(g["out"])
    s[g["pad"]].compute_inline()
    s[g["badd"]].compute_inline()
    conv = g["conv"]
    acc = s.cache_write(conv, "local")
    ws = s[g["out"]]
    b, c, y, x, v = g["out"].op.axis
    xo, xi = ws.split(x, factor=3)
    ws.reorder(b, c, y, xo, xi, v)
    ws.parallel(ws.fuse(b, c, y))
    s[conv].compute_at(ws, xo)
    cw = s[conv]
    _, _, _, cx, _ = conv.op.axis
    cxo, cxi = cw.split(cx, factor=3)
    s[acc].compute_at(cw, cxo)
    cs = s[acc]
    rc, ry, rx, rb = acc.op.reduce_axis
    _, _, _, ax, av = acc.op.axis
    cs.reorder(rc, ry, rx, rb, ax, av)
    cs.unroll(ax)
    cs.vectorize(av)
    f = te.lower(s, [g["data"], g["kernel"], g["bias"], g["out"]])
    check_tir_only(f)
    al = allocs(f)
    assert "data_pad" not in al
    assert al["conv_local"].buffer.scope == "local"
    run_conv(g, f)


def test_inline_chain_and_multiple_outputs() -> None:
    A = te.placeholder((4, 5), name="A")
    B = te.compute((4, 5), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((4, 5), lambda i, j: B[i, j] * B[i, j], name="C")
    D = te.compute((5, 4), lambda i, j: C[j, i] - B[j, i], name="D")
    E2 = te.compute((4,), lambda i: C[i, 0] + C[i, 4], name="E")
    s = te.create_schedule([D, E2])
    s[B].compute_inline()
    s[C].compute_inline()
    f = te.lower(s, [A, D, E2])
    assert not allocs(f)
    a = random((4, 5))
    d, e = execute(f, [a], [D, E2])
    c = (a + 1) ** 2
    np.testing.assert_allclose(d, (c - (a + 1)).T, rtol=1e-5)
    np.testing.assert_allclose(e, c[:, 0] + c[:, 4], rtol=1e-5)


def test_root_intermediate_gets_global_allocation_and_scalar_compute() -> None:
    A = te.placeholder((3, 4), name="A")
    k = te.compute((), lambda: tir.const(2.5, "float32"), name="k")
    B = te.compute((3, 4), lambda i, j: A[i, j] * k[()], name="B")
    C = te.compute((4, 3), lambda i, j: B[j, i] + 1.0, name="C")
    s = te.create_schedule(C)
    f = te.lower(s, [A, C])
    al = allocs(f)
    assert al["B"].buffer.scope == "global" and al["B"].buffer.const_shape() == (3, 4)
    assert al["k"].buffer.const_shape() == ()
    a = random((3, 4))
    (c,) = execute(f, [a], [C])
    np.testing.assert_allclose(c, (a * 2.5).T + 1, rtol=1e-6)


# ---- loop annotations ------------------------------------------------------------------------


def test_bind_and_pragma() -> None:
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].pragma(bx, "parallel_grain", 4)
    f = te.lower(s, [A, B], attrs={"target": "cuda"})
    assert f.attrs == {"target": "cuda"}
    outer, inner = loops(f)[::-1]
    assert outer.kind == inner.kind == S.ForKind.THREAD_BINDING
    assert (outer.thread_tag, inner.thread_tag) == ("blockIdx.x", "threadIdx.x")
    assert outer.annotations == {"parallel_grain": 4}
    a = random((64,))
    (b,) = execute(f, [a], [B])
    np.testing.assert_allclose(b, a * 2)


@pytest.mark.slow
def test_gpu_style_gemm_nested_caches() -> None:
    """Shared and local read caches attached inside a local write cache, itself attached at
    the thread loops of the output. The shared caches hold the whole block's tile (relaxed
    over the enclosing threadIdx loops: 4 x 2 rows per block); the local ones one thread's."""
    n, m, k = 16, 16, 12
    A, B, C = matmul(n, m, k)
    s = te.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    AL, BL = s.cache_read(AA, "local", [C]), s.cache_read(BB, "local", [C])
    CL = s.cache_write(C, "local")
    by, bx, ty, tx = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    tyo, tyi = s[C].split(ty, nparts=4)
    txo, txi = s[C].split(tx, nparts=4)
    s[C].reorder(by, bx, tyo, txo, tyi, txi)
    for iv, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (tyo, "threadIdx.y"),
                    (txo, "threadIdx.x")):
        s[C].bind(iv, te.thread_axis(tag))
    s[CL].compute_at(s[C], txo)
    yi, xi = CL.op.axis
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=4)
    s[CL].reorder(ko, ki, yi, xi)
    s[AA].compute_at(s[CL], ko)
    s[BB].compute_at(s[CL], ko)
    s[AL].compute_at(s[CL], ki)
    s[BL].compute_at(s[CL], ki)
    f = te.lower(s, [A, B, C])
    shapes = {name: (a.buffer.scope, a.buffer.const_shape()) for name, a in allocs(f).items()}
    assert shapes == {"C_local": ("local", (2, 2)), "A_shared": ("shared", (8, 4)),
                      "B_shared": ("shared", (4, 8)), "A_shared_local": ("local", (2, 1)),
                      "B_shared_local": ("local", (1, 2))}
    a, b = random((n, k)), random((k, m))
    (c,) = execute(f, [a, b], [C])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_empty_tensor() -> None:
    A = te.placeholder((0, 4), name="A")
    B = te.compute((0, 4), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B)
    s[B].split(B.op.axis[0], factor=4)
    f = te.lower(s, [A, B])
    run(f, [np.zeros((0, 4), "float32"), np.zeros((0, 4), "float32")])


def test_loop_variables_have_unique_names() -> None:
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((4,), lambda i: B[i] * 2.0, name="C")
    f = te.lower(te.create_schedule(C), [A, C])
    names = [lp.loop_var.name for lp in loops(f)]
    assert len(set(names)) == len(names) == 2


# ---- errors ------------------------------------------------------------------------------


def test_errors() -> None:
    A, B, C = matmul(4, 4, 4)
    D = te.compute((4, 4), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D)
    with pytest.raises(ValueError, match="not in args"):
        te.lower(s, [A, D])
    io, ii = s[D].split(D.op.axis[0], factor=2)
    s[C].compute_at(s[D], io)
    s[D].split(io, factor=2)  # the attach loop is gone
    with pytest.raises(ValueError, match="no longer a loop"):
        te.lower(s, [A, B, D])
    s2 = te.create_schedule(D)
    s2[C].compute_at(s2[D], D.op.axis[0])
    with pytest.raises(ValueError, match="must be computed at root"):
        te.lower(s2, [A, B, C, D])
    with pytest.raises(ValueError, match="twice"):
        te.lower(te.create_schedule(D), [A, B, D, D])


def test_reader_outside_attach_loop_is_an_error() -> None:
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ValueError, match="outside that loop"):
        te.lower(s, [A, D])
