"""TIR expressions -> LLVM values: the expression half of :mod:`tessera_llvm.codegen`.

:class:`ExprCodegen` is a mixin of the function code generator: it turns every ``PrimExpr``
node (constants, variables, vectors as ``Ramp``/``Broadcast``, arithmetic with Python's
floor division and modulo, comparisons, logic, ``Select``, casts, intrinsic calls such as
``exp`` or ``prefetch``) into LLVM values with the builder of the function being filled
(``self.scope.builder``). Loads, variable bindings and errors come from the statement half
(``_load``, ``_bind``, ``error``). The LLVM types of TIR dtypes live here too.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from tessera.tir import expr as E
from tessera_llvm.intrinsics import DOT_PRODUCTS, splat

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

_FLOAT_TYPES: dict[str, ir.Type] = {"float16": ir.HalfType(), "float32": ir.FloatType(),
                                    "float64": ir.DoubleType()}


def scalar_type(dtype: str, memory: bool = False) -> ir.Type:
    """The LLVM type of one ``dtype`` element, in registers or (``memory``) in a buffer."""
    t = _SCALAR_TYPES.get((dtype, memory))
    if t is None:
        t = _SCALAR_TYPES[dtype, memory] = _scalar_type(dtype, memory)
    return t


#: (dtype, memory) -> what :func:`scalar_type` gives (llvmlite types are immutable values)
_SCALAR_TYPES: dict[tuple[str, bool], ir.Type] = {}


def _scalar_type(dtype: str, memory: bool) -> ir.Type:
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype]
    if dtype == "bool":
        return I8 if memory else I1
    if dtype.startswith(("int", "uint")):
        return ir.IntType(E.bits(dtype))
    raise TypeError(f"no LLVM type for dtype {dtype!r}")


def value_type(dtype: str, lanes: int = 1) -> ir.Type:
    """The register type of a ``dtype`` value with ``lanes`` lanes."""
    t = scalar_type(dtype)
    return ir.VectorType(t, lanes) if lanes > 1 else t


def element_bytes(dtype: str) -> int:
    """Bytes per element of a ``dtype`` buffer."""
    return 1 if dtype == "bool" else E.bits(dtype) // 8


def is_signed(dtype: str) -> bool:
    return dtype.startswith("int")


def const_int(e: E.PrimExpr) -> int | None:
    """The value of an integer constant, looking through Broadcast."""
    while isinstance(e, E.Broadcast):
        e = e.value
    return e.value if isinstance(e, E.IntImm) else None


def const_float(e: E.PrimExpr) -> float | None:
    while isinstance(e, E.Broadcast):
        e = e.value
    if isinstance(e, E.FloatImm | E.IntImm):
        return float(e.value)
    return None


def short(node: Any) -> str:
    """A one-line text of ``node`` for error messages (at most 160 characters)."""
    text = " ".join(repr(node).split())
    return text if len(text) <= 160 else text[:157] + "..."


class ExprCodegen:
    """Expression code generation, mixed into the function code generator."""

    scope: Any
    gen: Any

    # -- value helpers --------------------------------------------------------------------------
    def _index_value(self, v: ir.Value) -> ir.Value:
        """``v`` (an integer scalar or vector) as 64-bit indices."""
        ty = v.type
        elem = ty.element if isinstance(ty, ir.VectorType) else ty
        if not isinstance(elem, ir.IntType):
            raise self.error(f"index of type {ty} is not an integer")
        if elem.width == 64:
            return v
        target = ir.VectorType(I64, ty.count) if isinstance(ty, ir.VectorType) else I64
        if elem.width == 1:
            return self.scope.builder.zext(v, target)
        return self.scope.builder.sext(v, target)

    def _cast_int(self, v: ir.Value, ty: ir.Type, dtype: str) -> ir.Value:
        """The integer scalar ``v`` (of TIR ``dtype``) converted to the integer type ``ty``."""
        if v.type == ty:
            return v
        if not isinstance(v.type, ir.IntType):
            raise self.error(f"expected an integer, got a {dtype} value")
        b = self.scope.builder
        if v.type.width > ty.width:
            return b.trunc(v, ty)
        return b.sext(v, ty) if is_signed(dtype) else b.zext(v, ty)

    def _broadcast(self, v: ir.Value, lanes: int) -> ir.Value:
        if isinstance(v.type, ir.VectorType):
            if v.type.count != lanes:
                raise self.error(f"cannot use a {v.type.count}-lane value as {lanes} lanes")
            return v
        if lanes == 1:
            return v
        vty = ir.VectorType(v.type, lanes)
        if isinstance(v, ir.Constant):
            return ir.Constant(vty, [v] * lanes)
        b = self.scope.builder
        one = b.insert_element(ir.Constant(vty, ir.Undefined), v, ir.Constant(I32, 0))
        mask = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
        return b.shuffle_vector(one, ir.Constant(vty, ir.Undefined), mask)

    def _as_bool(self, v: ir.Value, node: E.PrimExpr) -> ir.Value:
        if node.dtype == "bool":
            return v
        raise self.error(f"condition has type {node.dtype}, expected bool", node)

    # -- expressions ----------------------------------------------------------------------------
    def expr(self, e: E.PrimExpr) -> ir.Value:
        method = getattr(self, "_expr_" + type(e).__name__, None)
        if method is None:
            if isinstance(e, E.ProducerLoad | E.Reduce):
                raise self.error("not lowered (run the TIR pass pipeline first)", e)
            raise self.error("unsupported expression", e)
        return method(e)

    def _expr_IntImm(self, e: E.IntImm) -> ir.Value:
        ty = scalar_type(e.dtype)
        width = ty.width
        value = e.value & ((1 << width) - 1)
        if value >= 1 << (width - 1) and width > 1:
            value -= 1 << width
        return ir.Constant(ty, value)

    def _expr_FloatImm(self, e: E.FloatImm) -> ir.Value:
        return ir.Constant(scalar_type(e.dtype), e.value)

    def _expr_Var(self, e: E.Var) -> ir.Value:
        v = self.scope.vars.get(e)
        if v is None:
            raise self.error(f"variable {e.name!r} is not bound", e)
        return v

    def _expr_Let(self, e: E.Let) -> ir.Value:
        with self._bind(e.var, self.expr(e.value)):
            return self.expr(e.body)

    def _expr_Broadcast(self, e: E.Broadcast) -> ir.Value:
        return self._broadcast(self.expr(e.value), e.lanes)

    def _expr_Ramp(self, e: E.Ramp) -> ir.Value:
        ty = scalar_type(e.dtype)
        vty = ir.VectorType(ty, e.lanes)
        base, stride = self.expr(e.base), self.expr(e.stride)
        if isinstance(base, ir.Constant) and isinstance(stride, ir.Constant):
            b0, s0 = const_int(e.base), const_int(e.stride)
            if b0 is not None and s0 is not None:
                return ir.Constant(vty, [b0 + i * s0 for i in range(e.lanes)])
        steps = ir.Constant(vty, list(range(e.lanes)))
        b = self.scope.builder
        offsets = b.mul(self._broadcast(stride, e.lanes), steps)
        return b.add(self._broadcast(base, e.lanes), offsets)

    def _expr_BufferLoad(self, e: E.BufferLoad) -> ir.Value:
        return self._load(e)

    def _operands(self, e: E.BinaryOp) -> tuple[ir.Value, ir.Value]:
        if e.a.dtype != e.b.dtype:
            raise self.error(f"operands have types {e.a.dtype} and {e.b.dtype}", e)
        a, b = self.expr(e.a), self.expr(e.b)
        lanes = max(e.a.lanes, e.b.lanes)
        return self._broadcast(a, lanes), self._broadcast(b, lanes)

    def _expr_Add(self, e: E.Add) -> ir.Value:
        fused = _accumulating_dot(e)
        if fused is not None:
            return self.expr(fused)
        a, b = self._operands(e)
        bld = self.scope.builder
        if E.is_float(e.a.dtype):
            return bld.fadd(a, b, flags=self.gen.fastmath)
        return bld.or_(a, b) if e.a.dtype == "bool" else bld.add(a, b)

    def _expr_Sub(self, e: E.Sub) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        if E.is_float(e.a.dtype):
            return bld.fsub(a, b, flags=self.gen.fastmath)
        return bld.xor(a, b) if e.a.dtype == "bool" else bld.sub(a, b)

    def _expr_Mul(self, e: E.Mul) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        if E.is_float(e.a.dtype):
            return bld.fmul(a, b, flags=self.gen.fastmath)
        return bld.and_(a, b) if e.a.dtype == "bool" else bld.mul(a, b)

    def _expr_Div(self, e: E.Div) -> ir.Value:
        a, b = self._operands(e)
        if E.is_float(e.a.dtype):
            return self.scope.builder.fdiv(a, b, flags=self.gen.fastmath)
        # Integer '/' is truncating division (TVM's Div), guarded like FloorDiv.
        return self._int_div(e, a, b, floor=False, mod=False)

    def _expr_FloorDiv(self, e: E.FloorDiv) -> ir.Value:
        a, b = self._operands(e)
        if E.is_float(e.a.dtype):
            bld = self.scope.builder
            return self.gen.math.llvm(bld, "llvm.floor", bld.fdiv(a, b))
        return self._int_div(e, a, b, floor=True, mod=False)

    def _expr_FloorMod(self, e: E.FloorMod) -> ir.Value:
        a, b = self._operands(e)
        if E.is_float(e.a.dtype):
            bld = self.scope.builder
            q = self.gen.math.llvm(bld, "llvm.floor", bld.fdiv(a, b))
            return bld.fsub(a, bld.fmul(q, b))
        return self._int_div(e, a, b, floor=True, mod=True)

    def _int_div(self, e: E.BinaryOp, a: ir.Value, b: ir.Value, floor: bool,
                 mod: bool) -> ir.Value:
        """Integer division / modulo. Signed floor semantics follow Python; a zero divisor
        gives 0 (as numpy does) instead of trapping."""
        bld = self.scope.builder
        dtype = e.a.dtype
        ty = a.type
        zero = splat(ty, 0)
        divisor = const_int(e.b)
        if dtype == "bool":
            return bld.and_(a, b) if not mod else zero
        if not is_signed(dtype):
            if divisor is not None and divisor != 0:
                return bld.urem(a, b) if mod else bld.udiv(a, b)
            safe = bld.select(bld.icmp_unsigned("==", b, zero), splat(ty, 1), b)
            r = bld.urem(a, safe) if mod else bld.udiv(a, safe)
            return bld.select(bld.icmp_unsigned("==", b, zero), zero, r)
        if divisor is not None and divisor > 0:
            if floor and divisor & (divisor - 1) == 0:
                shift = divisor.bit_length() - 1
                if mod:
                    return bld.and_(a, splat(ty, divisor - 1))
                return bld.ashr(a, splat(ty, shift))
            q, r = bld.sdiv(a, b), bld.srem(a, b)
            if not floor:
                return r if mod else q
            negative = bld.icmp_signed("<", r, zero)
            if mod:
                return bld.select(negative, bld.add(r, b), r)
            return bld.sub(q, bld.zext(negative, ty))
        # General divisor: guard 0 and -1 (INT_MIN / -1 traps on x86).
        minus_one = splat(ty, -1)
        is_zero = bld.icmp_signed("==", b, zero)
        is_m1 = bld.icmp_signed("==", b, minus_one)
        safe = bld.select(bld.or_(is_zero, is_m1), splat(ty, 1), b)
        q, r = bld.sdiv(a, safe), bld.srem(a, safe)
        if floor:
            adjust = bld.and_(bld.icmp_signed("!=", r, zero),
                              bld.xor(bld.icmp_signed("<", r, zero),
                                      bld.icmp_signed("<", safe, zero)))
            q = bld.sub(q, bld.zext(adjust, ty))
            r = bld.select(adjust, bld.add(r, safe), r)
        if mod:
            return bld.select(bld.or_(is_zero, is_m1), zero, r)
        q = bld.select(is_m1, bld.sub(zero, a), q)
        return bld.select(is_zero, zero, q)

    def _minmax(self, e: E.BinaryOp, want_max: bool) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        dtype = e.a.dtype
        if E.is_float(dtype):
            m = self.gen.math
            return m.fmax(bld, a, b) if want_max else m.fmin(bld, a, b)
        op = ">" if want_max else "<"
        if is_signed(dtype):
            cond = bld.icmp_signed(op, a, b)
        else:
            cond = bld.icmp_unsigned(op, a, b)
        return bld.select(cond, a, b)

    def _expr_Min(self, e: E.Min) -> ir.Value:
        return self._minmax(e, want_max=False)

    def _expr_Max(self, e: E.Max) -> ir.Value:
        return self._minmax(e, want_max=True)

    def _compare(self, e: E.CmpOp, op: str) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        dtype = e.a.dtype
        if E.is_float(dtype):
            if op == "!=":
                return bld.fcmp_unordered("!=", a, b)
            return bld.fcmp_ordered(op, a, b)
        if is_signed(dtype):
            return bld.icmp_signed(op, a, b)
        return bld.icmp_unsigned(op, a, b)

    def _expr_EQ(self, e: E.EQ) -> ir.Value:
        return self._compare(e, "==")

    def _expr_NE(self, e: E.NE) -> ir.Value:
        return self._compare(e, "!=")

    def _expr_LT(self, e: E.LT) -> ir.Value:
        return self._compare(e, "<")

    def _expr_LE(self, e: E.LE) -> ir.Value:
        return self._compare(e, "<=")

    def _expr_GT(self, e: E.GT) -> ir.Value:
        return self._compare(e, ">")

    def _expr_GE(self, e: E.GE) -> ir.Value:
        return self._compare(e, ">=")

    def _logical(self, e: E.BinaryOp) -> tuple[ir.Value, ir.Value]:
        a, b = self._operands(e)
        if e.a.dtype != "bool":
            raise self.error(f"logical operator on {e.a.dtype} operands", e)
        return a, b

    def _expr_And(self, e: E.And) -> ir.Value:
        a, b = self._logical(e)
        return self.scope.builder.and_(a, b)

    def _expr_Or(self, e: E.Or) -> ir.Value:
        a, b = self._logical(e)
        return self.scope.builder.or_(a, b)

    def _expr_Not(self, e: E.Not) -> ir.Value:
        if e.a.dtype != "bool":
            raise self.error(f"logical not of a {e.a.dtype} operand", e)
        return self.scope.builder.not_(self.expr(e.a))

    def _expr_Select(self, e: E.Select) -> ir.Value:
        cond = self._as_bool(self.expr(e.condition), e.condition)
        if e.true_value.dtype != e.false_value.dtype:
            raise self.error("select branches have different types", e)
        lanes = max(e.true_value.lanes, e.false_value.lanes, e.condition.lanes)
        t = self._broadcast(self.expr(e.true_value), lanes)
        f = self._broadcast(self.expr(e.false_value), lanes)
        if e.condition.lanes not in (1, lanes):
            raise self.error("select condition lanes differ from its values", e)
        return self.scope.builder.select(cond, t, f)

    def _expr_Cast(self, e: E.Cast) -> ir.Value:
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype, e.lanes)

    def cast(self, v: ir.Value, src: str, dst: str, lanes: int) -> ir.Value:
        """Convert ``v`` from dtype ``src`` to ``dst`` as :mod:`tessera.ir.cast` defines it:
        numpy ``astype``, to bool means ``!= 0``, float to integer saturates."""
        if src == dst:
            return v
        b = self.scope.builder
        dst_ty = value_type(dst, lanes)
        if dst == "bool":
            if E.is_float(src):
                return b.fcmp_unordered("!=", v, splat(v.type, 0.0))
            return b.icmp_unsigned("!=", v, splat(v.type, 0))
        f32 = value_type("float32", lanes)
        if src == "float16" and dst != "float32":
            return self.cast(b.fpext(v, f32), "float32", dst, lanes)
        if dst == "float16" and src != "float32":
            return b.fptrunc(self.cast(v, src, "float32", lanes), dst_ty)
        if E.is_float(src) and E.is_float(dst):
            if E.bits(dst) > E.bits(src):
                return b.fpext(v, dst_ty)
            return b.fptrunc(v, dst_ty)
        if E.is_float(src):
            return self._saturating_float_to_int(v, dst, dst_ty)
        signed_src = is_signed(src)
        if E.is_float(dst):
            return b.sitofp(v, dst_ty) if signed_src else b.uitofp(v, dst_ty)
        src_bits, dst_bits = v.type, dst_ty
        sw = (src_bits.element if isinstance(src_bits, ir.VectorType) else src_bits).width
        dw = (dst_bits.element if isinstance(dst_bits, ir.VectorType) else dst_bits).width
        if sw == dw:
            return v
        if sw > dw:
            return b.trunc(v, dst_ty)
        return b.sext(v, dst_ty) if signed_src else b.zext(v, dst_ty)

    def _saturating_float_to_int(self, v: ir.Value, dst: str, dst_ty: ir.Type) -> ir.Value:
        """Float -> integer as :mod:`tessera.ir.cast` defines it: truncation of in-range values,
        the type's limits beyond them (``±inf`` too), 0 for NaN. Compares and selects around a
        plain conversion of in-range values, which vectorize (``llvm.fpto*i.sat`` is lowered
        to scalar code for several vector types on x86, 3-4 times slower)."""
        b = self.scope.builder
        width = E.bits(dst)
        signed = is_signed(dst)
        lo = -(2 ** (width - 1)) if signed else 0
        hi = 2 ** (width - 1) if signed else 2 ** width  # max + 1, a power of two: exact
        # x >= lo (not trunc(x) >= lo) is enough: trunc(x) is then lo itself, the limit.
        flo, fhi = splat(v.type, float(lo)), splat(v.type, float(hi))
        if width <= 16:  # the limits are exact floats: clamp, convert in int32, truncate
            fmax = splat(v.type, float(hi - 1))
            c = b.select(b.fcmp_unordered("uno", v, v), splat(v.type, 0.0), v)
            c = b.select(b.fcmp_ordered("<", c, flo), flo, c)
            c = b.select(b.fcmp_ordered(">", c, fmax), fmax, c)
            i32 = ir.VectorType(I32, v.type.count) if isinstance(v.type, ir.VectorType) else I32
            return b.trunc(b.fptosi(c, i32), dst_ty)
        below = b.fcmp_ordered("<", v, flo)
        above = b.fcmp_ordered(">=", v, fhi)
        inside = b.and_(b.fcmp_ordered(">=", v, flo), b.fcmp_ordered("<", v, fhi))  # not NaN
        x = b.select(inside, v, splat(v.type, 0.0))
        r = b.fptosi(x, dst_ty) if signed else b.fptoui(x, dst_ty)
        r = b.select(above, splat(dst_ty, hi - 1 if signed else -1), r)  # -1: all ones
        return b.select(below, splat(dst_ty, lo), r)

    def _prefetch(self, e: E.Call) -> ir.Value:
        """``prefetch(buf[i])``: a read prefetch of the cache line holding ``buf[i]`` (into
        L2 and closer; no effect on results). Returns int32 0."""
        (target,) = e.args
        if not isinstance(target, E.BufferLoad) or target.lanes != 1:
            raise self.error("prefetch takes one scalar buffer element", e)
        buf = target.buffer
        mem_ty = scalar_type(buf.dtype, memory=True)
        index = self._flat_index(target, buf, target.indices)
        addr = self._address(self._buffer_ptr(target, buf), mem_ty,
                             self._index_value(self.expr(index)))
        fn = self.gen.module.globals.get("llvm.prefetch.p0")
        if fn is None:
            fn = ir.Function(self.gen.module, ir.FunctionType(
                ir.VoidType(), [PTR, I32, I32, I32]), name="llvm.prefetch.p0")
        b = self.scope.builder
        b.call(fn, [addr, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)])
        return ir.Constant(I32, 0)

    def _expr_Call(self, e: E.Call) -> ir.Value:
        if e.name == "prefetch":
            return self._prefetch(e)
        if e.name == E.MASKED_LOAD:
            return self._masked_load(e)
        lanes = e.lanes
        args = [self._broadcast(self.expr(a), lanes) for a in e.args]
        for a in e.args:
            if a.dtype != e.dtype:
                raise self.error(f"argument of type {a.dtype} to {e.name} of type {e.dtype}", e)
        exponent = const_float(e.args[1]) if e.name == "pow" and len(e.args) == 2 else None
        try:
            return self.gen.math.emit(self.scope.builder, e.name, args, e.dtype, exponent)
        except ValueError as exc:
            raise self.error(str(exc), e) from None


def _is_zero(e: E.PrimExpr) -> bool:
    if isinstance(e, E.Broadcast):
        e = e.value
    return isinstance(e, E.IntImm) and e.value == 0


def _accumulating_dot(e: E.Add) -> E.Call | None:
    """``x + dot(a, b, 0)`` (a reduction's update of a dot product intrinsic) as ``dot(a, b,
    x)``: the instructions accumulate (``vpdpwssd``, ``vpdpbusd``), an add after them would
    be one more per vector."""
    for acc, call in ((e.a, e.b), (e.b, e.a)):
        if (isinstance(call, E.Call) and call.name in DOT_PRODUCTS and len(call.args) == 3
                and _is_zero(call.args[2]) and acc.lanes in (1, call.lanes)):
            return E.Call(call.name, [call.args[0], call.args[1], acc], call.dtype)
    return None
