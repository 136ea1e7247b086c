"""Sequence inputs and outputs of a compiled module: the lists callers give and get.

The importer turns an ONNX sequence input or output of length n into n tensors named
``name[0]`` .. ``name[n-1]`` and records the lengths in the graph's attributes
(``sequence_inputs``, ``sequence_outputs``; -1 for an output that is an empty optional;
``model_outputs``: the outputs as the model lists them):
:mod:`tessera.frontend.onnx.sequence_value`. A :class:`SequenceLayout` maps a caller's list
onto those tensors and gathers the outputs back into lists (None for an empty optional).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tessera.errors import RunError
from tessera.ir.graph import Function

__all__ = ["SequenceLayout"]


def _element(name: str, i: int) -> str:
    return f"{name}[{i}]"


@dataclass(frozen=True)
class SequenceLayout:
    """The sequence inputs and outputs of a module (name -> length) and its outputs as the
    model names them (a sequence output once)."""

    inputs: dict[str, int]
    outputs: dict[str, int]
    output_names: list[str]

    @staticmethod
    def of(graph: Function) -> SequenceLayout | None:
        """The layout of a module whose graph is ``graph``; None when it has no sequence."""
        inputs = dict(graph.attrs.get("sequence_inputs") or {})
        outputs = dict(graph.attrs.get("sequence_outputs") or {})
        if not inputs and not outputs:
            return None
        names = list(graph.attrs.get("model_outputs") or outputs)
        return SequenceLayout(inputs, outputs, names)

    def expand(self, name: str, value: Any) -> list[tuple[str, Any]]:
        """The module inputs a caller's input ``name`` gives: a sequence input's list as its
        elements (its length checked), any other as is."""
        n = self.inputs.get(name)
        if n is None:
            return [(name, value)]
        if not isinstance(value, (list, tuple)):
            raise RunError(f"input {name!r} is a sequence of {n} tensors: give a list of "
                           f"arrays, not {type(value).__name__}")
        if len(value) != n:
            raise RunError(f"input {name!r}: the module was compiled for a sequence of {n} "
                           f"tensors, got {len(value)}")
        return [(_element(name, i), v) for i, v in enumerate(value)]

    def expand_all(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for name, value in inputs.items() for k, v in self.expand(name, value)}

    def parts(self, name: str) -> list[str] | None:
        """The module outputs of a sequence output ``name`` ([] for an empty optional or an
        empty sequence); None for a tensor output."""
        n = self.outputs.get(name)
        if n is None:
            return None
        return [_element(name, i) for i in range(max(n, 0))]

    def gather(self, name: str, read: Any) -> Any:
        """Output ``name``, its parts read with ``read(flat_name)``: a list for a sequence,
        None for an empty optional."""
        if self.outputs.get(name) == -1:
            return None
        parts = self.parts(name)
        return read(name) if parts is None else [read(p) for p in parts]
