"""Converters: ``If``, ``Loop`` and ``Scan``, whose sub-graphs become closed functions held as
graph attributes (outer-scope reads turned into captured inputs: :mod:`..subgraphs`).

An ``If`` whose condition is a constant is not kept: the branch it takes is converted in place
(so a branch the condition never takes may even have other shapes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.registry import converter
from tessera.frontend.onnx.sequence_value import regroup
from tessera.frontend.onnx.subgraphs import share_captures
from tessera.ir.graph import Function, Value
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import normalize_axis

_INT64 = TensorType((), DType.int64)
_BOOL = TensorType((), DType.bool)


def _inline(ctx: ConvertContext, fn: Function, args: list[Value]) -> list[Value]:
    """Add ``fn``'s nodes to the graph ``ctx`` builds, its inputs bound to ``args``."""
    env: dict[int, Value] = {id(v): a for v, a in zip(fn.inputs, args)}

    def get(v: Value | None) -> Value | None:
        if v is None:
            return None
        return env.get(id(v), v)  # constants are shared

    for node in fn.nodes:
        outs = ctx.node(node.op, [get(v) for v in node.inputs], dict(node.attrs),
                        num_outputs=len(node.outputs), name=node.name)
        for old, new in zip(node.outputs, outs):
            env[id(old)] = new
    return [get(v) for v in fn.outputs]  # type: ignore[misc]


@converter("If", since=1)
def convert_if(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Any:
    cond = inputs[0]
    assert cond is not None
    if cond.is_constant:  # only the branch taken is converted
        flat = np.asarray(cond.data).reshape(-1)
        if flat.size != 1:
            raise ctx.error(f"the condition has {flat.size} elements, expected one")
        key = "then_branch" if bool(flat[0]) else "else_branch"
        fn, captured = ctx.subgraph(attrs[key], key, [])
        return _regrouped(fn, attrs[key], _inline(ctx, fn, captured))
    branches = [ctx.subgraph(attrs[k], k, []) for k in ("then_branch", "else_branch")]
    layouts = [_sequence_lengths(fn, attrs[k])
               for (fn, _), k in zip(branches, ("then_branch", "else_branch"))]
    if layouts[0] != layouts[1]:  # sequences of other lengths, or optionals present in one
        ctx.const_value(cond, f"the condition (the branches give sequences or optionals that "
                        f"differ: {layouts[0]} and {layouts[1]})")
    captured = share_captures(branches)
    outs = ctx.node("If", [cond, *captured],
                    {"then_branch": branches[0][0], "else_branch": branches[1][0]},
                    num_outputs=len(branches[0][0].outputs))
    return _regrouped(branches[0][0], attrs["then_branch"], outs)


def _sequence_lengths(fn: Function, graph: onnx.GraphProto) -> list[int | None]:
    """Per output of a converted branch: a sequence's length (-1: an empty optional), or
    None for a tensor."""
    lengths = fn.attrs.get("sequence_outputs", {})
    return [lengths.get(vi.name) for vi in graph.output]


def _regrouped(fn: Function, graph: onnx.GraphProto, outs: list[Value]) -> Any:
    """A branch's flat outputs with its sequences (and empty optionals) regrouped."""
    lengths = fn.attrs.get("sequence_outputs")
    return regroup(outs, [vi.name for vi in graph.output], lengths) if lengths else outs


@converter("Loop", since=1)
def convert_loop(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Any:
    inputs = inputs + [None] * (2 - len(inputs))
    trip, cond, initial = inputs[0], inputs[1], inputs[2:]
    if any(v is None for v in initial):
        raise ctx.error("a loop-carried initial value is missing (optional values are not "
                        "supported)")
    body_proto: onnx.GraphProto = attrs["body"]
    carried = len(initial)
    scans = len(body_proto.output) - 1 - carried
    if scans < 0:
        raise ctx.error(f"the body gives {len(body_proto.output)} outputs; it needs the "
                        f"condition and the {carried} carried values")
    types = [_INT64, _BOOL, *(v.type for v in initial if v is not None)]
    body, captured = ctx.subgraph(body_proto, "body", types)
    scan_length = None
    if scans:
        if trip is None:
            raise ctx.error("the loop has scan outputs but no trip count M; their length would "
                            "depend on values (Tessera compiles static shapes)")
        scan_length = int(np.asarray(ctx.const_value(
            trip, "the trip count M (the loop has scan outputs)")).reshape(-1)[0])
        if cond is not None and cond.is_constant and not bool(np.asarray(cond.data).any()):
            scan_length = 0
        scan_length = max(scan_length, 0)
    return ctx.node("Loop", [trip, cond, *initial, *captured],
                    {"body": body, "captures": len(captured), "scan_length": scan_length})


def _slice_type(t: TensorType, axis: int, lead: int) -> TensorType:
    axis = normalize_axis(axis, t.ndim - lead) + lead
    return t.with_shape(t.shape[lead:axis] + t.shape[axis + 1:])


@converter("Scan", since=9)
def convert_scan(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Any:
    n_scan = int(attrs["num_scan_inputs"])
    if any(v is None for v in inputs):
        raise ctx.error("an input is missing")
    values = [v for v in inputs if v is not None]
    states, scans = values[:len(values) - n_scan], values[len(values) - n_scan:]
    axes = list(attrs.get("scan_input_axes") or [0] * n_scan)
    types = [*(v.type for v in states),
             *(_slice_type(v.type, a, 0) for v, a in zip(scans, axes))]
    body, captured = ctx.subgraph(attrs["body"], "body", types)
    keep = {k: attrs[k] for k in ("num_scan_inputs", "scan_input_axes", "scan_input_directions",
                                  "scan_output_axes", "scan_output_directions") if k in attrs}
    return ctx.node("Scan", [*values, *captured],
                    {**keep, "body": body, "captures": len(captured)})


@converter("Scan", since=8)
def convert_scan8(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Any:
    """Opset 8's Scan: a leading batch axis on every operand and optional sequence lengths
    (accepted when they are constants equal to the full length)."""
    n_scan = int(attrs["num_scan_inputs"])
    lens, values = inputs[0], [v for v in inputs[1:] if v is not None]
    if len(values) != len(inputs) - 1:
        raise ctx.error("an input is missing")
    states, scans = values[:len(values) - n_scan], values[len(values) - n_scan:]
    if lens is not None:
        data = np.asarray(ctx.const_value(lens, "sequence_lens"))
        full = scans[0].type.shape[1]
        if np.any(data != full):
            raise ctx.error(f"sequence_lens {data.tolist()} differ from the scan length {full}; "
                            "only full-length sequences are supported")
    types = [*(v.type.with_shape(v.type.shape[1:]) for v in states),
             *(_slice_type(v.type, 0, 1) for v in scans)]
    body, captured = ctx.subgraph(attrs["body"], "body", types)
    extra = {"scan_input_directions": attrs["directions"]} if attrs.get("directions") else {}
    return ctx.node("Scan", [*values, *captured],
                    {"num_scan_inputs": n_scan, **extra, "body": body,
                     "captures": len(captured), "batch": 1})
