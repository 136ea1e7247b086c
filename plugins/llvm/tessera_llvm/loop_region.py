"""Compile an llvm region that holds ``Loop`` nodes.

The partitioner merges a claimed ``Loop`` with the llvm nodes around it into one region. The
region is cut at each ``Loop``: the runs of other nodes between them are compiled as regions
of their own (the backend's usual compile: one object, one kernel sequence each), each
``Loop`` as a native loop (:mod:`.native_loop`), and the kernels are put back together in
order. The bound sequence of the whole region runs each part's sequence and calls each loop's
kernel, so a region is still one call from the runtime.

Such a region is not saved as object code: its artifact entry is empty and ``load`` compiles
it again (the region's constants are stored in graph form).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import TensorType
from tessera.plugin.backend import CompiledRegion, CompileOptions, Kernel
from tessera.plugin.target import TargetKind

from .native_loop import NativeLoop, body_region, loop_flops, value_types

#: compile(region, target, options) -> CompiledRegion: the backend's own region compile.
RegionCompiler = Callable[[Function, TargetKind, CompileOptions], CompiledRegion]


@dataclass
class LoopRegionHandle:
    """``CompiledRegion.handle`` of a region holding loops: what keeps their code alive."""

    parts: list[CompiledRegion] = field(default_factory=list)
    loops: list[NativeLoop] = field(default_factory=list)


def has_loops(region: Function) -> bool:
    return any(n.op == "Loop" for n in region.nodes)


def split_region(region: Function) -> list[Function | Node]:
    """The region in order: each ``Loop`` node, and between them the runs of other nodes as
    regions of their own (inputs: what they read from outside; outputs: what the rest of the
    region or its outputs read)."""
    users = region.users()
    region_out = {id(v) for v in region.outputs}
    parts: list[Function | Node] = []
    run: list[Node] = []

    def flush() -> None:
        if run:
            parts.append(_segment(region, list(run), len(parts), users, region_out))
            run.clear()

    for node in region.nodes:
        if node.op == "Loop":
            flush()
            parts.append(node)
        else:
            run.append(node)
    flush()
    return parts


def _segment(region: Function, nodes: list[Node], index: int,
             users: dict[Value, list[tuple[Node, int]]], region_out: set[int]) -> Function:
    inside = {id(n) for n in nodes}
    part = Function(f"{region.name}_part{index}", dict(region.attrs))
    mapping: dict[int, Value] = {}
    for n in nodes:
        for v in n.inputs:
            if v is None or v.is_constant or id(v) in mapping:
                continue
            if v.producer is not None and id(v.producer) in inside:
                continue
            mapping[id(v)] = part.add_input(v.name, v.type)
    escaping = []
    for n in nodes:
        outs = [Value(o.name, o.type) for o in n.outputs]
        for o, new in zip(n.outputs, outs):
            mapping[id(o)] = new
            if id(o) in region_out or any(id(u) not in inside for u, _ in users.get(o, [])):
                escaping.append(new)
        part.append(Node(n.op, n.name, [mapping.get(id(v), v) if v is not None else None
                                        for v in n.inputs], outs, dict(n.attrs)))
    part.outputs = escaping
    return part


def compile_loop(node: Node, prefix: str, compile_region: RegionCompiler, target: TargetKind,
                 options: CompileOptions) -> NativeLoop:
    """``node`` (a Loop the backend claimed) as a native loop, its body compiled by
    ``compile_region``."""
    body = body_region(node.attrs["body"], f"{prefix}{node.name}_body")
    if body.nodes:
        compiled = compile_region(body, target, options)
        lib = compiled.handle.lib
    else:  # every output passes a value through: no kernels
        compiled = CompiledRegion("llvm", body, [], {v.name: v.type for v in body.inputs})
        lib = None
    return NativeLoop(node, f"{prefix}{node.name}", compiled, lib)


def compile_with_loops(region: Function, compile_region: RegionCompiler, target: TargetKind,
                       options: CompileOptions) -> CompiledRegion:
    """The CompiledRegion of ``region`` (which holds Loop nodes): see the module's doc."""
    kernels: list[Kernel] = []
    tensors: dict[str, TensorType] = {v.name: v.type for v in region.inputs}
    constants: dict[str, Any] = {}
    handle = LoopRegionHandle()
    plan: list[tuple[Any, int]] = []  # (a part's binder or a loop kernel's fn, kernel count)
    loops: dict[str, Any] = {}
    for part in split_region(region):
        if isinstance(part, Function):
            cr = compile_region(part, target, options)
            handle.parts.append(cr)
            kernels += cr.kernels
            tensors.update(cr.tensors)
            constants.update(cr.constants)
            plan.append((cr.bind_sequence or _one_by_one(cr.kernels), len(cr.kernels)))
            continue
        loop = compile_loop(part, f"{region.name}_", compile_region, target, options)
        handle.loops.append(loop)
        kernel = loop.kernel([v.name for v in part.inputs if v is not None],
                             [v.name for v in part.outputs], loop_flops(part, loop.body))
        kernels.append(kernel)
        tensors.update(value_types(part.inputs))
        tensors.update(value_types(part.outputs))
        constants.update((v.name, np.ascontiguousarray(v.data)) for v in part.inputs
                         if v is not None and v.is_constant)
        plan.append((_single(kernel), 1))
        loops[part.name] = {"body_kernels": len(loop.body.kernels),
                            "workspace": loop.workspace}
    info = {"kernels": len(kernels), "parts": len(handle.parts), "native_loops": loops}
    return CompiledRegion("llvm", region, kernels, tensors, constants, info,
                          bind_sequence=_binder(plan), handle=handle)


def _single(kernel: Kernel) -> Callable[[list[Any]], Callable[[], None]]:
    def bind(calls: list[Any]) -> Callable[[], None]:
        ins, outs = calls[0]
        fn = kernel.fn
        return lambda: fn(ins, outs)

    return bind


def _one_by_one(kernels: list[Kernel]) -> Callable[[list[Any]], Callable[[], None]]:
    def bind(calls: list[Any]) -> Callable[[], None]:
        bound = [(k.fn, c[0], c[1]) for k, c in zip(kernels, calls) if c is not None]

        def run() -> None:
            for fn, ins, outs in bound:
                fn(ins, outs)

        return run

    return bind


def _binder(plan: list[tuple[Any, int]]) -> Callable[[list[Any]], Callable[[], None]]:
    """The region's ``bind_sequence``: each part bound to its slice of the calls, run in
    order."""
    def bind(calls: list[Any]) -> Callable[[], None]:
        runs = []
        at = 0
        for binder, count in plan:
            runs.append(binder(calls[at:at + count]))
            at += count
        if len(runs) == 1:
            return runs[0]

        def run() -> None:
            for r in runs:
                r()

        return run

    return bind
