"""Staged execution (tessera.runtime.staged): models that apply NonZero, NonMaxSuppression,
Compress and Unique to run-time values compile, and run at any input values, matching
onnxruntime, with outputs sized at run time."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import require

import tessera
from tessera.errors import RunError, TesseraError
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.module import Module
from tessera.runtime.staged import StagedModule

ort = require("onnxruntime")

TARGETS = ["ref", "llvm"]
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make_model(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(None, feeds)))


def check_against_ort(mod, model, feeds, rtol=1e-5, atol=1e-6):
    got = mod.run(feeds)
    want = ort_run(model, feeds)
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, name
        assert g.dtype == w.dtype, name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)
    return got


# -- NonZero ------------------------------------------------------------------------------------

def nonzero_model():
    """x -> Relu -> NonZero -> Transpose -> GatherND(x) -> ReduceSum, and the count."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("NonZero", ["r"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["vals"]),
        helper.make_node("ReduceSum", ["vals"], ["total"], keepdims=0),
        helper.make_node("Shape", ["vals"], ["count"]),
        helper.make_node("Mul", ["vals", "vals"], ["squares"]),
    ]
    return make_model(nodes, [vi("x", F, [3, 5])],
                      [vi("total", F, []), vi("nz", I64, [2, None]), vi("count", I64, [1]),
                       vi("squares", F, [None])])


@pytest.mark.parametrize("target", TARGETS)
def test_nonzero_on_a_run_time_input(target):
    model = nonzero_model()
    mod = tessera.compile(model, target=target)
    assert isinstance(mod, StagedModule)
    rng = np.random.default_rng(0)
    counts = set()
    for _ in range(5):
        x = rng.standard_normal((3, 5)).astype(np.float32)
        got = check_against_ort(mod, model, {"x": x})
        counts.add(int(got["count"][0]))
    assert len(counts) > 1  # the outputs were sized by each call's values
    x = -np.abs(rng.standard_normal((3, 5))).astype(np.float32) - 0.1  # nothing selected
    got = check_against_ort(mod, model, {"x": x})
    assert got["nz"].shape == (2, 0)
    info = mod.cache_info()
    assert info.calls == 6 and info.host_nodes == 1
    assert "'nz' (NonZero)" in mod.describe()


def test_nonzero_reading_the_input_directly_and_the_step_form():
    """No stage 1 (NonZero reads the graph input), no rest (its output is the model's)."""
    model = make_model([helper.make_node("NonZero", ["x"], ["nz"])], [vi("x", I64, [4, 3])],
                       [vi("nz", I64, [2, None])])
    mod = tessera.compile(model, target="ref")
    assert mod.stage1 is None and mod.rest is None
    rng = np.random.default_rng(1)
    x = rng.integers(-1, 2, (4, 3)).astype(np.int64)
    check_against_ort(mod, model, {"x": x})
    mod.set_input("x", x)
    assert mod.run() is None
    np.testing.assert_array_equal(mod.get_output(0), np.array(np.nonzero(x)))
    np.testing.assert_array_equal(mod.get_output("nz"), np.array(np.nonzero(x)))


# -- detection head -----------------------------------------------------------------------------

