"""A text form of functions that a person can read.

::

    fn main(%x: float32[1, 3, 8, 8]) -> (%y) {
      %conv = Conv(%x, %w: const float32[4, 3, 3, 3], %b: const float32[4]) {pads=[1, 1, 1, 1]}
      %y = Relu(%conv)
    }
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tessera.ir.symbolic import dim_str, is_dim_expr
from tessera.ir.types import DType

if TYPE_CHECKING:  # annotations only: the graph module imports this one
    from tessera.ir.graph import Function, Node, Value


def _fmt_attr(value: Any) -> str:
    if is_dim_expr(value):  # a size expression: seq, 8*batch
        return dim_str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt_attr(v)}" for k, v in value.items()) + "}"
    if hasattr(value, "nodes") and hasattr(value, "inputs"):  # a sub-graph, printed below
        return f"@{value.name}"
    if isinstance(value, DType):  # before str: DType is a str enum
        return value.value
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt_attr(v) for v in value) + "]"
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return f"tensor<{value.dtype}>{value.tolist()}"
        return f"tensor<{value.dtype}{list(value.shape)}>"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _fmt_value(v: Value | None, seen_consts: set[int]) -> str:
    if v is None:
        return "_"
    if v.is_constant and id(v) not in seen_consts:
        seen_consts.add(id(v))
        if v.is_held:
            return f"%{v.name}: const {v.type} (held by {v.held_by})"
        assert v.data is not None
        if v.data.size <= 4:
            return f"%{v.name}: const {v.type} = {v.data.reshape(-1).tolist()}"
        return f"%{v.name}: const {v.type}"
    return f"%{v.name}"


def format_node(node: Node, seen_consts: set[int] | None = None, indent: str = "  ") -> str:
    seen = seen_consts if seen_consts is not None else set()
    outs = ", ".join(f"%{o.name}" for o in node.outputs)
    args = ", ".join(_fmt_value(v, seen) for v in node.inputs)
    attrs = {k: v for k, v in node.attrs.items() if v is not None}
    attr_txt = (" {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(attrs.items())) + "}"
                ) if attrs else ""
    types = ", ".join(str(o.type) for o in node.outputs)
    line = f"{indent}{outs} = {node.op}({args}){attr_txt}  # {types}"
    if node.body is not None:
        body = format_function(node.body, indent + "  ")
        line += "\n" + body
    for key, graph in node.subgraphs:
        line += f"\n{indent}  {key}:\n" + format_function(graph, indent + "  ")
    return line


def format_function(fn: Function, indent: str = "") -> str:
    """The whole function as text (regions nested inside the nodes that hold them)."""
    seen: set[int] = set()
    params = ", ".join(f"%{v.name}: {v.type}" for v in fn.inputs)
    outs = ", ".join(f"%{v.name}" for v in fn.outputs)
    attrs = {k: v for k, v in fn.attrs.items() if k != "output_names"}
    attr_txt = (" [" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(attrs.items())) + "]"
                ) if attrs else ""
    lines = [f"{indent}fn {fn.name}({params}) -> ({outs}){attr_txt} {{"]
    for node in fn.nodes:
        lines.append(format_node(node, seen, indent + "  "))
    lines.append(indent + "}")
    return "\n".join(lines)
