"""Tensor expressions: placeholders, computes over index lambdas, and reductions.

A :class:`Tensor` is one output of an :class:`Operation`: a :class:`PlaceholderOp` (an input the
caller passes) or a :class:`ComputeOp` (``out[i, j, ...] = body(i, j, ...)``, where the body is a
TIR expression that may index other tensors and may be a reduction over reduce axes)::

    A = te.placeholder((n, k), "float32", name="A")
    B = te.placeholder((k, m), "float32", name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")

Indexing a tensor gives a :class:`~tessera.tir.ProducerLoad`; iteration variables are
:class:`IterVar` objects, which are TIR variables with a domain, so they appear in expressions
directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from tessera.tir.expr import INDEX_DTYPE, IntImm, PrimExpr, ProducerLoad, Reduce, Var, cast, convert
from tessera.tir.functor import post_order_visit


class Range:
    """``[min, min + extent)``."""

    def __init__(self, min: Any, extent: Any) -> None:
        self.min = convert(min)
        self.extent = convert(extent)

    def __repr__(self) -> str:
        return f"Range({self.min}, {self.extent})"


class IterVar(Var):
    """A loop variable with a domain: a data-parallel axis of a compute (``kind="data"``), a
    reduce axis (``kind="reduce"``), or an axis a schedule created (split, fuse, thread)."""

    __slots__ = ("dom", "kind", "thread_tag")

    def __init__(self, dom: Range | None, name: str, kind: str = "data",
                 thread_tag: str = "") -> None:
        super().__init__(name, INDEX_DTYPE)
        self.dom = dom
        self.kind = kind
        self.thread_tag = thread_tag

    @property
    def var(self) -> Var:
        """The variable itself (TVM spells it ``iv.var``)."""
        return self


class Operation:
    """Base of placeholder and compute operations."""

    name: str
    tag: str = ""
    attrs: dict[str, Any]

    def output(self, index: int = 0) -> Tensor:
        return self.outputs[index]

    @property
    def outputs(self) -> list[Tensor]:
        return self._outputs

    def input_tensors(self) -> list[Tensor]:
        return []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class Tensor:
    """One output of an operation: a shape (ints) and an element type."""

    def __init__(self, op: Operation, shape: Sequence[Any], dtype: str,
                 value_index: int = 0) -> None:
        self.op = op
        self.shape = tuple(convert(s) for s in shape)
        self.dtype = dtype
        self.value_index = value_index

    @property
    def name(self) -> str:
        return self.op.name if self.value_index == 0 else f"{self.op.name}.{self.value_index}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def const_shape(self) -> tuple[int, ...]:
        """The shape as ints (an error when a dimension is a run-time size)."""
        for s in self.shape:
            if not isinstance(s, IntImm):
                raise ValueError(f"tensor {self.name} has a symbolic dimension {s}")
        return tuple(s.value for s in self.shape)  # type: ignore[attr-defined]

    def __call__(self, *indices: Any) -> ProducerLoad:
        return self[indices]

    def __getitem__(self, indices: Any) -> ProducerLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise IndexError(f"tensor {self.name} has {len(self.shape)} dimensions, indexed "
                             f"with {len(indices)}")
        return ProducerLoad(self, [convert(i) for i in indices])

    def __repr__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        return f"Tensor({self.name}: {self.dtype}[{dims}])"


class PlaceholderOp(Operation):
    """An input tensor."""

    def __init__(self, name: str, shape: Sequence[Any], dtype: str) -> None:
        self.name = name
        self.tag = ""
        self.attrs = {}
        self._outputs = [Tensor(self, shape, dtype)]


class ComputeOp(Operation):
    """``out[axis] = body`` over the data-parallel ``axis`` (one IterVar per dimension);
    ``reduce_axis`` lists the reduce axes when the body is a :class:`~tessera.tir.Reduce`."""

    def __init__(self, name: str, tag: str, attrs: dict[str, Any], axis: list[IterVar],
                 body: PrimExpr, dtype: str | None = None) -> None:
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs)
        self.axis = axis
        self.body = body
        self.reduce_axis: list[IterVar] = (
            [a for a in body.axis] if isinstance(body, Reduce) else [])
        shape = [a.dom.extent for a in axis]  # type: ignore[union-attr]
        self._outputs = [Tensor(self, shape, dtype or body.dtype)]

    def input_tensors(self) -> list[Tensor]:
        """The tensors the body reads, in first-use order."""
        found: list[Tensor] = []

        def visit(node: Any) -> None:
            if isinstance(node, ProducerLoad) and node.producer not in found:
                found.append(node.producer)

        post_order_visit(self.body, visit)
        return found


def placeholder(shape: Sequence[Any], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` and ``dtype``."""
    return PlaceholderOp(name, shape, dtype).output(0)


