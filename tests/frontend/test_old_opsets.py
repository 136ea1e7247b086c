"""Models of opsets before 7 (upgraded with onnx's version converter) and the checker
complaints imported as warnings (an attribute a later version of the op defines).

onnxruntime has no kernels for the legacy forms of Add (``broadcast``/``axis``) and
BatchNormalization (``is_test``, ``consumed_inputs``), so the legacy model is checked
against numpy written from the opset-1/6 specs, and against onnxruntime on the model onnx's
converter makes; a model of old ops onnxruntime does run (Conv-1, LRN-1, Relu-6, MaxPool-1,
Transpose-1, Reshape-1 and -5, Softmax-1) is checked against onnxruntime directly.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.api import partition_model
from tessera.cli.main import main
from tessera.errors import ModelImportError
from tessera.frontend.onnx import import_onnx
from tessera.frontend.onnx.lenient import LenientImportWarning
from tessera.frontend.onnx.upgrade import OldOpsetWarning, upgrade_old_opset
from tessera.plugin.manager import get_backends
from tests.optional import require

ort = require("onnxruntime")


def _targets() -> list[Any]:
    return [t if t in get_backends() else
            pytest.param(t, marks=pytest.mark.skip(reason=f"backend {t} not installed"))
            for t in ("ref", "llvm")]


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, list[Any]]],
           outputs: dict[str, tuple[int, list[Any]]], inits: dict[str, np.ndarray],
           opset: int, ir_version: int) -> onnx.ModelProto:
    """A model; at IR 3 its initializers are graph inputs too (as IR 3 requires)."""
    vi = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()]
    if ir_version < 4:
        vi += [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                             list(v.shape)) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "legacy", vi,
                              [helper.make_tensor_value_info(n, t, s)
                               for n, (t, s) in outputs.items()],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _legacy(opset: int, n: int, c: int, hw: int,
            rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Add (legacy broadcast of a [C] bias from axis 1), BatchNormalization (``is_test``;
    ``consumed_inputs`` before 6), Relu, Reshape (the ``shape`` attribute before 5) and
    Softmax-1 (coerced to 2-D), at ``opset``."""
    inits = {"bias": rng.standard_normal(c).astype(np.float32),
             "scale": rng.standard_normal(c).astype(np.float32),
             "beta": rng.standard_normal(c).astype(np.float32),
             "mean": rng.standard_normal(c).astype(np.float32),
             "var": rng.uniform(0.5, 2.0, c).astype(np.float32)}
    bn: dict[str, Any] = {"epsilon": 1e-3, "is_test": 1}
    relu: dict[str, Any] = {}
    if opset < 6:
        bn["consumed_inputs"] = [0, 0, 0, 1, 1]
        relu["consumed_inputs"] = [0]
    if opset < 5:
        reshape = helper.make_node("Reshape", ["r"], ["flat"], name="flatten", shape=[n, -1])
    else:
        inits["shape"] = np.array([n, -1], np.int64)
        reshape = helper.make_node("Reshape", ["r", "shape"], ["flat"], name="flatten")
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"], name="bias_add", broadcast=1, axis=1),
             helper.make_node("BatchNormalization", ["a", "scale", "beta", "mean", "var"],
                              ["b"], name="bn", **bn),
             helper.make_node("Relu", ["b"], ["r"], name="relu", **relu),
             reshape,
             helper.make_node("Softmax", ["flat"], ["y"], name="softmax", axis=1)]
    model = _model(nodes, {"x": (TensorProto.FLOAT, [n, c, hw, hw])},
                   {"y": (TensorProto.FLOAT, [n, c * hw * hw])}, inits, opset, ir_version=3)
    return model, inits


def _legacy_numpy(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    """The opset-1/6 semantics of :func:`_legacy`, in float64."""
    def per_channel(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float64)[None, :, None, None]

    a = x.astype(np.float64) + per_channel(p["bias"])
    b = ((a - per_channel(p["mean"])) / np.sqrt(per_channel(p["var"]) + 1e-3)
         * per_channel(p["scale"]) + per_channel(p["beta"]))
    flat = np.maximum(b, 0).reshape(x.shape[0], -1)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the "opset before 7" notice
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _upgraded_quietly(model: onnx.ModelProto) -> onnx.ModelProto:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OldOpsetWarning)
        return upgrade_old_opset(model)


def _compiled(model: Any, target: str, **kwargs: Any) -> Any:
    with pytest.warns(OldOpsetWarning) as record:
        module = tessera.compile(model, target, **kwargs)
    return module, record


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize(("opset", "n", "c", "hw"), [(1, 2, 3, 4), (4, 1, 5, 3),
                                                     (5, 3, 4, 2), (6, 2, 6, 5)])
