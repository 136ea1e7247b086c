"""A well-formedness check for TIR functions (TVM's ``VerifyMemory``/``VerifySSA`` family).

:func:`verify` raises :class:`tessera.errors.CompileError` naming the function and the
offending statement or expression when it finds:

* a variable used outside the loop, let or ``Let`` that defines it (variables in parameter
  shapes count as defined);
* a buffer that is neither a parameter nor allocated around the access, or indexed with a
  number of indices different from its number of dimensions;
* operands of different dtypes in a binary operation, a non-bool condition or logical operand,
  a non-integer index or loop bound, a stored value whose dtype differs from the buffer's;
* operands with different lane counts, a vector lane count that is not a constant integer of
  at least 2, a vector ramp base/stride or broadcast value, a vector ``if`` condition or loop
  bound;
* a ``PARALLEL`` loop inside another ``PARALLEL`` loop;
* a size variable (``func.size_vars``: defined everywhere in the function) that is not a
  scalar integer, is listed twice, or is bound again by a loop or let (its value is the
  caller's); a ``size_bounds`` range that is empty.

Symbolic extents are accepted everywhere an integer expression is: buffer shapes, allocation
sizes, loop bounds and indices may use the size variables.

With ``lowered=True`` it also requires what the code generators take: one-dimensional buffers,
no ``VECTORIZED`` loops, no TE leftovers (``ProducerLoad``, ``Reduce``).
"""

from __future__ import annotations

from typing import Any

from tessera.errors import CompileError
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.functor import post_order_visit
from tessera.tir.printer import expr_to_str, stmt_to_str

__all__ = ["verify"]


def _stmt_summary(s: S.Stmt) -> str:
    """One line that identifies a statement (its head, not its whole body)."""
    if isinstance(s, S.For):
        text = (f"for {s.loop_var.name} in range({expr_to_str(s.min)}, "
                f"{expr_to_str(s.min)} + {expr_to_str(s.extent)})  # {s.kind}")
    elif isinstance(s, S.IfThenElse):
        text = f"if {expr_to_str(s.condition)}:"
    elif isinstance(s, S.LetStmt):
        text = f"{s.var.name} = {expr_to_str(s.value)}"
    elif isinstance(s, S.Allocate):
        text = f"{s.buffer.name} = allocate(...)"
    else:
        text = stmt_to_str(s).splitlines()[0] if stmt_to_str(s) else type(s).__name__
    return text if len(text) <= 240 else text[:237] + "..."