def detection_head(rng, classes=2):
    """image [1, 4, 6, 6] -> Conv -> Sigmoid -> Reshape into boxes [1, 36, 4] and scores
    [1, classes, 36] -> NonMaxSuppression -> the selected boxes Gathered, and their scores."""
    cells = 36
    inits = [
        numpy_helper.from_array((rng.standard_normal((4 + classes, 4, 3, 3)) * 0.5
                                 ).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4 + classes).astype(np.float32) * 0.1,
                                "b"),
        numpy_helper.from_array(np.array([0, 4], np.int64), "box_lo_hi"),
        numpy_helper.from_array(np.array([1, 4, cells], np.int64), "box_shape"),
        numpy_helper.from_array(np.array([1, classes, cells], np.int64), "cls_shape"),
        numpy_helper.from_array(np.array([4], np.int64), "four"),
        numpy_helper.from_array(np.array([4 + classes], np.int64), "all"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array([6.0], np.float32), "scale"),
        numpy_helper.from_array(np.array(2, np.int64), "col2"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
    ]
    nodes = [
        helper.make_node("Constant", [], ["zero_1"], value=numpy_helper.from_array(
            np.array([0], np.int64))),
        helper.make_node("Constant", [], ["max_out"], value=numpy_helper.from_array(
            np.array([20], np.int64))),
        helper.make_node("Constant", [], ["iou"], value=numpy_helper.from_array(
            np.array([0.3], np.float32))),
        helper.make_node("Constant", [], ["thr"], value=numpy_helper.from_array(
            np.array([0.6], np.float32))),
        helper.make_node("Conv", ["image", "w", "b"], ["maps"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["maps"], ["act"]),
        helper.make_node("Slice", ["act", "zero_1", "four", "axis1"], ["box_map"]),
        helper.make_node("Slice", ["act", "four", "all", "axis1"], ["cls_map"]),
        helper.make_node("Reshape", ["box_map", "box_shape"], ["box_flat"]),
        helper.make_node("Transpose", ["box_flat"], ["box_unit"], perm=[0, 2, 1]),
        helper.make_node("Mul", ["box_unit", "scale"], ["boxes"]),
        helper.make_node("Reshape", ["cls_map", "cls_shape"], ["scores"]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"],
                         ["selected"]),
        helper.make_node("Gather", ["selected", "col2"], ["box_index"], axis=1),
        helper.make_node("Gather", ["boxes", "zero"], ["boxes0"], axis=0),
        helper.make_node("Gather", ["boxes0", "box_index"], ["picked"], axis=0),
        helper.make_node("GatherND", ["scores", "selected"], ["picked_scores"]),
    ]
    del inits[2]  # box_lo_hi: unused
    return make_model(nodes, [vi("image", F, [1, 4, 6, 6])],
                      [vi("selected", I64, [None, 3]), vi("picked", F, [None, 4]),
                       vi("picked_scores", F, [None])], inits)


@pytest.mark.parametrize("target", TARGETS)
def test_detection_head_on_run_time_images(target):
    rng = np.random.default_rng(7)
    model = detection_head(rng)
    mod = tessera.compile(model, target=target)
    assert isinstance(mod, StagedModule)
    assert [n.op_type for n in mod.host_nodes] == ["NonMaxSuppression"]
    assert isinstance(mod.rest, Module) and mod.rest.shape_vars is not None  # one compile
    lengths = set()
    for _ in range(8):
        image = (rng.standard_normal((1, 4, 6, 6)) * 1.5).astype(np.float32)
        got = check_against_ort(mod, model, {"image": image})
        lengths.add(len(got["selected"]))
    assert len(lengths) > 2, lengths  # different numbers of boxes selected
    info = mod.cache_info()
    assert info.specializations == 0  # every number of boxes runs on the one module
    assert "compiled once for every size" in mod.describe()


# -- Compress and Unique ------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_by_a_run_time_condition(target, axis):
    attrs = {} if axis is None else {"axis": axis}
    cond_len = 12 if axis is None else (3 if axis == 0 else 4)
    nodes = [
        helper.make_node("Greater", ["c", "zero"], ["cond"]),
        helper.make_node("Compress", ["x", "cond"], ["y"], **attrs),
        helper.make_node("Exp", ["y"], ["e"]),
    ]
    model = make_model(nodes, [vi("x", F, [3, 4]), vi("c", F, [cond_len])],
                       [vi("e", F, [None] if axis is None else [None, None])],
                       [numpy_helper.from_array(np.array(0.0, np.float32), "zero")], opset=11)
    mod = tessera.compile(model, target=target)
    assert isinstance(mod, StagedModule)
    rng = np.random.default_rng(3)
    for _ in range(4):
        feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32),
                 "c": rng.standard_normal(cond_len).astype(np.float32)}
        check_against_ort(mod, model, feeds)


