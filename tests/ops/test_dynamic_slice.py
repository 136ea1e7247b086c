"""Slice with run-time starts but a static length (``x[i:i+k]``) as ``DynamicSlice``: compiled
for ref and llvm and compared with onnxruntime on random data and random starts (negative and
out of range: where ONNX's clamping would shorten the slice, Tessera raises RunError), inside
Loop bodies on the iteration counter, and the refusals where the length is not static."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import require

import tessera
from tessera.errors import NeedsConstantError, OpError, RunError
from tessera.frontend.onnx import import_onnx
from tessera.ops.dynamic_slice import dynamic_slice

ort = require("onnxruntime")

OPSET = 17


def _targets() -> list[str]:
    from tessera.plugin.manager import get_registry

    backend = get_registry().backends.get("llvm")
    return ["ref"] + (["llvm"] if backend is not None and backend.available() is None else [])


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           inits: dict[str, np.ndarray], out_dtype: int = TensorProto.FLOAT,
           rank: int = 2) -> onnx.ModelProto:
    out = helper.make_tensor_value_info("y", out_dtype, [f"d{i}" for i in range(rank)])
    graph = helper.make_graph(nodes, "dynamic_slice", inputs, [out],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def start_plus_delta_model(shape: tuple[int, ...], axes: list[int], deltas: list[int],
                           steps: list[int] | None, dtype: int = TensorProto.FLOAT
                           ) -> onnx.ModelProto:
    """``y = Slice(x, s, s + deltas, axes, steps)`` with ``s`` a graph input."""
    inits = {"deltas": np.array(deltas, np.int64), "axes": np.array(axes, np.int64)}
    names = ["x", "s", "e", "axes"]
    if steps is not None:
        inits["steps"] = np.array(steps, np.int64)
        names.append("steps")
    nodes = [helper.make_node("Add", ["s", "deltas"], ["e"]),
             helper.make_node("Slice", names, ["y"], name="the_slice")]
    return _model(nodes, [helper.make_tensor_value_info("x", dtype, list(shape)),
                          helper.make_tensor_value_info("s", TensorProto.INT64, [len(axes)])],
                  inits, dtype, len(shape))


def _check_against_ort(mod: tessera.Module, model: onnx.ModelProto, x: np.ndarray,
                       starts: np.ndarray, static: tuple[int, ...]) -> bool:
    """Compare one run; True where ONNX's result had the static shape (else RunError)."""
    want = _ort(model, {"x": x, "s": starts})
    if want.shape == static:
        got = mod.run(x=x, s=starts)["y"]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        return True
    with pytest.raises(RunError, match=r"the_slice.*start -?\d+.* on axis \d+ of length \d+"):
        mod.run(x=x, s=starts)
    return False


CASES = [  # shape, axes, deltas, steps
    ((7, 5), [0], [1], None),
    ((7, 5), [1], [3], [1]),
    ((6, 5, 4), [0, 2], [2, 3], None),
    ((6, 5, 4), [-1, 0], [2, 4], [1, 2]),      # step 2 over a delta of 4: 2 elements
    ((9, 4), [0], [-3], [-1]),                 # x[i:i-3:-1]
    ((9, 4), [0, 1], [-5, 2], [-2, 1]),        # negative step 2 over 5: 3 elements
    ((4, 6, 3), [1], [5], [3]),                # step 3 over 5: 2 elements
]


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("case", range(len(CASES)))
def test_random_starts_match_onnxruntime(target: str, case: int) -> None:
    shape, axes, deltas, steps = CASES[case]
    rng = np.random.default_rng(case)
    model = start_plus_delta_model(shape, axes, deltas, steps)
    graph = import_onnx(model)
    ops = [n.op for n in graph.nodes]
    assert "DynamicSlice" in ops and "Slice" not in ops
    static = graph.outputs[0].type.shape
    mod = tessera.compile(model, target=target)
    fit = short = 0
    for _ in range(40):
        x = rng.standard_normal(shape).astype(np.float32)
        dims = [shape[a] for a in axes]
        starts = np.array([rng.integers(-d - 3, d + 3) for d in dims], np.int64)
        if _check_against_ort(mod, model, x, starts, static):
            fit += 1
        else:
            short += 1
    assert fit and short  # both the in-range and the clamped starts were exercised


