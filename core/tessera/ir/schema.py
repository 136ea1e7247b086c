"""The op-schema table the IR consults: each op's attributes, input counts and type inference.

``Graph.add_node`` fills attribute defaults and infers output types from it, and the verifier
checks nodes against it. The table lives here, at the bottom of the layering, so that ``ir``
imports nothing above it; the op families in :mod:`tessera.ops` fill it
(:func:`tessera.ops.registry.register_op` calls :func:`add_schema`) when the ``tessera``
package is imported.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir import probe as _probe
from tessera.ir import symbolic as _sym
from tessera.ir.types import DType, TensorType


class OpPattern(IntEnum):
    """How an op may be fused (TVM's TOpPattern): lower is easier to fuse."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    OPAQUE = 8


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

_KINDS = ("int", "float", "str", "ints", "floats", "strs", "tensor", "dtype", "graph", "any")


@dataclass(frozen=True)
class Attr:
    """An attribute's kind and default (``REQUIRED`` when it has none; ``None`` when absent is
    meaningful)."""

    kind: str
    default: Any = REQUIRED

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")

    @staticmethod
    def int(default: Any = REQUIRED) -> Attr:
        return Attr("int", default)

    @staticmethod
    def float(default: Any = REQUIRED) -> Attr:
        return Attr("float", default)

    @staticmethod
    def str(default: Any = REQUIRED) -> Attr:
        return Attr("str", default)

    @staticmethod
    def ints(default: Any = REQUIRED) -> Attr:
        return Attr("ints", default)

    @staticmethod
    def floats(default: Any = REQUIRED) -> Attr:
        return Attr("floats", default)

    @staticmethod
    def strs(default: Any = REQUIRED) -> Attr:
        return Attr("strs", default)

    @staticmethod
    def tensor(default: Any = REQUIRED) -> Attr:
        return Attr("tensor", default)

    @staticmethod
    def dtype(default: Any = REQUIRED) -> Attr:
        return Attr("dtype", default)

    @staticmethod
    def graph(default: Any = REQUIRED) -> Attr:
        """A sub-graph (a :class:`~tessera.ir.graph.Function`): an ``If`` branch, a ``Loop``
        or ``Scan`` body."""
        return Attr("graph", default)

    @staticmethod
    def any(default: Any = REQUIRED) -> Attr:
        return Attr("any", default)

    def coerce(self, value: Any) -> Any:
        """Normalize a value to this kind (lists of Python ints, DType, ndarray, ...)."""
        if value is None:
            return None
        k = self.kind
        if k == "int":
            if isinstance(value, (bool, np.bool_)):
                return int(value)
            if _sym.is_dim_expr(value):  # a size expression (a symbolic shape's dimension)
                return _sym.normalize_dim(value)
            if not isinstance(value, (int, np.integer)):
                raise TypeError(f"expected an int, got {value!r}")
            return int(value)
        if k == "float":
            if not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"expected a float, got {value!r}")
            return float(value)
        if k == "str":
            if isinstance(value, bytes):
                value = value.decode()
            if not isinstance(value, str):
                raise TypeError(f"expected a string, got {value!r}")
            return value
        if k == "ints":
            return [Attr("int").coerce(v) for v in value]
        if k == "floats":
            return [Attr("float").coerce(v) for v in value]
        if k == "strs":
            return [Attr("str").coerce(v) for v in value]
        if k == "tensor":
            return np.asarray(value)
        if k == "dtype":
            return value if isinstance(value, DType) else DType.from_numpy(value)
        if k == "graph" and not all(hasattr(value, a) for a in ("nodes", "inputs", "outputs")):
            raise TypeError(f"expected a sub-graph (Function), got {type(value).__name__}")
        return value


InferFn = Callable[..., Any]
RefFn = Callable[..., Any]


