"""The execution plan: one ordered list of kernel calls and copies for the whole model."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tessera.errors import CompileError, TesseraError
from tessera.ir.graph import COPY_OP
from tessera.ir.types import TensorType
from tessera.partition.partitioner import HOST
from tessera.partition.regions import DeviceCopy, PartitionedGraph
from tessera.plugin.backend import CompiledRegion, KernelFn, SequenceBinder
from tessera.runtime.constant_pool import shared_constants


@dataclass
class Step:
    """One call: a backend kernel, or a copy between devices (``fn`` is None for copies)."""

    name: str
    backend: str
    op: str
    inputs: list[str]
    outputs: list[str]
    fn: KernelFn | None = None
    src: str = ""
    dst: str = ""
    flops: int = 0
    #: the compiled region the kernel belongs to ("" for copies)
    region: str = ""
    #: byte offsets of the inputs inside the output of a concatenation kernel (Kernel doc)
    concat_offsets: list[int] | None = None

    @property
    def is_copy(self) -> bool:
        return self.fn is None


@dataclass
class TensorInfo:
    """A planned tensor: ``type`` is what memory is planned for (static); for a tensor of a
    symbolic type, ``symbolic`` is that type and ``type`` its upper bound at the model's
    ``dim_bounds`` (each call uses the first ``symbolic.evaluate(sizes)`` elements of the
    planned buffer, row-major)."""

    name: str
    type: TensorType
    device: str
    symbolic: TensorType | None = None

    def shape_at(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The tensor's shape for a call's sizes."""
        if self.symbolic is None:
            return self.type.shape
        return self.symbolic.evaluate(sizes).shape


@dataclass
class ExecutionPlan:
    """Steps in order; every planned tensor with its device; inputs, outputs, constants."""

    steps: list[Step]
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    #: output name -> tensor name (or constant name)
    outputs: list[str]
    #: constant name -> (device, buffer) as the compiled regions hold them
    constants: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: host constants that are model outputs directly
    output_constants: dict[str, Any] = field(default_factory=dict)
    #: region name -> the binder that runs all its kernels in one call (regions that have one)
    sequences: dict[str, SequenceBinder] = field(default_factory=dict)
    #: region name -> the lock its kernels run under, for regions that are not thread safe
    #: (``CompiledRegion.thread_safe``); shared by every execution state of the module
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    #: region name -> the size variables its kernels take at run time
    #: (``CompiledRegion.size_names``), for regions that take any
    region_sizes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def size_names(self) -> list[str]:
        """Every size variable some region takes at run time, in order of first use."""
        return list(dict.fromkeys(n for names in self.region_sizes.values() for n in names))

    @cached_property
    def once_per_sizes(self) -> OncePerSizes:
        """The steps whose results depend on the constants and the call's sizes only, which
        an execution state runs once per binding of the sizes (:class:`OncePerSizes`)."""
        return once_per_sizes(self)


@dataclass(frozen=True)
class OncePerSizes:
    """Steps that read nothing but constants and what other such steps wrote (a symbolic
    model's positions, masks and relative-position biases built from its sizes, which a
    static compile folds into constants; in a static model, what the constant folder left
    because of its size). Their results are the same on every call at the same sizes, so an
    execution state runs them on its first call at a binding of the sizes and skips them on
    the calls after it at the same binding. ``kept``: their results that other steps (or the
    model's outputs) read, which the memory plan gives a place of their own for the whole
    run and between runs. A region whose backend binds whole sequences
    (``CompiledRegion.bind_sequence``) is bound twice per state: with every kernel, and with
    these given None (work the runtime has done)."""

    steps: frozenset[int]
    kept: frozenset[str]


def once_per_sizes(plan: ExecutionPlan) -> OncePerSizes:
    """Find :class:`OncePerSizes` of ``plan``."""
    derived: set[str] = set(plan.constants)
    steps: set[int] = set()
    for i, step in enumerate(plan.steps):
        if not step.outputs:
            continue
        if all(n in derived for n in step.inputs):
            steps.add(i)
            derived.update(step.outputs)
    read_always = {n for i, s in enumerate(plan.steps) if i not in steps for n in s.inputs}
    read_always.update(plan.outputs)
    kept = {n for i in steps for n in plan.steps[i].outputs if n in read_always}
    return OncePerSizes(frozenset(steps), frozenset(kept))


