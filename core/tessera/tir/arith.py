"""Integer arithmetic analysis for TIR (TVM's ``arith``): structural equality, constant
integer bounds, and a canonical polynomial form of integer index expressions.

* :func:`struct_key` / :func:`struct_equal` compare expressions by structure (variables and
  buffers by identity).
* :func:`const_int_bound` gives constant lower/upper bounds of an integer expression from bounds
  on its variables (``None`` for an unbounded side).
* :class:`Poly` is a sum of monomials (products of atoms, i.e. expressions that are not
  ``+ - *`` of integers) with integer coefficients plus a constant; :func:`to_poly` and
  :meth:`Poly.to_expr` convert to and from expressions. It is how the simplifier cancels terms
  (``(i*8 + j) - i*8 -> j``) and splits numerators of ``//`` and ``%``.
* :func:`linear_in` tells whether an expression is ``base + var * stride`` with ``base`` and
  ``stride`` free of ``var`` (what vectorization needs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from tessera.tir import expr as E
from tessera.tir.functor import contains, method_for

__all__ = [
    "Bounds", "Poly", "const_int_bound", "interval_of", "linear_in", "struct_equal",
    "struct_key", "to_poly", "uses_var",
]

#: Known variable ranges: ``var -> (lo, hi)``, both inclusive; ``None`` for an unbounded side.
Bounds = Mapping[E.Var, tuple[int | None, int | None]]

INF = math.inf
Interval = tuple[Any, Any]  # (int or -inf, int or +inf)


# ---- structural equality ------------------------------------------------------------------



def struct_key(e: Any) -> Any:
    """A hashable key equal for structurally equal expressions (variables and buffers by
    identity)."""
    if isinstance(e, E.IntImm):
        return ("i", e.value, e.dtype)
    if isinstance(e, E.FloatImm):
        return ("f", repr(e.value), e.dtype)
    if isinstance(e, E.Var):
        return ("v", id(e))
    if isinstance(e, E.BinaryOp):
        return (type(e).__name__, struct_key(e.a), struct_key(e.b))
    if isinstance(e, E.Not):
        return ("not", struct_key(e.a))
    if isinstance(e, E.Select):
        return ("sel", struct_key(e.condition), struct_key(e.true_value),
                struct_key(e.false_value))
    if isinstance(e, E.Cast):
        return ("cast", e.dtype, struct_key(e.value))
    if isinstance(e, E.Call):
        return ("call", e.name, e.dtype, tuple(struct_key(a) for a in e.args))
    if isinstance(e, E.BufferLoad):
        return ("load", id(e.buffer), tuple(struct_key(i) for i in e.indices))
    if isinstance(e, E.ProducerLoad):
        return ("pload", id(e.producer), tuple(struct_key(i) for i in e.indices))
    if isinstance(e, E.Ramp):
        return ("ramp", struct_key(e.base), struct_key(e.stride), e.lanes)
    if isinstance(e, E.Broadcast):
        return ("bcast", struct_key(e.value), e.lanes)
    if isinstance(e, E.Let):
        return ("let", id(e.var), struct_key(e.value), struct_key(e.body))
    return ("obj", id(e))


def struct_equal(a: Any, b: Any) -> bool:
    """Whether two expressions have the same structure (``struct_key(a) == struct_key(b)``,
    compared node by node: shared subtrees and the first difference end the walk early)."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    same = _SAME.get(ta)
    if same is not None:
        if ta is tb:
            return same(a, b)
        if tb in _SAME:  # the keys of these classes start with different tags
            return False
    return struct_key(a) == struct_key(b)


def _same_binary(a: Any, b: Any) -> bool:
    return struct_equal(a.a, b.a) and struct_equal(a.b, b.b)


def _same_seq(xs: Any, ys: Any) -> bool:
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if not struct_equal(x, y):
            return False
    return True


