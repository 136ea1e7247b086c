"""A module with symbolic inputs runs through a generated call (``tessera.runtime.callers``):
the sizes bound inline from the arrays' shapes, written into the state only when they change;
whatever the inline tests do not take goes the general way and gets its clear error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import RunError


def _model() -> onnx.ModelProto:
    """``s = relu(x + y)`` over [batch, seq]; ``c = z`` reshaped to [2, -1], which needs an
    even number of elements: a relation checked per call."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["a"]), helper.make_node("Relu", ["a"], ["s"]),
         helper.make_node("Reshape", ["z", "two_rows"], ["c"])],
        "sized",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["rows", 3])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", "seq"]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, None])],
        [helper.make_tensor("two_rows", TensorProto.INT64, [2], [2, -1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def mod() -> tessera.Module:
    return tessera.compile(_model(), "llvm", shape_mode="symbolic",
                           dim_bounds={"batch": (0, 4), "seq": (0, 64), "rows": (0, 4)})


def _arrays(batch: int, seq: int, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq)).astype(np.float32),
            "y": rng.standard_normal((batch, seq)).astype(np.float32),
            "z": rng.standard_normal((rows, 3)).astype(np.float32)}


def _check(out: dict[str, np.ndarray], a: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(out["s"], np.maximum(a["x"] + a["y"], 0))
    np.testing.assert_array_equal(out["c"], a["z"].reshape(2, -1))


def test_run_and_caller_take_the_generated_call_at_every_size(mod: tessera.Module) -> None:
    call = mod.caller(["z", "y", "x"], ["c", "s"])
    assert call.__code__.co_filename == "<tessera sized caller>"
    for k, (batch, seq) in enumerate([(1, 7), (1, 7), (3, 64), (2, 1), (1, 7), (4, 0)]):
        a = _arrays(batch, seq, 2 * (k % 3), seed=k)
        _check(mod.run(a), a)
        c, s = call(a["z"], a["y"], a["x"])
        _check({"c": c, "s": s}, a)


@pytest.mark.parametrize("change, message", [
    ({"x": np.zeros((2, 5), np.float64)}, r"input 'x': expected dtype float32, got float64"),
    ({"y": np.zeros((2, 5, 1), np.float32)}, r"input 'y': expected rank 2"),
    ({"y": np.zeros((2, 6), np.float32)}, r"input 'y': dimension 1 is 6, but 'seq' is 5"),
    ({"z": np.zeros((2, 4), np.float32)}, r"input 'z': dimension 1 must be 3"),
    ({"x": np.zeros((2, 65), np.float32), "y": np.zeros((2, 65), np.float32)},
     r"dimension 1 \('seq'\) is 65, outside its bounds 0 <= seq <= 64"),
    ({"z": np.zeros((3, 3), np.float32)}, r"the model cannot take them"),
])
def test_what_the_inline_tests_refuse_gets_the_general_error(
        mod: tessera.Module, change: dict[str, np.ndarray], message: str) -> None:
    call = mod.caller()
    good = _arrays(2, 5, 2)
    for bad in ({**good, **change},):
        with pytest.raises(RunError, match=message):
            mod.run(bad)
        with pytest.raises(RunError, match=message):
            call(*(bad[n] for n in mod.input_names))
    _check(mod.run(good), good)  # and the module keeps working


def test_strided_inputs_are_copied_as_they_read(mod: tessera.Module) -> None:
    a = _arrays(3, 8, 4)
    strided = {"x": np.asfortranarray(a["x"]), "y": _arrays(6, 8, 4, seed=1)["y"][::2],
               "z": a["z"]}
    _check(mod.run(strided), strided)
    with pytest.raises(RunError, match="expected 3 inputs"):
        mod.caller()(a["x"], a["y"])
