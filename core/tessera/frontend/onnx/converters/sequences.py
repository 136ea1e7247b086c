"""ONNX converters: sequence values (``SequenceEmpty``, ``SequenceConstruct``,
``SequenceInsert``, ``SequenceAt``, ``SequenceErase``, ``SequenceLength``,
``ConcatFromSequence``, ``SplitToSequence``, ``SequenceMap``), and ``Identity``,
``Optional``, ``OptionalGetElement``, ``OptionalHasElement`` and ``Loop`` given a sequence.

A sequence whose length and element types are known at import is a list of IR tensors
(:class:`~tessera.frontend.onnx.sequence_value.SequenceValue`); these converters build and
take such lists. Positions must be constants; ``SequenceAt`` with a run-time index over
elements of one type gathers from their stack. ``SequenceMap`` converts its body once per
element; a ``Loop`` carrying a sequence is unrolled when its trip count is a constant (each
iteration converted in place, its condition a constant), since a sequence that grows per
iteration has no static form otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import NeedsConstantError
from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.frontend.onnx.inline import convert_inline
from tessera.frontend.onnx.registry import converter
from tessera.frontend.onnx.sequence_value import (
    ABSENT,
    SequenceValue,
    sequence_variant,
    takes_sequences,
)
from tessera.ir.graph import Value
from tessera.ops.registry import normalize_axis

Inputs = list[Any]
Attrs = dict[str, Any]

#: The most iterations a Loop carrying a sequence is unrolled to.
MAX_UNROLL = 4096


def _sequence(ctx: ConvertContext, value: Any, what: str = "input_sequence") -> SequenceValue:
    if not isinstance(value, SequenceValue):
        got = "nothing" if value is None else "a tensor"
        raise ctx.error(f"{what} must be a sequence, got {got}")
    return value


def _tensor(ctx: ConvertContext, value: Any, what: str) -> Value:
    if not isinstance(value, Value):
        got = (f"a sequence of {len(value)}" if isinstance(value, SequenceValue)
               else "nothing")
        raise ctx.error(f"{what} expects a tensor, got {got}")
    return value


def _position(ctx: ConvertContext, value: Value | None, length: int, default: int,
              inclusive: bool) -> int:
    """A constant position in a sequence of ``length`` (negative counts from the back);
    ``inclusive``: ``length`` itself is valid (an insertion at the back)."""
    if value is None:
        return default
    ints = ctx.const_ints(value, "position")
    assert ints is not None
    if len(ints) != 1:
        raise ctx.error(f"position must be a scalar, got {len(ints)} values")
    pos = ints[0]
    top = length if inclusive else length - 1
    if not -length <= pos <= top:
        raise ctx.error(f"position {pos} is out of range for a sequence of {length} "
                        f"(valid: {-length}..{top})")
    return pos + length if pos < 0 else pos


def _check_dtype(ctx: ConvertContext, seq: SequenceValue, tensor: Value) -> None:
    if seq.dtype is not None and tensor.type.dtype != seq.dtype:
        raise ctx.error(f"a {tensor.type.dtype} tensor cannot join a sequence of {seq.dtype}")


@converter("SequenceEmpty", since=11)
def convert_sequence_empty(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    dtype = onnx_dtype(int(attrs.get("dtype", 1)), "dtype")
    return SequenceValue([], dtype)


@converter("SequenceConstruct", since=11)
def convert_sequence_construct(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    values = [_tensor(ctx, v, f"input #{i}") for i, v in enumerate(inputs)]
    if not values:
        raise ctx.error("SequenceConstruct needs at least one input")
    dtypes = {v.type.dtype for v in values}
    if len(dtypes) > 1:
        raise ctx.error(f"the inputs have different element types: "
                        f"{', '.join(sorted(str(d) for d in dtypes))}")
    return SequenceValue(values)


@takes_sequences
@converter("SequenceInsert", since=11)
def convert_sequence_insert(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    seq = _sequence(ctx, inputs[0])
    tensor = _tensor(ctx, inputs[1], "tensor")
    _check_dtype(ctx, seq, tensor)
    pos = _position(ctx, inputs[2] if len(inputs) > 2 else None, len(seq), len(seq), True)
    elements = list(seq.elements)
    elements.insert(pos, tensor)
    return SequenceValue(elements, seq.dtype)


@takes_sequences
@converter("SequenceErase", since=11)
def convert_sequence_erase(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    seq = _sequence(ctx, inputs[0])
    if not len(seq):
        raise ctx.error("cannot erase from an empty sequence")
    pos = _position(ctx, inputs[1] if len(inputs) > 1 else None, len(seq), len(seq) - 1,
                    False)
    elements = list(seq.elements)
    del elements[pos]
    return SequenceValue(elements, seq.dtype)


@takes_sequences
@converter("SequenceAt", since=11)
def convert_sequence_at(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    seq = _sequence(ctx, inputs[0])
    index = _tensor(ctx, inputs[1], "position")
    if not len(seq):
        raise ctx.error("the sequence is empty: it has no element to take")
    try:
        return seq.elements[_position(ctx, index, len(seq), 0, False)]
    except NeedsConstantError:
        if len({v.type for v in seq.elements}) != 1 or index.type.size != 1:
            raise  # elements of different shapes: the index must be known
    # a run-time index over elements of one type: gather from their stack
    stacked = ctx.op("Concat", *(ctx.op("Unsqueeze", v, axes=[0]) for v in seq.elements),
                     axis=0)
    scalar = ctx.op("Reshape", index, ctx.const(np.array([], np.int64))) \
        if index.type.ndim else index
    return ctx.op("Gather", stacked, scalar, axis=0)


@takes_sequences
@converter("SequenceLength", since=11)
def convert_sequence_length(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    seq = _sequence(ctx, inputs[0])
    return ctx.const(np.array(len(seq), np.int64), name=ctx.output_names[0] or "length")


@takes_sequences
@converter("ConcatFromSequence", since=11)
def convert_concat_from_sequence(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    seq = _sequence(ctx, inputs[0])
    if not len(seq):
        raise ctx.error("cannot concatenate an empty sequence (its result has no shape)")
    new_axis = int(attrs.get("new_axis", 0))
    rank = seq.elements[0].type.ndim
    axis = normalize_axis(int(attrs["axis"]), rank + 1 if new_axis else rank)
    parts = list(seq.elements)
    if new_axis:
        parts = [ctx.op("Unsqueeze", v, axes=[axis]) for v in parts]
    if len(parts) == 1:
        return ctx.op("Identity", parts[0])
    return ctx.op("Concat", *parts, axis=axis)


@converter("SplitToSequence", since=11)
def convert_split_to_sequence(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    x = _tensor(ctx, inputs[0], "input")
    axis = normalize_axis(int(attrs.get("axis", 0)), x.type.ndim)
    dim = x.type.shape[axis]
    split = inputs[1] if len(inputs) > 1 else None
    if split is None:
        sizes = [1] * dim
        squeeze = not int(attrs.get("keepdims", 1))
    else:
        data = np.asarray(ctx.const_value(split, "split"))
        if data.dtype.kind not in "iu":
            raise ctx.error(f"split must be an integer tensor, got {data.dtype}")
        squeeze = False
        if data.ndim == 0:
            chunk = int(data)
            if chunk <= 0:
                raise ctx.error(f"split {chunk} must be positive")
            sizes = [min(chunk, dim - i) for i in range(0, dim, chunk)]
        else:
            sizes = [int(s) for s in data.reshape(-1)]
            if sum(sizes) != dim or any(s < 0 for s in sizes):
                raise ctx.error(f"split {sizes} does not add up to dimension {axis} of size "
                                f"{dim}")
    if not sizes:
        return SequenceValue([], x.type.dtype)
    parts = (ctx.node("Split", [x], {"axis": axis, "split": sizes}, num_outputs=len(sizes))
             if len(sizes) > 1 else [ctx.op("Identity", x)])
    if squeeze:
        parts = [ctx.op("Squeeze", p, axes=[axis]) for p in parts]
    return SequenceValue(parts, x.type.dtype)


@takes_sequences
@converter("SequenceMap", since=17)
def convert_sequence_map(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    first = _sequence(ctx, inputs[0])
    n = len(first)
    for i, v in enumerate(inputs[1:], 1):
        if isinstance(v, SequenceValue) and len(v) != n:
            raise ctx.error(f"input #{i} is a sequence of {len(v)}; input #0 has {n}")
    results: list[list[Any]] = [[] for _ in ctx.output_names]
    for k in range(n):
        args = [v.elements[k] if isinstance(v, SequenceValue) else v for v in inputs]
        outs = convert_inline(ctx, attrs["body"], "body", args, k)
        for j, out in enumerate(outs[:len(results)]):
            results[j].append(_tensor(ctx, out, f"body output #{j}"))
    dtypes = [onnx_dtype(vi.type.tensor_type.elem_type, "body output")
              if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type else None
              for vi in attrs["body"].output]
    return [SequenceValue(r, dtypes[j] if j < len(dtypes) else None)
            for j, r in enumerate(results)]


# -- ops that take tensors too, given a sequence --------------------------------------------------

@sequence_variant("Identity")
@sequence_variant("Optional")
@sequence_variant("OptionalGetElement")
def convert_pass_sequence(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    """``Identity``, ``Optional`` and ``OptionalGetElement`` of a sequence: the sequence."""
    return _sequence(ctx, inputs[0], "input")


@sequence_variant("OptionalHasElement")
def convert_has_sequence(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    return ctx.const(np.array(True), name=ctx.output_names[0] or "has")


@sequence_variant("Loop")
def convert_loop_unrolled(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Any:
    """A Loop carrying a sequence, unrolled: its trip count must be a constant, and the
    condition each iteration gives must fold to a constant."""
    inputs = inputs + [None] * (2 - len(inputs))
    trip, cond, carried = inputs[0], inputs[1], list(inputs[2:])
    body = attrs["body"]
    scans = len(body.output) - 1 - len(carried)
    if trip is None:
        raise ctx.error("a loop-carried sequence needs a trip count M: a sequence whose length "
                        "changes per iteration has no static form unless the loop is unrolled")
    try:
        count = int(np.asarray(ctx.const_value(
            trip, "the trip count M (the loop carries a sequence, whose length may change per "
            "iteration: Tessera unrolls such a loop)")).reshape(-1)[0])
    except NeedsConstantError as e:
        raise type(e)(f"{e} (a loop-carried sequence whose length changes per iteration "
                      f"cannot be static)", e.inputs) from None
    if count > MAX_UNROLL:
        raise ctx.error(f"the loop carries a sequence and runs {count} iterations; Tessera "
                        f"unrolls such loops up to {MAX_UNROLL}")
    if cond is not None:
        ctx.const_value(cond, "the initial condition (the loop carries a sequence: Tessera "
                        "unrolls such a loop)")
    going = True if cond is None else _const_bool(ctx, cond, "the initial condition")
    stacks: list[list[Value]] = [[] for _ in range(max(scans, 0))]
    i = 0
    while going and i < count:
        args = [ctx.const(np.array(i, np.int64), name="iteration"),
                ctx.const(np.array(True), name="cond"),
                *(ABSENT if v is None else v for v in carried)]
        outs = convert_inline(ctx, body, "body", args, i)
        going = _const_bool(ctx, outs[0], "the condition the body gives")
        carried = [None if v is ABSENT else v for v in outs[1:1 + len(carried)]]
        for stack, v in zip(stacks, outs[1 + len(carried):]):
            stack.append(_tensor(ctx, v, "a scan output"))
        i += 1
    results: list[Any] = [ABSENT if v is None else v for v in carried]
    for stack in stacks:
        if not stack:
            raise ctx.error("the loop runs no iteration: its scan outputs have no shape")
        parts = [ctx.op("Unsqueeze", v, axes=[0]) for v in stack]
        results.append(parts[0] if len(parts) == 1 else ctx.op("Concat", *parts, axis=0))
    return results


def _const_bool(ctx: ConvertContext, value: Any, what: str) -> bool:
    v = _tensor(ctx, value, what)
    if not v.is_constant:
        raise ctx.error(f"{what} is computed at run time; a loop carrying a sequence is "
                        f"unrolled, and needs it known at import")
    return bool(np.asarray(v.data).reshape(-1)[0])
