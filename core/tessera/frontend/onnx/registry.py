"""Converter registry: one small function per ONNX op, keyed by the opset version it starts at.

A converter receives the :class:`~tessera.frontend.onnx.context.ConvertContext` (to add IR
nodes), the ONNX node's input values (``None`` for an omitted optional input) and its attributes
as Python values, and returns the IR values for the node's outputs (a list, or one value)::

    @converter("LeakyRelu", since=6)
    def leaky_relu(ctx, inputs, attrs):
        return ctx.op("LeakyRelu", inputs[0], alpha=attrs.get("alpha", 0.01))

For a model with opset ``v`` the converter with the greatest ``since <= v`` applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tessera.frontend.onnx.context import ConvertContext
    from tessera.ir.graph import Value

ConverterFn = Callable[["ConvertContext", list["Value | None"], dict[str, Any]], Any]

# (domain, op_type) -> sorted list of (since, fn)
_CONVERTERS: dict[tuple[str, str], list[tuple[int, ConverterFn]]] = {}


def _norm_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def converter(op_type: str | Iterable[str], since: int = 1,
              domain: str = "") -> Callable[[ConverterFn], ConverterFn]:
    """Register ``fn`` as the converter of ``op_type`` from opset ``since`` on."""
    names = [op_type] if isinstance(op_type, str) else list(op_type)

    def deco(fn: ConverterFn) -> ConverterFn:
        for name in names:
            entries = _CONVERTERS.setdefault((_norm_domain(domain), name), [])
            if any(s == since for s, _ in entries):
                raise ValueError(f"converter for {name} since opset {since} registered twice")
            entries.append((since, fn))
            entries.sort(key=lambda e: e[0])
        return fn

    return deco


def simple(op_type: str, since: int = 1, ir_op: str | None = None,
           drop: Iterable[str] = (), rename: dict[str, str] | None = None,
           domain: str = "") -> None:
    """Register a converter that maps the node one to one onto IR op ``ir_op`` (same name by
    default), passing attributes through; ``drop`` lists legacy attributes without meaning here
    (``consumed_inputs``, ``is_test``); ``rename`` maps ONNX attribute names to IR ones."""
    target = ir_op or op_type
    dropped = set(drop)
    renames = dict(rename or {})

    def convert(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Any:
        kept = {renames.get(k, k): v for k, v in attrs.items() if k not in dropped}
        return ctx.node(target, inputs, kept)

    convert.__name__ = f"convert_{op_type}"
    converter(op_type, since, domain)(convert)


def find_converter(op_type: str, domain: str, opset: int) -> ConverterFn | None:
    """The converter for ``op_type`` at ``opset``, or None when there is none."""
    entries = _CONVERTERS.get((_norm_domain(domain), op_type), [])
    best = None
    for since, fn in entries:
        if since <= opset:
            best = fn
    return best


def supported_ops() -> dict[tuple[str, str], list[int]]:
    """(domain, op_type) -> the opset versions at which its converters start."""
    return {k: [s for s, _ in v] for k, v in _CONVERTERS.items()}
