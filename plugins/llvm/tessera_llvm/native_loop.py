"""A whole ONNX ``Loop`` as one llvm kernel: the body compiled by the llvm backend itself and
run by the native loop runner (:mod:`.loop_runner`), not once per iteration from Python.

The backend claims a ``Loop`` when it can run every node of the body with its own patterns
(:func:`loop_refusal` says why not otherwise, and the node falls back to the ``controlflow``
backend). :func:`compile_loop` compiles the body as a region (its node-produced outputs are
the region's outputs) and lays out in the kernel's workspace (``Kernel.workspace_bytes``, one
per execution state, so concurrent calls never share memory) every tensor the body's kernels
touch: the iteration number, the condition, the carried values, the intermediates and each
body kernel's own workspace. Captured values are read where the node's inputs are; body
outputs that are constants or body inputs are read where those are. One call of the kernel
is one call of the runner, whose per-iteration cost is the body's kernels and the copies of
the carried values and scan slices.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import RunError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import TensorType
from tessera.ops.control_flow import CONTROL_FLOW_OPS, check_scan_length, loop_parts
from tessera.plugin.backend import CompiledRegion, Kernel
from tessera.plugin.patterns import Pattern, PatternCheckError
from tessera.topi.registry import has_compute, unsupported_reason

from . import loop_runner as lr
from .parallel import adapt_to_load

#: Element types a body's inputs and outputs may have (whole bytes, copied with memcpy).
LOOP_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64",
                         "uint8", "uint16", "uint32", "uint64", "bool"})
_ALIGN = 64

#: Where a tensor of the body lives: ("ws", byte offset in the workspace), ("in", index of
#: the node's input buffers) or ("const", the array).
Location = tuple[str, Any]


def loop_refusal(node: Node, patterns: list[Pattern], foreign: str | None = None) -> str | None:
    """Why the llvm backend leaves this ``Loop`` to the controlflow backend, or None when it
    runs it natively: every body node must match one of the backend's own ``patterns`` (no
    nested control flow), and the body's inputs and outputs must be whole-byte tensors."""
    if foreign:
        return (f"cross-compiled for {foreign} (-mtriple): the native loop runner runs on "
                "this host only")
    body = node.attrs.get("body")
    if not isinstance(body, Function):
        return "the Loop has no body graph"
    for v in [*body.inputs, *body.outputs]:
        if str(v.type.dtype) not in LOOP_DTYPES:
            return f"its body's value %{v.name} is {v.type.dtype}, not a type it copies"
    for v in [*body.inputs, *(o for n in body.nodes for o in n.outputs)]:
        if not v.type.is_static:
            return (f"its body's value %{v.name} is {v.type}: the native loop runner lays "
                    f"the body's tensors out at fixed sizes")
    users = body.users()
    outputs = {id(v) for v in body.outputs}
    for n in body.nodes:
        if n.subgraphs or n.op in CONTROL_FLOW_OPS:
            return f"its body holds control flow (node {n.name}, {n.op})"
        if not any(_matches(p, n, users, outputs) for p in patterns):
            reason = unsupported_reason(n) if has_compute(n.op) else "no topi compute"
            return f"its body's node {n.name} ({n.op}) is not one llvm runs: {reason}"
    return None


def _matches(pattern: Pattern, node: Node, users: dict[Value, list[tuple[Node, int]]],
             outputs: set[int]) -> bool:
    if node.op not in pattern.ops():
        return False
    try:
        return pattern.match(node, users, outputs) is not None
    except PatternCheckError:
        return False


def body_region(body: Function, name: str) -> Function:
    """The body as a region for the llvm backend's compile: a copy named ``name`` whose
    outputs are the body outputs nodes produce (each once; constants and pass-through inputs
    are read where they are)."""
    region = body.copy()
    region.name = name
    seen: set[int] = set()
    outs = []
    for v in region.outputs:
        if v.producer is not None and id(v) not in seen:
            seen.add(id(v))
            outs.append(v)
    region.outputs = outs
    return region