def test_legacy_model_is_upgraded_and_matches(target: str, opset: int, n: int, c: int,
                                              hw: int) -> None:
    rng = np.random.default_rng(opset * 100 + c)
    model, params = _legacy(opset, n, c, hw, rng)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    module, record = _compiled(model, target)
    texts = [str(w.message) for w in record]
    assert any(f"default-domain opset {opset}" in t and "upgraded it to opset 7" in t
               for t in texts), texts
    assert record[0].filename == __file__  # it points at the caller's line
    got = module.run(x=x)["y"]
    np.testing.assert_allclose(got, _legacy_numpy(x, params), rtol=1e-5, atol=1e-6)
    upgraded = _upgraded_quietly(model)  # what onnxruntime runs: it has no legacy kernels
    np.testing.assert_allclose(got, _ort(upgraded, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("opset", [1, 4, 6])
def test_old_ops_onnxruntime_runs_match_it(target: str, opset: int) -> None:
    """Conv-1, LRN-1, Relu-6 (onnxruntime has no Relu-1), MaxPool-1, Transpose-1, Reshape (-1
    with the ``shape`` attribute, -5) and Softmax-1, compared with onnxruntime running the
    model at its own opset."""
    rng = np.random.default_rng(opset)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)}
    if opset < 5:
        reshape = helper.make_node("Reshape", ["t"], ["flat"], shape=[3, -1])
    else:
        inits["shape"] = np.array([3, -1], np.int64)
        reshape = helper.make_node("Reshape", ["t", "shape"], ["flat"])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LRN", ["c"], ["r"], size=3, alpha=1e-3, beta=0.75, bias=1.5),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Transpose", ["p"], ["t"], perm=[0, 2, 3, 1]),
             reshape, helper.make_node("Softmax", ["flat"], ["y"])]
    if opset >= 6:
        nodes.insert(2, helper.make_node("Relu", ["r"], ["rr"]))
        nodes[3].input[0] = "rr"
    model = _model(nodes, {"x": (TensorProto.FLOAT, [3, 3, 6, 6])},
                   {"y": (TensorProto.FLOAT, [3, 36])}, inits, opset, ir_version=3)
    x = rng.standard_normal((3, 3, 6, 6)).astype(np.float32)
    want = _ort(model, {"x": x})[0]  # the original model, at its old opset
    module, _ = _compiled(model, target)
    np.testing.assert_allclose(module.run(x=x)["y"], want, rtol=1e-5, atol=1e-6)


def test_every_path_sees_the_upgraded_model(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """import_onnx, partition_model, a dynamic (symbolic batch) compile and the CLI."""
    rng = np.random.default_rng(7)
    model, params = _legacy(6, 2, 3, 2, rng)
    with pytest.warns(OldOpsetWarning):
        fn = import_onnx(model)
    assert "Add" in {node.op for node in fn.nodes}
    with pytest.warns(OldOpsetWarning):
        report = partition_model(model, "ref")
    assert [r.backend for r in report.partition_report().regions] == ["ref"]
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.array([-1, 12], np.int64),
                                                                 "shape"))
    with pytest.warns(OldOpsetWarning):
        dynamic = tessera.compile(model, "ref")
    for n in (1, 4):
        x = rng.standard_normal((n, 3, 2, 2)).astype(np.float32)
        np.testing.assert_allclose(dynamic.run(x=x)["y"], _legacy_numpy(x, params),
                                   rtol=1e-5, atol=1e-6)
    path = tmp_path / "legacy.onnx"
    onnx.save(_legacy(5, 2, 3, 2, rng)[0], path)
    for command in (["compile", str(path), "--target", "ref", "-o", str(tmp_path / "m.tar")],
                    ["run", str(path), "--target", "ref"], ["inspect", str(path)]):
        assert main(command) == 0, command
        err = capsys.readouterr().err
        assert "warning: the model uses default-domain opset 5; Tessera imports opsets 7 and " \
               "later and upgraded it to opset 7" in err, (command, err)


def test_upgrade_is_identity_from_opset_7_and_leaves_the_callers_model() -> None:
    model, _ = _legacy(6, 1, 2, 2, np.random.default_rng(0))
    before = model.SerializeToString()
    upgraded = _upgraded_quietly(model)
    assert model.SerializeToString() == before  # the broadcast fix edits a copy
    assert upgraded.opset_import[0].version == 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert upgrade_old_opset(upgraded) is upgraded  # no copy, no warning


def test_a_model_the_converter_cannot_upgrade_is_refused() -> None:
    pad = helper.make_node("Pad", ["x"], ["y"], name="pad", paddings=[1, 1, 1, 1])
    model = _model([pad], {"x": (TensorProto.FLOAT, [2, 3])}, {"y": (TensorProto.FLOAT, [4, 5])},
                   {}, opset=1, ir_version=3)
    expected = (r"default-domain opset 1; Tessera imports opsets 7 and later, and converting it "
                r"to opset 7 with onnx's version converter failed: No Adapter From Version "
                r"\$1 for Pad$")
    with pytest.raises(ModelImportError, match=expected):
        import_onnx(model)
    with pytest.raises(ModelImportError, match=expected):
        tessera.compile(model, "ref")


