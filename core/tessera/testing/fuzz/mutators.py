"""Mutators: each corrupts one aspect of a valid ONNX model (attributes, shapes, dtypes,
initializers, names, opsets, raw bytes) and describes what it did."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

#: Integers that break shape arithmetic: zero, negatives, huge values, int32/int64 edges.
BAD_INTS = [0, -1, -2, -7, 1, 2, 3, 5, 17, 1000, 2**31 - 1, 2**31, 2**40, 2**62, -2**62]
#: Dimension values for declared shapes.
BAD_DIMS = [0, 1, 2, 3, 7, 64, -1, -5, 2**31, 2**40]
#: Element types, valid and not (0 is UNDEFINED, 100 is no type at all).
ELEM_TYPES = list(range(0, 24)) + [100, -1]


@dataclass
class Mutant:
    """One fuzz case: what was done and the model (a ModelProto, or raw bytes when corrupted)."""

    kind: str
    description: str
    model: onnx.ModelProto | None = None
    data: bytes | None = None
    #: names an error may mention (nodes, op types, values, initializers)
    names: set[str] = field(default_factory=set)
    #: ``data`` is a serialized ModelProto to parse back (how models travel to a worker)
    serialized: bool = False


def model_names(model: onnx.ModelProto) -> set[str]:
    """Every name in a model an error message could use to point at the problem."""
    g = model.graph
    names = {vi.name for vi in list(g.input) + list(g.output) + list(g.value_info)}
    names |= {t.name for t in g.initializer}
    for n in g.node:
        names |= {n.name, n.op_type, *n.input, *n.output}
        names |= {a.name for a in n.attribute}
    return {x for x in names if x}


def _pick_node(model: onnx.ModelProto, rng: random.Random,
               with_attrs: bool = False) -> onnx.NodeProto | None:
    nodes = [n for n in model.graph.node if n.attribute or not with_attrs]
    return rng.choice(nodes) if nodes else None


def _label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} {node.name or '<unnamed>'!r}"


# -- attributes ---------------------------------------------------------------------------------
def mutate_attribute(model: onnx.ModelProto, rng: random.Random) -> str:
    node = _pick_node(model, rng, with_attrs=True)
    if node is None:
        return mutate_name(model, rng)
    attr = rng.choice(list(node.attribute))
    action = rng.randrange(6)
    if action == 0 and attr.type == AttributeProto.INTS and attr.ints:
        i = rng.randrange(len(attr.ints))
        attr.ints[i] = rng.choice(BAD_INTS)
        return f"{_label(node)}: {attr.name}[{i}] = {attr.ints[i]}"
    if action == 1 and attr.type == AttributeProto.INTS:
        values = [rng.choice(BAD_INTS[:9]) for _ in range(rng.randrange(0, 7))]
        del attr.ints[:]
        attr.ints.extend(values)
        return f"{_label(node)}: {attr.name} = {values}"
    if action == 2 and attr.type == AttributeProto.INT:
        attr.i = rng.choice(BAD_INTS + list(range(-4, 24)))
        return f"{_label(node)}: {attr.name} = {attr.i}"
    if action == 3:
        new = _wrong_type_attribute(attr.name, rng)
        node.attribute.remove(attr)
        node.attribute.append(new)
        kind = AttributeProto.AttributeType.Name(new.type)
        return f"{_label(node)}: {attr.name} retyped as {kind}"
    if action == 4:
        node.attribute.remove(attr)
        return f"{_label(node)}: attribute {attr.name} removed"
    if attr.type == AttributeProto.FLOAT:
        attr.f = rng.choice([0.0, -1.0, float("nan"), float("inf"), 1e30])
        return f"{_label(node)}: {attr.name} = {attr.f}"
    node.attribute.append(helper.make_attribute(
        rng.choice(["kernel_shape", "axis", "perm", "group", "bogus"]), rng.choice(BAD_INTS)))
    return f"{_label(node)}: extra attribute {node.attribute[-1].name}"


def _wrong_type_attribute(name: str, rng: random.Random) -> AttributeProto:
    value = rng.choice([1.5, "same", [1.0, 2.0], [b"a", b"b"], 3, [2, 2, 2, 2, 2]])
    return helper.make_attribute(name, value)


# -- shapes -------------------------------------------------------------------------------------
def mutate_shape(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    inits = {t.name for t in g.initializer}
    infos = [vi for vi in g.input if vi.name not in inits] or list(g.input)
    if rng.random() < 0.25:
        infos = list(g.output) + list(g.value_info) or infos
    vi = rng.choice(infos)
    shape = vi.type.tensor_type.shape
    dims = shape.dim
    action = rng.randrange(5)
    if action == 0 and len(dims):
        i = rng.randrange(len(dims))
        dims[i].Clear()
        dims[i].dim_value = rng.choice(BAD_DIMS)
        return f"{vi.name!r}: dim {i} = {dims[i].dim_value}"
    if action == 1:
        dims.add().dim_value = rng.choice([1, 2, 3])
        return f"{vi.name!r}: rank {len(dims)} (one more dim)"
    if action == 2 and len(dims):
        del dims[rng.randrange(len(dims))]
        return f"{vi.name!r}: rank {len(dims)} (one dim less)"
    if action == 3 and len(dims):
        i = rng.randrange(len(dims))
        dims[i].Clear()
        dims[i].dim_param = "n"
        return f"{vi.name!r}: dim {i} symbolic"
    vi.type.tensor_type.ClearField("shape")
    if rng.random() < 0.5:
        vi.type.tensor_type.shape.SetInParent()  # a scalar
        return f"{vi.name!r}: shape [] (scalar)"
    return f"{vi.name!r}: shape removed"


# -- element types ------------------------------------------------------------------------------
def mutate_dtype(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    target = rng.randrange(3)
    new = rng.choice(ELEM_TYPES)
    if target == 0 and g.initializer:
        t = rng.choice(list(g.initializer))
        old = t.data_type
        t.data_type = new
        return f"initializer {t.name!r}: data_type {old} -> {new}"
    casts = [n for n in g.node if any(a.name == "to" for a in n.attribute)]
    if target == 1 and casts:
        node = rng.choice(casts)
        for a in node.attribute:
            if a.name == "to":
                a.i = new
        return f"{_label(node)}: to = {new}"
    vi = rng.choice(list(g.input) + list(g.output))
    vi.type.tensor_type.elem_type = new
    return f"{vi.name!r}: elem_type = {new}"


# -- initializers -------------------------------------------------------------------------------
def mutate_initializer(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    if not g.initializer:
        return mutate_shape(model, rng)
    t = rng.choice(list(g.initializer))
    try:
        array = numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001 - an earlier step broke it already: remove it
        g.initializer.remove(t)
        return f"initializer {t.name!r} removed"
    action = rng.randrange(7)
    if action == 0:  # raw bytes of the wrong length
        raw = numpy_helper.from_array(array, t.name).raw_data
        cut = raw[:rng.randrange(len(raw) + 1)] if rng.random() < 0.5 else raw + b"\x01" * 3
        _replace_data(t, raw=cut)
        return f"initializer {t.name!r}: raw_data {len(raw)} -> {len(cut)} bytes"
    if action == 1:  # dims disagree with the data
        i = rng.randrange(len(t.dims) + 1)
        if i < len(t.dims):
            t.dims[i] = rng.choice(BAD_DIMS)
        else:
            t.dims.append(rng.choice([1, 2, 3]))
        return f"initializer {t.name!r}: dims {list(t.dims)}"
    if action == 2 and array.dtype.kind in "iu":  # integer values (shapes, axes, indices)
        flat = array.reshape(-1).astype(np.int64)
        if flat.size:
            flat[rng.randrange(flat.size)] = rng.choice(BAD_INTS + [-3, 4, 6, 8])
        new = flat.reshape(array.shape).astype(array.dtype) if array.dtype.kind == "i" \
            else flat.reshape(array.shape) % 256
        _replace_data(t, array=np.asarray(new, array.dtype))
        return f"initializer {t.name!r}: values {new.reshape(-1).tolist()[:8]}"
    if action in (2, 3):  # consistent data of another shape
        shape = list(array.shape) or [1]
        if rng.random() < 0.5:
            i = rng.randrange(len(shape))
            shape[i] = rng.choice([0, 1, 2, 3, 5, 9])
        else:
            shape = shape[:-1] if len(shape) > 1 and rng.random() < 0.5 else shape + [2]
        new = np.ones(shape, array.dtype)
        _replace_data(t, array=new)
        return f"initializer {t.name!r}: shape {list(array.shape)} -> {shape}"
    if action == 4:  # the same data in another element type
        dtype = rng.choice([np.float16, np.float64, np.int8, np.int32, np.int64, np.uint8,
                            np.bool_])
        _replace_data(t, array=array.astype(dtype))
        return f"initializer {t.name!r}: dtype {array.dtype} -> {np.dtype(dtype)}"
    if action == 5:
        g.initializer.remove(t)
        return f"initializer {t.name!r} removed"
    dup = TensorProto()
    dup.CopyFrom(t)
    g.initializer.append(dup)
    return f"initializer {t.name!r} duplicated"


def _replace_data(t: TensorProto, array: np.ndarray | None = None,
                  raw: bytes | None = None) -> None:
    if array is not None:
        t.CopyFrom(numpy_helper.from_array(array, t.name))
        return
    for name in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        t.ClearField(name)
    t.raw_data = raw or b""


# -- names and structure ------------------------------------------------------------------------
def mutate_name(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    node = _pick_node(model, rng)
    assert node is not None
    action = rng.randrange(8)
    if action == 0 and node.input:
        i = rng.randrange(len(node.input))
        node.input[i] = "dangling"
        return f"{_label(node)}: input {i} reads 'dangling'"
    if action == 1 and node.input:
        i = rng.randrange(len(node.input))
        node.input[i] = ""
        return f"{_label(node)}: input {i} empty"
    if action == 2:
        g.output[0].name = "nobody_makes_this"
        return "graph output renamed to 'nobody_makes_this'"
    if action == 3 and len(g.node) > 1:
        other = rng.choice([n for n in g.node if n is not node])
        node.output[0] = other.output[0]
        return f"{_label(node)}: output duplicates {other.output[0]!r}"
    if action == 4 and node.input:  # a cycle: read the node's own or a later output
        later = list(g.node)[list(g.node).index(node):]
        src = rng.choice(later)
        node.input[0] = src.output[0]
        return f"{_label(node)}: input 0 reads {src.output[0]!r} (cycle)"
    if action == 5:
        other = rng.choice(list(g.node))
        node.name = other.name
        node.output[0], other.output[0] = other.output[0], node.output[0]
        return f"{_label(node)}: outputs swapped with {other.name!r}"
    if action == 6:
        node.input.append(rng.choice(list(g.input)).name)
        return f"{_label(node)}: extra input"
    if action == 7 and node.input:
        del node.input[-1]
        return f"{_label(node)}: last input dropped"
    node.name = ""
    return f"{node.op_type}: name removed"


def mutate_opset(model: onnx.ModelProto, rng: random.Random) -> str:
    version = rng.choice([1, 6, 7, 9, 11, 13, 19, 21, 30, 1000])
    model.opset_import[0].version = version
    return f"default opset = {version}"


MUTATORS: dict[str, Callable[[onnx.ModelProto, random.Random], str]] = {
    "attribute": mutate_attribute, "shape": mutate_shape, "dtype": mutate_dtype,
    "initializer": mutate_initializer, "name": mutate_name, "opset": mutate_opset}


# -- raw bytes ----------------------------------------------------------------------------------
def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    buf = bytearray(data)
    action = rng.randrange(3)
    if action == 0:
        flips = rng.randrange(1, 9)
        for _ in range(flips):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        return bytes(buf), f"{flips} bit flips"
    if action == 1:
        cut = rng.randrange(len(buf))
        return bytes(buf[:cut]), f"truncated to {cut} of {len(buf)} bytes"
    at = rng.randrange(len(buf))
    junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
    return bytes(buf[:at] + junk + buf[at:]), f"{len(junk)} random bytes inserted at {at}"


KINDS = list(MUTATORS) + ["bytes"]


def make_mutant(seed_model: onnx.ModelProto, rng: random.Random) -> Mutant:
    """One to three mutations of one kind (or raw-byte corruption) of a copy of ``seed_model``."""
    kind = rng.choice(KINDS)
    model = onnx.ModelProto()
    model.CopyFrom(seed_model)
    names = model_names(seed_model)
    if kind == "bytes":
        data, what = mutate_bytes(model.SerializeToString(), rng)
        return Mutant(kind, what, data=data, names=names)
    steps = [MUTATORS[kind](model, rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    return Mutant(kind, "; ".join(steps), model=model, names=names | model_names(model))
