"""Blocked-layout conversion for CPU convolutions (TVM's AlterOpLayout for ``conv2d_NCHWc``).

A CPU backend vectorizes a convolution over a block of output channels; it wants the data as
``NCHW{c}c`` (``(N, C//c, H, W, c)``, see :mod:`tessera.ops.layout`) and the weight pre-packed.
:func:`alter_conv_layout` rewrites a function so that

* every float 2-D ``Conv`` with a constant weight (and constant or no bias) for which the
  backend's ``choose(conv_node)`` returns ``(ic_bn, oc_bn)`` becomes ``ConvNCHWc`` with the weight
  packed as ``(OC//oc_bn, ICg//ic_bn, KH, KW, ic_bn, oc_bn)`` and the bias as ``(OC//oc_bn,
  oc_bn)`` (new constants); its output is blocked by ``oc_bn``. ``choose`` returning ``None``
  keeps the conv in NCHW. An ungrouped conv may be padded: ``(ic_bn, oc_bn, oc_total)``, or an
  ``oc_bn`` that does not divide OC (``oc_total`` then rounds OC up to it), gives it
  ``oc_total`` output channels, the extra ones with zero weights and bias. Its padded blocked
  value flows on only through ops for which the padding is harmless (pools, unary elementwise
  ops); anything else reads it through a ``LayoutTransform`` to NCHW that drops the padding
  (``channels``). The data is brought to exactly ``ic_bn`` (``oc_bn`` for depthwise
  convs), transformed once per value and block: ConvNCHWc reads any data block, but any other
  block turns each input index into a division in the kernel's inner loop;
* ``MaxPool`` (whose indices nobody reads), ``AveragePool``, ``GlobalAveragePool`` and
  ``GlobalMaxPool`` on a blocked input become ``PoolNCHWc``, blocked like their input;
* layout-agnostic ops stay blocked: elementwise and broadcasting ops (Relu, Clip, Add, Mul, Sum,
  Mean, Max, PRelu, Where, per-tensor QuantizeLinear/DequantizeLinear, ...) whose operands are
  each a tensor of the output's shape (brought
  to the same block size), a scalar, or a per-channel tensor of shape ``(C, 1, 1)`` or
  ``(1, C, 1, 1)`` (a constant is re-laid out as ``(1, C//c, 1, 1, c)``; a computed one goes
  through a ``LayoutTransform``), and ``Concat`` on the channel axis when its inputs can share
  one block size (those not in it are transformed);
* everything else (Reshape, Flatten, Gemm, Softmax, Transpose, LRN, the function's outputs, ...)
  reads NCHW: a ``LayoutTransform`` back to NCHW is inserted before the first such reader and
  shared by the others. A transform from one block size to another is inserted where operands
  of one op disagree. At most one transform exists per (value, layout).

The result computes the same values (the blocked ops' references are the NCHW ones), keeps the
function's input and output names and types, and passes the IR verifier. Node names are kept
for the rewritten nodes; a converted node's blocked output gets a new value name and its NCHW
name goes to the transform that recreates it, if any.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import OpError, PassError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.symbolic import shapes_equal
from tessera.ir.types import TensorType
from tessera.kernel.conv_match import constant_weight_conv
from tessera.ops.layout import blocked_shape, layout_name, pack_conv_weight, pack_nchwc
from tessera.ops.registry import OpPattern, get_schema, has_op, normalize_axis
from tessera.ops.spatial import spatial_params

#: ``choose(conv_node) -> (ic_bn, oc_bn)``, ``(ic_bn, oc_bn, padded output channels)`` or
#: ``None`` to keep the conv in NCHW.
ChooseFn = Callable[[Node], tuple[int, ...] | None]

#: Broadcasting ops whose attributes make them layout-dependent (the quantizers only with
#: per-axis or blocked parameters: :func:`_layout_dependent`).
_NOT_AGNOSTIC = frozenset({"Expand", "QuantizeLinear", "DequantizeLinear"})


def _layout_dependent(node: Node) -> bool:
    """Whether ``node``'s attributes tie it to the NCHW layout: ``Expand`` (its shape
    operand), QuantizeLinear/DequantizeLinear with a per-axis or blocked scale or zero point
    (per-tensor ones are elementwise: a QDQ network stays blocked between its convolutions)."""
    if node.op not in _NOT_AGNOSTIC:
        return False
    if node.op == "Expand" or node.attrs.get("block_size"):
        return True
    return any(v is not None and v.type.size != 1 for v in node.inputs[1:])

_POOL_MODES = {"MaxPool": ("max", 0), "AveragePool": ("avg", 0),
               "GlobalAveragePool": ("avg", 1), "GlobalMaxPool": ("max", 1)}


def alter_conv_layout(func: Function, choose: ChooseFn) -> Function:
    """A copy of ``func`` with its convolutions in the blocked ``NCHW{c}c`` layout (see the
    module doc); ``func`` itself is not changed."""
    return _LayoutRewriter(func, choose).run()


def count_layout_transforms(func: Function) -> int:
    """How many ``LayoutTransform`` nodes ``func`` holds."""
    return sum(1 for n in func.nodes if n.op == "LayoutTransform")


class _LayoutRewriter:
    """One walk over a copy of the function in topological order, re-emitting each node either
    as it was (its inputs brought back to NCHW) or in a blocked form."""

    def __init__(self, func: Function, choose: ChooseFn):
        self.fn = func.copy()
        self.choose = choose
        self.order = self.fn.topological_order()
        users = self.fn.users()
        returned = {id(v) for v in self.fn.outputs}
        self.read = {id(v) for v in users} | returned
        self.returned = returned
        #: original value -> the nodes that read it
        self.readers: dict[int, list[Node]] = {
            id(v): list(dict.fromkeys(n for n, _ in uses)) for v, uses in users.items()}
        self.fn.nodes = []
        #: original value -> its blocked replacement and block size (its producer was converted)
        self.blocked: dict[int, tuple[Value, int]] = {}
        #: original values whose producer was converted and whose NCHW form exists again
        self.nchw_ready: set[int] = set()
        #: (original value, block) -> the value in that blocked layout
        self.variants: dict[tuple[int, int], Value] = {}
        #: constants re-laid out: (constant, kind, blocks) -> new constant
        self.const_cache: dict[tuple[Any, ...], Value] = {}
        #: original value -> its blocked form whose last block is padded, the block size and
        #: the real channel count (kept apart from ``blocked``: only padding-safe ops read it)
        self.padded: dict[int, tuple[Value, int, int]] = {}

    # -- emitting nodes ---------------------------------------------------------------------
    def emit(self, op: str, inputs: list[Value | None], attrs: dict[str, Any], name: str,
             out_hint: str, output: Value | None = None) -> Value:
        """Append a one-output node named ``name`` (type-checked); ``output`` reuses a value."""
        schema = get_schema(op)
        full = schema.check(name, inputs, attrs)
        out_type = schema.infer_types(name, [v.type if v is not None else None for v in inputs],
                                      full)[0]
        if output is None:
            output = Value(self.fn.fresh_name(out_hint), out_type)
        elif output.type != out_type:
            raise PassError(f"alter_conv_layout: node {name} ({op}) gives {out_type}, "
                            f"{output.type} expected")
        self.fn.nodes.append(Node(op, name, inputs, [output], full))
        return output

    def transform(self, v: Value, src: int | None, dst: int | None, base: str,
                  output: Value | None = None, channels: int = 0) -> Value:
        """A LayoutTransform of ``v`` from block ``src`` to ``dst`` (``None``: NCHW), its value
        named after ``base`` (the original value's name) unless ``output`` is given;
        ``channels`` drops a padded block's tail."""
        layout = layout_name(dst).lower()
        attrs: dict[str, Any] = {"src_layout": layout_name(src), "dst_layout": layout_name(dst)}
        if channels:
            attrs["channels"] = channels
        return self.emit("LayoutTransform", [v], attrs,
                         self.fn.fresh_node_name(f"{base}_to_{layout}"), f"{base}_{layout}",
                         output)

    def constant(self, key: tuple[Any, ...], make: Callable[[], np.ndarray], hint: str) -> Value:
        if key not in self.const_cache:
            self.const_cache[key] = self.fn.constant(make(), hint)
        return self.const_cache[key]

    # -- layouts of values --------------------------------------------------------------------
    def nchw(self, v: Value | None) -> Value | None:
        """``v`` in NCHW, recreating it with a transform if its producer was converted."""
        if v is None or id(v) in self.nchw_ready:
            return v
        if id(v) in self.padded:
            b, c, channels = self.padded[id(v)]
            self.nchw_ready.add(id(v))
            return self.transform(b, c, None, v.name, output=v, channels=channels)
        if id(v) not in self.blocked:
            return v
        b, c = self.blocked[id(v)]
        self.nchw_ready.add(id(v))
        return self.transform(b, c, None, v.name, output=v)

    def block_of(self, v: Value) -> int | None:
        """The block size ``v`` is available in without a new transform: its own (when its
        producer was converted), else that of a transform made already, else ``None``."""
        entry = self.blocked.get(id(v))
        if entry is not None:
            return entry[1]
        return next((c for vid, c in self.variants if vid == id(v)), None)

    def in_block(self, v: Value, c: int) -> Value:
        """``v`` (an original 4-D value) in layout NCHW{c}c, transformed once at most."""
        key = (id(v), c)
        found = self.variants.get(key)
        if found is not None:
            return found
        if v.is_constant:
            data = v.data
            assert data is not None
            out = self.constant(("pack", id(v), c), lambda: pack_nchwc(data, c),
                                f"{v.name}_nchw{c}c")
        elif id(v) in self.blocked:
            b, c0 = self.blocked[id(v)]
            out = self.transform(b, c0, c, v.name)
        else:
            src = self.nchw(v)  # a padded value comes back to NCHW first
            assert src is not None
            out = self.transform(src, None, c, v.name)
        self.variants[key] = out
        return out

    def any_block(self, v: Value, prefer: int) -> tuple[Value, int]:
        """``v`` in some blocked layout: ``prefer`` or another it is available in already,
        else transformed to ``prefer``."""
        if (id(v), prefer) in self.variants:
            return self.variants[(id(v), prefer)], prefer
        c = self.block_of(v)
        return self.in_block(v, prefer if c is None else c), prefer if c is None else c

    def set_blocked(self, original: Value, new: Value, c: int) -> None:
        self.blocked[id(original)] = (new, c)
        self.variants[(id(original), c)] = new

    # -- the walk ---------------------------------------------------------------------------
    def run(self) -> Function:
        for node in self.order:
            if not (self.try_padded(node) or self.try_conv(node) or self.try_pool(node)
                    or self.try_elementwise(node) or self.try_concat(node)):
                node.inputs = [self.nchw(v) for v in node.inputs]
                self.fn.nodes.append(node)
        self.fn.outputs = [self.nchw(v) for v in self.fn.outputs]  # type: ignore[misc]
        return self.fn

    def try_conv(self, node: Node) -> bool:
        operands = constant_weight_conv(node)
        if operands is None:
            return False
        x, w, b = operands
        choice = self.choose(node)
        if choice is None:
            return False
        ic_bn, oc_bn = int(choice[0]), int(choice[1])
        oc, icg = w.type.shape[:2]
        total = int(choice[2]) if len(choice) > 2 else oc + (-oc % oc_bn if oc_bn > 0 else 0)
        group = int(node.attrs.get("group", 1) or 1)
        if (ic_bn <= 0 or oc_bn <= 0 or icg % ic_bn or total % oc_bn or total < oc
                or (total != oc and group != 1)):
            raise PassError(f"alter_conv_layout: node {node.name} (Conv): choose gave "
                            f"{tuple(choice)}: ic_bn {ic_bn} must divide its {icg} input "
                            f"channels per group and oc_bn {oc_bn} the {total} output channels "
                            f"asked for, which must be its {oc} output channels or, when group "
                            f"is 1, more")
        pad_oc = total - oc  # zero output channels
        a = node.attrs
        _, s, p, d = spatial_params(2, a.get("kernel_shape"), a.get("strides"),
                                         a.get("pads"), a.get("dilations"), "Conv")
        channels = x.type.shape[1]
        depthwise = icg == 1 and channels % oc_bn == 0
        # the data in exactly the block the kernel reads (a transform is a cheap copy; a
        # different block makes every input index a division in the inner loop)
        data = self.in_block(x, oc_bn if depthwise else ic_bn)
        wdata = w.data
        packed = self.constant(("weight", id(w), ic_bn, oc_bn),
                               lambda: pack_conv_weight(_pad_rows(wdata, pad_oc), ic_bn, oc_bn),
                               f"{w.name}_oihw{ic_bn}i{oc_bn}o")
        inputs: list[Value | None] = [data, packed]
        if b is not None:
            bdata = b.data
            assert bdata is not None
            inputs.append(self.constant(("bias", id(b), oc_bn),
                                        lambda: _pad_rows(bdata, pad_oc).reshape(-1, oc_bn),
                                        f"{b.name}_{oc_bn}o"))
        y = node.outputs[0]
        out = self.emit("ConvNCHWc", inputs,
                        {"strides": s, "pads": p, "dilations": d, "group": a.get("group", 1)},
                        node.name, f"{y.name}_nchw{oc_bn}c")
        if pad_oc:
            self.padded[id(y)] = (out, oc_bn, oc)
        else:
            self.set_blocked(y, out, oc_bn)
        return True

    def try_padded(self, node: Node) -> bool:
        """A pool or a unary elementwise op of a padded blocked value, kept padded: pools work
        per channel, and a unary op's values in the padding are dropped with it later."""
        x = node.inputs[0] if node.inputs else None
        if x is None or id(x) not in self.padded or len(node.outputs) != 1:
            return False
        b, c, channels = self.padded[id(x)]
        y = node.outputs[0]
        if node.op in _POOL_MODES:
            attrs = self.pool_attrs(node)
            if attrs is None:
                return False
            out = self.emit("PoolNCHWc", [b], attrs, node.name, f"{y.name}_nchw{c}c")
        elif (has_op(node.op) and node.op not in _NOT_AGNOSTIC
              and get_schema(node.op).pattern <= OpPattern.ELEMWISE
              and shapes_equal(y.type.shape, x.type.shape)
              and all(v is None or v.type.size == 1 for v in node.inputs[1:])):
            out = self.emit(node.op, [b, *(self.nchw(v) for v in node.inputs[1:])],
                            node.attrs, node.name, f"{y.name}_nchw{c}c")
        else:
            return False
        self.padded[id(y)] = (out, c, channels)
        return True

    def try_pool(self, node: Node) -> bool:
        mode = _POOL_MODES.get(node.op)
        x = node.inputs[0] if node.inputs else None
        if mode is None or x is None or x.type.ndim != 4 or self.block_of(x) is None:
            return False
        attrs = self.pool_attrs(node)
        if attrs is None:
            return False
        c = self.block_of(x)
        assert c is not None
        y = node.outputs[0]
        out = self.emit("PoolNCHWc", [self.in_block(x, c)], attrs, node.name, f"{y.name}_nchw{c}c")
        self.set_blocked(y, out, c)
        return True

    def pool_attrs(self, node: Node) -> dict[str, Any] | None:
        """The ``PoolNCHWc`` attributes of a 2-D pool node, or None when it cannot be one."""
        mode = _POOL_MODES.get(node.op)
        if mode is None or node.inputs[0] is None or node.inputs[0].type.ndim != 4:
            return None
        if any(id(o) in self.read for o in node.outputs[1:]):  # MaxPool's indices are read
            return None
        kind, global_pool = mode
        attrs: dict[str, Any] = {"mode": kind, "global_pool": global_pool}
        if not global_pool:
            a = node.attrs
            if len(a["kernel_shape"]) != 2:
                return None
            attrs.update(kernel_shape=a["kernel_shape"], strides=a.get("strides"),
                         pads=a.get("pads"), dilations=a.get("dilations"),
                         ceil_mode=a.get("ceil_mode", 0),
                         count_include_pad=a.get("count_include_pad", 0))
        return attrs

    def try_elementwise(self, node: Node) -> bool:
        if (not has_op(node.op) or _layout_dependent(node) or len(node.outputs) != 1
                or get_schema(node.op).pattern > OpPattern.BROADCAST):
            return False
        y = node.outputs[0]
        shape = y.type.shape
        if len(shape) != 4:
            return False
        blocks = [self.blocked[id(v)][1] for v in node.inputs
                  if v is not None and shapes_equal(v.type.shape, shape)
                  and id(v) in self.blocked]
        c = next((blk for blk in blocks if blk is not None), None)
        if c is None or shape[1] % c:
            return False
        plan: list[tuple[str, Value | None]] = []
        channels = shape[1]
        for v in node.inputs:
            if v is None:
                plan.append(("none", None))
            elif shapes_equal(v.type.shape, shape):
                plan.append(("full", v))
            elif v.type.size == 1 and v.type.ndim <= 4:
                plan.append(("scalar", v))
            elif v.type.shape in ((channels, 1, 1), (1, channels, 1, 1)):
                plan.append(("channel", v))
            else:
                return False
        # check the blocked node types before emitting anything for its operands
        bshape = blocked_shape(shape, c)
        types: list[TensorType | None] = []
        for kind, v in plan:
            if v is None:
                types.append(None)
            elif kind == "full":
                types.append(v.type.with_shape(bshape))
            elif kind == "channel":
                types.append(v.type.with_shape((1, channels // c, 1, 1, c)))
            else:
                types.append(v.type)
        schema = get_schema(node.op)
        try:
            got = schema.infer_types(node.name, types, node.attrs)
        except OpError:
            return False
        if not shapes_equal(got[0].shape, bshape):  # run-time sizes: not by identity
            return False
        inputs: list[Value | None] = []
        for kind, v in plan:
            if v is None or kind == "scalar":
                inputs.append(self.nchw(v))
            elif kind == "full":
                inputs.append(self.in_block(v, c))
            else:
                inputs.append(self.per_channel(v, c))
        out = self.emit(node.op, inputs, node.attrs, node.name, f"{y.name}_nchw{c}c")
        self.set_blocked(y, out, c)
        return True

    def per_channel(self, v: Value, c: int) -> Value:
        """A per-channel operand of shape (1,C,1,1) or (C,1,1) as (1, C//c, 1, 1, c)."""
        if v.type.ndim == 4:  # (1, C, 1, 1) is an NCHW tensor like any other
            return self.in_block(v, c)
        channels = v.type.shape[0]
        if v.is_constant:
            data = v.data
            assert data is not None
            return self.constant(("channel", id(v), c),
                                 lambda: data.reshape(channels // c, c)[None, :, None, None, :],
                                 f"{v.name}_nchw{c}c")
        key = ("channel", id(v), c)
        if key not in self.const_cache:  # computed operands are cached here too
            src = self.nchw(v)
            assert src is not None
            src = self.emit("Reshape", [src], {"shape": [1, channels, 1, 1]},
                            self.fn.fresh_node_name(f"{v.name}_as_nchw"), f"{v.name}_nchw")
            self.const_cache[key] = self.transform(src, None, c, v.name)
        return self.const_cache[key]

    def try_concat(self, node: Node) -> bool:
        if node.op != "Concat" or len(node.outputs) != 1:
            return False
        y = node.outputs[0]
        if y.type.ndim != 4 or normalize_axis(node.attrs["axis"], 4) != 1:
            return False
        present = [v for v in node.inputs if v is not None]
        counts = Counter(self.blocked[id(v)][1] for v in present if id(v) in self.blocked)
        if not counts:
            # no input is blocked (SegFormer's head concatenates four resized maps for a 1x1
            # convolution): blocked in the block its convolution reads, each input is
            # transformed on its own (with its producer) and the concatenation only copies
            # whole blocks; concatenated as rows, one kernel transforms all of it, choosing
            # the input of every element
            want = self.conv_input_block(y)
            if want is None:
                return False
            counts = Counter({want: 1})
        # the most common block size among the blocked inputs that divides every input
        c = next((blk for blk, _ in counts.most_common()
                  if not any(v.type.shape[1] % blk for v in present)), None)
        if c is None:
            return False
        inputs = [self.in_block(v, c) for v in present]
        out = self.emit("Concat", inputs, {"axis": 1}, node.name, f"{y.name}_nchw{c}c")
        self.set_blocked(y, out, c)
        return True


    def conv_input_block(self, v: Value) -> int | None:
        """The data block of the convolution (ungrouped, constant weight) that alone reads
        ``v``, as ``choose`` picks it; None otherwise."""
        readers = self.readers.get(id(v), [])
        if len(readers) != 1 or id(v) in self.returned:
            return None
        node = readers[0]
        if constant_weight_conv(node) is None or int(node.attrs.get("group", 1) or 1) != 1 \
                or node.inputs[0] is not v:
            return None
        choice = self.choose(node)
        return int(choice[0]) if choice is not None and int(choice[0]) > 1 else None


def _pad_rows(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` with ``n`` rows of zeros appended on axis 0."""
    if not n:
        return a
    return np.concatenate([a, np.zeros((n, *a.shape[1:]), a.dtype)])


__all__ = ["ChooseFn", "alter_conv_layout", "count_layout_transforms"]
