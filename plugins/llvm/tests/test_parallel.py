"""tessera_llvm.parallel: parallel loops on the native thread pool."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from tessera import tir
from tessera.errors import CompileError
from tessera_llvm import parallel
from tessera_llvm.build import build_module, size_spec
from tessera_llvm.codegen import generate_module
from tessera_llvm.schedules.common import SERIAL_GRAIN

F = tir.ForKind
PLUGIN = str(Path(__file__).resolve().parents[1])


@pytest.fixture
def threads():
    """Set the pool's thread count for one test and restore it afterwards."""
    before = parallel.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


def _count_func(n: int, grain: int = 1) -> tir.PrimFunc:
    """``for i in parallel(n): C[i] = C[i] + 1``."""
    C = tir.Buffer("C", [n], "int32")
    i = tir.Var("i")
    body = tir.For(i, 0, n, F.PARALLEL, tir.BufferStore(C, C[i] + 1, [i]),
                   annotations={"parallel_grain": grain})
    return tir.PrimFunc(f"count_{n}_{grain}", [C], body)


@pytest.mark.parametrize("nthreads", [1, 2, 3, 5])
def test_every_index_written_exactly_once(threads, nthreads):
    threads(nthreads)
    for n in (1, 2, 3, 4, 7, 100, 1001):
        for grain in (1, 16):
            lib = build_module([_count_func(n, grain)], "m").load()
            c = np.zeros(n, "int32")
            lib.get(f"count_{n}_{grain}")([c])
            np.testing.assert_array_equal(c, np.ones(n, "int32"), err_msg=f"n={n}")


def test_extent_smaller_than_thread_count_and_repeated_launches(threads):
    threads(8)
    lib = build_module([_count_func(3)], "m").load()
    fn = lib.get("count_3_1")
    c = np.zeros(3, "int32")
    for _ in range(500):
        fn([c])
    np.testing.assert_array_equal(c, [500, 500, 500])


def _gated_count(least: int) -> tir.PrimFunc:
    """``for i in parallel(n): C[i] = C[i] + i``, its grain chosen at run time (a gated loop
    of a symbolic kernel): 1 from ``n >= least`` on, else every iteration in one chunk."""
    n = tir.Var("n", "int64")
    C = tir.Buffer("C", [n], "int64")
    i = tir.Var("i", "int64")
    grain = tir.select(n >= least, tir.const(1, "int64"), tir.const(SERIAL_GRAIN, "int64"))
    body = tir.For(i, 0, n, F.PARALLEL, tir.BufferStore(C, C[i] + i, [i]),
                   annotations={"parallel_grain": grain})
    return tir.PrimFunc(f"gated_{least}", [C], body, size_vars=[n],
                        size_bounds={n: (0, 1 << 20)})


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_a_grain_chosen_at_run_time(threads, nthreads):
    """A grain given as an expression of the sizes is evaluated where the loop starts: every
    index is written once below the threshold (one chunk, run by the caller) and above it
    (chunks of one iteration on the pool)."""
    threads(nthreads)
    func = _gated_count(64)
    built = build_module([func], "gated", size_specs={func.name: size_spec(func)})
    assert "select" in built.source_ir  # the grain picked in the kernel, at run time
    fn = built.load().get(func.name)
    for n in (0, 1, 7, 63, 64, 65, 1000):
        c = np.arange(n, dtype="int64") * 3
        for _ in range(3):
            fn([c])
        np.testing.assert_array_equal(c, np.arange(n, dtype="int64") * 6, err_msg=f"n={n}")


def test_a_grain_reading_an_undefined_variable_is_an_error():
    n, m = tir.Var("n", "int64"), tir.Var("m", "int64")
    C = tir.Buffer("C", [n], "int64")
    i = tir.Var("i", "int64")
    body = tir.For(i, 0, n, F.PARALLEL, tir.BufferStore(C, C[i] + i, [i]),
                   annotations={"parallel_grain": tir.max_(m, tir.const(1, "int64"))})
    func = tir.PrimFunc("stray", [C], body, size_vars=[n])
    with pytest.raises(CompileError, match="parallel grain of loop i reads m"):
        build_module([func], "stray")


def _matvec(rows: int, cols: int, kind: F, dtype: str) -> tir.PrimFunc:
    """``y[i] = sum_k A[i, k] * x[k] + i * 3`` with a local accumulator, outer loop ``kind``."""
    A = tir.Buffer("A", [rows * cols], dtype)
    x = tir.Buffer("x", [cols], dtype)
    y = tir.Buffer("y", [rows], dtype)
    acc = tir.Buffer("acc", [1], dtype, scope="local")
    i, k = tir.Var("i"), tir.Var("k")
    body = tir.For(i, 0, rows, kind, tir.Allocate(acc, tir.seq(
        tir.BufferStore(acc, tir.cast(dtype, i) * tir.const(3, dtype), [0]),
        tir.For(k, 0, cols, F.SERIAL, tir.BufferStore(acc, acc[0] + A[i * cols + k] * x[k],
                                                      [0])),
        tir.BufferStore(y, acc[0], [i]))))
    return tir.PrimFunc(f"matvec_{kind}", [A, x, y], body)


