"""Models of default-domain opsets before 7, upgraded on import with onnx's version converter.

The converters of :mod:`tessera.frontend.onnx.converters` start at opset 7 (numpy-style
broadcasting, no ``consumed_inputs``/``is_test`` attributes). An older model is converted to
the lowest opset from 7 on that ``onnx.version_converter`` manages, with an
:class:`OldOpsetWarning` saying from which opset to which; a model it cannot convert is a
:class:`~tessera.errors.ModelImportError` giving the opset and the converter's reason.
:func:`upgrade_old_opset` is called where the ModelProto is loaded, so every later step
(import, shape checks, symbolic shapes, the dynamic evaluator, exported artifacts) sees the
upgraded model.

One converter bug is worked around first: opset 6 and earlier broadcast ``B`` onto ``A``
from ``axis`` (``broadcast=1, axis=1``: a ``[C]`` bias on ``[N, C, H, W]``), and the
converter's adapter appends ``rank(A) - rank(B)`` unit dimensions to ``B`` where
``rank(A) - axis - rank(B)`` are needed (a ``[C, 1, 1, 1]`` bias, refused as not
broadcastable). Such a ``B`` gets an ``Unsqueeze`` with the right axes before conversion, after
which its axis is the trailing one the adapter passes through.
"""

from __future__ import annotations

import re
import warnings

import onnx
from onnx import helper, shape_inference, version_converter

from tessera.errors import ModelImportError
from tessera.frontend.onnx.stacklevel import caller_stacklevel

__all__ = ["MIN_OPSET", "OldOpsetWarning", "default_opset", "upgrade_old_opset"]

#: The oldest default-domain opset the importer's converters handle.
MIN_OPSET = 7

#: The first of the sizes that stand for symbolic dimensions while converting (odd, large:
#: no real size a broadcast is checked against is likely to equal one).
_PLACEHOLDER = 1_000_003

#: The targets tried after :data:`MIN_OPSET` when converting to it fails.
_EXTRA_TARGETS = 4


class OldOpsetWarning(UserWarning):
    """A model of an opset before 7 was upgraded with onnx's version converter."""


def default_opset(proto: onnx.ModelProto) -> int:
    """The model's default-domain (``ai.onnx``) opset version."""
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1 if proto.ir_version < 3 else MIN_OPSET


