"""Symbolic shape inference over an ONNX graph, with TIR expressions.

Every value gets, where the rules below can say, its **shape** as a tuple of expressions over
the graph inputs' symbolic dimensions (``past``, ``total``: :class:`~tessera.tir.expr.Var`\\ s),
and, for small integer tensors of rank 0 or 1 (what exporters compute shapes with: ``Shape ->
Gather -> Concat -> Reshape``), its **contents** as expressions too. Arithmetic goes through
the TIR simplifier with the variables' bounds, so ``Shape(Concat(past_k, k))[2]`` is
``past + 1`` and ``Equal(past + 1, -1)`` is false.

What it is for: a value whose contents are known needs no node to compute it at run time;
:func:`~tessera.frontend.onnx.symbolic_eval.to_python` writes contents as Python over the
variables' sizes (a split plan, :mod:`tessera.runtime.split_program`, computes a decoder
step's shape arithmetic that way, in its own code, instead of running its nodes).

The rules follow ONNX's semantics for valid inputs (broadcasting, ``Reshape``'s 0 and -1,
``Slice``'s clamping). An op without a rule, or an argument whose value the rules cannot
express, leaves the outputs unknown (``None``): nothing is guessed. Where a node needs sizes
to agree and nothing proves they do (two broadcast dimensions, a concatenation's other
dimensions, a product's inner dimension), the need is recorded as a :class:`Relation`, which
a dynamic module checks when it binds a call's sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from tessera.frontend.onnx.external_data import tensor_array
from tessera.frontend.onnx.order import _sorted_nodes
from tessera.ir.symbolic import dim_var, dim_vars
from tessera.tir import expr as E
from tessera.tir.arith import Bounds, struct_equal
from tessera.tir.simplify import can_prove, simplify

__all__ = ["Relation", "SymValue", "infer_symbolic", "model_symbolic", "start_inference"]

#: Integer tensors (of constant shape) up to this many elements get their contents tracked.
CONTENT_LIMIT = 64

INDEX = "int64"


@dataclass(frozen=True)
class SymValue:
    """A value's shape (expressions, None if unknown) and, for a small integer tensor of rank
    0 or 1, its elements (expressions, None if unknown)."""

    shape: tuple[E.PrimExpr, ...] | None
    contents: tuple[E.PrimExpr, ...] | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)


UNKNOWN = SymValue(None)


@dataclass(frozen=True)
class Relation:
    """Sizes a node needs to agree, where nothing proves they do: two broadcast dimensions
    equal or one of them 1, a concatenation's other dimensions equal, a matrix product's inner
    dimensions equal. ``condition`` holds for valid inputs; ``sizes`` are what an error shows."""

    condition: E.PrimExpr
    node: str
    text: str
    sizes: tuple[E.PrimExpr, ...]


def _imm(v: int) -> E.PrimExpr:
    return E.IntImm(int(v), INDEX)


def _const_value(e: E.PrimExpr) -> int | None:
    return e.value if isinstance(e, E.IntImm) else None


class _Inference:
    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.values: dict[str, SymValue] = {}
        self.relations: list[Relation] = []
        #: small float constants (Resize's scales)
        self.floats: dict[str, np.ndarray] = {}
        self._seen: set[str] = set()
        self.where = ""

    def relate(self, condition: E.PrimExpr, text: str, *sizes: E.PrimExpr) -> None:
        """Record that valid inputs satisfy ``condition`` (unless it is proved already)."""
        condition = self.s(condition)
        if self.proves(condition):
            return
        key = repr(condition)
        if key in self._seen:
            return
        self._seen.add(key)
        self.relations.append(Relation(condition, self.where, text, sizes))

    # -- helpers ------------------------------------------------------------------------------
    def s(self, e: E.PrimExpr) -> E.PrimExpr:
        return simplify(e, self.bounds)

    def proves(self, cond: E.PrimExpr) -> bool:
        return can_prove(cond, self.bounds)

    def get(self, name: str) -> SymValue:
        return self.values.get(name, UNKNOWN) if name else UNKNOWN

    def ints(self, name: str) -> list[int] | None:
        """A value's contents as Python ints, when they are constants."""
        v = self.get(name)
        if v.contents is None:
            return None
        out = [_const_value(c) for c in v.contents]
        return None if any(x is None for x in out) else out  # type: ignore[misc]

    def from_array(self, a: np.ndarray) -> SymValue:
        shape = tuple(_imm(d) for d in a.shape)
        if a.dtype.kind in "iub" and a.size <= CONTENT_LIMIT:
            return SymValue(shape, tuple(_imm(int(x)) for x in a.reshape(-1)))
        return SymValue(shape)

    def array(self, v: SymValue) -> np.ndarray | None:
        """A value's contents as an object array of its (constant) shape, or None."""
        shape = _const_shape(v.shape)
        if v.contents is None or shape is None or len(v.contents) != int(np.prod(shape)):
            return None
        out = np.empty(len(v.contents), dtype=object)
        for i, c in enumerate(v.contents):
            out[i] = c
        return out.reshape(shape)

    def from_objects(self, a: np.ndarray) -> SymValue:
        """A value whose contents are the object array ``a`` (kept while small; numpy gives
        one element, not a 0-d array, for a scalar result)."""
        if not isinstance(a, np.ndarray):
            element = a
            a = np.empty((), dtype=object)
            a[()] = element
        shape = tuple(_imm(d) for d in a.shape)
        if a.size > CONTENT_LIMIT:
            return SymValue(shape)
        return SymValue(shape, tuple(self.s(c) for c in a.reshape(-1)))

    def broadcast(self, shapes: Sequence[tuple[E.PrimExpr, ...] | None]
                  ) -> tuple[E.PrimExpr, ...] | None:
        if any(s is None for s in shapes):
            return None
        rank = max(len(s) for s in shapes)  # type: ignore[arg-type]
        out: list[E.PrimExpr] = []
        for axis in range(rank):
            dims = [s[len(s) - rank + axis] for s in shapes  # type: ignore[index]
                    if axis >= rank - len(s)]  # type: ignore[arg-type]
            dim = dims[0]
            for d in dims[1:]:
                if _const_value(d) == 1:
                    continue
                if _const_value(dim) == 1:
                    dim = d
                elif not self.proves(E.eq(dim, d)):
                    # valid inputs: equal, or one of them 1
                    self.relate(E.any_of(E.eq(dim, d), E.eq(dim, _imm(1)), E.eq(d, _imm(1))),
                                f"{dim} and {d} must be equal or one of them 1 (broadcasting)",
                                dim, d)
                    dim = self.s(E.select(E.eq(dim, _imm(1)), d, dim))
            out.append(dim)
        return tuple(out)

    def elementwise(self, args: list[SymValue], fn: Callable[..., E.PrimExpr]
                    ) -> tuple[E.PrimExpr, ...] | None:
        """Contents of an elementwise op (broadcasting) over operands with known contents."""
        arrays = [self.array(a) for a in args]
        if any(a is None for a in arrays):
            return None
        try:
            parts = np.broadcast_arrays(*arrays)  # type: ignore[arg-type]
        except ValueError:
            return None
        if parts[0].size > CONTENT_LIMIT:
            return None
        flat = [p.reshape(-1) for p in parts]
        return tuple(self.s(fn(*(f[i] for f in flat))) for i in range(parts[0].size))

    # -- the graph ----------------------------------------------------------------------------
    def run(self, nodes: Sequence[onnx.NodeProto], opset: int) -> None:
        for node in nodes:
            self.step(node, opset)

    def step(self, node: onnx.NodeProto, opset: int) -> None:
        """Infer one node's outputs (its inputs inferred before)."""
        self.where = f"{node.name or node.output[0]!r} ({node.op_type})"
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value" and a.t.data_type in _FLOAT_TENSORS:
                    self.floats[node.output[0]] = tensor_array(a.t)
        try:
            outs = self.node(node, opset)
        except (TypeError, ValueError, IndexError, ZeroDivisionError):
            outs = None  # an argument the rules cannot express: unknown
        for i, name in enumerate(node.output):
            if name:
                self.values[name] = outs[i] if outs is not None and i < len(outs) \
                    else UNKNOWN

    def node(self, node: onnx.NodeProto, opset: int) -> list[SymValue] | None:
        op = node.op_type
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ins = [self.get(x) for x in node.input]
        if op == "Constant":
            if "value" in attrs:
                return [self.from_array(tensor_array(attrs["value"]))]
            for key in ("value_int", "value_ints"):
                if key in attrs:
                    return [self.from_array(np.array(attrs[key], np.int64))]
            return None
        if op == "Shape":
            shape = ins[0].shape
            if shape is None:
                return None
            rank = len(shape)
            start, end = attrs.get("start", 0), attrs.get("end", rank)
            start, end = (max(0, min(rank, x + rank if x < 0 else x)) for x in (start, end))
            dims = shape[start:end]
            return [SymValue((_imm(len(dims)),), dims)]
        if op == "Size":
            shape = ins[0].shape
            if shape is None:
                return None
            total: E.PrimExpr = _imm(1)
            for d in shape:
                total = total * d
            return [SymValue((), (self.s(total),))]
        if op in ("Identity", "Cast", "CastLike"):
            keep = op == "Identity" or self._int_cast(node, attrs, ins)
            return [SymValue(ins[0].shape, ins[0].contents if keep else None)]
        if op in _UNARY_SAME_SHAPE:
            contents = None
            if op == "Neg":
                contents = self.elementwise(ins[:1], lambda a: _imm(0) - a)
            elif op == "Abs":
                contents = self.elementwise(ins[:1], lambda a: E.select(a < _imm(0),
                                                                        _imm(0) - a, a))
            elif op == "Not":
                contents = self.elementwise(ins[:1], lambda a: _bool(E.eq(a, _imm(0))))
            return [SymValue(ins[0].shape, contents)]
        if op in _BINARY:
            shape = self.broadcast([a.shape for a in ins])
            contents = None
            fn = _BINARY[op]
            if op == "Mod" and not attrs.get("fmod", 0):  # the divisor's sign: Python's %
                fn = E.FloorMod
            if fn is not None and not (op == "Div" and not self._nonneg(ins)):
                contents = self.elementwise(ins, fn)
            return [SymValue(shape, contents)]
        if op in ("Min", "Max", "Sum"):
            shape = self.broadcast([a.shape for a in ins])
            fn = {"Min": E.min_, "Max": E.max_, "Sum": lambda a, b: a + b}[op]
            contents = self.elementwise(ins, lambda *xs: _fold(fn, xs))
            return [SymValue(shape, contents)]
        if op == "Where":
            shape = self.broadcast([a.shape for a in ins])
            contents = self.elementwise(
                ins, lambda c, a, b: E.select(E.ne(c, _imm(0)), a, b))
            return [SymValue(shape, contents)]
        if op in ("Unsqueeze", "Squeeze"):
            axes = attrs.get("axes") if opset < 13 else (
                self.ints(node.input[1]) if len(node.input) > 1 and node.input[1] else None)
            return [self._squeeze(op, ins[0], axes)]
        if op == "Concat":
            shapes = [a.shape for a in ins]
            if any(s is None for s in shapes):
                return None
            rank = len(shapes[0])  # type: ignore[arg-type]
            axis = attrs["axis"] + rank if attrs["axis"] < 0 else attrs["axis"]
            for other in shapes[1:]:
                for i in range(min(rank, len(other))):  # type: ignore[arg-type]
                    a, b = shapes[0][i], other[i]  # type: ignore[index]
                    if i != axis:
                        self.relate(E.eq(a, b), f"{a} and {b} must be equal (dimension {i} "
                                    f"of the inputs concatenated along {axis})", a, b)
            total = _imm(0)
            for s in shapes:
                total = total + s[axis]  # type: ignore[index]
            shape = tuple(self.s(total) if i == axis else d
                          for i, d in enumerate(shapes[0]))  # type: ignore[arg-type]
            arrays = [self.array(a) for a in ins]
            if all(a is not None for a in arrays):
                return [self.from_objects(np.concatenate(arrays, axis=axis))]  # type: ignore
            return [SymValue(shape)]
        if op == "Gather":
            return [self._gather(ins[0], node.input[1], ins[1], attrs.get("axis", 0))]
        if op == "Range":
            return [self._range(ins)]
        if op == "ConstantOfShape":
            dims = ins[0].contents
            if dims is None:
                return None
            contents = None
            n = 1
            for d in dims:
                n = n * _const_value(d) if _const_value(d) is not None and n is not None \
                    else None  # type: ignore[operator]
            value = attrs.get("value")
            if n is not None and n <= CONTENT_LIMIT:
                fill = tensor_array(value).reshape(-1) if value is not None \
                    else np.zeros(1, np.float32)
                if fill.dtype.kind in "iub":
                    contents = tuple(_imm(int(fill[0])) for _ in range(n))
            return [SymValue(tuple(dims), contents)]
        if op == "Expand":
            target = ins[1].contents
            if target is None:
                return None
            shape = self.broadcast([ins[0].shape, tuple(target)])
            data, out = self.array(ins[0]), _const_shape(shape)
            if data is not None and out is not None and int(np.prod(out)) <= CONTENT_LIMIT:
                return [self.from_objects(np.broadcast_to(data, out))]
            return [SymValue(shape)]
        if op == "Reshape":
            return [self._reshape(ins[0], ins[1], attrs.get("allowzero", 0))]
        if op == "Transpose":
            shape = ins[0].shape
            if shape is None:
                return None
            perm = attrs.get("perm", list(range(len(shape)))[::-1])
            data = self.array(ins[0])
            if data is not None:
                return [self.from_objects(np.transpose(data, perm))]
            return [SymValue(tuple(shape[p] for p in perm))]
        if op == "MatMul":
            a, b = ins[0].shape, ins[1].shape
            if a is None or b is None or len(a) < 2 or len(b) < 2:
                return None
            self.relate(E.eq(a[-1], b[-2]), f"{a[-1]} and {b[-2]} must be equal (the "
                        f"product's inner dimension)", a[-1], b[-2])
            batch = self.broadcast([a[:-2], b[:-2]])
            return [SymValue((*batch, a[-2], b[-1]))]  # type: ignore[misc]
        if op == "Flatten":
            shape = ins[0].shape
            if shape is None:
                return None
            axis = attrs.get("axis", 1)
            axis = axis + len(shape) if axis < 0 else axis
            lead, rest = _imm(1), _imm(1)
            for d in shape[:axis]:
                lead = lead * d
            for d in shape[axis:]:
                rest = rest * d
            return [SymValue((self.s(lead), self.s(rest)), ins[0].contents)]
        if op == "Slice":
            return [self._slice(node, ins)]
        if op in _REDUCE:
            return [self._reduce(node, ins[0], attrs, opset)]
        if op in _SAME_SHAPE_MULTI:  # normalisations: the first output has the input's shape
            return [SymValue(ins[0].shape)] + [UNKNOWN] * (len(node.output) - 1)
        if op in ("ArgMax", "ArgMin"):
            return [self._reduce_axes(ins[0], [attrs.get("axis", 0)],
                                      attrs.get("keepdims", 1))]
        if op in ("Conv", "MaxPool", "AveragePool", "LpPool"):
            return [self._window(op, ins, attrs)] + [UNKNOWN] * (len(node.output) - 1)
        if op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
            shape = ins[0].shape
            if shape is None:
                return None
            return [SymValue((*shape[:2], *[_imm(1)] * (len(shape) - 2)))]
        if op == "Gemm":
            a, b = ins[0].shape, ins[1].shape
            if a is None or b is None:
                return None
            m, k = (a[1], a[0]) if attrs.get("transA", 0) else (a[0], a[1])
            k2, n = (b[1], b[0]) if attrs.get("transB", 0) else (b[0], b[1])
            self.relate(E.eq(k, k2), f"{k} and {k2} must be equal (the product's inner "
                        f"dimension)", k, k2)
            return [SymValue((m, n))]
        if op == "Pad":
            return [self._pad(node, ins, attrs, opset)]
        if op == "Split":
            return self._split(node, ins, attrs, opset)
        if op == "Resize":
            return [self._resize(node, ins, attrs)]
        if op == "GatherND":
            data, idx = ins[0].shape, ins[1].shape
            batch = attrs.get("batch_dims", 0)
            if data is None or idx is None or _const_value(idx[-1]) is None:
                return None
            depth = _const_value(idx[-1])
            return [SymValue((*idx[:-1], *data[batch + depth:]))]  # type: ignore[operator]
        if op == "Tile":
            reps = ins[1].contents
            shape = ins[0].shape
            if reps is None or shape is None or len(reps) != len(shape):
                return None
            return [SymValue(tuple(self.s(d * r) for d, r in zip(shape, reps)))]
        return None

    def _resize(self, node: onnx.NodeProto, ins: list[SymValue],
                attrs: Mapping[str, Any]) -> SymValue:
        """``sizes`` when given, else ``floor(in * scale)`` per axis (scales that are exact
        small fractions)."""
        x = ins[0].shape
        if x is None:
            return UNKNOWN
        axes = attrs.get("axes", list(range(len(x))))
        axes = [a + len(x) if a < 0 else a for a in axes]
        dims = list(x)
        if len(node.input) > 3 and node.input[3]:
            sizes = ins[3].contents
            if sizes is None or len(sizes) != len(axes):
                return UNKNOWN
            for a, size in zip(axes, sizes):
                dims[a] = size
            return SymValue(tuple(dims))
        scales = self.floats.get(node.input[2]) if len(node.input) > 2 else None
        if scales is None or scales.size != len(axes):
            return UNKNOWN
        from fractions import Fraction
        for a, scale in zip(axes, scales.reshape(-1).tolist()):
            frac = Fraction(scale).limit_denominator(64)
            if float(frac) != scale or frac <= 0:
                return UNKNOWN
            dims[a] = self.s(E.FloorDiv(dims[a] * _imm(frac.numerator),
                                        _imm(frac.denominator)))
        return SymValue(tuple(dims))

    def _reduce_axes(self, x: SymValue, axes: Sequence[int], keep: int) -> SymValue:
        if x.shape is None:
            return UNKNOWN
        rank = len(x.shape)
        norm = {a + rank if a < 0 else a for a in axes}
        return SymValue(tuple(_imm(1) if i in norm else d for i, d in enumerate(x.shape)
                              if keep or i not in norm))

    def _window(self, op: str, ins: list[SymValue], attrs: Mapping[str, Any]) -> SymValue:
        """Convolutions and pools: ``floor((in + pads - dilation * (k - 1) - 1) / stride) + 1``
        per spatial axis (``ceil`` with ``ceil_mode``; ``SAME_*``: ``ceil(in / stride)``)."""
        x = ins[0].shape
        if x is None:
            return UNKNOWN
        spatial = len(x) - 2
        if op == "Conv":
            w = ins[1].shape
            if w is None:
                return UNKNOWN
            kernel = list(attrs.get("kernel_shape", w[2:]))
            channels = w[0]
        else:
            kernel = list(attrs["kernel_shape"])
            channels = x[1]
        kernel = [k if isinstance(k, E.PrimExpr) else _imm(k) for k in kernel]
        strides = attrs.get("strides", [1] * spatial)
        dilations = attrs.get("dilations", [1] * spatial)
        pads = attrs.get("pads", [0] * (2 * spatial))
        auto = attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        ceil_mode = attrs.get("ceil_mode", 0)
        out = [x[0], channels]
        for i in range(spatial):
            size, stride = x[2 + i], strides[i]
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                out.append(self.s(E.FloorDiv(size + _imm(stride - 1), _imm(stride))))
                continue
            if auto == "VALID":
                pad = 0
            else:
                pad = pads[i] + pads[i + spatial]
            span = size + _imm(pad) - _imm(dilations[i]) * (kernel[i] - _imm(1)) - _imm(1)
            if not ceil_mode:
                out.append(self.s(E.FloorDiv(span, _imm(stride)) + _imm(1)))
                continue
            n = E.FloorDiv(span + _imm(stride - 1), _imm(stride)) + _imm(1)
            # the last window must start within the input or its leading padding
            begin = 0 if auto == "VALID" else pads[i]
            out.append(self.s(n - E.select((n - _imm(1)) * _imm(stride) >= size + _imm(begin),
                                           _imm(1), _imm(0))))
        return SymValue(tuple(out))

    def _pad(self, node: onnx.NodeProto, ins: list[SymValue], attrs: Mapping[str, Any],
             opset: int) -> SymValue:
        x = ins[0].shape
        if x is None:
            return UNKNOWN
        rank = len(x)
        if opset < 11:
            pads: Sequence[E.PrimExpr] | None = tuple(_imm(p) for p in attrs.get("pads", ()))
        else:
            pads = ins[1].contents if len(ins) > 1 else None
        if pads is None:
            return UNKNOWN
        axes = list(range(rank))
        if len(node.input) > 3 and node.input[3]:
            got = self.ints(node.input[3])
            if got is None:
                return UNKNOWN
            axes = [a + rank if a < 0 else a for a in got]
        if len(pads) != 2 * len(axes):
            return UNKNOWN
        dims = list(x)
        for k, axis in enumerate(axes):
            dims[axis] = self.s(dims[axis] + pads[k] + pads[k + len(axes)])
        return SymValue(tuple(dims))

    def _split(self, node: onnx.NodeProto, ins: list[SymValue], attrs: Mapping[str, Any],
               opset: int) -> list[SymValue] | None:
        x = ins[0].shape
        if x is None:
            return None
        rank = len(x)
        axis = attrs.get("axis", 0)
        axis = axis + rank if axis < 0 else axis
        parts: Sequence[E.PrimExpr] | None
        if opset >= 13 and len(node.input) > 1 and node.input[1]:
            parts = ins[1].contents
        elif "split" in attrs:
            parts = tuple(_imm(p) for p in attrs["split"])
        else:
            n = attrs.get("num_outputs", len(node.output))
            size = x[axis]
            chunk = self.s(E.FloorDiv(size + _imm(n - 1), _imm(n)))
            parts = tuple([chunk] * (n - 1) + [self.s(size - chunk * _imm(n - 1))])
        if parts is None or len(parts) != len(node.output):
            return None
        return [SymValue(tuple(p if i == axis else d for i, d in enumerate(x)))
                for p in parts]

    def _int_cast(self, node: onnx.NodeProto, attrs: Mapping[str, Any],
                  ins: list[SymValue]) -> bool:
        to = attrs.get("to")
        return to in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)

    def _nonneg(self, ins: list[SymValue]) -> bool:
        return all(a.contents is not None and all(self.proves(c >= _imm(0)) for c in a.contents)
                   for a in ins)

    def _squeeze(self, op: str, x: SymValue, axes: list[int] | None) -> SymValue:
        shape = x.shape
        if shape is None:
            return UNKNOWN
        if op == "Unsqueeze":
            if axes is None:
                return UNKNOWN
            rank = len(shape) + len(axes)
            norm = sorted(a + rank if a < 0 else a for a in axes)
            dims = list(shape)
            for a in norm:
                dims.insert(a, _imm(1))
            return SymValue(tuple(dims), x.contents)
        if axes is None:
            axes = [i for i, d in enumerate(shape) if _const_value(d) == 1]
            if len(axes) != sum(1 for d in shape if _const_value(d) is not None and
                                _const_value(d) == 1) or any(_const_value(d) is None
                                                             for d in shape):
                return UNKNOWN
        norm = {a + len(shape) if a < 0 else a for a in axes}
        dims = tuple(d for i, d in enumerate(shape) if i not in norm)
        return SymValue(dims, x.contents)

    def _gather(self, data: SymValue, index_name: str, indices: SymValue,
                axis: int) -> SymValue:
        if data.shape is None or indices.shape is None:
            return UNKNOWN
        rank = len(data.shape)
        axis = axis + rank if axis < 0 else axis
        shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1:])
        idx = self.ints(index_name)
        values = self.array(data)
        index_shape = _const_shape(indices.shape)
        if values is not None and idx is not None and index_shape is not None:
            picked = np.take(values, np.array(idx, np.int64).reshape(index_shape), axis=axis)
            return self.from_objects(picked)
        return SymValue(shape)

    def _range(self, ins: list[SymValue]) -> SymValue:
        if any(a.contents is None or len(a.contents) != 1 for a in ins):
            return UNKNOWN
        start, limit, delta = (a.contents[0] for a in ins)  # type: ignore[index]
        step = _const_value(delta)
        if step is None or step == 0:
            return UNKNOWN
        length = self.s(E.max_(E.FloorDiv(limit - start + _imm(step - (1 if step > 0 else -1)),
                                          _imm(step)), _imm(0)))
        n = _const_value(length)
        contents = None
        if n is not None and n <= CONTENT_LIMIT:
            contents = tuple(self.s(start + _imm(i * step)) for i in range(n))
        return SymValue((length,), contents)

    def _reshape(self, x: SymValue, target: SymValue, allowzero: int) -> SymValue:
        if target.contents is None or x.shape is None:
            return UNKNOWN
        dims: list[E.PrimExpr | None] = []
        for i, t in enumerate(target.contents):
            value = _const_value(t)
            if value == -1:
                dims.append(None)
            elif value == 0 and not allowzero:
                dims.append(x.shape[i])
            elif value is not None or self.proves(t >= _imm(0)):
                dims.append(t)
            else:
                return UNKNOWN
        if dims.count(None) > 1:
            return UNKNOWN
        if None in dims:
            dims[dims.index(None)] = self._quotient(list(x.shape),
                                                    [d for d in dims if d is not None])
        count_in, count_out = _imm(1), _imm(1)
        for d in x.shape:
            count_in = count_in * d
        for d in dims:
            count_out = count_out * d  # type: ignore[operator]
        count_in, count_out = self.s(count_in), self.s(count_out)
        self.relate(E.eq(count_in, count_out), f"the data's {count_in} elements must fill the "
                    f"new shape [{', '.join(map(str, dims))}]", count_in, count_out)
        out = SymValue(tuple(dims))  # type: ignore[arg-type]
        return SymValue(out.shape, x.contents if _const_shape(out.shape) is not None else None)

    def _quotient(self, numerator: list[E.PrimExpr], denominator: list[E.PrimExpr]
                  ) -> E.PrimExpr:
        """``prod(numerator) // prod(denominator)``, the factors both share cancelled first
        (a ``Reshape``'s -1: ``[1, seq, 64] -> [1, seq, -1, 16]`` gives 4, not
        ``(seq * 64) // (seq * 16)``)."""
        num = [self.s(d) for d in numerator]
        den = [self.s(d) for d in denominator]
        for d in list(den):
            match = next((i for i, n in enumerate(num) if struct_equal(n, d)), None)
            if match is not None and _const_value(d) is None:
                del num[match]
                den.remove(d)
        num_const = int(np.prod([_const_value(n) for n in num if _const_value(n) is not None],
                                dtype=np.int64))
        den_const = int(np.prod([_const_value(d) for d in den if _const_value(d) is not None],
                                dtype=np.int64))
        num_syms = [n for n in num if _const_value(n) is None]
        den_syms = [d for d in den if _const_value(d) is None]
        if den_const and num_const % den_const == 0:
            num_const, den_const = num_const // den_const, 1
        top: E.PrimExpr = _imm(num_const)
        for n in num_syms:
            top = top * n
        bottom: E.PrimExpr = _imm(den_const)
        for d in den_syms:
            bottom = bottom * d
        return self.s(top if _const_value(bottom) == 1 else E.FloorDiv(top, bottom))

    def _slice(self, node: onnx.NodeProto, ins: list[SymValue]) -> SymValue:
        data = ins[0]
        if data.shape is None or len(node.input) < 3:
            return UNKNOWN
        rank = len(data.shape)
        starts = ins[1].contents
        ends = ins[2].contents
        axes = self.ints(node.input[3]) if len(node.input) > 3 and node.input[3] else \
            list(range(len(starts or ())))
        steps = self.ints(node.input[4]) if len(node.input) > 4 and node.input[4] else \
            [1] * len(axes or ())
        if starts is None or ends is None or axes is None or steps is None or 0 in steps:
            return UNKNOWN
        dims = list(data.shape)
        ranges: dict[int, tuple[E.PrimExpr, E.PrimExpr, int]] = {}
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = axis + rank if axis < 0 else axis
            dim = dims[axis]

            def clamp(v: E.PrimExpr, lo: E.PrimExpr, hi: E.PrimExpr,
                      d: E.PrimExpr = dim) -> E.PrimExpr:
                v = E.select(v < _imm(0), v + d, v)
                return E.min_(E.max_(v, lo), hi)

            if step > 0:
                first, last = (self.s(clamp(v, _imm(0), dim)) for v in (start, end))
                span = last - first
            else:  # backwards: from start down to (not including) end
                first, last = (self.s(clamp(v, _imm(-1), dim - _imm(1)))
                               for v in (start, end))
                span = first - last
            size = abs(step)
            ranges[axis] = (first, last, step)
            dims[axis] = self.s(E.max_(E.FloorDiv(span + _imm(size - 1), _imm(size)),
                                       _imm(0)))
        values = self.array(data)
        if values is not None:
            index: list[slice] = [slice(None)] * rank
            for axis, (first, last, step) in ranges.items():
                first_c, last_c = _const_value(first), _const_value(last)
                if first_c is None or last_c is None:
                    return SymValue(tuple(dims))
                index[axis] = slice(first_c, None if step < 0 and last_c < 0 else last_c, step)
            return self.from_objects(values[tuple(index)])
        return SymValue(tuple(dims))

    def _reduce(self, node: onnx.NodeProto, x: SymValue, attrs: Mapping[str, Any],
                opset: int) -> SymValue:
        if x.shape is None:
            return UNKNOWN
        rank = len(x.shape)
        axes_input = node.op_type == "ReduceSum" and opset >= 13 or opset >= 18
        axes = (self.ints(node.input[1]) if len(node.input) > 1 and node.input[1] else [])\
            if axes_input else attrs.get("axes")
        if axes is None:
            return UNKNOWN
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return SymValue(x.shape)
            axes = list(range(rank))
        norm = {a + rank if a < 0 else a for a in axes}
        keep = attrs.get("keepdims", 1)
        dims = tuple(_imm(1) if i in norm else d for i, d in enumerate(x.shape)
                     if keep or i not in norm)
        return SymValue(dims)


