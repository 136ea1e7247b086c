"""Expressions of the loop-level IR (TIR).

Every expression has a scalar element type ``dtype`` (a numpy-style name: ``"float32"``,
``"int32"``, ``"bool"``, ...) and a vector width ``lanes`` (1 for scalars). Python operators
build expressions: ``+ - * / // % -x`` and the comparisons ``< <= > >=``; equality tests use
:func:`eq` / :func:`ne` because ``==`` keeps its Python meaning (expressions are hashable by
identity, so variables can key dicts). Python ints and floats mix freely with expressions and take
the other operand's type.

Integer ``//`` and ``%`` are floor division and modulo (Python semantics, TVM's ``floordiv`` /
``floormod``); ``/`` on integers is an error (use ``//``), on floats it is true division.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tessera.tir.buffer import Buffer

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)

#: The dtype of loop variables and indices.
INDEX_DTYPE = "int64"


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint") or dtype == "bool"


def bits(dtype: str) -> int:
    n = _BITS.get(dtype)
    if n is None:
        n = 1 if dtype == "bool" else int("".join(c for c in dtype if c.isdigit()))
        _BITS[dtype] = n
    return n


#: dtype -> bits, filled as dtypes are met
_BITS: dict[str, int] = {}


class PrimExpr:
    """Base class of every TIR expression."""

    dtype: str = "int64"
    lanes: int = 1

    # -- arithmetic -------------------------------------------------------------------------
    def __add__(self, other: Any) -> PrimExpr:
        return _binary(Add, self, other)

    def __radd__(self, other: Any) -> PrimExpr:
        return _binary(Add, other, self)

    def __sub__(self, other: Any) -> PrimExpr:
        return _binary(Sub, self, other)

    def __rsub__(self, other: Any) -> PrimExpr:
        return _binary(Sub, other, self)

    def __mul__(self, other: Any) -> PrimExpr:
        return _binary(Mul, self, other)

    def __rmul__(self, other: Any) -> PrimExpr:
        return _binary(Mul, other, self)

    def __truediv__(self, other: Any) -> PrimExpr:
        return _binary(Div, self, other)

    def __rtruediv__(self, other: Any) -> PrimExpr:
        return _binary(Div, other, self)

    def __floordiv__(self, other: Any) -> PrimExpr:
        return _binary(FloorDiv, self, other)

    def __rfloordiv__(self, other: Any) -> PrimExpr:
        return _binary(FloorDiv, other, self)

    def __mod__(self, other: Any) -> PrimExpr:
        return _binary(FloorMod, self, other)

    def __rmod__(self, other: Any) -> PrimExpr:
        return _binary(FloorMod, other, self)

    def __neg__(self) -> PrimExpr:
        if isinstance(self, IntImm | FloatImm):
            return type(self)(-self.value, self.dtype)
        return _binary(Sub, const(0, self.dtype), self)

    # -- comparisons (== and != keep identity semantics; use eq/ne) ---------------------------
    def __lt__(self, other: Any) -> PrimExpr:
        return _binary(LT, self, other)

    def __le__(self, other: Any) -> PrimExpr:
        return _binary(LE, self, other)

    def __gt__(self, other: Any) -> PrimExpr:
        return _binary(GT, self, other)

    def __ge__(self, other: Any) -> PrimExpr:
        return _binary(GE, self, other)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("a TIR expression has no truth value; use tir.all_of/any_of/select "
                        "(and tir.eq/ne for equality)")

    def astype(self, dtype: str) -> PrimExpr:
        return cast(dtype, self)

    def __repr__(self) -> str:
        return printer.expr_to_str(self)


# ---- leaves ---------------------------------------------------------------------------------


class IntImm(PrimExpr):
    """An integer (or bool) constant."""

    __slots__ = ("value", "dtype", "lanes")

    def __init__(self, value: int, dtype: str = INDEX_DTYPE) -> None:
        self.value = int(value)
        self.dtype = dtype
        self.lanes = 1


class FloatImm(PrimExpr):
    """A floating-point constant."""

    __slots__ = ("value", "dtype", "lanes")

    def __init__(self, value: float, dtype: str = "float32") -> None:
        self.value = float(value)
        self.dtype = dtype
        self.lanes = 1


class Var(PrimExpr):
    """A variable: a loop index, a let-bound value or a scalar parameter."""

    __slots__ = ("name", "dtype", "lanes")

    def __init__(self, name: str, dtype: str = INDEX_DTYPE) -> None:
        self.name = name
        self.dtype = dtype
        self.lanes = 1


# ---- operators --------------------------------------------------------------------------


class BinaryOp(PrimExpr):
    """``a OP b``; both operands have the same dtype and lanes."""

    __slots__ = ("a", "b", "dtype", "lanes")
    symbol = "?"

    def __init__(self, a: PrimExpr, b: PrimExpr) -> None:
        self.a, self.b = a, b
        self.dtype = a.dtype
        self.lanes = max(a.lanes, b.lanes)


class Add(BinaryOp):
    symbol = "+"


class Sub(BinaryOp):
    symbol = "-"


class Mul(BinaryOp):
    symbol = "*"


class Div(BinaryOp):
    """True division of floats."""

    symbol = "/"


class FloorDiv(BinaryOp):
    """Integer division rounding toward minus infinity."""

    symbol = "//"


class FloorMod(BinaryOp):
    """Integer modulo with the sign of the divisor."""

    symbol = "%"


class Min(BinaryOp):
    symbol = "min"


class Max(BinaryOp):
    symbol = "max"


class CmpOp(BinaryOp):
    """A comparison: the result is bool with the operands' lanes."""

    def __init__(self, a: PrimExpr, b: PrimExpr) -> None:
        super().__init__(a, b)
        self.dtype = "bool"


