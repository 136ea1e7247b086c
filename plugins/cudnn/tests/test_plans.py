"""Every pattern tessera-cudnn claims, compiled for ``cuda -arch=sm_90 -libs=cudnn,cublas`` on a
machine without a GPU, its plans executed in numpy exactly as their library calls are described
(``emulate.py``) and compared with the reference backend, over shapes and attributes. This
checks the graph-to-call mapping (column-major transposition, batch strides, pre-padding,
bias folding, residuals, pooling and softmax views); ``test_gpu.py`` checks the calls."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import tessera
from plugins.cudnn.tests.conftest import CROSS, model, needs_gpu, needs_libs, rand
from plugins.cudnn.tests.emulate import run_module

pytestmark = needs_libs
RTOL, ATOL = 1e-4, 1e-4  # float32 sums in another order; the emulator sums in float64
#: on the GPU the libraries pick algorithms (FFT, implicit GEMM) that round differently
GPU_RTOL, GPU_ATOL = 1e-3, 1e-3


@pytest.fixture(params=["emulated", pytest.param("gpu", marks=[pytest.mark.gpu, needs_gpu])])
def mode(request) -> str:  # noqa: ANN001
    """``emulated``: compiled without a GPU, the plans run in numpy; ``gpu``: compiled and run
    on the GPU through cuDNN and cuBLASLt."""
    return request.param


def check(m, inputs: dict[str, np.ndarray], backends: set[str],  # noqa: ANN001
          mode: str = "emulated") -> tessera.Module:
    """Compile ``m`` for the libraries; every node must land on ``backends``; the outputs
    (emulated plans, or the GPU) must be the reference's."""
    target = CROSS if mode == "emulated" else "cuda -libs=cudnn,cublas, llvm"
    mod = tessera.compile(m, target=target)
    counts = mod.partition_report().backend_counts()
    assert set(counts) == backends, mod.partition_report().table()
    want = tessera.compile(m, target="ref").run(**inputs)
    got = run_module(mod, inputs) if mode == "emulated" else mod.run(**inputs)
    rtol, atol = (RTOL, ATOL) if mode == "emulated" else (GPU_RTOL, GPU_ATOL)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol, err_msg=name)
    return mod


CONVS = [  # x shape, w shape, attrs
    ((1, 3, 9, 8), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 4, 7, 7), (6, 2, 3, 3), dict(group=2, strides=[2, 2], pads=[0, 0, 0, 0])),
    ((1, 3, 9, 8), (4, 3, 3, 3), dict(pads=[1, 0, 2, 1], strides=[1, 2])),
    ((1, 8, 10, 10), (8, 1, 3, 3), dict(group=8, dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 5, 6, 6), (7, 5, 1, 1), dict()),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVS)
@pytest.mark.parametrize("fuse", ["none", "relu", "residual_relu", "residual", "bias_add"])
def test_conv(xs, ws, attrs, fuse, mode) -> None:  # noqa: ANN001
    rng = np.random.default_rng(len(xs) + sum(ws))
    inputs = {"x": rand(rng, *xs)}
    ref = tessera.compile(model([helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)],
                                {"x": xs}, {"c": None},
                                {"w": rand(rng, *ws), "b": rand(rng, ws[0])}), target="ref")
    ys = tuple(ref.graph.outputs[0].type.shape)
    weights = {"w": rand(rng, *ws), "b": rand(rng, ws[0])}
    conv_in = ["x", "w"] if fuse == "bias_add" else ["x", "w", "b"]
    nodes = [helper.make_node("Conv", conv_in, ["c"], **attrs)]
    graph_in = dict(inputs={"x": xs})
    last = "c"
    if fuse.startswith("residual"):
        inputs["z"] = rand(rng, *ys)
        graph_in["inputs"]["z"] = ys
        nodes.append(helper.make_node("Add", ["z", "c"], ["s"]))
        last = "s"
    if fuse == "bias_add":
        weights["cb"] = rand(rng, 1, ws[0], 1, 1)
        nodes.append(helper.make_node("Add", ["c", "cb"], ["s"]))
        last = "s"
    if fuse.endswith("relu"):
        nodes.append(helper.make_node("Relu", [last], ["y"]))
        last = "y"
    m = model(nodes, graph_in["inputs"], {last: ys}, weights)
    mod = check(m, inputs, {"cudnn"}, mode)
    (region,) = mod.compiled.values()
    (plan,) = region.handle["plans"]
    assert plan.residual == fuse.startswith("residual")
    assert plan.activation == ("relu" if fuse.endswith("relu") else "identity")
    assert (plan.prepad is not None) == (attrs.get("pads", [0] * 4)[:2]
                                         != attrs.get("pads", [0] * 4)[2:])
    if mode == "emulated":
        assert plan.algo is None and plan.algo_source == "not chosen"  # measured on a GPU
    else:
        assert plan.algo is not None and plan.algo_source.startswith("measured")


@pytest.mark.parametrize("op,attrs,xs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (1, 3, 9, 9)),
    ("AveragePool", dict(kernel_shape=[2, 3], pads=[1, 1, 1, 1]), (2, 2, 6, 7)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
     (1, 2, 5, 5)),
    ("GlobalAveragePool", {}, (2, 3, 5, 4)),
    ("GlobalMaxPool", {}, (1, 4, 3, 3)),
    ("MaxPool", dict(kernel_shape=[2, 2, 2]), (1, 2, 4, 4, 4)),
])
def test_pool(op, attrs, xs, mode) -> None:  # noqa: ANN001
    rng = np.random.default_rng(3)
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": xs}, {"y": None}, {})
    check(m, {"x": rand(rng, *xs)}, {"cudnn"}, mode)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis,xs", [(-1, (3, 10)), (1, (2, 5, 3, 4)), (0, (6, 2)),
                                     (2, (2, 3, 7))])
