"""Symbolic (run-time) extents in the llvm plugin: hand-written TIR with size variables, lowered
by the TIR pipeline, compiled once and run at many sizes against the TIR interpreter; the
calling convention (sizes after the workspace slot), the loader's size derivation and checks,
and the fast paths that update the sizes in place."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.errors import RunError
from tessera.tir import interpreter
from tessera.tir.transform import lower_pipeline
from tessera_llvm.build import build_module, encode_dim, size_spec
from tessera_llvm.codegen import MAX_STACK_BYTES, CodeGenerator
from tessera_llvm.loader import SizeSpec, load_object, pack_pointers
from tessera_llvm.sequence import KernelSequence

F = tir.ForKind
SIZES = [0, 1, 7, 8, 9, 29]
#: The upper bound of the bounded functions below.
BOUND = 64
#: A bound whose float32 scratch (80 KB) is too large for the stack: planned in the workspace.
BIG = 20000
#: A constant scratch size too large for the stack (float32).
FIXED = 17000


def _var(name: str) -> tir.Var:
    return tir.Var(name, "int64")


# -- the functions ---------------------------------------------------------------------------


def elementwise() -> tir.PrimFunc:
    """``C[i] = A[i] * B[i] + A[i] - 0.5`` for i < n."""
    n, i = _var("n"), _var("i")
    A, B, C = (tir.Buffer(x, (n,), "float32") for x in "ABC")
    body = tir.For(i, 0, n, F.SERIAL, tir.BufferStore(C, A[i] * B[i] + A[i] - 0.5, [i]))
    return tir.PrimFunc("elementwise", [A, B, C], body, size_bounds={n: (0, BOUND)})


def rows() -> tir.PrimFunc:
    """A ``(n, 64)`` row op with a parallel outer loop: ``B[i, j] = A[i, j] * S[i] + j``."""
    n, i, j = _var("n"), _var("i"), _var("j")
    A, B = tir.Buffer("A", (n, 64), "float32"), tir.Buffer("B", (n, 64), "float32")
    S = tir.Buffer("S", (n,), "float32")
    body = tir.For(i, 0, n, F.PARALLEL, tir.For(j, 0, 64, F.VECTORIZED, tir.BufferStore(
        B, A[i, j] * S[i] + tir.cast("float32", j), [i, j])))
    return tir.PrimFunc("rows", [A, S, B], body)


def tiled() -> tir.PrimFunc:
    """``for io in range((n + 7) // 8): for ii in range(8): if io*8+ii < n: D[..] = ..``."""
    n, io, ii = _var("n"), _var("io"), _var("ii")
    C, D = tir.Buffer("C", (n,), "float32"), tir.Buffer("D", (n,), "float32")
    k = io * 8 + ii
    body = tir.For(io, 0, (n + 7) // 8, F.SERIAL, tir.For(ii, 0, 8, F.SERIAL, tir.IfThenElse(
        k < n, tir.BufferStore(D, C[k] * 3.0 + tir.cast("float32", k), [k]))))
    return tir.PrimFunc("tiled", [C, D], body)


def scratch(name: str, bound: int | None, parallel: bool = False) -> tir.PrimFunc:
    """A local scratch buffer of ``n`` elements (bounded or not): ``T[i] = X[i] * 2``, then
    ``Y[j] = T[n - 1 - j] + T[j]`` (reads the scratch in another order than written). With
    ``parallel``, each of 4 parallel rows has its own scratch."""
    n, i, j, r = _var("n"), _var("i"), _var("j"), _var("r")
    rows_ = 4 if parallel else 1
    X, Y = tir.Buffer("X", (rows_, n), "float32"), tir.Buffer("Y", (rows_, n), "float32")
    T = tir.Buffer("T", (n,), "float32", scope="local")
    body: tir.Stmt = tir.Allocate(T, tir.seq(
        tir.For(i, 0, n, F.SERIAL, tir.BufferStore(T, X[r, i] * 2.0, [i])),
        tir.For(j, 0, n, F.SERIAL, tir.BufferStore(Y, T[n - 1 - j] + T[j], [r, j]))))
    body = tir.For(r, 0, rows_, F.PARALLEL if parallel else F.SERIAL, body)
    bounds = {n: (0, bound)} if bound is not None else {}
    return tir.PrimFunc(name, [X, Y], body, size_bounds=bounds)


