"""Shared stages inside a block's thread loops (TVM's cooperative fetching): bound inference
relaxes them over the enclosing ``threadIdx`` loops, and lowering merges their own thread-bound
loops with the enclosing ones."""

from __future__ import annotations

import pytest

from tessera import te
from tessera.tir import stmt as S
from tessera.tir.functor import post_order_visit


def _schedule(fetch_threads: int, scope: str = "shared") -> tuple[te.Schedule, list]:
    a = te.placeholder((32, 12), "float32", name="A")
    r = te.reduce_axis((0, 12), name="r")
    c = te.compute((32,), lambda i: te.sum(a[i, r], axis=r), name="C")
    s = te.create_schedule(c.op)
    a_sh = s.cache_read(a, scope, [c])
    bx, tx = s[c].split(c.op.axis[0], factor=8)
    s[c].bind(bx, te.thread_axis("blockIdx.x"))
    s[c].bind(tx, te.thread_axis("threadIdx.x"))
    ro, _ = s[c].split(s[c].op.reduce_axis[0], factor=4)
    s[a_sh].compute_at(s[c], ro)
    fused = s[a_sh].fuse(*s[a_sh].op.axis)
    _, fx = s[a_sh].split(fused, factor=fetch_threads)
    s[a_sh].bind(fx, te.thread_axis("threadIdx.x"))
    return s, [a, c]


def _loops(func: S.PrimFunc) -> list[S.For]:
    out: list[S.For] = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, S.For) else None)
    return out


def test_shared_region_covers_the_block() -> None:
    s, args = _schedule(8)
    func = te.lower(s, args, "k")
    alloc = []
    post_order_visit(func.body, lambda n: alloc.append(n) if isinstance(n, S.Allocate) else None)
    (shared,) = [a.buffer for a in alloc if a.buffer.scope == "shared"]
    # 8 rows (the block's threads) x 4 reduction steps, not one thread's row
    assert [d.value for d in shared.shape] == [8, 4]
    tags = [f.thread_tag for f in _loops(func) if f.kind == S.ForKind.THREAD_BINDING]
    assert sorted(tags) == ["blockIdx.x", "threadIdx.x"]  # the fetch's loop is merged


def test_local_region_stays_per_thread() -> None:
    s, args = _schedule(1, scope="local")
    func = te.lower(s, args, "k")
    alloc = []
    post_order_visit(func.body, lambda n: alloc.append(n) if isinstance(n, S.Allocate) else None)
    (local,) = [a.buffer for a in alloc if a.buffer.scope == "local"]
    assert [d.value for d in local.shape] == [1, 4]


def test_shorter_fetch_loop_is_guarded() -> None:
    s, args = _schedule(4)  # 4 of the block's 8 threads fetch
    text = repr(te.lower(s, args, "k"))
    assert "if (i_inner < 4):" in text  # the fetch runs on the first 4 thread indices


def test_longer_fetch_loop_is_an_error() -> None:
    s, args = _schedule(16)
    with pytest.raises(ValueError, match="an enclosing loop binds with extent 8"):
        te.lower(s, args, "k")
