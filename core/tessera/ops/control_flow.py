"""Ops: control flow. ``If``, ``Loop`` and ``Scan`` own sub-graphs (graph attributes).

Each sub-graph is a closed :class:`~tessera.ir.graph.Function`: the values of enclosing scopes
that an ONNX body reads are, after import, trailing inputs of the node (``captures`` of them)
and trailing inputs of every sub-graph of the node, in the same order. Shapes are static:

* ``If(cond, *captures)``: both branches take the captures and must give outputs of the same
  types (a branch the condition never takes can only be dropped when ``cond`` is a constant).
* ``Loop(M, cond, *initial, *captures)``: the body takes ``(iteration, cond, *carried,
  *captures)`` and gives ``(cond, *carried, *scan_slices)``; carried values keep their types
  from one iteration to the next. Scan outputs stack one slice per iteration, planned for
  ``scan_length`` iterations (the trip count known when the model was compiled); a loop that
  stops at another count raises :class:`~tessera.errors.RunError`.
* ``Scan(*states, *scan_inputs, *captures)``: ONNX's opset-9 form; ``batch=1`` is opset 8's,
  whose operands carry a leading batch axis that the body does not see.

The numpy references here run the bodies with the registry's references (what constant folding
and the reference interpreter use); compiled modules run them with the bodies compiled for the
model's target (the ``controlflow`` backend).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import OpError, RunError
from tessera.ir.graph import Function
from tessera.ir.schema import get_schema
from tessera.ir.symbolic import dim_str, dim_vars
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, normalize_axis, register_op

CONTROL_FLOW_OPS = ("If", "Loop", "Scan")


def run_graph(graph: Function, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate a closed sub-graph on positional inputs with the registry's references."""
    env: dict[int, np.ndarray] = {id(v): np.asarray(a) for v, a in zip(graph.inputs, args)}

    def get(v: Any) -> np.ndarray:
        return v.data if v.data is not None else env[id(v)]

    for node in graph.nodes:
        results = get_schema(node.op).evaluate(
            [get(v) if v is not None else None for v in node.inputs], node.attrs)
        for out, res in zip(node.outputs, results):
            env[id(out)] = res.astype(out.type.dtype.numpy, copy=False)
    return [get(v) for v in graph.outputs]


def truth(value: np.ndarray, what: str) -> bool:
    """A one-element boolean tensor as a Python bool."""
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise RunError(f"{what} has {flat.size} elements, expected one")
    return bool(flat[0])


def _at(t: TensorType, sizes: dict[str, int]) -> TensorType:
    """``t`` at ``sizes`` where they give all its variables, else ``t``."""
    if not sizes or t.is_static or not t.variables <= set(sizes):
        return t
    return t.evaluate(sizes)


def _types(values: Sequence[Any], sizes: dict[str, int] | None = None) -> list[TensorType]:
    return [_at(v.type, sizes or {}) for v in values]


def _bound_sizes(graph: Function, want: Sequence[TensorType | None]) -> dict[str, int]:
    """The sub-graph's size variables that the node gives static sizes: a symbolic model's
    sub-graph keeps its inputs' symbolic types, and the node's type inference probes it at
    sizes (:mod:`tessera.ir.probe`), where its inputs' dimensions that are a variable take
    the node's."""
    sizes: dict[str, int] = {}
    for v, t in zip(graph.inputs, want):
        if t is None or not t.is_static or v.type.is_static or v.type.ndim != t.ndim:
            continue
        for have, size in zip(v.type.shape, t.shape):
            if type(have) is not int and dim_vars(have) == {dim_str(have)}:
                sizes.setdefault(dim_str(have), int(size))
    return sizes


def _check_inputs(graph: Function, want: Sequence[TensorType | None],
                  what: str) -> dict[str, int]:
    """Check the node's input types against the sub-graph's; the sizes its variables take
    (:func:`_bound_sizes`), at which its output types are read."""
    if len(graph.inputs) != len(want):
        raise OpError(f"{what} takes {len(graph.inputs)} inputs, the node gives {len(want)}")
    sizes = _bound_sizes(graph, want)
    for i, (v, t) in enumerate(zip(graph.inputs, want)):
        if t is not None and _at(v.type, sizes) != t:
            raise OpError(f"{what} input {i} (%{v.name}) is {v.type}, the node gives {t}")
    return sizes


