"""Shared pieces of the llvm op case tables (:mod:`op_cases_elementwise`, :mod:`op_cases_nn`):
random data and the family registry that ``test_ops_llvm.py`` runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from backend_cases.support import Case
from topi.support import random_data

F32 = np.float32
RNG = np.random.default_rng(0)


def reseed() -> None:
    """The same random data for a family whether it runs alone or with the others."""
    global RNG
    RNG = np.random.default_rng(20250611)


def rand(*shape: int, dtype: Any = "float32", lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    """Uniform random data from this module's generator (see ``topi.support.random_data``)."""
    return random_data(RNG, shape, dtype, lo, hi)


def nonzero(a: np.ndarray, floor: float = 0.1) -> np.ndarray:
    """``a`` with entries near zero replaced (safe divisors)."""
    return np.where(np.abs(a) < floor, np.asarray(0.5, a.dtype), a).astype(a.dtype)


FAMILIES: dict[str, Callable[[], list[Case]]] = {}


def family(fn: Callable[[], list[Case]]) -> Callable[[], list[Case]]:
    FAMILIES[fn.__name__] = fn
    return fn
