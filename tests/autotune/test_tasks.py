"""Tuning tasks of a model (``tessera.autotune.tasks``): one per distinct workload and
template, weighted by how many kernels run it, with the knobs' candidates, heaviest first."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tessera.autotune import extract_tasks

RNG = np.random.default_rng(43)


def _two_identical_convs_and_a_matmul() -> onnx.ModelProto:
    w1 = RNG.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1
    w2 = RNG.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1
    fc = RNG.standard_normal((16 * 8 * 8, 10)).astype(np.float32) * 0.01
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Flatten", ["d"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(fc, "fc")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_llvm_tasks_are_weighted_distinct_workloads() -> None:
    tasks = extract_tasks(_two_identical_convs_and_a_matmul(), target="llvm")
    convs = [t for t in tasks if t.template == "conv2d_NCHWc"]
    assert len(convs) == 1 and convs[0].weight == 2 and len(convs[0].kernels) == 2
    conv = convs[0]
    assert conv.backend == "llvm" and conv.tunable and conv.space_size > 1
    assert all(conv.default[k] in cands for k, cands in conv.knobs.items())
    assert len({t.key for t in tasks}) == len(tasks)
    # heaviest first: the two convolutions outweigh the 1024 x 10 product
    assert tasks[0] is conv and conv.flops > 0


def test_cuda_tasks_without_a_gpu() -> None:
    import pytest

    pytest.importorskip("tessera_cuda")
    from tessera_cuda.nvrtc import nvrtc_missing

    if nvrtc_missing():
        pytest.skip(nvrtc_missing())
    tasks = extract_tasks(_two_identical_convs_and_a_matmul(), target="cuda -arch=sm_90")
    conv = next(t for t in tasks if t.template == "cuda_conv2d_direct")
    assert conv.weight == 2 and conv.backend == "cuda" and conv.target == "cuda -arch=sm_90"
    assert set(conv.knobs) == {"toc", "ty", "bw", "bh", "bk"}