@dataclass
class OpSchema:
    """Everything Tessera knows about one op."""

    name: str
    reference: RefFn
    infer: InferFn | None = None
    attrs: dict[str, Attr] = field(default_factory=dict)
    num_inputs: tuple[int, int | None] = (1, 1)
    pattern: OpPattern = OpPattern.OPAQUE
    doc: str = ""
    #: Output *shapes* for symbolic input types or attributes (same arguments as ``infer``;
    #: returns one shape or a list, dtypes come from ``infer`` at a probe size); without one,
    #: :func:`tessera.ir.probe.probe_infer` fits each dimension from ``infer`` at probe sizes.
    symbolic_infer: InferFn | None = None

    def check(self, node: str, inputs: list[Any], attrs: dict[str, Any]) -> dict[str, Any]:
        """Validate input count and attributes; return the attributes with defaults filled."""
        lo, hi = self.num_inputs
        n = len(inputs)
        while n > lo and inputs[n - 1] is None:  # trailing omitted optionals do not count
            n -= 1
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any number'}"
            raise OpError(f"node {node} ({self.name}): expected {want} inputs, got {len(inputs)}")
        for i in range(lo):
            if inputs[i] is None:
                raise OpError(f"node {node} ({self.name}): input {i} is required")
        out: dict[str, Any] = {}
        for key, value in attrs.items():
            spec = self.attrs.get(key)
            if spec is None:
                known = ", ".join(sorted(self.attrs)) or "none"
                raise OpError(f"node {node} ({self.name}): unknown attribute {key!r} "
                              f"(known: {known})")
            try:
                out[key] = spec.coerce(value)
            except (TypeError, ValueError) as e:
                raise OpError(f"node {node} ({self.name}): attribute {key!r}: {e}") from None
        for key, spec in self.attrs.items():
            if key not in out:
                if spec.default is REQUIRED:
                    raise OpError(f"node {node} ({self.name}): attribute {key!r} is required")
                out[key] = spec.default
        return out

    def infer_types(self, node: str, types: list[TensorType | None],
                    attrs: dict[str, Any]) -> list[TensorType]:
        """Output types for input types and (complete) attributes. With symbolic input types
        or size expressions among the attributes, the outputs' dimensions are expressions too
        (:meth:`infer_symbolic`)."""
        if not all(t is None or t.is_static for t in types) or any(
                _sym.has_dim_expr(v) for v in attrs.values()):
            return self.infer_symbolic(node, types, attrs)
        return self._infer_static(node, types, attrs)

    def infer_symbolic(self, node: str, types: list[TensorType | None],
                       attrs: dict[str, Any]) -> list[TensorType]:
        """:meth:`infer_types` for symbolic shapes: the op's ``symbolic_infer`` rule, checked
        against ``infer`` at a probe size, or else each dimension fitted from ``infer`` at
        several probe sizes (:mod:`tessera.ir.probe`). An :class:`OpError` names the node
        when neither works."""
        return _probe.infer(self, node, types, attrs)

    def _infer_static(self, node: str, types: list[TensorType | None],
                      attrs: dict[str, Any]) -> list[TensorType]:
        try:
            if self.infer is not None:
                result = self.infer(*types, **attrs)
            else:
                zeros = [np.zeros(t.shape, t.dtype.numpy) if t is not None else None
                         for t in types]
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    arrays = self.reference(*zeros, **attrs)
                arrays = arrays if isinstance(arrays, (tuple, list)) else (arrays,)
                result = [TensorType.of(np.asarray(a)) for a in arrays]
        except OpError as e:
            prefix = f"node {node} ({self.name}): "
            msg = str(e)
            raise OpError(msg if msg.startswith(prefix) else prefix + msg) from None
        except Exception as e:  # noqa: BLE001 - any failure here is a bad node
            shapes = ", ".join(str(t) if t is not None else "-" for t in types)
            raise OpError(f"node {node} ({self.name}): cannot infer output types for inputs "
                          f"({shapes}): {e}") from e
        return list(result) if isinstance(result, (tuple, list)) else [result]

    def evaluate(self, inputs: list[np.ndarray | None], attrs: dict[str, Any]) -> list[np.ndarray]:
        """Run the reference implementation; always returns a list of arrays."""
        with np.errstate(all="ignore"):
            result = self.reference(*inputs, **attrs)
        if isinstance(result, (tuple, list)):
            return [np.asarray(r) for r in result]
        return [np.asarray(result)]


_SCHEMAS: dict[str, OpSchema] = {}


def add_schema(schema: OpSchema) -> None:
    """Enter ``schema`` in the table (an op is registered once)."""
    if schema.name in _SCHEMAS:
        raise ValueError(f"op {schema.name} registered twice")
    _SCHEMAS[schema.name] = schema


def get_schema(name: str) -> OpSchema:
    try:
        return _SCHEMAS[name]
    except KeyError:
        raise OpError(f"unknown op {name!r}") from None


def has_op(name: str) -> bool:
    return name in _SCHEMAS


def all_ops() -> dict[str, OpSchema]:
    return dict(_SCHEMAS)