def _check_flag(t: TensorType | None, what: str, dtype: DType) -> None:
    if t is not None and (t.dtype != dtype or t.size != 1):
        raise OpError(f"{what} must be a one-element {dtype} tensor, got {t}")


# -- If ---------------------------------------------------------------------------------------

def _if_infer(cond: TensorType, *captures: TensorType, then_branch: Function,
              else_branch: Function) -> list[TensorType]:
    _check_flag(cond, "the condition", DType.bool)
    then_sizes = _check_inputs(then_branch, captures, "then_branch")
    else_sizes = _check_inputs(else_branch, captures, "else_branch")
    then_types = _types(then_branch.outputs, then_sizes)
    else_types = _types(else_branch.outputs, else_sizes)
    if len(then_types) != len(else_types):
        raise OpError(f"then_branch gives {len(then_types)} outputs, else_branch "
                      f"{len(else_types)}")
    for i, (a, b) in enumerate(zip(then_types, else_types)):
        if a != b:
            raise OpError(f"output {i} is {a} in then_branch and {b} in else_branch; Tessera "
                          "compiles static shapes, so both branches must agree (unless the "
                          "condition is a constant)")
    return then_types


@register_op("If", attrs={"then_branch": Attr.graph(), "else_branch": Attr.graph()},
             inputs=(1, None), infer=_if_infer)
def if_(cond: np.ndarray, *captures: np.ndarray, then_branch: Function,
        else_branch: Function) -> tuple[np.ndarray, ...]:
    """Run one branch on the captured values."""
    branch = then_branch if truth(cond, "If's condition") else else_branch
    return tuple(run_graph(branch, captures))


# -- Loop -------------------------------------------------------------------------------------

def loop_parts(n_inputs: int, body: Function, captures: int) -> tuple[int, int]:
    """(carried values, scan outputs) of a Loop with ``n_inputs`` inputs."""
    carried = n_inputs - 2 - captures
    scans = len(body.outputs) - 1 - carried
    if carried < 0 or scans < 0:
        raise OpError(f"{n_inputs} inputs with {captures} captured values and a body of "
                      f"{len(body.outputs)} outputs do not make a Loop")
    return carried, scans


def _loop_infer(trip: TensorType | None, cond: TensorType | None, *rest: TensorType,
                body: Function, captures: int, scan_length: int | None) -> list[TensorType]:
    _check_flag(trip, "the trip count M", DType.int64)
    _check_flag(cond, "the condition", DType.bool)
    carried, scans = loop_parts(2 + len(rest), body, captures)
    sizes = _check_inputs(body, [TensorType((), DType.int64), TensorType((), DType.bool),
                                 *rest], "the body")
    outs = _types(body.outputs, sizes)
    _check_flag(outs[0], "the body's condition output", DType.bool)
    for i in range(carried):
        if outs[1 + i] != rest[i]:
            raise OpError(f"loop-carried value {i} enters the body as {rest[i]} and leaves it "
                          f"as {outs[1 + i]}; Tessera compiles static shapes, so a carried "
                          "value must keep its type")
    if scans and scan_length is None:
        raise OpError("the Loop has scan outputs but no trip count known at compile time "
                      "(scan_length); give M as a constant (or freeze the inputs it comes from)")
    return [*rest[:carried], *(t.with_shape((scan_length, *t.shape)) for t in outs[1 + carried:])]


@register_op("Loop", attrs={"body": Attr.graph(), "captures": Attr.int(0),
                            "scan_length": Attr.int(None)},
             inputs=(0, None), infer=_loop_infer)