@pytest.mark.parametrize("target", _targets())
def test_int32_data_and_int32_starts_through_cast_and_unsqueeze(target: str) -> None:
    """A scalar int32 start, cast to int64 and unsqueezed; the end built from the cast value."""
    nodes = [helper.make_node("Cast", ["i"], ["i64"], to=TensorProto.INT64),
             helper.make_node("Unsqueeze", ["i64", "zero"], ["s"]),
             helper.make_node("Add", ["i64", "two"], ["e_scalar"]),
             helper.make_node("Reshape", ["e_scalar", "one_shape"], ["e"]),
             helper.make_node("Slice", ["x", "s", "e", "axes"], ["y"], name="the_slice")]
    inits = {"zero": np.array([0], np.int64), "two": np.array(2, np.int64),
             "one_shape": np.array([1], np.int64), "axes": np.array([1], np.int64)}
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.INT32, [3, 8]),
                           helper.make_tensor_value_info("i", TensorProto.INT32, [])],
                   inits, TensorProto.INT32)
    mod = tessera.compile(model, target=target)
    rng = np.random.default_rng(7)
    for i in range(-10, 10):
        x = rng.integers(-1000, 1000, (3, 8)).astype(np.int32)
        feeds = {"x": x, "i": np.array(i, np.int32)}
        want = _ort(model, feeds)
        if want.shape == (3, 2):
            np.testing.assert_array_equal(mod.run(feeds)["y"], want)
        else:
            with pytest.raises(RunError, match="axis 1 of length 8"):
                mod.run(feeds)


@pytest.mark.parametrize("target", _targets())
def test_constant_axis_beside_a_run_time_one(target: str) -> None:
    """starts = Concat([1], s), ends = Concat([INT64_MAX], s + 2): axis 0 is a static slice."""
    nodes = [helper.make_node("Concat", ["c_start", "s"], ["starts"], axis=0),
             helper.make_node("Add", ["s", "two"], ["s2"]),
             helper.make_node("Concat", ["c_end", "s2"], ["ends"], axis=0),
             helper.make_node("Slice", ["x", "starts", "ends"], ["y"], name="the_slice")]
    inits = {"c_start": np.array([1], np.int64),
             "c_end": np.array([np.iinfo(np.int64).max], np.int64),
             "two": np.array([2], np.int64)}
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 6]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [1])], inits)
    mod = tessera.compile(model, target=target)
    rng = np.random.default_rng(8)
    for s in (0, 3, 4, -2, -3, -6, 5, -7):
        x = rng.standard_normal((5, 6)).astype(np.float32)
        _check_against_ort(mod, model, x, np.array([s], np.int64), (4, 2))


