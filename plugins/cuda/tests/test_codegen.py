"""The CUDA code generator on hand-scheduled TE: shared-memory tiles fetched cooperatively,
barriers (a missing one must give a wrong result on the host too), the kernel text, NVRTC
errors."""

from __future__ import annotations

import numpy as np
import pytest

from plugins.cuda.tests.conftest import needs_cxx, needs_nvrtc
from tessera import te
from tessera.errors import CompileError
from tessera.tir import stmt as S
from tessera.tir.functor import post_order_visit
from tessera_cuda.codegen import CudaSource
from tessera_cuda.host_exec import HostModule, host_compiler
from tessera_cuda.nvrtc import compile_cuda
from tessera_cuda.pipeline import gpu_pipeline

RNG = np.random.default_rng(7)


def tiled_matmul(m: int, n: int, k: int, tile: int = 8, step: int = 4) -> te.Schedule:
    """C = A @ B with ``tile x tile`` threads per block, A and B staged in shared memory in
    steps of ``step`` along k, fetched by all of the block's threads."""
    a = te.placeholder((m, k), "float32", name="A")
    b = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    s = te.create_schedule(c.op)
    a_sh = s.cache_read(a, "shared", [c])
    b_sh = s.cache_read(b, "shared", [c])
    c_loc = s.cache_write(c, "local")
    i, j = s[c].op.axis
    bi, ti = s[c].split(i, factor=tile)
    bj, tj = s[c].split(j, factor=tile)
    s[c].reorder(bi, bj, ti, tj)
    s[c].bind(bi, te.thread_axis("blockIdx.y"))
    s[c].bind(bj, te.thread_axis("blockIdx.x"))
    s[c].bind(ti, te.thread_axis("threadIdx.y"))
    s[c].bind(tj, te.thread_axis("threadIdx.x"))
    s[c_loc].compute_at(s[c], tj)
    ko, _ = s[c_loc].split(s[c_loc].op.reduce_axis[0], factor=step)
    for sh in (a_sh, b_sh):
        s[sh].compute_at(s[c_loc], ko)
        fused = s[sh].fuse(*s[sh].op.axis)
        rest, fx = s[sh].split(fused, factor=tile)
        _, fy = s[sh].split(rest, factor=tile)
        s[sh].bind(fx, te.thread_axis("threadIdx.x"))
        s[sh].bind(fy, te.thread_axis("threadIdx.y"))
    return s, [a, b, c]


def _build(sync: bool = True, m: int = 24, n: int = 40, k: int = 20) -> tuple:
    s, args = tiled_matmul(m, n, k)
    func = te.lower(s, args, "mm")
    pipeline = gpu_pipeline() if sync else gpu_pipeline().without("thread_sync")
    src = CudaSource()
    group = src.add(pipeline.run(func))
    return src, group


def _barriers(func: S.PrimFunc) -> int:
    count = 0

    def f(n: object) -> None:
        nonlocal count
        count += isinstance(n, S.Barrier)

    post_order_visit(func.body, f)
    return count


def test_cooperative_fetch_kernel_text() -> None:
    src, group = _build()
    (kern,) = group.kernels
    assert kern.launch.block == (8, 8, 1) and kern.launch.grid == (5, 3, 1)
    text = kern.text
    assert "__launch_bounds__(64)" in text
    assert "__shared__ float A_shared[32];" in text  # 8 rows x 4 steps, for the whole block
    assert "__shared__ float B_shared[32];" in text
    assert "float C_local[1];" in text
    # one barrier after both tiles are fetched, one before the next step overwrites them
    assert text.count("__syncthreads();") == 2
    assert "threadIdx.x" in text and "blockIdx.y" in text


