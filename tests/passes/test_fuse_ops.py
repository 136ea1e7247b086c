"""FuseOps (tessera.passes.fuse_ops): TVM's fusion rules on hand-built graphs, and the group
invariants (every node in one group, a valid execution order, single outputs) on the light
model-zoo graphs."""

from __future__ import annotations

from collections import Counter
from functools import cache

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import PassError
from tessera.frontend.onnx import import_onnx
from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.ops.registry import OpPattern
from tessera.passes import PassManager
from tessera.passes.fuse_ops import FusedGroup, format_groups, fuse_ops, op_pattern
from tessera.testing.size_models import relative_bias_model

RNG = np.random.default_rng(11)
F32 = DType.float32


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def conv(fn: Function, x: Value, oc: int, bias: bool = True, name: str | None = None) -> Value:
    c = x.type.shape[1]
    w = fn.constant(rand(oc, c, 3, 3) * 0.2, "w")
    b = fn.constant(rand(oc), "b") if bias else None
    return fn.op("Conv", x, w, b, pads=[1, 1, 1, 1], name=name)


def graph(c: int = 4, hw: int = 6) -> tuple[Function, Value]:
    fn = Function("g")
    return fn, fn.add_input("x", TensorType((1, c, hw, hw), F32))


def group_of(groups: list[FusedGroup], node_name: str) -> FusedGroup:
    return next(g for g in groups if any(n.name == node_name for n in g.nodes))


def check_invariants(fn: Function, groups: list[FusedGroup]) -> None:
    """Every node in exactly one group; groups in execution order; inputs/outputs right."""
    seen = Counter(id(n) for g in groups for n in g.nodes)
    assert set(seen) == {id(n) for n in fn.nodes} and set(seen.values()) == {1}
    available = {id(v) for v in fn.inputs}
    returned = {id(v) for v in fn.outputs}
    readers: dict[int, set[str]] = {}
    for g in groups:
        for n in g.nodes:
            for v in n.inputs:
                if v is not None:
                    readers.setdefault(id(v), set()).add(g.name)
    assert len({g.name for g in groups}) == len(groups)
    order = {id(n): i for i, n in enumerate(fn.topological_order())}
    for g in groups:
        assert [order[id(n)] for n in g.nodes] == sorted(order[id(n)] for n in g.nodes)
        inside = {id(o) for n in g.nodes for o in n.outputs}
        for v in g.inputs:
            assert id(v) not in inside
            assert v.is_constant or id(v) in available, f"{g.name} reads %{v.name} too early"
        assert len({id(v) for v in g.inputs}) == len(g.inputs)
        want_out = [o for n in g.nodes for o in n.outputs
                    if id(o) in returned or readers.get(id(o), set()) - {g.name}]
        assert g.outputs == want_out
        # TVM's rule: one output per group, unless a multi-output node makes more
        if all(len(n.outputs) == 1 for n in g.nodes):
            assert len(g.outputs) <= 1, str(g)
        # the anchor is the node with the group's pattern, when that is not elementwise
        if g.pattern >= OpPattern.COMM_REDUCE:
            assert g.anchor is not None and g.anchor in g.nodes
            assert op_pattern(g.anchor) == g.pattern
        else:
            assert g.anchor is None
        assert g.pattern == max(op_pattern(n) for n in g.nodes)
        available |= {id(o) for o in g.outputs}