def test_compress_by_a_constant_condition_compiles_as_before():
    cond = numpy_helper.from_array(np.array([True, False, True]), "cond")
    model = make_model([helper.make_node("Compress", ["x", "cond"], ["y"], axis=0)],
                       [vi("x", F, [3, 4])], [vi("y", F, [2, 4])], [cond], opset=11)
    assert isinstance(tessera.compile(model, target="ref"), Module)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_of_run_time_values(target, sorted_):
    nodes = [
        helper.make_node("Cast", ["x"], ["xi"], to=I64),
        helper.make_node("Unique", ["xi"], ["y", "first", "inverse", "counts"],
                         sorted=sorted_),
        helper.make_node("Mul", ["y", "counts"], ["weighted"]),
        helper.make_node("Gather", ["y", "inverse"], ["back"]),
    ]
    model = make_model(nodes, [vi("x", F, [10])],
                       [vi("weighted", I64, [None]), vi("first", I64, [None]),
                        vi("back", I64, [10])], opset=11)
    mod = tessera.compile(model, target=target)
    assert isinstance(mod, StagedModule)
    rng = np.random.default_rng(4)
    for _ in range(4):
        x = rng.integers(-3, 4, 10).astype(np.float32)
        got = check_against_ort(mod, model, {"x": x})
        np.testing.assert_array_equal(got["back"], x.astype(np.int64))


# -- chained data-dependent nodes ---------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_two_data_dependent_nodes_chained(target):
    """NonZero's selection feeds a Compress whose condition is computed from it: the rest is
    staged again (stage 3)."""
    nodes = [
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Squeeze", ["nz", "axes0"], ["idx"]),
        helper.make_node("Gather", ["x", "idx"], ["picked"], axis=0),
        helper.make_node("Greater", ["picked", "half"], ["big"]),
        helper.make_node("Compress", ["picked", "big"], ["kept"], axis=0),
        helper.make_node("ReduceSum", ["kept"], ["total"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    model = make_model(nodes, [vi("x", F, [16]), vi("m", TensorProto.BOOL, [16])],
                       [vi("kept", F, [None]), vi("total", F, [])], inits)
    mod = tessera.compile(model, target=target)
    assert isinstance(mod, StagedModule) and isinstance(mod.rest, StagedModule)
    assert [n.op_type for n in mod.rest.host_nodes] == ["Compress"]
    rng = np.random.default_rng(5)
    for _ in range(5):
        feeds = {"x": rng.standard_normal(16).astype(np.float32),
                 "m": rng.random(16) < 0.6}
        check_against_ort(mod, model, feeds)
    text = mod.describe()
    assert "'nz' (NonZero)" in text and "(Compress)" in text
    assert mod.cache_info().rest.calls == 5


# -- no behaviour change ------------------------------------------------------------------------

def test_a_model_without_data_dependent_nodes_compiles_as_before():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2, 3])],
                       [vi("y", F, [2, 3])])
    assert type(tessera.compile(model, target="ref")) is Module
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, ["n", 3])],
                       [vi("y", F, ["n", 3])])
    symbolic = tessera.compile(model, target="ref")
    assert type(symbolic) is Module and symbolic.shape_vars is not None
    assert type(tessera.compile(model, target="ref", shape_mode="specialize")) is DynamicModule


