"""GPU loop IR: barriers, the GPU verifier (launch shape and device limits) and backend-chosen
lowering pipelines."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import te, tir
from tessera.errors import CompileError
from tessera.tir.gpu_verifier import GPULimits, LaunchConfig, verify_gpu, verify_gpu_pass
from tessera.tir.interpreter import run
from tessera.tir.transform import Pipeline, default_pipeline, lower_pipeline, thread_sync
from tessera.tir.verifier import verify

F = tir.ForKind
A = tir.decl_buffer((256,), "float32", "A")
B = tir.decl_buffer((256,), "float32", "B")
BX, TX, TY, K = tir.Var("bx"), tir.Var("tx"), tir.Var("ty"), tir.Var("k")


def _kernel(body: tir.Stmt) -> tir.PrimFunc:
    return tir.PrimFunc("kern", [A, B], body)


def _bound(body: tir.Stmt, blocks: int = 4, threads: int = 64) -> tir.Stmt:
    return tir.For(BX, 0, blocks, F.THREAD_BINDING, tir.For(
        TX, 0, threads, F.THREAD_BINDING, body, thread_tag="threadIdx.x"),
        thread_tag="blockIdx.x")


def _staged(barrier_at: str = "body") -> tir.PrimFunc:
    """Each block stages 64 elements in shared memory, then each thread reads its neighbour's
    (a barrier between the two phases)."""
    S = tir.decl_buffer((64,), "float32", "S", scope="shared")
    i = BX * 64 + TX
    write = tir.BufferStore(S, A[i] * 2.0, [TX])
    read = tir.BufferStore(B, S[(TX + 1) % 64], [i])
    barrier: tir.Stmt | None = tir.Barrier()
    if barrier_at == "none":
        barrier = None
    elif barrier_at == "divergent":
        barrier = tir.IfThenElse(TX < 32, tir.Barrier())
    elif barrier_at == "outside":
        return _kernel(tir.Allocate(S, tir.seq(tir.Barrier(), _bound(tir.seq(write, read)))))
    return _kernel(tir.Allocate(S, _bound(tir.seq(write, barrier, read))))


def test_launch_shape_of_a_bound_kernel() -> None:
    f = _staged()
    verify(f)  # the generic verifier accepts barriers and thread bindings
    launch = verify_gpu(f)
    assert launch == LaunchConfig((4, 1, 1), (64, 1, 1), 64 * 4, 0)
    assert launch.threads_per_block == 64
    assert "barrier('shared')" in repr(f)


def test_te_schedule_bound_to_threads_verifies() -> None:
    X = te.placeholder((1000,), name="X")
    Y = te.compute((1000,), lambda i: X[i] * 3.0, name="Y")
    s = te.create_schedule(Y)
    bx, tx = s[Y].split(Y.op.axis[0], factor=128)
    s[Y].bind(bx, te.thread_axis("blockIdx.x"))
    s[Y].bind(tx, te.thread_axis("threadIdx.x"))
    f = te.lower(s, [X, Y])
    assert verify_gpu(f).grid == (8, 1, 1) and verify_gpu(f).block == (128, 1, 1)
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    y = np.zeros(1000, np.float32)
    run(f, [x, y])  # the interpreter runs bound loops one thread after another
    np.testing.assert_allclose(y, x * 3)


@pytest.mark.parametrize("make, message", [
    (lambda: _staged("divergent"), "barrier under the condition .* deadlock"),
    (lambda: _staged("outside"), "barrier outside the threadIdx-bound loops"),
    (lambda: _kernel(_bound(tir.BufferStore(B, A[TX], [TX]), threads=2048)),
     "threadIdx.x extent 2048 exceeds the device's 1024"),
    (lambda: _kernel(tir.For(TY, 0, 64, F.THREAD_BINDING, _bound(
        tir.BufferStore(B, A[TX], [TX])), thread_tag="threadIdx.y")),
     r"4096 threads per block \(64 x 64 x 1\) exceed the device's 1024"),
    (lambda: _kernel(tir.seq(_bound(tir.BufferStore(B, A[TX], [TX])),
                             _bound(tir.BufferStore(B, A[TX], [TX]), threads=32))),
     "threadIdx.x has extent 32 .* but 64 elsewhere"),
    (lambda: _kernel(_bound(tir.For(K, 0, 4, F.THREAD_BINDING, tir.BufferStore(B, A[K], [K]),
                                    thread_tag="threadIdx.x"))),
     "bound to threadIdx.x inside a loop already bound to it"),
    (lambda: _kernel(tir.For(TX, 0, 64, F.THREAD_BINDING, tir.BufferStore(B, A[TX], [TX]),
                             thread_tag="warp.x")), "bound to 'warp.x'"),
    (lambda: _kernel(tir.For(K, 0, 4, F.SERIAL, tir.BufferStore(B, A[K], [K]))),
     "no loop is bound to a GPU thread axis"),
    (lambda: _kernel(tir.Allocate(tir.decl_buffer((16384,), "float32", "S", scope="shared"),
                                  _bound(tir.BufferStore(B, A[TX], [TX])))),
     "shared memory 65536 bytes .* exceeds the block's 49152"),
    (lambda: _kernel(_bound(tir.Allocate(tir.decl_buffer((256,), "float32", "R", scope="local"),
                                         tir.BufferStore(B, A[TX], [TX])))),
     "local .* 1024 bytes per thread .* register budget of 512"),
    (lambda: _kernel(_bound(tir.Allocate(tir.decl_buffer((4,), "float32", "G"),
                                         tir.BufferStore(B, A[TX], [TX])))),
     "allocated in 'global' memory inside a kernel"),
    (lambda: _kernel(_bound(tir.For(K, 0, TX, F.SERIAL, tir.Barrier()))),
     "barrier under the bounds of loop k"),
])
def test_gpu_verifier_rejects(make, message: str) -> None:
    with pytest.raises(CompileError, match=message):
        verify_gpu(make())


def test_limits_are_the_devices() -> None:
    f = _staged()
    small = GPULimits(max_threads_per_block=32, max_block=(32, 32, 32))
    with pytest.raises(CompileError, match="threadIdx.x extent 64 exceeds the device's 32"):
        verify_gpu(f, small)
    with pytest.raises(CompileError, match="shared memory 256 bytes"):
        verify_gpu(f, GPULimits(max_shared_bytes=128))


def test_interpreter_refuses_a_barrier_clearly() -> None:
    with pytest.raises(NotImplementedError, match="cannot honour a barrier"):
        run(_staged(), [np.ones(256, np.float32), np.zeros(256, np.float32)])
    with pytest.raises(ValueError, match="barrier scope"):
        tir.Barrier("local")


def test_pipelines_are_chosen_by_the_backend() -> None:
    default = default_pipeline()
    assert default.names == ["name_size_quotients", "simplify", "remove_redundant_checks",
                             "flatten_buffers", "name_size_quotients_flat", "vectorize",
                             "hoist_sizes", "unroll", "simplify_again", "storage_rewrite",
                             "verify"]
    assert "devectorize" in default_pipeline({"vectorize": False}).names
    seen: list[str] = []

    def spy(func: tir.PrimFunc) -> tir.PrimFunc:
        seen.append(func.name)
        return func

    gpu = (default.without("vectorize", "storage_rewrite")
           .insert_after("flatten_buffers", "spy", spy)
           .append("verify_gpu", verify_gpu_pass()))
    assert gpu.names == ["name_size_quotients", "simplify", "remove_redundant_checks",
                         "flatten_buffers", "spy", "name_size_quotients_flat", "hoist_sizes",
                         "unroll", "simplify_again", "verify", "verify_gpu"]
    lowered = lower_pipeline(_staged(), pipeline=gpu)
    assert seen == ["kern"] and lowered.attrs["launch"].block == (64, 1, 1)
    # the shared buffer keeps its scope through flattening
    assert "'shared'" in repr(lowered)
    with pytest.raises(KeyError, match="no pass 'nope'"):
        default.without("nope")
    with pytest.raises(ValueError, match="unique"):
        default.append("verify", spy)
    with pytest.raises(ValueError, match="not both"):
        lower_pipeline(_staged(), {"vectorize": False}, pipeline=gpu)
    assert isinstance(gpu, Pipeline)


def _barriers(f: tir.PrimFunc) -> int:
    return repr(f).count("barrier(")


def test_thread_sync_places_barriers_between_phases() -> None:
    f = _staged("none")
    assert _barriers(f) == 0
    synced = thread_sync(f)
    text = repr(synced)
    assert _barriers(synced) == 1
    # the barrier sits between the shared write and the neighbour's read
    assert text.index("S[tx] =") < text.index("barrier(") < text.index("S[((tx + 1)")
    verify_gpu(synced)
    assert thread_sync(synced).body is synced.body  # already synchronized: unchanged


def test_thread_sync_guards_loop_carried_reuse() -> None:
    """A tile loop that refills shared memory each iteration: a barrier after the fill (read
    after write) and one at the end of the body (the next fill overwrites what is read)."""
    S = tir.decl_buffer((64,), "float32", "S", scope="shared")
    i = BX * 64 + TX
    body = tir.For(K, 0, 4, F.SERIAL, tir.seq(
        tir.BufferStore(S, A[(i + K * 64) % 256], [TX]),
        tir.BufferStore(B, B[i] + S[63 - TX], [i])))
    f = thread_sync(_kernel(tir.Allocate(S, _bound(body))))
    assert _barriers(f) == 2
    verify_gpu(f)
    # private per-thread buffers need none
    L = tir.decl_buffer((4,), "float32", "L", scope="local")
    local = _kernel(_bound(tir.Allocate(L, tir.seq(tir.BufferStore(L, A[TX], [0]),
                                                     tir.BufferStore(B, L[0], [TX])))))
    assert _barriers(thread_sync(local)) == 0