def reduce_axis(dom: tuple[Any, Any] | Range, name: str = "rv") -> IterVar:
    """A reduce axis over ``[dom[0], dom[1])`` (TVM convention: (begin, end))."""
    if isinstance(dom, Range):
        rng = dom
    else:
        begin, end = (convert(d) for d in dom)
        if isinstance(begin, IntImm) and isinstance(end, IntImm):
            rng = Range(begin, IntImm(end.value - begin.value))
        elif isinstance(begin, IntImm) and begin.value == 0:
            rng = Range(begin, end)  # (0, n): extent n, not n - 0
        else:
            rng = Range(begin, end - begin)
    return IterVar(rng, name, "reduce")


_counter = {"compute": 0}


def compute(shape: Sequence[Any], fcompute: Callable[..., PrimExpr], name: str = "compute",
            tag: str = "", attrs: dict[str, Any] | None = None,
            dtype: str | None = None) -> Tensor:
    """A tensor of ``shape`` whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    ``fcompute`` takes one argument per dimension (or a single ``*indices`` argument) and returns
    an expression, possibly a reduction made with :func:`sum`, :func:`max` or :func:`min`.
    ``tag`` names the kind of compute for schedules (``"conv2d_NCHWc"``, ``"injective"``);
    ``attrs`` carries schedule facts. ``dtype`` casts the body when given."""
    shape = tuple(convert(s) for s in shape)
    params = inspect.signature(fcompute).parameters
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params.values())
    names = [f"ax{i}" for i in range(len(shape))] if varargs else list(params)
    if not varargs and len(names) != len(shape):
        raise ValueError(f"compute {name}: fcompute takes {len(names)} indices for a "
                         f"{len(shape)}-dimensional shape")
    axis = [IterVar(Range(0, s), n, "data") for n, s in zip(names, shape)]
    body = fcompute(*axis)
    body = convert(body)
    if dtype is not None and body.dtype != dtype:
        if isinstance(body, Reduce):
            raise ValueError(f"compute {name}: cast the reduction's source, not the reduction")
        body = cast(dtype, body)
    return ComputeOp(name, tag, attrs or {}, axis, body).output(0)


def _reducer(combiner: str) -> Callable[..., Reduce]:
    def reduce(expr: PrimExpr, axis: IterVar | Sequence[IterVar],
               where: PrimExpr | None = None, init: Any = None) -> Reduce:
        axes = [axis] if isinstance(axis, IterVar) else list(axis)
        for a in axes:
            if not isinstance(a, IterVar) or a.kind != "reduce":
                raise TypeError(f"te.{combiner}: axis {a!r} is not a reduce_axis")
        return Reduce(combiner, convert(expr), axes, where,
                      convert(init, expr.dtype) if init is not None else None)

    reduce.__name__ = combiner
    reduce.__doc__ = f"The {combiner} of ``expr`` over reduce ``axis`` (where ``where`` holds)."
    return reduce


sum = _reducer("sum")  # noqa: A001 - TVM's name
max = _reducer("max")  # noqa: A001
min = _reducer("min")  # noqa: A001


def compute_ops(outputs: list[Tensor]) -> list[ComputeOp]:
    """Every compute op the ``outputs`` depend on, producers first (what a schedule template
    walks)."""
    order: list[ComputeOp] = []
    seen: set[int] = set()

    def visit(op: Operation) -> None:
        if id(op) in seen or not isinstance(op, ComputeOp):
            return
        seen.add(id(op))
        for t in op.input_tensors():
            visit(t.op)
        order.append(op)

    for t in outputs:
        visit(t.op)
    return order
