"""The inputs an ONNX model declares, with their symbolic dimensions, and what a user's
``input_shapes`` makes of them.

ONNX names a dynamic axis with a ``dim_param`` (``"batch"``, ``"sequence_length"``); the same
name on two inputs is one size. An axis with neither a size nor a name gets a variable of its
own, named after its input and position (``"pixel_values[0]"``). ``input_shapes`` may fix
some dimensions and leave or rename others: ``{"input_ids": ["batch", 128]}``; ``None`` (or
``"?"``) in it keeps the model's own dimension there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from tessera.errors import ModelImportError, TesseraError
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.ir.symbolic import Dim, InputSpec, parse_dim

__all__ = ["model_input_specs"]


def model_input_specs(proto: onnx.ModelProto,
                      input_shapes: Mapping[str, Sequence[Any]] | None = None,
                      freeze_inputs: Mapping[str, Any] | None = None) -> tuple[InputSpec, ...]:
    """The graph inputs a caller gives (not those frozen or given by an initializer), each
    with its dimensions: the model's, with ``input_shapes`` applied."""
    g = proto.graph
    shapes = dict(input_shapes or {})
    frozen = set(freeze_inputs or {})
    known = {vi.name for vi in g.input}
    sequences = {vi.name for vi in g.input if _is_sequence(vi.type)}
    for name in list(shapes) + list(frozen):
        if name not in known and name.split("[")[0] not in sequences:
            raise ModelImportError(f"{name!r} is not an input of the model (inputs: "
                                   f"{', '.join(vi.name for vi in g.input) or 'none'})")
    initializers = {t.name for t in g.initializer}
    specs = []
    for vi in g.input:
        if vi.name in frozen or (vi.name in initializers and vi.name not in shapes):
            continue
        given = {k for k in shapes if k.split("[")[0] == vi.name}
        if vi.type.WhichOneof("value") == "optional_type" and not given:
            continue  # an optional not given is empty
        if vi.name in sequences:
            specs.extend(_sequence_specs(vi, shapes))
            continue
        specs.append(_spec(vi, shapes.get(vi.name)))
    return tuple(specs)


def _is_sequence(t: onnx.TypeProto) -> bool:
    if t.WhichOneof("value") == "optional_type":
        t = t.optional_type.elem_type
    return t.WhichOneof("value") == "sequence_type"


def _sequence_specs(vi: onnx.ValueInfoProto, shapes: Mapping[str, Any]) -> list[InputSpec]:
    """A sequence input's elements, ``name[0]`` .. (their shapes: ``shapes[name]``, a list
    of shapes, or ``shapes["name[i]"]``); each element's shape must be static."""
    given = shapes.get(vi.name)
    if given is None:
        given = []
        while f"{vi.name}[{len(given)}]" in shapes:
            given.append(shapes[f"{vi.name}[{len(given)}]"])
        if not given:
            raise ModelImportError(f"graph input {vi.name!r} is a sequence: give the shapes "
                                   f"of its elements with input_shapes={{{vi.name!r}: [[...], "
                                   f"...]}} (a list of shapes; an empty sequence is "
                                   f"given with freeze_inputs={{{vi.name!r}: []}})")
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ModelImportError(f"input_shapes[{vi.name!r}]: graph input {vi.name!r} is a "
                               f"sequence; expected a list of shapes, got {given!r}")
    specs = []
    for i, shape in enumerate(given):
        spec = _spec(vi, shape, f"{vi.name}[{i}]")
        if spec.variables:
            raise ModelImportError(f"input_shapes[{vi.name!r}] element {i}: a sequence's "
                                   f"elements need static shapes, got {list(shape)}")
        specs.append(spec)
    return specs


def _spec(vi: onnx.ValueInfoProto, given: Sequence[Any] | None,
          label: str | None = None) -> InputSpec:
    t = vi.type
    while t.WhichOneof("value") in ("sequence_type", "optional_type"):
        t = getattr(t, t.WhichOneof("value")).elem_type
    if not t.HasField("tensor_type"):
        raise ModelImportError(f"graph input {vi.name!r} is not a tensor "
                               f"({vi.type.WhichOneof('value')})")
    tt = t.tensor_type
    dtype = onnx_dtype(tt.elem_type, f"graph input {vi.name!r}")
    declared: list[Dim] | None = None
    if tt.HasField("shape"):
        declared = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:
                declared.append(int(d.dim_value))
            elif d.dim_param:
                declared.append(_model_var(d.dim_param, vi.name, i))
            else:
                declared.append(f"{vi.name}[{i}]")
    if given is None:
        if declared is None:
            raise ModelImportError(f"graph input {vi.name!r} has no shape; give it in "
                                   f"input_shapes")
        return InputSpec(vi.name, tuple(declared), dtype)
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ModelImportError(f"input_shapes[{vi.name!r}]: expected a list of dimensions, "
                               f"got {given!r}")
    if declared is not None and len(declared) != len(given):
        raise ModelImportError(f"input_shapes gives {vi.name!r} rank {len(given)} "
                               f"({list(given)}); the model declares rank {len(declared)}")
    dims: list[Dim] = []
    for i, d in enumerate(given):
        if d is None or (isinstance(d, str) and d.strip() == "?"):
            if declared is None:
                raise ModelImportError(f"input_shapes[{vi.name!r}] dimension {i} keeps the "
                                       f"model's, but the model declares no shape for it")
            dims.append(declared[i])
            continue
        try:
            dims.append(parse_dim(d, f"input_shapes[{vi.name!r}] dimension {i}"))
        except TesseraError as e:
            raise ModelImportError(str(e)) from None
    return InputSpec(label or vi.name, tuple(dims), dtype)


def _model_var(param: str, name: str, index: int) -> Dim:
    """A ``dim_param`` as a variable; an expression an exporter wrote (``"2*seq"``) or a
    number in text is taken as its own variable, named by where it is."""
    try:
        return parse_dim(param, "")
    except TesseraError:
        return f"{name}[{index}]"
