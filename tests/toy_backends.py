"""Toy backends for partitioner and runtime tests: numpy kernels, configurable claims/device."""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.ir.graph import Function
from tessera.ops.registry import get_schema
from tessera.partition.patterns import Pattern
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.device import CPUDevice, Device
from tessera.plugin.target import TargetKind


class ToyDevice(CPUDevice):
    """Host memory under another device name, so the partitioner must insert copies."""

    def __init__(self, name: str):
        self.name = name
        self.copies_in = 0

    def copy_from_host(self, buffer: np.ndarray, array: np.ndarray) -> None:
        self.copies_in += 1
        super().copy_from_host(buffer, array)


class ToyBackend(Backend):
    """Claims the given patterns; runs each node with the registry reference."""

    def __init__(self, name: str, patterns: list[Pattern], device: str = "cpu"):
        self.name = name
        self.device = device
        self._patterns = patterns
        self._device_api: Device = ToyDevice(device) if device != "cpu" else CPUDevice()
        self.compiled_regions: list[Function] = []

    def claims(self, target: TargetKind) -> list[Pattern]:
        return list(self._patterns)

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        self.compiled_regions.append(region)
        kernels = []
        for node in region.nodes:
            schema = get_schema(node.op)

            def fn(ins: list[Any], outs: list[Any], node=node, schema=schema) -> None:
                res = schema.evaluate(list(ins), node.attrs)
                for o, r in zip(outs, res):
                    np.copyto(o, r, casting="unsafe")

            kernels.append(Kernel(node.name, fn, [v.name for v in node.inputs if v is not None],
                                  [o.name for o in node.outputs], node.op))
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            tensors.update({o.name: o.type for o in node.outputs})
        return CompiledRegion(self.name, region, kernels, tensors,
                              {v.name: v.data for v in region.constants()})

    def device_api(self) -> Device:
        return self._device_api