def loop_model(rows: int, cols: int, trip: int | None = None) -> onnx.ModelProto:
    """A Loop over ``M`` iterations whose body adds row ``i`` of ``x`` (``x[i:i+1]``) and
    column ``-(i+2)`` (``x[:, -i-2:-i-1]``, a negative start) into accumulators, as exporters
    write ``x[i]`` with the iteration counter. ``M`` is a graph input, or with ``trip`` a
    constant, and then the body also scans out the rows (a scan output needs a static count).
    """
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    scanned = trip is not None
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Unsqueeze", ["i", "axis0"], ["start"]),
         helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Unsqueeze", ["i1", "axis0"], ["end"]),
         helper.make_node("Slice", ["x", "start", "end"], ["row"], name="row_slice"),
         helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         helper.make_node("Neg", ["start"], ["neg"]),
         helper.make_node("Sub", ["neg", "two"], ["cstart"]),
         helper.make_node("Add", ["cstart", "one"], ["cend"]),
         helper.make_node("Slice", ["x", "cstart", "cend", "axis1"], ["col"], name="col_slice"),
         helper.make_node("Add", ["cacc_in", "col"], ["cacc_out"]),
         helper.make_node("Identity", ["row"], ["row_out"])],
        "body",
        [helper.make_tensor_value_info("i", i64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", f, [1, cols]),
         helper.make_tensor_value_info("cacc_in", f, [rows, 1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", f, [1, cols]),
         helper.make_tensor_value_info("cacc_out", f, [rows, 1])]
        + ([helper.make_tensor_value_info("row_out", f, [1, cols])] if scanned else []),
        [numpy_helper.from_array(np.array([0], np.int64), "axis0"),
         numpy_helper.from_array(np.array([1], np.int64), "axis1"),
         numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array([2], np.int64), "two")])
    outputs = [helper.make_tensor_value_info("acc", f, [1, cols]),
               helper.make_tensor_value_info("cacc", f, [rows, 1])]
    if scanned:
        outputs.append(helper.make_tensor_value_info("rows", f, [trip, 1, cols]))
    inputs = [helper.make_tensor_value_info("x", f, [rows, cols]),
              helper.make_tensor_value_info("acc0", f, [1, cols]),
              helper.make_tensor_value_info("cacc0", f, [rows, 1])]
    if not scanned:
        inputs.append(helper.make_tensor_value_info("M", i64, []))
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "acc0", "cacc0"], [o.name for o in outputs],
                          body=body, name="the_loop")],
        "loop_slice", inputs, outputs,
        [numpy_helper.from_array(np.array(trip, np.int64), "M")] if scanned else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def _loop_feeds(rng: np.random.Generator, rows: int, cols: int) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((rows, cols)).astype(np.float32),
            "acc0": rng.standard_normal((1, cols)).astype(np.float32),
            "cacc0": rng.standard_normal((rows, 1)).astype(np.float32)}


def _check_loop(mod: tessera.Module, model: onnx.ModelProto, feeds: dict[str, np.ndarray]
                ) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = mod.run(feeds)
    wanted = session.run(None, feeds)
    assert list(got) == [o.name for o in model.graph.output]
    for (name, g), want in zip(got.items(), wanted):
        assert g.shape == want.shape, name
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("target", _targets())
def test_loop_body_slices_row_i_with_the_iteration_counter(target: str) -> None:
    rows, cols = 6, 7
    model = loop_model(rows, cols)
    mod = tessera.compile(model, target=target)
    rng = np.random.default_rng(9)
    for m in (0, 1, 4, rows):
        _check_loop(mod, model, {**_loop_feeds(rng, rows, cols), "M": np.array(m, np.int64)})
    # one iteration too many: row 6 is past the end, where ONNX returns an empty slice
    feeds = {**_loop_feeds(rng, rows, cols), "M": np.array(rows + 1, np.int64)}
    with pytest.raises(RunError, match=r"row_slice.*start 6 .*axis 0 of length 6"):
        mod.run(feeds)


@pytest.mark.parametrize("target", _targets())
def test_loop_scans_out_the_sliced_rows(target: str) -> None:
    rows, cols = 5, 6  # column -(i+2) needs cols > trip
    model = loop_model(rows, cols, trip=4)
    mod = tessera.compile(model, target=target)
    rng = np.random.default_rng(10)
    for _ in range(3):
        _check_loop(mod, model, _loop_feeds(rng, rows, cols))


def _refused(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray]) -> str:
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 5]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [1])], inits)
    with pytest.raises(NeedsConstantError, match="ends must be .*constant") as e:
        import_onnx(model)
    assert e.value.inputs == ["s"]
    return str(e.value)


