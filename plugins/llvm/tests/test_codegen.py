"""tessera_llvm.codegen: hand-built TIR compiled and run against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.errors import CompileError
from tessera_llvm.build import build_module
from tessera_llvm.codegen import MAX_STACK_BYTES, CodeGenerator, generate_module

F = tir.ForKind


def _buffers(n: int, *dtypes: str) -> list[tir.Buffer]:
    return [tir.Buffer(name, [n], dt) for name, dt in zip("ABCDEFG", dtypes)]


# -- elementwise vector code ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 15, 16, 37, 100])
@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_elementwise_vector_with_tail(run_tir, vloop, rng, n, lanes):
    A, B, C = _buffers(n, "float32", "float32", "float32")
    body = vloop(n, lanes, lambda ix: tir.BufferStore(C, A[ix] * B[ix] + A[ix] - 1.5, [ix]))
    f = tir.PrimFunc("fma_like", [A, B, C], body)
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    c = np.full(n, np.nan, "float32")
    run_tir(f, [a, b, c])
    np.testing.assert_allclose(c, a * b + a - 1.5, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float64", "float16"])
def test_elementwise_dtypes(run_tir, vloop, rng, dtype):
    n = 45
    A, B, C = _buffers(n, dtype, dtype, dtype)
    body = vloop(n, 16, lambda ix: tir.BufferStore(
        C, tir.max_(A[ix] - B[ix], A[ix] * B[ix]), [ix]))
    f = tir.PrimFunc("mix", [A, B, C], body)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
        b = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
    else:
        a = (rng.standard_normal(n) * 3).astype(dtype)
        b = (rng.standard_normal(n) * 3).astype(dtype)
    c = np.zeros(n, dtype)
    run_tir(f, [a, b, c])
    with np.errstate(over="ignore"):
        expected = np.maximum(a - b, a * b)
    if dtype == "float16":
        np.testing.assert_allclose(c.astype("float32"), expected.astype("float32"), rtol=2e-3)
    else:
        np.testing.assert_array_equal(c, expected)


def test_broadcast_and_scalar_load(run_tir, vloop, rng):
    n = 40
    A, B = _buffers(n, "float32", "float32")
    S = tir.Buffer("S", [1], "float32")
    body = vloop(n, 8, lambda ix: tir.BufferStore(
        B, A[ix] * (S[0] if ix.lanes == 1 else tir.Broadcast(S[0], ix.lanes)) + 2.0, [ix]))
    f = tir.PrimFunc("scale", [A, S, B], body)
    a, s = rng.standard_normal(n).astype("float32"), np.array([1.75], "float32")
    b = np.zeros(n, "float32")
    run_tir(f, [a, s, b])
    np.testing.assert_allclose(b, a * 1.75 + 2.0, rtol=1e-6, atol=1e-6)


def test_broadcast_index_loads_one_element(run_tir, rng):
    A, B = tir.Buffer("A", [4], "float32"), tir.Buffer("B", [32], "float32")
    i = tir.Var("i")
    body = tir.For(i, 0, 4, F.SERIAL, tir.BufferStore(
        B, A[tir.Broadcast(i, 8)], [tir.Ramp(i * 8, 1, 8)]))
    a, b = rng.standard_normal(4).astype("float32"), np.zeros(32, "float32")
    run_tir(tir.PrimFunc("bcast", [A, B], body), [a, b])
    np.testing.assert_array_equal(b, np.repeat(a, 8))


def test_strided_gather_and_scatter_transpose(run_tir, rng):
    rows, cols = 8, 13
    A = tir.Buffer("A", [rows * cols], "float32")
    B = tir.Buffer("B", [rows * cols], "float32")
    j = tir.Var("j")
    # B[j, 0:8] = A[0:8, j] (a strided gather), written contiguously ...
    gather = tir.For(j, 0, cols, F.SERIAL, tir.BufferStore(
        B, A[tir.Ramp(j, cols, rows)] * 2.0, [tir.Ramp(j * rows, 1, rows)]))
    a = rng.standard_normal(rows * cols).astype("float32")
    b = np.zeros(rows * cols, "float32")
    run_tir(tir.PrimFunc("gather", [A, B], gather), [a, b])
    np.testing.assert_array_equal(b.reshape(cols, rows), a.reshape(rows, cols).T * 2.0)
    # ... and back with a strided scatter.
    k = tir.Var("k")
    scatter = tir.For(k, 0, cols, F.SERIAL, tir.BufferStore(
        A, B[tir.Ramp(k * rows, 1, rows)], [tir.Ramp(k, cols, rows)]))
    a2 = np.zeros_like(a)
    run_tir(tir.PrimFunc("scatter", [B, A], scatter), [b, a2])
    np.testing.assert_array_equal(a2, a * 2.0)


def test_vector_index_expression_gather(run_tir, rng):
    # A general vector index (not a Ramp): A[(Ramp(0, 1, 16) * 3) % 16]
    A, B = tir.Buffer("A", [16], "int32"), tir.Buffer("B", [16], "int32")
    idx = (tir.Ramp(tir.const(0), 1, 16) * tir.Broadcast(tir.const(3), 16)) % tir.Broadcast(
        tir.const(16), 16)
    body = tir.BufferStore(B, A[idx], [tir.Ramp(tir.const(0), 1, 16)])
    a, b = rng.integers(-100, 100, 16).astype("int32"), np.zeros(16, "int32")
    run_tir(tir.PrimFunc("perm", [A, B], body), [a, b])
    np.testing.assert_array_equal(b, a[(np.arange(16) * 3) % 16])


def test_ramp_value_and_select(run_tir):
    n = 32
    B = tir.Buffer("B", [n], "int64")
    i = tir.Var("i")
    ramp = tir.Ramp(i * 8, 1, 8)
    value = tir.select(ramp % tir.Broadcast(tir.const(3), 8) < tir.Broadcast(tir.const(1), 8),
                       ramp * tir.Broadcast(tir.const(10), 8), -ramp)
    body = tir.For(i, 0, n // 8, F.SERIAL, tir.BufferStore(B, value, [ramp]))
    b = np.zeros(n, "int64")
    run_tir(tir.PrimFunc("ramp", [B], body), [b])
    k = np.arange(n)
    np.testing.assert_array_equal(b, np.where(k % 3 < 1, k * 10, -k))


def test_bool_buffers_and_logic(run_tir, vloop, rng):
    n = 29
    A, B, M, O = (tir.Buffer("A", [n], "float32"), tir.Buffer("B", [n], "float32"),
                  tir.Buffer("M", [n], "bool"), tir.Buffer("O", [n], "bool"))

    def store(ix):
        cond = tir.any_of(tir.all_of(A[ix] > B[ix], M[ix]), tir.Not(tir.ne(A[ix], A[ix])))
        return tir.BufferStore(O, tir.all_of(cond, tir.Not(M[ix])), [ix])

    f = tir.PrimFunc("logic", [A, B, M, O], vloop(n, 8, store))
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    a[3] = np.nan
    m = rng.random(n) < 0.5
    o = np.ones(n, bool)
    run_tir(f, [a, b, m, o])
    expected = (((a > b) & m) | ~(a != a)) & ~m
    np.testing.assert_array_equal(o, expected)


def test_min_max_unsigned_and_signed(run_tir, vloop, rng):
    n = 40
    for dtype in ("uint8", "int8", "uint32", "int16", "uint64"):
        A, B, C, D = _buffers(n, dtype, dtype, dtype, dtype)
        body = vloop(n, 16, lambda ix, C=C, D=D, A=A, B=B: tir.seq(
            tir.BufferStore(C, tir.min_(A[ix], B[ix]), [ix]),
            tir.BufferStore(D, tir.max_(A[ix], B[ix]), [ix])))
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
        b = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
        c, d = np.zeros(n, dtype), np.zeros(n, dtype)
        run_tir(tir.PrimFunc("minmax", [A, B, C, D], body), [a, b, c, d])
        np.testing.assert_array_equal(c, np.minimum(a, b))
        np.testing.assert_array_equal(d, np.maximum(a, b))


def test_float_min_max_relu_and_clip(run_tir, vloop, rng):
    n = 50
    A, B = _buffers(n, "float32", "float32")
    body = vloop(n, 16, lambda ix: tir.BufferStore(
        B, tir.min_(tir.max_(A[ix], 0.0 if ix.lanes == 1 else tir.Broadcast(
            tir.const(0.0, "float32"), ix.lanes)), 6.0 if ix.lanes == 1 else tir.Broadcast(
            tir.const(6.0, "float32"), ix.lanes)), [ix]))
    a, b = (rng.standard_normal(n) * 5).astype("float32"), np.zeros(n, "float32")
    a[:3] = [np.inf, -np.inf, 0.0]
    run_tir(tir.PrimFunc("relu6", [A, B], body), [a, b])
    np.testing.assert_array_equal(b, np.clip(a, 0, 6))


# -- reductions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 17), (16, 64), (5, 100)])
def test_row_sum_with_local_accumulator(run_tir, rng, rows, cols):
    A = tir.Buffer("A", [rows * cols], "float32")
    B = tir.Buffer("B", [rows], "float32")
    acc = tir.Buffer("acc", [1], "float32", scope="local")
    i, k = tir.Var("i"), tir.Var("k")
    body = tir.For(i, 0, rows, F.SERIAL, tir.Allocate(acc, tir.seq(
        tir.BufferStore(acc, tir.const(0.0, "float32"), [0]),
        tir.For(k, 0, cols, F.SERIAL,
                tir.BufferStore(acc, acc[0] + A[i * cols + k], [0])),
        tir.BufferStore(B, acc[0], [i]))))
    a, b = rng.standard_normal(rows * cols).astype("float32"), np.zeros(rows, "float32")
    run_tir(tir.PrimFunc("rowsum", [A, B], body), [a, b])
    np.testing.assert_allclose(b, a.reshape(rows, cols).sum(1), rtol=1e-5, atol=1e-5)


def test_vector_accumulator_max_reduction(run_tir, rng):
    n, lanes = 128, 16
    A, B = tir.Buffer("A", [n], "float32"), tir.Buffer("B", [1], "float32")
    acc = tir.Buffer("acc", [lanes], "float32", scope="local")
    k, lane = tir.Var("k"), tir.Var("lane")
    full = tir.Ramp(tir.const(0), 1, lanes)
    body = tir.Allocate(acc, tir.seq(
        tir.BufferStore(acc, tir.Broadcast(tir.const(-np.inf, "float32"), lanes), [full]),
        tir.For(k, 0, n // lanes, F.SERIAL, tir.BufferStore(
            acc, tir.max_(acc[full], A[tir.Ramp(k * lanes, 1, lanes)]), [full])),
        tir.BufferStore(B, tir.const(-np.inf, "float32"), [0]),
        tir.For(lane, 0, lanes, F.UNROLLED, tir.BufferStore(
            B, tir.max_(B[0], acc[lane]), [0]))))
    a, b = rng.standard_normal(n).astype("float32"), np.zeros(1, "float32")
    run_tir(tir.PrimFunc("vmax", [A, B], body), [a, b])
    assert b[0] == a.max()


def test_integer_dot_product_accumulates_in_int32(run_tir, rng):
    n = 77
    A, B = tir.Buffer("A", [n], "int8"), tir.Buffer("B", [n], "int8")
    C = tir.Buffer("C", [1], "int32")
    k = tir.Var("k")
    body = tir.seq(tir.BufferStore(C, tir.const(0, "int32"), [0]), tir.For(k, 0, n, F.SERIAL,
        tir.BufferStore(C, C[0] + tir.cast("int32", A[k]) * tir.cast("int32", B[k]), [0])))
    a = rng.integers(-128, 128, n).astype("int8")
    b = rng.integers(-128, 128, n).astype("int8")
    c = np.zeros(1, "int32")
    run_tir(tir.PrimFunc("idot", [A, B, C], body), [a, b, c])
    assert c[0] == int(a.astype(np.int64) @ b.astype(np.int64))


# -- casts ---------------------------------------------------------------------------------------

CAST_DTYPES = ["float32", "int32", "int8", "uint8", "int64", "bool", "float16"]


def _cast_input(rng: np.random.Generator, src: str, dst: str, n: int) -> np.ndarray:
    """Values of ``src`` whose conversion to ``dst`` is defined (in range for float->int)."""
    if src == "bool":
        return rng.random(n) < 0.5
    if src in ("float32", "float16"):
        if dst == "bool":
            x = rng.standard_normal(n) * 3
            x[::5] = 0.0
            return x.astype(src)
        if dst in ("int8", "uint8", "int32", "int64"):
            lo, hi = (0, 255) if dst == "uint8" else (-128, 127) if dst == "int8" else (-1000, 1000)
            if dst in ("int32", "int64") and src == "float32":
                lo, hi = -2e9, 2e9
            return rng.uniform(lo, hi, n).astype(src)
        return (rng.standard_normal(n) * 100).astype(src)
    info = np.iinfo(src)
    lo, hi = info.min, info.max
    if dst == "float16":  # int -> float16 goes through float32: keep it exact there
        lo, hi = max(lo, -60000), min(hi, 60000)
    x = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64 if src != "uint8" else np.uint8)
    x[::7] = 0
    return x.astype(src)


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("src", CAST_DTYPES)
def test_every_cast_pair(run_tir, rng, src, lanes):
    n = 40
    for dst in CAST_DTYPES:
        if dst == src:
            continue
        A, B = tir.Buffer("A", [n], src), tir.Buffer("B", [n], dst)
        i = tir.Var("i")
        ix = tir.Ramp(i * lanes, 1, lanes) if lanes > 1 else i
        body = tir.For(i, 0, n // lanes, F.SERIAL,
                       tir.BufferStore(B, tir.Cast(dst, A[ix]), [ix]))
        a = _cast_input(rng, src, dst, n)
        b = np.zeros(n, dst)
        run_tir(tir.PrimFunc(f"cast_{src}_{dst}", [A, B], body), [a, b])
        np.testing.assert_array_equal(b, a.astype(dst), err_msg=f"{src} -> {dst}")


def test_float_to_bool_of_nan_is_true(run_tir):
    A, B = tir.Buffer("A", [4], "float32"), tir.Buffer("B", [4], "bool")
    i = tir.Var("i")
    body = tir.For(i, 0, 4, F.SERIAL, tir.BufferStore(B, tir.Cast("bool", A[i]), [i]))
    a, b = np.array([np.nan, 0.0, -0.0, -2.0], "float32"), np.zeros(4, bool)
    run_tir(tir.PrimFunc("nanbool", [A, B], body), [a, b])
    np.testing.assert_array_equal(b, a.astype(bool))


# -- floor division and modulo --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("divisor", [1, 2, 3, 7, 8, 64, -1, -3, -8])
def test_floordiv_floormod_constant_divisor(run_tir, vloop, rng, dtype, divisor):
    n = 64
    A, Q, R = _buffers(n, dtype, dtype, dtype)
    info = np.iinfo(dtype)

    def store(ix):
        d = tir.const(divisor, dtype)
        if ix.lanes > 1:
            d = tir.Broadcast(d, ix.lanes)
        return tir.seq(tir.BufferStore(Q, A[ix] // d, [ix]), tir.BufferStore(R, A[ix] % d, [ix]))

    a = rng.integers(max(info.min, -10**6), min(info.max, 10**6), n, endpoint=True, dtype=dtype)
    a[:4] = [info.min + 1, -1, 0, info.max]
    q, r = np.zeros(n, dtype), np.zeros(n, dtype)
    run_tir(tir.PrimFunc("fdiv", [A, Q, R], vloop(n, 8, store)), [a, q, r])
    np.testing.assert_array_equal(q, np.floor_divide(a, np.array(divisor, dtype)))
    np.testing.assert_array_equal(r, np.remainder(a, np.array(divisor, dtype)))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_floordiv_floormod_variable_divisor(run_tir, vloop, rng, dtype):
    n = 96
    A, B, Q, R = _buffers(n, dtype, dtype, dtype, dtype)
    body = vloop(n, 16, lambda ix: tir.seq(tir.BufferStore(Q, A[ix] // B[ix], [ix]),
                                          tir.BufferStore(R, A[ix] % B[ix], [ix])))
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    a = rng.integers(lo, hi, n, endpoint=True, dtype=dtype)
    b = rng.integers(max(lo, -20), min(hi, 20), n, endpoint=True, dtype=dtype)
    b[:3] = 0  # numpy gives 0 for division by zero
    if info.min < 0:
        a[3], b[3] = info.min, -1  # overflow wraps, no trap
    q, r = np.zeros(n, dtype), np.zeros(n, dtype)
    run_tir(tir.PrimFunc("vdiv", [A, B, Q, R], body), [a, b, q, r])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(q, np.floor_divide(a, b))
        np.testing.assert_array_equal(r, np.remainder(a, b))


def test_index_floordiv_of_negative_loop_values(run_tir):
    # Index arithmetic: B[i + 8] = (i // 3) * 10 + i % 3 for i in [-8, 8)
    B = tir.Buffer("B", [16], "int64")
    i = tir.Var("i")
    body = tir.For(i, -8, 16, F.SERIAL, tir.BufferStore(B, (i // 3) * 10 + i % 3, [i + 8]))
    b = np.zeros(16, "int64")
    run_tir(tir.PrimFunc("idx", [B], body), [b])
    k = np.arange(-8, 8)
    np.testing.assert_array_equal(b, (k // 3) * 10 + k % 3)


# -- statements ---------------------------------------------------------------------------------


def test_if_then_else_let_and_let_expr(run_tir, rng):
    n = 30
    A, B = _buffers(n, "float32", "float32")
    i, t, u = tir.Var("i"), tir.Var("t", "float32"), tir.Var("u", "float32")
    body = tir.For(i, 0, n, F.SERIAL, tir.LetStmt(t, A[i] * 2.0, tir.IfThenElse(
        tir.any_of(t > 1.0, tir.eq(i % 5, tir.const(0))),
        tir.BufferStore(B, tir.Let(u, t + 1.0, u * u), [i]),
        tir.BufferStore(B, -t, [i]))))
    a, b = rng.standard_normal(n).astype("float32"), np.zeros(n, "float32")
    run_tir(tir.PrimFunc("branchy", [A, B], body), [a, b])
    t_np = a * 2
    expected = np.where((t_np > 1) | (np.arange(n) % 5 == 0), (t_np + 1) ** 2, -t_np)
    np.testing.assert_allclose(b, expected, rtol=1e-6)


def test_if_without_else_and_evaluate(run_tir):
    B = tir.Buffer("B", [10], "int32")
    i = tir.Var("i")
    body = tir.seq(tir.Evaluate(tir.const(0)), tir.For(i, 0, 10, F.SERIAL, tir.IfThenElse(
        i >= 5, tir.BufferStore(B, tir.cast("int32", i), [i]))))
    b = np.full(10, -1, "int32")
    run_tir(tir.PrimFunc("ifonly", [B], body), [b])
    np.testing.assert_array_equal(b, [-1] * 5 + [5, 6, 7, 8, 9])


@pytest.mark.parametrize("kind", [F.UNROLLED, F.VECTORIZED, F.SERIAL])
def test_loop_kinds_serial_semantics(run_tir, rng, kind):
    n = 12
    A, B = _buffers(n, "float32", "float32")
    i = tir.Var("i")
    body = tir.For(i, 2, n - 2, kind, tir.BufferStore(B, A[i] + A[i - 1], [i]))
    a, b = rng.standard_normal(n).astype("float32"), np.zeros(n, "float32")
    run_tir(tir.PrimFunc("kinds", [A, B], body), [a, b])
    expected = np.zeros(n, "float32")
    expected[2:n] = a[2:n] + a[1:n - 1]
    np.testing.assert_array_equal(b, expected)


def test_int32_loop_variable(run_tir):
    B = tir.Buffer("B", [8], "int32")
    i = tir.Var("i", "int32")
    body = tir.For(i, tir.const(0, "int32"), tir.const(8, "int32"), F.SERIAL,
                   tir.BufferStore(B, i * i, [i]))
    b = np.zeros(8, "int32")
    run_tir(tir.PrimFunc("i32loop", [B], body), [b])
    np.testing.assert_array_equal(b, np.arange(8) ** 2)


# -- allocations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [16, MAX_STACK_BYTES // 4 + 1, 100_000])
def test_allocate_scratch_stack_and_heap(run_tir, rng, count):
    A, B = _buffers(count, "float32", "float32")
    tmp = tir.Buffer("tmp", [count], "float32", scope="global")
    i, j = tir.Var("i"), tir.Var("j")
    body = tir.Allocate(tmp, tir.seq(
        tir.For(i, 0, count, F.SERIAL, tir.BufferStore(tmp, A[i] * 3.0, [i])),
        tir.For(j, 0, count, F.SERIAL, tir.BufferStore(B, tmp[count - 1 - j] + 1.0, [j]))))
    f = tir.PrimFunc("scratch", [A, B], body)
    gen = CodeGenerator("m")
    gen.add_function(f)
    ir_text = str(gen.finalize())
    # large buffers outside parallel loops: the kernel's workspace (memory the runtime passes
    # to each call), not the heap and not a static global that concurrent calls would share
    large = count * 4 > MAX_STACK_BYTES
    assert gen.workspace_bytes["scratch"] == (-(-count * 4 // 64) * 64 if large else 0)
    assert "aligned_alloc" not in ir_text and "global" not in ir_text
    a, b = rng.standard_normal(count).astype("float32"), np.zeros(count, "float32")
    lib = build_module([f], "scratch").load()
    kernel = lib.get("scratch")
    assert kernel.workspace_bytes == gen.workspace_bytes["scratch"]
    if large:  # the workspace is the last parameter; garbage in it must not matter
        ws = np.full(kernel.workspace_bytes, 0xFF, dtype=np.uint8)
        kernel([a, b, ws])
        np.testing.assert_allclose(b, a[::-1] * 3.0 + 1.0, rtol=1e-6)
    for _ in range(2):  # without one, the call allocates a temporary workspace
        b[:] = 0
        run_tir(f, [a, b])
        np.testing.assert_allclose(b, a[::-1] * 3.0 + 1.0, rtol=1e-6)


def test_nested_workspace_allocations_stack_and_siblings_share(rng):
    """Nested large allocations get disjoint workspace bytes; sibling ones reuse them."""
    n = MAX_STACK_BYTES // 4 + 16
    A, B = _buffers(n, "float32", "float32")
    t1, t2, t3 = (tir.Buffer(f"t{i}", [n], "float32", scope="global") for i in range(3))
    i, j, k, m = (tir.Var(v) for v in "ijkm")
    nested = tir.Allocate(t1, tir.seq(
        tir.For(i, 0, n, F.SERIAL, tir.BufferStore(t1, A[i] + 1.0, [i])),
        tir.Allocate(t2, tir.seq(
            tir.For(j, 0, n, F.SERIAL, tir.BufferStore(t2, t1[j] * 2.0, [j])),
            tir.For(k, 0, n, F.SERIAL, tir.BufferStore(B, t2[k] + t1[k], [k]))))))
    sibling = tir.Allocate(t3, tir.For(m, 0, n, F.SERIAL,
                                       tir.BufferStore(t3, B[m] * 0.5, [m])))
    f = tir.PrimFunc("nest", [A, B], tir.seq(nested, sibling))
    lib = build_module([f], "nest").load()
    per = -(-n * 4 // 64) * 64
    assert lib.get("nest").workspace_bytes == 2 * per
    a, b = rng.standard_normal(n).astype("float32"), np.zeros(n, "float32")
    lib.get("nest")([a, b])
    np.testing.assert_allclose(b, (a + 1.0) * 3.0, rtol=1e-6)


def test_large_scratch_inside_a_parallel_loop_uses_the_heap(run_tir, rng):
    """Each task of a parallel loop needs its own buffer: too large for the stack, it comes
    from the heap (a static workspace would be shared by the threads)."""
    count, tasks = MAX_STACK_BYTES // 4 + 8, 3
    A, B = _buffers(count * tasks, "float32", "float32")
    tmp = tir.Buffer("tmp", [count], "float32", scope="global")
    p, i, j = tir.Var("p"), tir.Var("i"), tir.Var("j")
    body = tir.For(p, 0, tasks, F.PARALLEL, tir.Allocate(tmp, tir.seq(
        tir.For(i, 0, count, F.SERIAL, tir.BufferStore(tmp, A[p * count + i] * 2.0, [i])),
        tir.For(j, 0, count, F.SERIAL,
                tir.BufferStore(B, tmp[count - 1 - j], [p * count + j])))))
    f = tir.PrimFunc("par_scratch", [A, B], body)
    gen = CodeGenerator("m")
    gen.add_function(f)
    assert "aligned_alloc" in str(gen.finalize()) and gen.workspace_bytes["par_scratch"] == 0
    a = rng.standard_normal(count * tasks).astype("float32")
    b = np.zeros(count * tasks, "float32")
    run_tir(f, [a, b])
    np.testing.assert_allclose(b, (a.reshape(tasks, count)[:, ::-1] * 2.0).ravel(), rtol=1e-6)


def test_allocate_variable_size_uses_heap(run_tir, rng):
    A, B = _buffers(24, "int32", "int32")
    tmp = tir.Buffer("tmp", [tir.Var("m")], "int32")
    m, i = tmp.shape[0], tir.Var("i")
    body = tir.LetStmt(m, tir.const(24), tir.Allocate(tmp, tir.seq(
        tir.For(i, 0, m, F.SERIAL, tir.BufferStore(tmp, A[i] + 1, [i])),
        tir.For(i, 0, m, F.SERIAL, tir.BufferStore(B, tmp[i] * 2, [i])))))
    a, b = rng.integers(-50, 50, 24).astype("int32"), np.zeros(24, "int32")
    run_tir(tir.PrimFunc("varalloc", [A, B], body), [a, b])
    np.testing.assert_array_equal(b, (a + 1) * 2)


def test_allocate_bool_and_float16_local(run_tir, rng):
    n = 20
    A, B = _buffers(n, "float16", "float16")
    mask = tir.Buffer("mask", [n], "bool", scope="local")
    half = tir.Buffer("half", [n], "float16", scope="local")
    i = tir.Var("i")
    body = tir.Allocate(mask, tir.Allocate(half, tir.seq(
        tir.For(i, 0, n, F.SERIAL, tir.seq(
            tir.BufferStore(mask, A[i] > tir.const(0, "float16"), [i]),
            tir.BufferStore(half, A[i] * tir.const(0.5, "float16"), [i]))),
        tir.For(i, 0, n, F.SERIAL, tir.BufferStore(
            B, tir.select(mask[i], half[i], A[i]), [i])))))
    a, b = rng.standard_normal(n).astype("float16"), np.zeros(n, "float16")
    run_tir(tir.PrimFunc("locals", [A, B], body), [a, b])
    np.testing.assert_array_equal(b, np.where(a > 0, a * np.float16(0.5), a))


# -- module structure and errors ------------------------------------------------------------------


def test_abi_wrapper_and_noalias_body():
    A, B = _buffers(4, "float32", "float32")
    i = tir.Var("i")
    f = tir.PrimFunc("wrapped", [A, B], tir.For(i, 0, 4, F.SERIAL,
                                                tir.BufferStore(B, A[i], [i])))
    text = str(generate_module([f], "m"))
    assert 'define void @"wrapped"(ptr %"args")' in text
    assert ('define internal void @"wrapped_body"(ptr noalias %"A", ptr noalias %"B", '
            'ptr noalias %"workspace")') in text


def test_several_functions_in_one_module(rng):
    A, B = _buffers(8, "int32", "int32")
    i = tir.Var("i")
    inc = tir.PrimFunc("inc", [A, B], tir.For(i, 0, 8, F.SERIAL,
                                              tir.BufferStore(B, A[i] + 1, [i])))
    dbl = tir.PrimFunc("dbl", [A, B], tir.For(i, 0, 8, F.SERIAL,
                                              tir.BufferStore(B, A[i] * 2, [i])))
    built = build_module([inc, dbl], "two")
    assert built.function_names == ["inc", "dbl"]
    lib = built.load()
    a, b = rng.integers(-9, 9, 8).astype("int32"), np.zeros(8, "int32")
    lib.get("inc")([a, b])
    np.testing.assert_array_equal(b, a + 1)
    lib.get("dbl")([a, b])
    np.testing.assert_array_equal(b, a * 2)
    with pytest.raises(CompileError, match="already"):
        generate_module([inc, inc], "dup")


def _expect_error(func: tir.PrimFunc, match: str) -> None:
    with pytest.raises(CompileError, match=match) as info:
        generate_module([func], "m")
    assert f"PrimFunc '{func.name}'" in str(info.value)


def test_error_on_unlowered_producer_load():
    from tessera import te

    T = te.placeholder((4,), "float32", "T")
    B = tir.Buffer("B", [4], "float32")
    i = tir.Var("i")
    f = tir.PrimFunc("unlowered", [B], tir.For(i, 0, 4, F.SERIAL,
                                               tir.BufferStore(B, T[i], [i])))
    _expect_error(f, "ProducerLoad")


def test_error_on_multidimensional_access():
    B = tir.Buffer("B", [2, 2], "float32")
    f = tir.PrimFunc("twod", [B], tir.BufferStore(B, tir.const(1.0, "float32"), [0, 1]))
    _expect_error(f, "flattened")


def test_error_on_unknown_intrinsic_and_unbound_var():
    B = tir.Buffer("B", [1], "float32")
    f = tir.PrimFunc("weird", [B], tir.BufferStore(
        B, tir.call("lgamma", tir.const(1.0, "float32")), [0]))
    _expect_error(f, "lgamma")
    v = tir.Var("free", "float32")
    g = tir.PrimFunc("unbound", [B], tir.BufferStore(B, v, [0]))
    _expect_error(g, "not bound")
    other = tir.Buffer("X", [1], "float32")
    h = tir.PrimFunc("nobuf", [B], tir.BufferStore(B, other[0], [0]))
    _expect_error(h, "neither a parameter nor allocated")


def test_buffer_elem_offset(run_tir, rng):
    # A view of the parameter starting at element 3.
    A = tir.Buffer("A", [10], "float32")
    view = tir.Buffer("A", [7], "float32", elem_offset=3)
    view.data = A.data
    B = tir.Buffer("B", [7], "float32")
    i = tir.Var("i")
    body = tir.For(i, 0, 7, F.SERIAL, tir.BufferStore(B, view[i] * 2.0, [i]))
    a, b = rng.standard_normal(10).astype("float32"), np.zeros(7, "float32")
    run_tir(tir.PrimFunc("offset", [A, B], body), [a, b])
    np.testing.assert_array_equal(b, a[3:] * 2.0)
