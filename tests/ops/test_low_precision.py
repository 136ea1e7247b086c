"""Low-precision element types (bfloat16, float8, float4 e2m1, int4/uint4/int2/uint2): Cast and
QuantizeLinear/DequantizeLinear against onnx's reference evaluator (and onnxruntime where it
runs them), the llvm backend leaving such nodes to ``ref``, and artifacts holding them."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from optional import require

import tessera
from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import TesseraError
from tessera.frontend.onnx import import_onnx
from tessera.ir.cast import SUB_BYTE_INTS, convert, widen
from tessera.ir.types import DType
from tessera.topi.registry import unsupported_reason

RNG = np.random.default_rng(20261127)

LOW = [d for d in DType if d.is_low_precision]
STANDARD = [DType.float16, DType.float32, DType.float64, DType.int8, DType.uint8, DType.int32,
            DType.int64, DType.bool]
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def _onnx_type(d: DType) -> int:
    return helper.np_dtype_to_tensor_dtype(d.numpy)


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, DType, list[int]]],
           outputs: list[tuple[str, DType, list[int]]], opset: int = 25,
           inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, _onnx_type(d), s) for n, d, s in inputs],
        [helper.make_tensor_value_info(n, _onnx_type(d), s) for n, d, s in outputs],
        initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=11)


def _tessera(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    fn = import_onnx(model)
    outs = evaluate_function(fn, feeds)
    return [outs[v.name] for v in fn.outputs]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal element types and values (NaN where NaN; floats compared exactly)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g, w = widen(np.asarray(got)), widen(np.asarray(want))
    if g.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.where(np.isnan(g), 0, g), np.where(np.isnan(w), 0, w))
    else:
        np.testing.assert_array_equal(g, w)


def _source_data(d: DType, shape: tuple[int, ...] = (6, 7)) -> np.ndarray:
    """Random values of ``d`` with the edges a cast meets: overflow, ties, NaN, infinities."""
    if d == DType.bool:
        return RNG.integers(0, 2, shape).astype(bool)
    if d.is_float:
        x = (RNG.standard_normal(shape) * 4.0 ** RNG.integers(-6, 12, shape)).astype(np.float64)
        flat = x.reshape(-1)
        flat[:12] = [np.nan, np.inf, -np.inf, 1e6, -1e6, 0.5, 2.5, -3.5, 1e-9, -0.0, 449, 57344]
        return convert(flat.reshape(shape), d) if d.is_low_precision else x.astype(d.numpy)
    if d.is_low_precision:  # sub-byte ints
        return convert(RNG.integers(-8, 16, shape), d)
    info = np.iinfo(d.numpy)
    return RNG.integers(max(info.min, -300), min(info.max, 300), shape, endpoint=True
                        ).astype(d.numpy)


def _oracle_cast(x: np.ndarray, to: DType, saturate: int = 1) -> np.ndarray:
    node = helper.make_node("Cast", ["x"], ["y"], to=_onnx_type(to), saturate=saturate)
    model = _model([node], [("x", DType.from_numpy(x.dtype), list(x.shape))],
                   [("y", to, list(x.shape))])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def _ref_defined(src: DType, to: DType, x: np.ndarray) -> np.ndarray:
    """Where the reference evaluator's result is defined by ONNX and computed by it as ONNX
    says: float to a standard integer out of range is undefined (Tessera saturates, numpy's
    astype differs by platform), and float64 to bfloat16/float8/float4 rounds twice in
    ml_dtypes (see test_float64_narrowing_rounds_once)."""
    keep = np.ones(x.shape, bool)
    if src.is_float and to.is_int:
        w = widen(x).astype(np.float64)
        info = np.iinfo(to.numpy)
        keep &= np.isfinite(w) & (np.trunc(w) >= info.min) & (np.trunc(w) <= info.max)
    return keep


# e8m0 targets: test_cast_to_e8m0 (onnx's reference differs from ONNX's table on some values)
_PAIRS = [(a, b) for a, b in itertools.product(LOW + STANDARD, LOW) if a != b] + \
    [(a, b) for a in LOW for b in STANDARD]


@pytest.mark.parametrize("src,to", [(a, b) for a, b in _PAIRS if b != DType.float8_e8m0fnu])
def test_cast_matches_onnx_reference(src: DType, to: DType) -> None:
    x = _source_data(src)
    if src == DType.float64 and to.is_low_precision and to.is_float:
        x = x.astype(np.float32).astype(np.float64)  # one rounding either way (see below)
    (got,) = _tessera(_model([helper.make_node("Cast", ["x"], ["y"], to=_onnx_type(to))],
                             [("x", src, list(x.shape))], [("y", to, list(x.shape))]), {"x": x})
    if src in SUB_BYTE_INTS and to in SUB_BYTE_INTS:  # ml_dtypes cannot cast these: exact ints
        width, signed = SUB_BYTE_INTS[to]
        v = widen(x).astype(np.int64) & ((1 << width) - 1)
        v = np.where(signed & (v >= 1 << (width - 1)), v - (1 << width), v)
        want = v.astype(np.int8).astype(to.numpy)
    elif src == DType.float8_e8m0fnu and (to in SUB_BYTE_INTS or to == DType.float4_e2m1fn):
        # ml_dtypes has no such direct cast: through float32, which holds every e8m0 value
        want = _oracle_cast(_oracle_cast(x, DType.float32), to)
    else:
        want = _oracle_cast(x, to)
    keep = _ref_defined(src, to, x)
    _same(got[keep], want[keep])


@pytest.mark.parametrize("to", FLOAT8)
@pytest.mark.parametrize("src", ["float32", "float16"])
def test_cast_to_float8_without_saturation(src: str, to: str) -> None:
    x = _source_data(DType(src))
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=_onnx_type(DType(to)),
                                     saturate=0)], [("x", DType(src), list(x.shape))],
                   [("y", DType(to), list(x.shape))])
    (got,) = _tessera(model, {"x": x})
    _same(got, _oracle_cast(x, DType(to), saturate=0))
    big = np.abs(widen(x).astype(np.float64)) > float(ml_dtypes.finfo(DType(to).numpy).max) * 2
    assert np.isnan(widen(got)[big]).all() or to == "float8_e5m2"


@pytest.mark.parametrize("to", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                "float4_e2m1fn", "int4", "uint2"])
def test_cast_round_trip_matches_onnxruntime(to: str) -> None:
    """float32 -> ``to`` -> float32 in onnxruntime (which cannot return these types)."""
    ort = require("onnxruntime")
    x = _source_data(DType.float32)
    x = np.where(np.isfinite(x), x, 1.5).astype(np.float32)
    if DType(to).is_float and not to.startswith("bfloat"):
        x = np.clip(x, -400, 400)  # in range: no NaN/saturation convention involved
    if not DType(to).is_float:
        x = np.trunc(np.clip(x, -8, 15)).astype(np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["q"], to=_onnx_type(DType(to))),
             helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)]
    model = _model(nodes, [("x", DType.float32, list(x.shape))],
                   [("y", DType.float32, list(x.shape))], opset=23)
    try:
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - this onnxruntime lacks the kernel
        pytest.skip(f"onnxruntime cannot run Cast to {to}: {str(e)[:80]}")
    want = sess.run(None, {"x": x})[0]
    (got,) = _tessera(model, {"x": x})
    _same(got, want)


def test_float64_narrowing_rounds_once() -> None:
    """1 + 2**-8 + 2**-30 lies just above the midpoint of two bfloat16 values: rounding it
    to nearest once gives 1 + 2**-7. ml_dtypes (and so onnx's reference) round to float32 first,
    which lands on the midpoint, and then to even: 1.0. Tessera rounds once, as ONNX's Cast
    says (round to nearest)."""
    x = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-4 + 2**-40], np.float64)
    got = widen(convert(x, DType.bfloat16)).astype(np.float64)
    np.testing.assert_array_equal(got[:2], [1 + 2**-7, -(1 + 2**-7)])
    assert widen(x.astype(ml_dtypes.bfloat16))[0] == 1.0  # the double rounding
    assert widen(convert(x[2:], DType.float8_e4m3fn))[0] == 1 + 2**-3


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_e8m0(mode: str, saturate: int) -> None:
    """float -> float8 e8m0 against onnx's reference, on positive normal float32 values (where
    both follow ONNX), and ONNX's table for the special values."""
    x = (RNG.uniform(0.5, 1.0, 64) * 2.0 ** RNG.integers(-120, 120, 64)).astype(np.float32)
    x[:4] = [1.0, 1.5, 0.75, 2.0 ** 100 * 1.25]
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate,
                            round_mode=mode)
    model = _model([node], [("x", DType.float32, [64])], [("y", DType.float8_e8m0fnu, [64])])
    (got,) = _tessera(model, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    _same(got, want)
    special = np.array([0.0, np.nan, np.inf, 2.0 ** 128 * 1.5], np.float32)
    bits = convert(special, DType.float8_e8m0fnu, bool(saturate), mode).view(np.uint8)
    assert bits[1] == 255
    if saturate:
        np.testing.assert_array_equal(bits[[0, 2, 3]], [0, 254, 254])
    else:
        np.testing.assert_array_equal(bits[[0, 2, 3]], [255, 255, 255])


def test_sub_byte_ints_wrap_and_nan_gives_zero() -> None:
    x = np.array([7.9, 8.0, -8.9, -9.0, 17.5, np.nan, np.inf], np.float32)
    np.testing.assert_array_equal(widen(convert(x, DType.int4)), [7, -8, -8, 7, 1, 0, 0])
    np.testing.assert_array_equal(widen(convert(x, DType.uint2)), [3, 0, 0, 3, 1, 0, 0])
    np.testing.assert_array_equal(widen(convert(np.array([300, -129], np.int32), DType.int4)),
                                  [-4, -1])


QUANT = ["int4", "uint4", "int2", "uint2", *FLOAT8, "float4_e2m1fn"]


def _qdq(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, *, axis: int,
         block_size: int, to: DType, opset: int = 25) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(scale, "s")]
    names = ["x", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
        names.append("zp")
    attrs = {"axis": axis, "block_size": block_size}
    if zp is None:
        attrs["output_dtype"] = _onnx_type(to)
    nodes = [helper.make_node("QuantizeLinear", names, ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", *names[1:]], ["y"], axis=axis,
                              block_size=block_size)]
    return _model(nodes, [("x", DType.float32, list(x.shape))],
                  [("q", to, list(x.shape)), ("y", DType.float32, list(x.shape))], opset=opset,
                  inits=inits)


@pytest.mark.parametrize("form", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("to", QUANT)
def test_quantize_dequantize_round_trip(to: str, form: str) -> None:
    dt = DType(to)
    x = RNG.standard_normal((4, 6, 5)).astype(np.float32) * 3
    # out of range (onnx's reference overflows int32 beyond ~2e9, so not further)
    x[0, 0, :3] = [np.nan, 1e5, -1e5] if dt.is_float else [0.5, 1e5, -1e5]
    axis, block = {"tensor": (1, 0), "axis": (1, 0), "blocked": (2, 2)}[form]
    shape = {"tensor": (), "axis": (6,), "blocked": (4, 6, 3)}[form]
    scale = RNG.uniform(0.05, 0.5, shape).astype(np.float32)
    zp = None
    if not dt.is_float and form != "tensor":
        zp = convert(RNG.integers(-1, 2, shape), dt) if to.startswith("int") else \
            convert(RNG.integers(0, 3, shape), dt)
    model = _qdq(x, scale, zp, axis=axis, block_size=block, to=dt)
    got_q, got_y = _tessera(model, {"x": x})
    want_q, want_y = ReferenceEvaluator(model).run(None, {"x": x})
    _same(got_q, want_q)
    _same(got_y, want_y)


def test_dequantize_to_bfloat16_output() -> None:
    x = convert(RNG.integers(-8, 8, (3, 8)), DType.int4)
    scale = RNG.uniform(0.1, 2, (3,)).astype(np.float32)
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=0,
                            output_dtype=TensorProto.BFLOAT16)
    model = _model([node], [("x", DType.int4, [3, 8])], [("y", DType.bfloat16, [3, 8])],
                   inits=[numpy_helper.from_array(scale, "s")])
    (got,) = _tessera(model, {"x": x})
    _same(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


def _bf16_matmul_model(k: int, n: int) -> onnx.ModelProto:
    """``Relu(x @ Cast(w, float32))`` with bfloat16 weights ``w`` as an input (a constant one
    would be folded at import)."""
    nodes = [helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "wf"], ["y"]),
             helper.make_node("Relu", ["y"], ["z"])]
    return _model(nodes, [("x", DType.float32, [5, k]), ("w", DType.bfloat16, [k, n])],
                  [("z", DType.float32, [5, n])], opset=21)


