"""A MobileNet-v1-style network of depthwise-separable convolutions as an ONNX model, with seeded
random weights.

:func:`make_mobilenet` builds the graph with ``onnx.helper`` (opset 17) as a PyTorch export of
MobileNet v1 with its batch norms folded into the convolutions looks:

- a 3x3 stride-2 ``Conv`` from 3 channels, bias, ``Clip(0, 6)`` (ReLU6);
- thirteen depthwise-separable blocks, each a 3x3 depthwise ``Conv`` (``group`` = channels,
  stride 1 or 2, padding 1) with bias and ReLU6, then a 1x1 pointwise ``Conv`` with bias and
  ReLU6, with MobileNet v1's channels (64, 128, 128, 256, 256, 512 x 6, 1024, 1024) times the
  width multiplier ``width``;
- ``GlobalAveragePool``, ``Flatten``, ``Gemm`` to ``classes`` logits.

Weights are normal with He scaling (``std = sqrt(2 / fan_in)``: a depthwise filter's fan-in is
its 9 taps) and biases normal with std 0.05, so activations keep unit order of magnitude through
the 27 convolutions and ReLU6 clips some but not most of them. The input ``input`` is
``[batch, 3, resolution, resolution]``; the output ``logits`` is ``[batch, classes]``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The opset the network is written in.
OPSET = 17

#: MobileNet v1's depthwise-separable blocks: (output channels of the pointwise conv, stride of
#: the depthwise conv), before the width multiplier.
BLOCKS: tuple[tuple[int, int], ...] = (
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)


def _channels(c: int, width: float) -> int:
    return max(8, int(round(c * width)))


def make_mobilenet(batch: int = 1, resolution: int = 224, width: float = 1.0,
                   classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """Build the network (see the module's docstring) with weights from a generator seeded
    with ``seed``."""
    if batch < 1 or resolution < 32 or width <= 0 or classes < 1:
        raise ValueError("batch and classes must be positive, resolution at least 32 and "
                         "width positive")
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = [
        numpy_helper.from_array(np.array(0.0, np.float32), "relu6.min"),
        numpy_helper.from_array(np.array(6.0, np.float32), "relu6.max"),
    ]

    def conv(x: str, name: str, c_in: int, c_out: int, k: int, stride: int, group: int) -> str:
        fan_in = (c_in // group) * k * k
        w = rng.standard_normal((c_out, c_in // group, k, k), dtype=np.float32)
        w *= np.float32(np.sqrt(2.0 / fan_in))
        b = (rng.standard_normal(c_out, dtype=np.float32) * np.float32(0.05))
        inits.append(numpy_helper.from_array(w, f"{name}.weight"))
        inits.append(numpy_helper.from_array(b, f"{name}.bias"))
        pad = k // 2
        nodes.append(helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"],
                                      [f"{name}/conv"], name=f"{name}/Conv", kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[pad] * 4, group=group))
        nodes.append(helper.make_node("Clip", [f"{name}/conv", "relu6.min", "relu6.max"],
                                      [f"{name}/relu6"], name=f"{name}/Clip"))
        return f"{name}/relu6"

    c = _channels(32, width)
    x = conv("input", "stem", 3, c, 3, 2, 1)
    for i, (out, stride) in enumerate(BLOCKS):
        x = conv(x, f"block{i}.depthwise", c, c, 3, stride, c)
        c_out = _channels(out, width)
        x = conv(x, f"block{i}.pointwise", c, c_out, 1, 1, 1)
        c = c_out
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
    fc_w = rng.standard_normal((classes, c), dtype=np.float32) * np.float32(np.sqrt(1.0 / c))
    fc_b = rng.standard_normal(classes, dtype=np.float32) * np.float32(0.05)
    inits.append(numpy_helper.from_array(fc_w, "fc.weight"))
    inits.append(numpy_helper.from_array(fc_b, "fc.bias"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"],
                                  name="fc", transB=1))
    graph = helper.make_graph(
        nodes, f"mobilenet_v1_{width:g}_{resolution}",
        inputs=[helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                              [batch, 3, resolution, resolution])],
        outputs=[helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tessera.testing.mobilenet")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def mobilenet_inputs(batch: int = 1, resolution: int = 224, seed: int = 0) -> dict[str, np.ndarray]:
    """A standard-normal ``input`` for :func:`make_mobilenet`."""
    rng = np.random.default_rng(seed + 1)
    return {"input": rng.standard_normal((batch, 3, resolution, resolution), dtype=np.float32)}
