"""Tests of tessera.tir.verifier.verify."""

from __future__ import annotations

import pytest

from tessera import tir
from tessera.errors import CompileError
from tessera.tir.verifier import verify

F = tir.ForKind
A = tir.decl_buffer((4, 8), "float32", "A")
B = tir.decl_buffer((32,), "float32", "B")
I, J = tir.Var("i"), tir.Var("j")


def _func(body: tir.Stmt, params: list | None = None) -> tir.PrimFunc:
    return tir.PrimFunc("kern", params if params is not None else [A, B], body)


def _loops(body: tir.Stmt, kind_i: tir.ForKind = F.SERIAL) -> tir.Stmt:
    return tir.For(I, 0, 4, kind_i, tir.For(J, 0, 8, F.SERIAL, body))


def test_valid_function_passes() -> None:
    T = tir.decl_buffer((8,), "float32", "T", scope="local")
    t = tir.Var("t")
    body = tir.For(I, 0, 4, F.PARALLEL, tir.Allocate(T, tir.seq(
        tir.For(J, 0, 8, F.SERIAL, tir.LetStmt(t, I * 8 + J, tir.BufferStore(
            T, A[I, J] * 2.0, [J]))),
        tir.BufferStore(B, T[tir.Ramp(tir.const(0), 1, 8)], [tir.Ramp(I * 8, 1, 8)]))))
    verify(_func(body))


def _cast_var_bad() -> tir.PrimFunc:
    k = tir.Var("k")
    return _func(_loops(tir.BufferStore(B, A[I, J], [k])))


def _var_after_loop() -> tir.PrimFunc:
    return _func(tir.seq(_loops(tir.BufferStore(B, A[I, J], [I * 8 + J])),
                         tir.BufferStore(B, A[0, 0], [I])))


def _unknown_buffer() -> tir.PrimFunc:
    C = tir.decl_buffer((32,), "float32", "C")
    return _func(_loops(tir.BufferStore(C, A[I, J], [I * 8 + J])))


def _index_count() -> tir.PrimFunc:
    return _func(_loops(tir.BufferStore(B, A[I], [I * 8 + J])))


def _binary_dtype() -> tir.PrimFunc:
    x = tir.Add(A[I, J], tir.Cast("float64", A[I, J]))
    return _func(_loops(tir.BufferStore(B, x, [I * 8 + J])))


def _store_dtype() -> tir.PrimFunc:
    return _func(_loops(tir.BufferStore(B, tir.Cast("int32", A[I, J]), [I * 8 + J])))


def _lanes() -> tir.PrimFunc:
    v = tir.Add(tir.Broadcast(A[0, 0], 4), tir.Broadcast(A[0, 1], 8))
    return _func(tir.BufferStore(B, v, [tir.Ramp(tir.const(0), 1, 8)]))


def _store_lanes() -> tir.PrimFunc:
    return _func(tir.BufferStore(B, A[0, 0], [tir.Ramp(tir.const(0), 1, 8)]))


def _symbolic_lanes() -> tir.PrimFunc:
    r = tir.Ramp(tir.const(0), 1, 8)
    r.lanes = tir.Var("n")  # type: ignore[assignment]
    return _func(tir.BufferStore(B, A[0, 0], [r]))


def _nested_parallel() -> tir.PrimFunc:
    return _func(tir.For(I, 0, 4, F.PARALLEL, tir.For(J, 0, 8, F.PARALLEL, tir.BufferStore(
        B, A[I, J], [I * 8 + J]))))


def _float_index() -> tir.PrimFunc:
    return _func(_loops(tir.BufferStore(B, A[I, J], [tir.Cast("float32", I)])))


def _vector_if() -> tir.PrimFunc:
    c = tir.LT(tir.Ramp(tir.const(0), 1, 4), tir.Broadcast(tir.const(2), 4))
    return _func(tir.IfThenElse(c, tir.BufferStore(B, A[0, 0], [0])))


@pytest.mark.parametrize("make, message", [
    (_cast_var_bad, "variable k"),
    (_var_after_loop, "variable i"),
    (_unknown_buffer, "buffer C is neither a parameter nor allocated"),
    (_index_count, "buffer A has 2 dimension"),
    (_binary_dtype, "float32 and float64"),
    (_store_dtype, "int32 value into float32 buffer B"),
    (_lanes, "4 and 8 lanes"),
    (_store_lanes, "1 lane(s) at 8 address"),
    (_symbolic_lanes, "not a positive constant integer"),
    (_nested_parallel, "PARALLEL loop j is nested"),
    (_float_index, "index of B has dtype float32"),
    (_vector_if, "if condition"),
])
def test_errors_name_function_and_problem(make, message: str) -> None:
    with pytest.raises(CompileError) as info:
        verify(make())
    text = str(info.value)
    assert "kern" in text
    assert message in text


def test_error_names_the_statement() -> None:
    with pytest.raises(CompileError, match=r"in statement `B\[k\] = A\[i, j\]`"):
        verify(_cast_var_bad())


def test_lowered_mode_requires_flat_buffers_and_no_vectorized_loops() -> None:
    body = _loops(tir.BufferStore(B, A[I, J], [I * 8 + J]))
    verify(_func(body))
    with pytest.raises(CompileError, match="buffer A is not flattened"):
        verify(_func(body), lowered=True)
    B2 = tir.decl_buffer((32,), "float32", "B2")
    vec = tir.For(I, 0, 4, F.VECTORIZED, tir.BufferStore(B2, tir.const(0.0, "float32"), [I]))
    with pytest.raises(CompileError, match="VECTORIZED"):
        verify(_func(vec, [B2]), lowered=True)


def test_allocated_buffer_out_of_scope() -> None:
    T = tir.decl_buffer((8,), "float32", "T")
    body = tir.seq(tir.Allocate(T, tir.BufferStore(T, A[0, 0], [0])),
                   tir.BufferStore(B, T[0], [0]))
    with pytest.raises(CompileError, match="buffer T"):
        verify(_func(body))


def test_symbolic_shape_vars_are_defined() -> None:
    n = tir.Var("n")
    C = tir.decl_buffer((n,), "float32", "C")
    body = tir.For(I, 0, n, F.SERIAL, tir.BufferStore(C, C[I] * 2.0, [I]))
    verify(_func(body, [C]))
