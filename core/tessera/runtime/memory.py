"""Static memory planning: one arena per device, buffers reused by liveness.

Every planned tensor lives from the step that writes it to the last step that reads it; graph
inputs and outputs live through the whole run (inputs persist between runs), and so do the
results of steps run once per binding of the sizes that later steps read
(``ExecutionPlan.once_per_sizes``: they persist between runs too). Tensors are placed
largest first at the lowest aligned offset that does not overlap a placed tensor whose lifetime
intersects its own (greedy by size, as TFLite's and TVM's planners do), so a kernel's outputs
never share memory with its inputs.

Concatenations are elided where a backend allows it (``Kernel.concat_offsets``): each input is
placed inside the output at its offset, so the producers write the concatenated tensor
directly and the copy never runs (DenseNet's growing feature maps, Inception's and SqueezeNet's
branch concatenations). An input qualifies when it is planned on the output's device, is not
a model input or output, appears once in the concatenation and in no earlier elided one; the
concatenation is elided only when all of its inputs qualify. Chains (a concatenation of a
concatenation) nest. A group of tensors sharing storage is placed as one buffer whose lifetime
spans all of theirs.

Each device has its own alignment (``Device.alignment``: a cache line on the CPU, 256 bytes on
a GPU); every offset on a device is a multiple of it. The plan is one static placement per
device, correct on a device that runs its work in one in-order stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.plugin.backend import contiguous_concat_offsets  # noqa: F401 (moved there)
from tessera.plugin.device import ALIGNMENT
from tessera.runtime.plan import ExecutionPlan, TensorInfo


def _align(n: int, alignment: int = ALIGNMENT) -> int:
    return (n + alignment - 1) // alignment * alignment


@dataclass
class DevicePlan:
    device: str
    offsets: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    total_bytes: int = 0
    #: bytes needed if every tensor had its own buffer
    no_reuse_bytes: int = 0
    #: every offset is a multiple of this many bytes
    alignment: int = ALIGNMENT


@dataclass
class MemoryPlan:
    devices: dict[str, DevicePlan]
    #: indices of the plan steps (concatenations) whose work the placement does
    elided: set[int] = field(default_factory=set)

    def offset(self, name: str) -> tuple[str, int]:
        for dev, plan in self.devices.items():
            if name in plan.offsets:
                return dev, plan.offsets[name]
        raise KeyError(name)

    def report(self, note: str = "") -> MemoryReport:
        """Per device: tensors placed, arena bytes, bytes without reuse (``note``: what the
        figures are, when they are not a compiled plan's)."""
        return MemoryReport([(dev, len(dp.offsets), dp.total_bytes, dp.no_reuse_bytes)
                             for dev, dp in self.devices.items()], note=note)


@dataclass
class MemoryReport:
    """Planned arena bytes against the no-reuse total, per device; and, for a compiled
    module, its weights per device (``weights``: device, bytes in the form its kernels read
    (as the backends keep them: packed, transformed, or as imported), bytes the graph still
    holds besides)."""

    rows: list[tuple[str, int, int, int]]  # device, tensors, planned, no reuse
    #: what the figures are, when they are not the compiled plan's (an estimate)
    note: str = ""
    weights: list[tuple[str, int, int]] = field(default_factory=list)

    def __str__(self) -> str:
        lines = ["device  tensors  planned        no-reuse       saved"]
        for dev, count, planned, total in self.rows:
            saved = 100.0 * (1 - planned / total) if total else 0.0
            lines.append(f"{dev:<7} {count:>7}  {_fmt_bytes(planned):>13}  "
                         f"{_fmt_bytes(total):>13}  {saved:5.1f}%")
        if self.weights:
            lines.append("device  weights (kernels' form)  weights (graph form, besides)")
            for dev, kernels, graph in self.weights:
                lines.append(f"{dev:<7} {_fmt_bytes(kernels):>23}  {_fmt_bytes(graph):>29}")
        if self.note:
            lines.append(f"({self.note})")
        return "\n".join(lines)


def weight_rows(constants: dict[str, tuple[str, Any]], graph_arrays: list[np.ndarray]
                ) -> list[tuple[str, int, int]]:
    """Per device: the bytes of the distinct arrays ``constants`` (a plan's: name -> (device,
    buffer)) binds, and on the host the bytes of ``graph_arrays`` (the graph's constant data)
    that are none of those; each array counted once."""
    seen: set[tuple[int, int]] = set()
    kernels: dict[str, int] = {}
    for dev, buf in constants.values():
        key = _identity(buf)
        kernels.setdefault(dev, 0)
        if key not in seen:
            seen.add(key)
            kernels[dev] += int(getattr(buf, "nbytes", 0))
    graph = 0
    for a in graph_arrays:
        key = _identity(a)
        if key not in seen:
            seen.add(key)
            graph += int(a.nbytes)
    if graph and "cpu" not in kernels:
        kernels["cpu"] = 0
    return [(dev, n, graph if dev == "cpu" else 0) for dev, n in kernels.items()]


def _identity(buf: Any) -> tuple[int, int]:
    """An array by where its data is (two views of the same bytes are one), else the object."""
    if isinstance(buf, np.ndarray):
        return (buf.__array_interface__["data"][0], int(buf.nbytes))
    return (id(buf), 0)


def _fmt_bytes(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def lifetimes(plan: ExecutionPlan) -> dict[str, tuple[int, int]]:
    """(first step, last step) for every planned tensor."""
    end = len(plan.steps)
    first: dict[str, int] = {name: -1 for name in plan.inputs}
    last: dict[str, int] = {}
    for i, step in enumerate(plan.steps):
        for n in step.inputs:
            last[n] = i
        for n in step.outputs:
            first.setdefault(n, i)
            last[n] = max(last.get(n, i), i)
    # inputs stay valid across runs (set_input once, run many times); outputs until read
    for n in list(plan.outputs) + list(plan.inputs):
        last[n] = end
    # what the steps run once per sizes keep for the steps after them, on later calls too
    for n in plan.once_per_sizes.kept:
        first[n] = -1
        last[n] = end
    return {n: (first.get(n, 0), last.get(n, first.get(n, 0))) for n in plan.tensors}


def concat_aliases(plan: ExecutionPlan, alignments: dict[str, int] | None = None
                   ) -> tuple[dict[str, tuple[str, int]], set[int]]:
    """The tensors placed inside a concatenation's output (tensor -> (output, byte offset)) and
    the indices of the concatenation steps that are elided (see the module doc)."""
    alignments = alignments or {}
    fixed = set(plan.inputs) | set(plan.outputs) | plan.once_per_sizes.kept
    parent: dict[str, tuple[str, int]] = {}
    elided: set[int] = set()
    for i, step in enumerate(plan.steps):
        offsets = step.concat_offsets
        if (offsets is None or len(step.outputs) != 1 or len(offsets) != len(step.inputs)
                or len(set(step.inputs)) != len(step.inputs)):
            continue
        out = step.outputs[0]
        info = plan.tensors.get(out)
        if info is None or out in plan.inputs:
            continue
        ends = [off + plan.tensors[n].type.nbytes if n in plan.tensors else -1
                for n, off in zip(step.inputs, offsets)]
        disjoint = all(e <= nxt for e, nxt in zip(ends, offsets[1:]))
        align = alignments.get(info.device, ALIGNMENT)
        if disjoint and all(_fits(plan, n, off, info, fixed, parent, align)
                            for n, off in zip(step.inputs, offsets)):
            for n, off in zip(step.inputs, offsets):
                parent[n] = (out, off)
            elided.add(i)
    return parent, elided


def _fits(plan: ExecutionPlan, name: str, offset: int, out: TensorInfo, fixed: set[str],
          parent: dict[str, tuple[str, int]], alignment: int) -> bool:
    """Whether tensor ``name`` can live at ``offset`` inside the output ``out``."""
    t = plan.tensors.get(name)
    return (t is not None and name not in fixed and name not in parent
            and t.device == out.device and offset % alignment == 0
            and 0 <= offset and offset + t.type.nbytes <= out.type.nbytes)


def plan_memory(plan: ExecutionPlan, alignments: dict[str, int] | None = None) -> MemoryPlan:
    """Offsets for every planned tensor, per device (``alignments``: device -> its
    ``Device.alignment``; ``ALIGNMENT`` where not given)."""
    alignments = alignments or {}
    for dev, align in alignments.items():
        if align < 1 or align & (align - 1):
            raise ValueError(f"device {dev}: alignment {align} is not a power of two")
    life = lifetimes(plan)
    parent, elided = concat_aliases(plan, alignments)

    def root(name: str) -> tuple[str, int]:
        offset = 0
        while name in parent:
            name, off = parent[name]
            offset += off
        return name, offset

    # a group sharing storage lives as long as any of its members
    span: dict[str, tuple[int, int]] = {}
    for name in plan.tensors:
        r, _ = root(name)
        a, b = life[name]
        lo, hi = span.get(r, (a, b))
        span[r] = (min(lo, a), max(hi, b))
    devices: dict[str, DevicePlan] = {}
    by_device: dict[str, list[str]] = {}
    for name, info in plan.tensors.items():
        by_device.setdefault(info.device, []).append(name)
    for dev, names in by_device.items():
        align = alignments.get(dev, ALIGNMENT)
        dp = DevicePlan(dev, alignment=align)
        roots = [n for n in names if n not in parent]
        order = sorted(roots, key=lambda n: (-plan.tensors[n].type.nbytes, span[n][0], n))
        placed: list[tuple[int, int, int, int]] = []  # offset, size, first, last
        for n in order:
            size = _align(max(plan.tensors[n].type.nbytes, 1), align)
            start, stop = span[n]
            conflicts = sorted((off, off + sz) for off, sz, a, b in placed
                               if not (b < start or stop < a))
            offset = 0
            for lo, hi in conflicts:
                if offset + size <= lo:
                    break
                offset = max(offset, hi)
            placed.append((offset, size, start, stop))
            dp.offsets[n] = offset
            dp.total_bytes = max(dp.total_bytes, offset + size)
        for n in names:
            r, off = root(n)
            dp.offsets[n] = dp.offsets[r] + off
            dp.sizes[n] = _align(max(plan.tensors[n].type.nbytes, 1), align)
            dp.no_reuse_bytes += dp.sizes[n]
        devices[dev] = dp
    return MemoryPlan(devices, elided)