def stacked_scratch() -> tir.PrimFunc:
    """Two nested workspace buffers of ``n`` elements (bounded) and a constant one of
    :data:`FIXED` elements in them: ``T[i] = X[i] * 2``, ``U[i] = T[n - 1 - i] + 1``,
    ``W[k] = k``, then ``Y[j] = U[j] + T[j] + W[j % FIXED]``."""
    n, i, j, k, r = _var("n"), _var("i"), _var("j"), _var("k"), _var("r")
    X, Y = tir.Buffer("X", (1, n), "float32"), tir.Buffer("Y", (1, n), "float32")
    T = tir.Buffer("T", (n,), "float32", scope="local")
    U = tir.Buffer("U", (n,), "float32", scope="local")
    W = tir.Buffer("W", (FIXED,), "float32", scope="local")
    body = tir.Allocate(T, tir.seq(
        tir.For(i, 0, n, F.SERIAL, tir.BufferStore(T, X[r, i] * 2.0, [i])),
        tir.Allocate(U, tir.seq(
            tir.For(i, 0, n, F.SERIAL, tir.BufferStore(U, T[n - 1 - i] + 1.0, [i])),
            tir.Allocate(W, tir.seq(
                tir.For(k, 0, FIXED, F.SERIAL, tir.BufferStore(W, tir.cast("float32", k), [k])),
                tir.For(j, 0, n, F.SERIAL, tir.BufferStore(
                    Y, U[j] + T[j] + W[j % FIXED], [r, j]))))))))
    return tir.PrimFunc("stacked_scratch", [X, Y], tir.For(r, 0, 1, F.SERIAL, body),
                        size_bounds={n: (0, BIG)})


def reduction() -> tir.PrimFunc:
    """A sum over the symbolic axis: ``out[j] = sum_i A[i, j] * A[i, j]`` for an ``(n, 16)``
    input."""
    n, i, j = _var("n"), _var("i"), _var("j")
    A, O = tir.Buffer("A", (n, 16), "float32"), tir.Buffer("O", (16,), "float32")
    body = tir.For(j, 0, 16, F.SERIAL, tir.seq(
        tir.BufferStore(O, tir.const(0.0, "float32"), [j]),
        tir.For(i, 0, n, F.SERIAL, tir.BufferStore(O, O[j] + A[i, j] * A[i, j], [j]))))
    return tir.PrimFunc("reduction", [A, O], body)


def two_sizes() -> tir.PrimFunc:
    """Two size variables: ``B[j, i] = A[i, j] + i - j`` for an ``(m, n)`` A (a transpose)."""
    m, n, i, j = _var("m"), _var("n"), _var("i"), _var("j")
    A, B = tir.Buffer("A", (m, n), "float32"), tir.Buffer("B", (n, m), "float32")
    body = tir.For(i, 0, m, F.PARALLEL, tir.For(j, 0, n, F.SERIAL, tir.BufferStore(
        B, A[i, j] + tir.cast("float32", i - j), [j, i])))
    return tir.PrimFunc("two_sizes", [A, B], body, size_bounds={m: (0, 100), n: (0, 50)})