def run_by_groups(fn: Function, groups: list[FusedGroup],
                  inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate group by group through FusedGroup.as_function."""
    env: dict[str, np.ndarray] = dict(inputs)
    for g in groups:
        sub = g.as_function()
        verify(sub)
        env.update(evaluate_function(sub, {v.name: env[v.name] for v in sub.inputs}))
    return {v.name: env[v.name] for v in fn.outputs}


# -- hand-built graphs ---------------------------------------------------------------------------

def test_conv_bias_residual_relu_is_one_group() -> None:
    fn, x = graph()
    c = conv(fn, x, 4, bias=False, name="conv")
    y = fn.op("Add", c, fn.constant(rand(4, 1, 1), "bias"), name="bias_add")
    y = fn.op("Add", y, x, name="residual")
    fn.outputs = [fn.op("Relu", y, name="relu")]
    groups = fuse_ops(fn)
    assert len(groups) == 1
    g = groups[0]
    assert g.ops == ["Conv", "Add", "Add", "Relu"]
    assert g.anchor is fn.node_by_name("conv") and g.name == "fused_conv"
    assert g.pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert [v.name for v in g.inputs] == ["x", g.nodes[0].inputs[1].name, "bias"]
    assert g.outputs == fn.outputs
    check_invariants(fn, groups)


def test_diamond_after_conv_fuses_into_the_post_dominator() -> None:
    fn, x = graph()
    c = conv(fn, x, 4, name="conv")
    a = fn.op("Relu", c, name="a")
    b = fn.op("Sigmoid", c, name="b")
    fn.outputs = [fn.op("Add", a, b, name="join")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Conv", "Relu", "Sigmoid", "Add"]]
    check_invariants(fn, groups)


def test_two_convs_into_one_add_fuse_one() -> None:
    fn, x = graph()
    c1 = conv(fn, x, 4, name="c1")
    c2 = conv(fn, x, 4, name="c2")
    fn.outputs = [fn.op("Relu", fn.op("Sum", c1, c2, name="sum"), name="relu")]
    groups = fuse_ops(fn)
    assert sorted(g.ops for g in groups) == [["Conv"], ["Conv", "Sum", "Relu"]]
    assert group_of(groups, "sum").anchor is fn.node_by_name("c1")
    check_invariants(fn, groups)


def test_value_read_by_two_groups_is_an_output() -> None:
    fn, x = graph()
    r = fn.op("Relu", conv(fn, x, 4, name="c1"), name="r")
    fn.outputs = [conv(fn, r, 4, name="c2"), conv(fn, r, 4, name="c3")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Conv", "Relu"], ["Conv"], ["Conv"]]
    assert groups[0].outputs == [r]
    check_invariants(fn, groups)


def test_function_output_ends_a_group() -> None:
    fn, x = graph()
    c = conv(fn, x, 4, name="c")
    r = fn.op("Relu", c, name="r")
    fn.outputs = [c, r]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Conv"], ["Relu"]]
    check_invariants(fn, groups)


def test_conv_does_not_take_injective_or_other_convs() -> None:
    fn, x = graph()
    r = fn.op("Relu", conv(fn, x, 4, name="c1"), name="r")
    c2 = conv(fn, r, 4, name="c2")
    fn.outputs = [fn.op("Reshape", c2, shape=[1, -1], name="flat")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Conv", "Relu"], ["Conv"], ["Reshape"]]
    check_invariants(fn, groups)


def test_elementwise_and_injective_chains() -> None:
    fn, x = graph(c=4)
    y = fn.op("Mul", x, fn.constant(rand(4, 1, 1)), name="scale")
    y = fn.op("Add", y, fn.constant(rand(4, 1, 1)), name="shift")
    y = fn.op("Relu", y, name="relu")
    y = fn.op("Reshape", y, shape=[1, 2, 2, 36], name="r1")
    y = fn.op("Transpose", y, perm=[0, 2, 1, 3], name="t")
    y = fn.op("Reshape", y, shape=[1, 4, 6, 6], name="r2")
    fn.outputs = [fn.op("Exp", y, name="exp")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Mul", "Add", "Relu", "Reshape", "Transpose", "Reshape",
                                        "Exp"]]
    assert groups[0].anchor is None and groups[0].pattern == OpPattern.INJECTIVE
    check_invariants(fn, groups)


def test_concat_fuses_into_following_elementwise() -> None:
    fn, x = graph()
    a = conv(fn, x, 4, name="a")
    b = conv(fn, x, 4, name="b")
    fn.outputs = [fn.op("Relu", fn.op("Concat", a, b, axis=1, name="cat"), name="relu")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Conv"], ["Conv"], ["Concat", "Relu"]]
    check_invariants(fn, groups)


def test_concat_inlines_data_movement_but_not_costly_producers() -> None:
    fn, x = graph(c=4, hw=6)
    moved = fn.op("Transpose", x, perm=[0, 1, 3, 2], name="moved")
    up = fn.op("Resize", fn.op("Transpose", x, perm=[0, 1, 3, 2], name="t_up"),
               sizes=[1, 4, 6, 6], scales=[1.0, 1.0, 1.0, 1.0], mode="linear", name="up")
    chain = x
    for i in range(5):  # more computing nodes than a concat inlines
        chain = fn.op("Add", chain, fn.constant(rand(4, 1, 1)), name=f"add{i}")
    fn.outputs = [fn.op("Concat", moved, up, chain, axis=1, name="cat")]
    groups = fuse_ops(fn)
    cat = group_of(groups, "cat")
    assert "moved" in {n.name for n in cat.nodes}  # a transpose is read in place
    assert group_of(groups, "up") is not cat and group_of(groups, "add4") is not cat
    assert [n.name for n in group_of(groups, "up").nodes] == ["t_up", "up"]
    check_invariants(fn, groups)
    feeds = {"x": rand(1, 4, 6, 6)}
    want = evaluate_function(fn, feeds)
    got = run_by_groups(fn, groups, feeds)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-6)


def _indices_into_gather(table: np.ndarray, costly: bool) -> Function:
    """``Gather(table, bucket(x))`` with ``bucket`` a chain of ops on ``x: float32[6, 5]``
    (with a ``Log`` where ``costly``), then a ``Relu`` of the rows gathered."""
    fn = Function("g")
    x = fn.add_input("x", TensorType((6, 5), F32))
    y = fn.op("Abs", x, name="abs")
    if costly:
        y = fn.op("Log", fn.op("Add", y, fn.constant(np.float32(1.0)), name="plus1"),
                  name="log")
    idx = fn.op("Min", fn.op("Cast", y, to=DType.int64, name="cast"),
                fn.constant(np.int64(table.shape[0] - 1)), name="bucket")
    picked = fn.op("Gather", fn.constant(table, "table"), idx, axis=0, name="gather")
    fn.outputs = [fn.op("Relu", picked, name="relu")]
    return fn


@pytest.mark.parametrize("row", [1, 4])
@pytest.mark.parametrize("costly", [False, True])
def test_costly_indices_of_a_gather_of_rows_stay_a_kernel(row: int, costly: bool) -> None:
    """A Gather reading each index ``row`` times (a table of one value per head, as T5's
    relative-position bias) does not take a costly index computation (a ``Log`` per
    element): it would be computed at every read. Cheap indices, or rows of one element,
    fuse as before; the results are the same either way."""
    table = rand(8, row) if row > 1 else rand(8)
    fn = _indices_into_gather(table, costly)
    groups = fuse_ops(fn)
    check_invariants(fn, groups)
    apart = group_of(groups, "bucket") is not group_of(groups, "gather")
    assert apart == (costly and row > 1), [g.ops for g in groups]
    feeds = {"x": rand(6, 5) * 4}
    want = evaluate_function(fn, feeds)
    got = run_by_groups(fn, groups, feeds)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v)


def test_a_costly_gather_index_is_not_pulled_in_along_a_path() -> None:
    """One ``Range`` read by a costly bucket computation (gathered per head) and by a
    cheap mask index: the Range's post-dominator is the end, and fusing it there would take
    the bucket computation along; the bucket stays a kernel of its own (and the Range, read
    by two kernels, one too)."""
    model = relative_bias_model()
    nodes = list(model.graph.node)
    for n in nodes:  # the mask's index reads the bias's Range
        if n.output[0] == "krow":
            n.input[0] = "pos"
    del model.graph.node[:]
    model.graph.node.extend(n for n in nodes if n.output[0] != "kpos")
    fn = import_onnx(model, symbolic=True)
    groups = fuse_ops(fn)
    check_invariants(fn, groups)
    log = next(g for g in groups if "Log" in g.ops)
    assert "Gather" not in log.ops and "Where" not in log.ops, [g.ops for g in groups]


def test_index_ops_fuse_and_a_costly_table_of_sizes_is_apart() -> None:
    """T5's bias in miniature: ``Range``, ``ShapeValues`` fuse into the kernels that read
    them (the mask's gather indices become loop variables); the relative-position buckets
    (a ``Log`` per element) are one kernel, gathered per head by the kernel that adds them."""
    fn = import_onnx(relative_bias_model(), symbolic=True)
    groups = fuse_ops(fn)
    check_invariants(fn, groups)
    assert [g.ops.count("Gather") for g in groups] == [0, 2], [g.ops for g in groups]
    bucket, main = groups
    assert "Log" in bucket.ops and "Range" in bucket.ops
    assert main.ops.count("Range") == 2 and "ShapeValues" in main.ops


def test_reduce_takes_producers_not_consumers() -> None:
    fn, x = graph()
    y = fn.op("Mul", x, x, name="sq")
    y = fn.op("Transpose", y, perm=[0, 1, 3, 2], name="t")
    s = fn.op("ReduceSum", y, axes=[2, 3], keepdims=1, name="sum")
    fn.outputs = [fn.op("Sqrt", s, name="sqrt")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Mul", "Transpose", "ReduceSum"], ["Sqrt"]]  # TVM: 3 groups
    assert groups[0].anchor is fn.node_by_name("sum")
    assert groups[0].pattern == OpPattern.COMM_REDUCE
    check_invariants(fn, groups)


def test_opaque_stays_alone_and_blocks_paths() -> None:
    fn, x = graph()
    r = fn.op("Relu", x, name="r")
    s = fn.op("Softmax", r, axis=1, name="sm")
    fn.outputs = [fn.op("Add", r, s, name="add")]
    groups = fuse_ops(fn)
    # Relu's post-dominator is Add, but the path through Softmax is opaque
    assert [g.ops for g in groups] == [["Relu"], ["Softmax"], ["Add"]]
    check_invariants(fn, groups)


def test_elementwise_operand_joins_a_conv_epilogue() -> None:
    fn, x = graph()
    c = conv(fn, x, 4, name="c")
    side = fn.op("Sigmoid", x, name="side")
    fn.outputs = [fn.op("Add", c, side, name="add")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Conv", "Sigmoid", "Add"]]
    assert groups[0].anchor is fn.node_by_name("c")
    check_invariants(fn, groups)


def test_no_cycle_through_a_conv() -> None:
    # r -> conv -> add <- r: fusing r with add would put conv both before and after the group
    fn, x = graph()
    r = fn.op("Relu", x, name="r")
    c = conv(fn, r, 4, name="c")
    fn.outputs = [fn.op("Add", c, r, name="add")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Relu"], ["Conv", "Add"]]
    check_invariants(fn, groups)


def test_multi_output_split() -> None:
    fn, x = graph(c=4)
    parts = fn.add_node("Split", [x], {"axis": 1, "split": [2, 2]}, name="split").outputs
    a = fn.op("Relu", parts[0], name="a")
    b = fn.op("Neg", parts[1], name="b")
    fn.outputs = [fn.op("Concat", a, b, axis=1, name="cat")]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Split", "Relu", "Neg", "Concat"]]
    check_invariants(fn, groups)
    # a returned output ends the group: the split's group then has two outputs
    fn.outputs = [fn.outputs[0], parts[1]]
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Split"], ["Relu", "Neg", "Concat"]]
    assert groups[0].outputs == parts
    check_invariants(fn, groups)
    inputs = {"x": rand(1, 4, 6, 6)}
    got = run_by_groups(fn, groups, inputs)
    for k, want in evaluate_function(fn, inputs).items():
        np.testing.assert_array_equal(got[k], want)


def test_opt_level_zero_and_max_depth() -> None:
    fn, x = graph()
    y = x
    for i in range(10):
        y = fn.op("Relu" if i % 2 else "Neg", y, name=f"e{i}")
    fn.outputs = [y]
    assert [len(g.nodes) for g in fuse_ops(fn, opt_level=0)] == [1] * 10
    assert [len(g.nodes) for g in fuse_ops(fn)] == [10]
    groups = fuse_ops(fn, max_depth=4)
    assert max(len(g.nodes) for g in groups) <= 4 and sum(len(g.nodes) for g in groups) == 10
    check_invariants(fn, groups)
    with pytest.raises(PassError):
        fuse_ops(fn, max_depth=0)


def test_pattern_override() -> None:
    fn, x = graph()
    fn.outputs = [fn.op("Relu", conv(fn, x, 4, name="c"), name="r")]

    def no_conv_fusion(node: Node) -> OpPattern:
        return OpPattern.OPAQUE if node.op == "Conv" else op_pattern(node)

    assert [g.ops for g in fuse_ops(fn, pattern_of=no_conv_fusion)] == [["Conv"], ["Relu"]]


def test_unsorted_nodes_and_summary() -> None:
    fn, x = graph()
    c = conv(fn, x, 4, name="c")
    r = fn.op("Relu", c, name="r")
    fn.outputs = [fn.op("Softmax", r, axis=1, name="sm")]
    fn.nodes.reverse()
    groups = fuse_ops(fn)
    assert [g.ops for g in groups] == [["Conv", "Relu"], ["Softmax"]]
    text = format_groups(groups)
    assert "fused_c [OUT_ELEMWISE_FUSABLE anchor=c]: Conv -> Relu" in text
    assert "2 groups for 3 nodes (1 with more than one node)" in text


def test_groups_as_functions_compute_the_function() -> None:
    fn, x = graph(c=4, hw=5)
    c1 = conv(fn, x, 4, name="c1")
    r1 = fn.op("Relu", fn.op("Add", c1, x, name="res"), name="r1")
    c2 = conv(fn, r1, 8, name="c2")
    cat = fn.op("Concat", r1, fn.op("Sigmoid", c1, name="sg"), axis=1, name="cat")
    y = fn.op("Add", c2, fn.op("Neg", cat, name="neg"), name="join")
    fn.outputs = [fn.op("Softmax", y, axis=1, name="sm"), r1]
    groups = fuse_ops(fn)
    check_invariants(fn, groups)
    inputs = {"x": rand(1, 4, 5, 5)}
    want = evaluate_function(fn, inputs)
    got = run_by_groups(fn, groups, inputs)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)


# -- light models --------------------------------------------------------------------------------

@cache
def light(name: str) -> tuple[Function, dict[str, np.ndarray]]:
    from tessera.testing.light_models import load_light_model

    model = load_light_model(name)
    fn = import_onnx(model.model, input_shapes=model.input_shapes)
    return PassManager(opt_level=3).run(fn), model.inputs


#: groups per model at -O3 with today's op patterns (MaxPool/AveragePool opaque)
GROUP_COUNTS = {"light_resnet50": 58, "light_squeezenet": 39, "light_inception_v1": 85,
                "light_densenet121": 241, "light_shufflenet": 76}


@pytest.mark.parametrize("name", sorted(GROUP_COUNTS))
def test_light_model_groups(name: str) -> None:
    fn, _ = light(name)
    groups = fuse_ops(fn)
    check_invariants(fn, groups)
    assert len(groups) == GROUP_COUNTS[name], format_groups(groups)
    convs = [n for n in fn.nodes if n.op == "Conv"]
    anchors = [g.anchor for g in groups if g.anchor is not None and g.anchor.op == "Conv"]
    assert len(anchors) == len(convs)  # one conv per group, every conv an anchor
    # every Relu right after a conv is in that conv's group
    for g in groups:
        for n in g.nodes:
            if n.op == "Relu" and n.inputs[0].producer.op == "Conv":
                assert n.inputs[0].producer in g.nodes
    assert len(fuse_ops(fn, opt_level=0)) == len(fn.nodes)


def test_resnet50_conv_add_relu_groups() -> None:
    # (its 7x7 AveragePool over the last 7x7 map is a GlobalAveragePool after Canonicalize)
    fn, _ = light("light_resnet50")
    groups = fuse_ops(fn)
    residual = [g for g in groups if "Sum" in g.ops]
    assert len(residual) == 16
    for g in residual:
        assert g.ops == ["Conv", "Sum", "Relu"] and g.anchor is g.nodes[0]
        assert len(g.outputs) == 1 and g.outputs[0] is g.nodes[-1].output
    assert Counter(tuple(g.ops) for g in groups) == {
        ("Conv", "Relu"): 33, ("Conv", "Sum", "Relu"): 16, ("Conv",): 4, ("MaxPool",): 1,
        ("GlobalAveragePool",): 1, ("Reshape",): 1, ("Gemm",): 1, ("Softmax",): 1}


def test_squeezenet_runs_group_by_group() -> None:
    fn, inputs = light("light_squeezenet")
    groups = fuse_ops(fn)
    want = evaluate_function(fn, inputs)
    got = run_by_groups(fn, groups, inputs)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