def test_nonzero_of_constants_and_of_frozen_inputs_folds_as_before():
    const = numpy_helper.from_array(np.array([[0, 2], [3, 0]], np.int64), "c")
    nodes = [helper.make_node("NonZero", ["c"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["nzf"], to=F),
             helper.make_node("Add", ["x", "nzf"], ["y"])]
    model = make_model(nodes, [vi("x", F, [2, 2])], [vi("y", F, [2, 2])], [const])
    assert type(tessera.compile(model, target="ref")) is Module
    model = nonzero_model()
    x = np.random.default_rng(6).standard_normal((3, 5)).astype(np.float32)
    mod = tessera.compile(model, target="ref", freeze_inputs={"x": x})
    assert type(mod) is Module


# -- threads, the cache bound, errors -----------------------------------------------------------

def test_four_threads_share_one_staged_module():
    rng = np.random.default_rng(8)
    model = detection_head(rng)
    mod = tessera.compile(model, target="llvm")
    images = [[(rng.standard_normal((1, 4, 6, 6)) * 1.5).astype(np.float32) for _ in range(4)]
              for _ in range(4)]
    wanted = [[ort_run(model, {"image": im}) for im in ims] for ims in images]
    failures: list[str] = []
    barrier = threading.Barrier(4)

    def work(k: int) -> None:
        barrier.wait()
        for _ in range(3):
            for im, want in zip(images[k], wanted[k]):
                got = mod.run(image=im)
                for name, w in want.items():
                    if got[name].shape != w.shape or not np.allclose(got[name], w, 1e-5, 1e-6):
                        failures.append(f"thread {k}: {name}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert mod.cache_info().calls == 4 * 3 * 4


def test_the_rest_cache_is_bounded():
    model = nonzero_model()
    mod = tessera.compile(model, target="ref", max_specializations=2)
    rng = np.random.default_rng(9)
    for k in range(1, 6):  # k positive entries: k distinct shapes
        x = -np.ones((3, 5), np.float32)
        x.flat[rng.choice(15, k, replace=False)] = rng.random(k).astype(np.float32) + 0.1
        check_against_ort(mod, model, {"x": x})
    stats = mod.cache_info().rest
    assert stats.compiles == 5 and stats.evictions == 3 and len(stats.cached) == 2


def test_bad_input_shape_names_the_input():
    mod = tessera.compile(nonzero_model(), target="ref")
    with pytest.raises(RunError, match="'x'"):
        mod.run(x=np.ones((3, 4), np.float32))
    with pytest.raises(RunError, match="'x'.*dtype"):
        mod.run(x=np.ones((3, 5), np.int64))
    with pytest.raises(RunError, match="unknown input.*'y'"):
        mod.run(x=np.ones((3, 5), np.float32), y=1)
    with pytest.raises(RunError, match="unknown output"):
        mod.run({"x": np.ones((3, 5), np.float32)}, output_names=["nope"])
    only = tessera.compile(make_model([helper.make_node("NonZero", ["x"], ["nz"])],
                                      [vi("x", I64, [4])], [vi("nz", I64, [1, None])]), "ref")
    with pytest.raises(RunError, match="input 'x'.*rank"):
        only.run(x=np.ones((2, 2), np.int64))


def test_export_is_refused_clearly(tmp_path):
    mod = tessera.compile(nonzero_model(), target="ref")
    with pytest.raises(TesseraError, match="cannot be exported yet"):
        mod.export(tmp_path / "m.tar")


def test_host_node_errors_name_the_node():
    """NMS with a score threshold of the wrong rank: refused at run time, naming the node."""
    nodes = [helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("NonMaxSuppression", ["br", "s", "k", "iou", "thr"], ["sel"],
                              name="nms")]
    model = make_model(nodes, [vi("b", F, [1, 5, 4]), vi("s", F, [1, 1, 5]),
                               vi("k", I64, [1]), vi("iou", F, [1]), vi("thr", F, [2])],
                       [vi("sel", I64, [None, 3])])
    mod = tessera.compile(model, target="ref")
    rng = np.random.default_rng(10)
    feeds = {"b": rng.random((1, 5, 4)).astype(np.float32),
             "s": rng.random((1, 1, 5)).astype(np.float32), "k": np.array([2], np.int64),
             "iou": np.array([0.5], np.float32), "thr": np.array([0.1, 0.2], np.float32)}
    with pytest.raises(RunError, match="'nms' \\(NonMaxSuppression\\).*score_threshold"):
        mod.run(feeds)
