"""``tessera.quantize(..., scheme="cpu")``: any scale, per-channel int8 weights, symmetric int8 or
asymmetric uint8 activations, min-max / percentile / entropy calibration. The files run in
the numpy reference close to the float model and in Tessera's llvm backend as in the
reference; the scales,
zero points and integer weights and biases are what the definitions give; the calibration
methods find the ranges known distributions have; the CLI takes the options and refuses them
for the vta scheme."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import require

import tessera
from tessera.cli.main import main
from tessera.quantization import QuantizeError, quantize_model
from tessera.quantization.qdq import insert_qdq, plan_layers
from tessera.quantization.ranges import BINS, calibrate_ranges, entropy_threshold
from tessera.quantization.scales import affine_params
from tessera.testing.quant_models import float_cnn

ort = require("onnxruntime")


@pytest.fixture
def model() -> onnx.ModelProto:
    return float_cnn(np.random.default_rng(0))


@pytest.fixture
def calib() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((48, 3, 8, 8)).astype(np.float32)}


def _dq_nodes(q: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    """DequantizeLinear nodes of constants, by the constant's name."""
    inits = {t.name for t in q.graph.initializer}
    return {n.input[0]: n for n in q.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] in inits}


def _array(q: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in q.graph.initializer if t.name == name)


def _axis(node: onnx.NodeProto) -> int | None:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"),
                None)