@dataclass
class _Layout:
    """The body's tensors in the workspace and where every value the runner touches lives."""

    where: dict[str, Location] = field(default_factory=dict)
    size: int = 0

    def place(self, name: str, nbytes: int) -> Location:
        loc: Location = ("ws", self.size)
        self.where[name] = loc
        self.size += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        return loc


def carry_copies(pairs: list[tuple[Location, Location, int]],
                 temp: Callable[[int], Location]) -> list[tuple[Location, Location, int]]:
    """The carried copies ``(dst, src, bytes)`` of one iteration in a safe order: a copy
    whose source is another copy's destination (a carried value passed on as another) reads
    it through a temporary (``temp(bytes)`` places one) copied first; a value carried
    unchanged is not copied."""
    dsts = {dst for dst, _, _ in pairs}
    first, then = [], []
    for dst, src, nbytes in pairs:
        if src == dst:
            continue
        if src in dsts:
            t = temp(nbytes)
            first.append((t, src, nbytes))
            src = t
        then.append((dst, src, nbytes))
    return first + then


class NativeLoop:
    """The compiled loop: its body region, layout and copy plan; ``kernel()`` is what the
    runtime calls."""

    def __init__(self, node: Node, name: str, body: CompiledRegion, lib: Any) -> None:
        self.node = node
        self.name = name
        self.body = body  # keeps the body's code and constants alive
        graph: Function = node.attrs["body"]
        captures = int(node.attrs["captures"])
        self.scan_length = node.attrs["scan_length"]
        self.carried, self.scans = loop_parts(len(node.inputs), graph, captures)
        self.where = f"node {node.name} (Loop)"
        n = self.carried
        # the kernel's input buffers: the node's inputs less the absent M / cond
        present = [i for i, v in enumerate(node.inputs) if v is not None]
        self.trip_in = present.index(0) if node.inputs[0] is not None else None
        self.cond_in = present.index(1) if node.inputs[1] is not None else None
        first = len(present) - (len(node.inputs) - 2)  # index of the first initial value
        layout = _Layout()
        inputs = graph.inputs
        for k, v in enumerate(inputs):
            if 2 + n <= k:  # a captured value: read where the node's input is
                layout.where[v.name] = ("in", first + k - 2)
            else:
                layout.place(v.name, v.type.nbytes)
        for tensor, ttype in body.tensors.items():
            if tensor not in layout.where:
                layout.place(tensor, ttype.nbytes)
        for cname, array in body.constants.items():
            layout.where[cname] = ("const", array)
        self.kernels = [lib.get(k.name) for k in body.kernels]
        self.kernel_ws = [layout.place(f"{k.name}#workspace", k.workspace_bytes)
                          if k.workspace_bytes else None for k in body.kernels]
        self.kernel_args = [[layout.where[t] for t in k.inputs + k.outputs]
                            for k in body.kernels]
        outs = [self._value(layout, v) for v in graph.outputs]
        self.cond_out = outs[0]
        carried_in = [layout.where[v.name] for v in inputs[2:2 + n]]
        nbytes = [v.type.nbytes for v in inputs[2:2 + n]]
        self.pre = [(carried_in[k], ("in", first + k), nbytes[k]) for k in range(n)]
        temps = 0

        def temp(size: int) -> Location:
            nonlocal temps
            temps += 1
            return layout.place(f"#carry{temps}", size)

        self.carry = carry_copies([(carried_in[k], outs[1 + k], nbytes[k]) for k in range(n)],
                                  temp)
        self.scan = [(("out", n + j), outs[1 + n + j], graph.outputs[1 + n + j].type.nbytes)
                     for j in range(self.scans)]
        self.post = [(("out", k), carried_in[k], nbytes[k]) for k in range(n)]
        self.iteration = layout.where[inputs[0].name]
        self.cond_body = layout.where[inputs[1].name]
        self.workspace = layout.size
        self._cache: dict[tuple[int, int], tuple[list[Any], list[Any], tuple[int, ...],
                                                 Any, list[Any]]] = {}

    @staticmethod
    def _value(layout: _Layout, v: Value) -> Location:
        if v.is_constant:
            return ("const", np.ascontiguousarray(v.data))
        return layout.where[v.name]

    def kernel(self, inputs: list[str], outputs: list[str], flops: int) -> Kernel:
        return Kernel(self.name, self.run, inputs, outputs, "Loop", flops=flops,
                      workspace_bytes=self.workspace)

    def _bind(self, ins: list[Any], outs: list[Any]) -> tuple[Any, list[Any]]:
        """The runner's descriptor for these buffers (and what it points into)."""
        workspace = outs[-1]
        if workspace.nbytes < self.workspace:
            raise RunError(f"llvm {self.where}: its workspace has {workspace.nbytes} bytes, "
                           f"it needs {self.workspace}")
        base = workspace.ctypes.data

        def addr(loc: Location) -> int:
            kind, at = loc
            if kind == "ws":
                return base + at
            if kind == "in":
                return int(ins[at].ctypes.data)
            if kind == "out":
                return int(outs[at].ctypes.data)
            return int(at.ctypes.data)

        packed = []
        for args, ws in zip(self.kernel_args, self.kernel_ws):
            ptrs = [addr(a) for a in args] + ([addr(ws)] if ws is not None else [])
            packed.append((ctypes.c_void_p * len(ptrs))(*ptrs))
        nk = len(packed)
        fns = (ctypes.c_void_p * max(nk, 1))(*[k.address for k in self.kernels])
        argv = (ctypes.c_void_p * max(nk, 1))(*[ctypes.addressof(p) for p in packed])
        lists = [lr.copy_list([(addr(d), addr(s), b) for d, s, b in copies])
                 for copies in (self.pre, self.scan, self.carry, self.post)]
        d = (ctypes.c_int64 * lr.SLOTS)()
        d[lr.N_KERNELS], d[lr.FNS], d[lr.ARGS] = nk, ctypes.addressof(fns), ctypes.addressof(argv)
        d[lr.TRIP] = addr(("in", self.trip_in)) if self.trip_in is not None else 0
        d[lr.COND] = addr(("in", self.cond_in)) if self.cond_in is not None else 0
        d[lr.ITERATION] = addr(self.iteration)
        d[lr.COND_IN] = addr(self.cond_body)
        d[lr.COND_OUT] = addr(self.cond_out)
        d[lr.SCAN_LENGTH] = int(self.scan_length) if self.scans else -1
        for (count, slot), copies, array in zip(
                ((lr.N_PRE, lr.PRE), (lr.N_SCAN, lr.SCAN), (lr.N_CARRY, lr.CARRY),
                 (lr.N_POST, lr.POST)), (self.pre, self.scan, self.carry, self.post), lists):
            d[count], d[slot] = len(copies), ctypes.addressof(array)
        return d, [packed, fns, argv, lists]

    def run(self, ins: list[Any], outs: list[Any]) -> None:
        hit = self._cache.get((id(ins), id(outs)))
        ids = tuple(map(id, ins)) + tuple(map(id, outs))
        if hit is None or hit[0] is not ins or hit[1] is not outs or hit[2] != ids:
            desc, keep = self._bind(ins, outs)
            if len(self._cache) >= 64:
                self._cache.clear()
            # the lists (and through them the arrays) stay referenced, so ids are not reused
            hit = self._cache[(id(ins), id(outs))] = (ins, outs, ids, desc, keep)
        adapt_to_load()
        count = lr.runner()(hit[3])
        if self.scans:
            check_scan_length(int(count), self.scan_length, self.scans, self.where)


def loop_flops(node: Node, body: CompiledRegion) -> int:
    """The body's work times the trip count when M is a constant (0 when unknown)."""
    trip = node.inputs[0]
    per_iteration = sum(k.flops for k in body.kernels)
    if trip is None or not trip.is_constant or trip.is_held:
        return 0
    return per_iteration * max(int(np.asarray(trip.data).reshape(-1)[0]), 0)


def value_types(values: list[Value | None]) -> dict[str, TensorType]:
    """The non-constant values among ``values`` by name."""
    return {v.name: v.type for v in values if v is not None and not v.is_constant}
