"""A structural key of a fused group: groups with equal keys compile to the same kernel.

A transformer of N identical layers has N copies of each of its fused groups, which differ
only in the names of their values and nodes and in their weights' data; a backend that lowers
each group to TIR and generates its code spends N times the compile time on them. With
:func:`group_key` it lowers the first one and lets the others run its code
(:func:`tessera.kernel.lowering.lower_groups`, ``share``).

The key is the SHA-256 of a canonical text of everything a kernel's code depends on:

* the group's pattern and its anchor's position;
* per node, in order: its op, its attributes (ints, floats, strings, booleans, None,
  sequences, mappings, enums, numpy arrays by dtype, shape and bytes, dimension and TIR
  expressions by their text), each input as a reference (a group input's position, or the
  position of the node and output that make it; ``None`` for an omitted optional input) and
  the type of each output (symbolic dimensions included);
* per group input: its type, whether it is a constant, and for a constant whose data the
  kernel reads at compile time its data's hash: :func:`~tessera.topi.from_graph.build_te`
  inlines one-element constants as immediates, every larger constant is a kernel parameter
  (a weight) whose data is not compiled in, so only its type counts;
* the group's outputs as references.

Value and node names never enter the key. A group the key cannot describe (a node holding a
body, an attribute of another kind, a held constant that the kernel would read) has key
``None``: it is never shared.
"""

from __future__ import annotations

import enum
import hashlib
from typing import Any

import numpy as np

from tessera.ir.graph import Value
from tessera.ir.symbolic import dim_str, is_dim_expr
from tessera.kernel.fuse_ops import FusedGroup
from tessera.tir import expr as E

__all__ = ["group_key", "inlined_constant"]


class _NoKey(Exception):
    """An attribute or value the key cannot describe: the group is not shared."""


def inlined_constant(value: Value) -> bool:
    """Whether the kernel of a group reading constant ``value`` compiles its data in (a
    one-element constant, inlined as an immediate by ``build_te``)."""
    return value.is_constant and value.type.is_static and value.type.size == 1


def _array_text(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    if a.dtype == object:
        raise _NoKey
    digest = hashlib.sha256(a.tobytes()).hexdigest()
    return f"array({a.dtype.str},{a.shape},{digest})"


def _attr_text(value: Any) -> str:
    """The canonical text of an attribute value; _NoKey for one of an unknown kind."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return repr(None if value is None else bool(value))
    if isinstance(value, enum.Enum):
        return f"enum({type(value).__qualname__}.{value.name})"
    if isinstance(value, (int, np.integer)):
        return f"int({int(value)})"
    if isinstance(value, (float, np.floating)):
        return f"float({type(value).__name__},{float(value)!r})"
    if isinstance(value, str):
        return f"str({value!r})"
    if isinstance(value, bytes):
        return f"bytes({value.hex()})"
    if isinstance(value, np.ndarray):
        return _array_text(value)
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return f"{kind}({','.join(_attr_text(v) for v in value)})"
    if isinstance(value, dict):
        items = sorted((_attr_text(k), _attr_text(v)) for k, v in value.items())
        return "dict(" + ",".join(f"{k}:{v}" for k, v in items) + ")"
    if is_dim_expr(value):
        return f"dim({dim_str(value)})"
    if isinstance(value, E.PrimExpr):
        return f"tir({type(value).__name__},{value})"
    raise _NoKey


def _input_text(value: Value) -> str:
    if not value.is_constant:
        return f"input {value.type}"
    if not inlined_constant(value):
        return f"constant {value.type}"
    if value.is_held:
        raise _NoKey  # its data, compiled in, is not here to compare
    return f"constant {value.type} {_array_text(np.asarray(value.data))}"


def _canonical_text(group: FusedGroup) -> str:
    refs: dict[int, str] = {}
    anchor = [i for i, n in enumerate(group.nodes) if n is group.anchor]
    if group.anchor is not None and not anchor:
        raise _NoKey
    lines = [f"pattern {group.pattern.name}", f"anchor {anchor[0] if anchor else 'none'}"]
    for i, v in enumerate(group.inputs):
        refs[id(v)] = f"in{i}"
        lines.append(f"in{i} {_input_text(v)}")

    def ref(v: Value | None) -> str:
        if v is None:
            return "none"
        if id(v) not in refs:
            raise _NoKey  # read from neither the group's inputs nor an earlier node
        return refs[id(v)]

    for i, node in enumerate(group.nodes):
        if node.body is not None:
            raise _NoKey
        attrs = ",".join(f"{k!r}={_attr_text(node.attrs[k])}" for k in sorted(node.attrs))
        ins = ",".join(ref(v) for v in node.inputs)
        outs = []
        for j, v in enumerate(node.outputs):
            refs[id(v)] = f"n{i}.{j}"
            outs.append(str(v.type))
        lines.append(f"n{i} {node.op} ({ins}) -> ({','.join(outs)}) {{{attrs}}}")
    lines.append("out " + ",".join(ref(v) for v in group.outputs))
    return "\n".join(lines)


def group_key(group: FusedGroup) -> str | None:
    """The structural key of ``group`` (a SHA-256 hex digest, see the module's docstring):
    equal for groups that compile to the same kernel up to the names of their values; None
    for a group that must not be shared."""
    try:
        text = _canonical_text(group)
    except _NoKey:
        return None
    return hashlib.sha256(text.encode()).hexdigest()
