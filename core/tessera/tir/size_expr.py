"""Size expressions in a JSON-friendly form: what code generators store about run-time extents.

A symbolic kernel's buffer shapes and launch extents are integer expressions of its size
variables (:attr:`~tessera.tir.stmt.PrimFunc.size_vars`). A kernel table, an artifact or a
launch plan keeps them as :data:`Dim` s: an int, ``["var", k]`` (the k-th size variable), or
``[op, a, b]`` with ``op`` one of ``+ - * // % min max`` (Python's floor division and modulo),
and evaluates them for each call's sizes without TIR.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from tessera.tir import expr as E

__all__ = ["Dim", "dim_vars", "encode_dim", "eval_dim"]

#: An encoded size expression (see the module doc).
Dim = Any

_ENCODED: dict[type, str] = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.FloorDiv: "//",
                             E.FloorMod: "%", E.Min: "min", E.Max: "max"}
_FNS: dict[str, Callable[[int, int], int]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "min": min, "max": max}


def encode_dim(e: E.PrimExpr, size_vars: Sequence[E.Var]) -> Dim:
    """Integer expression ``e`` of ``size_vars`` as a :data:`Dim`; ValueError for one that uses
    anything else (loop variables, loads, other operators)."""
    if isinstance(e, E.IntImm):
        return int(e.value)
    if isinstance(e, E.Var):
        for k, v in enumerate(size_vars):
            if v is e:
                return ["var", k]
        raise ValueError(f"{e.name} is not a size variable")
    if isinstance(e, E.Cast) and E.is_int(e.dtype) and E.is_int(e.value.dtype):
        return encode_dim(e.value, size_vars)
    op = _ENCODED.get(type(e))
    if op is None:
        raise ValueError(f"{e} is not an integer expression of size variables")
    assert isinstance(e, E.BinaryOp)
    return [op, encode_dim(e.a, size_vars), encode_dim(e.b, size_vars)]


def eval_dim(dim: Dim, values: Sequence[int | None]) -> int | None:
    """The value of ``dim`` for size ``values`` (in ``size_vars`` order): None where a value
    it uses is None, or for a division by zero."""
    if isinstance(dim, int):
        return dim
    if dim[0] == "var":
        v: Any = values[dim[1]]
        return None if v is None else int(v)
    a, b = eval_dim(dim[1], values), eval_dim(dim[2], values)
    if a is None or b is None or (dim[0] in ("//", "%") and b == 0):
        return None
    return int(_FNS[dim[0]](a, b))


def dim_vars(dim: Dim) -> set[int]:
    """The size variables (indices) ``dim`` uses."""
    if isinstance(dim, int):
        return set()
    if dim[0] == "var":
        return {dim[1]}
    return dim_vars(dim[1]) | dim_vars(dim[2])
