"""Partitioner: claims in priority order, composites, merging without cycles, copies, fallback."""

from __future__ import annotations

import numpy as np
import pytest
from toy_backends import ToyBackend

from tessera.backends.reference import ReferenceBackend
from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import PartitionError
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.partition import COPY_OP, REGION_OP, Pattern, partition
from tessera.plugin.target import TargetKind

REF = (ReferenceBackend(), TargetKind("ref"))


def _kind(b: ToyBackend) -> tuple[ToyBackend, TargetKind]:
    return b, TargetKind(b.name)


def _input(fn: Function, name: str = "x", shape=(2, 5)) -> object:
    return fn.add_input(name, TensorType(shape, DType.float32))


def _regions(graph: Function) -> list:
    return [n for n in graph.nodes if n.op == REGION_OP]


def _check_topological(graph: Function) -> None:
    defined = {id(v) for v in graph.inputs}
    for node in graph.nodes:
        for v in node.inputs:
            assert v is None or v.is_constant or id(v) in defined, f"{node.name} reads early"
        defined.update(id(o) for o in node.outputs)


def _run_partitioned(graph: Function, x: np.ndarray) -> list[np.ndarray]:
    """Evaluate a partitioned graph region by region with the reference interpreter."""
    env = {v.name: x for v in graph.inputs}
    for node in graph.nodes:
        if node.op == COPY_OP:
            env[node.outputs[0].name] = env[node.inputs[0].name]
            continue
        body = node.body
        outs = evaluate_function(body, {b.name: env[o.name]
                                        for b, o in zip(body.inputs, node.inputs)})
        for o in node.outputs:
            env[o.name] = outs[o.name]
    return [v.data if v.is_constant else env[v.name] for v in graph.outputs]


def diamond() -> Function:
    """x -> Relu(a) -> Neg(b) ; a -> Exp(c) ; Add(b, c): toy claims Relu, Exp, Add."""
    fn = Function("diamond")
    x = _input(fn)
    a = fn.op("Relu", x, name="a")
    b = fn.op("Neg", a, name="b")
    c = fn.op("Exp", a, name="c")
    d = fn.op("Add", b, c, name="d")
    fn.outputs = [d]
    return fn


def test_merge_never_creates_a_cycle(rng):
    fn = diamond()
    toy = ToyBackend("toy", [Pattern("Relu"), Pattern("Exp"), Pattern("Add")])
    result = partition(fn, [_kind(toy)], REF)
    graph = result.graph
    _check_topological(graph)
    owners = [(r.attrs["backend"], sorted(n.op for n in r.body.nodes)) for r in _regions(graph)]
    # Relu and Exp merge; Add cannot join them (Neg on ref sits between) -> its own region
    assert owners == [("toy", ["Exp", "Relu"]), ("ref", ["Neg"]), ("toy", ["Add"])]
    x = rng.standard_normal((2, 5)).astype(np.float32)
    want = evaluate_function(fn, {"x": x})["d"]
    np.testing.assert_allclose(_run_partitioned(graph, x)[0], want, rtol=1e-6)
    assert [f[1] for f in result.report.fallback] == ["Neg"]


def test_chain_merges_into_one_region():
    fn = Function("chain")
    x = _input(fn)
    y = fn.op("Relu", fn.op("Exp", fn.op("Neg", x)))
    fn.outputs = [y]
    toy = ToyBackend("toy", [Pattern(["Relu", "Exp", "Neg"])])
    graph = partition(fn, [_kind(toy)], REF).graph
    assert len(_regions(graph)) == 1


def test_multi_output_region(rng):
    fn = Function("multi")
    x = _input(fn)
    a = fn.op("Relu", x, name="a")
    b = fn.op("Exp", a, name="b")
    c = fn.op("Neg", a, name="c")      # ref reads a
    d = fn.op("Neg", b, name="d")      # ref reads b
    fn.outputs = [c, d, b]
    toy = ToyBackend("toy", [Pattern("Relu"), Pattern("Exp")])
    graph = partition(fn, [_kind(toy)], REF).graph
    first = _regions(graph)[0]
    assert first.attrs["backend"] == "toy"
    assert sorted(o.name for o in first.outputs) == ["a", "b"]
    x = rng.standard_normal((2, 5)).astype(np.float32)
    want = evaluate_function(fn, {"x": x})
    got = _run_partitioned(graph, x)
    for g, name in zip(got, ["c", "d", "b"]):
        np.testing.assert_allclose(g, want[name], rtol=1e-6)


def test_priority_order_decides():
    fn = Function("prio")
    x = _input(fn)
    fn.outputs = [fn.op("Relu", x)]
    first = ToyBackend("first", [Pattern("Relu")])
    second = ToyBackend("second", [Pattern("Relu")])
    graph = partition(fn, [_kind(first), _kind(second)], REF).graph
    assert [r.attrs["backend"] for r in _regions(graph)] == ["first"]
    graph = partition(fn, [_kind(second), _kind(first)], REF).graph
    assert [r.attrs["backend"] for r in _regions(graph)] == ["second"]


