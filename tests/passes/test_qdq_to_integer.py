"""QDQToInteger: MatMul/Gemm of dequantized 8-bit operands become MatMulInteger scaled once.

The rewritten graphs are checked against the graphs as written (the float product of the
dequantized values, on the numpy reference: equal up to float32 rounding), and the llvm
backend's results against the reference's on the rewritten graph (its int32 accumulations are
exact, so they agree bit for bit), on random data with non-zero zero points."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.backends.reference.interpreter import evaluate_function
from tessera.frontend.onnx.importer import import_onnx
from tessera.passes import PassManager, QDQToInteger


def _model(nodes: list, inits: list, x_shape: list, y_shape: list, x_type: int,
           extra_inputs: tuple = ()) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("xq", x_type, x_shape), *extra_inputs]
    graph = helper.make_graph(nodes, "qdq", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _weight(rng: np.random.Generator, shape: tuple, dtype: type, per: int | None,
            zero: bool) -> list:
    """The initializers of a weight ``w_q`` with its scale ``w_s`` (per axis ``per``'s entries,
    else per tensor) and, unless ``zero``, a non-zero zero point ``w_zp``."""
    info = np.iinfo(dtype)
    w = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    w.reshape(-1)[:2] = info.min  # the extremes in one pair
    n = shape[per] if per is not None else 1
    scale = rng.uniform(0.01, 0.05, n).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w_q"),
             numpy_helper.from_array(scale if per is not None else scale[0], "w_s")]
    if not zero:
        zp = rng.integers(info.min // 2, info.max // 2, n).astype(dtype)
        inits.append(numpy_helper.from_array(zp if per is not None else zp[0], "w_zp"))
    return inits


def _dq(name: str, out: str, zero: bool, axis: int | None = None) -> onnx.NodeProto:
    inputs = [f"{name}_q", f"{name}_s"] + ([] if zero else [f"{name}_zp"])
    kwargs = {} if axis is None else {"axis": axis}
    return helper.make_node("DequantizeLinear", inputs, [out], **kwargs)


def matmul_case(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict]:
    """uint8 activations (batch 2 x 5 rows x 48) with a zero point, int8 weights per column,
    a bias."""
    x_dq = helper.make_node("DequantizeLinear", ["xq", "x_s", "x_zp"], ["x"])
    nodes = [x_dq, _dq("w", "w", True, axis=1), helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(0.037), "x_s"),
             numpy_helper.from_array(np.uint8(131), "x_zp"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "bias"),
             *_weight(rng, (48, 32), np.int8, 1, True)]
    model = _model(nodes, inits, [2, 5, 48], [2, 5, 32], TensorProto.UINT8)
    return model, {"xq": rng.integers(0, 256, (2, 5, 48)).astype(np.uint8)}


def gemm_case(rng: np.random.Generator, trans_b: int, dtype: type = np.int8,
              per: bool = True, zero: bool = True) -> tuple[onnx.ModelProto, dict]:
    """int8 activations (7 x 40), a Gemm with alpha, beta and C."""
    shape = (24, 40) if trans_b else (40, 24)
    x_dq = helper.make_node("DequantizeLinear", ["xq", "x_s"], ["x"])
    gemm = helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=trans_b, alpha=0.75,
                            beta=1.5)
    nodes = [x_dq, _dq("w", "w", zero, axis=0 if trans_b else 1), gemm]
    inits = [numpy_helper.from_array(np.float32(0.021), "x_s"),
             numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "c"),
             *_weight(rng, shape, dtype, (0 if trans_b else 1) if per else None, zero)]
    model = _model(nodes, inits, [7, 40], [7, 24], TensorProto.INT8)
    return model, {"xq": rng.integers(-128, 128, (7, 40)).astype(np.int8)}


def run_passes(model: onnx.ModelProto, enabled: bool = True):
    fn = import_onnx(model)
    disabled = set() if enabled else {"QDQToInteger"}
    return PassManager(opt_level=3, disabled=disabled, verify=True).run(fn)


def evaluate(fn, feeds: dict) -> np.ndarray:
    return evaluate_function(fn, feeds)[fn.outputs[0].name]


CASES = {
    "matmul": matmul_case,
    "gemm_transB": lambda rng: gemm_case(rng, 1),
    "gemm": lambda rng: gemm_case(rng, 0),
    "gemm_uint8_weight_zero_point": lambda rng: gemm_case(rng, 0, np.uint8, per=False,
                                                          zero=False),
    "gemm_transB_per_column_zero_points": lambda rng: gemm_case(rng, 1, np.int8, zero=False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_products_become_integer_and_agree_with_the_float_product(case: str) -> None:
    rng = np.random.default_rng(len(case))
    model, feeds = CASES[case](rng)
    fn = run_passes(model)
    ops = [n.op for n in fn.nodes]
    assert "MatMulInteger" in ops and "MatMul" not in ops and "Gemm" not in ops
    assert "DequantizeLinear" not in ops  # the weight's integers are read, not dequantized
    product = next(n for n in fn.nodes if n.op == "MatMulInteger")
    assert product.inputs[1].is_constant and product.inputs[1].type.dtype.value in (
        "int8", "uint8")
    want = evaluate(run_passes(model, enabled=False), feeds)
    got = evaluate(fn, feeds)
    # float32 rounding only: the float product rounds every partial sum
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))


def _power_of_two_scales(model: onnx.ModelProto) -> None:
    """Every scale rounded to a power of two: the float epilogue (scale, bias) is then exact
    whether or not a backend fuses its multiply and add, so that outputs are equal exactly
    when the integer accumulations are."""
    for t in model.graph.initializer:
        if t.name in ("x_s", "w_s"):
            v = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(
                np.exp2(np.round(np.log2(v))).astype(np.float32), t.name))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("scales", ["any", "powers_of_two"])
def test_llvm_runs_the_rewritten_product_as_the_reference_does(case: str, scales: str) -> None:
    rng = np.random.default_rng(100 + len(case))
    model, feeds = CASES[case](rng)
    if scales == "powers_of_two":
        _power_of_two_scales(model)
    llvm = tessera.compile(model, "llvm")
    # the reference runs the rewritten graph too (its backend does not ask for the pass)
    ref = tessera.compile(model, "ref", config=tessera.CompileConfig(
        pass_config={"QDQToInteger": True}))
    for trial in range(2):
        if trial:
            info = np.iinfo(feeds["xq"].dtype)
            feeds = {"xq": rng.integers(info.min, info.max + 1,
                                        feeds["xq"].shape).astype(feeds["xq"].dtype)}
        got, want = llvm.run(**feeds)["y"], ref.run(**feeds)["y"]
        if scales == "any":  # one float32 rounding apart where llvm fuses multiply and add
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)


def test_run_time_activation_scale_is_multiplied_in() -> None:
    rng = np.random.default_rng(5)
    model, feeds = gemm_case(rng, 1)
    graph = model.graph
    graph.initializer.remove(next(t for t in graph.initializer if t.name == "x_s"))
    graph.input.append(helper.make_tensor_value_info("x_s", TensorProto.FLOAT, []))
    feeds["x_s"] = np.float32(0.013)
    fn = run_passes(model)
    assert "MatMulInteger" in [n.op for n in fn.nodes]
    np.testing.assert_allclose(evaluate(fn, feeds),
                               evaluate(run_passes(model, enabled=False), feeds), rtol=2e-5,
                               atol=1e-5)


def _unchanged(model: onnx.ModelProto, op: str) -> None:
    ops = [n.op for n in run_passes(model).nodes]
    assert op in ops and "MatMulInteger" not in ops, ops


def test_what_is_left_as_written() -> None:
    rng = np.random.default_rng(6)
    # transA
    _unchanged(_with_attr(gemm_case(rng, 0)[0], "Gemm", "transA", 1, x_shape=[40, 7]), "Gemm")
    # a weight scale per row of the weight (per input channel): not one scale per column
    model, _ = gemm_case(rng, 0)
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] == "w_q":
            node.attribute[0].i = 0
    for t in model.graph.initializer:
        if t.name == "w_s":
            t.CopyFrom(numpy_helper.from_array(rng.uniform(0.01, 0.05, 40).astype(np.float32),
                                               "w_s"))
    _unchanged(model, "Gemm")
    # two activations (attention's products)
    nodes = [helper.make_node("DequantizeLinear", ["xq", "x_s"], ["x"]),
             helper.make_node("DequantizeLinear", ["zq", "x_s"], ["z"]),
             helper.make_node("MatMul", ["x", "z"], ["y"])]
    model = _model(nodes, [numpy_helper.from_array(np.float32(0.1), "x_s")], [4, 8], [4, 6],
                   TensorProto.INT8,
                   (helper.make_tensor_value_info("zq", TensorProto.INT8, [8, 6]),))
    _unchanged(model, "MatMul")
    # an activation dequantized per channel
    model, _ = matmul_case(rng)
    for t in model.graph.initializer:
        if t.name in ("x_s", "x_zp"):
            value = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(np.full(48, value, value.dtype), t.name))
    next(n for n in model.graph.node if n.input[0] == "xq").attribute.append(
        helper.make_attribute("axis", 2))
    _unchanged(model, "MatMul")


def _with_attr(model: onnx.ModelProto, op: str, name: str, value: int,
               x_shape: list) -> onnx.ModelProto:
    for node in model.graph.node:
        if node.op_type == op:
            for a in list(node.attribute):
                if a.name == name:
                    node.attribute.remove(a)
            node.attribute.append(helper.make_attribute(name, value))
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("xq", TensorProto.INT8, x_shape))
    return model


def _ops_compiled(model: onnx.ModelProto, target: str, **config: object) -> set[str]:
    mod = tessera.compile(model, target, config=tessera.CompileConfig(**config))
    return {op for r in mod.partition_report().regions for op in r.ops}


def test_targets_whose_backend_runs_integer_products_faster_get_the_pass() -> None:
    # Backend.integer_products: llvm says so, the numpy reference does not (its integer
    # product is a float64 one); the pass can be switched on or off by name
    model, _ = matmul_case(np.random.default_rng(7))
    assert "MatMulInteger" in _ops_compiled(model, "llvm")
    assert "MatMulInteger" not in _ops_compiled(model, "llvm", disabled_passes=["QDQToInteger"])
    assert "MatMulInteger" not in _ops_compiled(model, "ref")
    assert "MatMulInteger" in _ops_compiled(model, "ref", pass_config={"QDQToInteger": True})
    assert "MatMulInteger" not in _ops_compiled(model, "ref, llvm")
    assert QDQToInteger.opt_level == 2