def test_lengths_that_are_not_static_keep_needs_constant() -> None:
    one = {"one": np.array([1], np.int64), "two": np.array([2], np.int64)}
    # ends = 2 * s: the length depends on s
    _refused([helper.make_node("Mul", ["s", "two"], ["e"]),
              helper.make_node("Slice", ["x", "s", "e"], ["y"])], one)
    # constant starts, run-time ends
    _refused([helper.make_node("Slice", ["x", "one", "s"], ["y"])], one)
    # ends = s + 9 on an axis of 6: only clamping could give a length, and it varies
    _refused([helper.make_node("Add", ["s", "nine"], ["e"]),
              helper.make_node("Slice", ["x", "s", "e"], ["y"])],
             {"nine": np.array([9], np.int64)})
    # ends = s - 1 with step 1: empty or (wrapping around) not, depending on s
    _refused([helper.make_node("Sub", ["s", "one"], ["e"]),
              helper.make_node("Slice", ["x", "s", "e"], ["y"])], one)
    # ends = 1 - s
    _refused([helper.make_node("Sub", ["one", "s"], ["e"]),
              helper.make_node("Slice", ["x", "s", "e"], ["y"])], one)


def test_run_time_steps_keep_needs_constant() -> None:
    model = _model([helper.make_node("Add", ["s", "one"], ["e"]),
                    helper.make_node("Slice", ["x", "s", "e", "zero", "s"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 5]),
                    helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
                   {"one": np.array([1], np.int64), "zero": np.array([0], np.int64)})
    with pytest.raises(NeedsConstantError, match="steps"):
        import_onnx(model)


def test_zero_step_is_an_import_error() -> None:
    model = start_plus_delta_model((6, 5), [0], [1], [0])
    with pytest.raises(tessera.errors.ModelImportError, match="the_slice.*steps \\[0\\]"):
        import_onnx(model)


def test_reference_checks_its_operands() -> None:
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    attrs = {"axes": [1], "deltas": [2], "steps": [1], "sizes": [2]}
    np.testing.assert_array_equal(dynamic_slice(x, np.array([-3]), **attrs), x[:, 2:4])
    np.testing.assert_array_equal(dynamic_slice(x, np.array([3]), **attrs), x[:, 3:5])
    with pytest.raises(OpError, match="2 entries for 1 axes"):
        dynamic_slice(x, np.array([0, 1]), **attrs)
    with pytest.raises(RunError, match="start 4 .*axis 1 of length 5 leaves 1 elements"):
        dynamic_slice(x, np.array([4]), **attrs)
    # x[-2:0] and x[-1:1] on 5: empty in ONNX (the end does not wrap), not x[3:5] or x[4:6]
    for start in (-2, -1):
        with pytest.raises(RunError, match=f"start {start} .*leaves 0 elements"):
            dynamic_slice(x, np.array([start]), **attrs)


@pytest.mark.parametrize("target", _targets())
def test_ends_from_a_shared_product_through_gather_and_vector_slices(target: str) -> None:
    """starts = Slice(Concat(2s, [9]), 0:1), ends = Gather(Concat(2s, [9]) + 3 - 1, [0]):
    ends - starts = 2 through a leaf the walk cannot see into (the product)."""
    nodes = [helper.make_node("Mul", ["s", "two"], ["s2"]),
             helper.make_node("Concat", ["s2", "nine"], ["both"], axis=0),
             helper.make_node("Slice", ["both", "zero", "one"], ["starts"]),
             helper.make_node("Add", ["both", "three"], ["plus3"]),
             helper.make_node("Sub", ["plus3", "one"], ["plus2"]),
             helper.make_node("Gather", ["plus2", "zero"], ["ends"], axis=0),
             helper.make_node("Slice", ["x", "starts", "ends", "one"], ["y"], name="the_slice")]
    inits = {"two": np.array([2], np.int64), "nine": np.array([9], np.int64),
             "zero": np.array([0], np.int64), "one": np.array([1], np.int64),
             "three": np.array([3], np.int64)}
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [1])], inits)
    assert [n.op for n in import_onnx(model).nodes if n.name == "the_slice"] == ["DynamicSlice"]
    mod = tessera.compile(model, target=target)
    rng = np.random.default_rng(11)
    fit = 0
    for s in range(-6, 6):
        x = rng.standard_normal((3, 8)).astype(np.float32)
        fit += _check_against_ort(mod, model, x, np.array([s], np.int64), (3, 2))
    assert 0 < fit < 12