FUNCS = {
    "elementwise": elementwise(), "rows": rows(), "tiled": tiled(),
    "scratch_ws": scratch("scratch_ws", BIG), "scratch_stack": scratch("scratch_stack", BOUND),
    "scratch_heap": scratch("scratch_heap", None),
    "scratch_par_stack": scratch("scratch_par_stack", BOUND, parallel=True),
    "scratch_par_heap": scratch("scratch_par_heap", None, parallel=True),
    "reduction": reduction(), "two_sizes": two_sizes(), "stacked_scratch": stacked_scratch(),
}
#: The largest size each function is run at (its bound, or a size past every other).
LARGEST = {"elementwise": BOUND, "scratch_ws": BIG, "scratch_stack": BOUND,
           "scratch_par_stack": BOUND, "stacked_scratch": BIG}


@pytest.fixture(scope="module")
def built():  # noqa: ANN201 - a BuiltModule
    """Every function lowered and compiled into one module, once; the size specs of the
    functions before flattening (so every dimension of an array gives sizes), but for
    ``rows``, whose sizes come from element counts."""
    specs = {k: size_spec(f) for k, f in FUNCS.items() if k != "rows"}
    return build_module([lower_pipeline(f) for f in FUNCS.values()], "symbolic",
                        size_specs=specs)


@pytest.fixture(scope="module")
def lib(built):  # noqa: ANN001, ANN201 - a Library
    return built.load()


def _inputs(func: tir.PrimFunc, sizes: dict[str, int], rng: np.random.Generator
            ) -> list[np.ndarray]:
    """Random inputs and NaN-filled outputs shaped for ``sizes`` (the last parameter is the
    output)."""
    env = {v: sizes[v.name] for v in func.size_vars}
    arrays = []
    for k, p in enumerate(func.params):
        shape = tuple(int(interpreter.eval_expr(d, env)) for d in p.shape)
        if k == len(func.params) - 1:
            arrays.append(np.full(shape, np.nan, p.dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(p.dtype))
    return arrays


def _run_both(lib, name: str, dims: dict[str, int], rng: np.random.Generator,  # noqa: ANN001
              **call) -> tuple[np.ndarray, np.ndarray]:
    func = FUNCS[name]
    arrays = _inputs(func, dims, rng)
    expected = [a.copy() for a in arrays]
    interpreter.run(func, expected)
    lib.get(name)(arrays, **call)
    return arrays[-1], expected[-1]


@pytest.mark.parametrize("name", [k for k in FUNCS if k != "two_sizes"])
def test_one_function_serves_every_size(lib, rng, name: str) -> None:
    sizes = [*SIZES, LARGEST.get(name, 100)]
    for n in sizes:
        got, want = _run_both(lib, name, {"n": n}, rng)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} n={n}")


@pytest.mark.parametrize("m, n", [(0, 5), (5, 0), (1, 1), (7, 9), (29, 8), (100, 50)])
def test_two_size_variables(lib, rng, m: int, n: int) -> None:
    got, want = _run_both(lib, "two_sizes", {"m": m, "n": n}, rng)
    np.testing.assert_array_equal(got, want)
    got, want = _run_both(lib, "two_sizes", {"m": m, "n": n}, rng, sizes={"n": n, "m": m})
    np.testing.assert_array_equal(got, want)
    got, want = _run_both(lib, "two_sizes", {"m": m, "n": n}, rng, sizes=[m, n])
    np.testing.assert_array_equal(got, want)


def test_flattened_arrays_derive_sizes(lib, rng) -> None:
    """The compiled buffers are flattened (``n * 64`` elements): 1-D arrays still give n."""
    func = FUNCS["rows"]
    a, s, b = _inputs(func, {"n": 13}, rng)
    want = b.copy()
    interpreter.run(func, [a, s, want])
    lib.get("rows")([a.reshape(-1), s, b.reshape(-1)])
    np.testing.assert_allclose(b, want, rtol=1e-6, atol=1e-5)
    # derived from A alone (a 1-D array of 13 * 64 elements), S's shape agrees
    assert lib.get("rows").resolve_sizes([a.reshape(-1), s, b]) == [13]


# -- the generated code ----------------------------------------------------------------------


