"""The model of the heterogeneous example: a convolutional stem, int8-quantized convolutions and
a float transformer block, built in ONNX with random weights (seeded).

``x [1, 3, 32, 32]`` → float Conv+ReLU (the first convolution stays float, as in TVM's VTA flow)
→ two Conv+ReLU quantized to int8 → a float Conv+ReLU → the 16 x 16 positions as 256 tokens of
32 channels → one transformer encoder layer (layer norms, 2-head attention, GELU MLP,
residuals) → mean over tokens → a float classifier → ``logits [1, 10]``, and its softmax cast to
float16 → ``probs_fp16 [1, 10]``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tessera

DIM, HEADS, TOKENS = 32, 2, 256
#: nodes that stay float when the model is quantized (the rest of the convolutions go to int8)
FLOAT_NODES = ["conv4", "q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2", "attn_qk",
               "attn_v"]


def float_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def w(name: str, *shape: int, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        std = scale if scale is not None else np.sqrt(2.0 / fan_in)
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv_relu(x: str, name: str, cin: int, cout: int, stride: int = 1) -> str:
        c = node("Conv", [x, w(f"{name}.w", cout, cin, 3, 3), w(f"{name}.b", cout, scale=0.1)],
                 name, pads=[1, 1, 1, 1], strides=[stride, stride])
        return node("Relu", [c], f"{name}.relu")

    def layer_norm(x: str, name: str) -> str:
        inits.append(numpy_helper.from_array(np.ones(DIM, np.float32), f"{name}.g"))
        inits.append(numpy_helper.from_array(np.zeros(DIM, np.float32), f"{name}.b"))
        return node("LayerNormalization", [x, f"{name}.g", f"{name}.b"], name, axis=-1)

    def dense(x: str, name: str, cin: int, cout: int) -> str:
        m = node("MatMul", [x, w(f"{name}.w", cin, cout, scale=cin ** -0.5)], name)
        return node("Add", [m, w(f"{name}.b", cout, scale=0.02)], f"{name}.bias")

    x = conv_relu("x", "conv1", 3, 16)
    x = conv_relu(x, "conv2", 16, 16)
    x = conv_relu(x, "conv3", 16, 32, stride=2)
    x = conv_relu(x, "conv4", 32, DIM)
    shape = numpy_helper.from_array(np.array([1, DIM, TOKENS], np.int64), "tok_shape")
    inits.append(shape)
    t = node("Reshape", [x, "tok_shape"], "tokens")
    t = node("Transpose", [t], "tokens_t", perm=[0, 2, 1])           # [1, 256, 32]
    h = layer_norm(t, "ln1")
    head = DIM // HEADS
    inits.append(numpy_helper.from_array(np.array([1, TOKENS, HEADS, head], np.int64),
                                         "head_shape"))
    inits.append(numpy_helper.from_array(np.array([1, TOKENS, DIM], np.int64), "merge_shape"))
    q, k, v = (node("Transpose", [node("Reshape", [dense(h, f"{p}_proj", DIM, DIM),
                                                    "head_shape"], f"{p}_heads")],
                    f"{p}_t", perm=[0, 2, 1, 3]) for p in "qkv")      # [1, H, 256, d]
    kt = node("Transpose", [k], "k_tt", perm=[0, 1, 3, 2])
    scores = node("MatMul", [q, kt], "attn_qk")
    inits.append(numpy_helper.from_array(np.array(head ** -0.5, np.float32), "scale"))
    p = node("Softmax", [node("Mul", [scores, "scale"], "attn_scaled")], "attn_p", axis=-1)
    ctx = node("MatMul", [p, v], "attn_v")
    ctx = node("Reshape", [node("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3]),
                           "merge_shape"], "ctx")
    t = node("Add", [t, dense(ctx, "o_proj", DIM, DIM)], "res1")
    h = layer_norm(t, "ln2")
    h = node("Gelu", [dense(h, "fc1", DIM, 4 * DIM)], "gelu", approximate="tanh")
    t = node("Add", [t, dense(h, "fc2", 4 * DIM, DIM)], "res2")
    pooled = node("ReduceMean", [t, "mean_axes"], "pool", keepdims=0)
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "mean_axes"))
    logits = node("Gemm", [pooled, w("cls.w", DIM, 10, scale=DIM ** -0.5),
                           w("cls.b", 10, scale=0.02)], "logits")
    # half-precision probabilities for a client: float16 is not in the CUDA kernels' types, so
    # this cast is what the target's last kind, llvm, runs
    node("Cast", [node("Softmax", [logits], "probs", axis=-1)], "probs_fp16",
         to=TensorProto.FLOAT16)
    graph = helper.make_graph(
        nodes, "hetero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
         helper.make_tensor_value_info("probs_fp16", TensorProto.FLOAT16, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(model)
    return model


def inputs(n: int = 1, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 3, 32, 32)).astype(np.float32)}


def quantized_model(seed: int = 0) -> onnx.ModelProto:
    """The float model with its middle convolutions quantized to int8 (QDQ), calibrated on 16
    random images; the first convolution, the last one and the transformer stay float."""
    model = float_model(seed)
    calibration = np.concatenate([inputs(1, s)["x"] for s in range(16)])
    return tessera.quantize(model, {"x": calibration}, exclude=FLOAT_NODES, batch_size=1)
