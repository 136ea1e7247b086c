"""Shared fixtures of the TIR tests: run a function before and after a pass on the same random
data and compare every buffer."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tessera import tir
from tessera.tir.interpreter import run


def random_args(func: tir.PrimFunc, seed: int = 0) -> list[np.ndarray]:
    """One random array per parameter (outputs too, so untouched elements are checked)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in func.params:
        shape = b.const_shape()
        if b.dtype.startswith("float"):
            out.append(rng.standard_normal(shape).astype(b.dtype))
        elif b.dtype == "bool":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            out.append(rng.integers(-50, 50, shape).astype(b.dtype))
    return out


def check_same(before: tir.PrimFunc, after: tir.PrimFunc, seed: int = 0,
               rtol: float = 1e-5) -> list[np.ndarray]:
    """Run both functions on copies of the same random data; all buffers must agree. The
    arrays have the shapes of ``before``'s parameters (flattened functions accept them)."""
    args = random_args(before, seed)
    a1 = [a.copy() for a in args]
    a2 = [a.copy() for a in args]
    run(before, a1)
    run(after, a2)
    for b, x, y in zip(before.params, a1, a2):
        np.testing.assert_allclose(y, x, rtol=rtol, atol=1e-6, err_msg=f"buffer {b.name}")
    return a1


@pytest.fixture
def same() -> Callable[..., list[np.ndarray]]:
    """:func:`check_same` as a fixture."""
    return check_same