def test_symbolic_ir_takes_sizes_after_the_workspace(built) -> None:
    ir = built.source_ir
    # the body takes the buffers, the workspace, then the sizes as i64 values
    assert 'define internal void @"elementwise_body"(ptr noalias %"A", ptr noalias %"B", ' \
           'ptr noalias %"C", ptr noalias %"workspace", i64 %"n")' in ir
    entry = ir[ir.index('define void @"elementwise"('):]
    entry = entry[:entry.index("}")]
    assert "getelementptr inbounds ptr, ptr %\"args\", i64 4" in entry  # args[n + 1]
    assert "i64 3" not in entry  # no workspace loaded: the function needs none
    assert 'call void @"elementwise_body"(ptr %"A", ptr %"B", ptr %"C", ptr null, i64 %"n")' \
        in entry
    body = ir[ir.index('@"elementwise_body"('):]
    body = body[:body.index("\n}")]
    assert "icmp sge i64 %\"n\", 0" in body and f"icmp sle i64 %\"n\", {BOUND}" in body
    assert body.count('@"llvm.assume"') == 2
    # the size variable is carried into the outlined parallel loop, with its facts
    par = ir[ir.index('define internal void @"two_sizes_parallel1_impl"'):]
    par = par[:par.index("\n}")]
    assert "icmp sle i64" in par and '@"llvm.assume"' in par


