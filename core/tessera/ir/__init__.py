"""Graph IR: types, values, nodes, functions, printer, JSON serialization and verifier."""

from tessera.ir.graph import Function, Graph, Node, Value
from tessera.ir.types import DType, TensorType

__all__ = ["DType", "Function", "Graph", "Node", "TensorType", "Value"]
