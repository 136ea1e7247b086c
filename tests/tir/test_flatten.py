"""Tests of tessera.tir.transform.flatten_buffers."""

from __future__ import annotations

import pytest

from tessera import tir
from tessera.tir.functor import post_order_visit
from tessera.tir.transform import flatten_buffers

F = tir.ForKind


def _loads_and_stores(func: tir.PrimFunc) -> list:
    out: list = []
    post_order_visit(func.body, lambda n: out.append(n)
                     if isinstance(n, tir.BufferLoad | tir.BufferStore) else None)
    return out


def _transpose_add(shape: tuple[int, int, int]) -> tir.PrimFunc:
    n, h, w = shape
    A = tir.decl_buffer((n, h, w), "float32", "A")
    B = tir.decl_buffer((w, h, n), "float32", "B")
    C = tir.decl_buffer((n, h, w), "float32", "C")
    i, j, k = tir.Var("i"), tir.Var("j"), tir.Var("k")
    body = tir.For(i, 0, n, F.SERIAL, tir.For(j, 0, h, F.PARALLEL, tir.For(
        k, 0, w, F.SERIAL, tir.BufferStore(C, A[i, j, k] + B[k, j, i], [i, j, k]))))
    return tir.PrimFunc("tadd", [A, B, C], body)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 4), (3, 5, 2)])
def test_flatten_multi_dim(shape: tuple[int, int, int], same) -> None:
    f = _transpose_add(shape)
    g = flatten_buffers(f)
    assert [b.name for b in g.params] == ["A", "B", "C"]
    for old, new in zip(f.params, g.params):
        assert new.ndim == 1 and new.dtype == old.dtype and new.scope == old.scope
        assert new.shape[0].value == old.size()
    for node in _loads_and_stores(g):
        assert len(node.indices) == 1
        assert node.buffer in g.params
    text = str(g)
    assert "//" not in text and "%" not in text
    same(f, g)


def test_flatten_index_is_affine_sum() -> None:
    g = flatten_buffers(_transpose_add((2, 3, 4)))
    text = str(g)
    assert "A[(((i * 12) + (j * 4)) + k)]" in text
    assert "B[(((k * 6) + (j * 2)) + i)]" in text


def test_flatten_allocate_and_zero_dim(same) -> None:
    A = tir.decl_buffer((4, 6), "float32", "A")
    S = tir.decl_buffer((), "float32", "S")
    T = tir.decl_buffer((2, 3), "float32", "T", scope="local")
    i, a, b = tir.Var("i"), tir.Var("a"), tir.Var("b")
    fill = tir.For(a, 0, 2, F.SERIAL, tir.For(b, 0, 3, F.SERIAL, tir.BufferStore(
        T, A[i, a * 3 + b] * 2.0, [a, b])))
    use = tir.For(a, 0, 2, F.SERIAL, tir.For(b, 0, 3, F.SERIAL, tir.BufferStore(
        S, S[()] + T[a, b], [])))
    body = tir.For(i, 0, 4, F.SERIAL, tir.Allocate(T, tir.seq(fill, use)))
    f = tir.PrimFunc("f", [A, S], body)
    g = flatten_buffers(f)
    allocs: list = []
    post_order_visit(g.body, lambda n: allocs.append(n) if isinstance(n, tir.Allocate) else None)
    assert len(allocs) == 1 and allocs[0].buffer.shape[0].value == 6
    assert allocs[0].buffer.scope == "local" and allocs[0].buffer.name == "T"
    assert g.params[1].shape[0].value == 1
    for node in _loads_and_stores(g):
        assert len(node.indices) == 1
    same(f, g)


def test_flatten_keeps_vector_accesses(same) -> None:
    A = tir.decl_buffer((4, 8), "float32", "A")
    B = tir.decl_buffer((4, 8), "float32", "B")
    i = tir.Var("i")
    idx = tir.Ramp(tir.const(0), 1, 8)
    body = tir.For(i, 0, 4, F.SERIAL, tir.BufferStore(B, A[i, idx] * 3.0, [i, idx]))
    f = tir.PrimFunc("f", [A, B], body)
    g = flatten_buffers(f)
    assert "B[ramp((i * 8), 1, 8)]" in str(g)
    same(f, g)


def test_flatten_is_identity_on_1d() -> None:
    A = tir.decl_buffer((8,), "float32", "A")
    i = tir.Var("i")
    f = tir.PrimFunc("f", [A], tir.For(i, 0, 8, F.SERIAL,
                                       tir.BufferStore(A, A[i] + 1.0, [i])))
    g = flatten_buffers(f)
    assert g.params[0] is A
