"""Split execution: run a model whose symbolic dimensions change on every call without
compiling it per size.

A text generator's decoder step takes its key/value cache as inputs, one position longer at
every step (``past_0: float32[1, 2, past, 16]``). Specialising per size
(:mod:`tessera.runtime.dynamic`) compiles the whole model at every step. Most of that model,
though, has the same shapes at every cache length: the embeddings, the projections, the MLPs
and the head see one token whatever ``past`` is; only the attention over the cache, the mask
and the shape arithmetic around them change. Split execution compiles the first kind once and
evaluates only the second at each call's sizes.

How the parts are found (:func:`plan_split`): the call's inputs are widened along the axes of
the variables kept symbolic (``symbolic_dims``; the others are fixed for the plan) by one and
by two positions, and the model is evaluated at both sizes with ONNX's reference evaluator
(``onnx.reference``), keeping every intermediate value. A value *varies* when its shape differs
between the two, or when it is a small integer tensor (shape arithmetic) whose contents
differ. A node is *dynamic* when it reads or writes a varying value; the others are *static*.
Shape values that symbolic shape inference computes outright
(:mod:`tessera.frontend.onnx.symbolic_shapes`) leave the graph: one generated function of the
open variables' sizes computes those that depend on them at each call. The remaining nodes are
ordered so that each kind stays together as long as the graph allows, and cut into segments:
each static segment becomes an ONNX model of its own compiled by the target's backends like
any model (once, for the plan's fixed sizes), and each dynamic segment becomes one generated
function of straight-line numpy calls (:mod:`tessera.runtime.onnx_fast_ops`, else
``onnx.reference``'s operator implementations), run at whatever sizes the call has.

Planning evaluates the whole model twice with ``onnx.reference`` and keeps every intermediate
value: seconds for a decoder step, longer for a large convolutional network (name only the
variables that change on nearly every call).

Why this is sound although two sizes prove nothing: a static segment checks, at every call,
that the shapes it receives are the ones it was compiled for, and that the small shape values
it was given as constants (a ``Reshape``'s target computed from a dynamic tensor's fixed
dimensions) still have those values. When a check fails, :class:`SplitMismatch` is raised and
the caller (:class:`~tessera.runtime.dynamic.DynamicModule`) runs that call on a module
specialised for its sizes instead. The dynamic segments compute with real shapes.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tessera.errors import RunError, TesseraError
from tessera.frontend.onnx.external_data import inline_external_data, tensor_array
from tessera.frontend.onnx.importer import _sorted_nodes
from tessera.frontend.onnx.symbolic_eval import to_python, uses_any_var
from tessera.frontend.onnx.symbolic_shapes import infer_symbolic
from tessera.ir.symbolic import InputSpec
from tessera.runtime.module import Module
from tessera.runtime.profiler import BenchmarkResult
from tessera.runtime.split_program import (
    Names,
    SplitMismatch,
    build_program,
    emit_nodes,
    read_only,
)

__all__ = ["SegmentInfo", "SplitMismatch", "SplitModule", "model_evaluator", "plan_split",
           "widen_inputs"]

#: Integer tensors up to this many elements are treated as shape values: compared between
#: the probes, and given to static segments as checked constants.
SHAPE_VALUE_LIMIT = 64

#: What compiles a static segment's ONNX model (all its shapes fixed) into a module.
SegmentCompiler = Callable[[onnx.ModelProto], Module]


@dataclass(frozen=True)
class SegmentInfo:
    """One segment of a split plan: ``static`` (compiled once) or dynamic (evaluated per
    call), its node count, the ops it holds most of (``ops``, for people), every op type in
    it, and, for a compiled segment, how many of the nodes of its compiled module each
    backend ran (``backend_nodes``: backend name -> count; the module's graph passes may
    have fused or removed some)."""

    static: bool
    nodes: int
    ops: str
    op_types: frozenset[str] = frozenset()
    backend_nodes: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        return f"{'static' if self.static else 'dynamic'}: {self.nodes} nodes ({self.ops})"


@dataclass
class _Segment:
    static: bool
    nodes: list[onnx.NodeProto]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    #: static segments: shape values given as constants, checked at each call
    baked: dict[str, np.ndarray] = field(default_factory=dict)
    #: static segments: the input shapes they were compiled for
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: static segments: the compiled module (None when its outputs are constants of the plan)
    runner: Any = None

    def info(self) -> SegmentInfo:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        report = getattr(self.runner, "partition_report", None)
        ran = report().backend_counts() if report is not None else {}
        return SegmentInfo(self.static, len(self.nodes),
                           ", ".join(f"{op} x{c}" for op, c in top), frozenset(counts),
                           tuple(sorted(ran.items())))


def widen_inputs(arrays: Mapping[str, np.ndarray], specs: Sequence[InputSpec],
                 symbolic: Sequence[str], delta: int) -> dict[str, np.ndarray]:
    """The call's inputs with every axis named by a ``symbolic`` variable ``delta`` longer:
    the last position repeated (ones, or small random values for floats, where the axis is
    empty), so that masks stay masks and indices stay in range."""
    rng = np.random.default_rng(delta)
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        array = np.asarray(arrays[spec.name])
        for axis, dim in enumerate(spec.dims):
            if not (isinstance(dim, str) and dim in symbolic):
                continue
            size = array.shape[axis]
            if size:
                index = np.minimum(np.arange(size + delta), size - 1)
                array = np.take(array, index, axis=axis)
            else:
                shape = list(array.shape)
                shape[axis] = delta
                if array.dtype.kind == "f":
                    array = rng.standard_normal(shape).astype(array.dtype)
                else:
                    array = np.ones(shape, array.dtype)
        out[spec.name] = array
    return out


def _probe(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of ``proto`` evaluated on ``feeds`` by ``onnx.reference``."""
    from onnx.reference import ReferenceEvaluator

    model = inline_external_data(proto)  # onnx.reference reads initializers' bytes itself
    if model is proto:
        model = onnx.ModelProto()
        model.CopyFrom(proto)
    names = [o for n in model.graph.node for o in n.output if o]
    del model.graph.output[:]
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    try:
        results = ReferenceEvaluator(model).run(None, dict(feeds))
    except Exception as e:  # noqa: BLE001 - any failure means: no split plan
        raise TesseraError(f"evaluating the model to find its size-dependent parts failed: "
                           f"{type(e).__name__}: {e}") from e
    values = {name: np.asarray(v) for name, v in zip(names, results)}
    values.update({k: np.asarray(v) for k, v in feeds.items()})
    return values


