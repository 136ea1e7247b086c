"""The partition as typed objects: regions and copies with their fields, in execution order, and
the same facts read back from a graph (what an artifact's graph.json keeps)."""

from __future__ import annotations

import pytest
from toy_backends import ToyBackend

from tessera.backends.reference import ReferenceBackend
from tessera.errors import PartitionError
from tessera.ir.graph import COPY_OP, REGION_OP, Function
from tessera.ir.serialize import from_json, to_json
from tessera.ir.types import DType, TensorType
from tessera.partition import DeviceCopy, PartitionedGraph, Pattern, Region, partition
from tessera.plugin.patterns import region_matches
from tessera.plugin.target import TargetKind, kind_of_region

REF = (ReferenceBackend(), TargetKind("ref"))


def _model() -> Function:
    fn = Function("m", {"output_names": ["out"]})
    x = fn.add_input("x", TensorType((2, 5), DType.float32))
    a = fn.op("Relu", x, name="a")
    b = fn.op("Neg", a, name="b")
    fn.outputs = [fn.op("Exp", b, name="c")]
    return fn


def _partitioned() -> PartitionedGraph:
    npu = ToyBackend("npu", [Pattern("Relu"), Pattern("Exp")], device="npu")
    return partition(_model(), [(npu, TargetKind("npu", {"fast": "1"}))], REF, "npu -fast=1")


def test_partition_returns_typed_regions_and_copies_in_graph_order() -> None:
    result = _partitioned()
    assert [type(s).__name__ for s in result.steps] == [
        "DeviceCopy", "Region", "DeviceCopy", "Region", "DeviceCopy", "Region", "DeviceCopy"]
    graph_order = [n.name for n in result.graph.nodes]
    assert [s.node.name if isinstance(s, Region) else s.name for s in result.steps] == \
        graph_order
    first = result.regions[0]
    assert (first.backend, first.kind, first.device) == ("npu", TargetKind("npu", {"fast": "1"}),
                                                         "npu")
    assert first.matches == (("Relu", ("a",)),)
    assert first.outputs == ("a",) and first.node is result.graph.nodes[1]
    assert [(c.src, c.dst) for c in result.copies] == [("cpu", "npu"), ("npu", "cpu"),
                                                       ("cpu", "npu"), ("npu", "cpu")]
    assert result.output_names == ["out"]
    assert result.kinds == {r.name: r.kind for r in result.regions}


def test_the_graph_carries_the_same_facts_for_backends_and_artifacts() -> None:
    result = _partitioned()
    for region in result.regions:
        assert kind_of_region(region.body) == region.kind
        assert [(m.pattern, tuple(n.name for n in m.nodes))
                for m in region_matches(region.body)] == list(region.matches)
    again = PartitionedGraph.from_graph(from_json(to_json(result.graph)), result.report)
    assert again.steps == result.steps
    assert again.output_names == ["out"]


def test_from_graph_names_what_is_missing() -> None:
    result = _partitioned()
    graph = from_json(to_json(result.graph))
    body = next(n.body for n in graph.nodes if n.op == REGION_OP)
    del body.attrs["backend"]
    with pytest.raises(PartitionError, match=f"region {body.name} names no backend"):
        PartitionedGraph.from_graph(graph)
    plain = _model()
    with pytest.raises(PartitionError, match="neither a region nor a copy"):
        PartitionedGraph.from_graph(plain)


def test_the_typed_objects_are_importable_from_the_package() -> None:
    assert Region.__module__ == DeviceCopy.__module__ == "tessera.partition.regions"
    assert COPY_OP == "DeviceCopy"
