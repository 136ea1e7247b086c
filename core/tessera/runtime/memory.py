"""Static memory planning: one arena per device, buffers reused by liveness.

Every planned tensor lives from the step that writes it to the last step that reads it; graph
inputs and outputs live through the whole run (inputs persist between runs). Tensors are placed
largest first at the lowest aligned offset that does not overlap a placed tensor whose lifetime
intersects its own (greedy by size, as TFLite's and TVM's planners do), so a kernel's outputs
never share memory with its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.plugin.device import ALIGNMENT
from tessera.runtime.plan import ExecutionPlan


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass
class DevicePlan:
    device: str
    offsets: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    total_bytes: int = 0
    #: bytes needed if every tensor had its own buffer
    no_reuse_bytes: int = 0


@dataclass
class MemoryPlan:
    devices: dict[str, DevicePlan]

    def offset(self, name: str) -> tuple[str, int]:
        for dev, plan in self.devices.items():
            if name in plan.offsets:
                return dev, plan.offsets[name]
        raise KeyError(name)


@dataclass
class MemoryReport:
    """Planned arena bytes against the no-reuse total, per device."""

    rows: list[tuple[str, int, int, int]]  # device, tensors, planned, no reuse

    def __str__(self) -> str:
        lines = ["device  tensors  planned        no-reuse       saved"]
        for dev, count, planned, total in self.rows:
            saved = 100.0 * (1 - planned / total) if total else 0.0
            lines.append(f"{dev:<7} {count:>7}  {_fmt_bytes(planned):>13}  "
                         f"{_fmt_bytes(total):>13}  {saved:5.1f}%")
        return "\n".join(lines)


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
    return {n: (first.get(n, 0), last.get(n, first.get(n, 0))) for n in plan.tensors}


def plan_memory(plan: ExecutionPlan) -> MemoryPlan:
    """Offsets for every planned tensor, per device."""
    life = lifetimes(plan)
    devices: dict[str, DevicePlan] = {}
    by_device: dict[str, list[str]] = {}
    for name, info in plan.tensors.items():
        by_device.setdefault(info.device, []).append(name)
    for dev, names in by_device.items():
        dp = DevicePlan(dev)
        order = sorted(names, key=lambda n: (-plan.tensors[n].type.nbytes, life[n][0], n))
        placed: list[tuple[int, int, int, int]] = []  # offset, size, first, last
        for n in order:
            size = _align(max(plan.tensors[n].type.nbytes, 1))
            start, stop = life[n]
            conflicts = sorted((off, off + sz) for off, sz, a, b in placed
                               if not (b < start or stop < a))
            offset = 0
            for lo, hi in conflicts:
                if offset + size <= lo:
                    break
                offset = max(offset, hi)
            placed.append((offset, size, start, stop))
            dp.offsets[n] = offset
            dp.sizes[n] = size
            dp.total_bytes = max(dp.total_bytes, offset + size)
            dp.no_reuse_bytes += size
        devices[dev] = dp
    return MemoryPlan(devices)