class _Verifier:
    def __init__(self, func: S.PrimFunc, lowered: bool) -> None:
        self.func = func
        self.lowered = lowered
        self.vars: dict[E.Var, int] = {}
        self.buffers: dict[int, int] = {}
        self.stmt_stack: list[S.Stmt] = []
        self.parallel_depth = 0
        for b in func.params:
            self.buffers[id(b)] = 1
            self.vars[b.data] = 1  # the pointer variable (extern calls pass it)
            for d in b.shape:
                self.define_free(d)
        self.size_vars: set[E.Var] = set()
        for v in func.size_vars:
            self.vars[v] = 1
            self.size_vars.add(v)

    def check_sizes(self) -> None:
        """The size variables and their ranges are well-formed."""
        seen: set[E.Var] = set()
        for v in self.func.size_vars:
            if not isinstance(v, E.Var) or not E.is_int(v.dtype) or v.lanes != 1:
                self.fail(f"size variable {v!r} is not a scalar integer variable")
            if v in seen:
                self.fail(f"size variable {v.name} is listed twice")
            seen.add(v)
        for v, (lo, hi) in self.func.var_bounds().items():
            if lo is not None and hi is not None and lo > hi:
                self.fail(f"size variable {v.name} has the empty range [{lo}, {hi}]")

    def define_free(self, e: E.PrimExpr) -> None:
        post_order_visit(e, lambda n: self.vars.__setitem__(n, 1)
                         if isinstance(n, E.Var) else None)

    def fail(self, what: str, node: Any = None) -> None:
        where = ""
        if self.stmt_stack:
            where = f" in statement `{_stmt_summary(self.stmt_stack[-1])}`"
        shown = ""
        if isinstance(node, E.PrimExpr):
            text = expr_to_str(node)
            shown = f" (expression `{text if len(text) <= 240 else text[:237] + '...'}`)"
        raise CompileError(f"TIR function {self.func.name}: {what}{shown}{where}")

    # -- scopes ---------------------------------------------------------------------------
    def bind(self, var: E.Var) -> None:
        if var in self.size_vars:
            self.fail(f"size variable {var.name} is bound again inside the function", var)
        self.vars[var] = self.vars.get(var, 0) + 1

    def unbind(self, var: E.Var) -> None:
        self.vars[var] -= 1
        if not self.vars[var]:
            del self.vars[var]

    def check_buffer(self, b: Buffer, indices: tuple[E.PrimExpr, ...], node: Any) -> None:
        if id(b) not in self.buffers:
            self.fail(f"buffer {b.name} is neither a parameter nor allocated here", node)
        if len(indices) != b.ndim:
            self.fail(f"buffer {b.name} has {b.ndim} dimension(s) but {len(indices)} "
                      f"index(es)", node)
        if self.lowered and b.ndim != 1:
            self.fail(f"buffer {b.name} is not flattened ({b.ndim} dimensions)", node)
        vector_indices = 0
        for i in indices:
            self.expr(i)
            if not E.is_int(i.dtype):
                self.fail(f"index of {b.name} has dtype {i.dtype}, expected an integer", node)
            if i.lanes > 1:
                vector_indices += 1
        lanes = {i.lanes for i in indices if i.lanes > 1}
        if len(lanes) > 1:
            self.fail(f"indices of {b.name} have different lane counts {sorted(lanes)}", node)

    # -- expressions ----------------------------------------------------------------------
    def check_lanes(self, e: E.PrimExpr) -> None:
        if not isinstance(e.lanes, int) or isinstance(e.lanes, bool) or e.lanes < 1:
            self.fail(f"lane count {e.lanes!r} is not a positive constant integer", e)

    def expr(self, e: Any) -> None:
        if not isinstance(e, E.PrimExpr):
            self.fail(f"{type(e).__name__} where an expression is expected")
        self.check_lanes(e)
        if isinstance(e, E.IntImm | E.FloatImm):
            return
        if isinstance(e, E.Var):
            if e not in self.vars:
                self.fail(f"variable {e.name} is used outside its defining loop or let", e)
            return
        if isinstance(e, E.BinaryOp):
            self.expr(e.a)
            self.expr(e.b)
            if e.a.dtype != e.b.dtype:
                self.fail(f"{type(e).__name__} operands have dtypes {e.a.dtype} and "
                          f"{e.b.dtype}", e)
            if e.a.lanes != e.b.lanes:
                self.fail(f"{type(e).__name__} operands have {e.a.lanes} and {e.b.lanes} "
                          f"lanes", e)
            if isinstance(e, E.And | E.Or) and e.a.dtype != "bool":
                self.fail(f"{type(e).__name__} of non-bool operands ({e.a.dtype})", e)
            if isinstance(e, E.Div) and not E.is_float(e.a.dtype):
                self.fail(f"'/' on {e.a.dtype} operands", e)
            expected = "bool" if isinstance(e, E.CmpOp) else e.a.dtype
            if e.dtype != expected or e.lanes != e.a.lanes:
                self.fail(f"{type(e).__name__} result is {e.dtype}x{e.lanes}, expected "
                          f"{expected}x{e.a.lanes}", e)
            return
        if isinstance(e, E.Not):
            self.expr(e.a)
            if e.a.dtype != "bool":
                self.fail(f"Not of a {e.a.dtype} operand", e)
            return
        if isinstance(e, E.Select):
            for x in (e.condition, e.true_value, e.false_value):
                self.expr(x)
            if e.condition.dtype != "bool":
                self.fail(f"select condition has dtype {e.condition.dtype}", e)
            if e.true_value.dtype != e.false_value.dtype:
                self.fail(f"select branches have dtypes {e.true_value.dtype} and "
                          f"{e.false_value.dtype}", e)
            if e.true_value.lanes != e.false_value.lanes or (
                    e.condition.lanes not in (1, e.true_value.lanes)):
                self.fail(f"select lanes differ (condition {e.condition.lanes}, branches "
                          f"{e.true_value.lanes} and {e.false_value.lanes})", e)
            return
        if isinstance(e, E.Cast):
            self.expr(e.value)
            if e.lanes != e.value.lanes:
                self.fail("cast changes the lane count", e)
            return
        if isinstance(e, E.Call):
            for a in e.args:
                self.expr(a)
            lanes = {a.lanes for a in e.args}
            if len(lanes) > 1:
                self.fail(f"call {e.name} has arguments with lanes {sorted(lanes)}", e)
            return
        if isinstance(e, E.BufferLoad):
            self.check_buffer(e.buffer, e.indices, e)
            if e.dtype != e.buffer.dtype:
                self.fail(f"load of {e.buffer.name} has dtype {e.dtype}, the buffer "
                          f"{e.buffer.dtype}", e)
            return
        if isinstance(e, E.Ramp):
            self.expr(e.base)
            self.expr(e.stride)
            if e.lanes < 2:
                self.fail(f"ramp with {e.lanes} lane(s)", e)
            if e.base.lanes != 1 or e.stride.lanes != 1:
                self.fail("ramp base and stride must be scalars", e)
            if not E.is_int(e.base.dtype) or e.base.dtype != e.stride.dtype:
                self.fail(f"ramp of {e.base.dtype}/{e.stride.dtype}", e)
            return
        if isinstance(e, E.Broadcast):
            self.expr(e.value)
            if e.lanes < 2:
                self.fail(f"broadcast to {e.lanes} lane(s)", e)
            if e.value.lanes != 1:
                self.fail("broadcast of a vector", e)
            return
        if isinstance(e, E.Let):
            self.expr(e.value)
            self.bind(e.var)
            try:
                self.expr(e.body)
            finally:
                self.unbind(e.var)
            return
        if isinstance(e, E.ProducerLoad | E.Reduce):
            if self.lowered:
                self.fail(f"{type(e).__name__} survives lowering", e)
            return
        self.fail(f"unknown expression {type(e).__name__}", e)

    # -- statements -----------------------------------------------------------------------
    def stmt(self, s: Any) -> None:
        if s is None:
            return
        if not isinstance(s, S.Stmt):
            self.fail(f"{type(s).__name__} where a statement is expected")
        self.stmt_stack.append(s)
        try:
            self._stmt(s)
        finally:
            self.stmt_stack.pop()

    def scalar_int(self, e: E.PrimExpr, what: str) -> None:
        self.expr(e)
        if not E.is_int(e.dtype) or e.lanes != 1:
            self.fail(f"{what} must be a scalar integer, got {e.dtype}x{e.lanes}", e)

    def _stmt(self, s: S.Stmt) -> None:
        if isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, S.For):
            self.scalar_int(s.min, "loop start")
            self.scalar_int(s.extent, "loop extent")
            if s.loop_var.dtype != s.min.dtype:
                self.fail(f"loop variable {s.loop_var.name} is {s.loop_var.dtype} but its "
                          f"start is {s.min.dtype}")
            if self.lowered and s.kind == S.ForKind.VECTORIZED:
                self.fail(f"loop {s.loop_var.name} is still VECTORIZED after lowering")
            parallel = s.kind == S.ForKind.PARALLEL
            if parallel and self.parallel_depth:
                self.fail(f"PARALLEL loop {s.loop_var.name} is nested inside another "
                          f"PARALLEL loop")
            self.parallel_depth += parallel
            self.bind(s.loop_var)
            try:
                self.stmt(s.body)
            finally:
                self.unbind(s.loop_var)
                self.parallel_depth -= parallel
        elif isinstance(s, S.BufferStore):
            self.check_buffer(s.buffer, s.indices, None)
            self.expr(s.value)
            if s.value.dtype != s.buffer.dtype:
                self.fail(f"store of a {s.value.dtype} value into {s.buffer.dtype} buffer "
                          f"{s.buffer.name}", s.value)
            index_lanes = max((i.lanes for i in s.indices), default=1)
            if s.value.lanes != index_lanes:
                self.fail(f"store of {s.value.lanes} lane(s) at {index_lanes} address(es) of "
                          f"{s.buffer.name}", s.value)
        elif isinstance(s, S.IfThenElse):
            self.expr(s.condition)
            if s.condition.dtype != "bool" or s.condition.lanes != 1:
                self.fail(f"if condition is {s.condition.dtype}x{s.condition.lanes}, expected "
                          f"a scalar bool", s.condition)
            self.stmt(s.then_case)
            self.stmt(s.else_case)
        elif isinstance(s, S.LetStmt):
            self.expr(s.value)
            if s.var.dtype != s.value.dtype or s.value.lanes != s.var.lanes:
                self.fail(f"let {s.var.name}: {s.var.dtype} bound to a {s.value.dtype}x"
                          f"{s.value.lanes} value", s.value)
            self.bind(s.var)
            try:
                self.stmt(s.body)
            finally:
                self.unbind(s.var)
        elif isinstance(s, S.Allocate):
            for d in s.buffer.shape:
                self.scalar_int(d, f"dimension of {s.buffer.name}")
            key = id(s.buffer)
            self.buffers[key] = self.buffers.get(key, 0) + 1
            self.bind(s.buffer.data)
            try:
                self.stmt(s.body)
            finally:
                self.unbind(s.buffer.data)
                self.buffers[key] -= 1
                if not self.buffers[key]:
                    del self.buffers[key]
        elif isinstance(s, S.Evaluate):
            self.expr(s.value)
        elif isinstance(s, S.Barrier):
            pass  # where a barrier may stand is the GPU verifier's concern (gpu_verifier.py)
        else:
            self.fail(f"unknown statement {type(s).__name__}")


def verify(func: S.PrimFunc, lowered: bool = False) -> None:
    """Raise :class:`CompileError` when ``func`` is malformed (see the module docstring);
    ``lowered=True`` adds the requirements of the code generators."""
    v = _Verifier(func, lowered)
    v.check_sizes()
    v.stmt(func.body)
