"""The BitCast compute (tessera.topi.bitcast): integer reinterpretations against the op's numpy
reference (exact), and the bit casts it declines (floats, to bool)."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import check_op, one_node, rand

from tessera.topi.registry import unsupported_reason

PAIRS = [("int8", "uint8"), ("uint8", "int8"), ("int16", "uint16"), ("uint16", "int16"),
         ("int32", "uint32"), ("uint32", "int32"), ("int64", "uint64"), ("uint64", "int64"),
         ("bool", "uint8"), ("bool", "int8")]


@pytest.mark.parametrize("src,to", PAIRS)
def test_integer_bitcast_matches_reference(src: str, to: str) -> None:
    for shape in [(7,), (2, 3, 5), ()]:
        x = rand(*shape, dtype=src, lo=-1000, hi=1000)
        check_op("BitCast", [x], {"to": to}, rtol=0, atol=0)


@pytest.mark.parametrize("src,to", [("float32", "int32"), ("int32", "float32"),
                                    ("float16", "uint16"), ("uint8", "bool"),
                                    ("int8", "bool")])
def test_other_bitcasts_have_no_compute(src: str, to: str) -> None:
    x = np.zeros(3, dtype=src)
    _, node = one_node("BitCast", [x], {"to": to})
    assert "not an integer conversion" in (unsupported_reason(node) or "")
