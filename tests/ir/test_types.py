"""Tests for tessera.ir.types: DType and TensorType."""

import numpy as np
import pytest

from tessera.errors import IRError
from tessera.ir.types import DType, TensorType


@pytest.mark.parametrize("dtype", list(DType))
def test_dtype_round_trips_through_numpy(dtype):
    assert DType.from_numpy(dtype.numpy) is dtype
    assert DType.from_numpy(dtype.value) is dtype
    assert dtype.itemsize == dtype.numpy.itemsize
    assert str(dtype) == dtype.value


def test_dtype_kinds():
    assert DType.float16.is_float and not DType.float16.is_int
    assert DType.uint8.is_int and not DType.uint8.is_float
    assert not DType.bool.is_int and not DType.bool.is_float


@pytest.mark.parametrize("bad", [np.complex64, np.str_, object])
def test_unsupported_dtype_is_an_ir_error(bad):
    with pytest.raises(IRError, match="unsupported element type"):
        DType.from_numpy(bad)


def test_tensor_type_of_array():
    t = TensorType.of(np.zeros((2, 3, 4), np.int16))
    assert t == TensorType((2, 3, 4), DType.int16)
    assert (t.ndim, t.size, t.nbytes) == (3, 24, 48)
    assert str(t) == "int16[2, 3, 4]"


def test_scalar_and_empty_types():
    s = TensorType((), DType.float32)
    assert (s.ndim, s.size, str(s)) == (0, 1, "float32[]")
    e = TensorType((0, 5), DType.float64)
    assert e.size == 0 and e.nbytes == 0


def test_tensor_type_normalizes_shape_and_dtype():
    t = TensorType([np.int64(2), 3], np.float32)  # type: ignore[arg-type]
    assert t.shape == (2, 3) and isinstance(t.shape[0], int)
    assert t.dtype is DType.float32
    assert hash(t) == hash(TensorType((2, 3), DType.float32))


def test_negative_dimension_rejected():
    with pytest.raises(IRError, match="negative dimension"):
        TensorType((2, -1), DType.float32)


def test_with_shape_and_dtype():
    t = TensorType((2, 3), DType.float32)
    assert t.with_shape([6]) == TensorType((6,), DType.float32)
    assert t.with_dtype(DType.int8) == TensorType((2, 3), DType.int8)
    assert t == TensorType((2, 3), DType.float32)  # unchanged (frozen)
