"""Helpers for the tessera-llvm tests: build hand-written TIR and run it on numpy arrays.

The tests need llvmlite and the plugin; when the plugin is not installed
(``pip install -e plugins/llvm``) its source folder is put on the path.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llvmlite")

if importlib.util.find_spec("tessera_llvm") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tessera import tir  # noqa: E402
from tessera_llvm.build import build_module  # noqa: E402


def run(func: tir.PrimFunc, arrays: Sequence[np.ndarray], mcpu: str | None = None) -> None:
    """Compile ``func`` alone and call it on ``arrays`` (inputs then outputs, in place)."""
    lib = build_module([func], func.name, mcpu=mcpu).load()
    lib.get(func.name)(list(arrays))


def vector_loop(n: int, lanes: int, store: object, name: str = "i") -> tir.Stmt:
    """``for i in range(n // lanes): store(Ramp(i * lanes, 1, lanes))`` followed by a scalar
    tail loop ``store(j)`` for the last ``n % lanes`` elements."""
    i, j = tir.Var(name), tir.Var(name + "_tail")
    body = tir.For(i, 0, n // lanes, tir.ForKind.SERIAL,
                   store(tir.Ramp(i * lanes, 1, lanes)))  # type: ignore[operator]
    if n % lanes == 0:
        return body
    tail = tir.For(j, (n // lanes) * lanes, n % lanes, tir.ForKind.SERIAL,
                   store(j))  # type: ignore[operator]
    return tir.seq(body, tail)


@pytest.fixture
def run_tir() -> object:
    """:func:`run` as a fixture."""
    return run


@pytest.fixture
def vloop() -> object:
    """:func:`vector_loop` as a fixture."""
    return vector_loop
