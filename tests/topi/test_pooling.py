"""Pooling computes (tessera.topi.nn.pooling) against the ops' numpy references."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import check_op, find_op, rand

from tessera.ops.layout import pack_nchwc
from tessera.topi import tag

WINDOWS = {
    "2x2_s2": ((2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "3x3_pad": ((1, 2, 7, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "asym_pads_stride": ((1, 2, 9, 7), {"kernel_shape": [3, 2], "strides": [2, 3],
                                        "pads": [0, 1, 2, 0]}),
    "ceil_mode": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "ceil_pads": ((1, 1, 6, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1],
                                 "ceil_mode": 1}),
    "dilation": ((1, 2, 9, 9), {"kernel_shape": [2, 3], "dilations": [2, 2],
                                "pads": [1, 1, 1, 2]}),
    "dilation_ceil": ((1, 1, 10, 9), {"kernel_shape": [3, 3], "dilations": [2, 1],
                                      "strides": [3, 2], "ceil_mode": 1}),
    "pool1d": ((2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    "pool3d": ((1, 2, 4, 5, 4), {"kernel_shape": [2, 2, 3], "pads": [0, 1, 1, 1, 0, 1]}),
}


@pytest.mark.parametrize("case", sorted(WINDOWS))
def test_max_pool(case: str) -> None:
    shape, attrs = WINDOWS[case]
    check_op("MaxPool", [rand(*shape)], attrs, num_outputs=1)
    check_op("MaxPool", [rand(*shape, dtype="int8", lo=-128, hi=127)], attrs, num_outputs=1)


@pytest.mark.parametrize("case", sorted(WINDOWS))
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(case: str, include_pad: int) -> None:
    shape, attrs = WINDOWS[case]
    check_op("AveragePool", [rand(*shape)], {**attrs, "count_include_pad": include_pad})
    check_op("AveragePool", [rand(*shape, dtype="float16")],
             {**attrs, "count_include_pad": include_pad})


@pytest.mark.parametrize("case", ["2x2_s2", "3x3_pad", "ceil_mode", "dilation"])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(case: str, p: int) -> None:
    shape, attrs = WINDOWS[case]
    check_op("LpPool", [rand(*shape)], {**attrs, "p": p}, rtol=1e-4)


def test_pool_structure() -> None:
    shape, attrs = WINDOWS["3x3_pad"]
    group = check_op("MaxPool", [rand(*shape)], attrs, num_outputs=1)
    mp = find_op(group, tag.POOL_MAX)
    assert mp.attrs["data_pad"].op.tag == tag.PAD and mp.attrs["kernel_size"] == (3, 3)
    assert [a.name for a in mp.reduce_axis] == ["ry", "rx"]
    group = check_op("AveragePool", [rand(2, 3, 8, 8)], {"kernel_shape": [2, 2],
                                                         "strides": [2, 2]})
    assert find_op(group, tag.POOL_SUM).attrs["data_pad"] is None
    avg = find_op(group, tag.POOL_AVG)
    assert "4.0f" in repr(avg.body)  # a constant divisor when no window is clipped


def test_max_pool_with_indices_is_unsupported() -> None:
    from topi.support import one_node

    from tessera.topi.registry import unsupported_reason

    _, node = one_node("MaxPool", [rand(1, 1, 4, 4)], {"kernel_shape": [2, 2]})
    assert "Indices" in unsupported_reason(node)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_global_pools(dtype: str) -> None:
    for shape in [(2, 3, 5, 4), (1, 4, 7), (1, 2, 3, 2, 2), (2, 3, 1, 1)]:
        x = rand(*shape, dtype=dtype)
        check_op("GlobalMaxPool", [x])
        check_op("GlobalAveragePool", [x])
        check_op("GlobalLpPool", [x], {"p": 2})
        check_op("GlobalLpPool", [x], {"p": 3}, rtol=1e-4 if dtype == "float32" else None)


@pytest.mark.parametrize("case", ["2x2_s2", "3x3_pad", "asym_pads_stride", "ceil_pads",
                                  "dilation"])
@pytest.mark.parametrize("mode", ["max", "avg"])
def test_pool_nchwc(case: str, mode: str) -> None:
    shape, attrs = WINDOWS[case]
    x = pack_nchwc(rand(shape[0], 8, *shape[2:]), 4)
    for include_pad in (0, 1):
        check_op("PoolNCHWc", [x], {**attrs, "mode": mode, "count_include_pad": include_pad})
    check_op("PoolNCHWc", [x], {"mode": mode, "global_pool": 1})
    check_op("PoolNCHWc", [x.astype(np.float16)], {**attrs, "mode": mode})