#: Structural equality of two nodes of the same class (the cases of :func:`struct_key`).
_SAME: dict[type, Callable[[Any, Any], bool]] = {
    E.IntImm: lambda a, b: a.value == b.value and a.dtype == b.dtype,
    E.FloatImm: lambda a, b: repr(a.value) == repr(b.value) and a.dtype == b.dtype,
    E.Var: lambda a, b: False,  # by identity
    E.Not: lambda a, b: struct_equal(a.a, b.a),
    E.Select: lambda a, b: (struct_equal(a.condition, b.condition)
                            and struct_equal(a.true_value, b.true_value)
                            and struct_equal(a.false_value, b.false_value)),
    E.Cast: lambda a, b: a.dtype == b.dtype and struct_equal(a.value, b.value),
    E.Call: lambda a, b: (a.name == b.name and a.dtype == b.dtype
                          and _same_seq(a.args, b.args)),
    E.BufferLoad: lambda a, b: a.buffer is b.buffer and _same_seq(a.indices, b.indices),
    E.ProducerLoad: lambda a, b: (a.producer is b.producer
                                  and _same_seq(a.indices, b.indices)),
    E.Ramp: lambda a, b: (a.lanes == b.lanes and struct_equal(a.base, b.base)
                          and struct_equal(a.stride, b.stride)),
    E.Broadcast: lambda a, b: a.lanes == b.lanes and struct_equal(a.value, b.value),
    E.Let: lambda a, b: (a.var is b.var and struct_equal(a.value, b.value)
                         and struct_equal(a.body, b.body)),
}
_SAME.update({cls: _same_binary for cls in (
    E.Add, E.Sub, E.Mul, E.Div, E.FloorDiv, E.FloorMod, E.Min, E.Max, E.EQ, E.NE, E.LT,
    E.LE, E.GT, E.GE, E.And, E.Or)})


def uses_var(node: Any, var: E.Var) -> bool:
    """Whether ``var`` occurs in ``node`` (an expression or statement); stops at the first
    occurrence (the simplifier asks it of every ``let``'s whole body)."""
    return contains(node, var)


# ---- interval arithmetic ------------------------------------------------------------------


def _mul(a: Any, b: Any) -> Any:
    if a == 0 or b == 0:
        return 0
    return a * b


def _imul(x: Interval, y: Interval) -> Interval:
    cands = [_mul(x[0], y[0]), _mul(x[0], y[1]), _mul(x[1], y[0]), _mul(x[1], y[1])]
    return min(cands), max(cands)


def _fdiv(a: Any, c: int) -> Any:
    if a in (INF, -INF):
        return a if c > 0 else -a
    return a // c


def _dtype_interval(dtype: str) -> Interval:
    if dtype == "bool":
        return 0, 1
    if E.is_int(dtype) and E.bits(dtype) < 64:
        b = E.bits(dtype)
        if E.is_unsigned(dtype):
            return 0, (1 << b) - 1
        return -(1 << (b - 1)), (1 << (b - 1)) - 1
    if E.is_unsigned(dtype):
        return 0, INF
    return -INF, INF


def _norm(b: tuple[int | None, int | None]) -> Interval:
    lo, hi = b
    return (-INF if lo is None else lo), (INF if hi is None else hi)


def interval_of(e: E.PrimExpr, bounds: Bounds | None = None) -> Interval:
    """Like :func:`const_int_bound` but with ``-inf``/``inf`` (floats) for unbounded sides.
    For a vector expression the bound covers every lane."""
    return _Bounder(bounds or {}).bound(e)


def _interval_normalized(e: E.PrimExpr, bounds: dict[E.Var, Interval]) -> Interval:
    """:func:`interval_of` for ``bounds`` already in ``(-inf/int, int/inf)`` form (no None),
    used as is rather than copied (a let inside ``e`` narrows it only while it is read)."""
    return _Bounder(bounds, normalized=True).bound(e)


def const_int_bound(e: E.PrimExpr, bounds: Bounds | None = None) -> tuple[int | None, int | None]:
    """Constant ``(lo, hi)`` with ``lo <= e <= hi`` for every value of the variables within
    ``bounds`` (``None`` for an unknown side)."""
    lo, hi = interval_of(e, bounds)
    return (None if lo == -INF else int(lo)), (None if hi == INF else int(hi))


