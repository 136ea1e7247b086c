"""onnx's checker, with the complaints Tessera can import past turned into warnings.

Exporters write attributes that a later (or earlier) version of an op defines into models of
an opset whose schema lacks them: onnxruntime's quantizer has written per-channel
``QuantizeLinear``/``DequantizeLinear`` with ``axis`` (an attribute from opset 13) into opset-10
and -11 models. ``onnx.checker.check_model`` refuses such a node ("Unrecognized attribute").
Where the Tessera converter that imports the node at the model's opset is the one that
imports a version of the op defining the attribute, it reads the attribute as that version
means it, and the complaint becomes a :class:`LenientImportWarning` naming the node; the check
goes on over a copy of the model without that attribute, so later problems are still found.

Everything else stays an error: an attribute no version of the op defines (a typo,
``bogus=1``), one whose meaning Tessera's converter for the model's opset does not know, wrong
attribute types, missing types, dangling inputs, cycles, wrong input counts.
"""

from __future__ import annotations

import re
import warnings

import onnx

from tessera.frontend.onnx.external_data import inline_external_data, uses_external
from tessera.frontend.onnx.registry import find_converter
from tessera.frontend.onnx.stacklevel import caller_stacklevel

__all__ = ["CHECK_WEIGHTS_MAX_BYTES", "LenientImportWarning", "check_model_leniently",
           "without_weights"]

_UNRECOGNIZED = re.compile(r"Unrecognized attribute: (\S+) for operator (\S+)")
_CONTEXT = re.compile(r"==> Context: Bad node spec for node\. Name: (.*?) OpType: (\S+)")


class LenientImportWarning(UserWarning):
    """onnx's checker refused part of the model that Tessera imports anyway (the warning
    names the node and the complaint)."""


#: A model whose initializers hold more bytes is checked without their data
#: (:func:`without_weights`).
CHECK_WEIGHTS_MAX_BYTES = 64 << 20


def check_model_leniently(proto: onnx.ModelProto, opsets: dict[str, int]) -> None:
    """``onnx.checker.check_model(proto)``; a tolerated complaint (see the module doc) is a
    warning and the check goes on; any other raises the checker's own exception. ``opsets``
    maps each domain (``""`` for the default one) to the model's opset of it.

    A model with more than :data:`CHECK_WEIGHTS_MAX_BYTES` of initializers is checked as
    :func:`without_weights` makes it: the checker serialises the whole model first (a second
    copy of every weight, and a second of BERT-base's compile), and all it checks of an
    initializer's data is its size, which the importer checks as it reads it."""
    checked = proto
    if sum(len(t.raw_data) for t in proto.graph.initializer) > CHECK_WEIGHTS_MAX_BYTES or \
            any(uses_external(t) for t in proto.graph.initializer):
        checked = without_weights(proto)
    # the checker would look for external files relative to the working directory: it sees
    # the few external tensors left (attributes, sub-graphs' initializers) with their bytes
    # (their files were checked at load: external_data.resolve_external_data)
    checked = inline_external_data(checked)
    notes: list[str] = []
    for _ in range(sum(len(n.attribute) for n in proto.graph.node) + 1):
        try:
            onnx.checker.check_model(checked)
            break
        except onnx.checker.ValidationError as e:
            found = _tolerated_attribute(checked, str(e), opsets)
            if found is None:
                raise
            if checked is proto:  # never edit the caller's model: check a copy
                checked = onnx.ModelProto()
                checked.CopyFrom(proto)
            index, attr, note = found
            node = checked.graph.node[index]
            kept = [a for a in node.attribute if a.name != attr]
            del node.attribute[:]
            node.attribute.extend(kept)
            notes.append(note)
    for note in notes:
        warnings.warn(note, LenientImportWarning, stacklevel=caller_stacklevel())


def without_weights(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose initializers are graph inputs of their names and types: the
    same graph to check (names, nodes, attributes, types, opsets), without the weights'
    bytes."""
    light = onnx.ModelProto()
    _copy_fields(light, proto, skip={"graph"})
    graph = light.graph
    _copy_fields(graph, proto.graph, skip={"initializer", "input"})
    inputs = {i.name for i in proto.graph.input}
    graph.input.extend(proto.graph.input)
    for t in proto.graph.initializer:
        if t.name not in inputs:
            graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                  list(t.dims)))
    return light


def _copy_fields(dst: object, src: object, skip: set[str]) -> None:
    for field, value in src.ListFields():  # type: ignore[attr-defined]
        if field.name in skip:
            continue
        target = getattr(dst, field.name)
        if field.is_repeated:
            target.extend(value)
        elif field.type == field.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def _tolerated_attribute(proto: onnx.ModelProto, text: str,
                         opsets: dict[str, int]) -> tuple[int, str, str] | None:
    """(node index, attribute, warning text) when the checker's complaint ``text`` is an
    attribute the node's schema lacks that Tessera's converter reads; None otherwise."""
    match = _UNRECOGNIZED.search(text)
    context = _CONTEXT.search(text)
    if match is None or context is None:
        return None
    attr, op_type = match.groups()
    name = context.group(1)
    for index, node in enumerate(proto.graph.node):
        if node.op_type != op_type or node.name != name:
            continue
        if attr not in {a.name for a in node.attribute}:
            continue
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        opset = opsets.get(domain)
        if opset is None:
            return None
        defined = _versions_defining(op_type, domain, attr)
        converter = find_converter(op_type, domain, opset)
        readers = [v for v in defined
                   if converter is not None and find_converter(op_type, domain, v) is converter]
        if not readers:
            return None
        where = (f"from opset {readers[0]}" if readers[0] > opset else
                 f"at opset {readers[0]}")
        return index, attr, (
            f"node {name or '<unnamed>'!r} ({op_type}): onnx's checker refuses attribute "
            f"{attr!r}, which {op_type} of opset {opset} does not define; ONNX defines it "
            f"{where}, and Tessera imports it with that meaning")
    return None


def _versions_defining(op_type: str, domain: str, attr: str) -> list[int]:
    """The opset versions at which a schema of ``op_type`` that defines ``attr`` starts."""
    return sorted(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                  if s.name == op_type and s.domain == domain and attr in s.attributes)
