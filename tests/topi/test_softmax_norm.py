"""Softmax and normalization computes (tessera.topi.nn.softmax, norm) against the ops' numpy
references."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import check_op, find_op, rand

from tessera import te
from tessera.topi import nn


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_softmax_family(op: str, dtype: str) -> None:
    x = rand(2, 3, 5, dtype=dtype, lo=-30, hi=30)
    for axis in (-1, 0, 1, 2):
        check_op(op, [x], {"axis": axis})
    check_op(op, [rand(7, dtype=dtype, lo=-3, hi=3)], {"axis": 0})


def test_softmax_is_stable_and_staged() -> None:
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1e4, -999.0]], np.float32)
    group = check_op("Softmax", [x], {"axis": 1})
    out = group.outputs[0].op
    assert out.tag == "softmax_output" and out.attrs["axis"] == 1
    find_op(group, "reduce,softmax_max")
    find_op(group, "reduce,softmax_sum")
    check_op("LogSoftmax", [x], {"axis": 1})


def test_hardmax_picks_the_first_maximum() -> None:
    check_op("Hardmax", [np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)], {"axis": 1})


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_batch_norm(dtype: str) -> None:
    for shape in [(2, 3, 4, 5), (2, 3), (1, 3, 7)]:
        c = shape[1]
        params = [rand(c, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype),
                  rand(c, dtype=dtype, lo=0.1, hi=2)]
        check_op("BatchNormalization", [rand(*shape, dtype=dtype), *params], {"epsilon": 1e-3},
                 consts=(1, 2, 3, 4))
        check_op("BatchNormalization", [rand(*shape, dtype=dtype), *params])
    per_activation = [rand(3, 4), rand(3, 4), rand(3, 4), rand(3, 4, lo=0.1, hi=2)]
    check_op("BatchNormalization", [rand(2, 3, 4), *per_activation])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_instance_and_group_norm(dtype: str) -> None:
    x = rand(2, 6, 4, 3, dtype=dtype, lo=-3, hi=3)
    check_op("InstanceNormalization", [x, rand(6, dtype=dtype), rand(6, dtype=dtype)],
             {"epsilon": 1e-4})
    for groups in (1, 2, 3, 6):
        check_op("GroupNormalization", [x, rand(6, dtype=dtype), rand(6, dtype=dtype)],
                 {"num_groups": groups})
    check_op("GroupNormalization", [x, rand(3, dtype=dtype), rand(3, dtype=dtype)],
             {"num_groups": 3})
    check_op("GroupNormalization", [rand(2, 4), rand(4), rand(4)], {"num_groups": 2})


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_layer_norm(dtype: str) -> None:
    x = rand(2, 3, 8, dtype=dtype, lo=-3, hi=3)
    for axis in (-1, -2, 0):
        norm = x.shape[axis:]
        check_op("LayerNormalization", [x, rand(*norm, dtype=dtype), rand(*norm, dtype=dtype)],
                 {"axis": axis}, num_outputs=3)
    check_op("LayerNormalization", [x, rand(8, dtype=dtype)], {"axis": -1, "epsilon": 1e-3})
    check_op("LayerNormalization", [x, rand(1, 8, dtype=dtype), rand(8, dtype=dtype)],
             {"axis": 1}, num_outputs=2)
    check_op("LayerNormalization", [x, rand(8, dtype=dtype)], {"stash_type": dtype},
             num_outputs=3)


def test_rms_lrn_mvn_lp() -> None:
    x = rand(2, 5, 3, 4, lo=-2, hi=2)
    for axis in (-1, 1):
        check_op("RMSNormalization", [x, rand(*x.shape[axis:])], {"axis": axis})
    check_op("RMSNormalization", [x.astype(np.float16), rand(4, dtype="float16")], {})
    for size in (1, 2, 3, 5, 7):
        check_op("LRN", [x], {"size": size, "alpha": 1e-2, "beta": 0.6, "bias": 1.5})
    check_op("LRN", [rand(1, 3, 5)], {"size": 3})
    # a base that is not always positive (bias 0, negative alpha) takes the pow form
    check_op("LRN", [x], {"size": 3, "alpha": 1e-2, "beta": 0.5, "bias": 0.0})
    check_op("LRN", [x], {"size": 3, "alpha": -1e-2, "beta": 0.75, "bias": 2.0})
    for axes in ([0, 2, 3], [1], [-1, 0]):
        check_op("MeanVarianceNormalization", [x], {"axes": axes}, rtol=1e-4, atol=1e-5)
    for p in (1, 2):
        for axis in (-1, 1):
            check_op("LpNormalization", [x], {"axis": axis, "p": p})
    z = x.copy()
    z[0, :, 0, 0] = 0
    check_op("LpNormalization", [z], {"axis": 1, "p": 2})


def test_batch_norm_training_is_unsupported() -> None:
    from topi.support import one_node

    from tessera.topi.registry import unsupported_reason

    c = 3
    _, node = one_node("BatchNormalization", [rand(2, c, 4), rand(c), rand(c), rand(c),
                                              rand(c, lo=0.1, hi=1)], {"training_mode": 1})
    assert "training" in unsupported_reason(node)


def test_public_api() -> None:
    x = te.placeholder((2, 8), "float32", "x")
    assert nn.softmax(x, 1).op.tag == "softmax_output"
    assert nn.log_softmax(x).op.tag == "log_softmax_output"
    s = te.placeholder((8,), "float32", "s")
    y, mean, inv = nn.layer_norm(x, s)
    assert y.const_shape() == (2, 8) and mean.const_shape() == (2, 1)
