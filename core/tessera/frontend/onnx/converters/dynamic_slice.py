"""ONNX ``Slice`` with run-time starts but a static output size, as IR ``DynamicSlice``.

Used by the ``Slice`` converter (opset 10 on) when its starts/ends are not constants: where
every sliced axis has ``ends - starts`` constant (:mod:`tessera.frontend.onnx.int_offsets`:
``ends = starts + c`` through Unsqueeze/Reshape/Cast/Concat/...), constant ``axes`` and
``steps``, and that difference fits the axis, the slice's length is static and the node becomes
a ``DynamicSlice`` of ``x`` at the run-time ``starts`` (:mod:`tessera.ops.dynamic_slice`).
Otherwise :func:`dynamic_slice_of` answers None and the converter keeps its
``NeedsConstantError``.
"""

from __future__ import annotations

from tessera.errors import NeedsConstantError
from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.int_offsets import int_offsets
from tessera.ir.graph import Value
from tessera.ops.dynamic_slice import window_length
from tessera.ops.registry import normalize_axis
from tessera.ops.tensor import slice_tuple


def dynamic_slice_of(ctx: ConvertContext, x: Value, operands: list[Value | None]
                     ) -> Value | None:
    """A ``DynamicSlice`` for ``Slice(x, *operands)`` (starts, ends, axes, steps) when its
    output size is static; None when it is not (or axes/steps are not constants)."""
    starts_v = operands[0]
    ends_v = operands[1] if len(operands) > 1 else None
    if starts_v is None or ends_v is None:
        return None
    try:
        axes = ctx.const_ints(operands[2] if len(operands) > 2 else None, "axes")
        steps = ctx.const_ints(operands[3] if len(operands) > 3 else None, "steps")
    except NeedsConstantError:
        return None
    starts, ends = int_offsets(starts_v), int_offsets(ends_v)
    if starts is None or ends is None or starts_v.type.ndim != 1:
        return None
    n = len(starts)
    if len(ends) != n:
        raise ctx.error(f"starts has {n} entries but ends has {len(ends)}")
    rank = x.type.ndim
    axes = list(range(n)) if axes is None else [normalize_axis(a, rank, ctx.node_name)
                                                 for a in axes]
    steps = [1] * n if steps is None else steps
    if len(axes) != n or len(steps) != n:
        raise ctx.error(f"starts, ends, axes and steps differ in length ({n}, {len(ends)}, "
                        f"{len(axes)}, {len(steps)})")
    if len(set(axes)) != n:
        raise ctx.error(f"axes {axes} repeat an axis")
    if any(s == 0 for s in steps):
        raise ctx.error(f"steps {steps} contain 0")
    if all(s.leaf is None for s in starts):
        return None  # constant starts, run-time ends: the length depends on the ends
    deltas, sizes = [], []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if start.leaf != end.leaf:
            return None
        delta = end.offset - start.offset
        dim = x.type.shape[axis]
        if start.leaf is None:  # a constant axis among run-time ones: its length is known
            sl = slice_tuple((dim,), [start.offset], [end.offset], [0], [step])[0]
            size = len(range(*sl.indices(dim)))
            # an end past either side of the axis clamps like this one (no huge deltas)
            delta = min(max(end.offset, -dim - 1), dim) - start.offset
        else:
            size = window_length(delta, step)
            if (size == 0 and delta != 0) or size > dim:
                return None  # no start gives that length, or only clamping does
        deltas.append(delta)
        sizes.append(size)
    return ctx.op("DynamicSlice", x, starts_v, axes=axes, deltas=deltas, steps=steps,
                  sizes=sizes)


__all__ = ["dynamic_slice_of"]