class _Bounder:
    #: node class -> its ``b_<Class>`` function (or None), found once per class
    _methods: dict[type, Any] = {}

    def __init__(self, bounds: Bounds, normalized: bool = False) -> None:
        self.bounds: dict[E.Var, Interval] = bounds if normalized else {  # type: ignore
            v: _norm(b) for v, b in bounds.items()}

    def bound(self, e: E.PrimExpr) -> Interval:
        if E.is_float(e.dtype):
            return -INF, INF
        cls = type(e)
        try:
            method = self._methods[cls]
        except KeyError:
            found = method_for(self, "b_", e)
            method = self._methods[cls] = found.__func__ if found is not None else None
        if method is None:
            if isinstance(e, E.CmpOp | E.And | E.Or):
                return 0, 1
            return _dtype_interval(e.dtype)
        return method(self, e)

    def b_IntImm(self, e: E.IntImm) -> Interval:
        return e.value, e.value

    def b_Var(self, e: E.Var) -> Interval:
        if e in self.bounds:
            return self.bounds[e]
        return _dtype_interval(e.dtype)

    def b_Add(self, e: E.Add) -> Interval:
        a, b = self.bound(e.a), self.bound(e.b)
        return a[0] + b[0], a[1] + b[1]

    def b_Sub(self, e: E.Sub) -> Interval:
        a, b = self.bound(e.a), self.bound(e.b)
        return a[0] - b[1], a[1] - b[0]

    def b_Mul(self, e: E.Mul) -> Interval:
        return _imul(self.bound(e.a), self.bound(e.b))

    def b_FloorDiv(self, e: E.FloorDiv) -> Interval:
        a, d = self.bound(e.a), self.bound(e.b)
        if d[0] == d[1] and d[0] not in (0, INF, -INF):
            c = d[0]
            lo, hi = _fdiv(a[0], c), _fdiv(a[1], c)
            return min(lo, hi), max(lo, hi)
        if d[0] > 0 and a[0] >= 0:
            return (0 if d[1] == INF else _fdiv(a[0], d[1])), _fdiv(a[1], d[0])
        return _dtype_interval(e.dtype)

    def b_FloorMod(self, e: E.FloorMod) -> Interval:
        a, d = self.bound(e.a), self.bound(e.b)
        if d[0] > 0:
            if a[0] >= 0 and a[1] < d[0]:
                return a
            return 0, d[1] - 1 if d[1] != INF else min(INF, a[1] if a[0] >= 0 else INF)
        if d[1] < 0:
            return d[0] + 1, 0
        return _dtype_interval(e.dtype)

    def b_Min(self, e: E.Min) -> Interval:
        a, b = self.bound(e.a), self.bound(e.b)
        return min(a[0], b[0]), min(a[1], b[1])

    def b_Max(self, e: E.Max) -> Interval:
        a, b = self.bound(e.a), self.bound(e.b)
        return max(a[0], b[0]), max(a[1], b[1])

    def b_Select(self, e: E.Select) -> Interval:
        a, b = self.bound(e.true_value), self.bound(e.false_value)
        return min(a[0], b[0]), max(a[1], b[1])

    def b_Cast(self, e: E.Cast) -> Interval:
        target = _dtype_interval(e.dtype)
        if E.is_float(e.value.dtype):
            return target
        src = self.bound(e.value)
        if src[0] >= target[0] and src[1] <= target[1]:
            return src
        return target

    def b_Ramp(self, e: E.Ramp) -> Interval:
        base, stride = self.bound(e.base), self.bound(e.stride)
        span = _imul(stride, (0, e.lanes - 1))
        return base[0] + span[0], base[1] + span[1]

    def b_Broadcast(self, e: E.Broadcast) -> Interval:
        return self.bound(e.value)

    def b_Let(self, e: E.Let) -> Interval:
        saved = self.bounds.get(e.var)
        self.bounds[e.var] = self.bound(e.value)
        try:
            return self.bound(e.body)
        finally:
            if saved is None:
                self.bounds.pop(e.var, None)
            else:
                self.bounds[e.var] = saved

    def b_Not(self, e: E.Not) -> Interval:
        return 0, 1


# ---- polynomials --------------------------------------------------------------------------


