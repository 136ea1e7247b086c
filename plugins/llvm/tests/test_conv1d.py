"""1-D convolutions on llvm (speech models' feature encoders) take the blocked 2-D convolution
path (tessera.kernel.conv1d) and match onnxruntime on random data; the layout transform back
to rows is tiled as a transpose (the ``unblock_tile`` knob)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import require

import tessera

ort = require("onnxruntime")
RNG = np.random.default_rng(17)


def conv1d_model(c: int, oc: int, k: int, width: int, gelu: bool = False,
                 bias: bool = True, **attrs) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    group = attrs.get("group", 1)
    w = (RNG.standard_normal((oc, c // group, k)) / np.sqrt(c * k / group)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(oc).astype(np.float32), "b"))
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c" if gelu else "y"], kernel_shape=[k],
                              **attrs)]
    if gelu:
        nodes.append(helper.make_node("Gelu", ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "conv1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, "out_width"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    x = RNG.standard_normal((1, c, width)).astype(np.float32)
    return model, {"x": x}


@pytest.mark.parametrize("label, args, attrs", [
    ("wav2vec2 first layer", (1, 32, 10, 400), {"strides": [5]}),
    ("strided k3", (16, 32, 3, 201), {"strides": [2]}),
    ("k2 s2, GELU", (32, 32, 2, 64, True), {"strides": [2]}),
    ("same padding", (8, 16, 5, 97), {"auto_pad": "SAME_UPPER"}),
    ("grouped positional conv", (32, 32, 16, 40), {"group": 4, "pads": [8, 8]}),
    ("row a multiple of the tile", (4, 32, 1, 256), {}),
    ("no bias, dilated", (8, 16, 3, 120, False, False), {"dilations": [3], "pads": [3, 3]}),
])
def test_conv1d_matches_onnxruntime(label: str, args: tuple, attrs: dict) -> None:
    model, feeds = conv1d_model(*args, **attrs)
    module = tessera.compile(model, "llvm")
    got = module.run(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    ops = [k.op for cr in module.compiled.values() for k in cr.kernels]
    assert any("ConvNCHWc" in op for op in ops), ops  # the blocked 2-D path


def test_rows_leave_the_blocks_in_tiles() -> None:
    model, _ = conv1d_model(1, 32, 10, 400, strides=[5])
    module = tessera.compile(model, "llvm")
    (cr,) = module.compiled.values()
    configs = [c for s in cr.info["schedules"].values() for c in s["configs"]]
    unblock = [c for c in configs if "unblock_tile" in c["config"]]
    assert unblock and all(c["config"]["unblock_block"] in (8, 16, 32) for c in unblock)
