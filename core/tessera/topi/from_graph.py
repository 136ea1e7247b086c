"""Build the TE graph of a group of graph nodes (a fused primitive function).

:func:`build_te` makes one placeholder per input value, then calls each node's registered
compute (:mod:`tessera.topi.registry`) in order, feeding it the tensors of its inputs.

Constants. A constant value a node reads (a weight, a bias, a zero point) becomes:

* an **inlined immediate** when it has exactly one element (and ``inline_scalars`` is true): a
  :func:`~tessera.topi.utils.const_tensor` whose reads are the immediate itself, so it costs
  nothing at run time and lets computes specialise (``Pow(x, 2)`` is ``x * x``, a quantized
  op's scales fold into one multiplier). Such tensors appear in no ``input_tensors()`` list
  unless a compute reads them with a plain load, and never as placeholders;
* otherwise a **placeholder**, appended after the input values: ``GroupTE.inputs`` lists the
  input values followed by these constants (``GroupTE.constants``), aligned one to one with
  ``GroupTE.placeholders``. The runtime passes their data (``value.data``) as buffers.

Run-time sizes. A value's ``TensorType.shape`` may hold index expressions over the model's size
variables (``Var("seq")``): its placeholder then has those dimensions, the computes build loops
over them (:func:`~tessera.topi.utils.dims_of`), and a compute's output shape is checked
against the node's output type with :func:`~tessera.topi.utils.dim_equal` (ints equal,
expressions equal as polynomials), never with ``==``.

Names. Placeholders are named after their values; each node's output tensors after the output
values, and the intermediate stages of a node ``<node>_<stage>``; every name is made a valid
identifier and unique within the group.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera import te
from tessera.errors import CompileError
from tessera.ir.graph import Node, Value
from tessera.ops.registry import REQUIRED, get_schema
from tessera.topi import registry
from tessera.topi.utils import as_dim, const_tensor, dims_of, shape_text, shapes_equal

#: A backend's own compute of an op (``build_te(computes=...)``): the registry computes'
#: signature, returning None to leave the node to the registry.
ComputeOverride = Callable[[list[Any], dict[str, Any], list[Any]], "list[te.Tensor] | None"]


@dataclass
class GroupTE:
    """The TE graph of a group of nodes.

    ``inputs``: the group's input values, then the constants that became placeholders;
    ``placeholders``: one placeholder tensor per entry of ``inputs``, in order;
    ``outputs``: the tensors of the output values, in order;
    ``tensor_of``: every value's tensor by value name (inputs, constants, node outputs);
    ``constants``: the constant values that became placeholders (the tail of ``inputs``);
    ``inlined``: the one-element constants inlined as immediates.
    """

    inputs: list[Value]
    placeholders: list[te.Tensor]
    outputs: list[te.Tensor]
    tensor_of: dict[str, te.Tensor]
    constants: list[Value] = field(default_factory=list)
    inlined: list[Value] = field(default_factory=list)

    def output_ops(self) -> list[te.Operation]:
        """The operations of the outputs (what a schedule is created for)."""
        return [t.op for t in self.outputs]


def _ident(name: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return s if s and not s[0].isdigit() else "v_" + s


class _Names:
    def __init__(self) -> None:
        self.used: set[str] = set()

    def fresh(self, hint: str) -> str:
        base = _ident(hint)
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def _filled_attrs(node: Node) -> dict:
    """The node's attributes with the schema's defaults filled where missing."""
    attrs = dict(node.attrs)
    try:
        schema = get_schema(node.op)
    except Exception:  # noqa: BLE001 - an op known to topi only (layout ops added later)
        return attrs
    for key, spec in schema.attrs.items():
        if key not in attrs and spec.default is not REQUIRED:
            attrs[key] = spec.default
    return attrs


def _new_ops(results: list[te.Tensor], known: set[int]) -> list[te.Operation]:
    """The compute operations reachable from ``results`` that are not in ``known``."""
    found: list[te.Operation] = []
    stack = [t.op for t in results]
    seen: set[int] = set()
    while stack:
        op = stack.pop()
        if id(op) in known or id(op) in seen:
            continue
        seen.add(id(op))
        if isinstance(op, te.ComputeOp):
            found.append(op)
            stack.extend(t.op for t in op.input_tensors())
    return found


def _type_matches(value: Value, t: te.Tensor) -> bool:
    """Whether tensor ``t`` has ``value``'s element type and shape (dimensions compared with
    :func:`~tessera.topi.utils.dim_equal`: run-time sizes as expressions)."""
    if t.dtype != value.type.dtype.value:
        return False
    try:
        want = [as_dim(d) for d in value.type.shape]
    except TypeError:
        return False
    return shapes_equal(dims_of(t), want)


def build_te(nodes: list[Node], inputs: list[Value], outputs: list[Value],
             inline_scalars: bool = True,
             computes: Mapping[str, ComputeOverride] | None = None) -> GroupTE:
    """The TE graph computing ``outputs`` from ``inputs`` through ``nodes`` (in a topological
    order). Raises :class:`~tessera.errors.CompileError` naming the node when a node has no
    compute or its compute disagrees with the node's output types.

    ``computes`` are a backend's own computes for some ops (TVM's per-target strategies: a
    GPU's packed int8 products): op name -> a function with the registry computes' signature
    (input tensors, attributes, output types) that returns the output tensors, or None to
    leave the node to the registry's compute. Their results are checked like the registry's.
    """
    names = _Names()
    tensor_of: dict[str, te.Tensor] = {}
    by_id: dict[int, te.Tensor] = {}
    group_inputs = list(inputs)
    placeholders: list[te.Tensor] = []
    constants: list[Value] = []
    inlined: list[Value] = []
    known: set[int] = set()

    def bind(value: Value, tensor: te.Tensor) -> None:
        by_id[id(value)] = tensor
        tensor_of[value.name] = tensor
        known.add(id(tensor.op))

    for value in inputs:
        ph = te.placeholder(value.type.shape, value.type.dtype.value, names.fresh(value.name))
        placeholders.append(ph)
        bind(value, ph)

    def tensor_for(value: Value, user: str) -> te.Tensor:
        if id(value) in by_id:
            return by_id[id(value)]
        if value.data is None:
            raise CompileError(f"{user}: value {value.name} is neither a group input nor "
                               f"produced by an earlier node of the group")
        data = np.asarray(value.data)
        if inline_scalars and data.size == 1:
            t = const_tensor(data, names.fresh(value.name))
            inlined.append(value)
        else:
            t = te.placeholder(value.type.shape, value.type.dtype.value, names.fresh(value.name))
            group_inputs.append(value)
            placeholders.append(t)
            constants.append(value)
        bind(value, t)
        return t

    for node in nodes:
        reason = registry.unsupported_reason(node)
        if reason is not None:
            raise CompileError(reason)
        user = f"node {node.name} ({node.op})"
        args = [tensor_for(v, user) if v is not None else None for v in node.inputs]
        out_types = [v.type for v in node.outputs]
        fn = registry.compute_for(node.op)
        own = (computes or {}).get(node.op)
        try:
            attrs = _filled_attrs(node)
            mine = own(args, attrs, out_types) if own is not None else None
            results = list(mine if mine is not None else fn(args, attrs, out_types))
        except CompileError:
            raise
        except Exception as e:  # noqa: BLE001 - report which node failed
            raise CompileError(f"node {node.name} ({node.op}): building its compute failed: "
                               f"{type(e).__name__}: {e}") from e
        if len(results) != len(out_types):
            raise CompileError(f"node {node.name} ({node.op}): compute gave {len(results)} "
                               f"tensors for {len(out_types)} outputs")
        for value, t in zip(node.outputs, results):
            if not _type_matches(value, t):
                raise CompileError(f"node {node.name} ({node.op}): compute gives "
                                   f"{t.dtype}{shape_text(dims_of(t))} for output {value.name} "
                                   f"of type {value.type}")
        fresh = _new_ops(results, known)
        out_ops = {id(t.op): v for t, v in zip(results, node.outputs)}
        for op in reversed(fresh):  # inputs first, so names read in dataflow order
            if id(op) in out_ops:
                op.name = names.fresh(out_ops[id(op)].name)
            else:
                op.name = names.fresh(f"{node.name}_{op.name}")
            known.add(id(op))
        for value, t in zip(node.outputs, results):
            bind(value, t)

    out_tensors = []
    for value in outputs:
        out_tensors.append(tensor_for(value, "group output"))
    return GroupTE(group_inputs, placeholders, out_tensors, tensor_of, constants, inlined)


__all__ = ["GroupTE", "build_te"]


def kernel_names(groups: list, prefix: str = "") -> list[str]:
    """One unique C identifier per fused group, ``<prefix>k<index>_<group name>``, for the
    kernels a backend generates from them."""
    names: list[str] = []
    used: set[str] = set()
    for index, group in enumerate(groups):
        base = "".join(c if c.isalnum() else "_" for c in group.name)[:40]
        name = f"{prefix}k{index}_{base}"
        while name in used:
            name += "_"
        used.add(name)
        names.append(name)
    return names


def group_error(backend: str, group, err: Exception) -> CompileError:  # noqa: ANN001
    """The CompileError of a fused group a backend could not lower, naming its ops and
    anchor node."""
    anchor = group.anchor or group.nodes[-1]
    ops = ", ".join(n.op for n in group.nodes)
    what = str(err) if isinstance(err, CompileError) else f"{type(err).__name__}: {err}"
    return CompileError(f"{backend}: cannot lower fused group {group.name} (ops {ops}; anchor "
                        f"node {anchor.name}): {what}")
