"""ONNX sequence values in the importer: a sequence whose length and element types are known
when the model is imported is a list of IR tensor values (:class:`SequenceValue`).

Tessera's IR values are static-shape tensors; a sequence exists only while the model is
imported. The sequence converters (:mod:`.converters.sequences`) produce and consume these
lists; any other converter that meets one is refused with a clear error. A graph (or
sub-graph) input or output of sequence type becomes one tensor per element, named
``name[0]`` .. ``name[n-1]`` (:func:`element_name`); the function keeps which names were
sequences in ``attrs["sequence_inputs"]`` / ``attrs["sequence_outputs"]`` (name -> length),
which the runtime's :class:`~tessera.runtime.module.Module` reads to take and give lists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tessera.ir.graph import Value
from tessera.ir.types import DType

if TYPE_CHECKING:
    from tessera.frontend.onnx.context import ConvertContext
    from tessera.frontend.onnx.registry import ConverterFn

__all__ = ["ABSENT", "SequenceValue", "element_name", "flatten", "regroup", "sequence_converter",
           "takes_sequences", "sequence_variant"]


class SequenceValue:
    """A sequence of tensors known at import: its elements (IR values) in order, and the
    element type an empty one was declared with (``SequenceEmpty``'s ``dtype``)."""

    def __init__(self, elements: Sequence[Value], dtype: DType | None = None):
        self.elements: tuple[Value, ...] = tuple(elements)
        self.dtype = dtype if dtype is not None or not self.elements \
            else self.elements[0].type.dtype

    def __len__(self) -> int:
        return len(self.elements)

    def __repr__(self) -> str:
        return f"SequenceValue({[str(v.type) for v in self.elements]})"


class _Absent:
    """An empty optional known at import (``Optional`` with only a type, an optional graph
    input not given): read by a node, it is an omitted input (``None``)."""

    def __repr__(self) -> str:
        return "ABSENT"


#: The empty optional (see :class:`_Absent`).
ABSENT = _Absent()


def element_name(name: str, index: int) -> str:
    """The name of element ``index`` of the sequence input or output ``name``."""
    return f"{name}[{index}]"


def flatten(values: Sequence[Any], names: Sequence[str]
            ) -> tuple[list[Value], list[str], dict[str, int]]:
    """Graph outputs with each sequence replaced by its elements: the flat values, their
    names, and the sequences' lengths by output name (empty when there is none); an empty
    optional (:data:`ABSENT`) has no flat value and length -1."""
    flat: list[Value] = []
    flat_names: list[str] = []
    lengths: dict[str, int] = {}
    for value, name in zip(values, names):
        if value is ABSENT:
            lengths[name] = -1
        elif isinstance(value, SequenceValue):
            lengths[name] = len(value)
            flat.extend(value.elements)
            flat_names.extend(element_name(name, i) for i in range(len(value)))
        else:
            flat.append(value)
            flat_names.append(name)
    return flat, flat_names, lengths


def regroup(flat: Sequence[Value], names: Sequence[str], lengths: dict[str, int]
            ) -> list[Any]:
    """The inverse of :func:`flatten`: outputs ``names`` from the flat values."""
    out: list[Any] = []
    i = 0
    for name in names:
        if lengths.get(name) == -1:
            out.append(ABSENT)
        elif name in lengths:
            n = lengths[name]
            out.append(SequenceValue(flat[i:i + n]))
            i += n
        else:
            out.append(flat[i])
            i += 1
    return out


# -- converters that take sequences ------------------------------------------------------------

#: op type -> its converter for nodes that get a sequence as an input (an op that takes
#: tensors too: Identity, Optional, Loop, ...)
_VARIANTS: dict[str, ConverterFn] = {}


def takes_sequences(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a converter as one that accepts :class:`SequenceValue` inputs."""
    fn.takes_sequences = True  # type: ignore[attr-defined]
    return fn


def sequence_variant(op_type: str) -> Callable[[ConverterFn], ConverterFn]:
    """Register the converter of ``op_type`` used when one of its inputs is a sequence."""
    def deco(fn: ConverterFn) -> ConverterFn:
        _VARIANTS[op_type] = fn
        return fn

    return deco


def sequence_converter(ctx: ConvertContext, converter: ConverterFn, input_names: Sequence[str],
                       inputs: Sequence[Any]) -> ConverterFn:
    """The converter for a node given ``inputs``: ``converter`` when no input is a sequence or
    it accepts them, the op's sequence variant, or a :class:`ModelImportError` naming the
    node and the input that is a sequence where a tensor is expected."""
    seqs = [(name, v) for name, v in zip(input_names, inputs) if isinstance(v, SequenceValue)]
    if not seqs or getattr(converter, "takes_sequences", False):
        return converter
    variant = _VARIANTS.get(ctx.op_type)
    if variant is not None:
        return variant
    name, seq = seqs[0]
    raise ctx.error(f"input {name!r} expects a tensor, got a sequence of {len(seq)}")
