"""The pass pipeline on imported ONNX models, checked against onnxruntime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import require

from tessera.backends.reference.interpreter import evaluate_function
from tessera.frontend.onnx import import_onnx
from tessera.ir.verifier import verify
from tessera.passes import PassManager

ort = require("onnxruntime")


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def cnn_model() -> onnx.ModelProto:
    """Conv-BN-Relu, Conv-BN (no bias) + residual, BN on a 2-D tensor, transposes, squeezes."""
    r = np.random.default_rng(3)

    def f32(*shape):
        return r.standard_normal(shape).astype(np.float32)

    def bn_inits(prefix, c):
        return [init(f"{prefix}_s", f32(c)), init(f"{prefix}_b", f32(c)),
                init(f"{prefix}_m", f32(c)),
                init(f"{prefix}_v", (np.abs(f32(c)) + 0.5).astype(np.float32))]

    def bn(prefix, x, y):
        return helper.make_node("BatchNormalization", [x] + [f"{prefix}_{k}" for k in "sbmv"],
                                [y], epsilon=1e-3)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        bn("bn1", "c1", "n1"),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=2),
        bn("bn2", "c2", "n2"),
        helper.make_node("Add", ["n2", "r1"], ["res"]),
        helper.make_node("Identity", ["res"], ["res_id"]),
        helper.make_node("Transpose", ["res_id"], ["t1"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 3, 1, 2]),
        helper.make_node("GlobalAveragePool", ["t2"], ["gap"]),
        helper.make_node("Squeeze", ["gap", "axes23"], ["sq"]),
        helper.make_node("Unsqueeze", ["sq", "axes0"], ["usq"]),
        helper.make_node("Flatten", ["usq"], ["flat"], axis=2),
        helper.make_node("Reshape", ["flat", "shape2d"], ["flat2"]),
        helper.make_node("Gemm", ["flat2", "fc_w", "fc_b"], ["fc"], transB=1),
        bn("bn3", "fc", "logits"),
        helper.make_node("Dropout", ["logits"], ["out"]),
    ]
    inits = [init("w1", f32(4, 3, 3, 3)), init("b1", f32(4)), init("w2", f32(4, 2, 3, 3)),
             init("axes23", np.array([2, 3], np.int64)), init("axes0", np.array([0], np.int64)),
             init("shape2d", np.array([2, -1], np.int64)), init("fc_w", f32(5, 4)),
             init("fc_b", f32(5))]
    inits += bn_inits("bn1", 4) + bn_inits("bn2", 4) + bn_inits("bn3", 5)
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 5]),
         helper.make_tensor_value_info("r1", TensorProto.FLOAT, [2, 4, 8, 8])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_cnn_against_onnxruntime(opt_level, tmp_path):
    model = cnn_model()
    x = np.random.default_rng(4).standard_normal((2, 3, 8, 8)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})

    fn = import_onnx(model)
    pm = PassManager(opt_level=opt_level, verify=True, dump_dir=tmp_path)
    fn = pm.run(fn)
    verify(fn)
    res = evaluate_function(fn, {"x": x})
    got = [res[v.name] for v in fn.outputs]
    assert fn.attrs["output_names"] == ["out", "r1"]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    ops = [n.op for n in fn.nodes]
    if opt_level >= 2:
        assert "BatchNormalization" not in ops and "Identity" not in ops
        assert "Transpose" not in ops and "Flatten" not in ops and "Squeeze" not in ops
        assert ops.count("Conv") == 2 and ops.count("Reshape") == 1
        assert len(list(tmp_path.iterdir())) == 8  # the input and seven passes