def test_bounded_scratch_is_planned_at_the_bound(built) -> None:
    assert built.workspaces["scratch_ws"] == -(-BIG * 4 // 64) * 64
    for name in ("scratch_stack", "scratch_heap", "scratch_par_stack", "scratch_par_heap",
                 "elementwise"):
        assert built.workspaces[name] == 0, name
    ir = built.source_ir

    def body(name: str) -> str:
        text = ir[ir.index(f'define internal void @"{name}'):]
        return text[:text.index('define void')]

    assert "aligned_alloc" not in body("scratch_ws") and "aligned_alloc" not in body(
        "scratch_stack")
    assert f"alloca [{BOUND} x float]" in body("scratch_stack")
    assert f"alloca [{BOUND} x float]" in body("scratch_par_stack")
    assert "aligned_alloc" in body("scratch_heap") and "aligned_alloc" in body(
        "scratch_par_heap")
    assert BIG * 4 > MAX_STACK_BYTES >= BOUND * 4


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


def test_nested_scratch_starts_where_the_calls_sizes_end(lib, rng) -> None:
    """The workspace is sized for the bounds; at run time each nested buffer starts where the
    one around it ends at the call's sizes, so a call uses the workspace's first bytes only
    (the pages a small call touches are few, and the same at every size)."""
    fn = lib.get("stacked_scratch")
    assert fn.workspace_bytes == 2 * _aligned(BIG * 4) + _aligned(FIXED * 4)
    for n in (0, 1, 7, 300, BIG):
        arrays = _inputs(FUNCS["stacked_scratch"], {"n": n}, rng)
        want = [a.copy() for a in arrays]
        interpreter.run(FUNCS["stacked_scratch"], want)
        workspace = np.full(fn.workspace_bytes, 0xAB, np.uint8)
        fn([*arrays, workspace])
        np.testing.assert_allclose(arrays[-1], want[-1], rtol=1e-6, atol=1e-5, err_msg=str(n))
        used = 2 * _aligned(n * 4) + _aligned(FIXED * 4)
        assert (workspace[used:] == 0xAB).all(), n
        assert (workspace[used - 64:used] != 0xAB).any(), n  # and the last buffer ends there


def test_static_function_ir_is_unchanged() -> None:
    """A function without size variables has the entry of before: buffers, a null
    workspace, no sizes slot, no assumptions."""
    A, B = tir.Buffer("A", (40,), "float32"), tir.Buffer("B", (40,), "float32")
    i = tir.Var("i")
    f = tir.PrimFunc("st", [A, B], tir.For(i, 0, 40, F.SERIAL,
                                           tir.BufferStore(B, A[i] + 1.0, [i])))
    assert not f.is_symbolic
    gen = CodeGenerator("m")
    gen.add_function(f)
    ir = str(gen.finalize())
    assert 'define internal void @"st_body"(ptr noalias %"A", ptr noalias %"B", ' \
           'ptr noalias %"workspace")' in ir
    assert "assume" not in ir and "sizes" not in ir
    entry = ir[ir.index('define void @"st"('):]
    assert 'call void @"st_body"(ptr %"A", ptr %"B", ptr null)' in entry
    assert entry.count("getelementptr") == 2


# -- the loader ------------------------------------------------------------------------------


def test_size_spec(built) -> None:
    spec = built.size_specs["two_sizes"]
    assert spec.names == ("m", "n") and spec.bounds == ((0, 100), (0, 50))
    assert spec.shapes == ((["var", 0], ["var", 1]), (["var", 1], ["var", 0]))
    flat = size_spec(lower_pipeline(FUNCS["two_sizes"]))  # flattened: element counts only
    assert flat.shapes == ((["*", ["var", 0], ["var", 1]],), (["*", ["var", 1], ["var", 0]],))
    assert SizeSpec.from_json(spec.to_json()) == spec
    assert "elementwise" in built.size_specs and built.signatures["elementwise"] == [
        ("float32", None)] * 3
    n = _var("n")
    assert encode_dim((n + 7) // 8 * tir.const(2), [n]) == ["*", ["//", ["+", ["var", 0], 7], 8],
                                                            2]
    with pytest.raises(ValueError):
        encode_dim(_var("other"), [n])
    A = tir.Buffer("A", (4,), "float32")
    assert size_spec(tir.PrimFunc("s", [A], tir.Evaluate(tir.const(0)))) is None


def test_argument_errors(lib, rng) -> None:
    fn = lib.get("two_sizes")
    a = rng.standard_normal((6, 4)).astype("float32")
    with pytest.raises(RunError, match="disagree"):  # B's first dim says n=5, A's n=4
        fn([a, np.zeros((5, 6), "float32")])
    with pytest.raises(RunError, match="elements"):  # the sizes given do not fit the arrays
        fn([a, np.zeros((4, 6), "float32")], sizes=[6, 5])
    with pytest.raises(RunError, match="outside its bounds"):
        fn([np.zeros((101, 2), "float32"), np.zeros((2, 101), "float32")])
    with pytest.raises(RunError, match="no size variable"):
        fn([a, np.zeros((4, 6), "float32")], sizes={"k": 3})
    with pytest.raises(RunError, match="expected 2 size"):
        fn([a, np.zeros((4, 6), "float32")], sizes=[6])
    with pytest.raises(RunError, match="cannot derive size"):
        fn.call_addresses([a.ctypes.data, a.ctypes.data])
    with pytest.raises(RunError, match="cannot derive size"):
        lib.get("elementwise")([a.ctypes.data, a.ctypes.data, a.ctypes.data])
    with pytest.raises(RunError, match="no run-time sizes"):
        static = build_module([tir.PrimFunc("st2", [tir.Buffer("A", (3,), "float32")],
                                            tir.Evaluate(tir.const(0)))], "st2").load()
        static.get("st2")([np.zeros(3, "float32")], sizes=[3])


def test_bound_call_updates_sizes_in_place(lib, rng) -> None:
    """Pack once at the bound, then change only the sizes: each call computes the prefix."""
    fn = lib.get("elementwise")
    a, b = (rng.standard_normal(BOUND).astype("float32") for _ in range(2))
    c = np.full(BOUND, np.nan, "float32")
    call = fn.bind([a, b, c])
    assert list(call.sizes) == [BOUND]
    for n in (5, 0, 17, BOUND):
        c[:] = np.nan
        call([n])
        np.testing.assert_allclose(c[:n], a[:n] * b[:n] + a[:n] - 0.5, rtol=1e-6, atol=1e-5)
        assert np.isnan(c[n:]).all()
    call.sizes[0] = 3
    c[:] = np.nan
    call()
    assert np.isfinite(c[:3]).all() and np.isnan(c[3:]).all()
    with pytest.raises(RunError, match="at least"):
        fn.bind([a, b, c[:10]], sizes=[11])


def test_pack_pointers_with_sizes_and_raw_call(lib, rng) -> None:
    fn = lib.get("scratch_ws")  # it has a workspace: args[2], the sizes pointer args[3]
    n = 300
    x = rng.standard_normal((1, n)).astype("float32")
    y = np.full((1, n), np.nan, "float32")
    ws = np.empty(fn.workspace_bytes, np.uint8)
    packed, sizes = pack_pointers([x, y, ws], sizes=[n])
    assert len(packed) == 4 and sizes.dtype == np.int64 and sizes.flags.writeable
    fn.raw(packed)
    t = x[0] * 2
    np.testing.assert_allclose(y[0], t[::-1] + t, rtol=1e-6, atol=1e-5)
    sizes[0] = 10
    y[:] = np.nan
    fn.raw(packed)
    np.testing.assert_allclose(y[0, :10], t[:10][::-1] + t[:10], rtol=1e-6, atol=1e-5)
    assert np.isnan(y[0, 10:]).all()
    # addresses with sizes; a null workspace slot for a kernel without one
    e = lib.get("elementwise")
    a, b = rng.standard_normal(9).astype("float32"), rng.standard_normal(9).astype("float32")
    c = np.zeros(9, "float32")
    e.call_addresses([a.ctypes.data, b.ctypes.data, c.ctypes.data], sizes=[9])
    np.testing.assert_allclose(c, a * b + a - 0.5, rtol=1e-6, atol=1e-5)
    c[:] = 0
    packed, _ = pack_pointers([a, b, c, None], sizes=[4])
    ctypes_fn = lib.get_raw("elementwise")
    ctypes_fn(packed)
    np.testing.assert_allclose(c[:4], a[:4] * b[:4] + a[:4] - 0.5, rtol=1e-6, atol=1e-5)
    assert (c[4:] == 0).all()


def test_fresh_library_and_sequence(built, rng) -> None:
    lib = load_object(built.object_code, built.function_names, signatures=built.signatures,
                      workspaces=built.workspaces, sizes=built.size_specs)
    e, t = lib.get("elementwise"), lib.get("tiled")
    assert e.is_symbolic and e.size_spec == built.size_specs["elementwise"]
    a, b = rng.standard_normal(20).astype("float32"), rng.standard_normal(20).astype("float32")
    c, d = np.zeros(20, "float32"), np.zeros(20, "float32")
    seq = KernelSequence([e, t], [[a, b, c], [c, d]], sizes=[None, [20]])
    seq()
    want_c = a * b + a - 0.5
    np.testing.assert_allclose(c, want_c, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(d, want_c * 3 + np.arange(20), rtol=1e-5, atol=1e-5)
    seq.size_arrays[0][0] = 6
    seq.size_arrays[1][0] = 6
    c[:], d[:] = 0, 0
    seq()
    assert (c[6:] == 0).all() and (d[6:] == 0).all()
    np.testing.assert_allclose(d[:6], want_c[:6] * 3 + np.arange(6), rtol=1e-5, atol=1e-5)


def test_checks_without_sizes_refuse_a_symbolic_kernel(lib) -> None:
    """Packing a symbolic kernel's buffers without its sizes would make it read them from
    past the pointer array: the check a runtime makes first says so."""
    a = np.zeros(4, "float32")
    with pytest.raises(RunError, match="takes run-time sizes"):
        lib.get("elementwise").check([a, a, a])
    lib.get("elementwise").check([a, a, a], [4])
    with pytest.raises(RunError, match="elements"):
        lib.get("elementwise").check([a, a, a], [5])
