"""A symbolic model's sizes in C: its dimension expressions and its relations between sizes.

An exported model whose inputs keep symbolic dimensions runs at any size within its bounds,
as :class:`~tessera.runtime.module.Module` does: the C program gives the size variables'
values (``P_bind_sizes`` derives them from the inputs' shapes), the library checks their
bounds and the relations the model needs, and passes them to the kernels. This module writes
the C for that: :func:`dim_c` a dimension (an int, or a TIR expression over the variables,
with floor division and modulo as Python's), :func:`relation_c` a relation check (the Python
source ``tessera.frontend.onnx.symbolic_eval`` keeps: comparisons, ``and``/``or``/``not``,
``x if c else y``, ``min``/``max``, arithmetic over ``s['name']``). Anything else raises
:class:`~tessera.errors.ExportError`.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from tessera.errors import ExportError
from tessera.tir import expr as E

#: C helpers the expressions use (floor division and modulo of signed values).
C_HELPERS = """static int64_t t_fdiv(int64_t a, int64_t b) {
    if (b == 0) return 0;
    int64_t q = a / b;
    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static int64_t t_fmod(int64_t a, int64_t b) { return b == 0 ? 0 : a - t_fdiv(a, b) * b; }
static int64_t t_min(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t t_max(int64_t a, int64_t b) { return a > b ? a : b; }
"""

_BINARY = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=",
           E.GT: ">", E.GE: ">=", E.And: "&&", E.Or: "||"}
_CALLS = {E.FloorDiv: "t_fdiv", E.FloorMod: "t_fmod", E.Min: "t_min", E.Max: "t_max"}


def dim_c(dim: Any, index: Mapping[str, int], sizes: str = "s") -> str:
    """Dimension ``dim`` as a C ``int64_t`` expression reading variable ``v`` as
    ``sizes[index[v]]``."""
    if isinstance(dim, int):
        return f"(int64_t){dim}"
    e = dim
    if isinstance(e, E.IntImm):
        return f"(int64_t){int(e.value)}"
    if isinstance(e, E.Var):
        if e.name not in index:
            raise ExportError(f"size expression {e}: {e.name!r} is not a size variable")
        return f"{sizes}[{index[e.name]}]"
    for cls, op in _BINARY.items():
        if type(e) is cls:
            return f"({dim_c(e.a, index, sizes)} {op} {dim_c(e.b, index, sizes)})"
    for cls, fn in _CALLS.items():
        if type(e) is cls:
            return f"{fn}({dim_c(e.a, index, sizes)}, {dim_c(e.b, index, sizes)})"
    if isinstance(e, E.Select):
        return (f"({dim_c(e.condition, index, sizes)} ? {dim_c(e.true_value, index, sizes)} "
                f": {dim_c(e.false_value, index, sizes)})")
    if isinstance(e, E.Not):
        return f"(!{dim_c(e.a, index, sizes)})"
    if isinstance(e, E.Cast):
        return dim_c(e.value, index, sizes)
    raise ExportError(f"size expression {e} ({type(e).__name__}) has no C form here")


_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


def relation_c(source: str, index: Mapping[str, int], sizes: str = "s") -> str:
    """A relation check's Python source (over ``s['name']``) as a C expression."""
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as e:
        raise ExportError(f"relation {source!r} does not parse: {e}") from None

    def c(n: ast.AST) -> str:
        if isinstance(n, ast.Constant) and isinstance(n.value, (bool, int)):
            return f"(int64_t){int(n.value)}"
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and \
                n.value.id == "s" and isinstance(n.slice, ast.Constant) and \
                n.slice.value in index:
            return f"{sizes}[{index[n.slice.value]}]"
        if isinstance(n, ast.BoolOp):
            op = " && " if isinstance(n.op, ast.And) else " || "
            return "(" + op.join(c(v) for v in n.values) + ")"
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return f"(!{c(n.operand)})"
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return f"(-{c(n.operand)})"
        if isinstance(n, ast.Compare):
            parts, left = [], n.left
            for op, right in zip(n.ops, n.comparators):
                if type(op) not in _CMP:
                    break
                parts.append(f"({c(left)} {_CMP[type(op)]} {c(right)})")
                left = right
            else:
                return "(" + " && ".join(parts) + ")"
        if isinstance(n, ast.BinOp):
            if type(n.op) in _ARITH:
                return f"({c(n.left)} {_ARITH[type(n.op)]} {c(n.right)})"
            if isinstance(n.op, ast.FloorDiv):
                return f"t_fdiv({c(n.left)}, {c(n.right)})"
            if isinstance(n.op, ast.Mod):
                return f"t_fmod({c(n.left)}, {c(n.right)})"
        if isinstance(n, ast.IfExp):
            return f"({c(n.test)} ? {c(n.body)} : {c(n.orelse)})"
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                n.func.id in ("min", "max") and len(n.args) >= 2 and not n.keywords:
            out = c(n.args[0])
            for a in n.args[1:]:
                out = f"t_{n.func.id}({out}, {c(a)})"
            return out
        raise ExportError(f"relation {source!r}: {ast.unparse(n)} has no C form here")

    return c(tree)
