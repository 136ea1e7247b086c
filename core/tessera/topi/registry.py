"""The binding of graph ops (``Conv``, ``Relu``, ``MatMul``, ... from :mod:`tessera.ops`) to topi
computes.

A compute for op ``name`` is registered with a decorator::

    @register_compute("LeakyRelu")
    def _leaky_relu(inputs, attrs, out_types):
        return [leaky_relu(inputs[0], attrs["alpha"])]

It takes the node's input tensors (``None`` for an omitted optional input; inlined constants are
:func:`~tessera.topi.utils.const_tensor` computes), its attributes with defaults filled, and the
types of the outputs the node has (possibly fewer than the op can produce), and returns one TE
tensor per output type. The optional ``supports(node)`` check returns ``None`` when the node can
be computed and otherwise the reason it cannot (an attribute combination not handled, a dtype).

The computes match the op's numpy reference in :mod:`tessera.ops` (the exact semantics): tests
compare every registered compute against it.

The compute modules register their ops when imported, and :mod:`tessera.topi` imports every one
of them (the explicit list, its ``__init__`` and that of :mod:`tessera.topi.nn`); importing this
module runs that package first, so the table is complete before anyone outside it can ask.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tessera import te
from tessera.ir.graph import Node
from tessera.ir.types import TensorType

ComputeFn = Callable[[list["te.Tensor | None"], dict[str, Any], list[TensorType]],
                     list[te.Tensor]]
SupportsFn = Callable[[Node], "str | None"]


@dataclass(frozen=True)
class ComputeEntry:
    """One registered compute: the op name, the function and its optional support check."""

    op: str
    fn: ComputeFn
    supports: SupportsFn | None = None


_COMPUTES: dict[str, ComputeEntry] = {}


def register_compute(op: str, supports: SupportsFn | None = None
                     ) -> Callable[[ComputeFn], ComputeFn]:
    """Decorator registering ``fn(inputs, attrs, out_types) -> list[te.Tensor]`` for ``op``."""

    def deco(fn: ComputeFn) -> ComputeFn:
        if op in _COMPUTES:
            raise ValueError(f"a compute for op {op} is registered twice")
        _COMPUTES[op] = ComputeEntry(op, fn, supports)
        return fn

    return deco


def has_compute(op: str) -> bool:
    """Whether op ``op`` has a registered compute."""
    return op in _COMPUTES


def compute_for(op: str) -> ComputeFn:
    """The compute function registered for ``op`` (KeyError naming the op when none is)."""
    try:
        return _COMPUTES[op].fn
    except KeyError:
        raise KeyError(f"no topi compute for op {op}") from None


def registered_ops() -> list[str]:
    """The ops with a compute, sorted."""
    return sorted(_COMPUTES)


def unsupported_reason(node: Node) -> str | None:
    """``None`` when ``node`` can be built as TE; otherwise why not (naming the node)."""
    entry = _COMPUTES.get(node.op)
    if entry is None:
        return f"node {node.name}: op {node.op} has no topi compute"
    if node.body is not None:
        return f"node {node.name}: op {node.op} has a body"
    for v in (*node.inputs, *node.outputs):
        if v is not None and v.type.dtype.is_low_precision:
            return f"node {node.name} ({node.op}): element type {v.type.dtype} has no TIR type"
    if entry.supports is not None:
        reason = entry.supports(node)
        if reason is not None:
            return f"node {node.name} ({node.op}): {reason}"
    return None


__all__ = [
    "ComputeEntry", "ComputeFn", "SupportsFn", "compute_for", "has_compute", "register_compute",
    "registered_ops", "unsupported_reason",
]