def _is_shape_value(a: np.ndarray) -> bool:
    return a.dtype.kind in "iub" and a.size <= SHAPE_VALUE_LIMIT


def _varies(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    return _is_shape_value(a) and not np.array_equal(a, b)


def _order(nodes: list[onnx.NodeProto], dynamic: list[bool]) -> list[int]:
    """A topological order of ``nodes`` that keeps each kind together as long as it can:
    ready nodes of the current kind first (by original position), switching kind only when
    none is ready."""
    produced = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    users: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for i, n in enumerate(nodes):
        deps = {produced[x] for x in n.input if x in produced}
        waiting[i] = len(deps)
        for j in deps:
            users[j].append(i)
    ready: dict[bool, list[int]] = {False: [], True: []}
    for i, w in enumerate(waiting):
        if w == 0:
            heapq.heappush(ready[dynamic[i]], i)
    order: list[int] = []
    kind = dynamic[0] if nodes else False
    while ready[False] or ready[True]:
        if not ready[kind]:
            kind = not kind
        i = heapq.heappop(ready[kind])
        order.append(i)
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready[dynamic[j]], j)
    return order


def _shape_derived(nodes: Sequence[onnx.NodeProto], constants: set[str]) -> set[str]:
    """Values computed from tensors' shapes only (``Shape``/``Size`` and arithmetic on them
    and on constants): what a static segment may take as a checked constant."""
    derived: set[str] = set()
    for n in nodes:
        if n.op_type in ("Shape", "Size") or (
                n.input and all(not x or x in derived or x in constants for x in n.input)):
            derived.update(o for o in n.output if o)
    return derived


