"""The shared-memory convolution template (``schedules/conv.py``) executed on the host through
the project's CUDA header (real barriers), against onnxruntime: block tiles over channels and
positions, strides, dilation, padding computed by the shared fetch, fused epilogues, knob
overrides, the thread limit, and the convolutions that keep one output per thread."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import require

from plugins.cuda.tests.conftest import needs_cxx, needs_nvrtc
from tessera.frontend.onnx import import_onnx
from tessera.passes import PassManager
from tessera_cuda.emulate import run_on_host
from tessera_cuda.lowering import lower_region
from tessera_cuda.nvrtc import compile_cuda
from tessera_cuda.schedules import GPUInfo

ort = require("onnxruntime")
pytestmark = [needs_cxx, needs_nvrtc]


def conv_model(n: int, c: int, hw: tuple[int, int], oc: int, k: int, stride: int = 1,
               pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: int = 1,
               group: int = 1, epilogue: str = "relu", seed: int = 0
               ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A Conv with a bias and an epilogue: ``relu``, ``residual`` (Add of an input, then
    Relu) or ``none``."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((oc, c // group, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[k, k],
                            strides=[stride] * 2, pads=list(pads), dilations=[dilation] * 2,
                            group=group)
    nodes, inputs = [conv], {"x": rng.standard_normal((n, c, *hw)).astype(np.float32)}
    oh = (hw[0] + pads[0] + pads[2] - dilation * (k - 1) - 1) // stride + 1
    ow = (hw[1] + pads[1] + pads[3] - dilation * (k - 1) - 1) // stride + 1
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, *hw])]
    if epilogue == "residual":
        nodes += [helper.make_node("Add", ["c", "r"], ["a"]),
                  helper.make_node("Relu", ["a"], ["y"])]
        inputs["r"] = rng.standard_normal((n, oc, oh, ow)).astype(np.float32)
        graph_inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT,
                                                          [n, oc, oh, ow]))
    elif epilogue == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    else:
        conv.output[0] = "y"
    graph = helper.make_graph(
        nodes, "conv", graph_inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, oc, oh, ow])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, inputs


def run(model: onnx.ModelProto, inputs: dict[str, np.ndarray], gpu: GPUInfo | None = None,
        overrides: dict | None = None) -> tuple[np.ndarray, np.ndarray, object]:
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    graph = PassManager(opt_level=3).run(import_onnx(model))
    lowered = lower_region(graph, gpu or GPUInfo(), overrides=overrides)
    assert compile_cuda(lowered.source.text, "sm_90").cubin
    got = run_on_host(lowered, inputs)[graph.outputs[0].name]
    return got, want, lowered


CASES = {
    # several blocks along every grid axis: images x channel blocks, rows, columns
    "3x3-blocks": dict(n=2, c=8, hw=(24, 32), oc=64, k=3, pads=(1, 1, 1, 1)),
    "3x3-stride2": dict(n=3, c=4, hw=(20, 12), oc=48, k=3, stride=2, pads=(1, 1, 1, 1)),
    "1x1": dict(n=1, c=16, hw=(14, 14), oc=32, k=1),
    "7x7-stem": dict(n=1, c=3, hw=(32, 32), oc=16, k=7, stride=2, pads=(3, 3, 3, 3)),
    "dilated": dict(n=1, c=6, hw=(15, 15), oc=12, k=3, dilation=2, pads=(2, 2, 2, 2)),
    "asymmetric-pads": dict(n=1, c=5, hw=(9, 10), oc=8, k=3, pads=(0, 1, 2, 1)),
    "residual": dict(n=2, c=8, hw=(8, 8), oc=16, k=3, pads=(1, 1, 1, 1), epilogue="residual"),
    "no-epilogue": dict(n=1, c=7, hw=(11, 6), oc=10, k=3, epilogue="none"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_shared_memory_conv_matches_onnxruntime(name: str) -> None:
    model, inputs = conv_model(**CASES[name])
    got, want, lowered = run(model, inputs)
    (group,) = lowered.groups
    assert group.template == "cuda_conv2d_direct"
    assert "__shared__" in group.kernels.kernels[0].text
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_knobs_change_the_tiles_and_not_the_result() -> None:
    model, inputs = conv_model(**CASES["3x3-blocks"])
    _, _, lowered = run(model, inputs)
    chosen = {"toc": 2, "ty": 4, "bw": 8, "bh": 2, "bk": 4}
    assert lowered.groups[0].config != chosen
    got, want, again = run(model, inputs, overrides={lowered.groups[0].key: chosen})
    assert again.groups[0].config == chosen
    assert again.groups[0].kernels.kernels[0].launch.block == (16, 4, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_blocks_respect_the_thread_limit() -> None:
    model, inputs = conv_model(**CASES["3x3-blocks"])
    got, want, lowered = run(model, inputs, gpu=GPUInfo(max_threads_per_block=64))
    launch = lowered.groups[0].kernels.kernels[0].launch
    assert np.prod(launch.block) <= 64
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_depthwise_and_grouped_convs_keep_one_output_per_thread() -> None:
    for group in (8, 2):
        model, inputs = conv_model(1, 8, (9, 9), 8, 3, pads=(1, 1, 1, 1), group=group)
        got, want, lowered = run(model, inputs)
        assert lowered.groups[0].template == "cuda_reduce_epilogue"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_missing_barrier_makes_the_conv_wrong() -> None:
    """The template's shared tiles need the barriers ``thread_sync`` places: without them the
    block's threads overwrite a step's tiles while others still read the previous step's."""
    from tessera import te
    from tessera.topi.nn.conv2d import conv2d_nchw
    from tessera_cuda.codegen import CudaSource
    from tessera_cuda.host_exec import HostModule
    from tessera_cuda.pipeline import gpu_pipeline
    from tessera_cuda.schedules import schedule_group

    rng = np.random.default_rng(5)
    x = te.placeholder((1, 16, 12, 12), "float32", name="x")
    w = te.placeholder((16, 16, 3, 3), "float32", name="w")
    y = conv2d_nchw(x, w, 1, 1)
    sched = schedule_group([y], GPUInfo())
    assert sched.template == "cuda_conv2d_direct" and sched.configs[0]["bk"] < 16
    xv = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    wv = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    for sync in (True, False):
        pipeline = gpu_pipeline() if sync else gpu_pipeline().without("thread_sync")
        src = CudaSource()
        group = src.add(pipeline.run(te.lower(sched.schedule, [x, w, y], "conv")))
        wrong = 0
        for _ in range(3):  # a race: make its effect certain
            out = np.zeros((1, 16, 12, 12), np.float32)
            HostModule(src).run_group(group, {"x": xv, "w": wv, y.op.name: out})
            wrong += not np.allclose(out, _reference_conv(xv, wv), rtol=1e-4, atol=1e-4)
        assert (wrong == 0) if sync else (wrong > 0)


def _reference_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Stride 1, padding 1, 3x3."""
    n, c, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.float64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out.astype(np.float32)