def loop(trip: np.ndarray | None, cond: np.ndarray | None, *rest: np.ndarray, body: Function,
         captures: int, scan_length: int | None) -> tuple[np.ndarray, ...]:
    """Run the body until the trip count is reached or its condition output is false."""
    carried_n, scans_n = loop_parts(2 + len(rest), body, captures)
    carried = list(rest[:carried_n])
    outer = list(rest[carried_n:])
    limit = int(np.asarray(trip).reshape(-1)[0]) if trip is not None else None
    keep = truth(cond, "Loop's condition") if cond is not None else True
    slices: list[list[np.ndarray]] = [[] for _ in range(scans_n)]
    i = 0
    while keep and (limit is None or i < limit):
        outs = run_graph(body, [np.array(i, np.int64), np.array(keep), *carried, *outer])
        keep = truth(outs[0], "the Loop body's condition output")
        carried = outs[1:1 + carried_n]
        for k in range(scans_n):
            slices[k].append(outs[1 + carried_n + k])
        i += 1
    check_scan_length(i, scan_length, scans_n, "Loop")
    stacked = [np.stack(s) if s else np.zeros((0, *t.type.shape), t.type.dtype.numpy)
               for s, t in zip(slices, body.outputs[1 + carried_n:])]
    return (*carried, *stacked)


def check_scan_length(iterations: int, scan_length: int | None, scans: int, where: str) -> None:
    """Refuse a loop whose scan outputs would not fill the length they were planned for."""
    if scans and iterations != scan_length:
        raise RunError(f"{where} ran {iterations} iterations but its scan outputs were "
                       f"compiled for {scan_length} (the trip count known at compile time); "
                       "a loop that stops early has outputs of data-dependent length")


# -- Scan -------------------------------------------------------------------------------------

def scan_axes(attrs_axes: list[int] | None, count: int) -> list[int]:
    return list(attrs_axes) if attrs_axes else [0] * count


def scan_layout(n_inputs: int, num_scan_inputs: int, captures: int) -> tuple[int, int]:
    """(states, scan inputs) of a Scan with ``n_inputs`` inputs."""
    states = n_inputs - num_scan_inputs - captures
    if states < 0 or num_scan_inputs < 1:
        raise OpError(f"{n_inputs} inputs cannot hold {num_scan_inputs} scan inputs and "
                      f"{captures} captured values")
    return states, num_scan_inputs


def _scan_infer(*types: TensorType, body: Function, num_scan_inputs: int,
                scan_input_axes: list[int] | None, scan_input_directions: list[int] | None,
                scan_output_axes: list[int] | None, scan_output_directions: list[int] | None,
                captures: int, batch: int) -> list[TensorType]:
    n_states, n_scans = scan_layout(len(types), num_scan_inputs, captures)
    states, scans = types[:n_states], types[n_states:n_states + n_scans]
    outer = types[n_states + n_scans:]
    lead = 1 if batch else 0
    in_axes = scan_axes(scan_input_axes, n_scans)
    length = None
    slice_types = []
    for i, t in enumerate(scans):
        axis = normalize_axis(in_axes[i], t.ndim - lead) + lead
        if length is not None and t.shape[axis] != length:
            raise OpError(f"scan input {i} has {t.shape[axis]} steps along axis {axis}, scan "
                          f"input 0 has {length}")
        length = t.shape[axis]
        slice_types.append(t.with_shape(t.shape[lead:axis] + t.shape[axis + 1:]))
    body_states = [t.with_shape(t.shape[lead:]) for t in states]
    sizes = _check_inputs(body, [*body_states, *slice_types, *outer], "the body")
    outs = _types(body.outputs, sizes)
    if len(outs) < n_states:
        raise OpError(f"the body gives {len(outs)} outputs, fewer than its {n_states} states")
    for i in range(n_states):
        if outs[i] != body_states[i]:
            raise OpError(f"state {i} enters the body as {body_states[i]} and leaves it as "
                          f"{outs[i]}")
    out_axes = scan_axes(scan_output_axes, len(outs) - n_states)
    result = list(states)
    batch_dims = states[0].shape[:1] if batch and states else (
        scans[0].shape[:1] if batch else ())
    for k, t in enumerate(outs[n_states:]):
        axis = normalize_axis(out_axes[k], t.ndim + 1)
        shape = (*t.shape[:axis], length, *t.shape[axis:])
        result.append(t.with_shape((*batch_dims, *shape)))
    return result


