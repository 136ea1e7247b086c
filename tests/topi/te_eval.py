"""A numpy evaluator of tensor-expression graphs: the oracle the topi tests run computes with.

A :class:`~tessera.te.ComputeOp` is evaluated all at once: each data axis becomes an
``np.arange`` grid laid out on its own broadcast dimension, so evaluating the body with numpy
broadcasting gives the whole output. A reduction adds one more broadcast dimension per reduce
axis, masks the points where its ``condition`` fails with the combiner's identity, and reduces
those dimensions with ``np.sum``/``np.max``/``np.min``. Input computes are evaluated
recursively (once each); placeholders are bound to the arrays the caller gives.

Every tensor read is checked to be in bounds (both sides of a ``Select`` are evaluated, as
generated code may do too), so a compute that reads outside its inputs fails here loudly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from tessera import te
from tessera.ir.cast import saturating_astype
from tessera.ops.elementwise import erf as _erf
from tessera.tir import expr as E
from tessera.tir.dot_product import DOT2_S16, DP4A, dot2_s16, dp4a


class OutOfBoundsRead(IndexError):
    """A compute read a tensor outside its shape."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = np.asarray(1, x.dtype)
    return one / (one + np.exp(-x))


_CALLS: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "erf": _erf,
    "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.rint, "pow": np.power,
    "sigmoid": _sigmoid, "fma": lambda a, b, c: a * b + c, "trunc": np.trunc,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "fmod": np.fmod,
    DOT2_S16: dot2_s16, **{name: partial(dp4a, name) for name in DP4A},
}

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.Div: np.true_divide,
    E.FloorDiv: np.floor_divide, E.FloorMod: np.mod, E.Min: np.minimum, E.Max: np.maximum,
    E.EQ: np.equal, E.NE: np.not_equal, E.LT: np.less, E.LE: np.less_equal,
    E.GT: np.greater, E.GE: np.greater_equal, E.And: np.logical_and, E.Or: np.logical_or,
}


