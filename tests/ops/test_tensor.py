"""Tensor-manipulation ops (tessera.ops.tensor) and their ONNX converters, checked against
onnxruntime on one-node models over random data, many shapes, several opsets and edge cases."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_node
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_node import one_node_model

from tessera.errors import ModelImportError, NeedsConstantError, OpError
from tessera.frontend.onnx import import_onnx
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import OpPattern, get_schema

INT64_MAX = np.iinfo(np.int64).max

# -- harness ------------------------------------------------------------------------------------

check = partial(onnx_node.check, opset=18, rtol=1e-5, atol=1e-6)


@pytest.fixture
def r() -> np.random.Generator:
    return np.random.default_rng(7)


def rand(r: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return r.standard_normal(shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return r.random(shape) > 0.5
    return r.integers(-50, 50, shape).astype(dtype)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# -- reshaping ------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,target,allowzero", [
    ((2, 3, 4), [4, -1], 0), ((2, 3, 4), [0, -1], 0), ((2, 3, 4), [-1], 0),
    ((2, 3, 4), [2, 0, 4], 0), ((2, 3, 4), [1, 1, 24, 1], 0), ((24,), [2, -1, 3], 0),
    ((0, 3, 4), [3, 4, 0], 1), ((2, 3, 4), [4, 3, 2], 1), ((1,), [], 0),
])
@pytest.mark.parametrize("opset", [7, 14])
def test_reshape(r, shape, target, allowzero, opset):
    if allowzero and opset < 14:
        pytest.skip("allowzero exists from opset 14")
    attrs = {"allowzero": allowzero} if opset >= 14 else {}
    check("Reshape", [rand(r, *shape), i64(*target)], attrs, opset=opset, consts={1})


@pytest.mark.parametrize("axis", [-3, -1, 0, 1, 2, 3])
def test_flatten(r, axis):
    check("Flatten", [rand(r, 2, 3, 4)], {"axis": axis}, opset=13)


@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1], [0, 1, 2]])
def test_transpose(r, perm):
    attrs = {} if perm is None else {"perm": perm}
    check("Transpose", [rand(r, 2, 3, 4, dtype=np.int32)], attrs, opset=13)


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
def test_concat(r, axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, n in enumerate((1, 0, 3)):
        shapes[i][axis] = n
    check("Concat", [rand(r, *s) for s in shapes], {"axis": axis}, opset=13)


@pytest.mark.parametrize("opset,split,outputs,attrs", [
    (11, [2, 4], 2, {"axis": 1}),
    (13, [1, 0, 5], 3, {"axis": -1}),
    (13, None, 3, {"axis": 1}),
    (18, None, 3, {"axis": 1, "num_outputs": 3}),
    (18, None, 4, {"axis": 0, "num_outputs": 4}),
])
def test_split(r, opset, split, outputs, attrs):
    x = rand(r, 7, 6)
    if opset < 13:
        check("Split", [x], {**attrs, "split": split}, opset=opset, outputs=outputs)
    else:
        inputs = [x] if split is None else [x, i64(*split)]
        check("Split", inputs, attrs, opset=opset, consts={1}, outputs=outputs)


SLICES = [
    ([0, 1], [3, 4], None, None),
    ([1], [INT64_MAX], [1], None),
    ([-100, 2], [100, -1], [0, 2], None),
    ([-1], [-INT64_MAX], [1], [-1]),
    ([4, 5], [0, 1], [0, 2], [-2, -3]),
    ([3], [1], [2], [1]),          # empty result
    ([0, 0, 0], [5, 6, 7], [-1, -2, -3], [2, 3, 4]),
    ([10], [-10], [0], [-1]),      # clamped both ends, negative step
    ([-3], [INT64_MAX], [-1], [1]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(r, starts, ends, axes, steps):
    inputs = [rand(r, 5, 6, 7), i64(*starts), i64(*ends), None if axes is None else i64(*axes),
              None if steps is None else i64(*steps)]
    if axes is None and steps is not None:
        inputs[3] = i64(*range(len(starts)))
    check("Slice", inputs, opset=13, consts={1, 2, 3, 4})


@pytest.mark.parametrize("starts,ends,axes", [([0, 1], [3, 4], None), ([-2], [1000], [2]),
                                              ([1, 2], [-1, -2], [-1, 0])])
def test_slice_opset9_attributes(r, starts, ends, axes):
    attrs = {"starts": starts, "ends": ends}
    if axes is not None:
        attrs["axes"] = axes
    check("Slice", [rand(r, 5, 6, 7)], attrs, opset=9)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [None, [0], [-1, 2], [2, 0]])
def test_squeeze(r, opset, axes):
    x = rand(r, 1, 3, 1, 4, 1)
    if axes is None:
        check("Squeeze", [x], opset=opset)
    elif opset < 13:
        check("Squeeze", [x], {"axes": axes}, opset=opset)
    else:
        check("Squeeze", [x, i64(*axes)], opset=opset, consts={1})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [[0], [-1], [3, 1], [0, 4, -2]])
def test_unsqueeze(r, opset, axes):
    x = rand(r, 3, 4, dtype=np.int64)
    if opset < 13:
        check("Unsqueeze", [x], {"axes": axes}, opset=opset)
    else:
        check("Unsqueeze", [x, i64(*axes)], opset=opset, consts={1})


# -- indexing -------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather(r, axis, index_dtype):
    x = rand(r, 5, 4, 3)
    dim = x.shape[axis]
    idx = r.integers(-dim, dim, (2, 3)).astype(index_dtype)
    check("Gather", [x, idx], {"axis": axis}, opset=13)
    check("Gather", [x, np.array(-1, index_dtype)], {"axis": axis}, opset=13)


def test_gather_runtime_index_out_of_range_names_the_node(r):
    import tessera
    from tessera.errors import RunError

    model = one_node_model("Gather", [rand(r, 2, 3), np.array([0, 1], np.int64)], {"axis": 1},
                           opset=13)
    mod = tessera.compile(model, target="ref")
    with pytest.raises(RunError, match=r"node .*\(Gather\).*index 3 is out of range for a "
                                       r"dimension of size 3"):
        mod.run(x0=rand(r, 2, 3), x1=np.array([0, 3], np.int64))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(r, axis):
    x = rand(r, 4, 5, 3)
    shape = [4, 5, 3]
    shape[axis] = 2
    idx = r.integers(-x.shape[axis], x.shape[axis], shape).astype(np.int64)
    check("GatherElements", [x, idx], {"axis": axis}, opset=13)


@pytest.mark.parametrize("ishape,batch_dims", [((2, 2), 0), ((2, 1), 0), ((4, 3), 0),
                                               ((3, 2, 1), 1), ((3, 2), 1), ((3, 2, 2), 1)])
def test_gather_nd(r, ishape, batch_dims):
    x = rand(r, 3, 4, 5)
    m = ishape[-1]
    limits = x.shape[batch_dims:batch_dims + m]
    idx = np.stack([r.integers(-d, d, ishape[:-1]) for d in limits], axis=-1).astype(np.int64)
    check("GatherND", [x, idx], {"batch_dims": batch_dims}, opset=13)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements(r, reduction, axis):
    x = rand(r, 4, 5)
    upd_shape = [4, 5]
    upd_shape[axis] = 3
    if reduction == "none":  # distinct targets along the axis (duplicates are unordered)
        idx = np.stack([r.permutation(x.shape[axis])[:3] for _ in range(5)], axis=-1)
        idx = idx if axis == 0 else idx.T[:4]
        idx = idx - x.shape[axis] * (r.random(idx.shape) > 0.5)  # some negative
    else:
        idx = r.integers(0, x.shape[axis], upd_shape)
    upd = rand(r, *upd_shape)
    check("ScatterElements", [x, idx.astype(np.int64), upd],
          {"axis": axis, "reduction": reduction}, opset=18)


def test_scatter_opset10(r):
    x = rand(r, 3, 3)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    check("Scatter", [x, idx, rand(r, 2, 3)], {"axis": 0}, opset=10)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(r, reduction):
    x = rand(r, 4, 4, 4)
    idx = np.array([[0, 1], [2, -1], [3, 3]], np.int64) if reduction == "none" else \
        np.array([[0, 1], [2, 3], [0, 1]], np.int64)
    check("ScatterND", [x, idx, rand(r, 3, 4)], {"reduction": reduction}, opset=18)
    check("ScatterND", [x, np.array([[1], [3]], np.int64), rand(r, 2, 4, 4)],
          {"reduction": reduction}, opset=18)


@pytest.mark.parametrize("cond,axis", [([1, 0, 1], None), ([0, 1, 1], 0), ([1, 0, 0, 1], -1),
                                       ([0, 1], 1), ([0, 0], 0)])
def test_compress(r, cond, axis):
    attrs = {} if axis is None else {"axis": axis}
    check("Compress", [rand(r, 3, 4), np.array(cond, bool)], attrs, opset=11, consts={1})


def test_compress_runtime_condition_is_an_error(r):
    model = one_node_model("Compress", [rand(r, 3, 4), np.array([1, 0, 1], bool)], {"axis": 0},
                           opset=11)
    with pytest.raises(NeedsConstantError, match="depends on input values") as e:
        import_onnx(model, check=False)
    assert e.value.inputs == ["x1"]


def test_non_zero_constant_and_runtime(r):
    x = rand(r, 3, 4) * (r.random((3, 4)) > 0.5)
    got = check("NonZero", [x], opset=13, consts={0})
    assert got[0].shape[0] == 2
    with pytest.raises(NeedsConstantError, match="output shape depends on input values"):
        import_onnx(one_node_model("NonZero", [x], opset=13), check=False)


@pytest.mark.parametrize("attrs", [{}, {"sorted": 0}, {"axis": 0}, {"axis": -1, "sorted": 1}])
def test_unique(r, attrs):
    x = r.integers(0, 3, (4, 3)).astype(np.float32)
    x[2] = x[0]
    check("Unique", [x], attrs, opset=11, consts={0}, outputs=4)


# -- Expand, Tile, Pad, Trilu, OneHot, ... --------------------------------------------------------

@pytest.mark.parametrize("shape,target", [((3, 1), [2, 1, 4]), ((1,), [3, 4]), ((2, 3), [1]),
                                          ((2, 1, 3), [2, 4, 1]), ((), [2, 2])])
def test_expand(r, shape, target):
    check("Expand", [rand(r, *shape), i64(*target)], opset=13, consts={1})


@pytest.mark.parametrize("repeats", [[2, 1, 3], [1, 1, 1], [0, 2, 1]])
def test_tile(r, repeats):
    check("Tile", [rand(r, 2, 3, 2, dtype=np.int32), i64(*repeats)], opset=13, consts={1})


PADS = [[1, 0, 2, 0, 1, 1], [0, 2, 1, 2, 0, 4], [0, 0, 0, 0, 0, 0]]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", PADS)
def test_pad_modes(r, mode, pads):
    x = rand(r, 3, 4, 5)
    check("Pad", [x, i64(*pads), np.array(1.5, np.float32)], {"mode": mode}, opset=19,
          consts={1})


@pytest.mark.parametrize("pads", [[-1, 0, 2, 0, -1, 1], [0, -2, 0, 0, -1, 0]])
def test_pad_negative_crops(r, pads):
    check("Pad", [rand(r, 3, 4, 5), i64(*pads)], opset=13, consts={1})


@pytest.mark.parametrize("axes,pads", [([1], [1, 2]), ([-1, 0], [2, 0, 0, 1])])
def test_pad_axes(r, axes, pads):
    x = rand(r, 3, 4, 5)
    check("Pad", [x, i64(*pads), np.array(-2.0, np.float32), i64(*axes)], opset=18,
          consts={1, 3})
    check("Pad", [x, i64(*pads), None, i64(*axes)], {"mode": "edge"}, opset=18, consts={1, 3})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_opset2_attributes(r, mode):
    attrs = {"mode": mode, "pads": [0, 1, 2, 1, 0, 2]}
    if mode == "constant":
        attrs["value"] = 3.5
    check("Pad", [rand(r, 2, 4, 5)], attrs, opset=7)


def test_pad_int_with_runtime_value(r):
    x = rand(r, 3, 4, dtype=np.int32)
    check("Pad", [x, i64(1, 0, 0, 2), np.array(7, np.int32)], opset=13, consts={1})


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([3], np.int32),
                                   np.array([True])])
@pytest.mark.parametrize("shape", [[2, 3], [0], [4]])
def test_constant_of_shape(value, shape):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    check("ConstantOfShape", [i64(*shape)], attrs, opset=13, consts={0})


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, np.int64), (10, 4, -2, np.int32), (1.0, 3.5, 0.3, np.float32),
    (5, 1, 1, np.int64), (-2.5, 2.5, 0.5, np.float64)])
def test_range(start, limit, delta, dtype):
    args = [np.array(v, dtype) for v in (start, limit, delta)]
    check("Range", args, opset=11, consts={0, 1, 2})


def test_range_runtime_operands_are_named_at_once():
    args = [np.array(v, np.int64) for v in (0, 10, 2)]
    model = one_node_model("Range", args, opset=11)
    with pytest.raises(NeedsConstantError) as e:
        import_onnx(model, check=False)
    assert e.value.inputs == ["x0", "x1", "x2"]


@pytest.mark.parametrize("shape,k,dtype", [((3, 4), 0, None), ((4, 3), 1, TensorProto.INT32),
                                           ((3, 3), -1, TensorProto.DOUBLE), ((2, 5), 7, None)])
def test_eye_like(r, shape, k, dtype):
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check("EyeLike", [rand(r, *shape)], attrs, opset=13)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 2, -1])
def test_trilu(r, upper, k):
    x = rand(r, 2, 4, 5)
    inputs = [x] if k is None else [x, np.array(k, np.int64)]
    check("Trilu", inputs, {"upper": upper}, opset=14, consts={1})


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("depth", [np.array(5, np.int64), np.array([4.0], np.float32)])
def test_one_hot(r, axis, depth):
    idx = np.array([[0, 3, -1], [7, -6, 2]], np.int64)
    values = np.array([-1.0, 2.0], np.float32)
    check("OneHot", [idx, depth, values], {"axis": axis}, opset=11, consts={1})


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(r, batch_axis, time_axis):
    x = rand(r, 4, 4, 3) if batch_axis else rand(r, 4, 5, 2)
    lens = np.array([4, 1, 3, 2], np.int64)
    check("ReverseSequence", [x, lens], {"batch_axis": batch_axis, "time_axis": time_axis},
          opset=10)


@pytest.mark.parametrize("shape,axes", [([3, 6, 2], None), ([5, 3], [0, 2]), ([2, 9], [-1, 1]),
                                        ([4, 5, 6], None)])
def test_center_crop_pad(r, shape, axes):
    attrs = {} if axes is None else {"axes": axes}
    check("CenterCropPad", [rand(r, 4, 5, 6), i64(*shape)], attrs, opset=18, consts={1})


# -- Shape, Size, Constant ------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"end": -1}, {"start": -2, "end": 3},
                                   {"start": 10}, {"start": 2, "end": 1}, {"start": -10}])
def test_shape(r, attrs):
    (y,) = check("Shape", [rand(r, 2, 3, 4, 5)], attrs, opset=15)
    assert y.dtype == np.int64


def test_shape_and_size_are_constants(r):
    fn = import_onnx(one_node_model("Shape", [rand(r, 2, 3)], opset=13), check=False)
    assert fn.outputs[0].is_constant and list(fn.outputs[0].data) == [2, 3]
    fn = import_onnx(one_node_model("Size", [rand(r, 2, 3)], opset=13), check=False)
    assert fn.outputs[0].is_constant and int(fn.outputs[0].data.reshape(-1)[0]) == 6


@pytest.mark.parametrize("attr", [
    {"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))},
    {"value_float": 2.5}, {"value_floats": [1.0, 2.0]}, {"value_int": 3},
    {"value_ints": [1, -2, 3]},
])
def test_constant(attr):
    check("Constant", [], attr, opset=13)


@pytest.mark.parametrize("indices", [[1, 4], [[0, 1], [1, 1]]])
def test_constant_sparse_value(indices):
    values = numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "v")
    sparse = helper.make_sparse_tensor(
        values, numpy_helper.from_array(np.array(indices, np.int64), "i"), [2, 3])
    fn = import_onnx(one_node_model("Constant", [], {"sparse_value": sparse}, opset=13),
                     check=False)
    want = np.zeros(6, np.float32)
    want[[1, 4]] = [5.0, 7.0]
    np.testing.assert_array_equal(fn.outputs[0].data, want.reshape(2, 3))


# -- Resize and Upsample --------------------------------------------------------------------------

COORD_MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
               "half_pixel_symmetric", "tf_crop_and_resize"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def _resize(r, attrs, *, scales=None, sizes=None, roi=None, shape=(1, 2, 5, 6), opset=19,
            dtype=np.float32, oracle="ort"):
    x = rand(r, *shape, dtype=dtype)
    empty = np.zeros(0, np.float32)
    inputs = [x, empty if roi is None else np.array(roi, np.float32),
              empty if scales is None else np.array(scales, np.float32)]
    if sizes is not None:
        inputs.append(i64(*sizes))
    return check("Resize", inputs, attrs, opset=opset, consts={1, 2, 3}, rtol=1e-4, atol=1e-5,
                 oracle=oracle)


# The full grids are checked against the onnx reference evaluator (the conformance oracle):
# onnxruntime computes coordinates in float32 (exact ties round differently) and, for
# align_corners and tf_crop_and_resize with a fractional scale * size, divides by the integer
# output length where the onnx reference uses the fractional one.

@pytest.mark.parametrize("ctm", COORD_MODES)
@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 1.5], [1, 1, 0.6, 0.5], [1, 1, 1.7, 0.8]])
def test_resize_nearest(r, ctm, nearest_mode, scales):
    roi = [0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8] if ctm == "tf_crop_and_resize" else None
    _resize(r, {"mode": "nearest", "coordinate_transformation_mode": ctm,
                "nearest_mode": nearest_mode}, scales=scales, roi=roi, oracle="ref")


@pytest.mark.parametrize("ctm", COORD_MODES)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 1.5], [1, 1, 0.6, 0.5], [1, 1, 1.0, 2.5],
                                    [1, 1, 1.7, 0.8]])
def test_resize_linear_cubic(r, ctm, mode, scales):
    roi = [0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8] if ctm == "tf_crop_and_resize" else None
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if ctm == "tf_crop_and_resize":
        attrs["extrapolation_value"] = -3.0
    _resize(r, attrs, scales=scales, roi=roi, oracle="ref")


@pytest.mark.parametrize("ctm", ["half_pixel", "asymmetric", "align_corners",
                                 "pytorch_half_pixel", "half_pixel_symmetric"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 1.5], [1, 1, 0.6, 0.5], [1, 1, 3.0, 2.0]])
def test_resize_matches_onnxruntime(r, ctm, mode, scales):
    _resize(r, {"mode": mode, "coordinate_transformation_mode": ctm}, scales=scales)


@pytest.mark.parametrize("a,exclude", [(-0.5, 1), (-0.75, 1), (-0.5, 0)])
def test_resize_cubic_coefficients(r, a, exclude):
    _resize(r, {"mode": "cubic", "cubic_coeff_a": a, "exclude_outside": exclude},
            scales=[1, 1, 0.7, 1.8])


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("sizes", [[1, 2, 3, 9], [1, 2, 8, 4], [1, 2, 1, 1]])
def test_resize_sizes(r, mode, sizes):
    _resize(r, {"mode": mode}, sizes=sizes)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("axes,sizes", [(None, [1, 2, 7, 8]), ([2, 3], [3, 9]), ([3, 2], [4, 8])])
def test_resize_keep_aspect_ratio_and_axes(r, policy, axes, sizes):
    attrs = {"mode": "nearest", "keep_aspect_ratio_policy": policy}
    if axes is not None:
        attrs["axes"] = axes
    _resize(r, attrs, sizes=sizes)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.6], [1, 1, 0.3, 1.5]])
def test_resize_antialias(r, mode, scales):
    _resize(r, {"mode": mode, "antialias": 1}, scales=scales, shape=(1, 2, 9, 10))


def test_resize_scales_with_axes(r):
    _resize(r, {"mode": "linear", "axes": [-1]}, scales=[2.5])


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_dtypes(r, dtype, mode):
    # onnxruntime truncates integer results (and has no cubic uint8 or float64 kernels); Tessera
    # rounds and saturates like the onnx reference, the oracle of the conformance suite.
    x = (rand(r, 1, 1, 4, 4) * 60 + 100).astype(dtype)
    check("Resize", [x, np.zeros(0, np.float32), np.array([1, 1, 1.5, 2], np.float32)],
          {"mode": mode}, opset=19, consts={1, 2}, oracle="ref")


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_opset11_13(r, opset, mode):
    x = rand(r, 1, 2, 4, 5)
    roi = np.zeros(0, np.float32)
    check("Resize", [x, roi, np.array([1, 1, 1.5, 0.6], np.float32)], {"mode": mode},
          opset=opset, consts={1, 2}, rtol=1e-4, atol=1e-5)
    check("Resize", [x, roi, np.zeros(0, np.float32), i64(1, 2, 7, 3)], {"mode": mode},
          opset=opset, consts={1, 2, 3}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 0.5, 0.5], [1, 1, 1.5, 0.6]])
def test_resize_opset10(r, mode, scales):
    check("Resize", [rand(r, 1, 2, 4, 6), np.array(scales, np.float32)], {"mode": mode},
          opset=10, consts={1}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.5, 2.5]])
def test_upsample(r, mode, scales):
    x = rand(r, 1, 2, 3, 4)
    check("Upsample", [x], {"mode": mode, "scales": scales}, opset=7, rtol=1e-4, atol=1e-5)
    check("Upsample", [x, np.array(scales, np.float32)], {"mode": mode}, opset=9, consts={1},
          rtol=1e-4, atol=1e-5)


# -- IR-level behaviour: inference, patterns, errors ----------------------------------------------

def test_infer_without_running_the_reference():
    f32 = DType.float32
    schema = get_schema("Reshape")
    x = TensorType((2, 3, 4), f32)
    (t,) = schema.infer_types("n", [x], schema.check("n", [x], {"shape": [0, -1]}))
    assert t == TensorType((2, 12), f32)
    schema = get_schema("Resize")
    attrs = schema.check("n", [x], {"scales": [1.0, 2.0], "sizes": [3, 8]})
    assert schema.infer_types("n", [TensorType((3, 4), f32)], attrs) == [TensorType((3, 8), f32)]
    for op in ("Reshape", "Flatten", "Transpose", "Concat", "Split", "Slice", "Squeeze",
               "Unsqueeze", "Gather", "Expand", "Pad", "Resize", "Tile"):
        assert get_schema(op).infer is not None, op
        assert get_schema(op).pattern <= OpPattern.INJECTIVE, op


@pytest.mark.parametrize("op,types,attrs,match", [
    ("Reshape", [TensorType((2, 3), DType.float32)], {"shape": [4, -1]}, "cannot reshape"),
    ("Reshape", [TensorType((2, 3), DType.float32)], {"shape": [-1, -1]}, "more than one -1"),
    ("Concat", [TensorType((2, 3), DType.float32), TensorType((3, 3), DType.float32)],
     {"axis": 1}, "differ outside axis"),
    ("Squeeze", [TensorType((2, 3), DType.float32)], {"axes": [0]}, "size is not 1"),
    ("Transpose", [TensorType((2, 3), DType.float32)], {"perm": [0, 0]}, "not a permutation"),
    ("Split", [TensorType((5,), DType.float32)], {"split": [2, 2]}, "do not add up"),
    ("Gather", [TensorType((5,), DType.float32), TensorType((2,), DType.float32)], {},
     "int32 or int64"),
    ("Pad", [TensorType((2, 3), DType.float32)], {"pads": [1, 1]}, "2 \\* rank"),
    ("Expand", [TensorType((2, 3), DType.float32)], {"shape": [4, 3]}, "cannot be expanded"),
])
def test_infer_errors(op, types, attrs, match):
    schema = get_schema(op)
    full = schema.check("n", types, attrs)
    with pytest.raises(OpError, match=match):
        schema.infer_types("n", types, full)


def test_runtime_shape_operand_names_the_graph_input(r):
    model = one_node_model("Reshape", [rand(r, 2, 3), i64(3, 2)], opset=13)
    with pytest.raises(NeedsConstantError, match="shape must be a constant") as e:
        import_onnx(model, check=False)
    assert e.value.inputs == ["x1"]


def test_slice_runtime_operands_are_named_at_once(r):
    model = one_node_model("Slice", [rand(r, 4, 4), i64(0), i64(2), i64(1)], opset=13, consts={3})
    with pytest.raises(NeedsConstantError) as e:
        import_onnx(model, check=False)
    assert e.value.inputs == ["x1", "x2"]


def test_bad_split_is_an_import_error(r):
    model = one_node_model("Split", [rand(r, 5, 2)], {"axis": 0}, opset=13, outputs=2)
    with pytest.raises(ModelImportError, match="does not split evenly"):
        import_onnx(model, check=False)


def test_converters_fold_constant_inputs(r):
    model = one_node_model("Transpose", [rand(r, 2, 3)], opset=13, consts={0})
    fn = import_onnx(model, check=False)
    assert not fn.nodes and fn.outputs[0].is_constant