def plan_split(proto: onnx.ModelProto, specs: Sequence[InputSpec], symbolic: Sequence[str],
               arrays: Mapping[str, np.ndarray], compile_segment: SegmentCompiler,
               frozen: Mapping[str, np.ndarray] | None = None,
               bounds: Mapping[str, tuple[int, int]] | None = None) -> SplitModule:
    """The split plan of ``proto`` for the sizes of ``arrays`` with the ``symbolic`` variables
    left open; its static segments compiled with ``compile_segment``. Raises
    :class:`TesseraError` when the model does not split (nothing static, or nothing dynamic,
    or a segment that does not compile)."""
    start = time.perf_counter()
    frozen = {k: np.asarray(v) for k, v in (frozen or {}).items()}
    probes = [_probe(proto, {**widen_inputs(arrays, specs, symbolic, d), **frozen})
              for d in (1, 2)]
    graph = proto.graph
    all_nodes = _sorted_nodes(graph)
    known: dict[str, np.ndarray] = dict(frozen)  # constant values segments may read
    constants = {t.name for t in graph.initializer} | set(frozen)
    constant_nodes = [n for n in all_nodes if n.op_type == "Constant"]
    constants.update(o for n in constant_nodes for o in n.output)

    # shape arithmetic: values whose contents symbolic inference knows need no node
    computed, folded = _fold_shapes(proto, all_nodes, specs, symbolic, arrays, frozen, probes,
                                    bounds)
    for name in folded:
        if name not in computed:
            known[name] = probes[0][name]
            constants.add(name)
    aliases: set[str] = set()  # constants under another name (tied weights): no node
    for n in all_nodes:
        if n.op_type == "Identity" and n.input[0] in constants and n.output[0] in probes[0]:
            known[n.output[0]] = probes[0][n.output[0]]
            constants.add(n.output[0])
            aliases.add(n.output[0])
    nodes = [n for n in all_nodes if n.op_type != "Constant"
             and not all(o in folded or o in aliases for o in n.output if o)]

    varying = {name for name, a in probes[0].items()
               if name in probes[1] and name not in constants and _varies(a, probes[1][name])}
    dynamic = [any(x in varying for x in (*n.input, *n.output) if x) for n in nodes]
    if not any(dynamic) or all(dynamic):
        raise TesseraError("no part of the model has the same shapes at every size of "
                           f"{', '.join(symbolic)}" if all(dynamic) else
                           f"no part of the model depends on {', '.join(symbolic)}")
    order = _order(nodes, dynamic)
    segments: list[_Segment] = []
    for i in order:
        if not segments or segments[-1].static == dynamic[i]:
            segments.append(_Segment(not dynamic[i], []))
        segments[-1].nodes.append(nodes[i])

    derived = _shape_derived(all_nodes, constants)
    producer_segment: dict[str, int] = {}
    for k, seg in enumerate(segments):
        for n in seg.nodes:
            producer_segment.update((o, k) for o in n.output if o)
    needed_later: dict[str, int] = {}
    for k, seg in enumerate(segments):
        for n in seg.nodes:
            for x in n.input:
                if x and producer_segment.get(x, k) != k:
                    needed_later[x] = max(needed_later.get(x, -1), k)
    graph_outputs = [o.name for o in graph.output]
    for k, seg in enumerate(segments):
        seen: set[str] = set()
        for n in seg.nodes:
            for x in n.input:
                if not x or x in seen or x in constants or producer_segment.get(x) == k:
                    continue
                seen.add(x)
                baked = seg.static and (x in computed or (
                    x in derived and _is_shape_value(probes[0][x]) and x in producer_segment))
                if baked:
                    seg.baked[x] = probes[0][x]
                else:
                    seg.inputs.append(x)
        seg.outputs = [o for n in seg.nodes for o in n.output
                       if o and (needed_later.get(o, -1) > k or o in graph_outputs)]
    used_computed = {x for seg in segments for n in seg.nodes for x in n.input} | \
        set(graph_outputs)
    contents = {n: c for n, c in computed.items() if n in used_computed}
    split = SplitModule(segments, [s.name for s in specs], graph_outputs,
                        {k: v for k, v in known.items() if k in frozen or k in graph_outputs},
                        _size_reader(specs, symbolic), len(folded))
    models: dict[int, onnx.ModelProto] = {}
    for k, seg in enumerate(segments):
        used = {x for n in seg.nodes for x in n.input if x in constants}
        model = models[k] = _segment_model(proto, seg, probes[0], used, constant_nodes, known)
        if seg.static and not seg.inputs and not seg.baked:  # constants only: the probe's
            split._frozen.update({o: probes[0][o] for o in seg.outputs})
            seg.runner = None
        elif seg.static:
            seg.shapes = {x: probes[0][x].shape for x in seg.inputs}
            try:
                seg.runner = compile_segment(model)
            except TesseraError as e:
                raise TesseraError(f"compiling a part of the model whose shapes do not depend "
                                   f"on {', '.join(symbolic)} failed: {e}") from e
    split.program = build_program(segments, split.input_names, graph_outputs, split._frozen,
                                  split._sizes, contents, models,
                                  {n: np.ndim(v) for n, v in probes[0].items()})
    split.plan_seconds = time.perf_counter() - start
    return split


