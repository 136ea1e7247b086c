"""Tests of tessera.tir.transform.lower_pipeline on hand-built scheduled kernels."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.tir.functor import post_order_visit
from tessera.tir.transform import lower_pipeline

F = tir.ForKind


def _conv(C: int, H: int, W: int, K: int, R: int, S: int, KB: int = 4,
          OWB: int = 8) -> tir.PrimFunc:
    """A scheduled conv2d micro-kernel (NCHW, stride 1, no padding) as te.lower makes it:
    parallel over output-channel blocks, a KB x OWB accumulator tile in local memory with the
    channel block unrolled and the width block vectorized, and a guarded write-back."""
    OH, OW = H - R + 1, W - S + 1
    D = tir.decl_buffer((1, C, H, W), "float32", "data")
    Wt = tir.decl_buffer((K, C, R, S), "float32", "weight")
    O = tir.decl_buffer((1, K, OH, OW), "float32", "out")
    acc = tir.decl_buffer((KB, OWB), "float32", "acc", scope="local")
    ko, oh, owo, ki, owi, c, r, s = (tir.Var(n) for n in
                                     ("ko", "oh", "owo", "ki", "owi", "c", "r", "s"))
    ow = owo * OWB + owi
    k = ko * KB + ki

    def tile(stmt: tir.Stmt) -> tir.Stmt:
        return tir.For(ki, 0, KB, F.UNROLLED, tir.For(owi, 0, OWB, F.VECTORIZED, stmt))

    in_range = tir.all_of(ow < OW, k < K)
    init = tile(tir.BufferStore(acc, tir.const(0.0, "float32"), [ki, owi]))
    update = tir.For(c, 0, C, F.SERIAL, tir.For(r, 0, R, F.SERIAL, tir.For(
        s, 0, S, F.SERIAL, tile(tir.BufferStore(acc, acc[ki, owi] + tir.select(
            in_range, D[0, c, oh + r, tir.min_(ow, OW - 1) + s]
            * Wt[tir.min_(k, K - 1), c, r, s], tir.const(0.0, "float32")), [ki, owi])))))
    write = tile(tir.IfThenElse(in_range, tir.BufferStore(O, acc[ki, owi], [0, k, oh, ow])))
    body = tir.For(ko, 0, (K + KB - 1) // KB, F.PARALLEL, tir.For(
        oh, 0, OH, F.SERIAL, tir.For(owo, 0, (OW + OWB - 1) // OWB, F.SERIAL,
                                     tir.Allocate(acc, tir.seq(init, update, write)))))
    return tir.PrimFunc("conv", [D, Wt, O], body)


def _innermost_loops(func: tir.PrimFunc) -> list[tir.For]:
    loops: list = []
    post_order_visit(func.body, lambda n: loops.append(n) if isinstance(n, tir.For) else None)
    return [loop for loop in loops if not _has_loop(loop.body)]


def _has_loop(node: tir.Stmt) -> bool:
    found: list = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, tir.For) else None)
    return bool(found)


def _conv_reference(d: np.ndarray, w: np.ndarray) -> np.ndarray:
    _, C, H, W = d.shape
    K, _, R, S = w.shape
    out = np.zeros((1, K, H - R + 1, W - S + 1), np.float64)
    for r in range(R):
        for s in range(S):
            patch = d[0, :, r:r + H - R + 1, s:s + W - S + 1]
            out[0] += np.einsum("chw,kc->khw", patch, w[:, :, r, s])
    return out


@pytest.mark.parametrize("shape", [pytest.param((3, 6, 18, 8, 3, 3), marks=pytest.mark.slow),
                                   pytest.param((2, 5, 10, 8, 3, 3), marks=pytest.mark.slow),
                                   (1, 3, 16, 4, 1, 1)])
def test_conv_micro_kernel_divisible(shape: tuple, same) -> None:
    f = _conv(*shape)
    g = lower_pipeline(f)
    for loop in _innermost_loops(g):
        text = str(loop)
        assert "//" not in text and "%" not in text and "select" not in text
        assert "min(" not in text
    # the accumulator: vector accesses at constant offsets (registers after mem2reg)
    accs: list = []
    post_order_visit(g.body, lambda n: accs.append(n) if isinstance(
        n, tir.BufferLoad | tir.BufferStore) and n.buffer.name == "acc" else None)
    assert accs
    for a in accs:
        idx = a.indices[0]
        assert isinstance(idx, tir.Ramp) and isinstance(idx.base, tir.IntImm)
    loops: list = []
    post_order_visit(g.body, lambda n: loops.append(n) if isinstance(n, tir.For) else None)
    assert {lp.kind for lp in loops} <= {F.SERIAL, F.PARALLEL}
    # the local tile is hoisted into the parallel loop body (or the top when that loop has a
    # single iteration and disappears)
    home = g.body.body if isinstance(g.body, tir.For) else g.body
    assert isinstance(home, tir.Allocate) and home.buffer.name == "acc"
    args = same(f, g)
    np.testing.assert_allclose(args[2], _conv_reference(args[0], args[1]), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("shape", [pytest.param((2, 5, 11, 6, 3, 3), marks=pytest.mark.slow),
                                   (1, 4, 4, 3, 2, 2)])
def test_conv_micro_kernel_ragged(shape: tuple, same) -> None:
    f = _conv(*shape)
    g = lower_pipeline(f)
    args = same(f, g)
    np.testing.assert_allclose(args[2], _conv_reference(args[0], args[1]), rtol=1e-4,
                               atol=1e-4)


def test_options() -> None:
    f = _conv(2, 5, 10, 8, 3, 3)
    g = lower_pipeline(f, {"vectorize": False, "unroll": False})
    kinds: set = set()
    post_order_visit(g.body, lambda n: kinds.add(n.kind) if isinstance(n, tir.For) else None)
    assert F.VECTORIZED not in kinds and F.UNROLLED in kinds
    with pytest.raises(ValueError, match="unknown TIR pipeline option"):
        lower_pipeline(f, {"vectorise": True})


def test_elementwise_pipeline(same) -> None:
    n = 37
    A = tir.decl_buffer((n,), "float32", "A")
    B = tir.decl_buffer((n,), "float32", "B")
    io, ii = tir.Var("io"), tir.Var("ii")
    i = io * 8 + ii
    body = tir.For(io, 0, (n + 7) // 8, F.PARALLEL, tir.For(ii, 0, 8, F.VECTORIZED,
        tir.IfThenElse(i < n, tir.BufferStore(B, tir.tanh(A[i]) + 1.0, [i]))))
    f = tir.PrimFunc("ew", [A, B], body)
    g = lower_pipeline(f)
    same(f, g)
