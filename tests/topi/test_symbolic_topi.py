"""topi computes over shapes with run-time sizes (``tir.Var("s")``): the dimension helpers
(``dims_of``, ``dim_equal``, broadcasting rules), and the computes of a transformer encoder's
non-matmul ops built on symbolic placeholders, lowered once with the default schedule and run
by the TIR interpreter at several sizes against numpy."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import pytest

import tessera  # noqa: F401 - installs what symbolic graph types need
import tessera.topi.nn  # noqa: F401 - the modules below, by name
from tessera import te, tir
from tessera.errors import CompileError, OpError
from tessera.ir.graph import Node, Value
from tessera.ir.symbolic import dim_var
from tessera.ir.types import TensorType
from tessera.ops.elementwise import erf as np_erf
from tessera.tir import interpreter
from tessera.topi import broadcast as B
from tessera.topi import elemwise as EW
from tessera.topi import reduction as R
from tessera.topi import tag
from tessera.topi import transform as T
from tessera.topi import utils as U
from tessera.topi.from_graph import build_te

N = sys.modules["tessera.topi.nn.norm"]
SM = sys.modules["tessera.topi.nn.softmax"]

SIZES = [1, 7, 8, 9, 16, 29]
RNG = np.random.default_rng(97)


def rand(shape: Sequence[int], dtype: str = "float32", lo: float = -2.0,
         hi: float = 2.0) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("int"):
        return RNG.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, shape).astype(dtype)


class Kernel:
    """``outs`` of the placeholders ``ins`` lowered once (default schedule: every stage at
    root), run by the TIR interpreter at any size."""

    def __init__(self, ins: Sequence[te.Tensor], outs: Sequence[te.Tensor]) -> None:
        self.ins, self.outs = list(ins), list(outs)
        sch = te.create_schedule([t.op for t in outs])
        self.func = te.lower(sch, [*ins, *outs], "symbolic")

    def __call__(self, *arrays: np.ndarray, **sizes: int) -> list[np.ndarray]:
        env = {v: sizes[v.name] for v in self.func.size_vars if v.name in sizes}
        outs = []
        for t in self.outs:
            shape = tuple(int(interpreter.eval_expr(tir.convert(d), env)) for d in t.shape)
            fill = False if t.dtype == "bool" else (0 if "int" in t.dtype else np.nan)
            outs.append(np.full(shape, fill, t.dtype))
        interpreter.run(self.func, [*arrays, *outs], sizes=sizes)
        return outs


def close(got: np.ndarray, want: np.ndarray, tol: float = 2e-5) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# -- dimensions ---------------------------------------------------------------------------------

def test_dims_and_equality() -> None:
    s, b = tir.Var("s"), tir.Var("b")
    x = te.placeholder((2, s, 64), "float32", "x")
    assert U.dims_of(x)[0] == 2 and U.dims_of(x)[1] is s and U.dims_of(x)[2] == 64
    with pytest.raises(ValueError, match="symbolic dimension"):
        U.shape_of(x)
    assert U.dim_equal(s * 8, 8 * s) and U.dim_equal(b * s, s * b)
    assert U.dim_equal(s + s, s * 2) and not U.dim_equal(s, b) and not U.dim_equal(s, 8)
    assert U.as_dim(s * 8 - s * 8 + 3) == 3 and U.as_dim(tir.IntImm(5)) == 5
    assert U.dim_prod([2, s, 4]) is not None and U.dim_equal(U.dim_prod([2, s, 4]), s * 8)
    assert U.dim_prod([2, 3]) == 6 and U.dim_text(s * 8) == str(U.as_dim(s * 8))
    assert U.shapes_equal((2, s), (2, s)) and not U.shapes_equal((2, s), (2, b))


def test_broadcast_rules() -> None:
    s, b = tir.Var("s"), tir.Var("b")
    out = U.broadcast_shape((b, s, 64), (1, 64), (s, 1))
    assert out[0] is b and U.dim_equal(out[1], s) and out[2] == 64
    assert U.broadcast_shape((2, 3), (3,)) == (2, 3)  # static: numpy's rule, ints
    assert U.dim_equal(U.broadcast_shape((s * 2,), (2 * s,))[0], s * 2)
    with pytest.raises(OpError, match=r"dimension s against b"):
        U.broadcast_shape((s, 4), (b, 4))
    with pytest.raises(OpError, match="do not broadcast"):
        U.broadcast_shape((s, 4), (3, 4))  # a run-time size is never broadcast against 3
    assert U.broadcast_index((1, s), [tir.Var("i"), tir.Var("j")])[0] == 0
    # the tags: same shapes elemwise, broadcast otherwise
    x = te.placeholder((s, 8), "float32", "x")
    assert B.add(x, te.placeholder((s, 8), "float32", "y")).op.tag == tag.ELEMWISE
    assert B.add(x, te.placeholder((8,), "float32", "y")).op.tag == tag.BROADCAST


def test_unravel_ravel_symbolic() -> None:
    s = tir.Var("s")
    f = tir.Var("f")
    idx = U.unravel(f, [s, 4, 6])
    flat = U.ravel(idx, [s, 4, 6])
    for n in (1, 3, 7):
        for v in (0, 5, 4 * 6 * n - 1):
            env = {s: n, f: v}
            got = [int(interpreter.eval_expr(tir.convert(e), env)) for e in idx]
            assert got == list(np.unravel_index(v, (n, 4, 6)))
            assert int(interpreter.eval_expr(flat, env)) == v


# -- elementwise and broadcasting ----------------------------------------------------------------

def test_arithmetic_with_broadcasting() -> None:
    s = tir.Var("s")
    x = te.placeholder((2, s, 16), "float32", "x")
    bias = te.placeholder((16,), "float32", "bias")
    col = te.placeholder((2, s, 1), "float32", "col")
    half = U.const_tensor(np.array(0.5, np.float32))
    two = U.const_tensor(np.array(2.0, np.float32))
    h = B.add(x, bias)
    gelu = B.multiply(B.multiply(h, half), B.add(EW.erf(B.divide(h, two)), two))
    y = B.subtract(EW.sqrt(EW.abs(B.power(gelu, two))), col)
    pw = B.power(EW.abs(x), col)
    k = Kernel([x, bias, col], [y, pw])
    for n in SIZES:
        xa, ba, ca = rand((2, n, 16)), rand((16,)), rand((2, n, 1), lo=0.5, hi=2.0)
        ha = xa + ba
        ga = ha * 0.5 * (np_erf(ha / 2.0) + 2.0)
        got_y, got_p = k(xa, ba, ca, s=n)
        close(got_y, np.sqrt(np.abs(ga * ga)) - ca, 1e-4)
        close(got_p, np.abs(xa) ** ca, 1e-4)


def test_predicates_where_cast() -> None:
    s = tir.Var("s")
    x = te.placeholder((s, 12), "float32", "x")
    y = te.placeholder((s, 12), "float32", "y")
    ids = te.placeholder((s, 1), "int64", "ids")
    ref = te.placeholder((12,), "int64", "ref")
    keep = B.logical_and(EW.logical_not(EW.isnan(x)), B.equal(ids, ref))
    out = B.where(keep, x, y)
    as_int = EW.cast_to(B.multiply(x, U.const_tensor(np.array(4.0, np.float32))), "int32")
    as_f64 = EW.cast_to(x, "float64")
    k = Kernel([x, y, ids, ref], [keep, out, as_int, as_f64])
    for n in SIZES:
        xa, ya = rand((n, 12)), rand((n, 12))
        xa[RNG.random((n, 12)) < 0.2] = np.nan
        ia, ra = rand((n, 1), "int64", 0, 3), rand((12,), "int64", 0, 3)
        want_keep = ~np.isnan(xa) & (ia == ra)
        got = k(xa, ya, ia, ra, s=n)
        close(got[0], want_keep)
        close(got[1], np.where(want_keep, xa, ya))
        finite = ~np.isnan(xa)
        want_int = (np.where(finite, xa, 0) * 4).astype(np.int32)
        np.testing.assert_array_equal(got[2][finite], want_int[finite])
        close(got[3], xa.astype(np.float64))


# -- data movement ------------------------------------------------------------------------------

def test_gather_embedding() -> None:
    s = tir.Var("s")
    table = te.placeholder((10, 8), "float32", "table")
    ids = te.placeholder((2, s), "int64", "ids")
    out = T.take(table, ids, 0)
    assert U.dim_equal(U.dims_of(out)[1], s) and U.dims_of(out)[2] == 8
    k = Kernel([table, ids], [out])
    ta = rand((10, 8))
    for n in SIZES:
        ia = rand((2, n), "int64", -10, 9)
        close(k(ta, ia, s=n)[0], ta[ia])


def test_reshape_transpose_flatten() -> None:
    s = tir.Var("s")
    x = te.placeholder((2, s, 24), "float32", "x")
    heads = T.transpose(T.reshape(x, (2, s, 4, 6)), (0, 2, 1, 3))  # (2, 4, s, 6)
    back = T.reshape(T.transpose(heads, (0, 2, 1, 3)), (2 * s, 24))
    flat = T.flatten(x, 1)  # (2, s * 24)
    k = Kernel([x], [heads, back, flat])
    for n in SIZES:
        xa = rand((2, n, 24))
        h, bk, fl = k(xa, s=n)
        close(h, xa.reshape(2, n, 4, 6).transpose(0, 2, 1, 3))
        close(bk, xa.reshape(2 * n, 24))
        close(fl, xa.reshape(2, n * 24))
    with pytest.raises(ValueError, match="not provably equal"):
        T.reshape(x, (2, s, 25))
    with pytest.raises(ValueError, match="not provably equal"):
        T.reshape(x, (2, tir.Var("t"), 24))


def test_unsqueeze_squeeze_expand() -> None:
    s = tir.Var("s")
    x = te.placeholder((2, s), "float32", "x")
    u = T.unsqueeze(x, [1, 3])  # (2, 1, s, 1)
    sq = T.squeeze(u)
    row = te.placeholder((1, 16), "float32", "row")
    col = te.placeholder((s, 1), "float32", "col")
    e1 = T.expand(row, (s, 16))
    e2 = T.expand(col, (1, 16))
    e3 = T.expand(x, (3, 2, 1))  # (3, 2, s)
    with pytest.raises(OpError):
        T.squeeze(x, [1])  # a run-time size is not a static 1
    k = Kernel([x, row, col], [u, sq, e1, e2, e3])
    for n in SIZES:
        xa, ra, ca = rand((2, n)), rand((1, 16)), rand((n, 1))
        got = k(xa, ra, ca, s=n)
        close(got[0], xa[:, None, :, None])
        close(got[1], xa)
        close(got[2], np.broadcast_to(ra, (n, 16)))
        close(got[3], np.broadcast_to(ca, (n, 16)))
        close(got[4], np.broadcast_to(xa, (3, 2, n)))


def test_slice_with_run_time_bounds() -> None:
    s = tir.Var("s")
    table = te.placeholder((40, 8), "float32", "table")
    x = te.placeholder((2, s, 8), "float32", "x")
    pos = T.slice_onnx(table, [0], [s], [0])  # the first s rows: (s, 8)
    tail = T.slice_onnx(x, [1], [np.iinfo(np.int64).max], [1])  # (2, s - 1, 8)
    last3 = T.slice_onnx(x, [-3, 2], [s, 7], [1, 2])  # (2, 3, 5): counts from the end
    odd = T.slice_onnx(x, [0], [s], [1], [2])  # every second row: (2, (s + 1) // 2, 8)
    assert U.dim_equal(U.dims_of(pos)[0], s) and U.dim_equal(U.dims_of(tail)[1], s - 1)
    assert U.dims_of(last3)[1:] == (3, 5)
    with pytest.raises(OpError, match="positive"):
        T.slice_onnx(x, [s], [0], [1], [-1])
    k = Kernel([table, x], [pos, tail, odd])
    k3 = Kernel([x], [last3])
    ta = rand((40, 8))
    for n in [*SIZES, 40]:
        xa = rand((2, n, 8))
        got = k(ta, xa, s=n)
        close(got[0], ta[:n])
        close(got[1], xa[:, 1:])
        close(got[2], xa[:, 0:n:2])
        if n >= 3:
            close(k3(xa, s=n)[0], xa[:, -3:, 2:7])
    # past the table: the read is clamped into it (no out-of-bounds access)
    big = k(ta, rand((2, 45, 8)), s=45)[0]
    close(big[:40], ta)
    close(big[40:], np.broadcast_to(ta[39], (5, 8)))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad_with_run_time_amounts(mode: str) -> None:
    s = tir.Var("s")
    x = te.placeholder((s, 5), "float32", "x")
    after = (8 - s % 8) % 8  # to a multiple of 8
    y = T.pad(x, [0, 2], [after, 1], 0.5, mode)
    assert U.dims_of(y)[1] == 8
    k = Kernel([x], [y])
    for n in SIZES:
        xa = rand((n, 5))
        got = k(xa, s=n)[0]
        extra = (8 - n % 8) % 8
        width = [(0, extra), (2, 1)]
        if mode == "constant":
            want = np.pad(xa, width, mode="constant", constant_values=0.5)
        elif mode == "reflect" and n == 1:  # numpy repeats a one-element axis
            want = np.pad(np.pad(xa, [(0, 0), (2, 1)], mode="reflect"), [(0, extra), (0, 0)],
                          mode="edge")
        else:
            want = np.pad(xa, width, mode=mode)
        close(got, want)
        assert got.shape[0] % 8 == 0


def test_concat_and_split() -> None:
    s = tir.Var("s")
    x = te.placeholder((2, s, 4), "float32", "x")
    y = te.placeholder((2, 3, 4), "float32", "y")
    z = te.placeholder((2, s, 3), "float32", "z")
    c1 = T.concat([x, y, x], 1)  # (2, 2s + 3, 4)
    c2 = T.concat([x, z], 2)  # (2, s, 7)
    p1, p2 = T.split(c1, [s, s + 3], 1)
    assert U.dim_equal(U.dims_of(c1)[1], 2 * s + 3)
    with pytest.raises(OpError, match="differ"):
        T.concat([x, y], 2)
    k = Kernel([x, y, z], [c1, c2, p1, p2])
    for n in SIZES:
        xa, ya, za = rand((2, n, 4)), rand((2, 3, 4)), rand((2, n, 3))
        got = k(xa, ya, za, s=n)
        want = np.concatenate([xa, ya, xa], 1)
        close(got[0], want)
        close(got[1], np.concatenate([xa, za], 2))
        close(got[2], want[:, :n])
        close(got[3], want[:, n:])


# -- reductions and normalizations --------------------------------------------------------------

def test_reductions_over_rows() -> None:
    s = tir.Var("s")
    x = te.placeholder((2, s, 12), "float32", "x")
    xi = te.placeholder((3, s), "int32", "xi")
    outs = [R.mean(x, [-1], True), R.sum(x, [2], False), R.max(x, [-1], True),
            R.mean(x, [1], False), R.max(x, [1], True), R.mean(xi, [1], True),
            R.sum(xi, [0, 1], False)]
    k = Kernel([x, xi], outs)
    for n in SIZES:
        xa, ia = rand((2, n, 12)), rand((3, n), "int32", -50, 50)
        got = k(xa, ia, s=n)
        close(got[0], xa.mean(-1, keepdims=True))
        close(got[1], xa.sum(2), 1e-4)
        close(got[2], xa.max(-1, keepdims=True))
        close(got[3], xa.mean(1))
        close(got[4], xa.max(1, keepdims=True))
        close(got[5], ia.sum(1, keepdims=True) // n)
        close(got[6], ia.sum().astype(np.int32))


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    x64 = x.astype(np.float64)
    m = x64.mean(-1, keepdims=True)
    v = ((x64 - m) ** 2).mean(-1, keepdims=True)
    y = (x64 - m) / np.sqrt(v + 1e-5) * g
    return y + b if b is not None else y


def test_layer_norm_rows_and_length() -> None:
    s = tir.Var("s")
    x = te.placeholder((s, 32), "float32", "x")
    g, b = te.placeholder((32,), "float32", "g"), te.placeholder((32,), "float32", "b")
    xr = te.placeholder((3, s), "float32", "xr")  # a row of run-time length
    g1 = te.placeholder((1,), "float32", "g1")
    y, mean, inv = N.layer_norm(x, g, b)
    yr = N.layer_norm(xr, g1, None)[0]
    rms = N.rms_norm(x, g)
    k = Kernel([x, g, b, xr, g1], [y, mean, yr, rms])
    for n in SIZES:
        xa, ga, ba = rand((n, 32)), rand((32,)), rand((32,))
        ra, g1a = rand((3, n)) + 3.0, rand((1,))
        got = k(xa, ga, ba, ra, g1a, s=n)
        close(got[0], _layer_norm(xa, ga, ba), 1e-4)
        close(got[1], xa.mean(-1, keepdims=True))
        if n > 1:  # one element: (x - mean) is 0 over sqrt(eps); both sides agree on 0
            close(got[2], _layer_norm(ra, g1a, None), 2e-3)
        close(got[3], xa / np.sqrt((xa * xa).mean(-1, keepdims=True) + 1e-5) * ga, 1e-4)


def _softmax(x: np.ndarray, log: bool = False) -> np.ndarray:
    z = x.astype(np.float64) - x.max(-1, keepdims=True)
    if log:
        return z - np.log(np.exp(z).sum(-1, keepdims=True))
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("lanes", [0, 8])
def test_softmax_rows_and_length(lanes: int) -> None:
    s = tir.Var("s")
    x = te.placeholder((2, s, 20), "float32", "x")  # run-time rows, a constant row length
    sc = te.placeholder((s, s), "float32", "sc")  # attention scores: run-time length too
    outs = [SM.softmax(x, -1, lanes), SM.softmax(sc, -1, lanes), SM.log_softmax(sc, -1, lanes)]
    if lanes:
        assert any("softmax_max_lanes" in op.tag for op in te.compute_ops([outs[1]]))
    k = Kernel([x, sc], outs)
    for n in SIZES:
        xa, sa = rand((2, n, 20), lo=-4, hi=4), rand((n, n), lo=-4, hi=4)
        got = k(xa, sa, s=n)
        close(got[0], _softmax(xa))
        close(got[1], _softmax(sa))
        close(got[2], _softmax(sa, log=True), 1e-4)


def test_row_softmax_computes_take_run_time_rows() -> None:
    s = tir.Var("s")
    computes = SM.row_softmax_computes(16, 32)
    short = te.placeholder((s, 20), "float32", "x")
    long = te.placeholder((s, s), "float32", "x")
    assert computes["Softmax"]([short], {"axis": -1}, []) is None  # a short constant row
    (out,) = computes["Softmax"]([long], {"axis": -1}, [])
    assert any("softmax_max_lanes" in op.tag for op in te.compute_ops([out]))


# -- graphs -------------------------------------------------------------------------------------

def test_build_te_with_run_time_shapes() -> None:
    """Graph values whose types hold dimension expressions (one variable object per name)."""
    s = dim_var("s")
    x = Value("x", TensorType((2, s, 8), "float32"))
    b = Value("b", TensorType((8,), "float32"), data=rand((8,)))
    h = Value("h", TensorType((2, s, 8), "float32"))
    y = Value("y", TensorType((2, 8 * s), "float32"))
    nodes = [Node("Add", "add", [x, b], [h], {}),
             Node("Reshape", "reshape", [h], [y], {"shape": [2, -1]})]
    gte = build_te(nodes, [x], [y])
    assert U.dim_equal(U.dims_of(gte.placeholders[0])[1], s)
    k = Kernel(gte.placeholders, gte.outputs)
    for n in (1, 9):
        xa = rand((2, n, 8))
        close(k(xa, np.asarray(b.data), s=n)[0], (xa + b.data).reshape(2, 8 * n))
    bad = Value("bad", TensorType((2, s, 9), "float32"))
    with pytest.raises(CompileError, match="compute gives"):
        build_te([Node("Add", "add", [x, b], [bad], {})], [x], [bad])


# -- values from the sizes alone (tessera.topi.size_values) ------------------------------------

def _size_node(op: str, attrs: dict, out: TensorType) -> Node:
    from tessera.ops.registry import get_schema

    filled = {k: a.default for k, a in get_schema(op).attrs.items()}
    filled.update(attrs)
    return Node(op, f"{op.lower()}0", [], [Value("out", out)], filled)


@pytest.mark.parametrize("case", ["Range", "ShapeValues", "ConstantOfShape"])
def test_size_value_computes(case: str) -> None:
    """``Range`` (``seq + 3`` down to 3, step -2, int32), ``ShapeValues`` (``[[2 * seq, b],
    [7, seq - 1]]``) and ``ConstantOfShape`` (``[b, seq]`` of int64 5) built from size
    expressions, run by the interpreter at several sizes against numpy."""
    s, b = dim_var("seq"), dim_var("b")
    if case == "Range":
        out = TensorType(((s + 1) // 2,), "int32")
        node = _size_node("Range", {"start": s + 3, "limit": 3, "delta": -2, "dtype": "int32"},
                          out)
    elif case == "ShapeValues":
        out = TensorType((2, 2), "int64")
        node = _size_node("ShapeValues", {"values": [s * 2, b, 7, s - 1], "shape": [2, 2]},
                          out)
    else:
        out = TensorType((b, s), "int64")
        node = _size_node("ConstantOfShape", {"shape": [b, s],
                                              "value": np.array([5], np.int64)}, out)
    group = build_te([node], [], node.outputs)
    kernel = Kernel([], group.outputs)
    for seq in SIZES:
        names = {v.name for v in kernel.func.size_vars}
        (got,) = kernel(**{k: v for k, v in {"seq": seq, "b": 3}.items() if k in names})
        if case == "Range":
            want = np.arange(seq + 3, 3, -2, dtype=np.int32)
        elif case == "ShapeValues":
            want = np.array([[2 * seq, 3], [7, seq - 1]], np.int64)
        else:
            want = np.full((3, seq), 5, np.int64)
        close(got, want)


def test_size_value_computes_refuse_float_ranges() -> None:
    from tessera.topi.registry import unsupported_reason

    node = _size_node("Range", {"start": 0.5, "limit": dim_var("seq"), "delta": 1,
                                "dtype": "float32"}, TensorType((dim_var("seq"),), "float32"))
    assert "must be integers" in (unsupported_reason(node) or "")