def _fold_shapes(proto: onnx.ModelProto, nodes: Sequence[onnx.NodeProto],
                 specs: Sequence[InputSpec], symbolic: Sequence[str],
                 arrays: Mapping[str, np.ndarray], frozen: Mapping[str, np.ndarray],
                 probes: Sequence[Mapping[str, np.ndarray]],
                 bounds: Mapping[str, tuple[int, int]] | None
                 ) -> tuple[dict[str, tuple[Any, np.dtype, tuple[int, ...]]], set[str]]:
    """The values symbolic shape inference computes outright
    (:mod:`tessera.frontend.onnx.symbolic_shapes`), the variables kept open being the only
    unknowns (the others have this plan's sizes): ``(computed, folded)``, where ``folded``
    holds every such value and ``computed`` those that depend on the open variables, with
    their contents, dtype and shape (evaluated at each call)."""
    fixed: dict[str, int] = {}
    for spec in specs:
        for axis, dim in enumerate(spec.dims):
            if isinstance(dim, str) and dim not in symbolic:
                fixed[dim] = int(np.shape(arrays[spec.name])[axis])
    dims = {s.name: [fixed.get(d, d) if isinstance(d, str) else d for d in s.dims]
            for s in specs}
    constants: dict[str, Any] = {t.name: t for t in proto.graph.initializer}
    constants.update(frozen)
    opset = next((int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                 17)
    values, _ = infer_symbolic(nodes, dims, constants, opset,
                               {v: (b[0], b[1]) for v, b in (bounds or {}).items()})
    computed: dict[str, tuple[Any, np.dtype, tuple[int, ...]]] = {}
    folded: set[str] = set()
    for node in nodes:
        if node.op_type == "Constant":
            continue
        for name in node.output:
            v = values.get(name)
            probe = probes[0].get(name)
            if (not name or v is None or v.contents is None or probe is None
                    or probe.dtype.kind not in "iub" or probe.size != len(v.contents)):
                continue
            try:
                for c in v.contents:
                    to_python(c)
            except TypeError:
                continue
            folded.add(name)
            if any(uses_any_var(c) for c in v.contents):
                computed[name] = (v.contents, probe.dtype, probe.shape)
    return computed, folded


def _size_reader(specs: Sequence[InputSpec], symbolic: Sequence[str]
                 ) -> list[tuple[str, str, int]]:
    """Where each open variable's size is read: ``(variable, input, axis)``."""
    where: dict[str, tuple[str, str, int]] = {}
    for spec in specs:
        for axis, dim in enumerate(spec.dims):
            if isinstance(dim, str) and dim in symbolic and dim not in where:
                where[dim] = (dim, spec.name, axis)
    return list(where.values())


def _segment_model(proto: onnx.ModelProto, seg: _Segment, values: Mapping[str, np.ndarray],
                   used_constants: set[str], constant_nodes: Sequence[onnx.NodeProto],
                   known: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """The ONNX model of one segment: its nodes, the constants they read (initializers,
    ``Constant`` nodes' values, ``known`` values: frozen inputs and shape values computed
    outright; checked shape values) and typed inputs and outputs (static segments; dynamic
    ones leave shapes open)."""
    def info(name: str) -> onnx.ValueInfoProto:
        a = values[name]
        elem = helper.np_dtype_to_tensor_dtype(a.dtype)
        return helper.make_tensor_value_info(name, elem, list(a.shape) if seg.static else None)

    inits = [t for t in proto.graph.initializer if t.name in used_constants]
    named_constants = [n for n in constant_nodes if any(o in used_constants for o in n.output)]
    extra = {**{k: v for k, v in known.items() if k in used_constants}, **seg.baked}
    inits += [numpy_helper.from_array(np.asarray(v), k) for k, v in extra.items()]
    graph = helper.make_graph(named_constants + seg.nodes, "segment",
                              [info(x) for x in seg.inputs], [info(o) for o in seg.outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=list(proto.opset_import),
                              ir_version=proto.ir_version)
    return model


class _Evaluator:
    """A whole model as one generated Python function of straight-line calls (see
    :func:`~tessera.runtime.split_program.emit_nodes`): the evaluator of background
    compiles. A split plan's dynamic segments are written into its program instead."""

    def __init__(self, model: onnx.ModelProto) -> None:
        scope: dict[str, Any] = {}
        var = Names()
        lines = ["def run(feeds):"]
        defaults = {t.name: t for t in model.graph.initializer}
        for k, i in enumerate(model.graph.input):
            if i.name in defaults:  # an input an initializer gives a default
                scope[f"d{k}"] = read_only(tensor_array(defaults[i.name]))
                lines.append(f"    {var(i.name)} = feeds.get({i.name!r}, d{k})")
            else:
                lines.append(f"    {var(i.name)} = feeds[{i.name!r}]")
        lines += emit_nodes(model, scope, var, "")
        lines.append(f"    return [{', '.join(var(o.name) for o in model.graph.output)}]")
        exec(compile("\n".join(lines), "<tessera dynamic segment>", "exec"), scope)  # noqa: S102
        self._run = scope["run"]

    def run(self, _names: None, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        return self._run(feeds)  # type: ignore[no-any-return]


def model_evaluator(proto: onnx.ModelProto, frozen: Mapping[str, np.ndarray] | None = None
                    ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """The whole model as one generated numpy function of its inputs (any sizes): what a
    dynamic module runs while the module for a call's size compiles in the background."""
    evaluator = _Evaluator(proto)
    fixed = dict(frozen or {})
    names = [o.name for o in proto.graph.output]

    def evaluate(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = evaluator.run(None, {**fixed, **arrays})
        except Exception as e:  # noqa: BLE001 - numpy's and the reference's own errors
            raise RunError(f"evaluating the model failed: {type(e).__name__}: {e}") from e
        return {n: owned(r, arrays) for n, r in zip(names, results)}
    return evaluate


class SplitModule:
    """A model run in segments for one set of fixed sizes: static segments compiled once
    (each a :class:`Module`), dynamic ones evaluated at each call's sizes. Safe from many
    threads (each call keeps its values to itself)."""

    def __init__(self, segments: list[_Segment], input_names: Sequence[str],
                 output_names: Sequence[str], frozen: Mapping[str, np.ndarray],
                 sizes: Sequence[tuple[str, str, int]] = (), folded: int = 0) -> None:
        self._segments = segments
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self._frozen = dict(frozen)
        self._sizes = list(sizes)
        #: nodes of shape arithmetic that symbolic inference replaced
        self.folded = folded
        self.plan_seconds = 0.0
        #: the call as one generated function (:func:`~tessera.runtime.split_program.
        #: build_program`): the outputs in order, and which of them are new arrays
        self.program: Callable[[Mapping[str, np.ndarray]],
                               tuple[tuple[Any, ...], frozenset[int]]] = _unbuilt

    def segments(self) -> list[SegmentInfo]:
        return [s.info() for s in self._segments]

    def describe(self) -> str:
        static = sum(s.static for s in self._segments)
        nodes = [sum(len(s.nodes) for s in self._segments if s.static == k) for k in (True, False)]
        return (f"split into {len(self._segments)} segments ({static} compiled once, "
                f"{nodes[0]} nodes; {len(self._segments) - static} evaluated per call, "
                f"{nodes[1]} nodes); {self.folded} shape values computed from the sizes")

    def benchmark(self, repeat: int = 10, number: int = 10, warmup: int = 1,
                  **inputs: Any) -> BenchmarkResult:
        """As :meth:`Module.benchmark`, for ``inputs`` (every input)."""
        arrays = {n: np.asarray(inputs[n]) for n in self.input_names}
        return BenchmarkResult.measure(lambda: self.run(arrays), repeat, number, warmup)

    def run(self, arrays: Mapping[str, np.ndarray],
            output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The outputs for ``arrays`` (every input, checked by the caller); raises
        :class:`SplitMismatch` when a static segment would see other shapes than it was
        compiled for."""
        if output_names is not None:
            unknown = [n for n in output_names if n not in self.output_names]
            if unknown:
                raise RunError(f"unknown output(s) {', '.join(map(repr, unknown))}; the "
                               f"model's outputs are {', '.join(self.output_names)}")
        values, fresh = self.program(arrays)
        result = {n: v if i in fresh else owned(v, arrays)
                  for i, (n, v) in enumerate(zip(self.output_names, values))}
        return result if output_names is None else {n: result[n] for n in output_names}

    def __repr__(self) -> str:
        return f"<SplitModule {self.describe()}>"


def _unbuilt(_arrays: Mapping[str, np.ndarray]) -> tuple[tuple[Any, ...], frozenset[int]]:
    raise TesseraError("this split plan was never completed (plan_split builds its program)")


def owned(value: Any, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """An output as a caller may keep and write: C-contiguous, writeable and sharing no
    memory with the inputs (a copy only when the evaluated value is a view: a broadcast, a
    reshape of an input, a read-only constant)."""
    value = np.asarray(value)
    flags = value.flags
    if not (flags.c_contiguous and flags.writeable):
        return np.array(value, order="C", copy=True)
    if value.base is None:  # owns its memory: shared only when it is an input itself
        if not any(value is a for a in inputs.values()):
            return value
    elif not any(np.may_share_memory(value, a) for a in inputs.values()):
        return value
    return np.array(value, order="C", copy=True)