def test_softmax(op, axis, xs, mode) -> None:  # noqa: ANN001
    rng = np.random.default_rng(4)
    m = model([helper.make_node(op, ["x"], ["y"], axis=axis)], {"x": xs}, {"y": xs}, {})
    check(m, {"x": rand(rng, *xs) * 3}, {"cudnn"}, mode)


MATMULS = [((5, 7), (7, 3)), ((2, 4, 6), (6, 5)), ((3, 4, 6), (3, 6, 2)),
           ((2, 3, 4, 8), (2, 3, 8, 5)), ((1, 9), (9, 16))]


@pytest.mark.parametrize("a,b", MATMULS)
@pytest.mark.parametrize("epilogue", ["none", "bias", "bias_relu", "relu", "bias_gelu"])
def test_matmul(a, b, epilogue, mode) -> None:  # noqa: ANN001
    rng = np.random.default_rng(len(a) * 10 + len(b))
    out = np.matmul(np.zeros(a), np.zeros(b)).shape
    weights = {"B": rand(rng, *b)}
    nodes = [helper.make_node("MatMul", ["A", "B"], ["p"])]
    last = "p"
    if "bias" in epilogue:
        weights["bias"] = rand(rng, out[-1])
        nodes.append(helper.make_node("Add", ["bias", "p"], ["q"]))
        last = "q"
    if "relu" in epilogue:
        nodes.append(helper.make_node("Relu", [last], ["y"]))
        last = "y"
    if "gelu" in epilogue:
        nodes.append(helper.make_node("Gelu", [last], ["y"], approximate="tanh"))
        last = "y"
    m = model(nodes, {"A": a}, {last: out}, weights)
    mod = check(m, {"A": rand(rng, *a)}, {"cublas"}, mode)
    (plan,) = next(c for c in mod.compiled.values() if c.backend == "cublas").handle["plans"]
    assert plan.epilogue == {"none": "none", "bias": "bias", "bias_relu": "relu_bias",
                             "relu": "relu", "bias_gelu": "gelu_bias"}[epilogue]


def test_batched_matmul_with_transposed_operand(mode) -> None:
    """Attention's Q K^T: the Transpose is folded into the call as an operand transpose."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Transpose", ["K"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["Q", "kt"], ["y"])]
    m = model(nodes, {"Q": (2, 3, 5, 8), "K": (2, 3, 6, 8)}, {"y": (2, 3, 5, 6)}, {})
    mod = check(m, {"Q": rand(rng, 2, 3, 5, 8), "K": rand(rng, 2, 3, 6, 8)}, {"cublas"}, mode)
    (plan,) = mod.compiled[mod.partition_report().regions[0].name].handle["plans"]
    assert plan.trans_b and plan.batch == 6 and plan.stride_b == 48


@pytest.mark.parametrize("attrs,c_shape", [
    (dict(), None), (dict(transB=1), (4,)), (dict(transA=1, alpha=0.5), (1, 4)),
    (dict(transA=1, transB=1, beta=0.25, alpha=2.0), (3, 4)), (dict(beta=0.0), (4,)),
])
@pytest.mark.parametrize("relu", [False, True])
def test_gemm(attrs, c_shape, relu, mode) -> None:  # noqa: ANN001
    rng = np.random.default_rng(6)
    a = (5, 3) if attrs.get("transA") else (3, 5)
    b = (4, 5) if attrs.get("transB") else (5, 4)
    weights = {"B": rand(rng, *b)}
    ins = ["A", "B"]
    if c_shape is not None:
        weights["C"] = rand(rng, *c_shape)
        ins.append("C")
    nodes = [helper.make_node("Gemm", ins, ["g"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    m = model(nodes, {"A": a}, {nodes[-1].output[0]: (3, 4)}, weights)
    check(m, {"A": rand(rng, *a)}, {"cublas"}, mode)


def test_resnet_style_block_runs_on_the_libraries(mode) -> None:
    """Conv-Relu, Conv + shortcut Conv summed then Relu, pooling, Gemm, Softmax: every node on
    cudnn or cublas but the Flatten, and the result equal to the reference."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "ws", "bs"], ["cs"]),
        helper.make_node("Sum", ["c2", "cs"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["l"], transB=1),
        helper.make_node("Softmax", ["l"], ["y"]),
    ]
    weights = {"w1": rand(rng, 8, 4, 3, 3), "b1": rand(rng, 8), "w2": rand(rng, 8, 8, 3, 3),
               "b2": rand(rng, 8), "ws": rand(rng, 8, 4, 1, 1), "bs": rand(rng, 8),
               "fc": rand(rng, 10, 8), "fb": rand(rng, 10)}
    m = model(nodes, {"x": (2, 4, 8, 8)}, {"y": (2, 10)}, weights)
    mod = check(m, {"x": rand(rng, 2, 4, 8, 8)}, {"cudnn", "cublas", "cuda"}, mode)
    ops = [p.op for c in mod.compiled.values() if c.backend == "cudnn"
           for p in c.handle["plans"]]
    assert "ConvAddRelu" in ops and "ConvRelu" in ops