def _per_channel(opset: int, shape: tuple[int, ...], axis: int, rng: np.random.Generator,
                 quantize: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """DequantizeLinear (and with ``quantize`` QuantizeLinear first) with per-channel scales
    and zero points and an ``axis`` attribute, at ``opset`` (10: as onnxruntime's quantizer
    wrote them; ONNX defines ``axis`` from 13)."""
    c = shape[axis]
    inits = {"scale": rng.uniform(0.01, 0.2, c).astype(np.float32),
             "zero": rng.integers(-20, 20, c).astype(np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], name="dq",
                              axis=axis)]
    if quantize:
        nodes.insert(0, helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"],
                                         name="qz", axis=axis))
        feeds = {"x": (rng.standard_normal(shape) * 8).astype(np.float32)}
        inputs = {"x": (TensorProto.FLOAT, list(shape))}
    else:
        feeds = {"q": rng.integers(-128, 128, shape).astype(np.int8)}
        inputs = {"q": (TensorProto.INT8, list(shape))}
    model = _model(nodes, inputs, {"y": (TensorProto.FLOAT, list(shape))}, inits, opset,
                   ir_version=7)
    return model, feeds


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize(("shape", "axis", "quantize"), [((2, 5, 3), 1, False),
                                                          ((6, 4), 0, False),
                                                          ((3, 2, 7), -1, False),
                                                          ((2, 4, 3, 3), 1, True)])
def test_per_channel_axis_in_an_opset_10_model_imports_with_a_warning(
        target: str, shape: tuple[int, ...], axis: int, quantize: bool) -> None:
    rng = np.random.default_rng(len(shape) * 10 + axis)
    model, feeds = _per_channel(10, shape, axis, rng, quantize)
    with pytest.raises(Exception, match="Unrecognized attribute: axis"):
        _ort(model, feeds)  # onnxruntime refuses the opset-10 form itself
    same = onnx.ModelProto()
    same.CopyFrom(model)
    same.opset_import[0].version = 13  # where ONNX defines axis, with this meaning
    want = _ort(same, feeds)[0]
    with pytest.warns(LenientImportWarning) as record:
        module = tessera.compile(model, target)
    texts = sorted(str(w.message) for w in record)
    nodes = ["'dq' (DequantizeLinear)"] + (["'qz' (QuantizeLinear)"] if quantize else [])
    assert texts == sorted(
        f"node {node}: onnx's checker refuses attribute 'axis', which {node.split('(')[1][:-1]} "
        f"of opset 10 does not define; ONNX defines it from opset 13, and Tessera imports it "
        f"with that meaning" for node in nodes)
    assert {w.filename for w in record} == {__file__}
    np.testing.assert_array_equal(module.run(**feeds)["y"], want)


def test_checking_goes_on_past_a_tolerated_attribute() -> None:
    """The tolerated complaint is not the last word: a wrong input count after it (or an
    attribute of a version a different converter imports) is still an error."""
    rng = np.random.default_rng(3)
    model, _ = _per_channel(10, (2, 3), 1, rng, quantize=False)
    model.graph.node.append(helper.make_node("Neg", ["y", "y"], ["z"], name="neg"))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]))
    with pytest.raises(ModelImportError, match=r"malformed ONNX model: node 'neg' \(Neg\): .*"
                                               r"input size 2 not in range"):
        import_onnx(model)
    resize = helper.make_node("Resize", ["x", "scales"], ["y"], name="rs", mode="nearest",
                              coordinate_transformation_mode="asymmetric")
    model = _model([resize], {"x": (TensorProto.FLOAT, [1, 1, 2, 2])},
                   {"y": (TensorProto.FLOAT, [1, 1, 4, 4])},
                   {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=10, ir_version=7)
    with pytest.raises(ModelImportError, match=r"malformed ONNX model: node 'rs' \(Resize\): "
                                               r"Unrecognized attribute: "
                                               r"coordinate_transformation_mode"):
        import_onnx(model)


def test_an_attribute_no_version_defines_is_still_an_error() -> None:
    relu = helper.make_node("Relu", ["x"], ["y"], name="r", bogus=1)
    model = _model([relu], {"x": (TensorProto.FLOAT, [2, 3])}, {"y": (TensorProto.FLOAT, [2, 3])},
                   {}, opset=13, ir_version=7)
    with pytest.raises(ModelImportError, match=r"malformed ONNX model: node 'r' \(Relu\): "
                                               r"Unrecognized attribute: bogus"):
        import_onnx(model)
