"""Schedules and stages: construction, loop primitives, attachment, caches, errors."""

from __future__ import annotations

import pytest

from tessera import te, tir
from tessera.te.schedule import Fuse, Split
from tessera.tir.stmt import ForKind


def graph() -> tuple[te.Tensor, ...]:
    A = te.placeholder((8, 6), name="A")
    B = te.placeholder((6, 10), name="B")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((8, 10), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((8, 10), lambda i, j: tir.max_(C[i, j], tir.const(0.0, "float32")), name="D")
    return A, B, C, D


def names(ivs: list[te.IterVar]) -> list[str]:
    return [iv.name for iv in ivs]


def extent(iv: te.IterVar) -> int:
    return iv.dom.extent.value


def test_create_schedule_stages_in_producer_order() -> None:
    A, B, C, D = graph()
    for arg in (D, D.op, [D], [D.op, D]):
        s = te.create_schedule(arg)
        assert [st.name for st in s.stages] == ["A", "B", "C", "D"]
        assert s.outputs == [D.op]
    s = te.create_schedule(D)
    assert s[A].is_placeholder and not s[C].is_placeholder
    assert s[D].is_output and not s[C].is_output
    assert s[C] is s[C.op] and s[s[C]] is s[C]
    assert [st.name for st in s.compute_stages()] == ["C", "D"]
    assert names(s[C].leaf_iter_vars) == ["i", "j", "k"]
    assert s[C].attach_type == "root" and s[C].scope == "global"
    other = te.placeholder((3,), name="other")
    with pytest.raises(KeyError, match="other"):
        s[other]


def test_split_factor_and_nparts() -> None:
    A, B, C, D = graph()
    s = te.create_schedule(D)
    i, j = D.op.axis
    io, ii = s[D].split(i, factor=3)
    assert names(s[D].leaf_iter_vars) == ["i_outer", "i_inner", "j"]
    assert (extent(io), extent(ii)) == (3, 3)
    jo, ji = s[D].split(j, nparts=4)
    assert (extent(jo), extent(ji)) == (4, 3)
    assert isinstance(s[D].relations[0], Split) and s[D].relations[0].factor == 3
    with pytest.raises(ValueError, match="already split"):
        s[D].split(i, factor=2)
    with pytest.raises(ValueError, match="exactly one"):
        s[D].split(io, factor=2, nparts=2)
    with pytest.raises(ValueError, match="positive"):
        s[D].split(io, factor=0)
    with pytest.raises(ValueError, match="not a loop of this stage"):
        s[D].split(C.op.axis[0], factor=2)
    (k,) = C.op.reduce_axis
    ko, ki = s[C].split(k, factor=4)
    assert ko.kind == ki.kind == "reduce"


def test_fuse_reorder_tile() -> None:
    A, B, C, D = graph()
    s = te.create_schedule(D)
    i, j = D.op.axis
    xo, yo, xi, yi = s[D].tile(i, j, 4, 5)
    assert names(s[D].leaf_iter_vars) == ["i_outer", "j_outer", "i_inner", "j_inner"]
    fused = s[D].fuse(xo, yo)
    assert extent(fused) == 4 and names(s[D].leaf_iter_vars)[0] == "i_outer_j_outer_fused"
    assert isinstance(s[D].relations[-1], Fuse)
    assert s[D].fuse(xi) is xi
    with pytest.raises(ValueError, match="adjacent"):
        s[D].fuse(yi, xi)
    s[D].reorder(yi, xi)
    assert names(s[D].leaf_iter_vars) == ["i_outer_j_outer_fused", "j_inner", "i_inner"]
    with pytest.raises(ValueError, match="twice"):
        s[D].reorder(yi, yi)
    ci, cj = C.op.axis
    (k,) = C.op.reduce_axis
    s[C].reorder(k, cj)  # partial: k takes j's place and j takes k's
    assert names(s[C].leaf_iter_vars) == ["i", "k", "j"]
    with pytest.raises(ValueError, match="data-parallel and reduce"):
        s[C].fuse(ci, k)
    three = s[C].fuse(*[iv for iv in s[C].leaf_iter_vars if iv is not k][:1])
    assert three is ci


def test_fuse_of_three_loops() -> None:
    A = te.placeholder((2, 3, 4), name="A")
    B = te.compute((2, 3, 4), lambda a, b, c: A[a, b, c] + 1.0, name="B")
    s = te.create_schedule(B)
    fused = s[B].fuse(*B.op.axis)
    assert fused.name == "a_b_c_fused" and extent(fused) == 24
    assert s[B].leaf_iter_vars == [fused]


def test_loop_kinds_and_pragmas() -> None:
    A, B, C, D = graph()
    s = te.create_schedule(D)
    i, j = D.op.axis
    io, ii = s[D].split(i, factor=4)
    s[D].parallel(io)
    s[D].unroll(ii)
    s[D].vectorize(j)
    s[D].pragma(io, "parallel_grain", 2)
    st = s[D]
    assert st.iter_var_attrs[io].kind == ForKind.PARALLEL
    assert st.iter_var_attrs[ii].kind == ForKind.UNROLLED
    assert st.iter_var_attrs[j].kind == ForKind.VECTORIZED
    assert st.iter_var_attrs[io].pragmas == {"parallel_grain": 2}
    with pytest.raises(ValueError, match="already split"):
        s[D].vectorize(i)
    tx = te.thread_axis("threadIdx.x")
    assert tx.thread_tag == "threadIdx.x"
    assert te.thread_axis((0, 32), "blockIdx.x").dom.extent.value == 32
    s[C].bind(C.op.axis[0], tx)
    assert s[C].iter_var_attrs[C.op.axis[0]].kind == ForKind.THREAD_BINDING
    assert s[C].iter_var_attrs[C.op.axis[0]].thread_tag == "threadIdx.x"
    with pytest.raises(TypeError, match="thread axis"):
        s[C].bind(C.op.axis[1], C.op.axis[0])
    with pytest.raises(ValueError, match="tag"):
        te.thread_axis()
    with pytest.raises(TypeError, match="placeholder"):
        s[A].split(A.op.output(0).op.name, factor=2)  # type: ignore[arg-type]


def test_attachment_and_scope() -> None:
    A, B, C, D = graph()
    s = te.create_schedule(D)
    i, j = D.op.axis
    s[C].compute_at(s[D], i)
    assert (s[C].attach_type, s[C].attach_stage, s[C].attach_ivar) == ("scope", s[D], i)
    s[C].compute_root()
    assert s[C].attach_type == "root" and s[C].attach_stage is None
    with pytest.raises(ValueError, match="reduction"):
        s[C].compute_inline()
    with pytest.raises(ValueError, match="not a loop of stage"):
        s[C].compute_at(s[D], C.op.axis[0])
    with pytest.raises(ValueError, match="itself"):
        s[D].compute_at(s[D], i)
    with pytest.raises(TypeError, match="Stage"):
        s[C].compute_at(D, i)  # type: ignore[arg-type]
    s[C].set_scope("local")
    assert s[C].scope == "local"
    with pytest.raises(ValueError, match="unknown scope"):
        s[C].set_scope("texture")
    E = te.compute((8, 10), lambda i, j: D[i, j] * 2.0, name="E")
    s2 = te.create_schedule(E)
    s2[D].compute_inline()
    assert s2[D].attach_type == "inline"


def test_cache_read() -> None:
    A, B, C, D = graph()
    s = te.create_schedule(D)
    AL = s.cache_read(A, "local", [C])
    assert AL.name == "A_local" and AL.shape == A.shape
    assert [st.name for st in s.stages] == ["A", "B", "A_local", "C", "D"]
    assert s[AL].scope == "local"
    # C's stage now reads the copy; the old tensor still finds the stage
    assert s[C].op is not C.op and s[C].origin_op is C.op
    assert AL in s[C].op.input_tensors() and A not in s[C].op.input_tensors()
    assert s[C].op.axis == C.op.axis and s[C].op.reduce_axis == C.op.reduce_axis
    with pytest.raises(ValueError, match="does not read"):
        s.cache_read(B, "local", [D])


def test_cache_write_moves_reduction() -> None:
    A, B, C, D = graph()
    s = te.create_schedule(D)
    i, j = C.op.axis
    CL = s.cache_write(C, "local")
    assert [st.name for st in s.stages] == ["A", "B", "C_local", "C", "D"]
    assert s[CL].scope == "local"
    cache_op = CL.op
    assert len(cache_op.reduce_axis) == 1 and cache_op.reduce_axis[0] is C.op.reduce_axis[0]
    assert [a is b for a, b in zip(cache_op.axis, C.op.axis)] == [False, False]
    # the original stage copies the cache out, over the same axes
    assert s[C].op.reduce_axis == [] and s[C].op.axis == [i, j]
    assert s[C].leaf_iter_vars == [i, j]
    assert s[C].op.input_tensors() == [CL]
    s[C].split(i, factor=2)
    with pytest.raises(ValueError, match="before scheduling"):
        s.cache_write(C, "local")


def test_repr() -> None:
    A, B, C, D = graph()
    s = te.create_schedule(D)
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[D].parallel(io)
    s[C].compute_at(s[D], io)
    text = repr(s)
    assert "stage C: at D.i_outer" in text
    assert "i_outer(2)[parallel]" in text
    assert "~k(6)" in text
    assert "split(i -> i_outer, i_inner, factor=4)" in text
    assert "stage A: placeholder" in text
