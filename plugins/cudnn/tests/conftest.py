"""Helpers for the tessera-cudnn tests: the plugins on the path, small ONNX models.

CI has no GPU: these tests check library discovery, descriptor set-up (cuDNN and cuBLASLt
create descriptors without a GPU), claims and partitioning, plans and artifacts, compiling for
``cuda -arch=sm_90 -libs=cudnn,cublas``. Tests marked ``gpu`` run the calls where a GPU is.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

PLUGINS = Path(__file__).resolve().parents[2]  # plugins/
for plugin in ("cuda", "cudnn"):
    if importlib.util.find_spec(f"tessera_{plugin}") is None:
        sys.path.insert(0, str(PLUGINS / plugin))


def _libs_missing() -> str | None:
    from tessera_cudnn import libs

    return libs.missing("cudnn") or libs.missing("cublasLt")


def _gpu_missing() -> str | None:
    from tessera_cuda.driver import driver_missing

    return _libs_missing() or driver_missing()


needs_libs = pytest.mark.skipif(_libs_missing() is not None,
                                reason=f"cuDNN/cuBLASLt: {_libs_missing()}")
needs_gpu = pytest.mark.skipif(_gpu_missing() is not None, reason=f"no GPU: {_gpu_missing()}")
#: what CI compiles for: the libraries ahead of the generated kernels, anything else on llvm
CROSS = "cuda -arch=sm_90 -libs=cudnn,cublas, llvm"


def model(nodes: list, inputs: dict[str, tuple], outputs: dict[str, tuple],
          weights: dict[str, np.ndarray], elem: int = TensorProto.FLOAT,
          opset: int = 20) -> onnx.ModelProto:
    """A one-graph ONNX model: ``inputs``/``outputs`` name -> shape (None: inferred),
    ``weights`` as initializers."""
    graph = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info(k, elem, list(s)) for k, s in inputs.items()],
        [helper.make_tensor_value_info(k, elem, None if s is None else list(s))
         for k, s in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if any(s is None for s in outputs.values()):
        inferred = onnx.shape_inference.infer_shapes(m)
        known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]
                 if v.type.tensor_type.HasField("shape")}
        for out in m.graph.output:
            if out.name in known:
                out.CopyFrom(known[out.name])
    onnx.checker.check_model(m)
    return m


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)