class EQ(CmpOp):
    symbol = "=="


class NE(CmpOp):
    symbol = "!="


class LT(CmpOp):
    symbol = "<"


class LE(CmpOp):
    symbol = "<="


class GT(CmpOp):
    symbol = ">"


class GE(CmpOp):
    symbol = ">="


class And(BinaryOp):
    symbol = "&&"


class Or(BinaryOp):
    symbol = "||"


class Not(PrimExpr):
    __slots__ = ("a", "dtype", "lanes")

    def __init__(self, a: PrimExpr) -> None:
        self.a = a
        self.dtype = "bool"
        self.lanes = a.lanes


class Select(PrimExpr):
    """``true_value if condition else false_value`` (both sides may be evaluated)."""

    __slots__ = ("condition", "true_value", "false_value", "dtype", "lanes")

    def __init__(self, condition: PrimExpr, true_value: PrimExpr, false_value: PrimExpr) -> None:
        self.condition, self.true_value, self.false_value = condition, true_value, false_value
        self.dtype = true_value.dtype
        self.lanes = max(condition.lanes, true_value.lanes, false_value.lanes)


class Cast(PrimExpr):
    """Convert ``value`` to ``dtype`` (numpy ``astype`` semantics for in-range values)."""

    __slots__ = ("value", "dtype", "lanes")

    def __init__(self, dtype: str, value: PrimExpr) -> None:
        self.value = value
        self.dtype = dtype
        self.lanes = value.lanes


class Call(PrimExpr):
    """A pure intrinsic such as ``exp``, ``sqrt``, ``fabs``, ``pow``, ``erf``, ``tanh``,
    ``floor``, ``ceil``, ``round`` (half to even), ``fma``; elementwise over lanes."""

    __slots__ = ("name", "args", "dtype", "lanes")

    def __init__(self, name: str, args: Sequence[PrimExpr], dtype: str) -> None:
        self.name = name
        self.args = tuple(args)
        self.dtype = dtype
        self.lanes = max((a.lanes for a in self.args), default=1)


#: Intrinsics of masked vector memory access (made by the vectorizer for partial vectors:
#: :mod:`tessera.tir.transform.vectorize`): ``masked_load(B[index], mask)`` reads the lanes
#: inside ``mask`` and gives 0 in the others; a store ``B[index] = masked_store(value, mask)``
#: writes only the lanes inside ``mask``. The lanes outside may address memory outside ``B``.
MASKED_LOAD = "masked_load"
MASKED_STORE = "masked_store"


class BufferLoad(PrimExpr):
    """``buffer[indices]``. With a :class:`Ramp` as the last index it loads a vector."""

    __slots__ = ("buffer", "indices", "dtype", "lanes")

    def __init__(self, buffer: Buffer, indices: Sequence[PrimExpr]) -> None:
        self.buffer = buffer
        self.indices = tuple(convert(i) for i in indices)
        self.dtype = buffer.dtype
        self.lanes = max((i.lanes for i in self.indices), default=1)


