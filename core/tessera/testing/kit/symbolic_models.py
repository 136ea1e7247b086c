"""The models :func:`~tessera.testing.kit.check_symbolic_shapes` runs: the kit's own (an
encoder and an attention step over a key cache, a convolution stack and a convolution step
over a feature cache) and a backend's, each a :class:`SymbolicModel`: an ONNX model whose
inputs keep symbolic dimensions, and the sizes to run it at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tessera.errors import TesseraError

__all__ = ["DEFAULT_VALUES", "PAST", "SIZES", "SymbolicModel", "as_symbolic_model",
           "cache_step_model", "conv_model", "conv_step_model", "encoder_model", "kit_models"]

#: (batch, seq) sizes the encoder is run at, each twice (the second call is a cache hit).
SIZES: tuple[tuple[int, int], ...] = ((1, 3), (2, 5), (3, 8))
#: Cache lengths the split steps are run at.
PAST: tuple[int, ...] = (2, 5, 9)
#: (batch, height, width) sizes the convolution stack is run at (odd ones floor the pooling).
CONV_SIZES: tuple[tuple[int, int, int], ...] = ((1, 8, 8), (2, 11, 7), (3, 6, 13))
#: The values a model's dimension variables take when its sizes are not given: variable i
#: of the model is ``DEFAULT_VALUES[(i + j) % 3]`` at its j-th size.
DEFAULT_VALUES: tuple[int, ...] = (3, 5, 8)
WIDTH = 8
Feeds = Callable[[Mapping[str, int], np.random.Generator], dict[str, np.ndarray]]


@dataclass(frozen=True)
class SymbolicModel:
    """An ONNX model with symbolic input dimensions, and how to check it.

    ``sizes``: the values of its dimension variables at each size it runs at (every
    variable of its inputs, each size a mapping such as ``{"batch": 2, "height": 9}``);
    ``symbolic_dims``: empty to compile it per size on first use (each size run twice: a
    compile, then a cache hit), else the variables left open in one split plan (the others
    fixed by the sizes); ``feeds``: the inputs at one size (default: random normal floats,
    small integers and random booleans of the inputs' shapes); ``mismatched``: inputs whose
    sizes break the model's relations, which must be refused with a ``RunError``."""

    model: onnx.ModelProto
    sizes: tuple[Mapping[str, int], ...]
    symbolic_dims: tuple[str, ...] = ()
    feeds: Feeds | None = None
    mismatched: Mapping[str, np.ndarray] | None = None
    variables: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        if not isinstance(self.model, onnx.ModelProto):
            raise TesseraError(f"SymbolicModel.model: expected an onnx.ModelProto, got "
                               f"{type(self.model).__name__}")
        variables = input_variables(self.model)
        if not variables:
            raise TesseraError(f"model {self.name!r}: expected inputs with symbolic dimensions "
                               f"(such as float32[batch, 3, height, width]); its inputs are "
                               f"{_signature(self.model)}")
        object.__setattr__(self, "variables", variables)
        sizes = tuple(self.sizes)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "symbolic_dims", tuple(self.symbolic_dims))
        if not sizes:
            raise TesseraError(f"model {self.name!r}: expected at least one size (a mapping of "
                               f"{', '.join(variables)} to positive ints)")
        for i, size in enumerate(sizes):
            if not isinstance(size, Mapping) or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v > 0
                    for v in size.values()):
                raise TesseraError(f"model {self.name!r}: sizes[{i}] is {size!r}; expected a "
                                   f"mapping of {', '.join(variables)} to positive ints")
            missing = [v for v in variables if v not in size]
            if missing:
                raise TesseraError(f"model {self.name!r}: sizes[{i}] gives no size for "
                                   f"{', '.join(missing)}; expected every one of "
                                   f"{', '.join(variables)}")
        unknown = [d for d in self.symbolic_dims if d not in variables]
        if unknown:
            raise TesseraError(f"model {self.name!r}: symbolic_dims names {', '.join(unknown)}, "
                               f"not variables of its inputs; expected some of "
                               f"{', '.join(variables)}")

    @property
    def name(self) -> str:
        return self.model.graph.name or "model"

    @property
    def op_types(self) -> frozenset[str]:
        return frozenset(n.op_type for n in self.model.graph.node)

    def inputs_at(self, size: Mapping[str, int], rng: np.random.Generator
                  ) -> dict[str, np.ndarray]:
        """The inputs at ``size``: ``feeds`` when given, else random arrays."""
        if self.feeds is not None:
            return dict(self.feeds(size, rng))
        return {vi.name: _random(vi, size, rng) for vi in _graph_inputs(self.model)}

    def shapes_at(self, size: Mapping[str, int]) -> dict[str, list[int]]:
        """Each input's shape at ``size``."""
        return {vi.name: _shape(vi, size) for vi in _graph_inputs(self.model)}

    def size_text(self, size: Mapping[str, int]) -> str:
        return ", ".join(f"{v}={size[v]}" for v in self.variables)


def as_symbolic_model(model: object, where: str) -> SymbolicModel:
    """``model`` as a :class:`SymbolicModel`; a bare ``onnx.ModelProto`` runs at three sizes
    (:data:`DEFAULT_VALUES`) compiled per size."""
    if isinstance(model, SymbolicModel):
        return model
    if isinstance(model, onnx.ModelProto):
        variables = input_variables(model)
        sizes = tuple({v: DEFAULT_VALUES[(i + j) % len(DEFAULT_VALUES)]
                       for i, v in enumerate(variables)} for j in range(len(DEFAULT_VALUES)))
        return SymbolicModel(model, sizes)
    raise TesseraError(f"{where}: expected a tessera.testing.kit.SymbolicModel or an "
                       f"onnx.ModelProto, got {type(model).__name__}")


