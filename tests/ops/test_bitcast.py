"""BitCast (tessera.ops.bitcast) and its ONNX converter: every pair of element types of one bit
width on random bit patterns, checked against onnx's reference evaluator (onnxruntime has no
BitCast yet) and against exact known bit patterns; pairs of different widths are refused.
Compiled for ``ref`` and ``llvm`` (llvm claims the integer-to-integer casts; the rest fall
back to ref)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.errors import ModelImportError, OpError
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.ir.types import DType, TensorType
from tessera.ops.bitcast import bit_width, bitcast
from tessera.ops.registry import get_schema
from tessera.testing.conformance import compile_and_run


def _onnx_codes() -> dict[DType, int]:
    codes: dict[DType, int] = {}
    for code in onnx.TensorProto.DataType.values():
        try:
            codes.setdefault(onnx_dtype(code, "type"), code)
        except ModelImportError:
            pass
    return codes


ONNX_CODE = _onnx_codes()
SAME_WIDTH = [(a, b) for a, b in itertools.product(DType, DType)
              if a != b and bit_width(a) == bit_width(b)]
OTHER_WIDTH = [(a, b) for a, b in itertools.product(DType, DType) if bit_width(a) != bit_width(b)]


def bitcast_model(src: DType, to: DType, shape: tuple[int, ...], chain: DType | None = None
                  ) -> onnx.ModelProto:
    """x (src) -> BitCast(to) [-> BitCast(chain)] -> y."""
    nodes = [helper.make_node("BitCast", ["x"], ["y" if chain is None else "mid"],
                              to=ONNX_CODE[to])]
    if chain is not None:
        nodes.append(helper.make_node("BitCast", ["mid"], ["y"], to=ONNX_CODE[chain]))
    graph = helper.make_graph(
        nodes, "bitcast", [helper.make_tensor_value_info("x", ONNX_CODE[src], list(shape))],
        [helper.make_tensor_value_info("y", ONNX_CODE[chain or to], list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)], ir_version=10)


def random_bits(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Random bit patterns of ``dtype`` (NaNs and infinities included for the floats); bools
    are 0 or 1."""
    if dtype == DType.bool:
        return rng.random(shape) < 0.5
    width = bit_width(dtype)
    if width < 8:  # ml_dtypes keeps a sub-byte element in the low bits of its byte
        return rng.integers(0, 1 << width, shape, dtype=np.uint8).view(dtype.numpy)
    raw = rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8)
    return raw.view(dtype.numpy).reshape(shape)


def run(model: onnx.ModelProto, x: np.ndarray, target: str) -> np.ndarray:
    (out,) = compile_and_run(model, {"x": x}, target, {})
    return out


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8),
                                  np.ascontiguousarray(want).view(np.uint8))


# -- every pair of one width against onnx's reference -------------------------------------------

@pytest.mark.parametrize("src,to", SAME_WIDTH, ids=[f"{a}-{b}" for a, b in SAME_WIDTH])
def test_every_same_width_pair(src, to):
    rng = np.random.default_rng(len(str(src)) * 31 + len(str(to)))
    for shape in [(), (7,), (3, 4, 5)]:
        x = random_bits(rng, src, shape)
        model = bitcast_model(src, to, shape)
        got = run(model, x, "ref")
        assert got.dtype == to.numpy
        same_bits(got, x.view(to.numpy))  # the bits, unchanged
        if bit_width(src) >= 8 and to != DType.bool:
            same_bits(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("src,to", [
    (DType.int32, DType.uint32), (DType.int8, DType.uint8), (DType.uint64, DType.int64),
    (DType.uint16, DType.int16), (DType.bool, DType.uint8), (DType.bool, DType.int8),
    (DType.float32, DType.int32), (DType.int64, DType.float64), (DType.uint16, DType.float16),
    (DType.uint8, DType.bool),
])
@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 17)])
def test_llvm(src, to, shape):
    rng = np.random.default_rng(17)
    x = random_bits(rng, src, shape)
    model = bitcast_model(src, to, shape)
    same_bits(run(model, x, "llvm"), ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_llvm_claims_integer_casts_only():
    """llvm runs the integer reinterpretations itself; float ones fall back to ref."""
    x = np.arange(-6, 6, dtype=np.int32)
    report = tessera.compile(bitcast_model(DType.int32, DType.uint32, (12,)), target="llvm",
                             input_shapes={"x": [12]}).partition_report()
    assert "nodes per backend: llvm: 1" in str(report)
    mod = tessera.compile(bitcast_model(DType.int32, DType.float32, (12,)), target="llvm",
                          input_shapes={"x": [12]})
    assert "nodes per backend: ref: 1" in str(mod.partition_report())
    same_bits(mod.run(x=x)["y"], x.view(np.float32))


@pytest.mark.parametrize("target", ["ref", "llvm"])
def test_round_trip_keeps_nan_payloads(target):
    """int32 -> float32 -> int32 returns every pattern, NaN payloads and signalling NaNs too."""
    rng = np.random.default_rng(3)
    x = rng.integers(-2 ** 31, 2 ** 31, 200, dtype=np.int64).astype(np.int32)
    x[:4] = [0x7F800001, 0x7FC00001, -1, 0x7F800000]  # sNaN, qNaN with payload, NaN, inf
    model = bitcast_model(DType.int32, DType.float32, (200,), chain=DType.int32)
    np.testing.assert_array_equal(run(model, x, target), x)


# -- known bit patterns ---------------------------------------------------------------------------

@pytest.mark.parametrize("value,src,to,want", [
    (1.0, DType.float32, DType.int32, 0x3F800000),
    (-0.0, DType.float32, DType.uint32, 0x80000000),
    (-2.5, DType.float64, DType.uint64, 0xC004000000000000),
    (1.0, DType.float16, DType.uint16, 0x3C00),
    (1.5, DType.bfloat16, DType.uint16, 0x3FC0),
    (-1, DType.int8, DType.uint8, 255),
    (True, DType.bool, DType.uint8, 1),
    (-1, DType.int4, DType.uint4, 15),
    (7, DType.uint4, DType.float4_e2m1fn, 6.0),  # 0b0111 is e2m1's largest value
    (-1, DType.int2, DType.uint2, 3),
])
def test_known_patterns(value, src, to, want):
    x = np.array(value, dtype=src.numpy)
    got = run(bitcast_model(src, to, ()), x, "ref")
    assert got.shape == () and got.dtype == to.numpy
    assert got == np.array(want, dtype=to.numpy)
    assert bitcast(x, to=to) == np.array(want, dtype=to.numpy)


def test_same_type_is_the_input():
    x = np.random.default_rng(0).standard_normal(6).astype(np.float32)
    np.testing.assert_array_equal(run(bitcast_model(DType.float32, DType.float32, (6,)), x,
                                      "ref"), x)


# -- refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("src,to", OTHER_WIDTH[::7], ids=[f"{a}-{b}" for a, b in OTHER_WIDTH[::7]])
def test_different_widths_are_refused_on_import(src, to):
    model = bitcast_model(src, to, (3,))
    with pytest.raises(ModelImportError, match="must have the same bit width") as e:
        tessera.compile(model, target="ref")
    assert "BitCast" in str(e.value) and f"{bit_width(src)} bits" in str(e.value)


def test_every_different_width_pair_is_refused_by_the_op():
    schema = get_schema("BitCast")
    for src, to in OTHER_WIDTH:
        with pytest.raises(OpError, match="same bit width"):
            schema.infer_types("bc", [TensorType((2,), src)], {"to": to})
        with pytest.raises(OpError, match="same bit width"):
            bitcast(np.zeros(2, src.numpy), to=to)