@register_op("Scan", attrs={"body": Attr.graph(), "num_scan_inputs": Attr.int(),
                            "scan_input_axes": Attr.ints(None),
                            "scan_input_directions": Attr.ints(None),
                            "scan_output_axes": Attr.ints(None),
                            "scan_output_directions": Attr.ints(None),
                            "captures": Attr.int(0), "batch": Attr.int(0)},
             inputs=(1, None), infer=_scan_infer)
def scan(*inputs: np.ndarray, body: Function, num_scan_inputs: int,
         scan_input_axes: list[int] | None, scan_input_directions: list[int] | None,
         scan_output_axes: list[int] | None, scan_output_directions: list[int] | None,
         captures: int, batch: int) -> tuple[np.ndarray, ...]:
    """Run the body once per step of the scan inputs, carrying the states."""
    plan = ScanPlan(len(inputs), body, num_scan_inputs, scan_input_axes, scan_input_directions,
                    scan_output_axes, scan_output_directions, captures)
    if not batch:
        return tuple(plan.run(list(inputs), lambda args: run_graph(body, args)))
    per_item = [plan.run([x[b] if i < plan.states + plan.scans else x
                          for i, x in enumerate(inputs)], lambda args: run_graph(body, args))
                for b in range(inputs[0].shape[0])]
    return tuple(np.stack(parts) for parts in zip(*per_item))


class ScanPlan:
    """How a Scan steps: which inputs are states, scan inputs and captures, and the axes and
    directions of its scan inputs and outputs (shared by the numpy reference and the compiled
    form, which differ only in how one step runs)."""

    def __init__(self, n_inputs: int, body: Function, num_scan_inputs: int,
                 input_axes: list[int] | None, input_directions: list[int] | None,
                 output_axes: list[int] | None, output_directions: list[int] | None,
                 captures: int):
        self.states, self.scans = scan_layout(n_inputs, num_scan_inputs, captures)
        self.outputs = len(body.outputs) - self.states
        self.in_axes = scan_axes(input_axes, self.scans)
        self.in_dirs = list(input_directions) if input_directions else [0] * self.scans
        self.out_axes = scan_axes(output_axes, self.outputs)
        self.out_dirs = list(output_directions) if output_directions else [0] * self.outputs
        self.slice_types = [v.type for v in body.outputs[self.states:]]

    def run(self, inputs: list[np.ndarray], step: Any) -> list[np.ndarray]:
        """The outputs of one (unbatched) Scan; ``step(args) -> outputs`` runs the body."""
        states = inputs[:self.states]
        scans = inputs[self.states:self.states + self.scans]
        outer = inputs[self.states + self.scans:]
        axes = [normalize_axis(a, x.ndim) for a, x in zip(self.in_axes, scans)]
        length = scans[0].shape[axes[0]]
        collected: list[list[np.ndarray]] = [[] for _ in range(self.outputs)]
        for t in range(length):
            slices = [np.take(x, length - 1 - t if d else t, axis=a)
                      for x, a, d in zip(scans, axes, self.in_dirs)]
            outs = step([*states, *slices, *outer])
            states = list(outs[:self.states])
            for k in range(self.outputs):
                collected[k].append(np.asarray(outs[self.states + k]))
        result = [np.asarray(s) for s in states]
        for k, parts in enumerate(collected):
            t = self.slice_types[k]
            if self.out_dirs[k]:
                parts = parts[::-1]
            axis = normalize_axis(self.out_axes[k], t.ndim + 1)
            stacked = (np.stack(parts, axis=axis) if parts else
                       np.zeros((*t.shape[:axis], 0, *t.shape[axis:]), t.dtype.numpy))
            result.append(stacked)
        return result