def workspace_name(kernel: str) -> str:
    """The planned tensor holding kernel ``kernel``'s workspace (``Kernel.workspace_bytes``)."""
    return f"{kernel}#workspace"


def build_plan(partitioned: PartitionedGraph, compiled: dict[str, CompiledRegion]
               ) -> ExecutionPlan:
    """Flatten a partitioned graph's steps and its compiled regions into one plan."""
    graph = partitioned.graph
    steps: list[Step] = []
    tensors: dict[str, TensorInfo] = {}
    constants: dict[str, tuple[str, Any]] = {}
    sequences: dict[str, SequenceBinder] = {}
    locks: dict[str, threading.Lock] = {}
    region_sizes: dict[str, list[str]] = {}

    bounds = dict(graph.attrs.get("dim_bounds") or {})

    def declare(name: str, type: TensorType, device: str) -> None:
        known = tensors.get(name)
        if known is not None and ((known.symbolic or known.type) != type
                                  or known.device != device):
            raise CompileError(f"tensor {name!r} declared as {known.symbolic or known.type} "
                               f"on {known.device} and as {type} on {device}")
        if type.is_static:
            tensors[name] = TensorInfo(name, type, device)
            return
        try:
            planned = type.upper_bound(bounds)
        except TesseraError as err:
            raise CompileError(f"tensor {name!r} of type {type}: memory is planned at the "
                               f"size variables' upper bounds (dim_bounds): {err}") from None
        tensors[name] = TensorInfo(name, planned, device, symbolic=type)

    for v in graph.inputs:
        declare(v.name, v.type, HOST)
    for step in partitioned.steps:
        if isinstance(step, DeviceCopy):
            declare(step.output, step.type, step.dst)
            steps.append(Step(step.name, "runtime", COPY_OP, [step.value], [step.output], None,
                              step.src, step.dst))
            continue
        region, device = step.name, step.device
        cr = compiled[region]
        for name, type in cr.tensors.items():
            declare(name, type, device)
        shared_constants(cr.constants)  # identical weights of other modules: kept once
        for name, buf in cr.constants.items():
            constants[f"{region}/{name}"] = (device, buf)
        for k in cr.kernels:
            ins = [f"{region}/{n}" if n in cr.constants else n for n in k.inputs]
            outs = list(k.outputs)
            if k.workspace_bytes < 0:
                raise CompileError(f"kernel {k.name} of backend {cr.backend} asks for "
                                   f"{k.workspace_bytes} workspace bytes")
            concat = k.concat_offsets if not cr.size_names else None  # offsets of one size
            if k.workspace_bytes:  # planned like a tensor that lives during this step only
                ws = workspace_name(k.name)
                declare(ws, TensorType((k.workspace_bytes,), "uint8"), device)
                outs.append(ws)
            for n in ins + outs:
                if n not in tensors and n not in constants:
                    raise CompileError(f"kernel {k.name} of backend {cr.backend} uses tensor "
                                       f"{n!r} that its compiled region does not declare")
            steps.append(Step(k.name, cr.backend, k.op, ins, outs, k.fn, flops=k.flops,
                              region=region, concat_offsets=concat))
        if cr.bind_sequence is not None and cr.kernels:
            sequences[region] = cr.bind_sequence
        if not cr.thread_safe:
            locks[region] = threading.Lock()
        if cr.size_names:
            region_sizes[region] = list(cr.size_names)
    output_constants = {}
    outputs = []
    for v in graph.outputs:
        if v.is_constant:
            output_constants[v.name] = v.data
        outputs.append(v.name)
    return ExecutionPlan(steps, tensors, [v.name for v in graph.inputs], outputs, constants,
                         output_constants, sequences, locks, region_sizes)
