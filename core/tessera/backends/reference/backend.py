"""The reference backend: every registry op (but those holding sub-graphs), one numpy kernel
per node.

It is the fallback for nodes no other backend claims and the oracle other backends are tested
against. Its kernels call the registry's reference implementations and write into the buffers the
runtime planned.

A region with symbolic shapes compiles once for every size: the region takes its size
variables at run time (``CompiledRegion.size_names``), and each kernel evaluates its node's
types and size-expression attributes at the call's sizes and runs on the leading part of each
planned buffer (planned at the variables' bounds), shaped for those sizes.
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache
from typing import Any

import numpy as np

from tessera.backends.reference.blas import BLAS_THREADS
from tessera.errors import RunError
from tessera.ir.graph import Function, Node
from tessera.ir.symbolic import has_dim_expr, substitute
from tessera.ir.types import TensorType
from tessera.ops.registry import all_ops, get_schema
from tessera.plugin.backend import (
    Backend,
    CompiledRegion,
    CompileOptions,
    Kernel,
    contiguous_concat_offsets,
)
from tessera.plugin.patterns import Pattern
from tessera.plugin.target import TargetKind


def _sized_kernel(node: Node, names: list[str]) -> Kernel:
    """The kernel of ``node`` in a region with run-time sizes (see the module doc)."""
    ins_t = [v.type for v in node.inputs if v is not None]
    outs_t = [v.type for v in node.outputs]
    static = _node_kernel(node)
    if all(t.is_static for t in ins_t + outs_t) and \
            not any(has_dim_expr(a) for a in node.attrs.values() if not isinstance(a, Function)):
        static_fn = static.fn

        def run_static(ins: list[Any], outs: list[Any], sizes: Any) -> None:
            static_fn(ins, outs)
        static.fn = run_static
        return static
    schema = get_schema(node.op)
    n_in = len(node.inputs)
    present = [i for i, v in enumerate(node.inputs) if v is not None]
    name, op, attrs = node.name, node.op, dict(node.attrs)
    if not present:  # a function of the sizes alone (Range, ShapeValues, ConstantOfShape)
        return _sizes_only_kernel(node, names, static)

    def view(buf: np.ndarray, t: TensorType, values: dict[str, int]) -> np.ndarray:
        shape = t.evaluate(values).shape if not t.is_static else t.shape
        return buf.reshape(-1)[:math.prod(shape)].reshape(shape)

    def run(ins: list[Any], outs: list[Any], sizes: Any) -> None:
        values = {n: int(v) for n, v in zip(names, sizes)}
        args: list[Any] = [None] * n_in
        for i, buf, t in zip(present, ins, ins_t):
            args[i] = view(buf, t, values)
        at = {k: (a if isinstance(a, Function) else substitute(a, values))
              for k, a in attrs.items()}
        try:
            results = schema.evaluate(args, at)
        except Exception as e:  # noqa: BLE001 - report which node failed
            raise RunError(f"node {name} ({op}) failed in the reference backend at "
                           f"{values}: {type(e).__name__}: {e}") from e
        for out, t, res in zip(outs, outs_t, results):
            target = view(out, t, values)
            if target.shape != res.shape:
                raise RunError(f"node {name} ({op}) produced shape {list(res.shape)}, its "
                               f"type {t} says {list(target.shape)} at {values}")
            np.copyto(target, res, casting="unsafe")

    return Kernel(name=node.name, fn=run, inputs=static.inputs, outputs=static.outputs,
                  op=node.op)


#: Size bindings whose outputs a sizes-only kernel keeps (per execution state's buffers).
SIZES_ONLY_CACHE = 64


def _sizes_only_kernel(node: Node, names: list[str], static: Kernel) -> Kernel:
    """The kernel of a node without inputs whose attributes hold size expressions: its
    outputs depend on the sizes alone, so they are computed once per binding (and per
    execution state's output buffers) and copied in on later calls with the same sizes (a
    service calls at few sizes; the reference evaluation cost tens of microseconds a call)."""
    schema = get_schema(node.op)
    outs_t = [v.type for v in node.outputs]
    name, op, attrs = node.name, node.op, dict(node.attrs)
    cache: dict[tuple[Any, ...], list[tuple[np.ndarray, np.ndarray]]] = {}
    lock = threading.Lock()  # execution states of several threads share the kernel

    def compute(outs: list[Any], values: dict[str, int]) -> list[tuple[np.ndarray, np.ndarray]]:
        at = {k: substitute(a, values) for k, a in attrs.items()}
        try:
            results = schema.evaluate([], at)
        except Exception as e:  # noqa: BLE001 - report which node failed
            raise RunError(f"node {name} ({op}) failed in the reference backend at "
                           f"{values}: {type(e).__name__}: {e}") from e
        pairs = []
        for out, t, res in zip(outs, outs_t, results):
            shape = t.evaluate(values).shape if not t.is_static else t.shape
            target = out.reshape(-1)[:math.prod(shape)].reshape(shape)
            if target.shape != res.shape:
                raise RunError(f"node {name} ({op}) produced shape {list(res.shape)}, its "
                               f"type {t} says {list(target.shape)} at {values}")
            pairs.append((target, np.array(res, dtype=target.dtype)))
        return pairs

    def run(ins: list[Any], outs: list[Any], sizes: Any) -> None:
        key = (*(int(v) for v in sizes), *(id(o) for o in outs))
        pairs = cache.get(key)
        if pairs is None:
            pairs = compute(outs, {n: int(v) for n, v in zip(names, sizes)})
            with lock:
                if len(cache) >= SIZES_ONLY_CACHE:
                    cache.pop(next(iter(cache)), None)
                cache[key] = pairs  # the views keep their buffers alive: ids stay unique
        for target, value in pairs:
            np.copyto(target, value)

    return Kernel(name=node.name, fn=run, inputs=static.inputs, outputs=static.outputs,
                  op=node.op)


def _node_kernel(node: Node) -> Kernel:
    schema = get_schema(node.op)
    attrs = dict(node.attrs)
    n_in = len(node.inputs)
    present = [i for i, v in enumerate(node.inputs) if v is not None]
    name, op = node.name, node.op

    def run(ins: list[Any], outs: list[Any]) -> None:
        args: list[Any] = [None] * n_in
        for i, buf in zip(present, ins):
            args[i] = buf
        try:
            results = schema.evaluate(args, attrs)
        except Exception as e:  # noqa: BLE001 - report which node failed
            raise RunError(f"node {name} ({op}) failed in the reference backend: "
                           f"{type(e).__name__}: {e}") from e
        for out, res in zip(outs, results):
            if out.shape != res.shape:
                raise RunError(f"node {name} ({op}) produced shape {list(res.shape)}, its "
                               f"inferred type says {list(out.shape)}")
            np.copyto(out, res, casting="unsafe")

    offsets = None
    if node.op == "Concat" and len(node.outputs) == 1 and all(v is not None for v in node.inputs):
        # the runtime may place the inputs inside the output and skip the copy
        offsets = contiguous_concat_offsets([v.type for v in node.inputs if v is not None],
                                            node.outputs[0].type)
    return Kernel(name=node.name, fn=run,
                  inputs=[v.name for v in node.inputs if v is not None],
                  outputs=[v.name for v in node.outputs], op=node.op, concat_offsets=offsets)


#: Ops whose reference kernels never call numpy's BLAS: a region of only these runs without
#: the thread limit (whose enter and exit cost microseconds a call).
_NO_BLAS_OPS = frozenset({"Range", "ShapeValues", "Shape", "Size", "ConstantOfShape"})


def _sequence_binder(kernels: list[Kernel]) -> Any:
    """``CompiledRegion.bind_sequence``: the region's kernels in order in one call, with numpy's
    BLAS threads limited meanwhile (:mod:`.blas`) unless none of them can use it; kernels given
    None are skipped (the runtime does their work). A region with run-time sizes is bound
    with its sizes array too."""
    limit = any(k.op not in _NO_BLAS_OPS for k in kernels)

    def bind(calls: list[tuple[list[Any], list[Any]] | None], *sizes: Any) -> Any:
        bound = [(k.fn, c[0], c[1], *sizes) for k, c in zip(kernels, calls) if c is not None]

        def run() -> None:
            with BLAS_THREADS:
                for fn, *args in bound:
                    fn(*args)

        def run_unlimited() -> None:
            for fn, *args in bound:
                fn(*args)

        return run if limit else run_unlimited

    return bind


@lru_cache(maxsize=1)
def _all_op_patterns() -> tuple[Pattern, ...]:
    # the registry is complete once imported; building ~300 patterns per compile showed up in
    # profiles of many small compiles (the conformance suite)
    # ops that hold sub-graphs (If, Loop, Scan) go to the control-flow backend, which runs
    # their bodies compiled for the module's target
    return tuple(Pattern(name) for name, schema in sorted(all_ops().items())
                 if not any(a.kind == "graph" for a in schema.attrs.values()))


class ReferenceBackend(Backend):
    """Numpy kernels for every op in the registry."""

    name = "ref"
    device = "cpu"
    default_rank = 0
    symbolic_extents = True

    def claims(self, target: TargetKind) -> list[Pattern]:
        return list(_all_op_patterns())

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        BLAS_THREADS.prepare()
        names = region.used_size_variables if region.is_symbolic else []
        kernels = [_sized_kernel(node, names) if names else _node_kernel(node)
                   for node in region.nodes]
        constants = {v.name: v.data for v in region.constants()}
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            for out in node.outputs:
                tensors[out.name] = out.type
        return CompiledRegion(self.name, region, kernels, tensors, constants,
                              {"kernels": len(kernels)},
                              bind_sequence=_sequence_binder(kernels), size_names=names)

    def host_threads(self) -> str | None:
        return BLAS_THREADS.describe()