def test_composite_pattern_is_one_group_and_respects_escaping_values():
    fused = Pattern("Relu", inputs=[Pattern("Add")])
    fn = Function("comp")
    x = _input(fn)
    y = _input(fn, "y")
    s = fn.op("Add", x, y, name="s")
    fn.outputs = [fn.op("Relu", s, name="r")]
    toy = ToyBackend("toy", [fused])
    graph = partition(fn, [_kind(toy)], REF).graph
    assert [sorted(n.op for n in r.body.nodes) for r in _regions(graph)] == [["Add", "Relu"]]

    # the Add output is also read by Neg: the composite must not match; both fall back
    fn2 = Function("comp2")
    x = _input(fn2)
    y = _input(fn2, "y")
    s = fn2.op("Add", x, y, name="s")
    fn2.outputs = [fn2.op("Relu", s, name="r"), fn2.op("Neg", s, name="n")]
    result = partition(fn2, [_kind(toy)], REF)
    assert {r.attrs["backend"] for r in _regions(result.graph)} == {"ref"}
    assert sorted(op for _, op, _ in result.report.fallback) == ["Add", "Neg", "Relu"]


def test_pattern_check_filters_nodes():
    only_small = Pattern("Relu", check=lambda n: n.inputs[0].type.size <= 10)
    fn = Function("check")
    small = _input(fn, "small", (2, 5))
    big = _input(fn, "big", (4, 5))
    fn.outputs = [fn.op("Relu", small, name="a"), fn.op("Relu", big, name="b")]
    toy = ToyBackend("toy", [only_small])
    result = partition(fn, [_kind(toy)], REF)
    assert [(r.attrs["backend"], r.body.nodes[0].name) for r in _regions(result.graph)] == [
        ("toy", "a"), ("ref", "b")]


class _Declining(ToyBackend):
    """Claims small Relus and says why it leaves the big ones."""

    def declines(self, node, target):  # noqa: ANN001, ANN201
        return "more than 10 elements" if node.inputs[0].type.size > 10 else None


def test_declined_nodes_are_reported_with_the_backend_and_reason():
    only_small = Pattern("Relu", check=lambda n: n.inputs[0].type.size <= 10)
    fn = Function("check")
    small = _input(fn, "small", (2, 5))
    big = _input(fn, "big", (4, 5))
    fn.outputs = [fn.op("Relu", small, name="a"), fn.op("Relu", big, name="b"),
                  fn.op("Exp", big, name="c")]
    picky = _Declining("picky", [only_small])
    later = ToyBackend("later", [Pattern("Relu"), Pattern("Exp")])
    report = partition(fn, [_kind(picky), _kind(later)], REF).report
    # b: declined with the reason; c: picky does not claim Exp at all, so nothing to say
    assert report.declined == [("b", "Relu", "picky", "more than 10 elements", "later")]
    assert "Relu b: picky declined (more than 10 elements) -> later" in report.table()
    # a backend later in the target than the one that runs the node is not asked
    report = partition(fn, [_kind(later), _kind(picky)], REF).report
    assert report.declined == []


def test_declined_nodes_survive_the_artifact():
    fn = Function("m")
    x = _input(fn, "x", (4, 5))
    fn.outputs = [fn.op("Relu", x, name="r")]
    report = partition(fn, [_kind(_Declining("picky", [Pattern("Relu", check=lambda n: False)]))],
                       REF).report
    assert report.declined
    import dataclasses
    import json

    from tessera.runtime.artifact import _report_from  # what tessera.load reads report.json with

    again = _report_from(json.loads(json.dumps(dataclasses.asdict(report))))
    assert again.declined == report.declined and again.table() == report.table()


def test_device_copies_inserted_once_per_value_and_device(rng):
    fn = diamond()
    npu = ToyBackend("npu", [Pattern("Relu"), Pattern("Exp"), Pattern("Add")], device="npu")
    result = partition(fn, [_kind(npu)], REF)
    graph = result.graph
    copies = [n for n in graph.nodes if n.op == COPY_OP]
    routes = sorted((n.inputs[0].name, n.attrs["src"], n.attrs["dst"]) for n in copies)
    # x to npu, a back to cpu for Neg, b to npu for Add, d back to cpu as the output
    assert routes == [("a", "npu", "cpu"), ("b", "cpu", "npu"), ("d", "npu", "cpu"),
                      ("x", "cpu", "npu")]
    assert len(result.report.copies) == 4
    assert graph.outputs[0].producer.op == COPY_OP
    x = rng.standard_normal((2, 5)).astype(np.float32)
    want = evaluate_function(fn, {"x": x})["d"]
    np.testing.assert_allclose(_run_partitioned(graph, x)[0], want, rtol=1e-6)


def test_many_interleaved_regions_stay_acyclic(rng):
    """A ladder where every other node is toy-claimed and side branches cross back."""
    fn = Function("ladder")
    x = _input(fn)
    cur = x
    prev = x
    for i in range(12):
        a = fn.op("Relu" if i % 2 == 0 else "Neg", cur, name=f"n{i}")
        b = fn.op("Add", a, prev, name=f"s{i}")
        prev, cur = a, b
    fn.outputs = [cur]
    toy = ToyBackend("toy", [Pattern("Relu"), Pattern("Add")])
    graph = partition(fn, [_kind(toy)], REF).graph
    _check_topological(graph)
    x_val = rng.standard_normal((2, 5)).astype(np.float32)
    want = evaluate_function(fn, {"x": x_val})[cur.name]
    np.testing.assert_allclose(_run_partitioned(graph, x_val)[0], want, rtol=1e-5)


def test_fallback_that_cannot_run_the_op_is_an_error():
    fn = Function("fb")
    x = _input(fn)
    fn.outputs = [fn.op("Exp", x)]
    weak = ToyBackend("weak", [Pattern("Relu")])
    with pytest.raises(PartitionError, match="Exp"):
        partition(fn, [_kind(weak)], (weak, TargetKind("weak")))
