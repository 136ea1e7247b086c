"""Kernels with run-time extents in the cuda plugin: the size variables become ``long long``
kernel parameters after the buffers, the grid and block are computed on the host from the sizes
at each call; checked on the generated source, with host emulation against the TIR interpreter,
and through the fake driver (which rejects a launch shape the kernel was not generated for)."""

from __future__ import annotations

import numpy as np
import pytest

from plugins.cuda.tests.conftest import needs_cxx, needs_nvrtc
from tessera import tir
from tessera.errors import CompileError, RunError
from tessera.tir import interpreter
from tessera_cuda.codegen import CudaSource, encode_dim, eval_dim
from tessera_cuda.pipeline import gpu_pipeline

F = tir.ForKind
RNG = np.random.default_rng(11)


def _bind(var: tir.Var, extent: object, tag: str, body: tir.Stmt) -> tir.Stmt:
    return tir.For(var, 0, extent, F.THREAD_BINDING, body, thread_tag=tag)


def two_sizes() -> tir.PrimFunc:
    """``B[i, j] = A[i, j] * 2 + i`` for an ``(m, n)`` A: one block row per i
    (``blockIdx.y``), ``(n + 31) // 32`` blocks of 32 threads along j, guarded."""
    m, n = tir.Var("m", "int64"), tir.Var("n", "int64")
    A, B = tir.Buffer("A", (m, n), "float32"), tir.Buffer("B", (m, n), "float32")
    by, bx, tx = (tir.Var(x, "int64") for x in ("by", "bx", "tx"))
    j = bx * 32 + tx
    store = tir.IfThenElse(j < n, tir.BufferStore(
        B, A[by, j] * 2.0 + tir.cast("float32", by), [by, j]))
    body = _bind(by, m, "blockIdx.y", _bind(bx, (n + 31) // 32, "blockIdx.x",
                                            _bind(tx, 32, "threadIdx.x", store)))
    return tir.PrimFunc("sym2", [A, B], body, size_bounds={m: (0, 100), n: (0, 4096)})


def block_of_n() -> tir.PrimFunc:
    """A block of ``n`` threads (at most 256) per row, ``rows`` blocks: ``C[r, t] = X[r, t] -
    X[r, 0]`` (two size variables; the block shape is one of them)."""
    rows, n = tir.Var("rows", "int64"), tir.Var("n", "int64")
    X, C = tir.Buffer("X", (rows, n), "float32"), tir.Buffer("C", (rows, n), "float32")
    r, t = tir.Var("r", "int64"), tir.Var("t", "int64")
    body = _bind(r, rows, "blockIdx.x", _bind(t, n, "threadIdx.x", tir.BufferStore(
        C, X[r, t] - X[r, 0], [r, t])))
    return tir.PrimFunc("rowdiff", [X, C], body, size_bounds={n: (1, 256)})


def one_size() -> tir.PrimFunc:
    """``Y[i] = exp(X[i] * 0.5)`` for i < n, ``(n + 63) // 64`` blocks of 64 threads."""
    n = tir.Var("n", "int64")
    X, Y = tir.Buffer("X", (n,), "float32"), tir.Buffer("Y", (n,), "float32")
    bx, tx = tir.Var("bx", "int64"), tir.Var("tx", "int64")
    i = bx * 64 + tx
    body = _bind(bx, (n + 63) // 64, "blockIdx.x", _bind(tx, 64, "threadIdx.x", tir.IfThenElse(
        i < n, tir.BufferStore(Y, tir.exp(X[i] * 0.5), [i]))))
    return tir.PrimFunc("sym1", [X, Y], body, size_bounds={n: (0, 1 << 20)})


def _source(*funcs: tir.PrimFunc) -> tuple[CudaSource, list]:
    src = CudaSource()
    groups = [src.add(gpu_pipeline().run(f)) for f in funcs]
    return src, groups


def test_source_and_launch_dims_for_two_sizes() -> None:
    src, (group,) = _source(two_sizes())
    (k,) = group.kernels
    assert k.is_symbolic and [v.name for v in k.size_vars] == ["m", "n"]
    head = k.text.splitlines()[0]
    assert head == ('extern "C" __global__ void __launch_bounds__(32) sym2(float* __restrict__ '
                    'A, float* __restrict__ B, const long long m, const long long n) {')
    assert "< n)" in k.text  # the guard reads the size parameter
    assert "const int bx" in k.text  # the bounds keep the index arithmetic 32-bit
    # verified at the bounds: the largest launch
    assert k.launch.grid == (128, 100, 1) and k.launch.block == (32, 1, 1)
    assert k.grid_dims == [["//", ["+", ["var", 1], 31], 32], ["var", 0], 1]
    for (m, n), grid in {(3, 70): (3, 3, 1), (5, 32): (1, 5, 1), (0, 10): (1, 0, 1),
                         (7, 0): (0, 7, 1), (100, 4096): (128, 100, 1),
                         (2, 33): (2, 2, 1)}.items():
        assert k.launch_dims([m, n]) == (grid, (32, 1, 1)), (m, n)
        assert k.launch_dims({"n": n, "m": m}) == (grid, (32, 1, 1))
    with pytest.raises(RunError):
        k.launch_dims([3])
    with pytest.raises(RunError):
        k.launch_dims({"m": 3})


