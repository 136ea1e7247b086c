"""Symbolic graph dimensions as TIR expressions: the :class:`~tessera.ir.symbolic.DimAlgebra`
the IR uses.

The graph IR (layer 1) cannot import ``tir`` (layer 2); this module, in a layer that may import
both, implements the IR's dimension algebra with TIR and installs it when ``tessera.passes``
is imported (which ``import tessera`` does).

* Variables are int64 :class:`~tessera.tir.expr.Var` s, one object per name (:meth:`var`),
  so TIR's analyses (which compare variables by identity) agree with the IR's equality (by
  name).
* :meth:`normalize` is a canonical form: the TIR simplifier (sizes non-negative), then a
  polynomial normal form (terms expanded, monomials and their factors in a fixed order, exact
  divisions by a monomial carried out: ``(batch*seq*512) // (batch*seq*8)`` is ``64``); what
  is not a polynomial (``min``, ``select``, an inexact ``//``) keeps its canonical operands.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from tessera.errors import TesseraError
from tessera.ir.symbolic import DimAlgebra, current_dim_bounds, install_dim_algebra
from tessera.tir import expr as E
from tessera.tir.arith import const_int_bound
from tessera.tir.simplify import can_prove, simplify

__all__ = ["TirDimAlgebra"]

INDEX = "int64"

#: A monomial: its factors' keys (sorted) -> (coefficient, factors).
Poly = dict[tuple[Any, ...], list[Any]]

#: Above this many terms a product is kept as a factor rather than expanded.
EXPAND_LIMIT = 64

_CMP: dict[type, Callable[[int, int], bool]] = {
    E.EQ: operator.eq, E.NE: operator.ne, E.LT: operator.lt, E.LE: operator.le,
    E.GT: operator.gt, E.GE: operator.ge}
_ARITH: dict[type, Callable[[int, int], int]] = {
    E.Add: operator.add, E.Sub: operator.sub, E.Mul: operator.mul,
    E.FloorDiv: operator.floordiv, E.FloorMod: operator.mod, E.Min: min, E.Max: max}
_JSON_CLASSES: dict[str, type] = {c.__name__: c for c in (
    E.Add, E.Sub, E.Mul, E.FloorDiv, E.FloorMod, E.Min, E.Max, E.EQ, E.NE, E.LT, E.LE, E.GT,
    E.GE, E.And, E.Or)}
#: Printing precedence (higher binds tighter).
_PREC: dict[type, tuple[int, str]] = {
    E.Or: (1, " || "), E.And: (2, " && "), E.EQ: (3, " == "), E.NE: (3, " != "),
    E.LT: (3, " < "), E.LE: (3, " <= "), E.GT: (3, " > "), E.GE: (3, " >= "),
    E.Add: (4, " + "), E.Sub: (4, " - "), E.Mul: (5, "*"), E.FloorDiv: (5, " // "),
    E.FloorMod: (5, " % ")}


class TirDimAlgebra(DimAlgebra):
    """The IR's dimension algebra over TIR expressions (see the module doc)."""

    def __init__(self) -> None:
        self._vars: dict[str, E.Var] = {}
        self._normal: dict[Any, Any] = {}

    # -- basics ---------------------------------------------------------------------------------
    def is_expr(self, value: Any) -> bool:
        return isinstance(value, E.PrimExpr)

    def var(self, name: str) -> E.Var:
        v = self._vars.get(name)
        if v is None:
            v = self._vars[name] = E.Var(name, INDEX)
        return v

    def _interned(self, e: E.PrimExpr) -> E.PrimExpr:
        """``e`` with every variable replaced by the interned one of its name."""
        if isinstance(e, E.Var):
            return self.var(e.name)
        if isinstance(e, E.IntImm):
            return e if e.dtype == INDEX else E.IntImm(e.value, INDEX)
        if isinstance(e, E.BinaryOp):
            a, b = self._interned(e.a), self._interned(e.b)
            return e if a is e.a and b is e.b else type(e)(a, b)
        if isinstance(e, E.Select):
            return E.Select(self._interned(e.condition), self._interned(e.true_value),
                            self._interned(e.false_value))
        if isinstance(e, E.Not):
            return E.Not(self._interned(e.a))
        if isinstance(e, E.Cast):
            if E.is_int(e.dtype) and E.is_int(e.value.dtype):
                return self._interned(e.value)
            return E.Cast(e.dtype, self._interned(e.value))
        raise TesseraError(f"{e} is not a dimension expression (integer arithmetic, min, max "
                           f"and select over size variables)")

    def key(self, expr: Any) -> Any:
        e = expr
        if isinstance(e, E.IntImm):
            return ("i", e.value)
        if isinstance(e, E.Var):
            return ("v", e.name)
        if isinstance(e, E.BinaryOp):
            return (type(e).__name__, self.key(e.a), self.key(e.b))
        if isinstance(e, E.Select):
            return ("sel", self.key(e.condition), self.key(e.true_value),
                    self.key(e.false_value))
        if isinstance(e, E.Not):
            return ("not", self.key(e.a))
        if isinstance(e, E.Cast):
            return ("cast", e.dtype, self.key(e.value))
        return ("obj", id(e))

    def _bounds(self, e: E.PrimExpr, ranges: Mapping[str, tuple[int, int]] | None = None
                ) -> dict[E.Var, tuple[int | None, int | None]]:
        """Each variable of ``e`` with its range: from ``ranges``, else the current bounds
        (:func:`~tessera.ir.symbolic.dim_bounds_scope`), else non-negative."""
        scope = current_dim_bounds()
        out: dict[E.Var, tuple[int | None, int | None]] = {}
        for name in self.variables(e):
            lo, hi = (ranges or {}).get(name) or scope.get(name) or (0, None)
            out[self.var(name)] = (lo, hi)
        return out

    # -- canonical form -------------------------------------------------------------------------
    def normalize(self, expr: Any) -> Any:
        if isinstance(expr, int):
            return expr
        e = self._interned(E.convert(expr))
        if not E.is_int(e.dtype):
            raise TesseraError(f"dimension {e} has type {e.dtype}, not an integer")
        bounds = self._bounds(e)
        key = (self.key(e), tuple(sorted((v.name, r) for v, r in bounds.items())))
        hit = self._normal.get(key)
        if hit is not None:
            return hit
        out = self._canon(simplify(e, bounds))
        result = out.value if isinstance(out, E.IntImm) else out
        if len(self._normal) > 100_000:
            self._normal.clear()
        self._normal[key] = result
        return result

    def _canon(self, e: E.PrimExpr) -> E.PrimExpr:
        if e.dtype == "bool":
            return self._canon_other(e)
        return self._build(self._poly(e))

    def _canon_other(self, e: E.PrimExpr) -> E.PrimExpr:
        """A non-polynomial node with canonical operands."""
        if isinstance(e, E.BinaryOp):
            return type(e)(self._canon(e.a), self._canon(e.b))
        if isinstance(e, E.Select):
            return E.Select(self._canon(e.condition), self._canon(e.true_value),
                            self._canon(e.false_value))
        if isinstance(e, E.Not):
            return E.Not(self._canon(e.a))
        return e

    def _poly(self, e: E.PrimExpr) -> Poly:
        if isinstance(e, E.IntImm):
            return {(): [e.value, []]} if e.value else {}
        if isinstance(e, E.Var):
            return {(self.key(e),): [1, [e]]}
        if isinstance(e, (E.Add, E.Sub)):
            return _add(self._poly(e.a), self._poly(e.b), 1 if isinstance(e, E.Add) else -1)
        if isinstance(e, E.Mul):
            a, b = self._poly(e.a), self._poly(e.b)
            if len(a) * len(b) <= EXPAND_LIMIT:
                return _mul(a, b, self.key)
        elif isinstance(e, (E.FloorDiv, E.FloorMod)):
            a, b = self._poly(e.a), self._poly(e.b)
            q = _exact_quotient(a, b)
            if q is not None:
                return q if isinstance(e, E.FloorDiv) else {}
            node = type(e)(self._build(a), self._build(b))
            return {(self.key(node),): [1, [node]]}
        node = self._canon_other(e)
        if isinstance(node, E.IntImm):
            return {(): [node.value, []]} if node.value else {}
        return {(self.key(node),): [1, [node]]}

    def _build(self, p: Poly) -> E.PrimExpr:
        """The polynomial as an expression: monomials by degree (highest first) and name,
        each ``coef*f1*f2``; the constant last; negative terms subtracted."""
        const = p.get((), [0, []])[0]
        terms = sorted(((k, c, f) for k, (c, f) in p.items() if k and c),
                       key=lambda t: (t[1] < 0, -len(t[0]), repr(t[0])))

        def term(coef: int, factors: list[E.PrimExpr]) -> E.PrimExpr:
            out: E.PrimExpr | None = E.IntImm(coef, INDEX) if coef != 1 else None
            for f in factors:
                out = f if out is None else E.Mul(out, f)
            assert out is not None
            return out

        out: E.PrimExpr | None = None
        for _, coef, factors in terms:
            if out is None:
                out = term(coef, factors) if coef > 0 else \
                    E.Sub(E.IntImm(0, INDEX), term(-coef, factors))
            elif coef > 0:
                out = E.Add(out, term(coef, factors))
            else:
                out = E.Sub(out, term(-coef, factors))
        if out is None:
            return E.IntImm(const, INDEX)
        if const > 0:
            out = E.Add(out, E.IntImm(const, INDEX))
        elif const < 0:
            out = E.Sub(out, E.IntImm(-const, INDEX))
        return out

    # -- evaluation and analysis ----------------------------------------------------------------
    def evaluate(self, expr: Any, sizes: Mapping[str, int]) -> int:
        return int(self._eval(expr, sizes))

    def _eval(self, e: Any, sizes: Mapping[str, int]) -> int:
        if isinstance(e, int):
            return e
        if isinstance(e, E.IntImm):
            return e.value
        if isinstance(e, E.Var):
            try:
                return int(sizes[e.name])
            except KeyError:
                raise TesseraError(f"no size given for {e.name!r} (sizes: "
                                   f"{dict(sizes)})") from None
        fn = _ARITH.get(type(e))
        if fn is not None:
            a, b = self._eval(e.a, sizes), self._eval(e.b, sizes)
            if b == 0 and isinstance(e, (E.FloorDiv, E.FloorMod)):
                raise TesseraError(f"division by zero evaluating {self.to_str(e)} at "
                                   f"{dict(sizes)}")
            return fn(a, b)
        cmp = _CMP.get(type(e))
        if cmp is not None:
            return int(cmp(self._eval(e.a, sizes), self._eval(e.b, sizes)))
        if isinstance(e, E.And):
            return int(bool(self._eval(e.a, sizes)) and bool(self._eval(e.b, sizes)))
        if isinstance(e, E.Or):
            return int(bool(self._eval(e.a, sizes)) or bool(self._eval(e.b, sizes)))
        if isinstance(e, E.Not):
            return int(not self._eval(e.a, sizes))
        if isinstance(e, E.Select):
            return self._eval(e.true_value if self._eval(e.condition, sizes) else
                              e.false_value, sizes)
        if isinstance(e, E.Cast):
            return self._eval(e.value, sizes)
        raise TesseraError(f"cannot evaluate {e!r} as a dimension")

    def variables(self, expr: Any) -> set[str]:
        out: set[str] = set()
        stack = [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, E.Var):
                out.add(e.name)
            elif isinstance(e, E.BinaryOp):
                stack += [e.a, e.b]
            elif isinstance(e, E.Select):
                stack += [e.condition, e.true_value, e.false_value]
            elif isinstance(e, (E.Not,)):
                stack.append(e.a)
            elif isinstance(e, E.Cast):
                stack.append(e.value)
        return out

    def bound(self, expr: Any, bounds: Mapping[str, tuple[int, int]]
              ) -> tuple[int | None, int | None]:
        e = self._interned(E.convert(expr))
        return const_int_bound(e, self._bounds(e, bounds))

    def prove(self, cond: Any) -> bool:
        c = self._interned(cond)
        return bool(can_prove(c, self._bounds(c)))

    def eq(self, a: Any, b: Any) -> Any:
        return E.eq(a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        return self.normalize(E.min_(a, b))

    def maximum(self, a: Any, b: Any) -> Any:
        return self.normalize(E.max_(a, b))

    def select(self, cond: Any, a: Any, b: Any) -> Any:
        return self.normalize(E.select(cond, E.convert(a), E.convert(b)))

    # -- text and JSON --------------------------------------------------------------------------
    def to_str(self, expr: Any) -> str:
        return self._str(expr, 0)

    def _str(self, e: Any, outer: int) -> str:
        if isinstance(e, int):
            return str(e)
        if isinstance(e, E.IntImm):
            return str(e.value)
        if isinstance(e, E.Var):
            return e.name
        if isinstance(e, (E.Min, E.Max)):
            name = "min" if isinstance(e, E.Min) else "max"
            return f"{name}({self._str(e.a, 0)}, {self._str(e.b, 0)})"
        if isinstance(e, E.Select):
            return (f"select({self._str(e.condition, 0)}, {self._str(e.true_value, 0)}, "
                    f"{self._str(e.false_value, 0)})")
        if isinstance(e, E.Not):
            return f"!{self._str(e.a, 9)}"
        if isinstance(e, E.Cast):
            return self._str(e.value, outer)
        prec = _PREC.get(type(e))
        if prec is None:
            return repr(e)
        level, symbol = prec
        # left-associative: the right operand of - // % needs parentheses at the same level
        right = level + 1 if isinstance(e, (E.Sub, E.FloorDiv, E.FloorMod, E.Mul)) else level
        text = f"{self._str(e.a, level)}{symbol}{self._str(e.b, right)}"
        return f"({text})" if level < outer else text

    def to_json(self, expr: Any) -> Any:
        e = expr
        if isinstance(e, int):
            return e
        if isinstance(e, E.IntImm):
            return e.value
        if isinstance(e, E.Var):
            return e.name
        if isinstance(e, E.BinaryOp):
            return [type(e).__name__, self.to_json(e.a), self.to_json(e.b)]
        if isinstance(e, E.Select):
            return ["Select", self.to_json(e.condition), self.to_json(e.true_value),
                    self.to_json(e.false_value)]
        if isinstance(e, E.Not):
            return ["Not", self.to_json(e.a)]
        if isinstance(e, E.Cast):
            return self.to_json(e.value)
        raise TesseraError(f"cannot write {e!r} as a dimension")

    def from_json(self, data: Any) -> Any:
        if isinstance(data, bool):
            return E.IntImm(int(data), "bool")
        if isinstance(data, int):
            return E.IntImm(data, INDEX)
        if isinstance(data, str):
            return self.var(data)
        if isinstance(data, list) and data:
            op, args = data[0], [self.from_json(a) for a in data[1:]]
            if op == "Select" and len(args) == 3:
                return E.Select(*args)
            if op == "Not" and len(args) == 1:
                return E.Not(args[0])
            cls = _JSON_CLASSES.get(op)
            if cls is not None and len(args) == 2:
                return cls(*args)
        raise TesseraError(f"malformed dimension expression {data!r}")


def _add(a: Poly, b: Poly, sign: int) -> Poly:
    out = {k: [c, list(f)] for k, (c, f) in a.items()}
    for k, (c, f) in b.items():
        if k in out:
            out[k][0] += sign * c
            if out[k][0] == 0:
                del out[k]
        else:
            out[k] = [sign * c, list(f)]
    return out


def _mul(a: Poly, b: Poly, key: Callable[[Any], Any]) -> Poly:
    out: Poly = {}
    for ka, (ca, fa) in a.items():
        for kb, (cb, fb) in b.items():
            factors = sorted(fa + fb, key=lambda f: repr(key(f)))
            k = tuple(sorted(ka + kb, key=repr))
            out = _add(out, {k: [ca * cb, factors]}, 1)
    return out


def _exact_quotient(a: Poly, b: Poly) -> Poly | None:
    """``a / b`` when ``b`` is one monomial that divides every term of ``a`` exactly."""
    if len(b) != 1:
        return None
    (kb, (cb, _)), = b.items()
    if cb == 0:
        return None
    out: Poly = {}
    for ka, (ca, fa) in a.items():
        if ca % cb:
            return None
        rest = list(ka)
        factors = list(fa)
        for k in kb:
            if k not in rest:
                return None
            i = rest.index(k)
            del rest[i]
            del factors[i]
        out[tuple(rest)] = [ca // cb, factors]
    return out


install_dim_algebra(TirDimAlgebra())
