"""The control-flow backend: one kernel per ``If``, ``Loop`` or ``Scan`` node, each running the
node's sub-graphs compiled for the module's own target (``CompileOptions.subgraphs``).

Every target's fallbacks include it, ahead of the reference backend, so a model with control
flow compiles for any target; a backend that compiles a whole loop itself claims the node first.
A kernel takes one session of each sub-graph it runs for the length of the call (concurrent
calls of the module never share buffers) and, in a loop, writes the captured outer values into
the body's inputs once and the carried values once per iteration: host copies of what the
body's outputs hold, never a transfer to or from another device by this backend itself (a body
whose regions run on a device copies its inputs there as any module does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.backends.control_flow.flex_attention import flex_attention_kernel
from tessera.errors import CompileError, RunError
from tessera.ir.graph import Function, Node
from tessera.ops.control_flow import (
    CONTROL_FLOW_OPS,
    check_scan_length,
    loop_parts,
    scan_axes,
    scan_layout,
    truth,
)
from tessera.ops.registry import normalize_axis
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, Kernel, KernelFn
from tessera.plugin.patterns import Pattern
from tessera.plugin.subgraphs import CompiledSubgraph, SubgraphCompiler, SubgraphSession
from tessera.plugin.target import TargetKind


def _write(bufs: list[np.ndarray], values: list[np.ndarray]) -> None:
    for buf, value in zip(bufs, values):
        np.copyto(buf, value, casting="no")


def _results(session: SubgraphSession, first: int, count: int) -> list[np.ndarray]:
    """Outputs ``first .. first+count`` of the last run, copied aside when they may share
    memory with the inputs they are about to be written into."""
    outs = session.outputs()[first:first + count]
    return [o.copy() for o in outs] if session.outputs_alias_inputs else outs


def _at(array: np.ndarray, axis: int, index: int) -> np.ndarray:
    """A view of ``array`` at ``index`` along ``axis`` (0-d for a 1-d array: still a view)."""
    return array[(slice(None),) * axis + (index, Ellipsis)]


def _if_kernel(node: Node, then_sub: CompiledSubgraph, else_sub: CompiledSubgraph) -> KernelFn:
    where = f"node {node.name} (If)"

    def run(ins: list[Any], outs: list[Any]) -> None:
        branch = then_sub if truth(ins[0], f"{where}: the condition") else else_sub
        with branch.session() as s:
            _write(s.inputs, ins[1:])
            s.run()
            _write(outs, s.outputs())

    return run


def _loop_kernel(node: Node, body: CompiledSubgraph) -> KernelFn:
    where = f"node {node.name} (Loop)"
    has_trip, has_cond = node.inputs[0] is not None, node.inputs[1] is not None
    captures, scan_length = int(node.attrs["captures"]), node.attrs["scan_length"]
    n, scans = loop_parts(len(node.inputs), node.attrs["body"], captures)

    def run(ins: list[Any], outs: list[Any]) -> None:
        k = 0
        limit = None
        if has_trip:
            limit, k = int(np.asarray(ins[0]).reshape(-1)[0]), 1
        keep = True
        if has_cond:
            keep, k = truth(ins[k], f"{where}: the condition"), k + 1
        initial, outer = ins[k:k + n], ins[k + n:]
        with body.session() as s:
            it_buf, cond_buf, carried = s.inputs[0], s.inputs[1], s.inputs[2:2 + n]
            _write(s.inputs[2 + n:], outer)  # captured values: the same every iteration
            _write(carried, initial)
            outputs, step, alias = s.outputs(), s.run, s.outputs_alias_inputs
            new_carried = outputs[1:1 + n]
            pairs = list(zip(carried, new_carried))
            scan_pairs = [(outs[n + j], outputs[1 + n + j]) for j in range(scans)]
            i = 0
            while keep and (limit is None or i < limit):
                if scans and i >= scan_length:
                    check_scan_length(i + 1, scan_length, scans, where)
                it_buf[...] = i
                cond_buf[...] = keep
                step()
                keep = bool(outputs[0])  # a one-element bool (the verifier checked its type)
                if alias:
                    _write(carried, [o.copy() for o in new_carried])
                else:
                    for buf, value in pairs:
                        np.copyto(buf, value)
                for out, value in scan_pairs:
                    np.copyto(_at(out, 0, i), value)
                i += 1
            check_scan_length(i, scan_length, scans, where)
            _write(outs[:n], carried)

    return run


def _scan_kernel(node: Node, body: CompiledSubgraph) -> KernelFn:
    attrs = node.attrs
    n_states, n_scans = scan_layout(len(node.inputs), attrs["num_scan_inputs"],
                                    attrs["captures"])
    graph: Function = attrs["body"]
    n_outs = len(graph.outputs) - n_states
    lead = 1 if attrs["batch"] else 0
    in_types = [v.type for v in node.inputs[n_states:n_states + n_scans] if v is not None]
    in_axes = [normalize_axis(a, t.ndim - lead) for a, t in
               zip(scan_axes(attrs["scan_input_axes"], n_scans), in_types)]
    in_dirs = list(attrs["scan_input_directions"] or [0] * n_scans)
    out_axes = [normalize_axis(a, v.type.ndim + 1) for a, v in
                zip(scan_axes(attrs["scan_output_axes"], n_outs), graph.outputs[n_states:])]
    out_dirs = list(attrs["scan_output_directions"] or [0] * n_outs)

    def one(ins: list[Any], outs: list[Any]) -> None:
        scans = ins[n_states:n_states + n_scans]
        length = scans[0].shape[in_axes[0]] if scans else 0
        with body.session() as s:
            states, slices = s.inputs[:n_states], s.inputs[n_states:n_states + n_scans]
            _write(s.inputs[n_states + n_scans:], ins[n_states + n_scans:])
            _write(states, ins[:n_states])
            for t in range(length):
                for buf, x, a, d in zip(slices, scans, in_axes, in_dirs):
                    np.copyto(buf, _at(x, a, length - 1 - t if d else t), casting="no")
                s.run()
                _write(states, _results(s, 0, n_states))
                results = s.outputs()
                for j in range(n_outs):
                    at = length - 1 - t if out_dirs[j] else t
                    np.copyto(_at(outs[n_states + j], out_axes[j], at), results[n_states + j],
                              casting="no")
            _write(outs[:n_states], states)

    def run(ins: list[Any], outs: list[Any]) -> None:
        if not lead:
            one(ins, outs)
            return
        batch = ins[0].shape[0]
        for b in range(batch):
            one([x[b] if i < n_states + n_scans else x for i, x in enumerate(ins)],
                [o[b] for o in outs])

    return run


class ControlFlowBackend(Backend):
    """Runs ``If``, ``Loop``, ``Scan`` and ``FlexAttention`` nodes around sub-graphs compiled
    by the core."""

    name = "controlflow"
    device = "cpu"
    default_rank = -1

    def claims(self, target: TargetKind) -> list[Pattern]:
        return [Pattern(op) for op in (*CONTROL_FLOW_OPS, "FlexAttention")]

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        compiler = options.subgraphs
        if compiler is None:
            raise CompileError(f"region {region.name}: the control-flow backend needs the "
                               "core's sub-graph compiler (CompileOptions.subgraphs); compile "
                               "the model with tessera.compile")
        kernels = []
        described = []
        for node in region.nodes:
            fn, subs = self._kernel(node, compiler)
            kernels.append(Kernel(node.name, fn, [v.name for v in node.inputs if v is not None],
                                  [v.name for v in node.outputs], node.op))
            described += [f"{node.name}.{key}: {sub.describe()}" for key, sub in subs]
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            tensors.update((o.name, o.type) for o in node.outputs)
        return CompiledRegion(self.name, region, kernels, tensors,
                              {v.name: v.data for v in region.constants()},
                              {"kernels": len(kernels), "subgraphs": described})

    @staticmethod
    def _kernel(node: Node, compiler: SubgraphCompiler
                ) -> tuple[KernelFn, list[tuple[str, CompiledSubgraph]]]:
        subs = [(key, compiler(graph)) for key, graph in node.subgraphs]
        for (key, sub), (_, graph) in zip(subs, node.subgraphs):
            if len(sub.input_types) != len(graph.inputs) or \
                    len(sub.output_types) != len(graph.outputs):
                raise CompileError(f"node {node.name} ({node.op}): its {key} compiled with "
                                   f"{len(sub.input_types)} inputs and {len(sub.output_types)} "
                                   f"outputs; the graph has {len(graph.inputs)} and "
                                   f"{len(graph.outputs)}")
        compiled = dict(subs)
        if node.op == "If":
            return _if_kernel(node, compiled["then_branch"], compiled["else_branch"]), subs
        if node.op == "Loop":
            return _loop_kernel(node, compiled["body"]), subs
        if node.op == "Scan":
            return _scan_kernel(node, compiled["body"]), subs
        if node.op == "FlexAttention":  # the attention in numpy around its modifier sub-graphs
            return flex_attention_kernel(node, compiled), subs
        raise RunError(f"node {node.name}: the control-flow backend does not run {node.op}")
