"""What the cuDNN and cuBLASLt call plans share: attributes with defaults, the plan base class,
target options, and device pointers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from tessera.errors import TargetError
from tessera.ir.graph import Node, Value
from tessera.ops.registry import get_schema
from tessera.plugin.target import TargetKind

#: scratch bytes a library call may use when no GPU is here to ask how much it needs (the
#: algorithm is then chosen, within this budget, where the module is loaded on the GPU)
DEFAULT_WORKSPACE_MB = 32
ALIGN = 256


def attrs_of(node: Node) -> dict[str, Any]:
    """``node``'s attributes with the registry's defaults filled in."""
    return get_schema(node.op).check(node.name, node.inputs, node.attrs)


def is_f32(*values: Value | None) -> bool:
    return all(v is None or str(v.type.dtype) == "float32" for v in values)


def shape(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.type.shape)


def align(nbytes: int) -> int:
    return (int(nbytes) + ALIGN - 1) // ALIGN * ALIGN


def pointer(buffer: Any) -> int:
    """The device address of a runtime buffer on the cuda device."""
    return int(buffer.ptr)


def tf32(target: TargetKind) -> bool:
    value = (target.get("tf32") or "0").lower()
    if value not in ("0", "1", "true", "false", "on", "off"):
        raise TargetError(f"{target.name} -tf32={value}: expected 0 or 1")
    return value in ("1", "true", "on")


def workspace_limit(target: TargetKind) -> int:
    value = target.get("workspace_mb")
    if value in (None, ""):
        return DEFAULT_WORKSPACE_MB << 20
    try:
        mb = int(value)
    except ValueError:
        mb = -1
    if mb < 0:
        raise TargetError(f"{target.name} -workspace_mb={value}: expected a number of MiB, 0 or "
                          f"more")
    return mb << 20


@dataclass
class Plan:
    """One library call: the tensors it reads and writes (by name) and what the call needs,
    as plain data so that artifacts keep it as JSON. ``algo`` is the algorithm chosen (None
    until it is measured on a GPU), ``algo_source`` how it was chosen."""

    kind: ClassVar[str] = ""
    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    flops: int
    workspace: int

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})
