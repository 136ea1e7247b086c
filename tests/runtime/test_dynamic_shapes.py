"""Models with symbolic input dimensions: compiled without input_shapes, run at any size.

Checked against onnxruntime on random data at several sizes; the run-time relation checks
(wrong sizes get a clear RunError naming the input and the relation, and the module keeps
working), the specialisation cache (hits, compiles, evictions, one compile when threads meet
the same new size), the step-by-step form, artifacts (stored specialisations load without
compiling, new sizes compile) and the symbolic input specs the importer reads.
"""

from __future__ import annotations

import io
import tarfile
import threading
import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.autotune.tasks import extract_tasks
from tessera.errors import ArtifactError, CompileError, ModelImportError, RunError
from tessera.frontend.onnx.input_specs import model_input_specs
from tessera.plugin.manager import get_backends
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.module import Module

D = 16  # the model's fixed feature width
SIZES = [(1, 7), (3, 64), (8, 128)]


def _targets() -> list[Any]:
    return [t if t in get_backends() else
            pytest.param(t, marks=pytest.mark.skip(reason=f"backend {t} not installed"))
            for t in ("ref", "llvm")]


def _encoder(anonymous_batch: bool = False) -> onnx.ModelProto:
    """x: [batch, seq, 16] and mask: [batch, seq] -> softmax((x @ W + b) * mask) @ V, with a
    Shape -> Gather -> Concat -> Reshape sub-graph that exporters write for the batch."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((D, D)).astype(np.float32)
    b = rng.standard_normal(D).astype(np.float32)
    v = rng.standard_normal((D, 8)).astype(np.float32)
    batch = "" if anonymous_batch else "batch"
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "B"], ["hb"]),
        helper.make_node("Unsqueeze", ["mask", "axes"], ["m"]),
        helper.make_node("Mul", ["hb", "m"], ["hm"]),
        helper.make_node("Softmax", ["hm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "V"], ["o"]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["o", "target"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"),
             numpy_helper.from_array(v, "V"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, "seq", D])
    if anonymous_batch:
        x.type.tensor_type.shape.dim[0].Clear()
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [batch, "seq"])
    if anonymous_batch:
        mask.type.tensor_type.shape.dim[0].Clear()
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, None])
    graph = helper.make_graph(nodes, "encoder", [x, mask], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq, D)).astype(np.float32),
            "mask": rng.uniform(0.2, 1.5, (batch, seq)).astype(np.float32)}


def _want(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


#: The two ways a model with symbolic inputs compiles (``shape_mode``).
MODES = ("symbolic", "specialize")


@pytest.fixture(scope="module", params=[(t, m) for t in _targets() for m in MODES],
                ids=lambda p: f"{p[0]}-{p[1]}")
def compiled(request: pytest.FixtureRequest) -> Module | DynamicModule:
    target, mode = request.param
    mod = tessera.compile(_encoder(), target, shape_mode=mode)
    assert isinstance(mod, Module if mode == "symbolic" else DynamicModule)
    return mod


def test_compiles_without_input_shapes_and_matches_onnxruntime(
        compiled: Module | DynamicModule) -> None:
    assert [str(s) for s in compiled.input_specs.values()] == \
        ["x: float32[batch, seq, 16]", "mask: float32[batch, seq]"]
    for batch, seq in SIZES:
        feeds = _feeds(batch, seq)
        got = compiled.run(feeds)["y"]
        assert got.shape == (batch, seq * 8)
        np.testing.assert_allclose(got, _want(_encoder(), feeds), rtol=1e-5, atol=1e-5)
    if isinstance(compiled, DynamicModule):
        info = compiled.cache_info()
        assert info.compiles >= len(SIZES)
        assert {(s["batch"], s["seq"]) for s in info.cached} >= set(SIZES)


def test_wrong_sizes_are_clear_errors_and_the_module_keeps_working(
        compiled: Module | DynamicModule) -> None:
    good = _feeds(2, 5)
    with pytest.raises(RunError, match=r"input 'mask': dimension 1 is 6, but 'seq' is 5 "
                                       r"\(input 'x' dimension 1\)"):
        compiled.run(x=good["x"], mask=np.ones((2, 6), np.float32))
    with pytest.raises(RunError, match=r"input 'x': dimension 2 must be 16"):
        compiled.run(x=np.ones((2, 5, 15), np.float32), mask=good["mask"])
    with pytest.raises(RunError, match=r"input 'x': expected rank 3 \(\[batch, seq, 16\]\)"):
        compiled.run(x=np.ones((2, 5), np.float32), mask=good["mask"])
    with pytest.raises(RunError, match="input 'x': expected dtype float32, got float64"):
        compiled.run(x=good["x"].astype(np.float64), mask=good["mask"])
    with pytest.raises(RunError, match="missing input"):
        compiled.run(x=good["x"])
    with pytest.raises(RunError, match="unknown input"):
        compiled.run(x=good["x"], mask=good["mask"], extra=good["mask"])
    np.testing.assert_allclose(compiled.run(good)["y"], _want(_encoder(), good), rtol=1e-5,
                               atol=1e-5)


def test_cache_counts_hits_and_evicts_the_least_recently_used() -> None:
    mod = tessera.compile(_encoder(), "ref", max_specializations=2)
    for batch, seq in [(1, 3), (2, 3), (1, 3), (3, 3), (2, 3)]:
        mod.run(_feeds(batch, seq))
    info = mod.cache_info()
    # (1,3) compiled, (2,3) compiled, (1,3) hit, (3,3) compiled evicting (2,3), (2,3) again
    assert (info.compiles, info.hits, info.evictions) == (4, 1, 2)
    assert [(s["batch"], s["seq"]) for s in info.cached] == [(3, 3), (2, 3)]
    assert "4 compiled" in str(info) and "batch=2, seq=3" in str(info)
    assert mod.specialize(batch=2, seq=3) is mod.specialize({"x": [2, 3, D], "mask": [2, 3]})
    assert isinstance(mod.specialize(batch=2, seq=3), Module)
    with pytest.raises(tessera.errors.TesseraError, match="missing seq"):
        mod.specialize(batch=2)
    # a hit on the most recent size keeps the order; a hit on an older one moves it last
    mod = tessera.compile(_encoder(), "ref", max_specializations=2)
    for batch, seq in [(1, 3), (2, 3), (2, 3), (1, 3), (3, 3)]:
        feeds = _feeds(batch, seq)
        reordered = {"mask": feeds["mask"], "x": feeds["x"]}  # any order of the feeds
        np.testing.assert_allclose(mod.run(reordered, output_names=["y"])["y"],
                                   _want(_encoder(), feeds), rtol=1e-5, atol=1e-5)
    info = mod.cache_info()
    assert (info.compiles, info.hits, info.evictions) == (3, 2, 1)
    assert [(s["batch"], s["seq"]) for s in info.cached] == [(1, 3), (3, 3)]


def test_threads_meeting_a_new_size_compile_it_once() -> None:
    mod = tessera.compile(_encoder(), "ref", shape_mode="specialize")
    sizes = [(2, 4), (3, 9)] * 4
    feeds = [_feeds(b, s, seed=i) for i, (b, s) in enumerate(sizes)]
    results: list[np.ndarray | None] = [None] * len(sizes)
    start = threading.Barrier(len(sizes))

    def call(i: int) -> None:
        start.wait()
        results[i] = mod.run(feeds[i])["y"]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(sizes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f, got in zip(feeds, results):
        np.testing.assert_allclose(got, _want(_encoder(), f), rtol=1e-5, atol=1e-5)
    info = mod.cache_info()
    assert info.compiles == 2 and info.hits == len(sizes) - 2


@pytest.mark.parametrize("mode", MODES)
def test_step_by_step_form_is_per_thread(mode: str) -> None:
    mod = tessera.compile(_encoder(), "ref", shape_mode=mode)
    feeds = _feeds(2, 3)
    for name, value in feeds.items():
        mod.set_input(name, value)
    assert mod.run() is None
    out = np.empty((2, 24), np.float32)
    mod.get_output(0, out)
    np.testing.assert_allclose(out, _want(_encoder(), feeds), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mod.get_output("y"), out)
    seen: list[Exception] = []

    def other() -> None:
        try:
            mod.run()
        except RunError as e:
            seen.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen and "not set in this thread" in str(seen[0])


@pytest.mark.parametrize("mode", MODES)
def test_bounds_are_checked_at_compile_and_at_run(mode: str) -> None:
    mod = tessera.compile(_encoder(), "ref", dim_bounds={"batch": (1, 4), "seq": (1, 32)},
                          shape_mode=mode)
    mod.run(_feeds(4, 32))
    with pytest.raises(RunError, match=r"input 'x': dimension 1 \('seq'\) is 33, outside its "
                                       r"bounds 1 <= seq <= 32"):
        mod.run(_feeds(1, 33))
    with pytest.raises(CompileError, match="dim_bounds names 'length'"):
        tessera.compile(_encoder(), "ref", dim_bounds={"length": (1, 4)})
    with pytest.raises(CompileError, match="0 <= low <= high"):
        tessera.compile(_encoder(), "ref", dim_bounds={"seq": (8, 4)})


def test_input_shapes_fix_some_dimensions_and_leave_others() -> None:
    mod = tessera.compile(_encoder(), "ref", input_shapes={"x": [2, None, D], "mask": [2, "?"]})
    assert mod.variables == ["seq"]
    np.testing.assert_allclose(mod.run(_feeds(2, 5))["y"], _want(_encoder(), _feeds(2, 5)),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(RunError, match="dimension 0 must be 2"):
        mod.run(_feeds(3, 5))
    static = tessera.compile(_encoder(), "ref", input_shapes={"x": [2, 5, D], "mask": [2, 5]})
    assert isinstance(static, Module)
    renamed = tessera.compile(_encoder(), "ref", input_shapes={"x": ["n", "t", D],
                                                                  "mask": ["n", "t"]})
    assert renamed.variables == ["n", "t"]


def test_input_specs_name_anonymous_dimensions_and_check_input_shapes() -> None:
    specs = model_input_specs(_encoder(anonymous_batch=True))
    assert [s.dims for s in specs] == [("x[0]", "seq", D), ("mask[0]", "seq")]
    with pytest.raises(ModelImportError, match="rank 2"):
        model_input_specs(_encoder(), {"x": [1, 2]})
    with pytest.raises(ModelImportError, match="expected a size or a variable name"):
        model_input_specs(_encoder(), {"x": [1, "a b", D]})
    with pytest.raises(ModelImportError, match="'z' is not an input"):
        model_input_specs(_encoder(), {"z": [1]})
    # unrelated anonymous batches: each input's own variable
    mod = tessera.compile(_encoder(anonymous_batch=True), "ref")
    assert mod.variables == ["x[0]", "seq", "mask[0]"]


@pytest.mark.parametrize("mode", MODES)
def test_a_size_the_model_cannot_take_is_a_run_error_naming_it(mode: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
    shape = numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")
    model = helper.make_model(
        helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g", [x], [y],
                          [shape]), opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    mod = tessera.compile(model, "llvm" if "llvm" in _targets() else "ref", shape_mode=mode)
    assert mod.run(x=np.arange(8, dtype=np.float32))["y"].shape == (2, 4)
    with pytest.raises(RunError, match=r"n=6.*node 'y' \(Reshape\): the data's n elements "
                                       r"must fill the new shape \[\(n // 4\), 4\]; here n = 6"):
        mod.run(x=np.arange(6, dtype=np.float32))
    assert mod.run(x=np.arange(12, dtype=np.float32))["y"].shape == (3, 4)


@pytest.mark.parametrize("target", _targets())
def test_artifact_keeps_specializations_and_compiles_new_sizes(tmp_path, target: str) -> None:
    mod = tessera.compile(_encoder(), target, specialize=[{"x": [2, 5, D], "mask": [2, 5]}])
    assert mod.cache_info().compiles == 1
    path = mod.export(tmp_path / "dynamic.tar")
    loaded = tessera.load(path)
    assert isinstance(loaded, DynamicModule)
    assert [str(s) for s in loaded.input_specs.values()] == \
        [str(s) for s in mod.input_specs.values()]
    np.testing.assert_allclose(loaded.run(_feeds(2, 5))["y"], _want(_encoder(), _feeds(2, 5)),
                               rtol=1e-5, atol=1e-5)
    assert loaded.cache_info().compiles == 0  # loaded, not compiled
    np.testing.assert_allclose(loaded.run(_feeds(1, 9))["y"], _want(_encoder(), _feeds(1, 9)),
                               rtol=1e-5, atol=1e-5)
    assert loaded.cache_info().compiles == 1
    assert loaded.partition_report().regions


def test_tampered_dynamic_artifact_is_refused(tmp_path) -> None:
    path = tessera.compile(_encoder(), "ref", shape_mode="specialize").export(
        tmp_path / "dynamic.tar")
    with tarfile.open(path) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore
    members["model.onnx"] = members["model.onnx"][:-1] + b"\x00"
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ArtifactError, match="model.onnx.*SHA-256"):
        tessera.load(bad)


def test_tuning_a_symbolic_model_asks_for_its_sizes() -> None:
    with pytest.raises(tessera.errors.TesseraError, match="tune it at a size it runs at"):
        extract_tasks(_encoder(), "ref")
    assert extract_tasks(_encoder(), "ref", input_shapes={"x": [1, 4, D], "mask": [1, 4]}) \
        == []  # ref has no tunable kernels; the sizes given, the model compiles


def test_relations_the_nodes_need_are_checked_before_compiling() -> None:
    # x: [batch, n] + y: [batch, m] needs n == m or one of them 1, and concatenating x and
    # z: [rows, 2] along axis 1 needs batch == rows
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["s"]),
         helper.make_node("Concat", ["x", "z"], ["c"], axis=1)],
        "relations",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "m"]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["rows", 2])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", None]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, ["batch", None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = tessera.compile(model, "ref", shape_mode="specialize")
    rng = np.random.default_rng(0)

    def run(b: int, n: int, m: int, rows: int) -> dict[str, np.ndarray]:
        return mod.run(x=rng.standard_normal((b, n)).astype(np.float32),
                       y=rng.standard_normal((b, m)).astype(np.float32),
                       z=rng.standard_normal((rows, 2)).astype(np.float32))

    assert run(2, 3, 3, 2)["s"].shape == (2, 3)
    assert run(2, 3, 1, 2)["s"].shape == (2, 3)  # broadcasting
    with pytest.raises(RunError, match=r"node 's' \(Add\): n and m must be equal or one of "
                                       r"them 1 \(broadcasting\); here n = 3, m = 4"):
        run(2, 3, 4, 2)
    with pytest.raises(RunError, match=r"\(Concat\): batch and rows must be equal .*"
                                       r"here batch = 2, rows = 5"):
        run(2, 3, 3, 5)
    assert mod.cache_info().compiles == 2  # the broken sizes compiled nothing
    assert run(1, 2, 2, 1)["c"].shape == (1, 4)  # and the module keeps working


def test_bounds_the_model_cannot_take_are_said_at_compile() -> None:
    # x: [seq] + table[:seq]: the table has 4 rows, so seq <= 4 (position embeddings do this)
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["n"]),
         helper.make_node("Slice", ["table", "zero", "n"], ["rows"]),
         helper.make_node("Add", ["x", "rows"], ["y"])],
        "positions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq"])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "table"),
         numpy_helper.from_array(np.array([0], np.int64), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.warns(RuntimeWarning, match=r"dim_bounds admit sizes the model cannot take: "
                                            r"node .*\(Add\).*here seq = 9"):
        mod = tessera.compile(model, "ref", dim_bounds={"seq": (1, 9)})
    with pytest.raises(RunError, match="seq = 5"):
        mod.run(x=np.ones(5, np.float32))
    np.testing.assert_array_equal(mod.run(x=np.ones(3, np.float32))["y"], [1, 2, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # within: nothing to say
        tessera.compile(model, "ref", dim_bounds={"seq": (1, 4)}, shape_mode="specialize")


def test_bind_fast_path_agrees_with_the_checks() -> None:
    """``ShapeVars.bind`` runs generated code for calls that break nothing; every call it
    refuses goes through the general checks, whose errors name the input."""
    import pickle

    from tessera.ir.symbolic import InputSpec, ShapeVars
    from tessera.ir.types import DType

    sv = ShapeVars((InputSpec("ids", ("batch", "seq"), DType("int64")),
                    InputSpec("past", ("batch", 2, "past", 4), DType("float32"))),
                   {"batch": (1, 8)})
    ok = {"ids": np.zeros((3, 5), np.int64), "past": np.zeros((3, 2, 7, 4), np.float32)}
    assert sv.bind(ok) == {"batch": 3, "seq": 5, "past": 7}
    assert sv._bind_fast is not None and sv._bind_fast(ok) == sv.bind(ok)
    bad = [({"past": np.zeros((4, 2, 7, 4), np.float32)}, "'batch' is 3"),
           ({"past": np.zeros((3, 3, 7, 4), np.float32)}, "dimension 1 must be 2"),
           ({"past": np.zeros((3, 2, 7), np.float32)}, "expected rank 4"),
           ({"ids": np.zeros((3, 5), np.int32)}, "expected dtype int64"),
           ({"ids": np.zeros((9, 5), np.int64), "past": np.zeros((9, 2, 7, 4), np.float32)},
            "outside its bounds")]
    for change, message in bad:
        arrays = {**ok, **change}
        assert sv._bind_fast(arrays) is None
        with pytest.raises(RunError, match=message):
            sv.bind(arrays)
    again = pickle.loads(pickle.dumps(sv))  # the generated code is made again, not pickled
    assert again == sv and again.bind(ok) == sv.bind(ok)


def test_a_table_sliced_by_the_length_bounds_it_and_compiles_once() -> None:
    """``positions[:, :seq]`` of a constant table of 16 (CLIP's text tower) added to a
    ``[batch, seq, 4]`` input: the model implies ``seq <= 16``, the Slice's rule simplifies
    ``min(seq, 16)`` to ``seq`` with that bound, and is checked within it (not at a probe
    size past it): one symbolic module, right at every length up to 16."""
    rng = np.random.default_rng(3)
    table = rng.standard_normal((1, 16, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
        helper.make_node("Unsqueeze", ["seq", "axes0"], ["end"]),
        helper.make_node("Slice", ["table", "zero1", "end", "one1"], ["pos"]),
        helper.make_node("Add", ["x", "pos"], ["y"]),
    ]
    inits = [numpy_helper.from_array(table, "table"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             numpy_helper.from_array(np.array([1], np.int64), "one1")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])
    model = helper.make_model(helper.make_graph(nodes, "table", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to per-size compiles
        mod = tessera.compile(model, "ref")
    assert isinstance(mod, Module)
    assert "16" in mod.dim_bound_notes["seq"]
    for batch, seq in [(1, 1), (2, 9), (3, 16)]:
        xs = rng.standard_normal((batch, seq, 4)).astype(np.float32)
        np.testing.assert_allclose(mod.run(x=xs)["y"], xs + table[:, :seq], rtol=1e-6)
    with pytest.raises(RunError, match="seq"):
        mod.run(x=np.zeros((1, 17, 4), np.float32))


@pytest.mark.parametrize("target", _targets())
def test_a_static_window_pool_in_ceil_mode_over_a_run_time_batch(target: str) -> None:
    """EfficientNet's exported pooler: AveragePool with ``ceil_mode`` and a kernel wider than
    its 2 x 2 input (one window) over a symbolic batch: the spatial sizes are static, so the
    op's own (ceil-mode) rule gives them; one module, as onnxruntime at several batches."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[5, 5], strides=[5, 5],
                            ceil_mode=1, count_include_pad=1, pads=[0, 0, 0, 0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 1, 1])
    model = helper.make_model(helper.make_graph([node], "pool", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = tessera.compile(model, target)
    assert isinstance(mod, Module)
    rng = np.random.default_rng(8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 2, 5):
        xs = rng.standard_normal((batch, 3, 2, 2)).astype(np.float32)
        np.testing.assert_allclose(mod.run(x=xs)["y"], sess.run(None, {"x": xs})[0],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", _targets())
def test_a_resize_whose_sizes_keep_the_run_time_batch(target: str) -> None:
    """SegFormer's decoder: ``Resize`` to ``concat(shape(x)[:2], [8, 8])`` over a symbolic
    batch: the sizes hold ``batch`` (the input's own) and constants, so it imports and compiles
    once; sizes that change a run-time size stay a compile-time error (then per size)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Slice", ["shape", "zero1", "two1"], ["lead"]),
             helper.make_node("Concat", ["lead", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             numpy_helper.from_array(np.array([2], np.int64), "two1"),
             numpy_helper.from_array(np.array([8, 8], np.int64), "hw")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 8, 8])
    model = helper.make_model(helper.make_graph(nodes, "resize", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = tessera.compile(model, target)
    assert isinstance(mod, Module)
    rng = np.random.default_rng(4)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        xs = rng.standard_normal((batch, 3, 4, 5)).astype(np.float32)
        np.testing.assert_allclose(mod.run(x=xs)["y"], sess.run(None, {"x": xs})[0],
                                   rtol=1e-5, atol=1e-5)
    # sizes of a run-time spatial size: the batch doubled on axis 0 is not the input's own
    doubled = onnx.ModelProto()
    doubled.CopyFrom(model)
    doubled.graph.node.insert(2, helper.make_node("Mul", ["lead", "two_one"], ["lead2"]))
    doubled.graph.node[3].input[0] = "lead2"
    doubled.graph.initializer.append(numpy_helper.from_array(np.array([2, 1], np.int64),
                                                             "two_one"))
    doubled.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "b2"
    with pytest.raises((CompileError, ModelImportError), match="sizes depends on the sizes"):
        tessera.compile(doubled, target, shape_mode="symbolic")


def test_default_bounds_hold_a_batch_small_while_the_lengths_grow() -> None:
    """No bounds given or implied: a ``[batch, seq]`` model whose activations are ``batch *
    seq * 16384`` floats (1 GiB at 16384 positions) gets ``batch <= 8`` and the rest to
    ``seq`` (1024), not 64 each; a variable that is not only a first dimension grows with
    the others."""
    from tessera.frontend.onnx.dim_bounds import BATCH_DEFAULT, model_dim_bounds

    wide = numpy_helper.from_array(np.ones((1, 1, 16384), np.float32), "wide")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16384])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Mul", ["x", "wide"], ["y"])], "wide", [x], [y],
                          [wide]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    specs = model_input_specs(model, None, None)
    bounds, notes, _ = model_dim_bounds(model, specs)
    assert bounds == {"batch": (0, BATCH_DEFAULT), "seq": (0, 1024)}
    assert "a batch" in notes["batch"] and "a batch" not in notes["seq"]
    # the same sizes on both axes of a square input: no batch-like variable, one shared size
    sq = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "n", 1])
    sy = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "n", 16384])
    square = helper.make_model(
        helper.make_graph([helper.make_node("Mul", ["x", "wide"], ["y"])], "sq", [sq], [sy],
                          [wide]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    bounds, _, _ = model_dim_bounds(square, model_input_specs(square, None, None))
    assert bounds == {"n": (0, 64)}
