"""Cross-thread reductions (TVM's allreduce): a reduce loop bound to ``threadIdx.x`` lowers to
per-thread partial results in a register, a shared buffer, folds in halves and a store by
thread 0; schedules the lowering cannot honour are refused with the stage named."""

from __future__ import annotations

import pytest

from tessera import te
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.functor import post_order_visit


def _reduction(rows: int, k: int, threads: int, combiner: str = "sum") -> tuple:
    a = te.placeholder((rows, k), "float32", name="A")
    r = te.reduce_axis((0, k), name="r")
    fn = {"sum": te.sum, "max": te.max, "min": te.min}[combiner]
    c = te.compute((rows,), lambda i: fn(a[i, r], axis=r), name="C")
    s = te.create_schedule(c.op)
    _, ki = s[c].split(c.op.reduce_axis[0], factor=threads)
    s[c].bind(c.op.axis[0], te.thread_axis("blockIdx.x"))
    s[c].bind(ki, te.thread_axis("threadIdx.x"))
    return s, [a, c]


def _int(x: object) -> int:
    return int(x.value) if isinstance(x, E.IntImm) else int(x)


def _nodes(func: S.PrimFunc, kind: type) -> list:
    out: list = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, kind) else None)
    return out


@pytest.mark.parametrize("threads,folds", [(64, 6), (77, 7), (1, 0)])
def test_lowered_structure(threads: int, folds: int) -> None:
    s, args = _reduction(5, 200, threads)
    func = te.lower(s, args, "k")
    allocs = {a.buffer.scope: a.buffer for a in _nodes(func, S.Allocate)}
    assert _int(allocs["shared"].shape[0]) == threads and _int(allocs["local"].shape[0]) == 1
    # one conditional fold per halving (77: a first fold down to 64, then 6 more)
    folds_found = [i for i in _nodes(func, S.IfThenElse)
                   if isinstance(i.condition, E.LT) and isinstance(i.then_case, S.BufferStore)
                   and i.then_case.buffer is allocs["shared"]]
    assert len(folds_found) == folds
    loops = {f.thread_tag: _int(f.extent) for f in _nodes(func, S.For) if f.thread_tag}
    assert loops == {"blockIdx.x": 5, "threadIdx.x": threads}
    # the result is stored once, by thread 0
    stores = [n for n in _nodes(func, S.BufferStore) if n.buffer.name == "C"]
    assert len(stores) == 1


def test_data_loops_bound_to_threads_are_refused() -> None:
    a = te.placeholder((8, 64), "float32", name="A")
    r = te.reduce_axis((0, 64), name="r")
    c = te.compute((8,), lambda i: te.sum(a[i, r], axis=r), name="C")
    s = te.create_schedule(c.op)
    _, ki = s[c].split(c.op.reduce_axis[0], factor=32)
    s[c].bind(c.op.axis[0], te.thread_axis("threadIdx.y"))
    s[c].bind(ki, te.thread_axis("threadIdx.x"))
    with pytest.raises(ValueError, match="stage C reduces across threadIdx.x.*threadIdx.y"):
        te.lower(s, [a, c], "k")


def test_only_thread_axes_reduce_across_threads() -> None:
    a = te.placeholder((8, 64), "float32", name="A")
    r = te.reduce_axis((0, 64), name="r")
    c = te.compute((8,), lambda i: te.sum(a[i, r], axis=r), name="C")
    s = te.create_schedule(c.op)
    _, ki = s[c].split(c.op.reduce_axis[0], factor=32)
    s[c].bind(ki, te.thread_axis("blockIdx.y"))
    with pytest.raises(ValueError, match="only threadIdx axes"):
        te.lower(s, [a, c], "k")


def test_one_reduce_loop_per_thread_axis() -> None:
    a = te.placeholder((8, 64, 4), "float32", name="A")
    r = te.reduce_axis((0, 64), name="r")
    q = te.reduce_axis((0, 4), name="q")
    c = te.compute((8,), lambda i: te.sum(a[i, r, q], axis=[r, q]), name="C")
    s = te.create_schedule(c.op)
    s[c].bind(s[c].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[c].bind(s[c].op.reduce_axis[1], te.thread_axis("threadIdx.y"))
    with pytest.raises(ValueError, match="only one reduce loop can be bound"):
        te.lower(s, [a, c], "k")