def _const_shape(shape: tuple[E.PrimExpr, ...] | None) -> tuple[int, ...] | None:
    if shape is None:
        return None
    dims = [_const_value(d) for d in shape]
    return None if any(d is None for d in dims) else tuple(dims)  # type: ignore[arg-type]


def _bool(cond: E.PrimExpr) -> E.PrimExpr:
    return E.select(cond, _imm(1), _imm(0))


def _fold(fn: Callable[[Any, Any], E.PrimExpr], xs: Sequence[E.PrimExpr]) -> E.PrimExpr:
    acc = xs[0]
    for x in xs[1:]:
        acc = fn(acc, x)
    return acc


_UNARY_SAME_SHAPE = {
    "Neg", "Abs", "Not", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf",
    "Sin", "Cos", "Softmax", "LogSoftmax", "IsNaN", "IsInf", "Floor", "Ceil", "Round", "Sign",
    "Gelu", "Softplus", "LeakyRelu", "Elu", "HardSigmoid", "HardSwish", "Trilu", "Dropout",
}

_BINARY: dict[str, Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr] | None] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": lambda a, b: E.FloorDiv(a, b),  # only for non-negative operands (checked)
    "Equal": lambda a, b: _bool(E.eq(a, b)),
    "Less": lambda a, b: _bool(a < b),
    "LessOrEqual": lambda a, b: _bool(a <= b),
    "Greater": lambda a, b: _bool(a > b),
    "GreaterOrEqual": lambda a, b: _bool(a >= b),
    "And": lambda a, b: _bool(E.all_of(E.ne(a, _imm(0)), E.ne(b, _imm(0)))),
    "Or": lambda a, b: _bool(E.any_of(E.ne(a, _imm(0)), E.ne(b, _imm(0)))),
    "Pow": None, "Mod": None, "BitShift": None, "PRelu": None,
}