class ProducerLoad(PrimExpr):
    """``tensor[indices]`` on a TE tensor (before lowering turns it into a BufferLoad)."""

    __slots__ = ("producer", "indices", "dtype", "lanes")

    def __init__(self, producer: Any, indices: Sequence[PrimExpr]) -> None:
        self.producer = producer
        self.indices = tuple(convert(i) for i in indices)
        self.dtype = producer.dtype
        self.lanes = 1


class Ramp(PrimExpr):
    """The vector ``[base, base + stride, ..., base + (lanes - 1) * stride]``."""

    __slots__ = ("base", "stride", "dtype", "lanes")

    def __init__(self, base: PrimExpr, stride: PrimExpr | int, lanes: int) -> None:
        self.base = convert(base)
        self.stride = convert(stride, self.base.dtype)
        self.dtype = self.base.dtype
        self.lanes = lanes


class Broadcast(PrimExpr):
    """A scalar repeated over ``lanes``."""

    __slots__ = ("value", "dtype", "lanes")

    def __init__(self, value: PrimExpr, lanes: int) -> None:
        self.value = value
        self.dtype = value.dtype
        self.lanes = lanes


class Let(PrimExpr):
    """``body`` with ``var`` bound to ``value``."""

    __slots__ = ("var", "value", "body", "dtype", "lanes")

    def __init__(self, var: Var, value: PrimExpr, body: PrimExpr) -> None:
        self.var, self.value, self.body = var, value, body
        self.dtype = body.dtype
        self.lanes = body.lanes


class Reduce(PrimExpr):
    """A commutative reduction (``combiner`` is ``"sum"``, ``"max"`` or ``"min"``) of
    ``source`` over the reduce axes ``axis`` (TE iteration variables), counting only the points
    where ``condition`` holds. It appears only at the top of a TE compute body."""

    __slots__ = ("combiner", "source", "axis", "condition", "init", "dtype", "lanes")

    def __init__(self, combiner: str, source: PrimExpr, axis: Sequence[Any],
                 condition: PrimExpr | None = None, init: PrimExpr | None = None) -> None:
        if combiner not in ("sum", "max", "min"):
            raise ValueError(f"unknown reduction {combiner!r}; expected sum, max or min")
        self.combiner = combiner
        self.source = source
        self.axis = tuple(axis)
        self.condition = condition
        self.init = init
        self.dtype = source.dtype
        self.lanes = 1

    def identity(self) -> PrimExpr:
        """The combiner's identity (or ``init`` when given)."""
        if self.init is not None:
            return self.init
        if self.combiner == "sum":
            return const(0, self.dtype)
        return max_value(self.dtype) if self.combiner == "min" else min_value(self.dtype)


# ---- construction helpers -----------------------------------------------------------------


def const(value: int | float | bool, dtype: str = INDEX_DTYPE) -> PrimExpr:
    """A constant of ``dtype``."""
    if is_float(dtype):
        return FloatImm(float(value), dtype)
    return IntImm(int(value), dtype)