def input_variables(model: onnx.ModelProto) -> tuple[str, ...]:
    """The names of the symbolic dimensions of the model's inputs, in order of appearance."""
    names: dict[str, None] = {}
    for vi in _graph_inputs(model):
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                names[dim.dim_param] = None
    return tuple(names)


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _signature(model: onnx.ModelProto) -> str:
    def dims(vi: onnx.ValueInfoProto) -> str:
        return ", ".join(d.dim_param or str(d.dim_value) for d in vi.type.tensor_type.shape.dim)

    return ", ".join(f"{vi.name}: [{dims(vi)}]" for vi in _graph_inputs(model)) or "none"


def _shape(vi: onnx.ValueInfoProto, size: Mapping[str, int]) -> list[int]:
    shape = []
    for axis, dim in enumerate(vi.type.tensor_type.shape.dim):
        if dim.HasField("dim_param"):
            shape.append(int(size[dim.dim_param]))
        elif dim.HasField("dim_value"):
            shape.append(int(dim.dim_value))
        else:
            raise TesseraError(f"input {vi.name!r}: axis {axis} has neither a size nor a "
                               f"name; expected one of them, or SymbolicModel.feeds")
    return shape


def _random(vi: onnx.ValueInfoProto, size: Mapping[str, int],
            rng: np.random.Generator) -> np.ndarray:
    elem = vi.type.tensor_type.elem_type
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    shape = _shape(vi, size)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 4, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise TesseraError(f"input {vi.name!r}: no random data for element type "
                       f"{TensorProto.DataType.Name(elem)}; expected a float, integer or bool "
                       f"input, or SymbolicModel.feeds")


# -- the kit's models ------------------------------------------------------------------------

def _weights(seed: int, *names: str) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(seed)
    return [numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) / 3)
                                    .astype(np.float32), n) for n in names]


def _array(name: str, shape: Sequence[int], seed: int, scale: float = 1.0) -> onnx.TensorProto:
    data = np.random.default_rng(seed).standard_normal(shape) * scale
    return numpy_helper.from_array(data.astype(np.float32), name)


def _opset17(graph: onnx.GraphProto) -> onnx.ModelProto:
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


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
    return _opset17(graph)


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
    return _opset17(graph)


def conv_model() -> onnx.ModelProto:
    """``x: float32[batch, 3, height, width]`` -> ``y: float32[batch, 4, ⌊height/2⌋,
    ⌊width/2⌋]`` and ``pooled: float32[batch, 4, 1, 1]``: a padded 3x3 convolution with
    bias, ReLU, 2x2 max pooling, a second padded 3x3 convolution, ReLU, and a global average."""
    inits = [_array("w1", (8, 3, 3, 3), 5, 0.4), _array("b1", (8,), 6, 0.1),
             _array("w2", (4, 8, 3, 3), 7, 0.2), _array("b2", (4,), 8, 0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
        helper.make_node("GlobalAveragePool", ["y"], ["pooled"]),
    ]
    graph = helper.make_graph(
        nodes, "kit_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "oh", "ow"]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 4, 1, 1])], inits)
    return _opset17(graph)


def conv_step_model() -> onnx.ModelProto:
    """One step over a cache of image features, ``x: float32[1, 3, 8, 8]`` and ``past:
    float32[1, past, 4]`` -> ``y: float32[1, 1, 4]`` and ``present``: a convolution, ReLU
    and global average of fixed shapes (the features), then attention of the features over
    the cache they join, whose shapes have the cache's length."""
    inits = [_array("w", (4, 3, 3, 3), 9, 0.4), _array("b", (4,), 10, 0.1),
             numpy_helper.from_array(np.array([1, 1, 4], np.int64), "row")]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Reshape", ["g", "row"], ["f"]),
        helper.make_node("Concat", ["past", "f"], ["present"], axis=1),
        helper.make_node("Transpose", ["present"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["f", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "present"], ["ctx"]),
        helper.make_node("Add", ["ctx", "f"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "kit_conv_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4]),
         helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, "total", 4])], inits)
    return _opset17(graph)


def _encoder_feeds(size: Mapping[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    batch, seq = size["batch"], size["seq"]
    return {"x": rng.standard_normal((batch, seq, WIDTH)).astype(np.float32),
            "mask": rng.uniform(0.2, 1.5, (batch, seq)).astype(np.float32)}


def kit_models() -> list[SymbolicModel]:
    """The kit's models, in the order they are checked: the encoder (per size, and inputs
    whose ``seq`` differ refused), the attention step (a split plan over ``past``), the
    convolution stack (per size) and the convolution step (a split plan over ``past``)."""
    mismatched = {"x": np.ones((1, 3, WIDTH), np.float32), "mask": np.ones((1, 4), np.float32)}
    pasts = tuple({"past": p} for p in PAST)
    return [
        SymbolicModel(encoder_model(), tuple({"batch": b, "seq": s} for b, s in SIZES),
                      feeds=_encoder_feeds, mismatched=mismatched),
        SymbolicModel(cache_step_model(), pasts, symbolic_dims=("past",)),
        SymbolicModel(conv_model(), tuple({"batch": b, "height": h, "width": w}
                                          for b, h, w in CONV_SIZES)),
        SymbolicModel(conv_step_model(), pasts, symbolic_dims=("past",)),
    ]