def _ort(q: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(q.SerializeToString()).run(None, {"x": x})[0]


def _onnx_reference(q: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The QDQ file's own arithmetic, by Tessera's numpy reference backend (ONNX's
    ReferenceEvaluator has no DequantizeLinear of opset 13). onnxruntime is no oracle for it
    on every CPU: without VNNI its 8-bit kernels multiply with vpmaddubsw, whose int16 pair
    sums saturate, and the outputs of these files move by 15% of their range on an
    AVX2-only AMD EPYC (with VNNI they are exact, and Tessera's equal them)."""
    return tessera.compile(q, "ref", input_shapes={"x": list(x.shape)}).run(x=x)["y"]


@pytest.mark.parametrize("symmetric", [True, False])
def test_every_layer_per_channel_close_to_float_and_tessera_as_the_reference(
        model, calib, symmetric: bool) -> None:
    q, report = quantize_model(model, calib, scheme="cpu", symmetric=symmetric)
    assert [name for name, _ in report.quantized] == ["conv1", "conv2", "fc1", "fc2"]
    assert not report.kept_float
    x = np.random.default_rng(2).standard_normal((16, 3, 8, 8)).astype(np.float32)
    want, got = _ort(model, x), _onnx_reference(q, x)
    assert np.abs(got - want).max() <= 0.06 * np.abs(want).max()
    mod = tessera.compile(q, "llvm", input_shapes={"x": list(x.shape)})
    np.testing.assert_allclose(mod.run(x=x)["y"], got, rtol=0, atol=1e-5 * np.abs(got).max())


def test_weights_are_int8_per_output_channel_and_biases_int32_at_their_scales(
        model, calib) -> None:
    q, report = quantize_model(model, calib, scheme="cpu")
    dq = _dq_nodes(q)
    floats = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    # (layer, float weight, its output-channel axis, bias)
    for layer, w_name, axis, b_name in [("conv1", "w1", 0, "b1"), ("conv2", "w2", 0, "b2"),
                                        ("fc1", "w3", 0, "b3"), ("fc2", "w4", 1, None)]:
        node = dq[f"{layer}_weight_quantized"]
        assert _axis(node) == axis
        wq, scales = _array(q, node.input[0]), _array(q, node.input[1])
        w = floats[w_name].astype(np.float64)
        assert wq.dtype == np.int8 and scales.shape == (w.shape[axis],)
        others = tuple(i for i in range(w.ndim) if i != axis)
        np.testing.assert_allclose(scales, np.abs(w).max(axis=others) / 127, rtol=1e-6)
        shape = [1] * w.ndim
        shape[axis] = -1
        s = scales.astype(np.float64).reshape(shape)
        np.testing.assert_array_equal(wq, np.clip(np.rint(w / s), -128, 127))
        assert np.abs(wq.max(axis=others)).max() == 127 or np.abs(wq).max() == 127
        if b_name is not None:
            bnode = dq[f"{layer}_bias_quantized"]
            bq, bs = _array(q, bnode.input[0]), _array(q, bnode.input[1])
            x_scale = report.activations[report_input(layer)][0]
            assert bq.dtype == np.int32
            np.testing.assert_allclose(bs, x_scale * scales.astype(np.float64), rtol=1e-6)
            np.testing.assert_array_equal(
                bq, np.rint(floats[b_name].astype(np.float64) / (np.float32(x_scale) *
                                                                scales.astype(np.float64))))


def report_input(layer: str) -> str:
    return {"conv1": "x", "conv2": "r1", "fc1": "f", "fc2": "r3"}[layer]


def test_activations_symmetric_int8_or_asymmetric_uint8_with_zero_points(model, calib) -> None:
    x = calib["x"]
    _, sym = quantize_model(model, calib, scheme="cpu")
    scale, zero, dtype = sym.activations["x"]
    assert (zero, dtype) == (0, "int8")
    assert scale == pytest.approx(float(np.abs(x).max()) / 127, rel=1e-6)
    _, asym = quantize_model(model, calib, scheme="cpu", symmetric=False)
    scale, zero, dtype = asym.activations["x"]
    assert dtype == "uint8" and 0 < zero < 255
    assert scale == pytest.approx((float(x.max()) - float(x.min())) / 255, rel=1e-6)
    # 0.0 is exactly representable, the extremes within half a step
    assert zero == round(-float(x.min()) / scale)
    assert abs((0 - zero) * scale - x.min()) <= scale / 2 + 1e-6
    # after a Relu the range starts at 0: zero point 0
    assert asym.activations["r1"][1] == 0


def test_affine_params_edges() -> None:
    assert affine_params(0.0, 0.0, True) == (1.0, 0, np.int8)
    assert affine_params(0.0, 0.0, False) == (1.0, 0, np.uint8)
    assert affine_params(1.0, 3.0, False)[1] == 0  # the range is widened to include 0
    s, z, _ = affine_params(-3.0, -1.0, False)
    assert z == 255 and s == pytest.approx(3.0 / 255)
    with pytest.raises(ValueError, match="range"):
        affine_params(float("nan"), 1.0, True)


def _identity_model() -> onnx.ModelProto:
    """y = x @ I (one quantizable layer reading x), to calibrate x's range."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "id",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_percentile_and_entropy_clip_an_outlier_that_minmax_keeps() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20000, 4)).astype(np.float32)
    x[7, 2] = 100.0
    m = _identity_model()
    minmax = calibrate_ranges(m, ["x"], {"x": x}, "minmax", batch_size=4096)["x"]
    assert minmax == pytest.approx((-100.0, 100.0))
    pct = calibrate_ranges(m, ["x"], {"x": x}, "percentile", percentile=99.9,
                           batch_size=4096)["x"]
    # the 99.9th percentile of |N(0, 1)| is 3.29; one bin is 100 / 2048 wide
    assert pct[1] == pytest.approx(3.29, abs=0.15) and pct[0] == -pct[1]
    ent = calibrate_ranges(m, ["x"], {"x": x}, "entropy", batch_size=4096)["x"]
    # the search starts at 128 of the 2048 bins over [0, 100]: 6.25 at the least
    assert 2.5 < ent[1] <= 128 * 100 / BINS + 1e-9 and ent[0] == -ent[1]
    low, high = calibrate_ranges(m, ["x"], {"x": x}, "percentile", symmetric=False,
                                 percentile=99.9, batch_size=4096)["x"]
    # the 0.1th and 99.9th percentiles of N(0, 1): -+3.09
    assert low == pytest.approx(-3.09, abs=0.15) and high == pytest.approx(3.09, abs=0.15)
    # an iterable of batches (read twice for the histograms) gives the same ranges
    batches = iter([{"x": x[:10000]}, {"x": x[10000:]}])
    assert calibrate_ranges(m, ["x"], batches, "percentile", percentile=99.9)["x"] == pct


def test_entropy_keeps_the_whole_range_of_a_uniform_distribution() -> None:
    rng = np.random.default_rng(4)
    a = np.abs(rng.uniform(-2.0, 2.0, 100000))
    edges = np.linspace(0.0, a.max(), BINS + 1)
    hist = np.histogram(a, edges)[0]
    assert entropy_threshold(hist, edges) == pytest.approx(a.max(), rel=0.02)


def test_the_vta_scheme_refuses_the_cpu_options(model, calib) -> None:
    with pytest.raises(QuantizeError, match="options of the cpu scheme"):
        quantize_model(model, calib, method="entropy")
    with pytest.raises(QuantizeError, match="unknown quantization scheme 'gpu'"):
        quantize_model(model, calib, scheme="gpu")
    with pytest.raises(QuantizeError, match="unknown calibration method"):
        quantize_model(model, calib, scheme="cpu", method="mse")


def test_an_older_opset_is_converted_for_per_channel_weights(calib) -> None:
    """Per-channel weights need opset 13: an opset-11 model is converted (ONNX's version
    converter) and runs as before; per-tensor weights keep its opset."""
    old = float_cnn(np.random.default_rng(0))
    old.opset_import[0].version = 11  # its ops read the same at opset 11
    q, _ = quantize_model(old, calib, scheme="cpu")
    assert q.opset_import[0].version == 13
    assert all(_axis(n) is not None for k, n in _dq_nodes(q).items() if "weight" in k)
    x = np.random.default_rng(5).standard_normal((4, 3, 8, 8)).astype(np.float32)
    want = _ort(old, x)
    assert np.abs(_onnx_reference(q, x) - want).max() <= 0.06 * np.abs(want).max()
    q, _ = quantize_model(old, calib, scheme="cpu", per_channel=False)
    assert q.opset_import[0].version == 11
    assert all(_axis(n) is None for n in _dq_nodes(q).values())
    # insert_qdq itself refuses per-channel weights below opset 13
    with pytest.raises(QuantizeError, match="per-channel weights needs opset 13"):
        plan = plan_layers(old.graph, False, False)
        insert_qdq(old, plan, dict.fromkeys(plan.tensors(), 0.1), "per_channel")


def test_cli_cpu_scheme(tmp_path: Path, model, calib, capsys) -> None:
    src, out = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    np.savez(tmp_path / "calib.npz", **calib)
    code = main(["quantize", str(src), "--calibration", str(tmp_path / "calib.npz"),
                 "--scheme", "cpu", "--method", "percentile", "--percentile", "99.9",
                 "--asymmetric", "-o", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "per-channel weights, asymmetric uint8 activations, percentile 99.9 calibration" \
        in text and "(uint8)" in text
    q = onnx.load(str(out))
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) == 6
    code = main(["quantize", str(src), "--calibration", str(tmp_path / "calib.npz"),
                 "--method", "entropy", "-o", str(tmp_path / "v.onnx")])
    assert code != 0 and "--method: options of --scheme cpu" in capsys.readouterr().err
