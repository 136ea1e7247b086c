"""Data-movement computes (tessera.topi.transform) against the ops' numpy references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from topi.support import check_op, has_div_or_mod, rand

from tessera import te
from tessera.topi import tag, transform
from tessera.topi.transform import _reshape_groups

RESHAPES = [((2, 3, 4), [6, 4]), ((2, 3, 4), [4, 3, 2]), ((2, 3, 4), [-1]), ((24,), [2, 3, 4]),
            ((1, 6, 1, 4), [6, 4]), ((6, 4), [1, 6, 1, 4, 1]), ((2, 3, 4), [3, 8]),
            ((4, 6), [6, 4]), ((2, 1, 5), [0, 5]), ((1,), []), ((), [1, 1])]


@pytest.mark.parametrize("shape,target", RESHAPES)
def test_reshape(shape: tuple, target: list) -> None:
    check_op("Reshape", [rand(*shape)], {"shape": target})


def _random_shape(rng: np.random.Generator, primes: list[int]) -> tuple[int, ...]:
    """A shape whose size is the product of ``primes`` (shuffled, grouped, with some 1s)."""
    factors = list(rng.permutation(primes)) if primes else []
    cuts = sorted(rng.choice(len(factors) + 1, size=rng.integers(0, 3)))
    dims = [int(np.prod(part)) for part in np.split(np.array(factors, int), cuts)]
    for _ in range(rng.integers(0, 3)):
        dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
    return tuple(dims)


def test_reshape_groups_cover_both_shapes() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        primes = [int(p) for p in rng.choice([2, 3, 5], size=rng.integers(0, 6))]
        src, dst = _random_shape(rng, primes), _random_shape(rng, primes)
        groups = _reshape_groups(src, dst)
        assert sorted(k for gs, _ in groups for k in gs) == [k for k, d in enumerate(src) if d > 1]
        assert sorted(k for _, gd in groups for k in gd) == [k for k, d in enumerate(dst) if d > 1]
        for gs, gd in groups:
            assert np.prod([src[k] for k in gs]) == np.prod([dst[k] for k in gd])
        if len(primes) <= 4:
            check_op("Reshape", [rand(*src)], {"shape": list(dst)})


def test_squeeze_like_reshapes_need_no_division() -> None:
    for shape, target in [((1, 6, 1, 4), [6, 4]), ((6, 4), [1, 6, 1, 4])]:
        group = check_op("Reshape", [rand(*shape)], {"shape": target})
        assert not has_div_or_mod(group.outputs[0].op)


def test_flatten_squeeze_unsqueeze() -> None:
    x = rand(2, 1, 3, 1)
    for axis in (0, 1, 2, -1, 4):
        check_op("Flatten", [x], {"axis": axis})
    check_op("Squeeze", [x], {"axes": None})
    check_op("Squeeze", [x], {"axes": [-1]})
    check_op("Unsqueeze", [x], {"axes": [0, -1]})
    check_op("Unsqueeze", [np.array(3.0, np.float32)], {"axes": [0]})


def test_transpose() -> None:
    x = rand(2, 3, 4, 5)
    for perm in itertools.permutations(range(4)):
        check_op("Transpose", [x], {"perm": list(perm)})
    check_op("Transpose", [x], {"perm": None})
    check_op("Transpose", [rand(3, 5, dtype="int8", lo=-9, hi=9)], {"perm": [1, 0]})


def test_concat_reads_in_bounds() -> None:
    for axis in (0, 1, -1):
        xs = [rand(2, 3, 4), rand(2, 3, 4), rand(2, 3, 4)]
        shapes = [list(x.shape) for x in xs]
        a = axis % 3
        for s, n in zip(shapes, (1, 3, 2)):
            s[a] = n
        check_op("Concat", [rand(*s) for s in shapes], {"axis": axis})
    check_op("Concat", [rand(3), rand(0), rand(2)], {"axis": 0})
    check_op("Concat", [rand(3, dtype=bool)], {"axis": 0})


def test_split() -> None:
    x = rand(4, 9)
    check_op("Split", [x], {"axis": 1, "split": [2, 3, 4]})
    check_op("Split", [x], {"axis": -2, "split": [1, 3]})
    check_op("Split", [x], {"axis": 1, "split": [2, 3, 4]}, num_outputs=2)


SLICES = [
    ([1], [3], None, None), ([0, 1], [-1, 100], [0, 2], None), ([-1], [-100], [1], [-1]),
    ([5], [0], [2], [-2]), ([0, 0, 0], [2, 3, 5], None, [1, 2, 2]), ([2], [2], [1], None),
    ([-2], [10], [-1], [3]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(starts: list, ends: list, axes: list | None, steps: list | None) -> None:
    check_op("Slice", [rand(3, 4, 6)], {"starts": starts, "ends": ends, "axes": axes,
                                        "steps": steps})


@pytest.mark.parametrize("idx_dtype", ["int64", "int32"])
def test_gather(idx_dtype: str) -> None:
    data = rand(5, 4, 3)
    check_op("Gather", [data, np.array([0, -1, 2, 4], idx_dtype)], {"axis": 0})
    check_op("Gather", [data, np.array([[1, -2], [0, 3]], idx_dtype)], {"axis": 1})
    check_op("Gather", [data, np.array(-1, idx_dtype)], {"axis": -1})
    check_op("Gather", [data, np.array(2, idx_dtype)], {"axis": 0}, consts=(1,))
    check_op("GatherElements", [data, rand(5, 2, 3, dtype=idx_dtype, lo=-4, hi=3)], {"axis": 1})
    check_op("GatherElements", [data, rand(2, 4, 3, dtype=idx_dtype, lo=-5, hi=4)], {"axis": 0})


def test_gather_nd() -> None:
    data = rand(2, 3, 4)
    check_op("GatherND", [data, np.array([[0, 1], [1, -1]], np.int64)], {"batch_dims": 0})
    check_op("GatherND", [data, np.array([[1], [0]], np.int64)], {"batch_dims": 0})
    check_op("GatherND", [data, np.array([[[0, 1]], [[2, 3]]], np.int64)], {"batch_dims": 1})
    check_op("GatherND", [data, np.array([[2], [0]], np.int64)], {"batch_dims": 1})


def test_expand_and_tile() -> None:
    check_op("Expand", [rand(3, 1), ], {"shape": [2, 3, 4]})
    check_op("Expand", [rand(1, 4)], {"shape": [3, 1]})
    check_op("Expand", [np.array(1.5, np.float32)], {"shape": [2, 2]})
    check_op("Tile", [rand(2, 3)], {"repeats": [2, 3]})
    check_op("Tile", [rand(1, 3, 2)], {"repeats": [3, 1, 2]})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode: str) -> None:
    x = rand(3, 5)
    for pads in ([1, 2, 2, 1], [0, 0, 0, 3], [2, 4, 2, 4], [-1, 1, 1, -2], [0, 0, 0, 0]):
        check_op("Pad", [x], {"pads": pads, "mode": mode})
    if mode == "constant":
        check_op("Pad", [x, np.array(-7.5, np.float32)], {"pads": [1, 1, 1, 1], "mode": mode})
        check_op("Pad", [x, np.array(2.5, np.float32)], {"pads": [1, 0, 0, 2], "mode": mode},
                 consts=(1,))
        check_op("Pad", [rand(2, 3, dtype="int8", lo=-9, hi=9)], {"pads": [1, 1, 0, 2],
                                                                    "mode": mode})


def test_pad_is_tagged() -> None:
    group = check_op("Pad", [rand(2, 3)], {"pads": [1, 0, 1, 0], "mode": "constant"})
    op = group.outputs[0].op
    assert op.tag == tag.PAD and op.attrs["pad_before"] == (1, 0)


def test_trilu_onehot_reverse_sequence() -> None:
    x = rand(2, 4, 5)
    for upper in (0, 1):
        for k in (-2, 0, 1, 6):
            check_op("Trilu", [x], {"upper": upper, "k": k})
    check_op("OneHot", [np.array([[0, 2], [-1, 5]], np.int64), np.array([0.5, 3.0], np.float32)],
             {"depth": 4, "axis": -1})
    check_op("OneHot", [np.array([1.7, 0.0, -2.0], np.float32), np.array([0, 1], np.int32)],
             {"depth": 3, "axis": 0})
    seq = rand(5, 3, 2)
    check_op("ReverseSequence", [seq, np.array([5, 1, 3], np.int64)],
             {"batch_axis": 1, "time_axis": 0})
    check_op("ReverseSequence", [rand(3, 5, 2), np.array([2, 5, 0], np.int32)],
             {"batch_axis": 0, "time_axis": 1})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(mode: str) -> None:
    check_op("DepthToSpace", [rand(2, 8, 3, 2)], {"blocksize": 2, "mode": mode})
    check_op("SpaceToDepth", [rand(2, 3, 4, 6)], {"blocksize": 2, "mode": mode})
    check_op("DepthToSpace", [rand(1, 9, 2, 2)], {"blocksize": 3, "mode": mode})


def test_public_transform_functions() -> None:
    x = te.placeholder((2, 3, 4), "float32", "x")
    assert transform.reshape(x, (6, 4)).const_shape() == (6, 4)
    assert transform.transpose(x, (2, 0, 1)).const_shape() == (4, 2, 3)
    assert transform.concat([x, x], axis=1).const_shape() == (2, 6, 4)
    assert [t.const_shape() for t in transform.split(x, [1, 3], axis=2)] == [(2, 3, 1), (2, 3, 3)]
    p = transform.pad(x, [0, 1, 1], [0, 1, 2], 0.0)
    assert p.const_shape() == (2, 5, 7) and p.op.tag == tag.PAD


RESIZES = [
    ((1, 2, 4, 5), [1, 2, 8, 10], [1, 1, 2, 2]),
    ((1, 1, 6, 7), [1, 1, 3, 4], [1, 1, 0.5, 4 / 7]),
    ((2, 3, 5), [2, 3, 12], [1, 1, 2.4]),
    ((1, 1, 3, 3), [1, 1, 1, 5], [1, 1, 1 / 3, 5 / 3]),
]
COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
          "asymmetric"]


@pytest.mark.parametrize("case", range(len(RESIZES)))
@pytest.mark.parametrize("coord", COORDS)
def test_resize(case: int, coord: str) -> None:
    shape, sizes, scales = RESIZES[case]
    x = rand(*shape, lo=-5, hi=5)
    base = {"sizes": sizes, "scales": scales, "coordinate_transformation_mode": coord}
    for nearest in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"):
        check_op("Resize", [x], {**base, "mode": "nearest", "nearest_mode": nearest})
    check_op("Resize", [x], {**base, "mode": "linear"})
    check_op("Resize", [x], {**base, "mode": "cubic", "cubic_coeff_a": -0.5})
    check_op("Resize", [x], {**base, "mode": "cubic", "exclude_outside": 1})
    check_op("Resize", [x], {**base, "mode": "linear", "antialias": 1})
    check_op("Resize", [x], {**base, "mode": "cubic", "antialias": 1, "exclude_outside": 1})
    xi = rand(*shape, dtype="uint8", lo=0, hi=255)
    check_op("Resize", [xi], {**base, "mode": "cubic"})
    check_op("Resize", [xi], {**base, "mode": "nearest"})
