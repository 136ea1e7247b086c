"""Computes of the ops whose values come from the sizes alone (:mod:`tessera.ops.shape`):
``Range``, ``ShapeValues`` and ``ConstantOfShape``.

A static graph folds them into constants; in a graph with symbolic shapes their attributes
hold size expressions (TIR expressions over the size variables), which a kernel of a region
with run-time sizes reads from its sizes array like any extent. So a backend that compiles
such regions runs them in its own kernels, in the regions around them, instead of leaving
them to the reference backend (a region boundary and a Python call each per model run).
Integer results only (a float ``Range`` is computed in float64 by the reference; its
rounding is not reproduced here).
"""

from __future__ import annotations

from typing import Any

from tessera import te
from tessera.ir.graph import Node
from tessera.ir.symbolic import is_dim_expr
from tessera.tir import expr as E
from tessera.topi import tag
from tessera.topi.registry import register_compute


def _int_like(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or is_dim_expr(value)


def _as_index(value: Any) -> E.PrimExpr:
    return E.convert(value, "int64") if isinstance(value, int) else value


def _int_output(node: Node) -> str | None:
    t = node.outputs[0].type
    if not t.dtype.is_int:
        return f"node {node.name} ({node.op}): only integer outputs have a compute, got {t.dtype}"
    return None


def _range_supports(node: Node) -> str | None:
    bad = [k for k in ("start", "limit", "delta") if not _int_like(node.attrs.get(k, 1))]
    if bad:
        return (f"node {node.name} (Range): attributes {', '.join(bad)} must be integers or "
                f"size expressions")
    return _int_output(node)


@register_compute("Range", supports=_range_supports)
def range_compute(inputs: list[te.Tensor], attrs: dict[str, Any],
                  out_types: list[Any]) -> list[te.Tensor]:
    """``start + i * delta`` for ``i`` below the output's length."""
    t = out_types[0]
    start, delta = _as_index(attrs["start"]), _as_index(attrs.get("delta", 1))
    dtype = t.dtype.value
    return [te.compute(t.shape, lambda i: E.cast(dtype, start + i * delta), name="range",
                       tag=tag.INJECTIVE)]


def _shape_values_supports(node: Node) -> str | None:
    values = node.attrs.get("values") or []
    if not all(_int_like(v) for v in values):
        return f"node {node.name} (ShapeValues): values must be integers or size expressions"
    if len(values) > 64:
        return f"node {node.name} (ShapeValues): {len(values)} values (at most 64 compiled)"
    return _int_output(node)


@register_compute("ShapeValues", supports=_shape_values_supports)
def shape_values_compute(inputs: list[te.Tensor], attrs: dict[str, Any],
                         out_types: list[Any]) -> list[te.Tensor]:
    """Element ``k`` (row-major) is ``values[k]``: a select over the flat index."""
    t = out_types[0]
    values = [_as_index(v) for v in attrs["values"]]
    shape = [int(d) for d in t.shape]
    dtype = t.dtype.value

    def body(*ix: E.PrimExpr) -> E.PrimExpr:
        flat: E.PrimExpr = E.convert(0, "int64")
        for i, d in zip(ix, shape):
            flat = flat * d + i
        out = values[-1]
        for k in range(len(values) - 2, -1, -1):
            out = E.Select(E.EQ(flat, E.convert(k, "int64")), values[k], out)
        return E.cast(dtype, out)

    return [te.compute(t.shape, body, name="shape_values", tag=tag.INJECTIVE)]


def _constant_of_shape_supports(node: Node) -> str | None:
    value = node.attrs.get("value")
    if value is not None and getattr(value, "size", 1) != 1:
        return f"node {node.name} (ConstantOfShape): value must hold one element"
    return None


@register_compute("ConstantOfShape", supports=_constant_of_shape_supports)
def constant_of_shape_compute(inputs: list[te.Tensor], attrs: dict[str, Any],
                              out_types: list[Any]) -> list[te.Tensor]:
    """Every element ``value`` (float32 zero by default)."""
    t = out_types[0]
    value = attrs.get("value")
    item = 0.0 if value is None else value.reshape(-1)[0].item()
    dtype = t.dtype.value
    fill = E.const(item if not t.dtype.is_int else int(item), dtype)
    if t.dtype.value == "bool":
        fill = E.IntImm(int(bool(item)), "bool")
    return [te.compute(t.shape, lambda *ix: fill, name="constant_of_shape",
                       tag=tag.INJECTIVE)]


__all__ = ["constant_of_shape_compute", "range_compute", "shape_values_compute"]
