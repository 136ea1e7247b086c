"""Import an ONNX model (path, bytes or ModelProto) into a Tessera :class:`Function`."""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from tessera.errors import ModelImportError, NeedsConstantError, OpError, TesseraError
from tessera.frontend.onnx import converters as _converters  # noqa: F401  (their registrations)
from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.dtypes import onnx_dtype, read_initializer
from tessera.frontend.onnx.external_data import resolve_external_data, tensor_array
from tessera.frontend.onnx.lenient import check_model_leniently
from tessera.frontend.onnx.light_load import load_light
from tessera.frontend.onnx.order import _sorted_nodes, _sorted_nodes_of
from tessera.frontend.onnx.registry import find_converter
from tessera.frontend.onnx.sequence_value import (
    ABSENT,
    SequenceValue,
    element_name,
    flatten,
    sequence_converter,
)
from tessera.frontend.onnx.subgraphs import Scope, graph_outputs
from tessera.frontend.onnx.symbolic_import import (
    emit_known_contents,
    prune_shape_values,
    record_outputs,
)
from tessera.frontend.onnx.symbolic_shapes import _Inference, start_inference
from tessera.frontend.onnx.upgrade import MIN_OPSET, upgrade_old_opset
from tessera.ir.graph import Function, Value
from tessera.ir.symbolic import check_bounds, dim_bounds_scope, format_dims, is_static, parse_dim
from tessera.ir.types import TensorType, oversize

ModelSource = str | os.PathLike | bytes | onnx.ModelProto

#: What :func:`tar_kind` calls an exported module.
ARTIFACT = "a compiled Tessera artifact"


def load_model(model: ModelSource) -> onnx.ModelProto:
    """Read a ModelProto from a path, serialized bytes or a ModelProto; a model of a
    default-domain opset before 7 comes upgraded (:func:`upgrade_old_opset`). External data
    stays in its files, checked and located (:func:`resolve_external_data`): the importer
    reads each tensor from its file when it needs it."""
    if isinstance(model, onnx.ModelProto):
        return upgrade_old_opset(resolve_external_data(model, None, "the ModelProto"))
    model_dir = None
    try:
        if isinstance(model, (bytes, bytearray)):
            proto = onnx.load_from_string(bytes(model))
        else:
            path = Path(model)
            if not path.is_file():
                raise ModelImportError(f"model file {str(path)!r} does not exist")
            if (kind := tar_kind(path)) is not None:
                raise ModelImportError(f"{str(path)!r} is {kind}, not an ONNX model" + (
                    f"; load it with tessera.load() (CLI: tessera run {path})"
                    if kind == ARTIFACT else ""))
            # large initializers stay in the file, mapped from it when the importer reads them
            proto = load_light(path) or onnx.load(str(path), load_external_data=False)
            model_dir = path.resolve().parent
    except ModelImportError:
        raise
    except Exception as e:  # noqa: BLE001 - protobuf raises several unrelated types
        raise ModelImportError(f"cannot parse the ONNX model: {type(e).__name__}: {e}") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelImportError("the ONNX model has an empty graph (truncated or not an ONNX file?)")
    resolve_external_data(proto, model_dir, "the model" if model_dir else "the model's bytes")
    return upgrade_old_opset(proto)


def tar_kind(path: Path) -> str | None:
    """:data:`ARTIFACT` for a Tessera artifact (a tar whose first member is its manifest:
    ``manifest.json``, or ``dynamic.json`` for a module with symbolic shapes),
    ``"a tar archive"`` for another tar file, None for anything else."""
    try:
        if not tarfile.is_tarfile(path):
            return None
        with tarfile.open(path) as tar:
            first = tar.next()
    except (OSError, tarfile.TarError):
        return None
    manifests = ("manifest.json", "dynamic.json")
    return ARTIFACT if first is not None and first.name in manifests else "a tar archive"


