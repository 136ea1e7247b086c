"""Tests for tessera.ir.graph: values, nodes and functions."""

import numpy as np
import pytest

from tessera.errors import IRError, OpError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import DType, TensorType

F32 = DType.float32


def small_fn():
    """x -> Relu -> Add(const) -> y, with a LeakyRelu side branch."""
    fn = Function("f")
    x = fn.add_input("x", TensorType((2, 3), F32))
    c = fn.constant(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    r = fn.op("Relu", x, name="r")
    y = fn.op("Add", r, c, name="y")
    fn.outputs = [y]
    return fn, x, c, r, y


def test_add_node_infers_types_and_fills_defaults():
    fn = Function()
    x = fn.add_input("x", TensorType((4,), DType.float64))
    node = fn.add_node("LeakyRelu", [x])
    assert node.output.type == TensorType((4,), DType.float64)
    assert node.attrs == {"alpha": 0.01}
    assert node.output.producer is node


def test_add_node_broadcasts():
    fn = Function()
    a = fn.add_input("a", TensorType((2, 1, 3), F32))
    b = fn.constant(np.ones((4, 1), np.float32))
    assert fn.op("Add", a, b).type == TensorType((2, 4, 3), F32)


def test_add_node_rejects_unknown_attribute_and_bad_arity():
    fn = Function()
    x = fn.add_input("x", TensorType((4,), F32))
    with pytest.raises(OpError, match="unknown attribute 'beta'"):
        fn.add_node("LeakyRelu", [x], {"beta": 1.0})
    with pytest.raises(OpError, match="expected 2 inputs"):
        fn.add_node("Add", [x])
    with pytest.raises(OpError, match="unknown op 'NoSuchOp'"):
        fn.add_node("NoSuchOp", [x])


def test_add_node_broadcast_failure():
    fn = Function()
    a = fn.add_input("a", TensorType((2, 3), F32))
    b = fn.add_input("b", TensorType((4,), F32))
    with pytest.raises(OpError, match=r"\[2, 3\], \[4\] do not broadcast"):
        fn.op("Add", a, b, name="bad")
    assert fn.nodes == []


def test_fresh_names_are_unique():
    fn = Function()
    names = {fn.fresh_name("v") for _ in range(20)}
    assert len(names) == 20
    fn.add_input("x", TensorType((1,), F32))
    assert fn.fresh_name("x") != "x"
    with pytest.raises(IRError, match="duplicate name 'x'"):
        fn.add_input("x", TensorType((1,), F32))


def test_users_constants_values():
    fn, x, c, r, y = small_fn()
    users = fn.users()
    assert [(n.name, i) for n, i in users[x]] == [("r", 0)]
    assert [(n.name, i) for n, i in users[c]] == [("y", 1)]
    assert fn.constants() == [c]
    assert list(fn.values()) == [x, c, r, y]
    assert fn.node_by_name("y").op == "Add"
    with pytest.raises(IRError, match="no node named 'zz'"):
        fn.node_by_name("zz")


def test_constant_output_is_listed_once():
    fn, x, c, r, y = small_fn()
    fn.outputs = [y, c]
    assert fn.constants() == [c]


def test_replace_all_uses_covers_outputs():
    fn, x, c, r, y = small_fn()
    fn.outputs = [y, r]
    fn.replace_all_uses(r, x)
    assert fn.node_by_name("y").inputs[0] is x
    assert fn.outputs == [y, x]


def test_remove_nodes():
    fn, x, c, r, y = small_fn()
    fn.remove_nodes([r.producer])
    assert [n.name for n in fn.nodes] == ["y"]


def test_topo_sort_is_stable_and_fixes_order():
    fn, x, c, r, y = small_fn()
    side = fn.op("Relu", x, name="side")
    fn.nodes.reverse()  # side, y, r: y now reads r before r is computed
    fn.topo_sort()
    order = [n.name for n in fn.nodes]
    assert order.index("r") < order.index("y")
    fn2, *_ = small_fn()
    before = [n.name for n in fn2.nodes]
    fn2.topo_sort()
    assert [n.name for n in fn2.nodes] == before
    assert side.producer in fn.nodes


def test_topo_sort_detects_cycle():
    fn, x, c, r, y = small_fn()
    r.producer.inputs = [y]  # r reads y, y reads r
    with pytest.raises(IRError, match="cycle"):
        fn.topo_sort()


def test_copy_is_independent():
    fn, x, c, r, y = small_fn()
    fn.attrs["output_names"] = ["out"]
    new = fn.copy()
    assert str(new) == str(fn)
    assert new.inputs[0] is not x and new.outputs[0] is not y
    assert new.nodes[1].inputs[1].data is c.data  # constants share their arrays
    assert new.nodes[1].inputs[0] is new.nodes[0].outputs[0]
    assert new.outputs[0].producer is new.nodes[1]
    new.nodes[0].attrs["x"] = 1
    new.attrs["name"] = "changed"
    assert "x" not in fn.nodes[0].attrs and "name" not in fn.attrs
    # fresh names in the copy do not collide with the original's names
    assert new.fresh_name("r") not in {"r", "x", "y", "c"}


def test_copy_copies_bodies():
    fn, *_ = small_fn()
    outer = Function("outer")
    a = outer.add_input("a", TensorType((2, 3), F32))
    out = Value("o", TensorType((2, 3), F32))
    outer.append(Node("Region", "region0", [a], [out], {"backend": "ref"}, body=fn))
    outer.outputs = [out]
    new = outer.copy()
    assert new.nodes[0].body is not fn
    assert str(new.nodes[0].body) == str(fn)


def test_node_output_requires_single_output():
    a = Value("a", TensorType((1,), F32))
    b = Value("b", TensorType((1,), F32))
    node = Node("Split", "s", [], [a, b])
    assert a.producer is node and b.producer is node
    with pytest.raises(IRError, match="has 2 outputs, not 1"):
        _ = node.output


@pytest.mark.parametrize("data", [np.float32(1.5), np.array(3, np.int64), 2.0])
def test_scalar_constant_stays_scalar(data):
    fn = Function()
    c = fn.constant(data, "c")
    assert c.type.shape == () and c.data.shape == ()


def test_constant_made_contiguous():
    fn = Function()
    c = fn.constant(np.arange(6, dtype=np.int32).reshape(2, 3).T, "c")
    assert c.data.flags.c_contiguous and c.type == TensorType((3, 2), DType.int32)


def test_value_repr():
    v = Value("w", TensorType((2,), F32), data=np.zeros(2, np.float32))
    assert v.is_constant
    assert repr(v) == "<Value const %w: float32[2]>"


def test_a_node_whose_output_is_too_big_is_refused(monkeypatch):
    from tessera.errors import OpError

    monkeypatch.setenv("TESSERA_MAX_TENSOR_BYTES", str(1 << 20))
    g = Function("g")
    x = g.add_input("x", TensorType((1024, 1), DType.float32))
    with pytest.raises(OpError, match=r"node big \(MatMul\): output 0: float32\[1024, 1024\] "
                                      r"takes 4.0 MiB, more than the 1.0 MiB"):
        g.add_node("MatMul", [x, g.add_input("w", TensorType((1, 1024), DType.float32))],
                   name="big")