def test_symbolic_block_shape() -> None:
    _, (group,) = _source(block_of_n())
    (k,) = group.kernels
    assert "__launch_bounds__(256)" in k.text
    assert "const long long rows, const long long n)" in k.text
    assert k.launch_dims([9, 17]) == ((9, 1, 1), (17, 1, 1))
    # a block axis with no upper bound cannot be compiled
    f = block_of_n()
    unbounded = tir.PrimFunc(f.name, f.params, f.body)
    with pytest.raises(CompileError, match="no upper bound"):
        _source(unbounded)


def test_a_tag_has_one_extent() -> None:
    n = tir.Var("n", "int64")
    X = tir.Buffer("X", (n,), "float32")
    b1, b2, t1, t2 = (tir.Var(x, "int64") for x in ("b1", "b2", "t1", "t2"))
    body = _bind(b1, n, "blockIdx.x", tir.seq(
        _bind(t1, 4, "threadIdx.x", tir.BufferStore(X, X[b1] + 1.0, [b1])),
        _bind(b2, n + 1, "blockIdx.x", _bind(t2, 4, "threadIdx.x", tir.BufferStore(
            X, X[b2] + 1.0, [b2])))))
    with pytest.raises(CompileError, match="one launch shape"):
        _source(tir.PrimFunc("two", [X], body))


def test_static_kernels_are_unchanged() -> None:
    n = 100
    X, Y = tir.Buffer("X", (n,), "float32"), tir.Buffer("Y", (n,), "float32")
    bx, tx = tir.Var("bx", "int64"), tir.Var("tx", "int64")
    body = _bind(bx, 4, "blockIdx.x", _bind(tx, 32, "threadIdx.x", tir.IfThenElse(
        bx * 32 + tx < n, tir.BufferStore(Y, X[bx * 32 + tx] + 1.0, [bx * 32 + tx]))))
    _, (group,) = _source(tir.PrimFunc("st", [X, Y], body))
    (k,) = group.kernels
    assert not k.is_symbolic and k.grid_dims == [] and "long long" not in k.text
    assert k.launch_dims() == ((4, 1, 1), (32, 1, 1))