def _attr_value(attr: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return tensor_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    if isinstance(value, list) and value and isinstance(value[0], onnx.TensorProto):
        return [tensor_array(v) for v in value]
    return value


def _opsets(proto: onnx.ModelProto) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for imp in proto.opset_import:
        domain = "" if imp.domain in ("", "ai.onnx") else imp.domain
        opsets[domain] = int(imp.version)
    if "" not in opsets:
        opsets[""] = 1 if proto.ir_version < 3 else MIN_OPSET
    return opsets


def _check_signature(g: onnx.GraphProto) -> None:
    """Name the graph input or output whose declared type the ONNX checker would refuse
    (its own message names none)."""
    for i, t in enumerate(g.initializer):
        if not t.name:
            raise ModelImportError(f"initializer #{i} (dims {list(t.dims)}) has no name")
        if not t.HasField("data_type"):
            raise ModelImportError(f"initializer {t.name!r} has no data_type")
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and not a.t.HasField("data_type"):
                raise ModelImportError(f"node {node.name!r} ({node.op_type}): the tensor of "
                                       f"attribute {a.name!r} has no data_type")
    for what, infos in (("input", g.input), ("output", g.output)):
        for i, vi in enumerate(infos):
            if not vi.name:
                raise ModelImportError(f"graph {what} #{i} has no name")
            kind = vi.type.WhichOneof("value")
            if kind in ("sequence_type", "optional_type"):
                _check_container(vi, what)
            if kind is None:
                raise ModelImportError(f"graph {what} {vi.name!r} declares no type")
            if kind == "tensor_type" and not vi.type.tensor_type.HasField("elem_type"):
                raise ModelImportError(f"graph {what} {vi.name!r} declares no element type")
            if kind == "tensor_type" and not vi.type.tensor_type.HasField("shape"):
                raise ModelImportError(f"graph {what} {vi.name!r} declares no shape (ONNX "
                                       "requires one on the main graph's inputs and outputs; "
                                       "give its rank at least)")


def _check_container(vi: onnx.ValueInfoProto, what: str) -> None:
    """Refuse a sequence or optional graph input or output that does not hold tensors
    (a sequence of sequences, a map, ...)."""
    inner = vi.type
    while inner.WhichOneof("value") in ("sequence_type", "optional_type"):
        kind = inner.WhichOneof("value")
        inner = getattr(inner, kind).elem_type
        if kind == "sequence_type":
            break
    if inner.WhichOneof("value") != "tensor_type":
        raise ModelImportError(f"graph {what} {vi.name!r}: only sequences and optionals of "
                               f"tensors are supported, not {inner.WhichOneof('value')}")


def _check_onnx_ops(g: onnx.GraphProto, opsets: dict[str, int]) -> None:
    """Name the first default-domain node whose op ONNX does not define at the model's opset
    (the checker says so in three lines)."""
    opset = opsets[""]
    for node in g.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        where = f"node {node.name or '<unnamed>'!r} ({node.op_type})"
        if not onnx.defs.has(node.op_type):
            raise ModelImportError(f"{where}: {node.op_type!r} is not an ONNX operator (a custom "
                                   f"op needs a domain of its own)")
        try:
            onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            since = onnx.defs.get_schema(node.op_type).since_version
            raise ModelImportError(f"{where}: ONNX defines {node.op_type} from opset {since}; "
                                   f"the model imports opset {opset}") from None


_CHECKER_CONTEXT = re.compile(r"==> Context: Bad node spec for node\. Name: (.*?) OpType: (\S+)")


def _checker_message(e: Exception) -> str:
    """The ONNX checker's message on one line, naming the node first where it names one."""
    text = str(e).strip()
    first = text.splitlines()[0].strip() if text else type(e).__name__
    context = _CHECKER_CONTEXT.search(text)
    if context is None:
        return " ".join(text.split())
    return f"node {context.group(1) or '<unnamed>'!r} ({context.group(2)}): {first}"


def _input_type(vi: onnx.ValueInfoProto, override: Sequence[int] | None,
                label: str | None = None, symbolic: bool = False) -> TensorType:
    t = _declared_type(vi, override, label, symbolic=symbolic)
    if (why := oversize(t)) is not None:
        raise ModelImportError(f"graph input {label or vi.name!r}: {why}")
    return t


def _tensor_type(t: onnx.TypeProto) -> onnx.TypeProto.Tensor | None:
    """The tensor type of a tensor, a sequence of tensors, or an optional of either; None
    for anything else."""
    while t.WhichOneof("value") in ("sequence_type", "optional_type"):
        t = getattr(t, t.WhichOneof("value")).elem_type
    return t.tensor_type if t.WhichOneof("value") == "tensor_type" else None


def is_sequence_type(t: onnx.TypeProto) -> bool:
    """Whether ``t`` is a sequence, or an optional holding one."""
    if t.WhichOneof("value") == "optional_type":
        t = t.optional_type.elem_type
    return t.WhichOneof("value") == "sequence_type"


def _sequence_input(fn: Function, vi: onnx.ValueInfoProto, shapes: Mapping[str, Any]
                    ) -> SequenceValue:
    """A sequence graph input as one input per element, their shapes from
    ``shapes[name]`` (a list of shapes) or ``shapes["name[i]"]``."""
    given = shapes.get(vi.name)
    if given is None:
        keys = []
        while element_name(vi.name, len(keys)) in shapes:
            keys.append(element_name(vi.name, len(keys)))
        if not keys:
            raise ModelImportError(f"graph input {vi.name!r} is a sequence: give the shapes of "
                                   f"its elements with input_shapes={{{vi.name!r}: [[...], "
                                   f"...]}} (a list of shapes, [] for an empty sequence)")
        given = [shapes[k] for k in keys]
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not all(
            isinstance(s, Sequence) and not isinstance(s, (str, bytes)) for s in given):
        raise ModelImportError(f"input_shapes[{vi.name!r}]: graph input {vi.name!r} is a "
                               f"sequence; expected a list of shapes, got {given!r}")
    elements = []
    for i, shape in enumerate(given):
        name = element_name(vi.name, i)
        elements.append(fn.add_input(name, _input_type(vi, shape, name)))
    return SequenceValue(elements, _declared_type(vi, None, vi.name, dtype_only=True).dtype)


def _declared_type(vi: onnx.ValueInfoProto, override: Sequence[int] | None,
                   label: str | None = None, dtype_only: bool = False,
                   symbolic: bool = False) -> TensorType:
    tt = _tensor_type(vi.type)
    if tt is None:
        raise ModelImportError(f"graph input {vi.name!r} is not a tensor "
                               f"({vi.type.WhichOneof('value')})")
    if dtype_only:
        return TensorType((), onnx_dtype(tt.elem_type, f"graph input {vi.name!r}"))
    name = label or vi.name
    dtype = onnx_dtype(tt.elem_type, f"graph input {vi.name!r}")
    if override is not None:
        dims = [parse_dim(d, f"input_shapes[{name!r}] dimension {i}")
                for i, d in enumerate(override)]
        if symbolic:
            if tt.HasField("shape") and len(tt.shape.dim) != len(dims):
                raise ModelImportError(f"input_shapes gives {name!r} rank {len(dims)} "
                                       f"({format_dims(dims)}); the model declares rank "
                                       f"{len(tt.shape.dim)}")
            return TensorType(tuple(dims), dtype)
        if not is_static(dims):
            raise ModelImportError(f"input_shapes[{name!r}] = {format_dims(dims)} has "
                                   f"symbolic dimensions; the importer builds a graph of "
                                   f"fixed shapes (tessera.compile takes symbolic ones)")
        shape = [int(d) for d in dims]
        if tt.HasField("shape") and len(tt.shape.dim) != len(shape):
            raise ModelImportError(f"input_shapes gives {name!r} rank {len(shape)} "
                                   f"({shape}); the model declares rank {len(tt.shape.dim)}")
        return TensorType(tuple(shape), dtype)
    if not tt.HasField("shape"):
        raise ModelImportError(f"graph input {vi.name!r} has no shape; give it in input_shapes")
    shape: list[int | str] = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            shape.append(int(d.dim_value))
        elif symbolic and d.dim_param:
            shape.append(parse_dim(d.dim_param, f"graph input {vi.name!r} dimension {i}"))
        else:
            sym = d.dim_param or "?"
            if symbolic:
                raise ModelImportError(f"graph input {vi.name!r} has an unnamed dynamic "
                                       f"dimension {i}; name it with input_shapes="
                                       f"{{{vi.name!r}: [...]}} (a size or a variable name)")
            raise ModelImportError(f"graph input {vi.name!r} has a symbolic dimension {i} "
                                   f"({sym!r}); give its shape with input_shapes="
                                   f"{{{vi.name!r}: [...]}} (CLI: --input-shapes "
                                   f"\"{vi.name}:[...]\")")
    return TensorType(tuple(shape), dtype)


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes and those of every sub-graph they hold, nested."""
    found = []
    for n in graph.node:
        found.append(n)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                        list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                found += _all_nodes(sub)
    return found


def check_onnx_model(proto: onnx.ModelProto, check: bool = True) -> dict[str, int]:
    """Refuse a model Tessera cannot import whatever its input shapes: malformed (onnx's
    checker, with ``check``), too old an opset, or with unsupported ops (every one listed in
    one :class:`ModelImportError`); the opset of each domain."""
    if check:
        _check_signature(proto.graph)
        try:
            _check_onnx_ops(proto.graph, _opsets(proto))
            check_model_leniently(proto, _opsets(proto))
        except ModelImportError:
            raise
        except UnicodeDecodeError as e:
            raise ModelImportError(f"cannot parse the ONNX model: a name or string in it is not "
                                   f"UTF-8 ({e})") from None
        except Exception as e:  # noqa: BLE001
            # The checker refuses ops that newer opsets deprecated (GroupNormalization-18);
            # they are still valid models, and the converters handle them.
            if "deprecated" not in str(e):
                raise ModelImportError(f"malformed ONNX model: {_checker_message(e)}") from None
    opsets = _opsets(proto)
    if opsets[""] < MIN_OPSET:
        raise ModelImportError(f"the model uses default-domain opset {opsets['']}; Tessera "
                               f"imports opsets {MIN_OPSET} and later (load_model upgrades "
                               f"older ones)")
    unsupported: list[tuple[str, str, int]] = []
    for n in _all_nodes(proto.graph):
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        opset = opsets.get(domain)
        if opset is None or find_converter(n.op_type, domain, opset) is None:
            unsupported.append((n.op_type if not domain else f"{domain}.{n.op_type}",
                                n.name or "<unnamed>", opset or 0))
    if unsupported:
        lines = "\n".join(f"  {op} (node {name!r}, opset {v})" for op, name, v in unsupported)
        kinds = sorted({op for op, _, _ in unsupported})
        raise ModelImportError(f"the model has {len(unsupported)} node(s) with unsupported ops "
                               f"({', '.join(kinds)}):\n{lines}", unsupported)
    return opsets


def convert_subgraph(ctx: ConvertContext, graph: onnx.GraphProto, what: str,
                     input_types: Sequence[TensorType | list[TensorType]]
                     ) -> tuple[Function, list[Value]]:
    """Convert ``graph`` (attribute ``what`` of the node ``ctx`` converts) with its declared
    inputs typed ``input_types`` (a list of types: a sequence, one input per element);
    returns the closed function and the outer values it captured, in the order of the inputs
    added for them. Sequence outputs are one output per element (``attrs["sequence_outputs"]``
    keeps their lengths: :mod:`.sequence_value`)."""
    if len(graph.input) != len(input_types):
        raise ctx.error(f"{what} declares {len(graph.input)} inputs, the node gives it "
                        f"{len(input_types)}")
    fn = Function(graph.name or what)
    env: dict[str, Any] = {}
    for vi, t in zip(graph.input, input_types):
        if isinstance(t, list):
            env[vi.name] = SequenceValue([fn.add_input(element_name(vi.name, i), e)
                                          for i, e in enumerate(t)])
        else:
            env[vi.name] = fn.add_input(vi.name, t)
    for t in graph.initializer:
        env[t.name] = fn.constant(read_initializer(t), t.name)
    scope = Scope(fn, env, ctx.scope)
    try:
        convert_nodes(fn, scope, list(graph.node), ctx.opsets)
    except NeedsConstantError as e:
        deps = scope.graph_inputs(e.inputs)
        raise NeedsConstantError(f"in {what} of node {ctx.node_name!r}: {e}", deps) from None
    except ModelImportError as e:  # name the node holding the sub-graph too
        raise ctx.error(f"in its {what}: {e}") from None
    values = graph_outputs(ctx, scope, graph, what)
    fn.outputs, names, lengths = flatten(values, [vi.name for vi in graph.output])
    _name_outputs(fn, names)
    fn.attrs["output_names"] = names
    if lengths:
        fn.attrs["sequence_outputs"] = lengths
    return fn, [outer for outer, _ in scope.captured]


def convert_nodes(fn: Function, scope: Scope, nodes: list[onnx.NodeProto],
                  opsets: dict[str, int], symbolic: _Inference | None = None) -> None:
    """Convert ``nodes`` (of the graph ``scope`` names the values of) into ``fn``, in a
    topological order; a name no node of this graph defines is looked up in the enclosing
    scopes (sub-graphs: :mod:`tessera.frontend.onnx.subgraphs`). With ``symbolic`` (the
    symbolic importer's shape inference, :mod:`.symbolic_import`) the shape arithmetic is
    folded into size expressions as it goes."""
    ctx = ConvertContext(fn, scope=scope, opsets=opsets, subgraphs=convert_subgraph,
                         nodes=convert_nodes)
    for n in _sorted_nodes_of(nodes):
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        opset = opsets[domain]
        ctx.begin(n.name or f"{n.op_type}_{n.output[0] if n.output else ''}", n.op_type, opset,
                  list(n.output))
        inputs: list[Any] = []
        for name in n.input:
            value = scope.lookup(name) if name else None
            if name and value is None:
                raise ModelImportError(f"node {ctx.node_name!r} ({n.op_type}) reads {name!r}, "
                                       f"which no node, input or initializer defines")
            inputs.append(None if value is ABSENT else value)
        attrs = {a.name: _attr_value(a) for a in n.attribute}
        known = None
        if symbolic is not None and domain == "":
            symbolic.step(n, opset)
            known = emit_known_contents(ctx, symbolic, n, attrs, inputs)
        fn_conv = find_converter(n.op_type, domain, opset)
        assert fn_conv is not None
        fn_conv = sequence_converter(ctx, fn_conv, list(n.input), inputs)
        try:
            result = known if known is not None else fn_conv(ctx, inputs, attrs)
        except NeedsConstantError:
            raise
        except ModelImportError:
            raise
        except TesseraError as e:
            raise ctx.error(str(e)) from e
        except Exception as e:  # noqa: BLE001 - a converter bug or a malformed attribute
            raise ctx.error(f"{type(e).__name__}: {e}") from e
        single = isinstance(result, (Value, SequenceValue)) or result is ABSENT
        outs = [result] if single else list(result)
        _adopt_output_names(fn, list(n.output),
                            [v if isinstance(v, Value) else None for v in outs], ctx.created)
        for name, value in zip(n.output, outs):
            if name and value is not None:
                scope.env[name] = value
        if symbolic is not None:
            record_outputs(symbolic, n, outs)
        missing = [name for name in n.output[len(outs):] if name]
        if missing:
            raise ctx.error(f"outputs {missing} are not produced by the converter")


def import_onnx(model: ModelSource, input_shapes: Mapping[str, Sequence[Any]] | None = None,
                freeze_inputs: Mapping[str, np.ndarray] | None = None,
                check: bool = True, symbolic: bool = False,
                dim_bounds: Mapping[str, Sequence[int]] | None = None) -> Function:
    """Import an ONNX model into a Tessera function.

    ``input_shapes`` overrides (or fixes symbolic) input shapes; ``freeze_inputs`` turns graph
    inputs into constants with the given values. Every unsupported op is reported in one
    :class:`ModelImportError`. A sequence input takes a list of shapes (``{"seq": [[2, 3],
    [4, 3]]}``, or ``{"seq[0]": [2, 3], "seq[1]": [4, 3]}``) and becomes one input per
    element; an optional input is present when ``input_shapes`` or ``freeze_inputs`` gives
    it, else empty (:mod:`.sequence_value`).

    With ``symbolic`` the inputs' symbolic dimensions (the model's ``dim_param`` names, or
    variable names given in ``input_shapes``) stay size variables and the graph describes
    every size: types carry size expressions and the shape arithmetic becomes expression
    attributes (:mod:`.symbolic_import`). ``dim_bounds`` (``{"seq": (1, 512)}``) are the
    variables' ranges, kept in ``attrs["dim_bounds"]``: they simplify expressions (a
    position table of 512 rows sliced to ``seq``) and bound memory.
    """
    proto = load_model(model)
    opsets = check_onnx_model(proto, check)
    g = proto.graph
    nodes = _sorted_nodes(g)

    shapes = dict(input_shapes or {})
    frozen = dict(freeze_inputs or {})
    bounds = check_bounds(dim_bounds)
    if bounds and not symbolic:
        raise ModelImportError("dim_bounds are the ranges of size variables: they need "
                               "symbolic=True")
    fn = Function(g.name or "main", {"dim_bounds": bounds} if bounds else None)
    env: dict[str, Any] = {}
    initializers = {t.name: t for t in g.initializer}
    known_inputs = {vi.name for vi in g.input}
    sequences = {vi.name for vi in g.input if is_sequence_type(vi.type)}
    for name in list(shapes) + list(frozen):
        if name not in known_inputs and name.split("[")[0] not in sequences:
            raise ModelImportError(f"{name!r} is not an input of the model (inputs: "
                                   f"{', '.join(vi.name for vi in g.input) or 'none'})")

    for t in g.initializer:
        env[t.name] = fn.constant(read_initializer(t), t.name)
    given = {name.split("[")[0] for name in shapes}
    for vi in g.input:
        if vi.name in frozen:
            env[vi.name] = _frozen_input(fn, vi, frozen[vi.name])
            continue
        if vi.name in initializers and vi.name not in shapes:
            continue  # an initializer listed as input (IR < 4): a constant with a default
        if vi.type.WhichOneof("value") == "optional_type" and vi.name not in given:
            env[vi.name] = ABSENT
        elif vi.name in sequences:
            env[vi.name] = _sequence_input(fn, vi, shapes)
        else:
            env[vi.name] = fn.add_input(vi.name, _input_type(vi, shapes.get(vi.name),
                                                             symbolic=symbolic))
    lengths = {vi.name: len(v) for vi in g.input if isinstance(v := env.get(vi.name),
                                                                SequenceValue)}

    inference = None
    if symbolic:
        variables = set(fn.size_variables)
        unknown = sorted(set(bounds) - variables)
        if unknown:
            raise ModelImportError(f"dim_bounds names {', '.join(map(repr, unknown))}, which "
                                   f"no input dimension uses (the variables are "
                                   f"{', '.join(map(repr, sorted(variables))) or 'none'})")
        constants = {**{t.name: t for t in g.initializer},
                     **{k: np.asarray(v) for k, v in frozen.items() if v is not None
                        and not isinstance(v, (list, tuple))}}
        inference, _ = start_inference({v.name: v.type.shape for v in fn.inputs}, constants,
                                       bounds)
    with dim_bounds_scope(bounds):
        convert_nodes(fn, Scope(fn, env), nodes, opsets, symbolic=inference)
    values = []
    for vi in g.output:
        if vi.name not in env:
            raise ModelImportError(f"graph output {vi.name!r} is not produced by any node")
        values.append(env[vi.name])
    fn.outputs, names, out_lengths = flatten(values, [vi.name for vi in g.output])
    if symbolic:  # after the outputs are known: a shape the model returns stays
        prune_shape_values(fn)
    _name_outputs(fn, names)
    fn.attrs["output_names"] = names
    if lengths:
        fn.attrs["sequence_inputs"] = lengths
    if out_lengths:
        fn.attrs["sequence_outputs"] = out_lengths
    if lengths or out_lengths:
        fn.attrs["model_outputs"] = [vi.name for vi in g.output]
    return fn


def _frozen_input(fn: Function, vi: onnx.ValueInfoProto, data: Any) -> Any:
    """A frozen graph input: a constant, a sequence of constants (a list for a sequence
    input), or the empty optional (None for an optional one)."""
    if data is None and vi.type.WhichOneof("value") == "optional_type":
        return ABSENT
    if is_sequence_type(vi.type):
        if not isinstance(data, (list, tuple)):
            raise ModelImportError(f"freeze_inputs[{vi.name!r}]: the input is a sequence; "
                                   f"expected a list of arrays, got {type(data).__name__}")
        return SequenceValue([fn.constant(np.asarray(a), element_name(vi.name, i))
                              for i, a in enumerate(data)],
                             _declared_type(vi, None, dtype_only=True).dtype)
    return fn.constant(np.asarray(data), vi.name)


def _adopt_output_names(fn: Function, names: list[str], values: list[Value | None],
                        created: list[Value]) -> None:
    """Give the values a converter returned their ONNX output names.

    A converter that adds several nodes names each new value after the ONNX output (the only
    hint it has), so intermediate values may take the name first; here the returned values get
    it and the intermediates are renamed. Values that existed before the node (an input passed
    through unchanged) keep their names.
    """
    new = {id(v) for v in created}
    for name, value in zip(names, values):
        if not name or value is None or value.name == name or id(value) not in new:
            continue
        for other in created:
            if other.name == name and other is not value:
                other.name = fn.fresh_name(f"{name}_part")
        fn.reserve_name(name)
        value.name = name


def _name_outputs(fn: Function, names: list[str]) -> None:
    """Give every output value its ONNX output name, adding Identity nodes where one value
    cannot carry the name (a graph input, a value listed twice, or a name taken)."""
    taken: dict[str, Value] = {}
    for v in fn.values():
        taken.setdefault(v.name, v)
    seen: set[int] = set()
    for i, (value, name) in enumerate(zip(fn.outputs, names)):
        if value.name == name and id(value) not in seen:
            seen.add(id(value))
            continue
        needs_copy = (id(value) in seen or value in fn.inputs or
                      (name in taken and taken[name] is not value))
        if needs_copy:
            if name in taken and taken[name] is not value:
                other = taken[name]
                other.name = fn.fresh_name(name + "_")
            fn.reserve_name(name)
            node = fn.add_node("Identity", [value], {}, name=f"{name}_identity",
                               num_outputs=1, output_names=[name])
            node.outputs[0].name = name
            fn.outputs[i] = node.outputs[0]
        else:
            fn.reserve_name(name)
            value.name = name
        seen.add(id(fn.outputs[i]))
        taken[name] = fn.outputs[i]


__all__ = ["import_onnx", "load_model", "onnx_dtype", "OpError"]