class Evaluator:
    """Evaluates tensors of one TE graph; placeholders come from ``feed``."""

    def __init__(self, feed: Mapping[Any, np.ndarray]) -> None:
        self.feed: dict[int, np.ndarray] = {}
        self.feed_by_name: dict[str, np.ndarray] = {}
        for key, value in feed.items():
            if isinstance(key, str):
                self.feed_by_name[key] = np.asarray(value)
            else:
                self.feed[id(key.op)] = np.asarray(value)
        self.memo: dict[tuple[int, int], np.ndarray] = {}
        self.reads = 0

    # -- tensors ---------------------------------------------------------------------------
    def tensor(self, t: te.Tensor) -> np.ndarray:
        key = (id(t.op), t.value_index)
        if key not in self.memo:
            self.memo[key] = self._compute(t)
        return self.memo[key]

    def _compute(self, t: te.Tensor) -> np.ndarray:
        op = t.op
        shape = t.const_shape()
        if isinstance(op, te.PlaceholderOp):
            if id(op) in self.feed:
                value = self.feed[id(op)]
            elif op.name in self.feed_by_name:
                value = self.feed_by_name[op.name]
            else:
                raise KeyError(f"no value given for placeholder {op.name}")
            if tuple(value.shape) != shape or str(value.dtype) != t.dtype:
                raise ValueError(f"placeholder {op.name} is {t.dtype}{list(shape)}, given "
                                 f"{value.dtype}{list(value.shape)}")
            return value
        assert isinstance(op, te.ComputeOp), op
        body = op.body
        n = len(op.axis)
        reduce_axes = list(op.reduce_axis)
        m = len(reduce_axes)
        env: dict[Any, Any] = {}
        for i, iv in enumerate(op.axis):
            extent = _int(iv.dom.extent)
            env[iv] = np.arange(extent, dtype=np.int64).reshape(
                [1] * i + [extent] + [1] * (n - 1 - i + m))
        rshape = []
        for j, rv in enumerate(reduce_axes):
            lo, extent = _int(rv.dom.min), _int(rv.dom.extent)
            rshape.append(extent)
            env[rv] = (lo + np.arange(extent, dtype=np.int64)).reshape(
                [1] * (n + j) + [extent] + [1] * (m - 1 - j))
        with np.errstate(all="ignore"):
            if isinstance(body, E.Reduce):
                full = tuple(shape) + tuple(rshape)
                src = np.broadcast_to(self.expr(body.source, env), full)
                ident = self.expr(body.identity(), env)
                if body.condition is not None:
                    mask = np.broadcast_to(self.expr(body.condition, env), full)
                    src = np.where(mask, src, ident)
                axes = tuple(range(n, n + m))
                if body.combiner == "sum":
                    out = np.sum(src, axis=axes, dtype=src.dtype) + ident
                elif body.combiner == "max":
                    out = np.max(src, axis=axes, initial=ident)
                else:
                    out = np.min(src, axis=axes, initial=ident)
                out = np.asarray(out, dtype=body.dtype)
            else:
                out = np.broadcast_to(self.expr(body, env), shape)
        if str(out.dtype) != t.dtype:
            out = out.astype(t.dtype)
        return np.array(out, order="C")

    # -- expressions ------------------------------------------------------------------------
    def expr(self, e: Any, env: dict[Any, Any]) -> Any:
        if isinstance(e, E.IntImm):
            return np.asarray(e.value, dtype=e.dtype)
        if isinstance(e, E.FloatImm):
            return np.asarray(e.value, dtype=e.dtype)
        if isinstance(e, E.Var):
            if e not in env:
                raise KeyError(f"unbound variable {e.name}")
            return env[e]
        if isinstance(e, E.Not):
            return np.logical_not(self.expr(e.a, env))
        if isinstance(e, E.BinaryOp):
            fn = _BINARY[type(e)]
            a, b = self.expr(e.a, env), self.expr(e.b, env)
            out = fn(a, b)
            if isinstance(e, E.CmpOp | E.And | E.Or):
                return out
            return np.asarray(out).astype(e.dtype, copy=False)
        if isinstance(e, E.Select):
            c = self.expr(e.condition, env)
            return np.where(c, self.expr(e.true_value, env), self.expr(e.false_value, env))
        if isinstance(e, E.Cast):
            return saturating_astype(self.expr(e.value, env), e.dtype)
        if isinstance(e, E.Call):
            fn = _CALLS.get(e.name)
            if fn is None:
                raise NotImplementedError(f"te_eval: no numpy form of intrinsic {e.name}")
            args = [self.expr(a, env) for a in e.args]
            return np.asarray(fn(*args)).astype(e.dtype, copy=False)
        if isinstance(e, E.Let):
            inner = dict(env)
            inner[e.var] = self.expr(e.value, env)
            return self.expr(e.body, inner)
        if isinstance(e, E.ProducerLoad):
            return self._load(e, env)
        raise NotImplementedError(f"te_eval: cannot evaluate {type(e).__name__} in a TE body")

    def _load(self, e: E.ProducerLoad, env: dict[Any, Any]) -> np.ndarray:
        t = e.producer
        data = self.tensor(t)
        idx = [np.asarray(self.expr(i, env)) for i in e.indices]
        for axis, (i, dim) in enumerate(zip(idx, data.shape)):
            if i.dtype.kind not in "iu":
                raise TypeError(f"index {axis} of a read of {t.name} has type {i.dtype}")
            if i.size and (i.min() < 0 or i.max() >= dim):
                raise OutOfBoundsRead(
                    f"read of {t.name}{list(data.shape)} at axis {axis} spans "
                    f"[{i.min()}, {i.max()}]")
        self.reads += 1
        if not idx:
            return data[()]
        return data[tuple(idx)]


def _int(e: Any) -> int:
    if isinstance(e, E.IntImm):
        return e.value
    if isinstance(e, int):
        return e
    raise ValueError(f"te_eval needs constant extents, got {e}")


def evaluate(outputs: te.Tensor | Sequence[te.Tensor],
             feed: Mapping[Any, np.ndarray]) -> np.ndarray | list[np.ndarray]:
    """Evaluate ``outputs`` (one tensor or a list) with placeholders bound by ``feed`` (keys:
    placeholder tensors or their names)."""
    ev = Evaluator(feed)
    if isinstance(outputs, te.Tensor):
        return ev.tensor(outputs)
    return [ev.tensor(t) for t in outputs]


def all_ops(outputs: Sequence[te.Tensor]) -> list[te.Operation]:
    """Every operation the outputs depend on (inputs first)."""
    seen: dict[int, te.Operation] = {}

    def visit(t: te.Tensor) -> None:
        if id(t.op) in seen:
            return
        for inp in t.op.input_tensors():
            visit(inp)
        seen[id(t.op)] = t.op

    for t in outputs:
        visit(t)
    return list(seen.values())


__all__ = ["Evaluator", "OutOfBoundsRead", "all_ops", "evaluate"]
