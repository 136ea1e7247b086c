"""Binds a plan to device memory and runs it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import RunError, TesseraError
from tessera.plugin.device import Device
from tessera.runtime.memory import MemoryPlan
from tessera.runtime.plan import ExecutionPlan, Step


def _copy_fn(src: Device, dst: Device) -> Callable[[list[Any], list[Any]], None]:
    def run(ins: list[Any], outs: list[Any]) -> None:
        dst.copy_from_host(outs[0], src.copy_to_host(ins[0]))

    return run


class Executor:
    """Holds one arena per device and the bound calls: ``run()`` is a loop over them."""

    def __init__(self, plan: ExecutionPlan, memory: MemoryPlan, devices: dict[str, Device]):
        self.plan = plan
        self.devices = devices
        self.arenas = {dev: devices[dev].allocate(dp.total_bytes)
                       for dev, dp in memory.devices.items()}
        self.buffers: dict[str, Any] = {}
        for name, info in plan.tensors.items():
            dev, offset = memory.offset(name)
            self.buffers[name] = devices[dev].view(self.arenas[dev], offset, info.type)
        for name, (_dev, buf) in plan.constants.items():
            self.buffers[name] = buf
        self.calls: list[tuple[Step, Callable[[list[Any], list[Any]], None], list[Any],
                               list[Any]]] = []
        for step in plan.steps:
            fn = step.fn if step.fn is not None else _copy_fn(devices[step.src],
                                                             devices[step.dst])
            self.calls.append((step, fn, [self.buffers[n] for n in step.inputs],
                               [self.buffers[n] for n in step.outputs]))

    def set_input(self, name: str, array: np.ndarray) -> None:
        info = self.plan.tensors[name]
        self.devices[info.device].copy_from_host(self.buffers[name], array)

    @staticmethod
    def _call(step: Step, fn: Callable[[list[Any], list[Any]], None], ins: list[Any],
              outs: list[Any]) -> None:
        try:
            fn(ins, outs)
        except TesseraError:
            raise
        except Exception as e:  # noqa: BLE001 - name the failing kernel
            raise RunError(f"kernel {step.name} ({step.op}, backend {step.backend}) failed: "
                           f"{type(e).__name__}: {e}") from e

    def run(self) -> None:
        for step, fn, ins, outs in self.calls:
            self._call(step, fn, ins, outs)
        self.synchronize()

    def synchronize(self) -> None:
        for dev in self.devices.values():
            dev.synchronize()

    def run_timed(self) -> list[float]:
        """Run once, timing each step (seconds), synchronizing devices after each."""
        times = []
        for step, fn, ins, outs in self.calls:
            start = time.perf_counter()
            self._call(step, fn, ins, outs)
            if step.is_copy:
                self.devices[step.dst].synchronize()
            else:
                for dev in self.devices.values():
                    dev.synchronize()
            times.append(time.perf_counter() - start)
        return times

    def get(self, name: str) -> np.ndarray:
        if name in self.plan.output_constants:
            return np.array(self.plan.output_constants[name], copy=True)
        info = self.plan.tensors[name]
        return self.devices[info.device].copy_to_host(self.buffers[name])
