"""Calibration: run the float model on sample inputs and record each tensor's largest magnitude.

The model is imported (no graph passes, so ONNX tensor names stay the IR's value names) and run
with the reference interpreter (:func:`tessera.backends.reference.interpreter.evaluate_function`)
over the calibration inputs, batch by batch; for every tensor asked for, the maximum of
``|x|`` over all batches is kept.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import onnx

from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import QuantizeError
from tessera.frontend.onnx.importer import import_onnx
from tessera.ir.graph import Function

#: Calibration inputs: arrays by input name (samples along axis 0), several such batches, or one
#: array for a model with a single input.
CalibrationData = Mapping[str, np.ndarray] | Iterable[Mapping[str, np.ndarray]] | np.ndarray


def _fixed_batch(model: onnx.ModelProto, name: str) -> int | None:
    """The input's first dimension when it is a fixed number, else None (symbolic)."""
    for vi in model.graph.input:
        if vi.name == name:
            dims = vi.type.tensor_type.shape.dim
            if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0:
                return int(dims[0].dim_value)
    return None


def _declared_shape(model: onnx.ModelProto, name: str) -> list[int | str] | None:
    """The input's shape as the model declares it (a symbolic dimension by its name), or
    None when it declares none."""
    for vi in model.graph.input:
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            return [int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                    else (d.dim_param or "?") for d in vi.type.tensor_type.shape.dim]
    return None


def check_shape(model: onnx.ModelProto, name: str, shape: tuple[int, ...],
                what: str = "has shape", first: int = 0) -> None:
    """Refuse calibration data for input ``name`` whose ``shape`` does not fit the model's
    declared one: another rank, or another size in a fixed dimension (from ``first`` on). An
    input the model declares with a fixed shape is calibrated at that shape only, never
    re-imported at another (which would calibrate a different model)."""
    declared = _declared_shape(model, name)
    if declared is None:
        return
    wrong = [i for i, (d, s) in enumerate(zip(declared, shape))
             if i >= first and isinstance(d, int) and d != s]
    if len(declared) != len(shape) or wrong:
        why = (f"rank {len(shape)}, not {len(declared)}" if len(declared) != len(shape) else
               ", ".join(f"dimension {i} is {shape[i]}, not {declared[i]}" for i in wrong))
        raise QuantizeError(f"calibration input {name!r} {what} {list(shape)}, but the model's "
                            f"input {name!r} has shape {declared} ({why})")


def iter_batches(model: onnx.ModelProto, data: CalibrationData,
                 batch_size: int = 64) -> Iterator[dict[str, np.ndarray]]:
    """Calibration data as batches of arrays by input name.

    A mapping of arrays is cut along axis 0 into batches of the model's fixed batch size (when
    its inputs have one) or of ``batch_size``; an iterable of mappings is taken batch by batch.
    """
    initializers = {t.name for t in model.graph.initializer}
    inputs = [vi.name for vi in model.graph.input if vi.name not in initializers]
    if isinstance(data, np.ndarray):
        if len(inputs) != 1:
            raise QuantizeError(f"the model has {len(inputs)} inputs ({', '.join(inputs)}); "
                                f"give the calibration data as arrays by input name")
        data = {inputs[0]: data}
    if isinstance(data, Mapping):
        arrays = {k: np.asarray(v) for k, v in data.items()}
        missing = [n for n in inputs if n not in arrays]
        unknown = [n for n in arrays if n not in inputs]
        if missing:
            raise QuantizeError(f"calibration data must give every model input "
                                f"({', '.join(inputs)}); it lacks {', '.join(missing)}")
        if unknown:  # as tessera run does with an inputs file's extra arrays
            warnings.warn(f"calibration arrays {', '.join(map(repr, unknown))} are not inputs "
                          f"of the model ({', '.join(inputs)}); they are ignored", stacklevel=2)
            arrays = {k: v for k, v in arrays.items() if k in inputs}
        for name, a in arrays.items():  # axis 0 counts samples: cut to the batch below
            check_shape(model, name, a.shape, "has shape", first=1)
        counts = {a.shape[0] if a.ndim else 0 for a in arrays.values()}
        if len(counts) != 1 or 0 in counts:
            raise QuantizeError("calibration arrays must hold the same number (> 0) of samples "
                                "along axis 0")
        total = counts.pop()
        fixed = {_fixed_batch(model, n) for n in inputs} - {None}
        if len(fixed) > 1:
            raise QuantizeError(f"the model's inputs have different fixed batch sizes "
                                f"{sorted(fixed)}; give the calibration data as batches")
        if fixed:  # whole batches of the model's own size (a remainder is left out)
            step = fixed.pop()
            if total < step:
                raise QuantizeError(f"the model takes batches of {step}; the calibration data "
                                    f"has {total} samples")
            starts = range(0, total - step + 1, step)
        else:
            step = max(int(batch_size), 1)
            starts = range(0, total, step)
        for start in starts:
            yield {k: a[start:start + step] for k, a in arrays.items()}
        return
    for batch in data:
        yield {k: np.asarray(v) for k, v in batch.items()}


def calibrate(model: onnx.ModelProto, tensors: Iterable[str], data: CalibrationData,
              batch_size: int = 64) -> dict[str, float]:
    """The largest ``|x|`` of each named tensor over the calibration data."""
    wanted = list(dict.fromkeys(tensors))
    maxima = dict.fromkeys(wanted, 0.0)
    for outputs in tensor_values(model, wanted, data, batch_size):
        for name in wanted:
            value = outputs[name]
            if value.size:
                maxima[name] = max(maxima[name], float(np.max(np.abs(value))))
    return maxima


def tensor_values(model: onnx.ModelProto, wanted: list[str], data: CalibrationData,
                  batch_size: int = 64) -> Iterator[dict[str, np.ndarray]]:
    """The named tensors' values on each calibration batch (the float model on the reference
    interpreter); a ``QuantizeError`` when the data holds no batch."""
    programs: dict[tuple[Any, ...], Function] = {}
    batches = 0
    for batch in iter_batches(model, data, batch_size):
        key = tuple(sorted((k, v.shape, v.dtype.str) for k, v in batch.items()))
        fn = programs.get(key)
        if fn is None:
            for name, value in batch.items():
                check_shape(model, name, value.shape, "has a batch of shape")
            fn = import_onnx(model, input_shapes={k: list(v.shape) for k, v in batch.items()})
            by_name = {v.name: v for v in fn.values()}
            missing = [t for t in wanted if t not in by_name]
            if missing:
                raise QuantizeError(f"tensor(s) {', '.join(missing)} are not values of the "
                                    f"imported model; cannot calibrate them")
            fn.outputs = [by_name[t] for t in wanted]
            programs[key] = fn
        for name, value in batch.items():
            expected = next((v.type for v in fn.inputs if v.name == name), None)
            if expected is not None and value.dtype != expected.dtype.numpy:
                raise QuantizeError(f"calibration input {name!r} is {value.dtype}, the model "
                                    f"expects {expected.dtype}")
        yield evaluate_function(fn, batch)
        batches += 1
    if not batches:
        raise QuantizeError("the calibration data holds no batch")
