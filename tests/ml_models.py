"""One-node ``ai.onnx.ml`` models for tests/ops/test_ml*.py, and the check that runs them with
onnxruntime (the reference for this domain) and with Tessera on the ref and llvm targets."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper
from optional import require

import tessera

ort = require("onnxruntime")


def ml_model(op: str, inputs: Sequence[np.ndarray], attrs: dict, *, ml_opset: int = 3,
             outputs: int = 1, consts: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """A model of one ``ai.onnx.ml`` node; inputs ``x{i}``, outputs ``y{i}`` (untyped where
    onnx's shape inference types them)."""
    names = [f"x{i}" for i in range(len(inputs))]
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                  list(a.shape))
                    for n, a in zip(names, inputs)]
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in (consts or {}).items()]
    out_names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names + list(consts or {}), out_names, domain="ai.onnx.ml",
                            **attrs)
    graph = helper.make_graph([node], "g", graph_inputs, [], initializer=inits)
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", ml_opset)])
    return typed(model, dict(zip(names, inputs)))


def typed(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``model`` with graph outputs typed from an onnxruntime run (its checker wants types)."""
    graph = model.graph
    outs = [n for node in graph.node[-1:] for n in node.output] if not graph.output else \
        [o.name for o in graph.output]
    del graph.output[:]
    graph.output.extend(onnx.ValueInfoProto(name=n) for n in outs)
    results = run_ort(model, feeds)
    del graph.output[:]
    for name, r in zip(outs, results):
        graph.output.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(r.dtype), list(r.shape)))
    return model


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_ml(model: onnx.ModelProto, feeds: dict[str, np.ndarray], *, rtol: float = 1e-5,
             atol: float = 1e-6, targets: Sequence[str] = ("ref",)) -> list[np.ndarray]:
    """Tessera's outputs on each target equal onnxruntime's (labels exactly)."""
    want = run_ort(model, feeds)
    for target in targets:
        mod = tessera.compile(model, target=target)
        got = mod.run(feeds)
        assert got is not None
        for w, (name, g) in zip(want, got.items()):
            assert g.shape == w.shape and g.dtype == w.dtype, (target, name, g.shape, w.shape,
                                                               g.dtype, w.dtype)
            if w.dtype.kind in "iub":
                np.testing.assert_array_equal(g, w, err_msg=f"{target} {name}")
            else:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol,
                                           err_msg=f"{target} {name}")
    return want