@needs_cxx
@pytest.mark.parametrize("shape", [(24, 40, 20), (17, 9, 13)])
def test_shared_memory_matmul_runs_on_host(shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    src, group = _build(True, m, n, k)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    HostModule(src).run_group(group, {"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@needs_cxx
def test_missing_barrier_gives_a_wrong_result() -> None:
    """Without thread_sync the block's threads overwrite the shared tiles while others still
    read them: the host emulation, like a GPU, computes garbage."""
    src, group = _build(sync=False)
    assert _barriers(group.func) == 0
    a = RNG.standard_normal((24, 20)).astype(np.float32)
    b = RNG.standard_normal((20, 40)).astype(np.float32)
    wrong = 0
    for _ in range(3):  # a race: make its effect certain
        c = np.zeros((24, 40), np.float32)
        HostModule(src).run_group(group, {"A": a, "B": b, "C": c})
        wrong += not np.allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert wrong > 0


def test_names_that_are_cxx_words_are_renamed() -> None:
    x = te.placeholder((64,), "bool", name="and")
    y = te.compute((64,), lambda i: x[i], name="or")
    s = te.create_schedule(y.op)
    bx, tx = s[y].split(y.op.axis[0], factor=32)
    s[y].bind(bx, te.thread_axis("blockIdx.x"))
    s[y].bind(tx, te.thread_axis("threadIdx.x"))
    src = CudaSource()
    src.add(gpu_pipeline().run(te.lower(s, [x, y], "k")))
    assert "bool* __restrict__ v_and" in src.text and "v_or[" in src.text


def _unary(fn, dtype: str = "float32", name: str = "k"):  # noqa: ANN001, ANN202
    x = te.placeholder((64,), dtype, name="x")
    y = te.compute((64,), lambda i: fn(x[i]), name="y")
    s = te.create_schedule(y.op)
    bx, tx = s[y].split(y.op.axis[0], factor=64)
    s[y].bind(bx, te.thread_axis("blockIdx.x"))
    s[y].bind(tx, te.thread_axis("threadIdx.x"))
    return gpu_pipeline().run(te.lower(s, [x, y], name))


def test_fast_math_is_an_intrinsic_rule() -> None:
    from tessera.tir import expr as E

    func = _unary(lambda v: E.exp(v) / (v + 1.0))
    precise, fast = CudaSource(), CudaSource(fast_math=True)
    precise.add(func)
    fast.add(func)
    assert "expf(" in precise.text and "__expf(" not in precise.kernels[0].text
    assert "__expf(" in fast.kernels[0].text and "__fdividef(" in fast.kernels[0].text


def test_float16_is_refused_with_the_buffer_named() -> None:
    func = _unary(lambda v: v, "float16")
    with pytest.raises(CompileError, match="buffer x: dtype float16 is not supported"):
        CudaSource().add(func)


@needs_nvrtc
def test_nvrtc_reports_ptxas_errors() -> None:
    """Too much shared memory is a ptxas error, caught at compile time on a machine without
    a GPU."""
    source = ('extern "C" __global__ void big(float* out) {\n'
              "  __shared__ float tile[65536];\n"
              "  tile[threadIdx.x] = 1.0f; __syncthreads(); out[threadIdx.x] = tile[0];\n}\n")
    with pytest.raises(CompileError, match="NVRTC could not compile.*sm_90"):
        compile_cuda(source, "sm_90")
    with pytest.raises(CompileError, match="-arch must name a real architecture"):
        compile_cuda(source, "compute_90")


@needs_nvrtc
def test_nvrtc_builds_cubin_and_ptx_for_the_architecture() -> None:
    src, _ = _build()
    result = compile_cuda(src.text, "sm_80", want_ptx=True)
    assert result.cubin[:4] == b"\x7fELF"
    assert ".target sm_80" in result.ptx and "bar.sync" in result.ptx


def _vector_kernel(dtype: str, offset: int, lanes: int = 4) -> tuple:
    """y[i] = x[i + offset] * 2 + x[0] over 64 elements, ``lanes`` per thread (vectorized)."""
    x = te.placeholder((64 + offset,), dtype, name="x")
    from tessera.tir import expr as E

    y = te.compute((64,), lambda i: x[i + offset] * E.convert(2, dtype) + x[0], name="y")
    s = te.create_schedule(y.op)
    outer, v = s[y].split(y.op.axis[0], factor=lanes)
    bx, tx = s[y].split(outer, factor=8)
    s[y].bind(bx, te.thread_axis("blockIdx.x"))
    s[y].bind(tx, te.thread_axis("threadIdx.x"))
    s[y].vectorize(v)
    src = CudaSource()
    group = src.add(gpu_pipeline().run(te.lower(s, [x, y], "vec")))
    return src, group


@pytest.mark.parametrize("dtype,offset,lanes,load,store", [
    ("float32", 0, 4, "float4", "float4"), ("int32", 0, 2, "int2", "int2"),
    ("float32", 1, 4, None, "float4"), ("float64", 0, 4, None, None)])
def test_vector_loads_and_stores(dtype: str, offset: int, lanes: int, load: str | None,
                                 store: str | None) -> None:
    """Contiguous accesses whose start is a multiple of the lanes become one vector access
    of a 4-byte type; others (a load at an odd offset, 8-byte elements) go lane by lane.
    Both compute the same values, on the host and through NVRTC."""
    src, group = _vector_kernel(dtype, offset, lanes)
    text = group.kernels[0].text
    assert (f"*reinterpret_cast<const {load}*>" in text) if load else "const float" not in text
    assert (f"= make_{store}(" in text) if store else "reinterpret_cast" not in text
    assert compile_cuda(src.text, "sm_90").cubin
    if host_compiler() is None:  # the text and cubin were still checked
        return
    x = (RNG.standard_normal(64 + offset) * 10).astype(dtype)
    y = np.zeros(64, dtype)
    HostModule(src).run_group(group, {"x": x, "y": y})
    np.testing.assert_array_equal(y, x[offset:] * 2 + x[0])


def _index_kernel(n: int, index, factor: int = 256, x_size: int | None = None,  # noqa: ANN001
                  reduce: int = 0) -> tuple:
    """y[i] = x[index(i)] over ``n`` elements (plus x[index(r)] summed over a serial ``r`` of
    extent ``reduce``), ``factor`` threads per block."""
    x = te.placeholder((x_size or n,), "float32", name="x")
    if reduce:
        r = te.reduce_axis((0, reduce), name="r")
        y = te.compute((n,), lambda i: te.sum(x[index(i)] + x[index(r)], axis=r), name="y")
    else:
        y = te.compute((n,), lambda i: x[index(i)], name="y")
    s = te.create_schedule(y.op)
    bx, tx = s[y].split(y.op.axis[0], factor=factor)
    s[y].bind(bx, te.thread_axis("blockIdx.x"))
    s[y].bind(tx, te.thread_axis("threadIdx.x"))
    src = CudaSource()
    group = src.add(gpu_pipeline().run(te.lower(s, [x, y], "idx")))
    return src, group


@pytest.mark.parametrize("n,index,factor,reduce", [
    (2**31 - 1, lambda i: i, 256, 0),  # grid x block = 2^31 exactly: the padded thread index
    (2**31 - 100, lambda i: i, 1000, 0),  # the padded index passes 2^31 before the guard
    (2**15, lambda i: (i * 100000) % 97, 256, 0),  # an index expression passes 2^31
    (64, lambda i: (i * 40000) % 97, 64, 2**16),  # a serial loop's var times a stride
], ids=["launch-2^31", "padded-index", "index-expression", "serial-loop"])
def test_index_type_is_64_bit_when_an_index_passes_2_31(n: int, index, factor: int,  # noqa: ANN001
                                                         reduce: int) -> None:
    """Every buffer has fewer than 2^31 elements, but the launch (grid x block) or an index
    expression reaches 2^31: the index arithmetic is ``long long``."""
    _, group = _index_kernel(n, index, factor, reduce=reduce)
    (kern,) = group.kernels
    assert all(b.shape[0].value < 2**31 for b in kern.params)
    text = kern.text
    assert "const long long" in text and "(long long)blockIdx.x" in text
    assert "const int " not in text and "(int)" not in text


def test_index_type_stays_32_bit_for_small_kernels() -> None:
    _, group = _index_kernel(1000, lambda i: i)
    text = group.kernels[0].text
    assert "const int i_outer = (int)blockIdx.x;" in text and "long long" not in text
    # a large tensor whose indices stay below 2^31 (grid x block = 2^31 - 256)
    _, group = _index_kernel(2**31 - 256, lambda i: i)
    assert "long long" not in group.kernels[0].text
    # float coordinates cast back to indices (a resize) are bounded too
    from tessera.tir import expr as E

    def coord(i):  # noqa: ANN001, ANN202
        return E.Min(E.Cast("int64", E.Call("floor", [E.Cast("float32", i) * 0.5], "float32")),
                     E.convert(499))

    _, group = _index_kernel(1000, coord)
    text = group.kernels[0].text
    assert "ts_f2i<long long, float>" in text  # the cast itself is to int64
    assert "const int i_outer = (int)blockIdx.x;" in text and "const long long" not in text
    # shared-memory tiles, a serial loop over k
    _, mm = _build()
    assert "for (int " in mm.kernels[0].text and "long long" not in mm.kernels[0].text


def test_index_type_is_64_bit_for_a_buffer_of_2_31_elements() -> None:
    """The launch and the index expressions are small, but a buffer has 2^31 elements."""
    _, group = _index_kernel(64, lambda i: i, 64, x_size=2**31)
    text = group.kernels[0].text
    assert "const long long i_outer = (long long)blockIdx.x;" in text
    assert "const int " not in text


@needs_cxx
def test_index_expression_past_2_31_computes_on_host() -> None:
    """(i * 100000) % 97 with i up to 2^15 passes 2^31: computed in 32 bits it wraps around
    and reads the wrong elements."""
    src, group = _index_kernel(2**15, lambda i: (i * 100000) % 97)
    x = RNG.standard_normal(2**15).astype(np.float32)
    y = np.zeros(2**15, np.float32)
    HostModule(src).run_group(group, {"x": x, "y": y})
    np.testing.assert_array_equal(y, x[(np.arange(2**15, dtype=np.int64) * 100000) % 97])