def upgrade_old_opset(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` itself when its default-domain opset is 7 or later; otherwise a new model
    converted to the lowest opset from 7 on that onnx's version converter manages (an
    :class:`OldOpsetWarning` says which). :class:`ModelImportError` when it manages none."""
    version = default_opset(proto)
    if version >= MIN_OPSET:
        return proto
    source = _align_broadcast_axes(proto)
    reasons: list[str] = []
    for target in range(MIN_OPSET, MIN_OPSET + 1 + _EXTRA_TARGETS):
        try:
            upgraded = _convert(source, target)
        except Exception as e:  # noqa: BLE001 - the converter raises RuntimeError, ValueError, ...
            reason = _converter_reason(e)
            if reasons and _same_failure(reason, reasons[-1]):
                break  # a step before the target fails: later targets take it too
            reasons.append(reason)
            continue
        warnings.warn(f"the model uses default-domain opset {version}; Tessera imports opsets "
                      f"{MIN_OPSET} and later and upgraded it to opset {target} with onnx's "
                      f"version converter", OldOpsetWarning, stacklevel=caller_stacklevel())
        return upgraded
    raise ModelImportError(f"the model uses default-domain opset {version}; Tessera imports "
                           f"opsets {MIN_OPSET} and later, and converting it to opset "
                           f"{MIN_OPSET} with onnx's version converter failed: {reasons[0]}")


def _convert(proto: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """``proto`` converted to opset ``target``. The broadcasting adapters refuse symbolic
    dimensions ("N Dimension is a param instead of an int"): where they do, the conversion is
    redone with each symbolic dimension of the graph's inputs, outputs and value infos
    replaced by a size of its own (one per name), and the model's own declarations put back
    after (the adapters only compare sizes, they write none into the graph)."""
    try:
        return version_converter.convert_version(proto, target)
    except Exception as e:  # noqa: BLE001 - as upgrade_old_opset
        if "is a param instead of an int" not in str(e):
            raise
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    sizes: dict[str, int] = {}
    fresh = iter(range(_PLACEHOLDER, _PLACEHOLDER + 2 ** 20, 2))
    graph = fixed.graph
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.dim_value = sizes.setdefault(d.dim_param, next(fresh)) if d.dim_param else (
                    next(fresh))
    upgraded = version_converter.convert_version(fixed, target)
    declared = {vi.name: vi for vi in list(proto.graph.input) + list(proto.graph.output)}
    for vi in list(upgraded.graph.input) + list(upgraded.graph.output):
        if vi.name in declared:
            vi.CopyFrom(declared[vi.name])
    del upgraded.graph.value_info[:]
    upgraded.graph.value_info.extend(proto.graph.value_info)
    return upgraded


def _converter_reason(e: Exception) -> str:
    """The first line of the converter's error, without its C++ source location and
    assertion text (``/project/onnx/.../BaseConverter.h:66: adapter_lookup: Assertion `false`
    failed: No Adapter From Version $1 for Pad`` -> ``No Adapter From Version $1 for Pad``)."""
    text = str(e).strip()
    first = text.splitlines()[0].strip() if text else type(e).__name__
    if "failed: " in first:
        first = first.split("failed: ", 1)[1]
    first = re.sub(r"^\S+\.(?:h|cc|cpp):\d+: \w+: ", "", first)
    return first or type(e).__name__


def _same_failure(a: str, b: str) -> bool:
    """Two converter reasons that differ only in version numbers."""
    return re.sub(r"\d+", "#", a) == re.sub(r"\d+", "#", b)


def _align_broadcast_axes(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto``, or a copy in which each legacy-broadcast ``B`` (``broadcast=1`` with an
    ``axis`` short of the trailing one) is unsqueezed to rank ``rank(A) - axis``, so the
    version converter's adapter need not (it would append the wrong number of dimensions)."""
    nodes = [(i, n) for i, n in enumerate(proto.graph.node)
             if n.domain in ("", "ai.onnx") and len(n.input) >= 2
             and {"broadcast", "axis"} <= {a.name for a in n.attribute}]
    if not nodes:
        return proto
    ranks = _ranks(proto)
    taken = {o for n in proto.graph.node for o in n.output} | {
        v.name for v in proto.graph.input} | {t.name for t in proto.graph.initializer}
    edits: list[tuple[int, onnx.NodeProto, str]] = []
    for i, node in nodes:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        rank_a, rank_b = ranks.get(node.input[0]), ranks.get(node.input[1])
        axis = attrs["axis"]
        if not attrs["broadcast"] or rank_a is None or rank_b is None or not isinstance(axis, int):
            continue
        if axis < 0 or axis + rank_b >= rank_a:
            continue  # trailing already (or invalid: the converter says so)
        name = f"{node.input[1]}_at_axis{axis}"
        while name in taken:
            name += "_"
        taken.add(name)
        unsqueeze = helper.make_node("Unsqueeze", [node.input[1]], [name],
                                     name=f"{node.name or node.op_type}_broadcast_axis",
                                     axes=list(range(rank_b, rank_a - axis)))
        edits.append((i, unsqueeze, name))
    if not edits:
        return proto
    aligned = onnx.ModelProto()
    aligned.CopyFrom(proto)
    for i, unsqueeze, name in reversed(edits):  # later indices first: earlier ones hold
        aligned.graph.node[i].input[1] = name
        aligned.graph.node.insert(i, unsqueeze)
    return aligned


def _ranks(proto: onnx.ModelProto) -> dict[str, int]:
    """The rank of every value shape inference knows (the declared ones if it fails)."""
    try:
        graph = shape_inference.infer_shapes(proto).graph
    except Exception:  # noqa: BLE001 - an old model inference refuses: use what is declared
        graph = proto.graph
    ranks = {t.name: len(t.dims) for t in graph.initializer}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            ranks[vi.name] = len(tt.shape.dim)
    return ranks