def convert(value: Any, dtype: str | None = None) -> PrimExpr:
    """A Python number (or expression) as an expression; ints default to the index type."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        return IntImm(int(value), dtype or "bool")
    if isinstance(value, int):
        return const(value, dtype or INDEX_DTYPE)
    if isinstance(value, float):
        return const(value, dtype if dtype and is_float(dtype) else "float32")
    if hasattr(value, "dtype") and hasattr(value, "item"):  # numpy scalar
        return const(value.item(), dtype or str(value.dtype))
    raise TypeError(f"cannot use {value!r} ({type(value).__name__}) as a TIR expression")


def _binary(cls: type[BinaryOp], a: Any, b: Any) -> PrimExpr:
    if not isinstance(a, PrimExpr):
        a = convert(a, b.dtype if isinstance(b, PrimExpr) and b.dtype != "bool" else None)
    if not isinstance(b, PrimExpr):
        b = convert(b, a.dtype if a.dtype != "bool" else None)
    if a.dtype != b.dtype:
        raise TypeError(f"operands of {cls.__name__} have different types {a.dtype} and "
                        f"{b.dtype}; insert a cast")
    if cls is Div and not is_float(a.dtype):
        raise TypeError(f"'/' on {a.dtype} operands; use '//' for integer division")
    if a.lanes != b.lanes:
        if a.lanes == 1:
            a = Broadcast(a, b.lanes)
        elif b.lanes == 1:
            b = Broadcast(b, a.lanes)
        else:
            raise TypeError(f"operands of {cls.__name__} have {a.lanes} and {b.lanes} lanes")
    return cls(a, b)


def cast(dtype: str, value: Any) -> PrimExpr:
    value = convert(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, IntImm | FloatImm) and dtype != "bool":
        if is_int(dtype):
            import numpy as np

            with np.errstate(over="ignore", invalid="ignore"):
                folded = np.array(value.value).astype(np.float64 if is_float(value.dtype)
                                                      else np.int64).astype(dtype)
            return IntImm(int(folded), dtype)
        return const(value.value, dtype)
    return Cast(dtype, value)


def min_(a: Any, b: Any) -> PrimExpr:
    return _binary(Min, a, b)


def max_(a: Any, b: Any) -> PrimExpr:
    return _binary(Max, a, b)


def eq(a: Any, b: Any) -> PrimExpr:
    return _binary(EQ, a, b)


def ne(a: Any, b: Any) -> PrimExpr:
    return _binary(NE, a, b)


def all_of(*conds: PrimExpr) -> PrimExpr:
    """The conjunction of ``conds`` (true when empty)."""
    result: PrimExpr | None = None
    for c in conds:
        result = c if result is None else _binary(And, result, c)
    return result if result is not None else IntImm(1, "bool")


def conjuncts(cond: PrimExpr) -> list[PrimExpr]:
    """The operands of a scalar conjunction ``a && b && ...`` (``[cond]`` when it is none)."""
    if isinstance(cond, And) and cond.lanes == 1:
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def any_of(*conds: PrimExpr) -> PrimExpr:
    """The disjunction of ``conds`` (false when empty)."""
    result: PrimExpr | None = None
    for c in conds:
        result = c if result is None else _binary(Or, result, c)
    return result if result is not None else IntImm(0, "bool")


def logical_not(a: PrimExpr) -> PrimExpr:
    return Not(a)


def select(condition: PrimExpr, true_value: Any, false_value: Any) -> PrimExpr:
    """``true_value`` where ``condition`` holds, else ``false_value``."""
    if not isinstance(true_value, PrimExpr):
        true_value = convert(true_value, false_value.dtype
                             if isinstance(false_value, PrimExpr) else None)
    if not isinstance(false_value, PrimExpr):
        false_value = convert(false_value, true_value.dtype)
    if true_value.dtype != false_value.dtype:
        raise TypeError(f"select branches have types {true_value.dtype} and "
                        f"{false_value.dtype}")
    return Select(condition, true_value, false_value)


#: TVM's name for select inside compute bodies.
if_then_else = select


def call(name: str, *args: Any, dtype: str | None = None) -> PrimExpr:
    """An intrinsic call; the result type defaults to the first argument's."""
    exprs = [convert(a) for a in args]
    return Call(name, exprs, dtype or exprs[0].dtype)


def exp(x: PrimExpr) -> PrimExpr:
    return call("exp", x)


def log(x: PrimExpr) -> PrimExpr:
    return call("log", x)


def sqrt(x: PrimExpr) -> PrimExpr:
    return call("sqrt", x)


def tanh(x: PrimExpr) -> PrimExpr:
    return call("tanh", x)


def erf(x: PrimExpr) -> PrimExpr:
    return call("erf", x)


def fabs(x: PrimExpr) -> PrimExpr:
    return call("fabs", x)


def floor(x: PrimExpr) -> PrimExpr:
    return call("floor", x)


def ceil(x: PrimExpr) -> PrimExpr:
    return call("ceil", x)


def round_even(x: PrimExpr) -> PrimExpr:
    return call("round", x)


def power(x: PrimExpr, y: Any) -> PrimExpr:
    return call("pow", x, convert(y, x.dtype))


def max_value(dtype: str) -> PrimExpr:
    """The largest value of ``dtype`` (``inf`` for floats)."""
    import numpy as np

    if is_float(dtype):
        return FloatImm(float("inf"), dtype)
    if dtype == "bool":
        return IntImm(1, "bool")
    return IntImm(int(np.iinfo(dtype).max), dtype)


def min_value(dtype: str) -> PrimExpr:
    """The smallest value of ``dtype`` (``-inf`` for floats)."""
    import numpy as np

    if is_float(dtype):
        return FloatImm(float("-inf"), dtype)
    if dtype == "bool":
        return IntImm(0, "bool")
    return IntImm(int(np.iinfo(dtype).min), dtype)


# Last, not first: the printer imports this module and tessera.tir.stmt, which imports names
# from this one, all defined by now; this module uses the printer only when called.
from tessera.tir import printer  # noqa: E402
