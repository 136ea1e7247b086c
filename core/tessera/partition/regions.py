"""The partition as typed objects: each region with its backend, target kind, device, pattern
matches, inputs and outputs, and each device copy, in execution order.

:func:`tessera.partition.partition` returns a :class:`PartitionedGraph`; the compiler, the
runtime's planner and the artifact writer read these fields. The same facts are also written
on the graph, for the readers that see only a graph: a backend (``region_matches(body)`` and
``kind_of_region(body)`` of the plugin contract read a region body's ``matches``, ``backend``
and ``target`` attributes), the drawings, and an artifact's ``graph.json``.
:meth:`PartitionedGraph.from_graph` rebuilds the typed form from such a graph: it is the one
place the core parses those attributes back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.errors import PartitionError, TargetError
from tessera.ir.graph import COPY_OP, REGION_OP, Function, Node
from tessera.ir.types import TensorType
from tessera.partition.report import PartitionReport
from tessera.plugin.patterns import MATCHES_ATTR
from tessera.plugin.target import TargetKind, kind_of_region

#: One pattern match of a region: the claimed pattern's name and the matched node names,
#: root first.
Match = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Region:
    """A region: a function one backend compiles for one device.

    ``inputs`` are the top-level values it reads (already on its device) and ``outputs`` those
    it makes; ``matches`` are the partitioner's pattern matches (every node in exactly one).
    ``node`` is the region's node in the partitioned graph."""

    name: str
    body: Function = field(repr=False, compare=False)
    backend: str
    kind: TargetKind
    device: str
    matches: tuple[Match, ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    node: Node | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class DeviceCopy:
    """An explicit copy of top-level value ``value`` from device ``src`` to ``dst``, making
    ``output`` (of type ``type``)."""

    name: str
    value: str
    output: str
    type: TensorType
    src: str
    dst: str


@dataclass
class PartitionedGraph:
    """A partitioned model: the top-level graph (``Region`` and ``DeviceCopy`` nodes), its
    steps (regions and copies) in execution order, the partition report, and the model's
    output names (the ONNX names, which the values may not carry)."""

    graph: Function
    steps: list[Region | DeviceCopy]
    report: PartitionReport
    output_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.output_names:
            self.output_names = default_output_names(self.graph)

    @property
    def regions(self) -> list[Region]:
        """The regions, in execution order."""
        return [s for s in self.steps if isinstance(s, Region)]

    @property
    def copies(self) -> list[DeviceCopy]:
        return [s for s in self.steps if isinstance(s, DeviceCopy)]

    @property
    def kinds(self) -> dict[str, TargetKind]:
        """Region name -> the target kind (backend name and options) it was partitioned for."""
        return {r.name: r.kind for r in self.regions}

    @property
    def input_types(self) -> dict[str, TensorType]:
        return {v.name: v.type for v in self.graph.inputs}

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)

    @classmethod
    def from_graph(cls, graph: Function, report: PartitionReport | None = None
                   ) -> PartitionedGraph:
        """The typed form of a partitioned graph read back from the attributes the
        partitioner wrote on it (an artifact's ``graph.json``). Raises
        :class:`~tessera.errors.PartitionError` naming the node when the graph is not
        partitioned or a region lacks its backend or device."""
        steps: list[Region | DeviceCopy] = []
        for node in graph.nodes:
            if node.op == COPY_OP:
                steps.append(_copy_of(node))
            elif node.op == REGION_OP and node.body is not None:
                steps.append(_region_of(node))
            else:
                raise PartitionError(f"node {node.name} ({node.op}) is neither a region nor a "
                                     f"copy; the graph is not partitioned")
        return cls(graph, steps, report if report is not None else PartitionReport(""))


def default_output_names(graph: Function) -> list[str]:
    """The model's output names: the ONNX names the importer recorded, else the values'."""
    return list(graph.attrs.get("output_names") or [v.name for v in graph.outputs])


def _copy_of(node: Node) -> DeviceCopy:
    src, dst = node.attrs.get("src"), node.attrs.get("dst")
    if not node.inputs or node.inputs[0] is None or len(node.outputs) != 1 or not src or not dst:
        raise PartitionError(f"device copy {node.name} needs one input, one output and its "
                             f"'src' and 'dst' devices")
    out = node.outputs[0]
    return DeviceCopy(node.name, node.inputs[0].name, out.name, out.type, str(src), str(dst))


def _region_of(node: Node) -> Region:
    body = node.body
    assert body is not None
    backend = body.attrs.get("backend")
    device = node.attrs.get("device") or body.attrs.get("device")
    if not backend or not device:
        missing = "backend" if not backend else "device"
        raise PartitionError(f"region {body.name} names no {missing}")
    try:
        kind = kind_of_region(body)
    except (TargetError, KeyError) as e:
        raise PartitionError(f"region {body.name} has a malformed target "
                             f"{body.attrs.get('target')!r}: {e}") from None
    return Region(body.name, body, str(backend), kind, str(device), _matches_of(body),
                  tuple(v.name for v in node.inputs if v is not None),
                  tuple(v.name for v in node.outputs), node)


def _matches_of(body: Function) -> tuple[Match, ...]:
    """The recorded pattern matches (none for regions made before they were recorded)."""
    recorded = body.attrs.get(MATCHES_ATTR) or []
    out = []
    for entry in recorded:
        if not isinstance(entry, (list, tuple)) or not entry:
            raise PartitionError(f"region {body.name} has a malformed match {entry!r}")
        pattern, *names = entry
        out.append((str(pattern), tuple(str(n) for n in names)))
    return tuple(out)