def test_bfloat16_weights_on_llvm_fall_back_to_ref_for_the_cast() -> None:
    require("llvmlite")
    model = _bf16_matmul_model(16, 8)
    feeds = {"x": RNG.standard_normal((5, 16)).astype(np.float32),
             "w": convert(RNG.standard_normal((16, 8)), DType.bfloat16)}
    module = tessera.compile(model, target="llvm")
    backends = {op: r.backend for r in module.report.regions for op in r.ops}
    assert backends.get("Cast") == "ref"
    assert backends.get("MatMul") == "llvm"
    got = module.run(feeds)["z"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(TesseraError, match="bfloat16"):
        module.run({"x": feeds["x"], "w": widen(feeds["w"])})  # float32 where bfloat16 is due


def test_llvm_declines_every_low_precision_operand() -> None:
    fn = import_onnx(_bf16_matmul_model(4, 3))
    cast = next(n for n in fn.nodes if n.op == "Cast")
    assert "bfloat16" in (unsupported_reason(cast) or "")
    matmul = next(n for n in fn.nodes if n.op == "MatMul")
    assert unsupported_reason(matmul) is None


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "int4", "bfloat16", "float8_e5m2"])
def test_artifact_round_trip_with_a_low_precision_constant(tmp_path, dtype: str) -> None:
    dt = DType(dtype)
    w = convert(RNG.integers(-7, 8, (6, 4)), dt) if not dt.is_float else \
        convert(RNG.standard_normal((6, 4)), dt)
    nodes = [helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    model = _model(nodes, [("x", DType.float32, [3, 6])], [("y", DType.float32, [3, 4])], opset=21,
                   inits=[numpy_helper.from_array(w, "w")])
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    module = tessera.compile(model, target="ref")
    path = module.export(tmp_path / "m.tsr")
    loaded = tessera.load(path)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    for m in (module, loaded):
        got = m.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_float8_tensor_fed_to_an_int_op_is_a_clear_error() -> None:
    x = convert(RNG.standard_normal((2, 3)), DType.float8_e4m3fn)
    model = _model([helper.make_node("BitwiseNot", ["x"], ["y"])],
                   [("x", DType.float8_e4m3fn, [2, 3])], [("y", DType.float8_e4m3fn, [2, 3])],
                   opset=18)
    with pytest.raises(TesseraError, match="float8_e4m3fn"):
        _tessera(model, {"x": x})
