"""``tessera.quantize``: float ONNX -> int8 QDQ ONNX with power-of-two scales; calibration on
the reference interpreter; the digits demo on vta_sim; onnxruntime's QDQ models; the CLI."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import require

import tessera
from tessera.cli.main import main
from tessera.errors import ModelImportError
from tessera.plugin import get_backends
from tessera.quantization import QuantizeError, calibrate, pow2_scale, quantize_model
from tessera.quantization.qdq import plan_layers
from tessera.testing.quant_models import float_cnn

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"
needs_vta = pytest.mark.skipif("vta_sim" not in get_backends(),
                               reason="the tessera-vta plugin is not installed")


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def is_pow2(x: float) -> bool:
    m, _ = math.frexp(float(x))
    return m == 0.5


@pytest.mark.parametrize("max_abs, scale", [(127.0, 1.0), (127.5, 2.0), (1.0, 2.0**-6),
                                            (0.99, 2.0**-7), (3e-3, 2.0**-15), (0.0, 1.0)])
def test_pow2_scale_covers_the_maximum(max_abs, scale):
    assert pow2_scale(max_abs) == scale
    assert max_abs / pow2_scale(max_abs) <= 127


def test_calibration_records_max_abs_per_tensor(rng):
    model = float_cnn(rng)
    x = rng.standard_normal((10, 3, 8, 8)).astype(np.float32)
    maxima = calibrate(model, ["r1", "f", "y"], {"x": x}, batch_size=4)  # 3 batches
    ort = require("onnxruntime")

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in ("r1", "f"):
        probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString())
    outs = dict(zip(["y", "r1", "f"], session.run(["y", "r1", "f"], {"x": x})))
    for name, value in outs.items():
        assert maxima[name] == pytest.approx(float(np.abs(value).max()), rel=1e-5)


def test_calibration_data_errors(rng):
    model = float_cnn(rng)
    with pytest.raises(QuantizeError, match="it lacks x"):
        calibrate(model, ["r1"], {"image": np.zeros((2, 3, 8, 8), np.float32)})
    # an array that is no input of the model is ignored with one warning, as tessera run does
    data = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    with pytest.warns(UserWarning, match="'extra' are not inputs of the model .x.; they are "
                                         "ignored"):
        with_extra = calibrate(model, ["r1"], {"x": data, "extra": data})
    assert with_extra == calibrate(model, ["r1"], {"x": data})
    with pytest.raises(QuantizeError, match="not values of the imported model"):
        calibrate(model, ["nope"], rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    with pytest.raises(QuantizeError, match="is float64"):
        calibrate(model, ["r1"], {"x": np.zeros((2, 3, 8, 8))})


def static_cnn(rng: np.random.Generator, batch: int = 1, side: int = 32) -> onnx.ModelProto:
    """The float CNN's first two layers with a fixed input shape [batch, 3, side, side]."""
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((4, 8, 3, 3)) * 0.3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])],
        "static", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, side, side])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_calibration_of_another_shape_is_refused(rng, tmp_path, capsys):
    """Calibration data 1x3x28x28 for a model fixed at 1x3x32x32 would calibrate (and write
    the scales of) a different model: refused, naming the input and both shapes, by the
    Python API (arrays or batches) and by ``tessera quantize``."""
    model = static_cnn(rng)
    small = rng.standard_normal((1, 3, 28, 28)).astype(np.float32)
    want = r"calibration input 'x' has shape \[1, 3, 28, 28\], but the model's input 'x' has " \
           r"shape \[1, 3, 32, 32\] \(dimension 2 is 28, not 32, dimension 3 is 28, not 32\)"
    with pytest.raises(QuantizeError, match=want):
        quantize_model(model, {"x": small})
    with pytest.raises(QuantizeError, match="has a batch of shape \\[1, 3, 28, 28\\]"):
        quantize_model(model, [{"x": small}], skip_first_conv=False)
    with pytest.raises(QuantizeError, match=r"has shape \[4, 3, 32\], .* \(rank 3, not 4\)"):
        quantize_model(model, {"x": np.zeros((4, 3, 32), np.float32)})
    # the right shape (several samples along axis 0 for the fixed batch of 1) quantizes
    quantize_model(model, {"x": rng.standard_normal((3, 3, 32, 32)).astype(np.float32)},
                   skip_first_conv=False)
    src, calib = tmp_path / "static.onnx", tmp_path / "calib.npz"
    onnx.save(model, str(src))
    np.savez(calib, x=small)
    out = tmp_path / "q.onnx"
    code = main(["quantize", str(src), "--calibration", str(calib), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and not out.exists()
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "calibration input 'x' has shape [1, 3, 28, 28]" in line and \
        "[1, 3, 32, 32]" in line


def test_quantize_writes_power_of_two_qdq(rng):
    model = float_cnn(rng)
    calib = rng.standard_normal((16, 3, 8, 8)).astype(np.float32)
    q, report = quantize_model(model, {"x": calib})
    assert [name for name, _ in report.quantized] == ["conv2", "fc1"]
    kept = {name: why for name, _, why in report.kept_float}
    assert "first convolution" in kept["conv1"] and "classifier" in kept["fc2"]
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("QuantizeLinear") == 4  # r1, r2, f, r3
    # per layer: one input DQ + weight DQ + bias DQ; shared DQs of r2 (MaxPool) and r3 (fc2)
    assert ops.count("DequantizeLinear") == 2 * 3 + 2
    inits = initializers(q)
    for node in q.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            scale, zero = inits[node.input[1]], inits[node.input[2]]
            assert scale.shape == () and is_pow2(scale) and zero == 0
            assert zero.dtype in (np.int8, np.int32)
    assert inits["conv2_weight_quantized"].dtype == np.int8
    assert inits["fc1_bias_quantized"].dtype == np.int32
    assert "w2" not in inits and "w1" in inits  # float weights of quantized layers are gone
    # the flattened pool output keeps relu2's scale (MaxPool and Flatten only move values)
    assert report.scales["f"] == report.scales["r2"]
    assert all(is_pow2(s) for s in report.scales.values())
    onnx.checker.check_model(q)
    assert "conv2" in report.summary() and "2^" in report.summary()


def test_quantized_model_matches_onnxruntime(rng):
    ort = require("onnxruntime")

    model = float_cnn(rng)
    q = tessera.quantize(model, rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    x = rng.standard_normal((6, 3, 8, 8)).astype(np.float32)
    ours = tessera.compile(q, target="ref", input_shapes={"x": [6, 3, 8, 8]}).run(x=x)["y"]
    theirs = ort.InferenceSession(q.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    floats = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert np.abs(ours - floats).max() < 0.1 * np.abs(floats).max()  # int8 stays close


def test_quantize_options(rng):
    model = float_cnn(rng)
    calib = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    _, report = quantize_model(model, {"x": calib}, skip_first_conv=False,
                               skip_last_dense=False, exclude=["fc1"])
    assert [n for n, _ in report.quantized] == ["conv1", "conv2", "fc2"]
    with pytest.raises(QuantizeError, match="exclude names node.*nope"):
        quantize_model(model, {"x": calib}, exclude=["nope"])
    plan = plan_layers(model.graph)
    assert [layer.output for layer in plan.layers] == ["r2", "r3"]  # Relu outputs
    with pytest.raises(ModelImportError):
        tessera.quantize(ROOT / "no_such_model.onnx", calib)


@needs_vta
def test_quantized_layers_run_on_vta_bit_exact(rng):
    q = tessera.quantize(float_cnn(rng), rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    mod = tessera.compile(q, target="vta_sim, ref", input_shapes={"x": [4, 3, 8, 8]})
    vta = [r for r in mod.partition_report().regions if r.backend == "vta_sim"]
    # the dense layer in its integer form (the QDQToInteger pass)
    assert sorted(op for r in vta for op in r.ops if op in ("Conv", "Gemm", "MatMulInteger")) \
        == ["Conv", "MatMulInteger"]
    want = tessera.compile(q, target="ref", input_shapes={"x": [4, 3, 8, 8]}).run(x=x)["y"]
    np.testing.assert_array_equal(mod.run(x=x)["y"], want)


@needs_vta
def test_digits_demo_keeps_its_accuracy_on_vta():
    """The demo CNN quantized on 60 test images, evaluated on the other 300 (batch 300)."""
    with np.load(DIGITS / "digits_test.npz", allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    calib, test, truth = images[:60], images[60:], labels[60:]
    q, report = quantize_model(DIGITS / "digits_cnn.onnx", {"image": calib})
    assert [n for n, _ in report.quantized] == ["conv2", "fc1"]
    shapes = {"image": list(test.shape)}
    float_acc = float((tessera.compile(DIGITS / "digits_cnn.onnx", target="ref",
                                       input_shapes=shapes).run(image=test)["logits"]
                       .argmax(1) == truth).mean())
    mod = tessera.compile(q, target="vta_sim, ref", input_shapes=shapes)
    logits = mod.run(image=test)["logits"]
    vta_acc = float((logits.argmax(1) == truth).mean())
    print(f"\ndigits: float accuracy {float_acc:.4f}, int8 on vta_sim {vta_acc:.4f}")
    assert vta_acc >= float_acc - 0.02
    assert len([r for r in mod.partition_report().regions if r.backend == "vta_sim"]) == 2
    ref = tessera.compile(q, target="ref", input_shapes=shapes).run(image=test)["logits"]
    np.testing.assert_array_equal(logits, ref)


@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
def test_onnxruntime_qdq_models_import_and_run(activation, rng, tmp_path):
    require("onnxruntime")
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    with np.load(DIGITS / "digits_test.npz", allow_pickle=False) as data:
        images = data["images"]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"image": images[i:i + 20]} for i in range(0, 60, 20)])

        def get_next(self):  # type: ignore[no-untyped-def]
            return next(self.batches, None)

    out = tmp_path / "ort_qdq.onnx"
    quantize_static(str(DIGITS / "digits_cnn.onnx"), str(out), Reader(),
                    quant_format=QuantFormat.QDQ, activation_type=getattr(QuantType, activation),
                    weight_type=QuantType.QInt8)
    test = images[60:100]
    target = "vta_sim, ref" if "vta_sim" in get_backends() else "ref"
    mod = tessera.compile(out, target=target, input_shapes={"image": list(test.shape)})
    # arbitrary (not power-of-two) scales, and uint8 activations: VTA claims nothing
    assert {r.backend for r in mod.partition_report().regions} == {"ref"}
    ort = require("onnxruntime")

    # The QDQ model as ONNX defines it (DequantizeLinear -> float op -> QuantizeLinear), which
    # Tessera matches: onnxruntime with basic optimizations runs it so. Its full optimizations
    # fuse QDQ into integer kernels that, for uint8 (also int8, turned into uint8) activations
    # with int8 weights, saturate on x86 CPUs without VNNI (see tests/ops/test_quant.py,
    # ort_is_exact), up to 0.68 off here.
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    want = ort.InferenceSession(str(out), opts, providers=["CPUExecutionProvider"]).run(
        None, {"image": test})[0]
    np.testing.assert_allclose(mod.run(image=test)["logits"], want, atol=1e-4)


def test_cli_quantize(tmp_path, capsys):
    with np.load(DIGITS / "digits_test.npz", allow_pickle=False) as data:
        np.savez(tmp_path / "calib.npz", image=data["images"][:32])
    out = tmp_path / "q.onnx"
    code = main(["quantize", str(DIGITS / "digits_cnn.onnx"), "--calibration",
                 str(tmp_path / "calib.npz"), "-o", str(out), "--exclude", "fc1"])
    assert code == 0
    stdout = capsys.readouterr().out
    assert "conv2 (Conv)" in stdout and "fc1 (Gemm): excluded" in stdout
    q = onnx.load(str(out))
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) == 2
    assert main(["quantize", str(DIGITS / "digits_cnn.onnx"), "--calibration",
                 str(tmp_path / "missing.npz"), "-o", str(out)]) == 1
    assert "does not exist" in capsys.readouterr().err
