"""A module's signature: the inputs callers give and the outputs they get, checked.

Inputs are checked by name, dtype and shape before anything is copied; outputs are found by
name or position, and a caller's ``out`` array is checked against the output's shape and
dtype. The planner (:mod:`tessera.runtime.planner`) builds one from the compiled model's
inputs and output names and the execution plan's output tensors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import RunError
from tessera.ir.types import TensorType
from tessera.runtime.plan import ExecutionPlan


@dataclass(frozen=True)
class Signature:
    """Input name -> type; output names in order, the plan tensor (or constant) each reads
    and its shape and dtype."""

    inputs: dict[str, TensorType]
    output_names: list[str]
    output_tensors: list[str]
    output_layouts: list[tuple[tuple[int, ...], np.dtype] | None]
    #: Per input, what every call checks: the numpy dtype, and the shape when it is static
    #: (a symbolic one is bound and checked by the module's ShapeVars). Derived from inputs.
    _checks: dict[str, tuple[np.dtype, tuple[int, ...] | None]] = field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_checks", {
            name: (np.dtype(t.dtype.numpy), tuple(t.shape) if t.is_static else None)
            for name, t in self.inputs.items()})

    @classmethod
    def of(cls, inputs: Mapping[str, TensorType], output_names: Sequence[str],
           plan: ExecutionPlan) -> Signature:
        layouts: list[tuple[tuple[int, ...], np.dtype] | None] = []
        for tensor in plan.outputs:
            if tensor in plan.output_constants:
                value = np.asarray(plan.output_constants[tensor])
                layouts.append((tuple(value.shape), value.dtype))
            elif tensor in plan.tensors:
                t = plan.tensors[tensor].type
                layouts.append((tuple(t.shape), np.dtype(t.dtype.numpy)))
            else:  # not planned (the executor says so when it is read)
                layouts.append(None)
        return cls(dict(inputs), list(output_names), list(plan.outputs), layouts)

    # -- inputs ---------------------------------------------------------------------------------
    def check_input(self, name: str, value: Any) -> np.ndarray:
        check = self._checks.get(name)
        if check is None:
            raise RunError(f"unknown input {name!r}; the model's inputs are "
                           f"{', '.join(self.inputs) or 'none'}")
        dtype, shape = check
        array = value if type(value) is np.ndarray else np.asarray(value)
        if array.dtype != dtype:
            raise RunError(f"input {name!r}: expected dtype {self.inputs[name].dtype}, got "
                           f"{array.dtype}")
        if shape is not None and array.shape != shape:
            raise RunError(f"input {name!r}: expected shape {list(shape)}, got "
                           f"{list(array.shape)}")
        return array  # a symbolic shape: the module binds and checks it (ShapeVars)

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Every input checked (names, dtypes, shapes) before any is copied anywhere."""
        checks = self._checks
        if len(inputs) == len(checks) and all(n in checks for n in inputs):
            return {name: self.check_input(name, value) for name, value in inputs.items()}
        missing = [n for n in self.inputs if n not in inputs]
        unknown = [n for n in inputs if n not in self.inputs]
        if missing or unknown:
            given = f"unknown input{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}" \
                if unknown else ""
            lacking = f"missing input(s) {', '.join(missing)}" if missing else ""
            raise RunError(f"{'; '.join(x for x in (given, lacking) if x)}; the model needs "
                           f"{', '.join(f'{n}: {t}' for n, t in self.inputs.items())}")
        return {name: self.check_input(name, value) for name, value in inputs.items()}

    def random_input(self, name: str, rng: np.random.Generator) -> np.ndarray:
        """Random data for input ``name`` (for measuring): :func:`random_tensor`."""
        return random_tensor(self.inputs[name], rng)

    # -- outputs --------------------------------------------------------------------------------
    def output_tensor(self, index: int | str) -> str:
        """The plan tensor of an output, by position or name."""
        return self.output_tensors[self._position(index)]

    def _position(self, index: int | str) -> int:
        if isinstance(index, str):
            if index not in self.output_names:
                raise RunError(f"unknown output {index!r}; outputs: "
                               f"{', '.join(self.output_names)}")
            index = self.output_names.index(index)
        if not 0 <= index < len(self.output_tensors):
            raise RunError(f"output index {index} out of range ({len(self.output_tensors)} "
                           f"outputs)")
        return index

    def wanted(self, output_names: Sequence[str] | None) -> list[tuple[str, str]]:
        """(output name, plan tensor) of every output, or of ``output_names`` in order."""
        if output_names is None:
            return list(zip(self.output_names, self.output_tensors))
        if isinstance(output_names, str) or not all(isinstance(n, str) for n in output_names):
            hint = (" (an input named 'output_names' goes in the feeds dict)"
                    if "output_names" in self.inputs else "")
            raise RunError(f"run(output_names=...): expected a list of output names, got "
                           f"{type(output_names).__name__}{hint}; the outputs are "
                           f"{', '.join(self.output_names)}")
        unknown = [n for n in output_names if n not in self.output_names]
        if unknown:
            raise RunError(f"run(output_names=...): unknown output(s) "
                           f"{', '.join(map(repr, unknown))}; the model's outputs are "
                           f"{', '.join(self.output_names)}")
        return [(n, self.output_tensors[self.output_names.index(n)]) for n in output_names]

    def check_out(self, index: int | str, out: Any,
                  shape: tuple[int, ...] | None = None) -> None:
        """Refuse an ``out`` array that is not a writable C-contiguous array of the output's
        shape (``shape``: this call's, for an output of symbolic shape) and dtype."""
        layout = self.output_layouts[self._position(index)]
        if layout is None:
            raise RunError(f"output {index!r} is not a planned tensor of the module")
        planned, dtype = layout
        shape = planned if shape is None else shape
        if not isinstance(out, np.ndarray) or out.dtype != dtype or \
                tuple(out.shape) != tuple(shape) or not out.flags.c_contiguous or \
                not out.flags.writeable:
            got = (f"{out.dtype} {list(out.shape)}" if isinstance(out, np.ndarray)
                   else type(out).__name__)
            raise RunError(f"output {index!r}: out must be a writable C-contiguous "
                           f"{np.dtype(dtype)} array of shape {list(shape)}, got {got}")


def random_tensor(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Random data of type ``t`` for measuring a model: normal floats, 0/1 otherwise."""
    if t.dtype.is_float:
        return rng.standard_normal(t.shape).astype(t.dtype.numpy)
    if t.dtype.value == "bool":
        return rng.integers(0, 2, t.shape).astype(bool)
    return rng.integers(0, 2, t.shape).astype(t.dtype.numpy)
