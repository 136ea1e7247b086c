"""The numpy TE evaluator used as the topi test oracle (tests/topi/te_eval.py)."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import rand
from topi.te_eval import OutOfBoundsRead, evaluate

from tessera import te, tir


def test_matmul_with_reduce_axis() -> None:
    a = te.placeholder((3, 5), "float32", "A")
    b = te.placeholder((5, 4), "float32", "B")
    k = te.reduce_axis((0, 5), "k")
    c = te.compute((3, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    x, y = rand(3, 5), rand(5, 4)
    # a sum of 5 float32 products that cancels to near 0 needs an absolute tolerance too
    np.testing.assert_allclose(evaluate(c, {a: x, b: y}), x @ y, rtol=1e-5, atol=1e-6)


def test_chained_computes_and_names() -> None:
    a = te.placeholder((6,), "int32", "A")
    b = te.compute((6,), lambda i: a[i] * 2, name="B")
    c = te.compute((3,), lambda i: b[2 * i] + b[2 * i + 1], name="C")
    x = np.arange(6, dtype=np.int32)
    np.testing.assert_array_equal(evaluate(c, {"A": x}), [2, 10, 18])


def test_masked_max_and_min_reductions() -> None:
    a = te.placeholder((4, 6), "float32", "A")
    k = te.reduce_axis((0, 6), "k")
    m = te.compute((4,), lambda i: te.max(a[i, k], axis=k, where=k < 3), name="M")
    k2 = te.reduce_axis((1, 6), "k2")
    n = te.compute((4,), lambda i: te.min(a[i, k2], axis=k2), name="N")
    x = rand(4, 6)
    got_m, got_n = evaluate([m, n], {a: x})
    np.testing.assert_array_equal(got_m, x[:, :3].max(axis=1))
    np.testing.assert_array_equal(got_n, x[:, 1:].min(axis=1))


def test_select_out_of_bounds_read_is_reported() -> None:
    a = te.placeholder((4,), "float32", "A")
    b = te.compute((6,), lambda i: tir.select(i < 4, a[i], tir.const(0.0, "float32")), name="B")
    with pytest.raises(OutOfBoundsRead):
        evaluate(b, {a: rand(4)})


def test_scalar_tensors_and_casts() -> None:
    a = te.placeholder((), "float32", "A")
    b = te.compute((), lambda: tir.cast("int32", a[()] * 2.0), name="B")
    out = evaluate(b, {a: np.array(3.7, np.float32)})
    assert out.dtype == np.int32 and out.shape == () and int(out) == 7


def test_placeholder_type_is_checked() -> None:
    a = te.placeholder((2,), "float32", "A")
    b = te.compute((2,), lambda i: a[i] + 1.0, name="B")
    with pytest.raises(ValueError, match="placeholder A"):
        evaluate(b, {a: np.zeros(3, np.float32)})
