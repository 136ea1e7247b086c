"""Neural-network ops (tessera.ops.nn) and their ONNX converters, checked against onnxruntime
(or ONNX's reference evaluator for ops onnxruntime lacks) on one-node models over random data:
shapes, pads, strides, dilations, groups, auto_pad, opsets and element types."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_node
import pytest
from onnx_node import feeds_of, one_node_model, run_oracle, run_tessera

from tessera.errors import ModelImportError, OpError
from tessera.frontend.onnx import import_onnx
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ops.nn import pool_output_shape, resolve_auto_pad
from tessera.ops.registry import OpPattern, get_schema

RNG = np.random.default_rng(20240611)
F32 = np.float32
F16 = np.float16


def rand(*shape: int, dtype=F32, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(dtype)


# Float16 outputs compare to 1e-2 whatever a test asks for.
check = partial(onnx_node.check, rtol=1e-3, atol=1e-4, tolerances={F16: (1e-2, 1e-2)})


# -- helpers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,want", [("SAME_UPPER", [0, 1, 1, 1]), ("SAME_LOWER", [1, 1, 0, 1]),
                                       ("VALID", [0, 0, 0, 0]), ("NOTSET", [0, 0, 0, 0])])
def test_resolve_auto_pad(mode: str, want: list[int]) -> None:
    # 5x7 input, kernel 2x3, strides 2x1: H needs 1 pixel of padding (odd), W needs 2
    assert resolve_auto_pad(mode, [5, 7], [2, 3], [2, 1], [1, 1]) == want


def test_pool_output_shape_ceil_drops_window_starting_in_pad() -> None:
    assert pool_output_shape([5], [2], [2], [0, 1], [1], 0) == [3]
    assert pool_output_shape([5], [2], [2], [0, 0], [1], 1) == [3]
    assert pool_output_shape([4], [3], [2], [1, 1], [1], 1) == [3]
    assert pool_output_shape([4], [2], [2], [0, 1], [1], 1) == [2]  # 3rd would start in pad


def test_patterns() -> None:
    fusable = OpPattern.OUT_ELEMWISE_FUSABLE
    for op in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
        assert get_schema(op).pattern == fusable
    for op in ("MaxPool", "AveragePool", "Softmax", "BatchNormalization", "LayerNormalization"):
        assert get_schema(op).pattern == OpPattern.OPAQUE
    assert get_schema("GlobalAveragePool").pattern == OpPattern.COMM_REDUCE


# -- Conv ---------------------------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, attrs
    ((2, 3, 9, 8), (4, 3, 3, 3), {}),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"pads": [1, 2, 0, 1], "strides": [2, 1]}),
    ((1, 4, 10, 9), (6, 2, 3, 2), {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ((1, 6, 7, 7), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 4, 7, 7), (8, 1, 3, 3), {"group": 4, "strides": [2, 2]}),  # channel multiplier 2
    ((2, 8, 5, 6), (5, 8, 1, 1), {}),  # pointwise
    ((1, 8, 9, 9), (5, 8, 1, 1), {"strides": [2, 2]}),
    ((1, 3, 11), (2, 3, 4), {"strides": [3], "pads": [2, 1], "dilations": [2]}),  # 1-D
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 2]}),
    ((1, 3, 10, 9), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 10, 9), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}),
    ((1, 3, 10, 9), (4, 3, 3, 2), {"auto_pad": "VALID", "strides": [2, 3]}),
]


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_with_dilations(mode: str) -> None:
    # onnxruntime rejects auto_pad SAME with dilations; the padding uses the dilated kernel.
    x, w = rand(1, 2, 9, 8), rand(3, 2, 3, 3)
    fn = import_onnx(one_node_model("Conv", [x, w], {"auto_pad": mode, "dilations": [2, 3],
                                                     "strides": [2, 1]}, opset=11, consts=(1,)))
    (node,) = fn.nodes
    assert node.attrs["pads"] == ([2, 3, 2, 3] if mode == "SAME_UPPER" else [2, 3, 2, 3])
    assert fn.outputs[0].type.shape == (1, 3, 5, 8)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    b = rand(ws[0]) if bias else None
    check("Conv", [rand(*xs), rand(*ws), b], attrs, opset=11, consts=(1, 2))


@pytest.mark.parametrize("opset", [7, 11, 22])
def test_conv_opsets_and_runtime_weights(opset: int) -> None:
    check("Conv", [rand(1, 2, 6, 6), rand(3, 2, 3, 3), rand(3)], {"pads": [1, 1, 1, 1]},
          opset=opset)


def test_conv_float16() -> None:
    check("Conv", [rand(1, 4, 8, 8, dtype=F16), rand(6, 2, 3, 3, dtype=F16)],
          {"group": 2, "pads": [1, 1, 1, 1]}, opset=13)


def test_conv_errors() -> None:
    with pytest.raises(ModelImportError, match="group"):
        import_onnx(one_node_model("Conv", [rand(1, 3, 5, 5), rand(4, 3, 3, 3)], {"group": 2},
                                   opset=13, consts=(1,)))
    g = Function()
    x = g.add_input("x", TensorType((1, 3, 4, 4), DType.float32))
    w = g.constant(rand(2, 3, 5, 5))
    with pytest.raises(OpError, match="empty output"):
        g.op("Conv", x, w)


# -- ConvTranspose ------------------------------------------------------------------------------

CONVT_CASES = [
    ((1, 3, 4, 5), (3, 2, 3, 3), {}),
    ((2, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 3], "pads": [1, 0, 1, 2]}),
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_padding": [1, 1]}),
    ((1, 4, 3, 4), (4, 3, 2, 3), {"group": 2, "strides": [2, 1], "dilations": [2, 2]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [9, 10]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 7]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 4, 4), (3, 2, 4, 3), {"strides": [3, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 7), (2, 3, 3), {"strides": [2], "pads": [1, 2]}),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 0]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
def test_conv_transpose(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    b = rand(ws[1] * attrs.get("group", 1)) if bias else None
    check("ConvTranspose", [rand(*xs), rand(*ws), b], attrs, opset=11, consts=(1, 2))


def test_conv_transpose_float16_opset7() -> None:
    check("ConvTranspose", [rand(1, 2, 3, 3, dtype=F16), rand(2, 2, 3, 3, dtype=F16)],
          {"strides": [2, 2]}, opset=7)


# -- pools --------------------------------------------------------------------------------------

POOL_CASES = [
    ((2, 3, 9, 8), {"kernel_shape": [3, 3]}),
    ((1, 3, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 10, 7), {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [1, 1, 0, 1],
                     "ceil_mode": 1}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2],
                       "pads": [0, 1, 1, 1, 1, 0]}),
]
DILATED = [
    ((1, 2, 10, 9), {"kernel_shape": [2, 2], "dilations": [2, 3], "strides": [1, 2]}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1],
                     "ceil_mode": 1, "strides": [2, 2]}),
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES + DILATED)
def test_max_pool_with_indices(xs: tuple, attrs: dict) -> None:
    check("MaxPool", [rand(*xs)], attrs, opset=12, outputs=2)


@pytest.mark.parametrize("xs,attrs", POOL_CASES[:3])
def test_max_pool_storage_order_and_opset8(xs: tuple, attrs: dict) -> None:
    opset = 11 if "ceil_mode" in attrs else 8  # ceil_mode arrived in opset 10
    check("MaxPool", [rand(*xs)], {**attrs, "storage_order": 1}, opset=opset, outputs=2)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, F16])
def test_max_pool_dtypes(dtype) -> None:
    x = RNG.integers(-100 if dtype == np.int8 else 0, 100, (1, 3, 7, 6)).astype(dtype)
    check("MaxPool", [x], {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]}, opset=12)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_average_pool(xs: tuple, attrs: dict, count_include_pad: int) -> None:
    check("AveragePool", [rand(*xs)], {**attrs, "count_include_pad": count_include_pad},
          opset=11)


@pytest.mark.parametrize("xs,attrs", DILATED)
def test_average_pool_dilations(xs: tuple, attrs: dict) -> None:
    check("AveragePool", [rand(*xs)], attrs, opset=19)


def test_average_pool_float16_opset7() -> None:
    check("AveragePool", [rand(1, 2, 6, 6, dtype=F16)], {"kernel_shape": [3, 3]}, opset=7)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("xs,attrs", [POOL_CASES[0], POOL_CASES[1], POOL_CASES[4]])
def test_lp_pool(xs: tuple, attrs: dict, p: int) -> None:
    check("LpPool", [rand(*xs)], {**attrs, "p": p}, opset=11)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 5, 6), (1, 2, 3, 4, 5)])
def test_global_pools(op: str, shape: tuple) -> None:
    check(op, [rand(*shape)], opset=13)


@pytest.mark.parametrize("xs,attrs", [((1, 2, 6, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
                                      ((2, 3, 5, 7), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                      "pads": [1, 1, 1, 1]})])
def test_max_unpool(xs: tuple, attrs: dict) -> None:
    x = rand(*xs)
    y, idx = run_oracle(one_node_model("MaxPool", [x], attrs, opset=12, outputs=2), {"x0": x})
    check("MaxUnpool", [y, idx], attrs, opset=11)
    check("MaxUnpool", [y, idx, np.array(xs, np.int64)], attrs, opset=11, consts=(2,))


# -- normalizations -----------------------------------------------------------------------------

def _bn_inputs(c: int, dtype=F32) -> list[np.ndarray]:
    return [rand(c, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype),
            rand(c, lo=0.5, hi=2.0, dtype=dtype)]


@pytest.mark.parametrize("opset", [7, 9, 15])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (1, 4, 5, 6), (1, 2, 3, 4, 2)])
def test_batch_norm(shape: tuple, opset: int) -> None:
    check("BatchNormalization", [rand(*shape), *_bn_inputs(shape[1])], {"epsilon": 1e-3},
          opset=opset, consts=(1, 2, 3, 4))


def test_batch_norm_float16_and_runtime_stats() -> None:
    check("BatchNormalization", [rand(1, 3, 4, 4, dtype=F16), *_bn_inputs(3, F16)], opset=9)
    check("BatchNormalization", [rand(1, 3, 4, 4), *_bn_inputs(3)], opset=15)


def test_batch_norm_training_mode() -> None:
    x = rand(3, 2, 4, 5)
    scale, b, mean, var = _bn_inputs(2)
    model = one_node_model("BatchNormalization", [x, scale, b, mean, var],
                           {"training_mode": 1, "momentum": 0.8}, opset=15, outputs=3)
    y, rm, rv = run_tessera(model, feeds_of([x, scale, b, mean, var]))
    bm, bv = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    want = (x - bm[:, None, None]) / np.sqrt(bv[:, None, None] + 1e-5) * scale[:, None, None] \
        + b[:, None, None]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rm, mean * 0.8 + bm * 0.2, rtol=1e-5)
    np.testing.assert_allclose(rv, var * 0.8 + bv * 0.2, rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 5, 6)])
def test_instance_norm(shape: tuple) -> None:
    check("InstanceNormalization", [rand(*shape), rand(shape[1]), rand(shape[1])],
          {"epsilon": 1e-4}, opset=7)


@pytest.mark.parametrize("axis", [-1, 1, 2, 0])
def test_layer_norm(axis: int) -> None:
    x = rand(2, 3, 4, 5)
    norm = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    check("LayerNormalization", [x, rand(*norm), rand(*norm)], {"axis": axis, "epsilon": 1e-3},
          opset=17, outputs=3)


def test_layer_norm_no_bias_float16() -> None:
    check("LayerNormalization", [rand(3, 8, dtype=F16), rand(8, dtype=F16)], opset=17, outputs=3)


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(opset: int, groups: int) -> None:
    x = rand(2, 4, 3, 5)
    n = groups if opset == 18 else 4
    check("GroupNormalization", [x, rand(n), rand(n)], {"num_groups": groups, "epsilon": 1e-3},
          opset=opset, consts=(1, 2), oracle="ort" if opset == 21 else "ref")


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm(axis: int) -> None:
    x = rand(2, 3, 6)
    check("RMSNormalization", [x, rand(*x.shape[axis:])], {"axis": axis}, opset=23,
          oracle="ref")


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size: int) -> None:
    check("LRN", [rand(2, 6, 4, 5)], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 1.5},
          opset=13)


@pytest.mark.parametrize("axes", [[0, 2, 3], [1], [2, 3]])
def test_mean_variance_normalization(axes: list[int]) -> None:
    check("MeanVarianceNormalization", [rand(2, 3, 4, 5)], {"axes": axes}, opset=13)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(p: int, axis: int) -> None:
    check("LpNormalization", [rand(3, 4, 5)], {"p": p, "axis": axis}, opset=13)


# -- softmax family -----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
def test_softmax_family(op: str, opset: int, axis: int | None) -> None:
    attrs = {} if axis is None else {"axis": axis}
    x = rand(2, 3, 4) * 5
    if op == "Hardmax":
        x[0, 1, :2] = 7.0  # ties resolve to the first maximum
    got = check(op, [x], attrs, opset=opset)
    model = one_node_model(op, [x], attrs, opset=opset)
    ops = [n.op for n in import_onnx(model).nodes]
    if opset == 11 and axis in (None, 0, 1):
        assert ops == ["Reshape", op, "Reshape"]  # coerced to 2-D at axis
        assert import_onnx(model).outputs[0].name == "y0"
    else:
        assert ops == [op]
    assert got[0].shape == x.shape


def test_softmax_float16_large_values() -> None:
    check("Softmax", [np.array([[1000, 1001, 1002], [-1000, 0, 1000]], F16)], opset=13)


# -- matrix products ----------------------------------------------------------------------------

GEMM_CASES = [
    ((3, 4), (4, 5), (5,), {}),
    ((4, 3), (4, 5), (3, 5), {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    ((3, 4), (5, 4), (1, 5), {"transB": 1}),
    ((4, 3), (5, 4), (3, 1), {"transA": 1, "transB": 1, "beta": 0.0}),
    ((3, 4), (4, 5), (), {"alpha": -1.5}),
    ((3, 4), (4, 5), None, {}),
]


@pytest.mark.parametrize("sa,sb,sc,attrs", GEMM_CASES)
def test_gemm(sa: tuple, sb: tuple, sc: tuple | None, attrs: dict) -> None:
    c = rand(*sc) if sc is not None else None
    check("Gemm", [rand(*sa), rand(*sb), c], attrs, opset=13)


@pytest.mark.parametrize("opset", [7, 9, 11])
def test_gemm_old_opsets(opset: int) -> None:
    check("Gemm", [rand(3, 4), rand(5, 4), rand(3, 5)], {"transB": 1, "beta": 0.5},
          opset=opset, consts=(1, 2))


def test_gemm_float16_and_int32() -> None:
    check("Gemm", [rand(3, 4, dtype=F16), rand(4, 5, dtype=F16), rand(5, dtype=F16)], opset=13)
    a = RNG.integers(-9, 9, (4, 3)).astype(np.int32)
    b = RNG.integers(-9, 9, (4, 2)).astype(np.int32)
    c = np.array([1, 2], np.int32)  # onnxruntime has no int32 Gemm: compare with numpy
    (y,) = run_tessera(one_node_model("Gemm", [a, b, c], {"transA": 1, "alpha": 2.0}, opset=13),
                       {"x0": a, "x1": b, "x2": c})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, 2 * a.T @ b + c)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)),
                                   ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 2)),
                                   ((4,), (2, 4, 3)), ((2, 3, 4), (4,))])
def test_matmul(sa: tuple, sb: tuple) -> None:
    check("MatMul", [rand(*sa), rand(*sb)], opset=13)


@pytest.mark.parametrize("dtype", [F16, np.int32, np.int64, np.float64])
def test_matmul_dtypes(dtype) -> None:
    a = (rand(2, 3, 4) * 8).astype(dtype)
    b = (rand(4, 3) * 8).astype(dtype)
    check("MatMul", [a, b], opset=13)


def test_matmul_shape_error() -> None:
    with pytest.raises(ModelImportError, match="inner dimensions"):
        import_onnx(one_node_model("MatMul", [rand(3, 4), rand(5, 6)], opset=13, consts=(1,)))


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("ij", [(3, 4)]),
    ("ji", [(3, 4)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("i,i", [(5,), (5,)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
])
def test_einsum(eq: str, shapes: list[tuple]) -> None:
    check("Einsum", [rand(*s) for s in shapes], {"equation": eq}, opset=12)


# -- Dropout ------------------------------------------------------------------------------------

@pytest.mark.parametrize("opset,n_out", [(7, 1), (12, 2), (13, 1), (22, 2)])
def test_dropout_inference(opset: int, n_out: int) -> None:
    check("Dropout", [rand(3, 4)], {"ratio": 0.3} if opset < 12 else {}, opset=opset,
          outputs=n_out)
    fn = import_onnx(one_node_model("Dropout", [rand(3, 4)], opset=opset, outputs=n_out))
    assert all(n.op == "Identity" for n in fn.nodes)  # no Dropout left


@pytest.mark.parametrize("opset,mask_dtype", [(7, F32), (10, np.bool_)])
def test_dropout_legacy_mask_all_kept(opset: int, mask_dtype) -> None:
    # onnxruntime's pre-12 kernels return an all-zero mask in inference; every element is kept.
    x = rand(3, 4)
    y, mask = run_tessera(one_node_model("Dropout", [x], {"ratio": 0.3}, opset=opset, outputs=2),
                          {"x0": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == mask_dtype and mask.all()


def test_dropout_ratio_and_training_inputs() -> None:
    x = rand(4, 5)
    inputs = [x, np.array(0.4, F32), np.array(False)]
    check("Dropout", inputs, opset=13, outputs=2, consts=(1, 2))
    check("Dropout", inputs, opset=13, outputs=2, consts=(2,))  # runtime ratio, not training
    inputs = [x, np.array(0.0, F32), np.array(True)]
    check("Dropout", inputs, opset=13, outputs=2, consts=(1, 2))
    model = one_node_model("Dropout", [x, np.array(0.5, F32), np.array(True)], {"seed": 3},
                           opset=13, outputs=2, consts=(1, 2))
    y, mask = run_tessera(model, {"x0": x})
    assert mask.dtype == np.bool_ and 0 < mask.sum() < mask.size
    np.testing.assert_allclose(y, np.where(mask, x * 2, 0), rtol=1e-6)
    y2, _ = run_tessera(model, {"x0": x})
    np.testing.assert_array_equal(y, y2)  # deterministic per seed


# -- data movement ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode: str) -> None:
    check("DepthToSpace", [rand(2, 8, 3, 4)], {"blocksize": 2, "mode": mode}, opset=13)


def test_space_to_depth() -> None:
    check("SpaceToDepth", [rand(2, 3, 6, 4)], {"blocksize": 2}, opset=13)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_inverts_depth_to_space(mode: str) -> None:
    x = rand(1, 8, 3, 5)
    d2s = get_schema("DepthToSpace").reference(x, blocksize=2, mode=mode)
    back = get_schema("SpaceToDepth").reference(d2s, blocksize=2, mode=mode)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1], "pads": [1, 0, 1, 1]},
                                   {"dilations": [2, 1]}])
def test_col2im(attrs: dict) -> None:
    image, block = np.array([6, 5], np.int64), np.array([3, 2], np.int64)
    s, p, d = attrs.get("strides", [1, 1]), attrs.get("pads", [0] * 4), attrs.get("dilations",
                                                                                    [1, 1])
    blocks = [(image[i] + p[i] + p[i + 2] - (block[i] - 1) * d[i] - 1) // s[i] + 1
              for i in range(2)]
    x = rand(2, 3 * 6, int(np.prod(blocks)))
    check("Col2Im", [x, image, block], attrs, opset=18, consts=(1, 2), oracle="ref")


# -- sampling -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode: str, padding_mode: str, align_corners: int) -> None:
    grid = rand(2, 4, 5, 2, lo=-1.3, hi=1.3)
    check("GridSample", [rand(2, 3, 5, 6), grid],
          {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners},
          opset=16)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_opset20_volumetric(mode: str) -> None:
    grid = rand(1, 3, 2, 4, 3, lo=-1.2, hi=1.2)
    check("GridSample", [rand(1, 2, 4, 5, 3), grid], {"mode": mode}, opset=20, oracle="ref")
    check("GridSample", [rand(1, 2, 5, 6), rand(1, 3, 4, 2)], {"mode": mode}, opset=20)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 5]])
def test_affine_grid(size: list[int], align_corners: int) -> None:
    n = len(size) - 2
    theta = rand(size[0], n, n + 1)
    check("AffineGrid", [theta, np.array(size, np.int64)], {"align_corners": align_corners},
          opset=20, consts=(1,), oracle="ref")


ROIS = np.array([[0, 0, 4, 5], [1.5, 0.5, 6.2, 3.7], [2, 2, 2.5, 3], [-1, 3, 9, 9]], F32)


@pytest.mark.parametrize("opset", [10, 16])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("attrs", [{"output_height": 3, "output_width": 2, "sampling_ratio": 2},
                                   {"output_height": 2, "output_width": 4,
                                    "spatial_scale": 0.5},
                                   {"coordinate_transformation_mode": "output_half_pixel"}])
def test_roi_align(opset: int, mode: str, attrs: dict) -> None:
    if opset == 10:
        attrs = {k: v for k, v in attrs.items() if k != "coordinate_transformation_mode"}
    x = rand(2, 3, 7, 8)
    check("RoiAlign", [x, ROIS, np.array([0, 1, 1, 0], np.int64)], {"mode": mode, **attrs},
          opset=opset, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs,mask,bias", [
    ({"pads": [1, 1, 1, 1]}, False, False),
    ({"strides": [2, 1], "dilations": [1, 2]}, True, True),
    ({"group": 2, "offset_group": 2, "pads": [0, 1, 1, 0]}, True, False),
])
def test_deform_conv(attrs: dict, mask: bool, bias: bool) -> None:
    x = rand(2, 4, 6, 7)
    w = rand(6, 4 // attrs.get("group", 1), 3, 2)
    og = attrs.get("offset_group", 1)
    s, d, p = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]), attrs.get(
        "pads", [0] * 4)
    out = [(x.shape[2 + i] + p[i] + p[i + 2] - (w.shape[2 + i] - 1) * d[i] - 1) // s[i] + 1
           for i in range(2)]
    offset = rand(2, og * 6 * 2, *out, lo=-2, hi=2)
    m = rand(2, og * 6, *out, lo=0, hi=1) if mask else None
    b = rand(6) if bias else None
    check("DeformConv", [x, w, offset, b, m], attrs, opset=19, oracle="ref")


# -- losses -------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, 1, -1])
def test_nll_loss(reduction: str, weighted: bool, ignore_index: int | None) -> None:
    x = rand(3, 4, 5)
    target = RNG.integers(0, 4, (3, 5)).astype(np.int64)
    if ignore_index is not None:
        target[0, :2] = ignore_index
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    check("NegativeLogLikelihoodLoss", [x, target, rand(4, lo=0.1) if weighted else None],
          attrs, opset=13)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 2)])
def test_softmax_cross_entropy_loss(reduction: str, weighted: bool, shape: tuple) -> None:
    x = rand(*shape) * 3
    labels = RNG.integers(0, 3, (shape[0], *shape[2:])).astype(np.int64)
    labels.reshape(-1)[0] = 2
    check("SoftmaxCrossEntropyLoss", [x, labels, rand(3, lo=0.1) if weighted else None],
          {"reduction": reduction, "ignore_index": 2}, opset=13, outputs=2)


def test_batch_norm_opset7_per_activation() -> None:
    x = rand(2, 3, 4, 5)
    params = [rand(3, 4, 5), rand(3, 4, 5), rand(3, 4, 5), rand(3, 4, 5, lo=0.5, hi=2.0)]
    check("BatchNormalization", [x, *params], {"spatial": 0}, opset=7, consts=(1, 2, 3, 4))
