"""Small valid ONNX models the fuzzer mutates: one per op family, control flow (If, Loop,
Scan, nested), plus the digits CNN."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tessera.testing import control_flow_models

F = TensorProto.FLOAT
OPSET = 17


def _model(name: str, nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list[int]]],
           outputs: list[tuple[str, int, list[int] | None]],
           inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    _lengthen_names(graph)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model).graph.output
    known = {vi.name: vi for vi in inferred}
    for out in model.graph.output:
        if not out.type.tensor_type.HasField("shape") and out.name in known:
            out.type.CopyFrom(known[out.name].type)
    return model


def _lengthen_names(graph: onnx.GraphProto) -> None:
    """Rename one-letter values ("x" -> "x_in") so an error naming them is recognisable."""

    def longer(name: str) -> str:
        return f"{name}_in" if len(name) == 1 else name

    for vi in list(graph.input) + list(graph.output):
        vi.name = longer(vi.name)
    for t in graph.initializer:
        t.name = longer(t.name)
    for n in graph.node:
        n.input[:] = [longer(x) for x in n.input]
        n.output[:] = [longer(x) for x in n.output]


def _w(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def conv_relu_pool() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv0", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
             helper.make_node("Relu", ["c"], ["r"], name="relu0"),
             helper.make_node("MaxPool", ["r"], ["y"], name="pool0", kernel_shape=[2, 2],
                              strides=[2, 2], pads=[0, 0, 0, 0])]
    return _model("conv_relu_pool", nodes, [("x", F, [1, 2, 6, 6])], [("y", F, None)],
                  {"w": _w(4, 2, 3, 3), "b": _w(4, seed=1)})


def grouped_conv_avgpool() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="gconv", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1], group=2),
             helper.make_node("AveragePool", ["c"], ["a"], name="avg", kernel_shape=[2, 2],
                              strides=[1, 1], pads=[0, 0, 1, 1], count_include_pad=0),
             helper.make_node("GlobalAveragePool", ["a"], ["y"], name="gap")]
    return _model("grouped_conv", nodes, [("x", F, [1, 4, 7, 7])], [("y", F, None)],
                  {"w": _w(4, 2, 3, 3)})


def gemm_softmax() -> onnx.ModelProto:
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="gemm0", transB=1,
                              alpha=1.0, beta=1.0),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax0", axis=-1)]
    return _model("gemm_softmax", nodes, [("x", F, [2, 8])], [("y", F, None)],
                  {"w": _w(5, 8), "b": _w(5, seed=2)})


def matmul_add_broadcast() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul0"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add0"),
             helper.make_node("Mul", ["a", "z"], ["y"], name="mul0")]
    return _model("matmul_add", nodes, [("x", F, [2, 3, 4]), ("z", F, [3, 1])],
                  [("y", F, None)], {"w": _w(4, 5), "b": _w(5, seed=3)})


def reshape_transpose_concat() -> onnx.ModelProto:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape0"),
             helper.make_node("Transpose", ["r"], ["t"], name="transpose0", perm=[0, 2, 1]),
             helper.make_node("Concat", ["t", "u"], ["c"], name="concat0", axis=1),
             helper.make_node("Flatten", ["c"], ["y"], name="flatten0", axis=1)]
    return _model("reshape_concat", nodes, [("x", F, [2, 12]), ("u", F, [2, 2, 3])],
                  [("y", F, None)], {"shape": np.array([2, 3, 4], np.int64)})


def gather_slice() -> onnx.ModelProto:
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], name="gather0", axis=1),
             helper.make_node("Slice", ["g", "starts", "ends", "axes", "steps"], ["s"],
                              name="slice0"),
             helper.make_node("Squeeze", ["s", "sq"], ["y"], name="squeeze0")]
    return _model("gather_slice", nodes, [("x", F, [3, 6, 4])], [("y", F, None)],
                  {"idx": np.array([0, 2, 5], np.int64), "starts": np.array([0, 1], np.int64),
                   "ends": np.array([1, 4], np.int64), "axes": np.array([0, 2], np.int64),
                   "steps": np.array([1, 2], np.int64), "sq": np.array([0], np.int64)})


def cast_reduce() -> onnx.ModelProto:
    nodes = [helper.make_node("Cast", ["x"], ["c"], name="cast0", to=TensorProto.INT32),
             helper.make_node("Cast", ["c"], ["f"], name="cast1", to=F),
             helper.make_node("ReduceSum", ["f", "axes"], ["s"], name="rsum", keepdims=1),
             helper.make_node("ReduceMax", ["f"], ["m"], name="rmax", axes=[1], keepdims=0),
             helper.make_node("Sub", ["s", "x"], ["y"], name="sub0")]
    return _model("cast_reduce", nodes, [("x", F, [2, 3, 4])], [("y", F, None), ("m", F, None)],
                  {"axes": np.array([-1], np.int64)})


def quant_linear() -> onnx.ModelProto:
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"], name="quant0"),
             helper.make_node("QLinearConv", ["q", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                              ["qc"], name="qconv0", kernel_shape=[1, 1]),
             helper.make_node("QLinearMatMul", ["qc", "ys", "yz", "m", "ws", "wz", "ys", "yz"],
                              ["qm"], name="qmatmul0"),
             helper.make_node("DequantizeLinear", ["qm", "ys", "yz"], ["y"], name="dequant0")]
    inits = {"xs": np.float32(0.05), "xz": np.uint8(128), "ys": np.float32(0.1),
             "yz": np.uint8(128), "ws": np.float32(0.02), "wz": np.uint8(128),
             "w": np.random.default_rng(4).integers(100, 156, (3, 2, 1, 1)).astype(np.uint8),
             "m": np.random.default_rng(5).integers(100, 156, (4, 4)).astype(np.uint8)}
    return _model("quant", nodes, [("x", F, [1, 2, 4, 4])], [("y", F, None)], inits)


def elementwise_mix() -> onnx.ModelProto:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid0"),
             helper.make_node("Tanh", ["s"], ["t"], name="tanh0"),
             helper.make_node("Clip", ["t", "lo", "hi"], ["c"], name="clip0"),
             helper.make_node("Div", ["c", "x"], ["d"], name="div0"),
             helper.make_node("Where", ["cond", "d", "s"], ["y"], name="where0")]
    return _model("elementwise", nodes, [("x", F, [2, 5]), ("cond", TensorProto.BOOL, [1, 5])],
                  [("y", F, None)], {"lo": np.float32(-0.5), "hi": np.float32(0.5)})


def norm_pad() -> onnx.ModelProto:
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], name="pad0", mode="constant"),
             helper.make_node("BatchNormalization", ["p", "g", "b", "mu", "var"], ["n"],
                              name="bn0", epsilon=1e-5),
             helper.make_node("LeakyRelu", ["n"], ["y"], name="lrelu0", alpha=0.1)]
    return _model("norm_pad", nodes, [("x", F, [1, 3, 4, 4])], [("y", F, None)],
                  {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "g": _w(3),
                   "b": _w(3, seed=1), "mu": _w(3, seed=2),
                   "var": np.abs(_w(3, seed=3)) + 0.5})


def int_ops() -> onnx.ModelProto:
    i64 = TensorProto.INT64
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="iadd"),
             helper.make_node("Mod", ["s", "k"], ["m"], name="imod"),
             helper.make_node("ArgMax", ["m"], ["y"], name="argmax0", axis=1, keepdims=1),
             helper.make_node("Expand", ["m", "eshape"], ["e"], name="expand0"),
             helper.make_node("Tile", ["e", "reps"], ["z"], name="tile0")]
    return _model("int_ops", nodes, [("a", i64, [2, 3]), ("b", i64, [3])],
                  [("y", i64, None), ("z", i64, None)],
                  {"k": np.array([7], np.int64), "eshape": np.array([2, 2, 3], np.int64),
                   "reps": np.array([1, 2, 1], np.int64)})


def if_branches() -> onnx.ModelProto:
    """An If on a run-time condition whose branches read outer values."""
    return control_flow_models.if_model()


def loop_decoder() -> onnx.ModelProto:
    """A Loop-based greedy decoder with a run-time trip count and an end token."""
    return control_flow_models.greedy_decoder(vocab=8, hidden=8)


def scan_rnn() -> onnx.ModelProto:
    """An RNN as a Scan (opset 9 form)."""
    return control_flow_models.scan_rnn(steps=4, features=3, hidden=5)


def nested_loop_if() -> onnx.ModelProto:
    """A Loop whose body holds an If that reads a value two scopes out."""
    return control_flow_models.nested_model()


def digits_cnn() -> onnx.ModelProto:
    """The demo's trained CNN (examples/digits), when the checkout has it."""
    path = Path(__file__).resolve().parents[4] / "examples" / "digits" / "digits_cnn.onnx"
    model = onnx.load(str(path))
    for vi in model.graph.input:  # fix the symbolic batch dimension to 1
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.dim_value = 1
    return model


SEEDS: dict[str, Callable[[], onnx.ModelProto]] = {
    f.__name__: f for f in (conv_relu_pool, grouped_conv_avgpool, gemm_softmax,
                            matmul_add_broadcast, reshape_transpose_concat, gather_slice,
                            cast_reduce, quant_linear, elementwise_mix, norm_pad, int_ops,
                            if_branches, loop_decoder, scan_rnn, nested_loop_if, digits_cnn)}


#: Seeds added after fuzz findings were recorded by (seed, case): a finding replays with the
#: seed models of its time (the case's model is drawn from the sorted seed names).
CONTROL_FLOW_SEEDS = ("if_branches", "loop_decoder", "scan_rnn", "nested_loop_if")


def load_seeds() -> dict[str, onnx.ModelProto]:
    """Every seed model that can be built here (the digits model needs the checkout)."""
    models = {}
    for name, make in SEEDS.items():
        try:
            models[name] = make()
        except OSError:
            continue
    return models