#: ops whose first output has the first input's shape (the others are left unknown)
_SAME_SHAPE_MULTI = {"LayerNormalization", "BatchNormalization", "InstanceNormalization",
                     "GroupNormalization", "Clip", "CumSum", "LpNormalization",
                     "MeanVarianceNormalization", "SimplifiedLayerNormalization",
                     "ThresholdedRelu", "Selu", "Celu", "Mish", "Shrink", "Hardmax",
                     "QuantizeLinear", "DequantizeLinear"}

_FLOAT_TENSORS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16}

_INT_TENSORS = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
                onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.BOOL}

_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
           "ReduceL1", "ReduceSumSquare", "ReduceLogSumExp"}


def infer_symbolic(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, Sequence[Any]],
                   constants: Mapping[str, np.ndarray | onnx.TensorProto], opset: int,
                   bounds: Mapping[str, tuple[int | None, int | None]] | None = None,
                   relations: list[Relation] | None = None
                   ) -> tuple[dict[str, SymValue], dict[str, E.Var]]:
    """Shapes and small integer contents of every value of ``nodes`` (in topological order):
    ``inputs`` maps graph inputs to their dimensions (ints, or variable names), ``constants``
    holds initializers (``TensorProto`` values: only small integer ones are read) and any value
    known outright. Returns the values and the variables
    by name. ``bounds`` gives variables' ranges (default: non-negative). The relations between
    sizes that valid inputs satisfy and nothing proves are appended to ``relations``."""
    inference, variables = start_inference(inputs, constants, bounds)
    inference.run(nodes, opset)
    if relations is not None:
        relations.extend(inference.relations)
    return inference.values, variables