class Poly:
    """``sum(coeff * prod(atoms)) + const`` over integers of one ``dtype``.

    ``terms`` maps a monomial key (sorted atom keys) to ``[coeff, atoms]``; insertion order is
    kept so that rebuilt expressions follow the source order."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, dtype: str, const: int = 0) -> None:
        self.terms: dict[tuple, list[Any]] = {}
        self.const = const
        self.dtype = dtype

    @staticmethod
    def atom(e: E.PrimExpr) -> Poly:
        """The polynomial ``1 * e``."""
        p = Poly(e.dtype)
        p.terms[(struct_key(e),)] = [1, [e]]
        return p

    def copy(self) -> Poly:
        """An independent copy."""
        p = Poly(self.dtype, self.const)
        p.terms = {k: [c, list(a)] for k, (c, a) in self.terms.items()}
        return p

    def is_const(self) -> bool:
        """Whether there are no variable terms."""
        return not self.terms

    def add(self, other: Poly, sign: int = 1) -> Poly:
        """``self + sign * other``."""
        p = self.copy()
        p.const += sign * other.const
        for k, (c, atoms) in other.terms.items():
            if k in p.terms:
                p.terms[k][0] += sign * c
                if p.terms[k][0] == 0:
                    del p.terms[k]
            else:
                p.terms[k] = [sign * c, list(atoms)]
        return p

    def _iadd(self, other: Poly, sign: int = 1) -> Poly:
        """``self += sign * other`` in place (for polynomials nobody else holds)."""
        self.const += sign * other.const
        terms = self.terms
        for k, (c, atoms) in other.terms.items():
            t = terms.get(k)
            if t is not None:
                t[0] += sign * c
                if t[0] == 0:
                    del terms[k]
            else:
                terms[k] = [sign * c, list(atoms)]
        return self

    def _iscale(self, c: int) -> Poly:
        """``self *= c`` in place (for polynomials nobody else holds)."""
        self.const *= c
        if c == 0:
            self.terms = {}
        else:
            for t in self.terms.values():
                t[0] *= c
        return self

    def scale(self, c: int) -> Poly:
        """``self * c``."""
        p = Poly(self.dtype, self.const * c)
        if c != 0:
            p.terms = {k: [coef * c, list(a)] for k, (coef, a) in self.terms.items()}
        return p

    def mul(self, other: Poly) -> Poly:
        """``self * other``, expanded."""
        if other.is_const():
            return self.scale(other.const)
        if self.is_const():
            return other.scale(self.const)
        p = Poly(self.dtype, self.const * other.const)
        for k1, (c1, a1) in self.terms.items():
            p._iadd(_mono(self.dtype, c1 * other.const, k1, a1))
            for k2, (c2, a2) in other.terms.items():
                key = tuple(sorted(k1 + k2, key=repr))
                p._iadd(_mono(self.dtype, c1 * c2, key, a1 + a2))
        for k2, (c2, a2) in other.terms.items():
            p._iadd(_mono(self.dtype, c2 * self.const, k2, a2))
        return p

    def gcd(self) -> int:
        """The gcd of the non-constant coefficients (0 when there are none)."""
        g = 0
        for c, _ in self.terms.values():
            g = math.gcd(g, c)
        return g

    def split(self, c: int) -> tuple[Poly, Poly]:
        """``(q, r)`` with ``self == q * c + r``: ``q`` collects the terms (and the part of the
        constant) divisible by ``c``; ``r`` the rest, its constant in ``[0, c)``."""
        q, r = Poly(self.dtype, self.const // c), Poly(self.dtype, self.const % c)
        for k, (coef, atoms) in self.terms.items():
            if coef % c == 0:
                q.terms[k] = [coef // c, list(atoms)]
            else:
                r.terms[k] = [coef, list(atoms)]
        return q, r

    def bound(self, bounds: Bounds | None = None) -> Interval:
        """``(lo, hi)`` over ``bounds`` (``-inf``/``inf`` when unbounded)."""
        return self._bound(_Bounder(bounds or {}))

    def _bound(self, b: _Bounder) -> Interval:
        lo = hi = self.const
        for coef, atoms in self.terms.values():
            iv: Interval = (coef, coef)
            for a in atoms:
                iv = _imul(iv, b.bound(a))
            lo, hi = lo + iv[0], hi + iv[1]
        return lo, hi

    def to_expr(self) -> E.PrimExpr:
        """The polynomial as an expression: positive terms, then the constant, then the
        negative terms (``i*8 + j + 3``, ``n - i - 1``)."""
        dt = self.dtype

        def term(coef: int, atoms: list[E.PrimExpr]) -> E.PrimExpr:
            t = atoms[0]
            for a in atoms[1:]:
                t = E.Mul(t, a)
            return t if coef == 1 else E.Mul(t, E.IntImm(coef, dt))

        pos = [(c, a) for c, a in self.terms.values() if c > 0]
        neg = [(-c, a) for c, a in self.terms.values() if c < 0]
        if not pos and not neg:
            return E.IntImm(self.const, dt)
        if not pos and len(neg) == 1 and self.const == 0:
            c, a = neg[0]
            return term(-c, a)
        out: E.PrimExpr | None = None
        for c, a in pos:
            t = term(c, a)
            out = t if out is None else E.Add(out, t)
        const_used = False
        if out is None or self.const > 0:
            k = E.IntImm(self.const, dt)
            out = k if out is None else E.Add(out, k)
            const_used = True
        for c, a in neg:
            out = E.Sub(out, term(c, a))
        if not const_used and self.const < 0:
            out = E.Sub(out, E.IntImm(-self.const, dt))
        return out


def _is_imm(e: Any, value: int, dtype: str) -> bool:
    """Whether ``e`` is structurally ``IntImm(value, dtype)``."""
    return isinstance(e, E.IntImm) and e.value == value and e.dtype == dtype


def _term_is(e: Any, coef: int, atoms: list[E.PrimExpr], dtype: str) -> bool:
    """Whether ``e`` is structurally the term ``to_expr`` builds of ``coef * prod(atoms)``."""
    if coef != 1:
        if type(e) is not E.Mul or not _is_imm(e.b, coef, dtype):
            return False
        e = e.a
    for a in reversed(atoms[1:]):
        if type(e) is not E.Mul or not struct_equal(e.b, a):
            return False
        e = e.a
    return struct_equal(e, atoms[0])


def poly_is(p: Poly, e: Any) -> bool:
    """Whether ``p.to_expr()`` would be structurally equal to ``e``, found without building it
    (False may also mean "not sure": then compare the built expression)."""
    dt = p.dtype
    pos = [(c, a) for c, a in p.terms.values() if c > 0]
    neg = [(-c, a) for c, a in p.terms.values() if c < 0]
    if not pos and not neg:
        return _is_imm(e, p.const, dt)
    if not pos and len(neg) == 1 and p.const == 0:
        c, a = neg[0]
        return _term_is(e, -c, a, dt)
    # the steps of to_expr, left to right: (operator joining it, coefficient, atoms or None
    # for the constant)
    steps: list[tuple[Any, int, list[E.PrimExpr] | None]] = [(E.Add, c, a) for c, a in pos]
    const_used = not pos or p.const > 0
    if const_used:
        steps.append((E.Add, p.const, None))
    steps.extend((E.Sub, c, a) for c, a in neg)
    if not const_used and p.const < 0:
        steps.append((E.Sub, -p.const, None))
    for i in range(len(steps) - 1, -1, -1):
        op, coef, atoms = steps[i]
        if i:
            if type(e) is not op:
                return False
            part, e = e.b, e.a
        else:
            part = e
        if not (_is_imm(part, coef, dt) if atoms is None else _term_is(part, coef, atoms, dt)):
            return False
    return True


def _mono(dtype: str, coef: int, key: tuple, atoms: list[E.PrimExpr]) -> Poly:
    p = Poly(dtype)
    if coef != 0:
        p.terms[key] = [coef, list(atoms)]
    return p


def to_poly(e: E.PrimExpr, atom: Callable[[E.PrimExpr], E.PrimExpr] | None = None,
            expand_limit: int = 1) -> Poly:
    """The polynomial of an integer scalar expression. ``atom`` maps each non-polynomial
    sub-expression before it becomes an atom (the simplifier passes itself); a product of two
    non-constant polynomials is expanded only when one side has at most ``expand_limit``
    monomials, otherwise it becomes an atom."""
    return _poly_of(e, atom, expand_limit)


def _poly_of(x: E.PrimExpr, atom: Callable[[E.PrimExpr], E.PrimExpr] | None,
             expand_limit: int) -> Poly:
    """:func:`to_poly`'s recursion (a module function: a recursive closure would be a
    reference cycle left for the garbage collector on every call). Every Poly it returns is
    a new one, which it may then change in place."""
    if isinstance(x, E.IntImm):
        return Poly(x.dtype, x.value)
    if isinstance(x, E.Add):
        return _poly_of(x.a, atom, expand_limit)._iadd(_poly_of(x.b, atom, expand_limit))
    if isinstance(x, E.Sub):
        return _poly_of(x.a, atom, expand_limit)._iadd(_poly_of(x.b, atom, expand_limit), -1)
    if isinstance(x, E.Mul):
        pa, pb = _poly_of(x.a, atom, expand_limit), _poly_of(x.b, atom, expand_limit)
        if not pb.terms:  # what pa.mul(pb) makes, in place
            return pa._iscale(pb.const)
        if not pa.terms:
            return pb._iscale(pa.const)
        na = len(pa.terms) + (pa.const != 0)
        nb = len(pb.terms) + (pb.const != 0)
        if min(na, nb) <= expand_limit:
            return pa.mul(pb)
        return Poly.atom(E.Mul(pa.to_expr(), pb.to_expr()))
    y = atom(x) if atom is not None else x
    if y is not x and isinstance(y, E.IntImm | E.Add | E.Sub | E.Mul):
        return _poly_of(y, None, expand_limit)
    if isinstance(y, E.IntImm):
        return Poly(y.dtype, y.value)
    return Poly.atom(y)


def exact_quotient(num: E.PrimExpr, den: E.PrimExpr) -> E.PrimExpr | None:
    """``num / den`` as an expression when ``den`` is one monomial (a positive coefficient
    times atoms) that divides every term of the polynomial ``num`` exactly (``(batch * h *
    8) / (h * 8)`` is ``batch``); None otherwise. No division is left to run: the quotient
    holds for every value of the atoms, ``den`` zero included (``num`` is then zero too)."""
    pn, pd = to_poly(num), to_poly(den)
    if pd.const != 0 or len(pd.terms) != 1 or pn.const != 0:
        return None
    (cd, ad), = pd.terms.values()
    if cd <= 0:
        return None
    out = Poly(pn.dtype)
    for c, atoms in pn.terms.values():
        if c % cd:
            return None
        rest = list(atoms)
        for a in ad:
            k = struct_key(a)
            at = next((i for i, x in enumerate(rest) if struct_key(x) == k), None)
            if at is None:
                return None
            del rest[at]
        if not rest:
            out.const += c // cd
            continue
        key = tuple(sorted((struct_key(x) for x in rest), key=repr))
        out = out.add(_mono(pn.dtype, c // cd, key, rest))
    return out.to_expr()


def linear_in(e: E.PrimExpr, var: E.Var) -> tuple[E.PrimExpr, E.PrimExpr] | None:
    """``(base, stride)`` with ``e == base + var * stride`` and neither containing ``var``, or
    None when ``e`` is not linear in ``var`` (``var // 4``, ``var * var``, a load indexed by
    ``var``, ...). Only integer scalar expressions are linear."""
    if not E.is_int(e.dtype) or e.lanes != 1:
        return (e, E.IntImm(0, var.dtype)) if not uses_var(e, var) else None
    p = to_poly(e)
    base = Poly(p.dtype, p.const)
    stride = Poly(p.dtype)
    for k, (coef, atoms) in p.terms.items():
        n = sum(1 for a in atoms if a is var)
        others = [a for a in atoms if a is not var]
        if any(uses_var(a, var) for a in others) or n > 1:
            return None
        if n == 0:
            base.terms[k] = [coef, list(atoms)]
        elif not others:
            stride.const += coef
        else:
            stride = stride.add(_mono(p.dtype, coef, tuple(struct_key(a) for a in others),
                                      others))
    return base.to_expr(), stride.to_expr()