def test_dims_encode_and_evaluate() -> None:
    m, n = tir.Var("m", "int64"), tir.Var("n", "int64")
    e = tir.max_((n + 7) // 8 * m, n % 5 - 1)
    d = encode_dim(e, [m, n])
    for mv, nv in [(0, 0), (3, 17), (9, 2)]:
        assert eval_dim(d, [mv, nv]) == max((nv + 7) // 8 * mv, nv % 5 - 1)
    with pytest.raises(CompileError):
        encode_dim(n + tir.Var("i", "int64"), [m, n])


@needs_nvrtc
def test_nvrtc_compiles_symbolic_kernels() -> None:
    from tessera_cuda.nvrtc import compile_cuda

    src, _ = _source(two_sizes(), block_of_n(), one_size())
    assert compile_cuda(src.text, "sm_90").cubin


def _expected(func: tir.PrimFunc, arrays: list[np.ndarray]) -> np.ndarray:
    out = [a.copy() for a in arrays]
    interpreter.run(func, out)
    return out[-1]


@needs_cxx
@pytest.mark.parametrize("m, n", [(0, 5), (4, 0), (1, 1), (3, 31), (3, 32), (5, 33), (2, 100)])
def test_host_emulation_matches_the_interpreter(m: int, n: int) -> None:
    from tessera_cuda.host_exec import HostModule

    src, (g2, gb) = _source(two_sizes(), block_of_n())
    host = HostModule(src)
    a = RNG.standard_normal((m, n)).astype(np.float32)
    b = np.full((m, n), np.nan, np.float32)
    host.launch(g2.kernels[0], [a, b], sizes=[m, n])
    np.testing.assert_allclose(b, _expected(two_sizes(), [a, b]), rtol=1e-6)
    if n:  # a block of n threads (n >= 1)
        c = np.full((m, n), np.nan, np.float32)
        host.run_group(gb, {"X": a, "C": c}, sizes={"rows": m, "n": n})
        np.testing.assert_allclose(c, _expected(block_of_n(), [a, c]), rtol=1e-6)


@needs_cxx
def test_fake_driver_launches_with_host_computed_shapes(fake_gpu) -> None:  # noqa: ANN001
    """Through the driver: the table's encoded launches, sizes derived from the buffers'
    shapes (one size) or given (two sizes, flattened buffers), the CUDA graph binder; the fake
    checks every launch's grid and block against the kernel's own for the sizes it was
    passed."""
    from tessera_cuda.backend import _table
    from tessera_cuda.driver import CUDADevice, LoadedModule, launch
    from tessera_cuda.graphs import make_graph_binder, make_group_kernel
    from tessera_cuda.lowering import LoweredGroup, LoweredRegion

    src, (g1, g2) = _source(one_size(), two_sizes())
    lowered = LoweredRegion(None, [LoweredGroup("sym1", g1, ["x"], ["y"], "Exp"),  # type: ignore[arg-type]
                                   LoweredGroup("sym2", g2, ["a"], ["b"], "Mul")], {}, src)
    table = _table(lowered)
    assert table[0]["sizes"] == {"names": ["n"], "shapes": [[["var", 0]], [["var", 0]]]}
    assert table[0]["launches"][0]["grid"] == [["//", ["+", ["var", 0], 63], 64], 1, 1]
    assert table[1]["sizes"]["names"] == ["m", "n"]
    cubin = b"symbolic-launch-test"
    fake_gpu.programs[cubin] = src
    dev = CUDADevice.get(0)
    module = LoadedModule.load(dev, cubin, ["sym1", "sym2"])
    (k1, l1), (k2, l2) = (make_group_kernel(module, e) for e in table)

    def run1(n: int) -> None:
        x = RNG.standard_normal(n).astype(np.float32)
        ins, outs = [dev.from_host(x)], [dev.from_host(np.full(n, np.nan, np.float32))]
        k1.fn(ins, outs)  # n from the buffers' shapes
        y = np.empty(n, np.float32)
        dev.copy_to_host(outs[0], y)
        dev.synchronize()
        np.testing.assert_allclose(y, np.exp(x * np.float32(0.5)), rtol=1e-5)

    for n in (1, 63, 64, 65, 200):
        run1(n)
        assert fake_gpu.launch_shapes[-1] == ("sym1", (-(-n // 64), 1, 1), (64, 1, 1), (n,))
    before = len(fake_gpu.launch_shapes)
    run1(0)  # an empty grid: nothing launched
    assert len(fake_gpu.launch_shapes) == before

    for m, n in [(3, 70), (5, 32)]:
        a = RNG.standard_normal((m, n)).astype(np.float32)
        ins, outs = [dev.from_host(a)], [dev.from_host(np.full((m, n), np.nan, np.float32))]
        with pytest.raises(RunError, match="cannot derive"):  # m * n elements: not unique
            k2.fn(ins, outs)
        k2.fn(ins, outs, sizes=[m, n])
        b = np.empty((m, n), np.float32)
        dev.copy_to_host(outs[0], b)
        dev.synchronize()
        np.testing.assert_allclose(b, a * 2 + np.arange(m, dtype=np.float32)[:, None],
                                   rtol=1e-6)
        assert fake_gpu.launch_shapes[-1] == ("sym2", (-(-n // 32), m, 1), (32, 1, 1), (m, n))

    # the graph binder, with sizes from the buffers' shapes
    x = RNG.standard_normal(100).astype(np.float32)
    ins, outs = [dev.from_host(x)], [dev.from_host(np.full(100, np.nan, np.float32))]
    run = make_graph_binder(dev, [l1], "sym")([(ins, outs)])
    run()
    y = np.empty(100, np.float32)
    dev.copy_to_host(outs[0], y)
    dev.synchronize()
    np.testing.assert_allclose(y, np.exp(x * np.float32(0.5)), rtol=1e-5)
    assert fake_gpu.launch_shapes[-1] == ("sym1", (2, 1, 1), (64, 1, 1), (100,))

    # a launch shape that does not match the sizes passed is refused by the driver
    ((function, _grid, block, _p, name), args), = l1.plan(ins, outs)
    with pytest.raises(RunError):
        launch(dev, function, (3, 1, 1), block, args, name)
    ((function, grid, block, _p, name), _args), = l1.plan(ins, outs, sizes=[60])
    assert grid == (1, 1, 1)
