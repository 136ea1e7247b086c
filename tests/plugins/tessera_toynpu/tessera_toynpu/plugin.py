"""The toy NPU backend: claims Relu, Add and the fused Add -> Relu, on its own device."""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.ir.graph import Function
from tessera.partition import Pattern
from tessera.plugin import Backend, CompiledRegion, CompileOptions, CPUDevice, Kernel, hookimpl
from tessera.plugin.target import TargetKind

#: Kernels executed since import, by op (the tests read this to see the NPU really ran).
CALLS: dict[str, int] = {}


class ToyNPUDevice(CPUDevice):
    name = "toynpu"


_DEVICE = ToyNPUDevice()


def _float32(node) -> bool:
    return all(v is None or v.type.dtype.value == "float32" for v in node.inputs)


class ToyNPUBackend(Backend):
    name = "toynpu"
    device = "toynpu"

    def claims(self, target: TargetKind) -> list[Pattern]:
        return [Pattern("Relu", inputs=[Pattern("Add", check=_float32)], name="AddRelu"),
                Pattern("Relu", check=_float32), Pattern("Add", check=_float32)]

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        kernels = []
        for node in region.nodes:
            op = node.op

            def run(ins: list[Any], outs: list[Any], op: str = op) -> None:
                CALLS[op] = CALLS.get(op, 0) + 1
                if op == "Relu":
                    np.maximum(ins[0], 0, out=outs[0])
                else:
                    np.add(ins[0], ins[1], out=outs[0])

            kernels.append(Kernel(node.name, run, [v.name for v in node.inputs],
                                  [o.name for o in node.outputs], op))
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            tensors.update({o.name: o.type for o in node.outputs})
        constants = {v.name: _DEVICE.from_host(v.data) for v in region.constants()}
        return CompiledRegion(self.name, region, kernels, tensors, constants)

    def device_api(self) -> ToyNPUDevice:
        return _DEVICE


@hookimpl
def tessera_backends() -> list[Backend]:
    return [ToyNPUBackend()]
