"""The kit's check that a backend runs models with symbolic dimensions.

The core hands every backend static shapes: a model whose inputs keep symbolic dimensions
(``x: float32[batch, seq, 8]``) is compiled once per input size it meets, on first use, and
kept in a bounded cache (:mod:`tessera.runtime.dynamic`); with ``symbolic_dims`` its parts
whose shapes do not depend on those variables are compiled once and the rest is evaluated
per call (:mod:`tessera.runtime.split`). A backend needs nothing of its own for either, but
it must be right at every size it is compiled for, and its regions must work as the
compiled parts of a split plan. :func:`check_symbolic_shapes` checks both on the backend's
target, against onnx's reference evaluator, and says which nodes the backend ran: a
backend that ran none of them has not been checked, and the check fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tessera.api import compile as compile_model
from tessera.errors import RunError
from tessera.runtime.dynamic import DynamicModule

__all__ = ["SIZES", "SymbolicShapesResult", "cache_step_model", "check_symbolic_shapes",
           "encoder_model"]

#: (batch, seq) sizes the encoder is run at, each twice (the second call is a cache hit).
SIZES: tuple[tuple[int, int], ...] = ((1, 3), (2, 5), (3, 8))
#: Cache lengths the split step is run at.
PAST: tuple[int, ...] = (2, 5, 9)
WIDTH = 8


@dataclass(frozen=True)
class SymbolicShapesResult:
    """What :func:`check_symbolic_shapes` saw."""

    backend: str
    #: nodes the backend ran in the module specialised for each of :data:`SIZES`
    nodes_per_size: tuple[int, ...]
    #: nodes the backend ran in the split plan's compiled parts (0: it took none of them)
    split_nodes: int
    #: the dynamic module's cache after the runs (``compiles``, ``hits``, ...)
    compiles: int
    hits: int

    def __str__(self) -> str:
        return (f"backend {self.backend!r}: ran {', '.join(map(str, self.nodes_per_size))} "
                f"nodes at sizes {', '.join(f'{b}x{s}' for b, s in SIZES)} "
                f"({self.compiles} compiles, {self.hits} hits); {self.split_nodes} nodes in a "
                f"split plan's compiled parts")


def _weights(seed: int, *names: str) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(seed)
    return [numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) / 3)
                                    .astype(np.float32), n) for n in names]


def encoder_model() -> onnx.ModelProto:
    """``x: float32[batch, seq, 8]`` and ``mask: float32[batch, seq]`` -> ``y`` of x's shape:
    a projection, bias, ReLU and exponent, a softmax over the sequence, masked."""
    rng = np.random.default_rng(1)
    inits = _weights(2, "w") + [
        numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([-1], np.int64), "last")]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Neg", ["r"], ["nr"]),
        helper.make_node("Exp", ["nr"], ["e"]),
        helper.make_node("Transpose", ["e"], ["et"], perm=[0, 2, 1]),
        helper.make_node("Softmax", ["et"], ["st"], axis=-1),      # over seq
        helper.make_node("Transpose", ["st"], ["s"], perm=[0, 2, 1]),
        helper.make_node("Unsqueeze", ["mask", "last"], ["m"]),
        helper.make_node("Mul", ["s", "m"], ["sm"]),
        helper.make_node("Add", ["sm", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "kit_encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", WIDTH]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", WIDTH])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cache_step_model() -> onnx.ModelProto:
    """One attention step over a key cache, ``x: float32[1, 1, 8]`` and
    ``past: float32[1, past, 8]`` -> ``y: float32[1, 1, 8]`` and ``present``: projections, a
    bias and a ReLU of fixed shapes around a concatenation, scores and a softmax whose
    shapes have the cache's length."""
    rng = np.random.default_rng(3)
    inits = _weights(4, "wq", "wk", "wo") + [
        numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), "bo")]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Concat", ["past", "k"], ["present"], axis=1),
        helper.make_node("Transpose", ["present"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "present"], ["ctx"]),
        helper.make_node("MatMul", ["ctx", "wo"], ["o"]),
        helper.make_node("Add", ["o", "bo"], ["ob"]),
        helper.make_node("Relu", ["ob"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "kit_cache_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, WIDTH]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, WIDTH]),
         helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, "total", WIDTH])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def check_symbolic_shapes(target: str, backend: str | None = None, *, rtol: float = 1e-4,
                          atol: float = 1e-5) -> SymbolicShapesResult:
    """Compile the kit's models with their symbolic dimensions left open for ``target``
    (``"mynpu"``, or ``"mynpu, llvm"``) and check ``backend`` (default: the target's first
    kind) in them:

    - :func:`encoder_model` without ``input_shapes``: run at each of :data:`SIZES` twice
      against the reference (a new module per size, then a cache hit); inputs whose sizes
      break the model's relation (``mask``'s ``seq`` not ``x``'s) are a ``RunError``;
    - :func:`cache_step_model` with ``symbolic_dims=["past"]``: one split plan run at
      three cache lengths against the reference.

    Raises ``AssertionError`` naming the size and output that differ, or when the backend ran
    none of the encoder's nodes (nothing was checked)."""
    name = backend or target.split(",")[0].split()[0].strip()
    model = encoder_model()
    mod = compile_model(model, target)
    assert isinstance(mod, DynamicModule), f"expected a dynamic module, got {type(mod)}"
    reference = ReferenceEvaluator(model)
    rng = np.random.default_rng(0)
    for batch, seq in SIZES:
        feeds = {"x": rng.standard_normal((batch, seq, WIDTH)).astype(np.float32),
                 "mask": rng.uniform(0.2, 1.5, (batch, seq)).astype(np.float32)}
        (want,) = reference.run(None, feeds)
        for call in ("first", "second"):
            np.testing.assert_allclose(
                mod.run(feeds)["y"], want, rtol=rtol, atol=atol,
                err_msg=f"{target}: output 'y' at batch={batch}, seq={seq} ({call} call)")
    try:
        mod.run({"x": np.ones((1, 3, WIDTH), np.float32), "mask": np.ones((1, 4), np.float32)})
    except RunError:
        pass
    else:
        raise AssertionError(f"{target}: inputs whose 'seq' differ ran without a RunError")
    specialised = {(s["batch"], s["seq"]): m for s, m in mod.specializations()}
    nodes = tuple(specialised[size].partition_report().backend_counts().get(name, 0)
                  for size in SIZES)
    info = mod.cache_info()
    if not any(nodes):
        raise AssertionError(
            f"backend {name!r} ran none of the kit model's nodes (ops "
            f"{', '.join(sorted({n.op_type for n in model.graph.node}))}) under target "
            f"{target!r}: nothing was checked")

    step = cache_step_model()
    split = compile_model(step, target, symbolic_dims=["past"])
    reference = ReferenceEvaluator(step)
    for past in PAST:
        feeds = {"x": rng.standard_normal((1, 1, WIDTH)).astype(np.float32),
                 "past": rng.standard_normal((1, past, WIDTH)).astype(np.float32)}
        got = split.run(feeds)
        for out, want in zip(("y", "present"), reference.run(None, feeds)):
            np.testing.assert_allclose(got[out], want, rtol=rtol, atol=atol,
                                       err_msg=f"{target}: split plan's {out!r} at past={past}")
    plans = split.split_plans()
    assert len(plans) == 1 and split.cache_info().split_fallbacks == 0, \
        f"{target}: expected one split plan for every cache length, got {len(plans)}"
    split_nodes = sum(dict(s.backend_nodes).get(name, 0) for s in plans[0][1].segments())
    return SymbolicShapesResult(name, nodes, split_nodes, info.compiles, info.hits)
