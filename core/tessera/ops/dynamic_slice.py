"""Op: ``DynamicSlice``, an ONNX ``Slice`` whose starts are known only at run time but whose
output size is static.

Exporters write ``x[i:i+k]`` inside loop bodies as ``Slice(x, starts=i, ends=i+k)``: the start
is a run-time value (a loop's iteration counter), the length ``k`` is not. The ONNX importer
proves that ``ends - starts`` is a constant per sliced axis and emits this op, whose inputs are
the data and the run-time ``starts`` (an integer tensor with one entry per axis of ``axes``) and
whose attributes are ``axes``, ``deltas`` (``ends - starts``), ``steps`` and ``sizes`` (the
static output lengths along ``axes``).

At run time the op is exactly ONNX ``Slice(x, starts, starts + deltas, axes, steps)``: negative
starts count from the end and both ends clamp as ONNX specifies. A clamped slice shorter (or
longer) than ``sizes`` cannot be written into the static output: that raises
:class:`~tessera.errors.RunError` naming the start, the axis and its length, rather than
producing a short result.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import OpError, RunError
from tessera.ir.types import TensorType
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op
from tessera.ops.tensor import slice_tuple


def window_length(delta: int, step: int) -> int:
    """Elements a slice of ``delta`` (``ends - starts``) and ``step`` holds when no end clamps
    (0 when the two point different ways)."""
    if step == 0:
        raise OpError("slice step cannot be 0")
    return max(0, -(-delta // step))


def _check_attrs(x: TensorType, axes: list[int], deltas: list[int], steps: list[int],
                 sizes: list[int]) -> list[int]:
    n = len(axes)
    if not (len(deltas) == len(steps) == len(sizes) == n):
        raise OpError(f"axes, deltas, steps and sizes differ in length ({n}, {len(deltas)}, "
                      f"{len(steps)}, {len(sizes)})")
    norm = [normalize_axis(a, x.ndim) for a in axes]
    if len(set(norm)) != n:
        raise OpError(f"axes {axes} repeat an axis")
    for axis, step, size in zip(norm, steps, sizes):
        if step == 0:
            raise OpError(f"steps {steps} contain 0")
        if not 0 <= size <= x.shape[axis]:
            raise OpError(f"size {size} along axis {axis} is outside [0, {x.shape[axis]}] (the "
                          f"axis length)")
    return norm


def _dynamic_slice_infer(x: TensorType, starts: TensorType, *, axes: list[int],
                         deltas: list[int], steps: list[int], sizes: list[int]) -> TensorType:
    if not starts.dtype.is_int:
        raise OpError(f"starts must be an integer tensor, got {starts.dtype}")
    if starts.ndim != 1 or starts.shape[0] != len(axes):
        raise OpError(f"starts must be a 1-D tensor of {len(axes)} entries (one per axis), got "
                      f"shape {list(starts.shape)}")
    norm = _check_attrs(x, axes, deltas, steps, sizes)
    shape = list(x.shape)
    for axis, size in zip(norm, sizes):
        shape[axis] = size
    return x.with_shape(shape)


@register_op("DynamicSlice", attrs={"axes": Attr.ints(), "deltas": Attr.ints(),
                                    "steps": Attr.ints(), "sizes": Attr.ints()},
             inputs=2, infer=_dynamic_slice_infer, pattern=OpPattern.OPAQUE)
def dynamic_slice(x: np.ndarray, starts: np.ndarray, *, axes: list[int], deltas: list[int],
                  steps: list[int], sizes: list[int]) -> np.ndarray:
    """ONNX Slice(x, starts, starts + deltas, axes, steps) with a static output size."""
    begin = [int(s) for s in np.asarray(starts).reshape(-1)]
    if len(begin) != len(axes):
        raise OpError(f"starts has {len(begin)} entries for {len(axes)} axes")
    ends = [b + d for b, d in zip(begin, deltas)]
    norm = [normalize_axis(a, x.ndim) for a in axes]
    window = slice_tuple(x.shape, begin, ends, norm, list(steps))
    for axis, start, end, step, size in zip(norm, begin, ends, steps, sizes):
        got = len(range(*window[axis].indices(x.shape[axis])))
        if got != size:
            raise RunError(
                f"start {start} (end {end}, step {step}) on axis {axis} of length "
                f"{x.shape[axis]} leaves {got} elements after ONNX clamping, but the slice's "
                f"static output holds {size} (the start must leave the whole window inside the "
                f"axis; negative starts count from the end)")
    return x[window].copy()


__all__ = ["dynamic_slice", "window_length"]
