"""One-node ONNX models for the op tests (tests/ops).

Build a model around a single node, run it with onnxruntime (or the onnx package's reference
evaluator, for ops onnxruntime lacks) and with Tessera (``import_onnx``, then every reference
result checked against its inferred type, then the reference interpreter), and compare.
Input i of a model is named ``x{i}`` and output i ``y{i}``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from optional import require

from tessera.backends.reference.interpreter import evaluate_function
from tessera.frontend.onnx import import_onnx
from tessera.ir.graph import Function
from tessera.ir.types import TensorType
from tessera.ops.registry import get_schema

ort = require("onnxruntime")

Inputs = Sequence[np.ndarray | None]


def one_node_model(op: str, inputs: Inputs, attrs: dict | None = None, *, opset: int,
                   consts: Collection[int] = (), outputs: int | Sequence[str] = 1,
                   typed: bool = True) -> onnx.ModelProto:
    """A model holding one ``op`` node (default domain, ``opset``).

    ``inputs[i]`` is None for an omitted optional input; input i is an initializer when i is in
    ``consts``, else a graph input. ``outputs`` is the number of outputs or their names, where
    an empty name leaves that optional output out. With ``typed`` the outputs are typed (see
    :func:`type_outputs_by_inference`) so that the ONNX checker accepts the model; untyped
    outputs suit onnxruntime and ``import_onnx(..., check=False)``.
    """
    names = ["" if a is None else f"x{i}" for i, a in enumerate(inputs)]
    graph_inputs, inits = [], []
    for i, (name, a) in enumerate(zip(names, inputs)):
        if a is None:
            continue
        if i in consts:
            inits.append(numpy_helper.from_array(np.asarray(a), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
    out_names = [f"y{i}" for i in range(outputs)] if isinstance(outputs, int) else list(outputs)
    node = helper.make_node(op, names, out_names, **(attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs,
                              [onnx.ValueInfoProto(name=n) for n in out_names if n],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    return type_outputs_by_inference(model, feeds_of(inputs, consts)) if typed else model


def type_outputs_by_inference(model: onnx.ModelProto,
                              feeds: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """The model with its outputs typed by ONNX shape inference, or, for what inference cannot
    type, by running ONNX's reference evaluator on ``feeds``, or, where that fails too (models
    meant to be rejected), as float32 scalars."""
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:  # noqa: BLE001 - inference does not know every op/opset pair
        pass
    if all(o.type.tensor_type.HasField("shape") for o in model.graph.output):
        return model
    try:
        results = [np.asarray(r) for r in ReferenceEvaluator(model).run(None, dict(feeds))]
    except Exception:  # noqa: BLE001 - a model meant to be rejected
        results = [np.zeros((), np.float32)] * len(model.graph.output)
    return set_output_types(model, results)


def set_output_types(model: onnx.ModelProto, results: Sequence[np.ndarray]) -> onnx.ModelProto:
    """Type the model's outputs, in place, as the given results of running it; returns it."""
    for out, r in zip(model.graph.output, results):
        out.CopyFrom(helper.make_tensor_value_info(
            out.name, helper.np_dtype_to_tensor_dtype(r.dtype), list(r.shape)))
    return model


def feeds_of(inputs: Inputs, consts: Collection[int] = ()) -> dict[str, np.ndarray]:
    """The graph-input feeds of :func:`one_node_model`'s model: the inputs neither omitted nor
    initializers, by name."""
    return {f"x{i}": a for i, a in enumerate(inputs) if a is not None and i not in consts}


def run_oracle(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
               oracle: str = "ort") -> list[np.ndarray]:
    """The model's outputs from onnxruntime (``"ort"``) or from the onnx package's reference
    evaluator (``"ref"``, for ops onnxruntime lacks)."""
    if oracle == "ort":
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, dict(feeds))
    if oracle == "ref":
        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, dict(feeds))]
    raise ValueError(f"unknown oracle {oracle!r}")


def evaluate_checked(fn: Function, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``fn`` node by node, asserting that every reference result has its inferred
    type, then return the outputs of the reference interpreter (``evaluate_function``)."""
    env = {id(v): feeds[v.name] for v in fn.inputs}

    def get(v):
        return v.data if v.data is not None else env[id(v)]

    for node in fn.nodes:
        results = get_schema(node.op).evaluate(
            [None if v is None else get(v) for v in node.inputs], node.attrs)
        assert len(results) >= len(node.outputs), (node.op, len(results), len(node.outputs))
        for out, res in zip(node.outputs, results):
            assert TensorType.of(res) == out.type, (node.op, TensorType.of(res), out.type)
            env[id(out)] = res
    outs = evaluate_function(fn, feeds)
    return [outs[v.name] for v in fn.outputs]


def run_tessera(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *,
                check: bool = True) -> list[np.ndarray]:
    """Import the model (with the ONNX checker unless ``check`` is false) and evaluate it with
    :func:`evaluate_checked`."""
    return evaluate_checked(import_onnx(model, check=check), feeds)


def assert_same(got: np.ndarray, want: np.ndarray, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Same dtype and shape; floats equal to ``rtol``/``atol`` (compared in float64, NaN equal
    to NaN) when either is nonzero, everything else exactly."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f" and (rtol or atol):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def check(op: str, inputs: Inputs, attrs: dict | None = None, *, opset: int,
          consts: Collection[int] = (), outputs: int | Sequence[str] = 1, oracle: str = "ort",
          rtol: float = 0.0, atol: float = 0.0,
          tolerances: Mapping[type | np.dtype, tuple[float, float]] | None = None,
          ) -> list[np.ndarray]:
    """Run the node (see :func:`one_node_model`) with the oracle (see :func:`run_oracle`) and
    with Tessera (:func:`evaluate_checked`), and assert that the imported function's output
    types and Tessera's outputs match the oracle's outputs; returns Tessera's outputs.

    Float outputs of a dtype in ``tolerances`` compare to that ``(rtol, atol)``, other float
    outputs to ``rtol``/``atol`` (exactly when both are 0), the rest exactly. The model's
    outputs are typed from the oracle's results before the import (with the ONNX checker).
    """
    tol = {np.dtype(k): v for k, v in (tolerances or {}).items()}
    model = one_node_model(op, inputs, attrs, opset=opset, consts=consts, outputs=outputs,
                           typed=False)
    feeds = feeds_of(inputs, consts)
    want = run_oracle(model, feeds, oracle)
    set_output_types(model, want)
    fn = import_onnx(model)
    got = evaluate_checked(fn, feeds)
    assert len(got) == len(want), (len(got), len(want))
    for v, g, w in zip(fn.outputs, got, want):
        assert v.type == TensorType.of(w), (v.type, TensorType.of(w))
        assert_same(g, w, *tol.get(w.dtype, (rtol, atol)))
    return got
