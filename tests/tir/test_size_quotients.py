"""bind_size_quotients: each quotient of run-time sizes that a buffer's shape holds is bound once
at the top of a symbolic function, and the function computes what it computed before (the TIR
interpreter at many sizes, before and after the pass and through the whole pipeline)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.tir import interpreter
from tessera.tir.functor import post_order_visit
from tessera.tir.printer import func_to_str
from tessera.tir.transform import lower_pipeline
from tessera.tir.transform.hoist_sizes import inline_size_lets
from tessera.tir.transform.size_quotients import PREFIX, bind_size_quotients

F = tir.ForKind
HEIGHTS = [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 64]


def _var(name: str) -> tir.Var:
    return tir.Var(name, "int64")


def _rows(h: tir.PrimExpr) -> tir.PrimExpr:
    """Rows after two stride-2 layers: ``((h + 1) // 2 + 1) // 2``."""
    return ((h + 1) // 2 + 1) // 2


def downsampled() -> tir.PrimFunc:
    """A layer two stride-2 steps deep, tiled by 4 rows (Winograd's tiles): ``Y[t, r, c] =
    X[min(4t + r, rows - 1), c] * 2 + (4t + r) % 3`` for ``t < (rows + 3) // 4``, with a
    guard on the last tile, and a scratch row buffer of ``rows`` elements."""
    h, t, r, c, i = _var("h"), _var("t"), _var("r"), _var("c"), _var("i")
    rows = _rows(h)
    tiles = (rows + 3) // 4
    X = tir.Buffer("X", (rows, 8), "float32")
    Y = tir.Buffer("Y", (tiles, 4, 8), "float32")
    S = tir.Buffer("S", (rows,), "float32", scope="local")
    k = t * 4 + r
    fill = tir.For(i, 0, rows, F.SERIAL, tir.BufferStore(S, X[i, 0] + 1.0, [i]))
    row = tir.min_(k, rows - 1)
    body = tir.For(t, 0, tiles, F.PARALLEL, tir.For(r, 0, 4, F.UNROLLED, tir.For(
        c, 0, 8, F.VECTORIZED, tir.IfThenElse(k < rows, tir.BufferStore(
            Y, X[row, c] * 2.0 + tir.cast("float32", k % 3) + S[row], [t, r, c]),
            tir.BufferStore(Y, tir.const(-1.0, "float32"), [t, r, c])))))
    return tir.PrimFunc("downsampled", [X, Y], tir.Allocate(S, tir.seq(fill, body)),
                        size_bounds={h: (0, 512)})


def _arrays(func: tir.PrimFunc, h: int, rng: np.random.Generator) -> list[np.ndarray]:
    rows = ((h + 1) // 2 + 1) // 2
    tiles = (rows + 3) // 4
    return [rng.standard_normal((rows, 8)).astype(np.float32),
            np.full((tiles, 4, 8), np.nan, np.float32)]


def _run(func: tir.PrimFunc, h: int, rng: np.random.Generator) -> np.ndarray:
    arrays = _arrays(func, h, rng)
    interpreter.run(func, arrays, sizes={"h": h})
    return arrays[1]


def _quotients(node: object) -> int:
    found: list[object] = []
    post_order_visit(node, lambda n: found.append(n)
                     if isinstance(n, tir.FloorDiv | tir.FloorMod) else None)
    return len(found)


def test_quotients_of_the_shapes_are_bound_once_at_the_top() -> None:
    func = downsampled()
    named = bind_size_quotients(func)
    lets = []
    body = named.body
    while isinstance(body, tir.LetStmt):
        lets.append(body)
        body = body.body
    # (h + 1) // 2, the rows, the tiles: inner ones first, each reading the one before it
    assert [s.var.name for s in lets] == [f"{PREFIX}0", f"{PREFIX}1", f"{PREFIX}2"]
    assert lets[1].value.a.a is lets[0].var and lets[2].value.a.a is lets[1].var
    # below them no quotient of the size is left but the row's % 3 (not of a shape), and the
    # scratch buffer's shape (memory is planned from shapes)
    text = func_to_str(named.with_body(body))
    lines = text.splitlines()[1:]
    assert [line for line in lines if "(h + 1) // 2" in line] == [
        "  S = allocate(float32[((((h + 1) // 2) + 1) // 2)], 'local')"]
    assert "  for i in range(sq1):" in lines
    assert "% 3" in text
    # the shapes keep their expressions (memory and the callers' arrays are described by them)
    assert named.params[0].shape == func.params[0].shape
    assert inline_size_lets(named).body is not named.body


@pytest.mark.parametrize("h", HEIGHTS)
def test_the_function_computes_what_it_did(h: int) -> None:
    func = downsampled()
    want = _run(func, h, np.random.default_rng(h))
    got = _run(bind_size_quotients(func), h, np.random.default_rng(h))
    np.testing.assert_array_equal(got, want)


def test_through_the_pipeline() -> None:
    """Lowered with the pass and without it: the same results at every height; with it, the
    lowered body holds far fewer quotients (each chain once, at the top)."""
    func = downsampled()
    on = lower_pipeline(func)
    off = lower_pipeline(func, {"name_size_quotients": False})
    for h in HEIGHTS:
        want = _run(off, h, np.random.default_rng(h))
        np.testing.assert_array_equal(_run(on, h, np.random.default_rng(h)), want,
                                      err_msg=f"h={h}")
        np.testing.assert_array_equal(_run(func, h, np.random.default_rng(h)), want)
    assert _quotients(on.body) < _quotients(off.body)


def test_functions_without_quotients_in_their_shapes_are_unchanged() -> None:
    n, i = _var("n"), _var("i")
    A, B = tir.Buffer("A", (n,), "float32"), tir.Buffer("B", (n,), "float32")
    # a quotient of the size in the body only (a schedule's tiling) stays where it is
    body = tir.For(i, 0, n, F.SERIAL, tir.BufferStore(
        B, A[i] + tir.cast("float32", n // 4), [i]))
    func = tir.PrimFunc("plain", [A, B], body)
    assert bind_size_quotients(func) is func
    static = tir.PrimFunc("static", [tir.Buffer("C", (8,), "float32")],
                          tir.Evaluate(tir.const(0)))
    assert bind_size_quotients(static) is static
