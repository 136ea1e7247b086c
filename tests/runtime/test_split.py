"""Split execution (``symbolic_dims``): a model whose cache length changes on every call runs
with its size-independent parts compiled once and the rest evaluated per call, checked against
onnx's reference evaluator at every size; a call that breaks the plan's checks runs
specialised; threads, artifacts and errors."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.errors import CompileError, RunError
from tessera.plugin.manager import get_backends
from tessera.runtime.split import SplitModule

TARGETS = ["ref"] + (["llvm"] if "llvm" in get_backends() else [])
WIDTH = 8


def _attention_step(clamp: int | None = None) -> onnx.ModelProto:
    """One attention step over a key cache: ``x: [1, 1, W]``, ``past: [1, past, W]``,
    ``mask: [1, total]`` -> ``y: [1, W]`` and ``present: [1, total, W]``. The projections
    and the output layer have fixed shapes; the concatenation, the scores, the mask and the
    softmax have the cache's length; a ``Reshape`` target is computed from the cache's
    (fixed) batch dimension, as exporters write it. With ``clamp``, a fixed weight is sliced to
    ``min(past, clamp)`` rows: fixed at large sizes, not at small ones."""
    rng = np.random.default_rng(7)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) / 3, name)

    def const(name: str, values: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    inits = [weight("wq", WIDTH, WIDTH), weight("wk", WIDTH, WIDTH), weight("wo", WIDTH, WIDTH),
             weight("table", 16, WIDTH), const("zero", [0]), const("one", [1]),
             const("minus1", [-1]), const("cap", [clamp or 0]),
             numpy_helper.from_array(np.float32(1.0).reshape(()), "maskf_one"),
             numpy_helper.from_array(np.float32(1e4).reshape(()), "neg")]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Concat", ["past", "k"], ["present"], axis=1),
        helper.make_node("Transpose", ["present"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["maskf_one", "maskf"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "present"], ["ctx"]),
        # Reshape(ctx, [batch, -1]) with batch read from the cache's shape
        helper.make_node("Shape", ["present"], ["pshape"]),
        helper.make_node("Gather", ["pshape", "zero"], ["batch"], axis=0),
        helper.make_node("Concat", ["batch", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["ctx", "target"], ["flat"]),
        helper.make_node("MatMul", ["flat", "wo"], ["h"]),
        helper.make_node("Tanh", ["h"], ["y0"]),
    ]
    if clamp is None:
        nodes.append(helper.make_node("Identity", ["y0"], ["y"]))
    else:  # y = y0 + sum(table[:min(past, clamp)])
        nodes += [
            helper.make_node("Shape", ["past"], ["cshape"]),
            helper.make_node("Gather", ["cshape", "one"], ["plen"], axis=0),
            helper.make_node("Min", ["plen", "cap"], ["rows"]),
            helper.make_node("Slice", ["table", "zero", "rows", "zero"], ["part"]),
            helper.make_node("ReduceSum", ["part", "zero"], ["rsum"], keepdims=1),
            helper.make_node("Add", ["y0", "rsum"], ["y"]),
        ]
    graph = helper.make_graph(
        nodes, "attention_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, WIDTH]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past", WIDTH]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [1, "total"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH]),
         helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, "total", WIDTH])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _feeds(past: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + past)
    mask = np.ones((1, past + 1), np.int64)
    if past > 2:
        mask[0, 1] = 0  # one masked position
    return {"x": rng.standard_normal((1, 1, WIDTH)).astype(np.float32),
            "past": rng.standard_normal((1, past, WIDTH)).astype(np.float32),
            "mask": mask}


def _check(mod: object, model: onnx.ModelProto, past: int) -> None:
    feeds = _feeds(past)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = mod.run(feeds)  # type: ignore[attr-defined]
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["present"], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_one_plan_runs_every_cache_length(target: str) -> None:
    model = _attention_step()
    mod = tessera.compile(model, target, symbolic_dims=["past", "total"])
    for past in (5, 6, 0, 1, 2, 31, 6):
        _check(mod, model, past)
    info = mod.cache_info()
    assert info.compiles == 1 and info.split == 1 and info.split_fallbacks == 0
    ((sizes, plan),) = mod.split_plans()
    assert sizes == {} and isinstance(plan, SplitModule)
    kinds = [s.static for s in plan.segments()]
    assert True in kinds and False in kinds
    assert mod.specializations() == []  # no per-size module was compiled
    assert "split plan" in str(info)


def test_the_parts_are_where_the_shapes_say() -> None:
    mod = tessera.compile(_attention_step(), "ref", symbolic_dims=["past", "total"])
    mod.run(_feeds(4))
    ((_, plan),) = mod.split_plans()
    static = set().union(*(s.op_types for s in plan.segments() if s.static))
    dynamic = set().union(*(s.op_types for s in plan.segments() if not s.static))
    assert {"Softmax", "Concat", "Transpose"} <= dynamic
    assert "Tanh" in static and "Softmax" not in static
    # the Reshape's target (from the cache's batch dimension) is a checked constant of its
    # static segment, so the Reshape compiled once
    assert "Reshape" in static


def test_a_call_that_breaks_the_plan_runs_specialised() -> None:
    model = _attention_step(clamp=3)
    mod = tessera.compile(model, "ref", symbolic_dims=["past", "total"])
    _check(mod, model, 6)      # plan made at 6: min(past, 3) is 3 at every probe
    _check(mod, model, 9)      # still 3: the plan runs
    assert mod.cache_info().split_fallbacks == 0
    _check(mod, model, 1)      # min(1, 3) = 1: the plan's constant breaks -> specialised
    _check(mod, model, 2)
    info = mod.cache_info()
    assert info.split_fallbacks == 2 and info.split == 1
    assert sorted(s["past"] for s, _ in mod.specializations()) == [1, 2]


def test_threads_at_different_lengths() -> None:
    model = _attention_step()
    mod = tessera.compile(model, TARGETS[-1], symbolic_dims=["past", "total"])
    evaluator = ReferenceEvaluator(model)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(12):
                past = (seed * 7 + i * 3) % 20
                feeds = _feeds(past, seed)
                want = evaluator.run(None, feeds)
                got = mod.run(feeds)
                np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(got["present"], want[1], rtol=1e-5, atol=1e-6)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert mod.cache_info().split == 1


def test_artifact_keeps_symbolic_dims(tmp_path: object) -> None:
    model = _attention_step()
    mod = tessera.compile(model, "ref", symbolic_dims=["past", "total"])
    path = mod.export(tmp_path / "step.tar")  # type: ignore[operator]
    loaded = tessera.load(path)
    assert loaded.symbolic == ("past", "total")  # type: ignore[union-attr]
    for past in (3, 8):
        _check(loaded, model, past)
    assert loaded.cache_info().split == 1  # type: ignore[union-attr]


def test_unknown_variable_and_static_model_are_refused() -> None:
    with pytest.raises(CompileError, match="'length' not among the model's variables"):
        tessera.compile(_attention_step(), "ref", symbolic_dims=["length"])
    with pytest.raises(CompileError, match="symbolic_dims"):
        tessera.compile(_attention_step(), "ref", symbolic_dims=["past"],
                        input_shapes={"past": [1, 4, WIDTH], "mask": [1, 5]})


def test_a_model_that_does_not_split_is_compiled_per_size() -> None:
    # every node of this model has the cache's length: nothing to compile once
    graph = helper.make_graph(
        [helper.make_node("Relu", ["past"], ["y"])], "all_dynamic",
        [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "past"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = tessera.compile(model, "ref", symbolic_dims=["past"])
    x = np.random.default_rng(0).standard_normal((1, 5)).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="does not split"):
        np.testing.assert_array_equal(mod.run(past=x)["y"], np.maximum(x, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        np.testing.assert_array_equal(mod.run(past=x[:, :3])["y"], np.maximum(x[:, :3], 0))
    info = mod.cache_info()
    assert info.split == 0 and info.compiles == 2


def test_auto_opens_a_variable_seen_at_three_sizes(tmp_path: object) -> None:
    model = _attention_step()
    mod = tessera.compile(model, "ref", symbolic_dims="auto")
    assert mod.symbolic == () and mod.auto_symbolic
    _check(mod, model, 5)
    _check(mod, model, 6)
    assert mod.symbolic == () and mod.cache_info().compiles == 2  # specialised so far
    _check(mod, model, 7)  # past and total have been seen at three sizes: open from now on
    assert mod.symbolic == ("past", "total")
    for past in (8, 0, 30):
        _check(mod, model, past)
    info = mod.cache_info()
    assert info.split == 1 and info.compiles == 3  # two specialisations and one plan
    loaded = tessera.load(mod.export(tmp_path / "auto.tar"))  # type: ignore[operator]
    assert loaded.auto_symbolic and loaded.symbolic == ()  # type: ignore[union-attr]


def test_auto_leaves_a_variable_that_does_not_split_quietly() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["past"], ["y"])], "all_dynamic",
        [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "past"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = tessera.compile(model, "ref", symbolic_dims=["auto"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: auto mode just stops trying
        for n in (2, 3, 4, 5, 6):
            x = np.random.default_rng(n).standard_normal((1, n)).astype(np.float32)
            np.testing.assert_array_equal(mod.run(past=x)["y"], np.maximum(x, 0))
    assert mod.symbolic == () and mod.cache_info().compiles == 5
    with pytest.raises(CompileError, match='expected variable names or "auto"'):
        tessera.compile(model, "ref", symbolic_dims="past")


def test_the_evaluator_reads_inputs_an_initializer_defaults() -> None:
    from tessera.runtime.split import model_evaluator

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "defaults",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([1, 2], np.float32), "unused"),
         numpy_helper.from_array(np.array([10, 20], np.float32), "b")])
    evaluate = model_evaluator(helper.make_model(graph,
                                                 opset_imports=[helper.make_opsetid("", 17)]))
    a = np.array([1, 1], np.float32)
    np.testing.assert_array_equal(evaluate({"a": a})["y"], [11, 21])  # b's default
    np.testing.assert_array_equal(evaluate({"a": a, "b": a * 5})["y"], [6, 6])


def test_outputs_are_the_callers_own() -> None:
    # present is the concatenation (its own array); an output that is a reshape of an input
    # or a broadcast view comes back as a writeable copy, as a compiled module's does
    graph = helper.make_graph(
        [helper.make_node("Concat", ["past", "x"], ["present"], axis=1),
         helper.make_node("Identity", ["past"], ["same"]),
         helper.make_node("Expand", ["x", "shape"], ["wide"]),
         helper.make_node("ReduceSum", ["present", "one"], ["s"], keepdims=0),
         helper.make_node("Tanh", ["s"], ["t"])], "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, "past"])],
        [helper.make_tensor_value_info("present", TensorProto.FLOAT, [2, None]),
         helper.make_tensor_value_info("same", TensorProto.FLOAT, [2, None]),
         helper.make_tensor_value_info("wide", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([2, 3], np.int64), "shape"),
         numpy_helper.from_array(np.array([1], np.int64), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = tessera.compile(model, "ref", symbolic_dims=["past"])
    x = np.ones((2, 1), np.float32)
    for n in (3, 4):
        past = np.arange(2 * n, dtype=np.float32).reshape(2, n)
        out = mod.run(x=x, past=past)
        for name, value in out.items():
            assert value.flags.writeable and value.flags.c_contiguous, name
            assert not np.shares_memory(value, past) and not np.shares_memory(value, x), name
        out["same"][...] = -1
        assert past[0, 0] == 0  # the input is untouched
    assert mod.cache_info().split == 1


def test_outputs_never_alias_the_plans_constants() -> None:
    # an output that is (a view of) a constant of the plan comes back as a copy: writing it
    # must not change what later calls compute
    graph = helper.make_graph(
        [helper.make_node("Concat", ["past", "x"], ["present"], axis=1),
         helper.make_node("Reshape", ["table", "flat"], ["view"]),
         helper.make_node("ReduceSum", ["present", "one"], ["s"], keepdims=0),
         helper.make_node("Tanh", ["s"], ["t"])], "constants",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, "past"])],
        [helper.make_tensor_value_info("present", TensorProto.FLOAT, [2, None]),
         helper.make_tensor_value_info("view", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([[1, 2], [3, 4]], np.float32), "table"),
         numpy_helper.from_array(np.array([4], np.int64), "flat"),
         numpy_helper.from_array(np.array([1], np.int64), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = tessera.compile(model, "ref", symbolic_dims=["past"])
    x = np.ones((2, 1), np.float32)
    for n in (2, 3, 4):
        out = mod.run(x=x, past=np.ones((2, n), np.float32))
        np.testing.assert_array_equal(out["view"], [1, 2, 3, 4])
        out["view"][...] = -7
        out["present"][...] = -7


@pytest.mark.parametrize("target", TARGETS)
def test_tied_weights_stay_constants(target: str) -> None:
    # exporters write a tied weight as Identity(weight): its output is a constant of the plan
    # (inside the compiled parts), not a value a compiled part hands on at every call
    model = _attention_step()
    nodes = list(model.graph.node)
    for n in nodes:
        if n.op_type == "MatMul" and n.input[1] == "wo":
            n.input[1] = "wo_tied"
    model.graph.node.insert(0, helper.make_node("Identity", ["wo"], ["wo_tied"]))
    mod = tessera.compile(model, target, symbolic_dims=["past", "total"])
    for past in (3, 4, 9):
        _check(mod, model, past)
    ((_, plan),) = mod.split_plans()
    assert "wo_tied" not in plan.describe()
    assert all("wo_tied" not in s.outputs and "wo_tied" not in s.inputs
               for s in plan._segments)


def test_an_error_in_the_evaluated_part_names_its_ops() -> None:
    model = _attention_step()
    mod = tessera.compile(model, "ref", symbolic_dims=["past", "total"])
    _check(mod, model, 3)
    feeds = _feeds(3)
    feeds["mask"] = np.ones((1, 2), np.int64)  # total must be past + 1: the relation check
    with pytest.raises(RunError, match="total"):
        mod.run(feeds)
    ((_, plan),) = mod.split_plans()
    arrays = dict(_feeds(3))
    arrays["past"] = arrays["past"][:, :, :4]  # a width the evaluated MatMul cannot take
    with pytest.raises(RunError, match="size-dependent part"):
        plan.run(arrays)


def test_a_runner_without_caller_is_called_through_run() -> None:
    from tessera.runtime.split_program import _positional

    class OnlyRun:  # a compiled part that is not a Module (a staged module, say)
        def run(self, feeds: dict[str, np.ndarray],
                output_names: list[str]) -> dict[str, np.ndarray]:
            out = {"sum": feeds["a"] + feeds["b"], "diff": feeds["a"] - feeds["b"]}
            return {n: out[n] for n in output_names}

    call = _positional(OnlyRun(), ["a", "b"], ["diff", "sum"])
    diff, total = call(np.array([5.0]), np.array([2.0]))
    assert diff.tolist() == [3.0] and total.tolist() == [7.0]
    mod = tessera.compile(_attention_step(), "ref", input_shapes={"past": [1, 2, WIDTH],
                                                                  "mask": [1, 3]})
    assert _positional(mod, ["x", "past", "mask"], ["y"]).__name__ == "call"  # Module.caller


def _shape_value_step() -> onnx.ModelProto:
    """A cache step whose size-dependent part reads shape values computed from the cache's
    length both as shape operands (Reshape, Expand, Range's limit: Python lists and ints in
    the plan's code) and as data (a Cast and a Div of the length: arrays)."""
    def ints(name: str, values: list[int], shape: tuple[int, ...] | None = None
             ) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64).reshape(
            -1 if shape is None else shape), name)

    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32),
                                     "wk"),
             ints("one", [1]), ints("width", [WIDTH]), ints("axis0", [0]),
             ints("zero_s", [0], ()), ints("one_s", [1], ()), ints("idx1", [1], ())]
    nodes = [
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Concat", ["past", "k"], ["present"], axis=1),
        helper.make_node("Shape", ["present"], ["pshape"]),
        helper.make_node("Gather", ["pshape", "idx1"], ["tlen"], axis=0),       # 0-d
        helper.make_node("Unsqueeze", ["tlen", "axis0"], ["tlen1"]),
        helper.make_node("Concat", ["one", "tlen1", "one"], ["col"], axis=0),   # [1, total, 1]
        helper.make_node("Concat", ["one", "tlen1", "width"], ["full"], axis=0),
        helper.make_node("Range", ["zero_s", "tlen", "one_s"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["posf", "col"], ["poscol"]),
        helper.make_node("Cast", ["tlen"], ["tlenf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["poscol", "tlenf"], ["w"]),
        helper.make_node("Expand", ["w", "full"], ["wide"]),
        helper.make_node("Mul", ["present", "wide"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "shape_values",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, WIDTH]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "total", WIDTH]),
         helper.make_tensor_value_info("col", TensorProto.INT64, [3])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("target", TARGETS)
def test_shape_values_as_operands_and_as_data(target: str) -> None:
    model = _shape_value_step()
    mod = tessera.compile(model, target, symbolic_dims=["past"])
    evaluator = ReferenceEvaluator(model)
    rng = np.random.default_rng(5)
    for past in (3, 4, 9, 1):
        feeds = {"x": rng.standard_normal((1, 1, WIDTH)).astype(np.float32),
                 "past": rng.standard_normal((1, past, WIDTH)).astype(np.float32)}
        want = evaluator.run(None, feeds)
        got = mod.run(feeds)
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-6, atol=1e-6)
        # a shape value that is a graph output comes back as an array of its dtype
        assert got["col"].dtype == np.int64 and got["col"].tolist() == [1, past + 1, 1]
    info = mod.cache_info()
    assert info.split == 1 and info.split_fallbacks == 0
