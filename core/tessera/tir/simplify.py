"""The TIR simplifier (TVM's ``arith.Analyzer.simplify`` and ``tir.transform.Simplify``).

:func:`simplify` rewrites an expression, statement or function into an equivalent, simpler one:

* constants fold with the exact numpy semantics of their dtype (wrap-around, float32 rounding);
* identities: ``x + 0``, ``x * 1``, ``x * 0`` (integers), ``x // 1``, ``x % 1``, ``min(x, x)``,
  ``select(c, x, x)``, ``!!x``, ``x && true`` ...;
* integer scalar ``+ - *`` go through a canonical polynomial, so terms cancel and combine
  (``(i*8 + j) - i*8 -> j``) and ``(x // c) * c + x % c -> x`` (``c`` a constant or any
  other expression: a run-time size);
* ``(q*c + r) // c -> q + r // c`` and ``(q*c + r) % c -> r % c``; then ``r // c -> k`` and
  ``r % c -> r - k*c`` when the bounds of ``r`` (from enclosing loops, lets, if-conditions and
  the caller's ``bounds``) lie in one block ``[k*c, k*c + c)``; ``(x // a) // b -> x // (a*b)``,
  ``(x % a) % b -> x % b`` when ``b`` divides ``a``;
* comparisons, ``min`` and ``max`` decided by the bounds of the difference of their operands;
  ``Select``/``IfThenElse`` with a decided condition keep only the taken branch;
* vectors: ``ramp(a, s) + x(b) -> ramp(a + b, s)``, ``ramp(b, s) * x(c) -> ramp(b*c, s*c)``,
  ``ramp(b, 0) -> x(b)``, operations on broadcasts become broadcasts of the scalar operation,
  ``ramp(b, s) // c`` and ``% c`` when all lanes stay in one block;
* statements: a loop gives its variable the range ``[min, min + extent - 1]``; a loop with extent
  1 becomes its body with the variable replaced by ``min``; extent 0 loops, empty sequences and
  ifs without work disappear; a ``LetStmt`` of a constant or variable is inlined, an unused one
  dropped; inside ``if c`` the facts that ``c`` gives about variables narrow their ranges
  (not inside ``select``, which evaluates both sides: a clamped load index must stay clamped).

Floating-point arithmetic is never reassociated (only folded and ``x + 0.0``/``x * 1.0``).

Symbolic extents. :func:`simplify` of a :class:`PrimFunc` starts with its size variables'
ranges (non-negative, within ``size_bounds``). A loop whose bounds mention a *symbolic* value
(a size variable, a variable with a symbolic range or without a finite constant one) gives its
variable the symbolic range ``[min, min + extent - 1]``; a let of such a value, and a linear
condition over one (inside its ``if``), give symbolic ranges too. A comparison, ``min`` or
``max`` whose constant bounds do not decide it is then bounded as TVM evaluates an int set:
each variable with a symbolic range, innermost first, is replaced by its symbolic maximum or
minimum (by the sign of its coefficient; in a product with factors that are never negative,
``b * s``, by the sign of the term's coefficient), then a ``min``/``max`` term by the operand
that bounds it on the side wanted (``max(a, b) >= a``), and the result is bounded with ``k *
(x // c)`` rewritten ``(k/c) * (x - x % c)``, which knows ``(n // 8) * 8 <= n < (n // 8) * 8 +
8``. So ``i < n`` holds in ``range(n)``, ``io*8 + ii < n`` in ``io in range(n // 8)``, ``ii in
range(8)``, ``min(n // 8, (n + 7) // 8)`` is ``n // 8``, and ``min(j + b*s, max(B*s - 1, 0))``
is ``j + b*s`` in ``b in range(B)``, ``j in range(s)`` (a Gather's clamp of an index made
from Ranges). None of this applies where no
symbolic value is involved: static kernels simplify exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import (
    INF,
    Bounds,
    Poly,
    _Bounder,
    _interval_normalized,
    _norm,
    poly_is,
    struct_equal,
    struct_key,
    to_poly,
    uses_var,
)
from tessera.tir.functor import IRMutator, nodes_of, post_order_visit, substitute
from tessera.tir.interpreter import eval_expr

__all__ = ["simplify", "func_simplifier", "Simplifier", "SymBound", "can_prove", "is_no_op",
           "NO_OP"]

#: A symbolic range of a variable: inclusive ``(lo, hi)`` expressions (None: no such bound).
SymBound = tuple[E.PrimExpr | None, E.PrimExpr | None]

#: Substitutions tried per symbolic bound query (a budget: the search branches on the several
#: bounds a variable may have).
_SYM_BUDGET = 24
#: Variables substituted one after another in one symbolic bound query.
_SYM_DEPTH = 6


def _no_op() -> S.Stmt:
    return S.Evaluate(E.IntImm(0, "int32"))


#: A statement that does nothing (what an emptied statement becomes).
NO_OP = _no_op()


def is_no_op(s: S.Stmt | None) -> bool:
    """Whether ``s`` does nothing (None, an empty sequence or an evaluated constant)."""
    if s is None:
        return True
    if isinstance(s, S.Evaluate):
        return isinstance(s.value, E.IntImm | E.FloatImm)
    if isinstance(s, S.SeqStmt):
        return all(is_no_op(x) for x in s.seq)
    return False


def _is_const(e: Any, value: int | float | None = None) -> bool:
    if isinstance(e, E.IntImm | E.FloatImm):
        return value is None or e.value == value
    return False


def _bool(v: bool, lanes: int = 1) -> E.PrimExpr:
    c = E.IntImm(int(bool(v)), "bool")
    return c if lanes == 1 else E.Broadcast(c, lanes)


def _const_bool(e: E.PrimExpr) -> bool | None:
    """True/False when ``e`` is a constant (or a broadcast constant) boolean."""
    if isinstance(e, E.Broadcast):
        e = e.value
    if isinstance(e, E.IntImm):
        return bool(e.value)
    return None


def _fold(cls: type, a: E.PrimExpr, b: E.PrimExpr | None = None,
          dtype: str | None = None) -> E.PrimExpr | None:
    """Evaluate an operation on constants with numpy semantics (None when it cannot)."""
    if cls in (E.FloorDiv, E.FloorMod) and _is_const(b, 0) and E.is_int(a.dtype):
        return None
    if cls is E.Cast:
        node: E.PrimExpr = E.Cast(dtype or a.dtype, a)
    elif b is None:
        node = cls(a)
    else:
        node = cls(a, b)
    value = eval_expr(node)
    if node.dtype == "bool":
        return E.IntImm(int(bool(value)), "bool")
    if E.is_float(node.dtype):
        return E.FloatImm(float(value), node.dtype)
    return E.IntImm(int(value), node.dtype)


#: Nodes the memo of :class:`Simplifier` skips (cheaper to visit than to look up).
_LEAVES = frozenset({type(None), E.IntImm, E.FloatImm, E.Var})

_FLIP = {E.LT: E.GE, E.LE: E.GT, E.GT: E.LE, E.GE: E.LT, E.EQ: E.NE, E.NE: E.EQ}


class Simplifier(IRMutator):
    """The rewriting engine behind :func:`simplify`; ``bounds`` holds the known variable
    ranges and grows while descending into loops, lets and ifs."""

    def __init__(self, bounds: Bounds | None = None, memo: bool = False,
                 sym_bounds: Mapping[E.Var, Sequence[SymBound]] | None = None,
                 size_vars: Iterable[E.Var] = ()) -> None:
        self.bounds: dict[E.Var, tuple[Any, Any]] = {v: _norm(b)
                                                     for v, b in (bounds or {}).items()}
        #: Run-time extents (a function's ``size_vars``): variables that make an expression
        #: symbolic (module doc, "symbolic extents").
        self.size_vars: set[E.Var] = set(size_vars)
        #: Symbolic ranges of variables (loop variables of loops with symbolic bounds, facts
        #: of conditions over symbolic values), innermost scope last.
        self.sym: dict[E.Var, list[SymBound]] = {v: list(bs)
                                                 for v, bs in (sym_bounds or {}).items() if bs}
        #: With ``memo`` (a plain Simplifier only: a subclass may read more state), what each
        #: node visited became, by (id(node), scope): a node met again in the same scope
        #: (the same ranges) gives the same result. For callers that visit the same subtrees
        #: several times (the copies of an unrolled loop body, then their sequence).
        self._memo: dict[tuple[int, int], tuple[Any, Any]] | None = \
            {} if memo and type(self) is Simplifier else None
        #: The current scope: 0 for ``bounds`` as given, else the number of
        #: (enclosing scope, the ranges a :meth:`bound_scope` set).
        self._scope = 0
        self._scopes: dict[tuple[int, tuple[Any, ...]], int] = {}
        #: id(let statement) -> (it, the variables it reads or binds): a chain of lets (a
        #: symbolic kernel's sizes, bound at its top) is walked once, not once per let.
        self._let_vars: dict[int, tuple[S.LetStmt, frozenset[E.Var]]] = {}

    def visit(self, node: Any) -> Any:
        memo = self._memo
        if memo is None or type(node) in _LEAVES:
            return IRMutator.visit(self, node)
        key = (id(node), self._scope)
        hit = memo.get(key)
        if hit is not None and hit[0] is node:
            return hit[1]
        out = IRMutator.visit(self, node)
        memo[key] = (node, out)  # holding the node keeps its id from being reused
        return out

    # -- helpers --------------------------------------------------------------------------
    @contextmanager
    def bound_scope(self, updates: dict[E.Var, tuple[Any, Any]],
                    sym: dict[E.Var, SymBound] | None = None) -> Iterator[None]:
        """Narrow variable ranges for the duration of a ``with`` block: constant ranges
        ``updates`` and symbolic ranges ``sym``."""
        saved = {v: self.bounds.get(v) for v in updates}
        for v, (lo, hi) in updates.items():
            old = self.bounds.get(v, (-INF, INF))
            self.bounds[v] = (max(old[0], lo), min(old[1], hi))
        pushed: list[E.Var] = []
        for v, b in (sym or {}).items():
            if b[0] is None and b[1] is None:
                continue
            self.sym.setdefault(v, []).append(b)
            pushed.append(v)
        scope = self._scope
        if self._memo is not None:
            key = (scope, tuple((v, self.bounds[v]) for v in updates)
                   + tuple((v, struct_key(b[0]), struct_key(b[1]))
                           for v, b in (sym or {}).items() if v in pushed))
            self._scope = self._scopes.setdefault(key, len(self._scopes) + 1)
        try:
            yield
        finally:
            self._scope = scope
            for v in reversed(pushed):
                stack = self.sym[v]
                stack.pop()
                if not stack:
                    del self.sym[v]
            for v, b in saved.items():
                if b is None:
                    self.bounds.pop(v, None)
                else:
                    self.bounds[v] = b

    def interval(self, e: E.PrimExpr) -> tuple[Any, Any]:
        """Bounds of ``e`` under the current variable ranges."""
        # ``bounds`` holds only normalised ranges (-inf/int, int/inf): no copy needed
        return _interval_normalized(e, self.bounds)

    def poly(self, e: E.PrimExpr) -> Poly:
        """The polynomial of an already simplified integer scalar expression."""
        return to_poly(e)

    def poly_interval(self, p: Poly) -> tuple[Any, Any]:
        """Bounds of a polynomial under the current variable ranges."""
        return p._bound(_Bounder(self.bounds, normalized=True))

    # -- symbolic bounds ----------------------------------------------------------------------
    def is_symbolic_var(self, v: E.Var) -> bool:
        """Whether ``v`` is a run-time value to reason about symbolically: a size variable, a
        variable with a symbolic range, or one with no finite constant range."""
        if v in self.size_vars or v in self.sym:
            return True
        b = self.bounds.get(v)
        return b is None or b[0] == -INF or b[1] == INF

    def is_symbolic(self, node: Any) -> bool:
        """Whether an expression (or the atoms of a :class:`Poly`) mentions a symbolic
        variable (:meth:`is_symbolic_var`)."""
        if isinstance(node, Poly):
            for _, atoms in node.terms.values():
                for a in atoms:
                    if self.is_symbolic(a):
                        return True
            return False
        if isinstance(node, E.Var):
            return E.is_int(node.dtype) and self.is_symbolic_var(node)
        if isinstance(node, E.IntImm | E.FloatImm):
            return False
        found = False

        def f(n: Any) -> None:
            nonlocal found
            if not found and isinstance(n, E.Var) and E.is_int(n.dtype) and \
                    self.is_symbolic_var(n):
                found = True

        post_order_visit(node, f)
        return found

    def sym_interval(self, p: Poly) -> tuple[Any, Any]:
        """Bounds of the integer polynomial ``p`` from the symbolic ranges of its variables
        (TVM's int-set evaluation): each variable with a symbolic range, innermost first, is
        replaced by its symbolic maximum or minimum (by the sign of its coefficient), then the
        result is bounded with :meth:`div_interval`. Intersected with :meth:`div_interval`
        of ``p`` itself."""
        hi = self._sym_max(p, frozenset(), 0, [_SYM_BUDGET])
        neg = self._sym_max(p.scale(-1), frozenset(), 0, [_SYM_BUDGET])
        return -neg, hi

    def _sym_max(self, p: Poly, used: frozenset, depth: int, budget: list[int]) -> Any:
        best = self.div_interval(p)[1]
        if depth >= _SYM_DEPTH or budget[0] <= 0:
            return best
        for v in reversed(list(self.sym)):
            if v in used:
                continue
            found = self._monotone_in(p, v)
            if found is None:
                continue
            side, terms = found
            cands = [b[side] for b in reversed(self.sym[v]) if b[side] is not None]
            if not cands:
                continue
            for c in cands:
                if budget[0] <= 0:
                    break
                budget[0] -= 1
                q = p.copy()
                for key in terms:
                    coef, atoms = q.terms.pop(key)
                    rest = Poly(p.dtype, coef)
                    for a in atoms:
                        if struct_key(a) != struct_key(v):
                            rest = rest.mul(Poly.atom(a))
                    q._iadd(rest.mul(to_poly(c)))
                best = min(best, self._sym_max(q, used | {v}, depth + 1, budget))
            return best
        # ``min(a, b) <= a, b`` and ``max(a, b) >= a, b``: a term of one such atom whose
        # coefficient asks for that side is replaced by each operand in turn
        for key, (coef, atoms) in p.terms.items():
            if key in used or len(atoms) != 1:
                continue
            a = atoms[0]
            if not (isinstance(a, E.Min) and coef > 0 or isinstance(a, E.Max) and coef < 0):
                continue
            for c in (a.a, a.b):
                if budget[0] <= 0:
                    break
                budget[0] -= 1
                q = p.copy()
                del q.terms[key]
                q._iadd(to_poly(c).scale(coef))
                best = min(best, self._sym_max(q, used | {key}, depth + 1, budget))
            return best
        return best

    def _monotone_in(self, p: Poly, v: E.Var) -> tuple[int, list[tuple]] | None:
        """Whether ``p`` grows (side 1) or shrinks (side 0) with ``v`` over non-negative
        values of its other factors: ``(side, keys of the terms holding v)``; None where
        ``v`` is in no term, twice in one, or in terms that disagree (or whose other factors
        may be negative)."""
        vk = struct_key(v)
        side = None
        terms = []
        for key, (coef, atoms) in p.terms.items():
            if vk not in key:
                continue
            if key.count(vk) != 1:
                return None
            if len(atoms) > 1 and any(self.interval(a)[0] < 0 for a in atoms
                                      if struct_key(a) != vk):
                return None
            s = 1 if coef > 0 else 0
            if side is not None and s != side:
                return None
            side = s
            terms.append(key)
        return None if side is None else (side, terms)

    def div_interval(self, p: Poly) -> tuple[Any, Any]:
        """:meth:`poly_interval` made tighter for terms ``k * (x // c)`` (constant ``c > 0``):
        each is rewritten ``(k/c) * (x - x % c)`` (the polynomial scaled so that ``k/c`` is an
        integer), so that ``(n // 8) * 8 - n`` is bounded by ``[-7, 0]`` and
        ``((n + 7) // 8) * 8 - n`` by ``[0, 7]``."""
        lo, hi = self.poly_interval(p)
        divs = [(key, coef, atoms[0]) for key, (coef, atoms) in p.terms.items()
                if len(atoms) == 1 and type(atoms[0]) is E.FloorDiv
                and isinstance(atoms[0].b, E.IntImm) and atoms[0].b.value > 0
                and _signed(atoms[0].dtype)]
        if not divs:
            return lo, hi
        scale = 1
        for _, coef, d in divs:
            c = d.b.value
            scale = math.lcm(scale, c // math.gcd(c, coef))
        q = p.scale(scale)
        for key, _, d in divs:
            # the term's coefficient now: an earlier rewrite may have changed or cancelled it
            # (``(w + 3) // 4`` with ``w`` itself a division among the terms)
            current = q.terms.get(key)
            if current is None or current[0] % d.b.value:
                continue  # left as it is: still bounded, less tightly
            k = current[0] // d.b.value
            del q.terms[key]
            q._iadd(to_poly(d.a).scale(k))
            q._iadd(Poly.atom(E.FloorMod(d.a, d.b)).scale(-k))
        qlo, qhi = self.poly_interval(q)
        if qlo != -INF:
            lo = max(lo, -((-qlo) // scale))
        if qhi != INF:
            hi = min(hi, qhi // scale)
        return lo, hi

    def loop_sym_bound(self, mn: E.PrimExpr, ext: E.PrimExpr) -> SymBound | None:
        """The symbolic range ``[mn, mn + ext - 1]`` of a loop variable, or None when the loop
        bounds mention no symbolic variable (a constant range says all)."""
        if isinstance(mn, E.IntImm) and isinstance(ext, E.IntImm):
            return None
        if not (self.is_symbolic(mn) or self.is_symbolic(ext)):
            return None
        hi = self.binop(E.Sub, self.binop(E.Add, mn, ext), E.IntImm(1, ext.dtype))
        return (None if isinstance(mn, E.IntImm) else mn), hi

    def sym_facts(self, cond: E.PrimExpr, positive: bool) -> dict[E.Var, SymBound]:
        """Symbolic ranges of variables implied by ``cond`` being ``positive``, for
        conditions over symbolic values (``io*8 + ii < n`` gives ``ii <= n - io*8 - 1`` and
        ``io <= (n - ii - 1) // 8``)."""
        out: dict[E.Var, SymBound] = {}

        def merge(new: dict[E.Var, SymBound]) -> None:
            for v, (lo, hi) in new.items():
                olo, ohi = out.get(v, (None, None))
                out[v] = (olo if olo is not None else lo, ohi if ohi is not None else hi)

        if isinstance(cond, E.Not):
            return self.sym_facts(cond.a, not positive)
        if isinstance(cond, E.And) and positive or isinstance(cond, E.Or) and not positive:
            merge(self.sym_facts(cond.a, positive))
            merge(self.sym_facts(cond.b, positive))
            return out
        if not isinstance(cond, E.CmpOp) or cond.lanes != 1 or not _signed(cond.a.dtype):
            return out
        cls = type(cond) if positive else _FLIP[type(cond)]
        if cls is E.NE:
            return out
        p = self.poly(cond.a).add(self.poly(cond.b), -1)  # p OP 0
        if not self.is_symbolic(p):
            return out
        if cls in (E.GT, E.GE):
            p = p.scale(-1)
            cls = E.LT if cls is E.GT else E.LE
        if cls is E.LT:
            p = p.add(Poly(p.dtype, 1))
        dt = p.dtype
        for key, (coef, atoms) in p.terms.items():
            if len(atoms) != 1 or not isinstance(atoms[0], E.Var):
                continue
            var = atoms[0]
            rest = p.copy()
            del rest.terms[key]
            if rest.is_const():
                continue  # the constant range says it all
            # coef * var + rest <= 0 (and >= 0 for EQ)
            upper = _div_bound(rest.scale(-1), coef, dt) if coef > 0 else \
                _div_bound(rest, -coef, dt, ceil=True)
            other = None
            if cls is E.EQ:
                other = _div_bound(rest.scale(-1), coef, dt, ceil=True) if coef > 0 else \
                    _div_bound(rest, -coef, dt)
            if coef > 0:
                merge({var: (other, upper)})
            else:
                merge({var: (upper, other)})
        return out

    @staticmethod
    def _int_scalar(e: E.PrimExpr) -> bool:
        return E.is_int(e.dtype) and e.lanes == 1

    # -- integer polynomials ----------------------------------------------------------------
    def _poly_expr(self, e: E.PrimExpr) -> E.PrimExpr:
        p = self._fuse_divmod(to_poly(e, atom=self.visit))
        if poly_is(p, e):
            return e
        out = p.to_expr()
        return e if struct_equal(out, e) else out

    def _fuse_divmod(self, p: Poly) -> Poly:
        """``(x // c) * (k*c) + (x % c) * k -> x * k``; with a divisor ``s`` that is not a
        constant, ``(x // s) * s * k + (x % s) * k -> x * k`` (true wherever ``x // s`` is
        defined: a run-time size divides an index expanded back from its quotient and
        remainder)."""
        mods = [(key, coef, atoms[0]) for key, (coef, atoms) in p.terms.items()
                if len(atoms) == 1 and isinstance(atoms[0], E.FloorMod)
                and (not isinstance(atoms[0].b, E.IntImm) or atoms[0].b.value > 0)]
        for key, coef, mod in mods:
            div = E.FloorDiv(mod.a, mod.b)
            if isinstance(mod.b, E.IntImm):
                div_key: tuple = (struct_key(div),)
                want = coef * mod.b.value
            else:
                div_key = tuple(sorted((struct_key(div), struct_key(mod.b)), key=repr))
                want = coef
            if key in p.terms and div_key in p.terms and p.terms[div_key][0] == want:
                p = p.copy()
                del p.terms[key]
                del p.terms[div_key]
                p = p.add(to_poly(mod.a).scale(coef))
        return p

    # -- expressions ----------------------------------------------------------------------
    def visit_Add(self, e: E.Add) -> E.PrimExpr:
        if self._int_scalar(e):
            return self._poly_expr(e)
        return self.generic_binary(e)

    def visit_Sub(self, e: E.Sub) -> E.PrimExpr:
        if self._int_scalar(e):
            return self._poly_expr(e)
        return self.generic_binary(e)

    def visit_Mul(self, e: E.Mul) -> E.PrimExpr:
        if self._int_scalar(e):
            return self._poly_expr(e)
        return self.generic_binary(e)

    def generic_binary(self, e: E.BinaryOp) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        out = self.binop(type(e), a, b)
        if a is e.a and b is e.b and type(out) is type(e) and out.a is a and out.b is b:
            return e
        return out

    visit_Div = visit_FloorDiv = visit_FloorMod = visit_Min = visit_Max = generic_binary
    visit_EQ = visit_NE = visit_LT = visit_LE = visit_GT = visit_GE = generic_binary
    visit_And = visit_Or = generic_binary

    def binop(self, cls: type, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
        """``a cls b`` simplified, for simplified operands ``a`` and ``b``."""
        if a.lanes != b.lanes:
            if a.lanes == 1:
                a = self.broadcast(a, b.lanes)
            elif b.lanes == 1:
                b = self.broadcast(b, a.lanes)
        if _is_const(a) and _is_const(b):
            folded = _fold(cls, a, b)
            if folded is not None:
                return folded
        if a.lanes > 1:
            out = self._vector_binop(cls, a, b)
            if out is not None:
                return out
            return E._binary(cls, a, b)
        rule = getattr(self, "_rule_" + cls.__name__, None)
        if rule is not None:
            out = rule(a, b)
            if out is not None:
                return out
        return E._binary(cls, a, b)

    def broadcast(self, e: E.PrimExpr, lanes: int) -> E.PrimExpr:
        """``e`` repeated over ``lanes`` (``e`` itself for one lane)."""
        return e if lanes == 1 else E.Broadcast(e, lanes)

    # scalar rules (operands simplified; None means "no rewrite")
    def _rule_Add(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        if E.is_int(a.dtype):
            return self._fuse_divmod(self.poly(a).add(self.poly(b))).to_expr()
        if _is_const(b, 0):
            return a
        if _is_const(a, 0):
            return b
        return None

    def _rule_Sub(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        if E.is_int(a.dtype):
            return self._fuse_divmod(self.poly(a).add(self.poly(b), -1)).to_expr()
        if _is_const(b, 0):
            return a
        return None

    def _rule_Mul(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        if E.is_int(a.dtype):
            return to_poly(E.Mul(a, b)).to_expr()
        if _is_const(b, 1):
            return a
        if _is_const(a, 1):
            return b
        return None

    def _rule_Div(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        return a if _is_const(b, 1) else None

    def _rule_FloorDiv(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        if not _signed(a.dtype):
            return None
        if not isinstance(b, E.IntImm):
            if struct_equal(a, b) and self.interval(b)[0] > 0:
                return E.IntImm(1, a.dtype)
            return None
        c = b.value
        if c == 1:
            return a
        if c <= 0:
            return None
        q, r = self.poly(a).split(c)
        lo, hi = self.poly_interval(r)
        if lo != -INF and hi != INF and lo // c == hi // c:
            return q.add(Poly(a.dtype, lo // c)).to_expr()
        rest = r.to_expr()
        if isinstance(rest, E.FloorDiv) and isinstance(rest.b, E.IntImm) and rest.b.value > 0:
            rest = E.FloorDiv(rest.a, E.IntImm(rest.b.value * c, a.dtype))
        else:
            g = math.gcd(r.gcd(), r.const, c) if r.terms else 0
            if g > 1 and r.const % g == 0:
                # (g*x) // (g*d) == x // d
                rest = self.binop(E.FloorDiv, self._div_exact(r, g).to_expr(),
                                  E.IntImm(c // g, a.dtype))
            else:
                rest = E.FloorDiv(rest, b)
        if q.is_const() and q.const == 0:
            return rest
        return q.add(Poly.atom(rest)).to_expr()

    @staticmethod
    def _div_exact(p: Poly, g: int) -> Poly:
        out = Poly(p.dtype, p.const // g)
        out.terms = {k: [c // g, list(a)] for k, (c, a) in p.terms.items()}
        return out

    def _rule_FloorMod(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        if not _signed(a.dtype):
            return None
        if not isinstance(b, E.IntImm):
            if struct_equal(a, b):
                return E.IntImm(0, a.dtype)
            return None
        c = b.value
        if c == 1:
            return E.IntImm(0, a.dtype)
        if c <= 0:
            return None
        _, r = self.poly(a).split(c)
        lo, hi = self.poly_interval(r)
        if lo != -INF and hi != INF and lo // c == hi // c:
            return r.add(Poly(a.dtype, -(lo // c) * c)).to_expr()
        rest = r.to_expr()
        if isinstance(rest, E.FloorMod) and isinstance(rest.b, E.IntImm) and \
                rest.b.value > 0 and rest.b.value % c == 0:
            return self.binop(E.FloorMod, rest.a, b)
        g = math.gcd(r.gcd(), r.const, c) if r.terms else 0
        if g > 1 and r.const % g == 0:
            # (g*x) % (g*d) == g * (x % d)
            inner = self.binop(E.FloorMod, self._div_exact(r, g).to_expr(),
                               E.IntImm(c // g, a.dtype))
            if not isinstance(inner, E.FloorMod):
                return self.binop(E.Mul, inner, E.IntImm(g, a.dtype))
        return E.FloorMod(rest, b)

    def _difference(self, a: E.PrimExpr, b: E.PrimExpr) -> tuple[Any, Any] | None:
        """Bounds of ``a - b`` for integer operands, or None."""
        if not _signed(a.dtype):
            return None
        if a.lanes == 1:
            p = self.poly(a).add(self.poly(b), -1)
            lo, hi = self.poly_interval(p)
            if (lo <= 0 <= hi) and self.is_symbolic(p):
                slo, shi = self.sym_interval(p)
                lo, hi = max(lo, slo), min(hi, shi)
            return lo, hi
        d = self.binop(E.Sub, a, b)
        if isinstance(d, E.Ramp | E.Broadcast):
            lo, hi = self.interval(d)
            if lo <= 0 <= hi:  # all lanes: the base's symbolic range plus the ramp's span
                base = d.value if isinstance(d, E.Broadcast) else d.base
                span = 0
                if isinstance(d, E.Ramp):
                    if not isinstance(d.stride, E.IntImm):
                        return lo, hi
                    span = d.stride.value * (d.lanes - 1)
                if base.lanes == 1 and self.is_symbolic(base):
                    slo, shi = self.sym_interval(self.poly(base))
                    lo, hi = max(lo, slo + min(0, span)), min(hi, shi + max(0, span))
            return lo, hi
        return None

    def _rule_Min(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        if struct_equal(a, b):
            return a
        d = self._difference(a, b)
        if d is not None:
            if d[1] <= 0:
                return a
            if d[0] >= 0:
                return b
        return None

    def _rule_Max(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        if struct_equal(a, b):
            return a
        d = self._difference(a, b)
        if d is not None:
            if d[1] <= 0:
                return b
            if d[0] >= 0:
                return a
        return None

    def _decide_cmp(self, cls: type, a: E.PrimExpr, b: E.PrimExpr) -> bool | None:
        if E.is_float(a.dtype):
            return None
        d = self._difference(a, b)
        if d is None:
            return None
        lo, hi = d
        if cls is E.LT:
            return True if hi < 0 else False if lo >= 0 else None
        if cls is E.LE:
            return True if hi <= 0 else False if lo > 0 else None
        if cls is E.GT:
            return True if lo > 0 else False if hi <= 0 else None
        if cls is E.GE:
            return True if lo >= 0 else False if hi < 0 else None
        if cls is E.EQ:
            return True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
        if cls is E.NE:
            return False if lo == hi == 0 else True if lo > 0 or hi < 0 else None
        return None

    def _rule_cmp(self, cls: type, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        decided = self._decide_cmp(cls, a, b)
        if decided is not None:
            return _bool(decided, a.lanes)
        return None

    def _rule_LT(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        return self._rule_cmp(E.LT, a, b)

    def _rule_LE(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        return self._rule_cmp(E.LE, a, b)

    def _rule_GT(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        return self._rule_cmp(E.GT, a, b)

    def _rule_GE(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        return self._rule_cmp(E.GE, a, b)

    def _rule_EQ(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        return self._rule_cmp(E.EQ, a, b)

    def _rule_NE(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        return self._rule_cmp(E.NE, a, b)

    def _rule_And(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        ca, cb = _const_bool(a), _const_bool(b)
        if ca is False or cb is False:
            return _bool(False, a.lanes)
        if ca is True:
            return b
        if cb is True:
            return a
        if struct_equal(a, b):
            return a
        return None

    def _rule_Or(self, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        ca, cb = _const_bool(a), _const_bool(b)
        if ca is True or cb is True:
            return _bool(True, a.lanes)
        if ca is False:
            return b
        if cb is False:
            return a
        if struct_equal(a, b):
            return a
        return None

    # vector rules
    def _vector_binop(self, cls: type, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
        lanes = a.lanes
        if isinstance(a, E.Broadcast) and isinstance(b, E.Broadcast):
            return self.broadcast(self.binop(cls, a.value, b.value), lanes)
        if cls in (E.And, E.Or):
            return self._rule_And(a, b) if cls is E.And else self._rule_Or(a, b)
        if issubclass(cls, E.CmpOp):
            return self._rule_cmp(cls, a, b)
        if cls in (E.Min, E.Max):
            return self._rule_Min(a, b) if cls is E.Min else self._rule_Max(a, b)
        if not E.is_int(a.dtype):
            if cls is E.Mul and isinstance(b, E.Broadcast) and _is_const(b.value, 1):
                return a
            if cls is E.Add and isinstance(b, E.Broadcast) and _is_const(b.value, 0):
                return a
            return None
        ra, rb = _ramp_parts(a), _ramp_parts(b)
        if cls in (E.Add, E.Sub) and ra is not None and rb is not None:
            base = self.binop(cls, ra[0], rb[0])
            stride = self.binop(cls, ra[1], rb[1])
            return self.ramp(base, stride, lanes)
        if cls is E.Mul and ra is not None and rb is not None:
            if isinstance(b, E.Broadcast):
                return self.ramp(self.binop(E.Mul, ra[0], b.value),
                                 self.binop(E.Mul, ra[1], b.value), lanes)
            if isinstance(a, E.Broadcast):
                return self.ramp(self.binop(E.Mul, a.value, rb[0]),
                                 self.binop(E.Mul, a.value, rb[1]), lanes)
        if cls in (E.FloorDiv, E.FloorMod) and isinstance(a, E.Ramp) and \
                isinstance(b, E.Broadcast) and isinstance(b.value, E.IntImm) and \
                isinstance(a.stride, E.IntImm) and b.value.value > 0:
            c, s = b.value.value, a.stride.value
            if s % c == 0:
                if cls is E.FloorDiv:
                    return self.ramp(self.binop(E.FloorDiv, a.base, b.value),
                                     E.IntImm(s // c, a.dtype), lanes)
                return self.broadcast(self.binop(E.FloorMod, a.base, b.value), lanes)
            if s >= 0:
                mod = self.binop(E.FloorMod, a.base, b.value)
                hi = self.interval(mod)[1]
                if hi + s * (lanes - 1) < c:
                    if cls is E.FloorDiv:
                        return self.broadcast(self.binop(E.FloorDiv, a.base, b.value), lanes)
                    return self.ramp(mod, a.stride, lanes)
        return None

    def ramp(self, base: E.PrimExpr, stride: E.PrimExpr, lanes: int) -> E.PrimExpr:
        """A ramp, or a broadcast when the stride is zero."""
        if _is_const(stride, 0):
            return self.broadcast(base, lanes)
        return E.Ramp(base, stride, lanes)

    def visit_Ramp(self, e: E.Ramp) -> E.PrimExpr:
        base, stride = self.visit(e.base), self.visit(e.stride)
        if base is e.base and stride is e.stride and not _is_const(stride, 0):
            return e  # what self.ramp would rebuild
        return self.ramp(base, stride, e.lanes)

    def visit_Broadcast(self, e: E.Broadcast) -> E.PrimExpr:
        v = self.visit(e.value)
        if e.lanes == 1:
            return v
        return e if v is e.value else E.Broadcast(v, e.lanes)

    def visit_Not(self, e: E.Not) -> E.PrimExpr:
        a = self.visit(e.a)
        c = _const_bool(a)
        if c is not None:
            return _bool(not c, a.lanes)
        if isinstance(a, E.Not):
            return a.a
        if isinstance(a, E.CmpOp) and type(a) in _FLIP and not E.is_float(a.a.dtype):
            return _FLIP[type(a)](a.a, a.b)
        if isinstance(a, E.Broadcast):
            return E.Broadcast(self.visit(E.Not(a.value)), a.lanes)
        return e if a is e.a else E.Not(a)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        cond = self.visit(e.condition)
        c = _const_bool(cond)
        if c is not None:
            chosen = self.visit(e.true_value if c else e.false_value)
            return self.broadcast(chosen, e.lanes) if chosen.lanes < e.lanes else chosen
        t, f = self.visit(e.true_value), self.visit(e.false_value)
        if struct_equal(t, f) and t.lanes == e.lanes:
            return t
        # No narrowing from the condition inside the branches: both are evaluated, and a load
        # whose index is clamped (min/max) must stay in bounds when its lane is not selected.
        if cond is e.condition and t is e.true_value and f is e.false_value:
            return e
        if t.lanes < e.lanes:
            t = self.broadcast(t, e.lanes)
        if f.lanes < e.lanes:
            f = self.broadcast(f, e.lanes)
        return E.Select(cond, t, f)

    def visit_Cast(self, e: E.Cast) -> E.PrimExpr:
        v = self.visit(e.value)
        if v.dtype == e.dtype:
            return v
        if _is_const(v):
            return _fold(E.Cast, v, dtype=e.dtype)
        if isinstance(v, E.Broadcast):
            return E.Broadcast(self.visit(E.Cast(e.dtype, v.value)), v.lanes)
        return e if v is e.value else E.Cast(e.dtype, v)

    def visit_Let(self, e: E.Let) -> E.PrimExpr:
        value = self.visit(e.value)
        if isinstance(value, E.IntImm | E.FloatImm | E.Var):
            return self.visit(substitute(e.body, {e.var: value}))
        sym = {e.var: (value, value)} if self._int_scalar(value) and \
            self.is_symbolic(value) else None
        with self.bound_scope({e.var: self.interval(value)}, sym):
            body = self.visit(e.body)
        if not uses_var(body, e.var):
            return body
        if value is e.value and body is e.body:
            return e
        return E.Let(e.var, value, body)

    # -- facts from conditions ----------------------------------------------------------------
    def facts(self, cond: E.PrimExpr, positive: bool) -> dict[E.Var, tuple[Any, Any]]:
        """Variable ranges implied by ``cond`` being ``positive`` (True or False)."""
        out: dict[E.Var, tuple[Any, Any]] = {}

        def merge(new: dict[E.Var, tuple[Any, Any]]) -> None:
            for v, (lo, hi) in new.items():
                olo, ohi = out.get(v, (-INF, INF))
                out[v] = (max(olo, lo), min(ohi, hi))

        if isinstance(cond, E.Not):
            return self.facts(cond.a, not positive)
        if isinstance(cond, E.And) and positive or isinstance(cond, E.Or) and not positive:
            merge(self.facts(cond.a, positive))
            merge(self.facts(cond.b, positive))
            return out
        if not isinstance(cond, E.CmpOp) or cond.lanes != 1 or not _signed(cond.a.dtype):
            return out
        cls = type(cond) if positive else _FLIP[type(cond)]
        p = self.poly(cond.a).add(self.poly(cond.b), -1)  # p OP 0
        if cls in (E.GT, E.GE):
            p = p.scale(-1)
            cls = E.LT if cls is E.GT else E.LE
        if cls is E.NE:
            return out
        if cls is E.LT:  # p < 0  <=>  p + 1 <= 0
            p = p.add(Poly(p.dtype, 1))
        for key, (coef, atoms) in p.terms.items():
            if len(atoms) != 1 or not isinstance(atoms[0], E.Var):
                continue
            var = atoms[0]
            rest = p.copy()
            del rest.terms[key]
            rlo, rhi = self.poly_interval(rest)
            # coef * var <= -rest <= -rlo ; for EQ also coef * var >= -rhi
            lo, hi = -INF, INF
            if rlo != -INF:
                m = -rlo
                if coef > 0:
                    hi = m // coef
                else:
                    lo = -((-m) // coef)
            if cls is E.EQ and rhi != INF:
                m = -rhi
                if coef > 0:
                    lo = -((-m) // coef)
                else:
                    hi = m // coef
            merge({var: (lo, hi)})
        return out

    # -- statements -------------------------------------------------------------------------
    def visit_For(self, s: S.For) -> S.Stmt:
        mn, ext = self.visit(s.min), self.visit(s.extent)
        if s.kind != S.ForKind.THREAD_BINDING and isinstance(ext, E.IntImm):
            if ext.value <= 0:
                return _no_op()
            if ext.value == 1:
                return self.visit(substitute(s.body, {s.loop_var: mn}))
        lo_min, hi_min = self.interval(mn)
        _, hi_ext = self.interval(ext)
        sym = self.loop_sym_bound(mn, ext)
        with self.bound_scope({s.loop_var: (lo_min, hi_min + hi_ext - 1)},
                              {s.loop_var: sym} if sym is not None else None):
            body = self.visit(s.body)
        if is_no_op(body):
            return _no_op()
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return S.For(s.loop_var, mn, ext, s.kind, body, s.thread_tag, s.annotations)

    def visit_LetStmt(self, s: S.LetStmt) -> S.Stmt:
        value = self.visit(s.value)
        if isinstance(value, E.IntImm | E.FloatImm | E.Var):
            return self.visit(substitute(s.body, {s.var: value}))
        index = E.is_int(value.dtype) and value.lanes == 1
        iv = self.interval(value) if index else (-INF, INF)
        sym = {s.var: (value, value)} if index and self.is_symbolic(value) else None
        with self.bound_scope({s.var: iv}, sym):
            body = self.visit(s.body)
        if is_no_op(body):
            return _no_op()
        if not self._uses(body, s.var):
            return body
        if value is s.value and body is s.body:
            return s
        return S.LetStmt(s.var, value, body)

    def _uses(self, body: S.Stmt, var: E.Var) -> bool:
        """Whether ``body`` reads ``var``."""
        if isinstance(body, S.LetStmt):
            return var in self._vars_of_let(body)
        return uses_var(body, var)

    def _vars_of_let(self, s: S.LetStmt) -> frozenset[E.Var]:
        """The variables ``s`` reads or binds (kept for the lets around it)."""
        hit = self._let_vars.get(id(s))
        if hit is not None and hit[0] is s:
            return hit[1]
        inner = self._vars_of_let(s.body) if isinstance(s.body, S.LetStmt) else \
            _vars_of(s.body)
        out = inner | _vars_of(s.value) | {s.var}
        self._let_vars[id(s)] = (s, out)
        return out

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        cond = self.visit(s.condition)
        c = _const_bool(cond)
        if c is True:
            return self.visit(s.then_case)
        if c is False:
            return self.visit(s.else_case) if s.else_case is not None else _no_op()
        with self.bound_scope(self.facts(cond, True), self.sym_facts(cond, True)):
            then = self.visit(s.then_case)
        other = None
        if s.else_case is not None:
            with self.bound_scope(self.facts(cond, False), self.sym_facts(cond, False)):
                other = self.visit(s.else_case)
            if is_no_op(other):
                other = None
        if is_no_op(then):
            if other is None:
                return _no_op()
            return S.IfThenElse(self.visit(E.Not(cond)), other)
        if cond is s.condition and then is s.then_case and other is s.else_case:
            return s
        return S.IfThenElse(cond, then, other)

    def visit_SeqStmt(self, s: S.SeqStmt) -> S.Stmt:
        items = [self.visit(x) for x in s.seq]
        kept = [x for x in items if not is_no_op(x)]
        if not kept:
            return _no_op()
        if len(kept) == 1:
            return kept[0]
        if len(kept) == len(s.seq) and all(x is y for x, y in zip(kept, s.seq)):
            return s
        return S.SeqStmt(kept)

    def visit_Allocate(self, s: S.Allocate) -> S.Stmt:
        body = self.visit(s.body)
        if is_no_op(body):
            return _no_op()
        return s if body is s.body else S.Allocate(s.buffer, body)


def _vars_of(node: Any) -> frozenset[E.Var]:
    return frozenset(nodes_of(node, E.Var))


def _signed(dtype: str) -> bool:
    """Integer types whose arithmetic the bound-based rules may reason about (unsigned values
    wrap around at zero, so ``//``, ``%`` and comparisons on them are only folded)."""
    return E.is_int(dtype) and not E.is_unsigned(dtype)


def _div_bound(p: Poly, c: int, dtype: str, ceil: bool = False) -> E.PrimExpr:
    """``p // c`` (``ceil``: rounded up) as an expression, for ``c > 0``."""
    if c == 1:
        return p.to_expr()
    if ceil:
        p = p.add(Poly(dtype, c - 1))
    return E.FloorDiv(p.to_expr(), E.IntImm(c, dtype))


def _ramp_parts(e: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr] | None:
    if isinstance(e, E.Ramp):
        return e.base, e.stride
    if isinstance(e, E.Broadcast):
        return e.value, E.IntImm(0, e.dtype)
    return None


def simplify(node: Any, bounds: Bounds | None = None) -> Any:
    """A simplified copy of an expression, statement or :class:`PrimFunc`; ``bounds`` gives
    known inclusive ranges ``var -> (lo, hi)`` of free variables. A function's size
    variables start with their ranges (:meth:`PrimFunc.var_bounds`: non-negative, within
    ``size_bounds``), which ``bounds`` may narrow."""
    if isinstance(node, S.PrimFunc):  # subtrees shared by several statements: once each
        return node.with_body(func_simplifier(node, bounds, memo=True).visit(node.body))
    return Simplifier(bounds).visit(node)


def func_simplifier(func: S.PrimFunc, bounds: Bounds | None = None, memo: bool = False,
                    sym_bounds: Mapping[E.Var, Sequence[SymBound]] | None = None) -> Simplifier:
    """A :class:`Simplifier` for statements of ``func``: its size variables are symbolic and
    start with their ranges (:meth:`PrimFunc.var_bounds`), ``bounds`` adds or narrows
    ranges, ``sym_bounds`` gives symbolic ranges (of enclosing loops)."""
    seeded: dict[E.Var, tuple[Any, Any]] = dict(func.var_bounds())
    for v, (lo, hi) in (bounds or {}).items():
        olo, ohi = _norm(seeded.get(v, (None, None)))
        nlo, nhi = _norm((lo, hi))
        seeded[v] = (max(olo, nlo), min(ohi, nhi))
    return Simplifier(seeded, memo=memo, sym_bounds=sym_bounds, size_vars=func.size_vars)


def can_prove(cond: E.PrimExpr, bounds: Bounds | None = None) -> bool:
    """Whether ``cond`` is true for every value of its variables within ``bounds``."""
    return _const_bool(simplify(cond, bounds)) is True