def start_inference(inputs: Mapping[str, Sequence[Any]],
                    constants: Mapping[str, np.ndarray | onnx.TensorProto],
                    bounds: Mapping[str, tuple[int | None, int | None]] | None = None
                    ) -> tuple[_Inference, dict[str, E.Var]]:
    """An inference with the graph inputs (dimensions: ints, variable names or size
    expressions) and constants entered, ready to :meth:`~_Inference.step` through nodes (the
    symbolic importer does, node by node). The variables are the IR's (one object per name:
    :func:`tessera.ir.symbolic.dim_var`)."""
    names = sorted({d for dims in inputs.values() for d in dims if isinstance(d, str)} |
                   {v for dims in inputs.values() for d in dims if isinstance(d, E.PrimExpr)
                    for v in dim_vars(d)})
    variables = {n: dim_var(n) for n in names}
    bounds = dict(bounds or {})
    inference = _Inference({variables[n]: bounds.get(n, (0, None)) for n in names})
    for name, dims in inputs.items():
        inference.values[name] = SymValue(tuple(
            variables[d] if isinstance(d, str) else d if isinstance(d, E.PrimExpr) else
            _imm(d) for d in dims))
    for name, array in constants.items():
        if isinstance(array, onnx.TensorProto):
            small = array.data_type in _INT_TENSORS and \
                int(np.prod(array.dims)) <= CONTENT_LIMIT
            if array.data_type in _FLOAT_TENSORS and int(np.prod(array.dims)) <= CONTENT_LIMIT:
                inference.floats[name] = tensor_array(array)
            if not small:  # the shape is enough: no copy of a weight
                inference.values[name] = SymValue(tuple(_imm(d) for d in array.dims))
                continue
            array = tensor_array(array)
        inference.values[name] = inference.from_array(np.asarray(array))
    return inference, variables


def model_symbolic(proto: onnx.ModelProto, inputs: Mapping[str, Sequence[Any]],
                   frozen: Mapping[str, np.ndarray] | None = None,
                   bounds: Mapping[str, tuple[int | None, int | None]] | None = None
                   ) -> tuple[dict[str, SymValue], list[Relation]]:
    """Every value of ``proto`` inferred from ``inputs`` (each graph input's dimensions, ints
    or variable names), and the relations between the sizes that its nodes need and nothing
    proves."""
    constants: dict[str, Any] = {t.name: t for t in proto.graph.initializer}
    constants.update(frozen or {})
    opset = next((int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                 17)
    relations: list[Relation] = []
    values, _ = infer_symbolic(_sorted_nodes(proto.graph), inputs, constants, opset, bounds,
                               relations)
    return values, relations