@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("nthreads", [2, 4])
def test_parallel_equals_serial(threads, rng, nthreads, dtype):
    threads(nthreads)
    rows, cols = 67, 45
    lib = build_module([_matvec(rows, cols, F.SERIAL, dtype),
                        _matvec(rows, cols, F.PARALLEL, dtype)], "m").load()
    if dtype == "int32":
        a = rng.integers(-50, 50, rows * cols).astype(dtype)
        x = rng.integers(-50, 50, cols).astype(dtype)
    else:
        a = rng.standard_normal(rows * cols).astype(dtype)
        x = rng.standard_normal(cols).astype(dtype)
    y_serial, y_parallel = np.zeros(rows, dtype), np.zeros(rows, dtype)
    lib.get("matvec_serial")([a, x, y_serial])
    lib.get("matvec_parallel")([a, x, y_parallel])
    ref = a.reshape(rows, cols) @ x + np.arange(rows) * 3
    if dtype == "int32":  # exact: the same values whichever thread computes a row
        np.testing.assert_array_equal(y_parallel, y_serial)
        np.testing.assert_array_equal(y_parallel, ref)
    else:  # FMA contraction may differ between the two loop nests by an ulp
        np.testing.assert_allclose(y_parallel, y_serial, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(y_parallel, ref, rtol=1e-4, atol=1e-4)


def test_captures_outer_loop_vars_lets_and_allocations(threads, rng):
    """A parallel loop inside a serial loop, using the outer loop variable, a let-bound value
    and a buffer allocated outside the parallel loop; a scratch buffer allocated inside it is
    private to each thread."""
    threads(3)
    outer, n = 4, 50
    A = tir.Buffer("A", [outer * n], "float32")
    B = tir.Buffer("B", [outer * n], "float32")
    shared = tir.Buffer("shared", [n], "float32")
    scratch = tir.Buffer("scratch", [4], "float32", scope="local")
    o, i, j, s = tir.Var("o"), tir.Var("i"), tir.Var("j"), tir.Var("s", "float32")
    body = tir.For(o, 0, outer, F.SERIAL, tir.LetStmt(s, tir.cast("float32", o) * 10.0,
        tir.Allocate(shared, tir.seq(
            tir.For(j, 0, n, F.SERIAL, tir.BufferStore(shared, A[o * n + j] + s, [j])),
            tir.For(i, 0, n, F.PARALLEL, tir.Allocate(scratch, tir.seq(
                tir.BufferStore(scratch, shared[i] * 2.0, [tir.const(3)]),
                tir.BufferStore(B, scratch[3] + tir.cast("float32", i), [o * n + i]))))))))
    a, b = rng.standard_normal(outer * n).astype("float32"), np.zeros(outer * n, "float32")
    lib = build_module([tir.PrimFunc("captures", [A, B], body)], "m").load()
    lib.get("captures")([a, b])
    oo, ii = np.divmod(np.arange(outer * n), n)
    np.testing.assert_allclose(b, (a + oo * 10.0) * 2.0 + ii, rtol=1e-6)


def test_nested_parallel_runs_inner_serially(threads):
    threads(4)
    rows, cols = 9, 13
    C = tir.Buffer("C", [rows * cols], "int64")
    i, j = tir.Var("i"), tir.Var("j")
    body = tir.For(i, 0, rows, F.PARALLEL, tir.For(j, 0, cols, F.PARALLEL,
                                                   tir.BufferStore(C, i * 100 + j, [i * cols + j])))
    f = tir.PrimFunc("nested", [C], body)
    text = str(generate_module([f], "m"))
    assert text.count("call void @\"tessera_parallel_for\"") == 1
    c = np.zeros(rows * cols, "int64")
    build_module([f], "m").load().get("nested")([c])
    ii, jj = np.divmod(np.arange(rows * cols), cols)
    np.testing.assert_array_equal(c, ii * 100 + jj)


def test_parallel_loop_with_offset_min_and_vector_body(threads, rng):
    threads(2)
    n, lanes = 16 * 20, 16
    A, B = tir.Buffer("A", [n], "float32"), tir.Buffer("B", [n], "float32")
    i = tir.Var("i")
    ix = tir.Ramp(i * lanes, 1, lanes)
    body = tir.For(i, 3, n // lanes - 6, F.PARALLEL,  # i in [3, n // lanes - 3)
                   tir.BufferStore(B, tir.exp(A[ix]) * 2.0, [ix]))
    a, b = rng.standard_normal(n).astype("float32"), np.zeros(n, "float32")
    build_module([tir.PrimFunc("pvec", [A, B], body)], "m").load().get("pvec")([a, b])
    expected = np.exp(a) * 2.0
    expected[:3 * lanes] = 0
    expected[n - 3 * lanes:] = 0
    np.testing.assert_allclose(b, expected, rtol=2e-6)


def test_concurrent_launches_from_python_threads(threads, rng):
    """Two Python threads calling parallel kernels at once: one gets the pool, the other runs
    its range serially; both results are right."""
    threads(2)
    lib = build_module([_count_func(1000)], "m").load()
    fn = lib.get("count_1000_1")
    arrays = [np.zeros(1000, "int32") for _ in range(4)]

    def work(arr: np.ndarray) -> None:
        for _ in range(200):
            fn([arr])

    workers = [threading.Thread(target=work, args=(a,)) for a in arrays]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for a in arrays:
        np.testing.assert_array_equal(a, np.full(1000, 200, "int32"))


def test_thread_count_api(threads):
    threads(3)
    assert parallel.get_num_threads() == 3
    before = (parallel.get_num_threads(), parallel.thread_count_source())
    with parallel.num_threads(5):
        assert parallel.get_num_threads() == 5
        assert parallel.thread_count_source() == "set_num_threads(5)"
    assert (parallel.get_num_threads(), parallel.thread_count_source()) == before
    with pytest.raises(ValueError):
        parallel.set_num_threads(0)
    before = parallel.get_spin_us() if parallel.spin_pinned() else None
    parallel.set_spin_us(0)  # waiting threads sleep at once: exercises the futex paths
    try:
        lib = build_module([_count_func(64)], "m").load()
        c = np.zeros(64, "int32")
        for _ in range(20):
            lib.get("count_64_1")([c])
        np.testing.assert_array_equal(c, np.full(64, 20, "int32"))
    finally:
        parallel.set_spin_us(before)
    assert parallel.spin_pinned() == (before is not None)
    with pytest.raises(ValueError):
        parallel.set_chunks_per_thread(0)
    assert parallel.measure_launch_overhead(launches=200) > 0


def _run_script(code: str, env_extra: dict[str, str] | None = None) -> str:
    env = dict(os.environ, **(env_extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([PLUGIN, env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


_KERNEL = """
import numpy as np
from tessera import tir
from tessera.errors import CompileError
from tessera_llvm import parallel
from tessera_llvm.build import build_module, size_spec
C = tir.Buffer("C", [257], "int32")
i = tir.Var("i")
f = tir.PrimFunc("k", [C], tir.For(i, 0, 257, tir.ForKind.PARALLEL,
                                   tir.BufferStore(C, C[i] + 1, [i])))
fn = build_module([f], "m").load().get("k")
c = np.zeros(257, "int32")
"""


def test_env_thread_count_and_clean_exit():
    out = _run_script(_KERNEL + """
print(parallel.get_num_threads())
for _ in range(50):
    fn([c])
assert (c == 50).all()
# exit with workers started and spinning: must not hang
""", {"TESSERA_NUM_THREADS": "3"})
    assert out.strip() == "3"


def test_pool_works_in_a_forked_child():
    _run_script(_KERNEL + """
import os
parallel.set_num_threads(3)
fn([c])
pid = os.fork()
if pid == 0:
    c[:] = 0
    for _ in range(10):
        fn([c])
    os._exit(0 if (c == 10).all() else 1)
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 0, status
fn([c])
assert (c == 2).all()
""")


def test_int32_parallel_loop_variable(threads):
    threads(2)
    B = tir.Buffer("B", [20], "int32")
    i = tir.Var("i", "int32")
    body = tir.For(i, tir.const(0, "int32"), tir.const(20, "int32"), F.PARALLEL,
                   tir.BufferStore(B, i * 3, [i]))
    b = np.zeros(20, "int32")
    build_module([tir.PrimFunc("p32", [B], body)], "m").load().get("p32")([b])
    np.testing.assert_array_equal(b, np.arange(20) * 3)


@pytest.mark.slow
def test_plugins_verbose_shows_the_thread_count_and_its_source(capsys):
    from tessera.cli.main import main

    assert main(["plugins", "-v"]) == 0
    out = capsys.readouterr().out
    llvm = out[out.index("\nllvm:"):]
    n = parallel.get_num_threads()
    assert f"host threads: {n} thread" in llvm
    assert f"({parallel.thread_count_source()})" in llvm
    env = dict(os.environ, TESSERA_NUM_THREADS="3")
    result = subprocess.run([sys.executable, "-m", "tessera.cli.main", "plugins", "-v"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "host threads: 3 threads (TESSERA_NUM_THREADS=3)" in result.stdout
    ref = result.stdout[result.stdout.index("\nref:"):].split("\n\n")[0]
    assert "host threads: numpy's BLAS limited to 1 thread while its kernels run" in ref
