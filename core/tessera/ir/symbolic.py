"""Symbolic input shapes: dimensions named by variables, bound from the arrays of each call.

A model exported with dynamic axes declares inputs such as ``input_ids: int64[batch, seq]``
and ``attention_mask: int64[batch, seq]``. An :class:`InputSpec` keeps such a shape as a
tuple of dimensions, each an ``int`` (fixed) or a ``str`` (a variable: ``"batch"``). A
variable that appears in several places is one size: binding the arrays of a call
(:meth:`ShapeVars.bind`) checks every such relation once and says which input broke which,
and checks the variables' bounds (``1 <= batch <= 64``) when given.

The bound sizes turn the specs into concrete shapes (:meth:`ShapeVars.shapes`), which is what
a shape-specialised module is compiled for (:mod:`tessera.runtime.dynamic`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import RunError, TesseraError
from tessera.ir.types import DType

__all__ = ["Dim", "InputSpec", "ShapeVars", "check_bounds", "format_dims", "is_static",
           "parse_dim"]

#: One dimension of a symbolic shape: a size, or the name of a variable.
Dim = int | str

_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]/:-]*$")


def parse_dim(value: Any, where: str) -> Dim:
    """A dimension as a user or a model gives it: a non-negative int (or a string of digits),
    or a variable name. ``where`` names it in errors (``"input_shapes['x'] dimension 0"``)."""
    if isinstance(value, (bool, np.bool_)):
        raise TesseraError(f"{where}: expected a size or a variable name, got {value!r}")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise TesseraError(f"{where}: a size must be non-negative, got {value}")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        if _VAR.match(text):
            return text
    raise TesseraError(f"{where}: expected a size or a variable name (letters, digits, '_'), "
                       f"got {value!r}")


def format_dims(dims: Sequence[Dim]) -> str:
    """``[batch, 3, 224, 224]``."""
    return f"[{', '.join(str(d) for d in dims)}]"


def is_static(dims: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in dims)


def check_bounds(bounds: Mapping[str, Sequence[int]] | None) -> dict[str, tuple[int, int]]:
    """``{"batch": (1, 64)}`` checked: each a pair ``lo <= hi`` of non-negative ints."""
    checked: dict[str, tuple[int, int]] = {}
    for name, pair in (bounds or {}).items():
        try:
            lo, hi = (int(x) for x in pair)
        except (TypeError, ValueError):
            raise TesseraError(f"dim_bounds[{name!r}]: expected (low, high), got "
                               f"{pair!r}") from None
        if not 0 <= lo <= hi:
            raise TesseraError(f"dim_bounds[{name!r}]: expected 0 <= low <= high, got "
                               f"({lo}, {hi})")
        checked[str(name)] = (lo, hi)
    return checked


@dataclass(frozen=True)
class InputSpec:
    """A graph input: its name, its dimensions (sizes and variables) and its element type."""

    name: str
    dims: tuple[Dim, ...]
    dtype: DType

    @property
    def variables(self) -> list[str]:
        return [d for d in self.dims if isinstance(d, str)]

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{format_dims(self.dims)}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dims": list(self.dims), "dtype": self.dtype.value}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> InputSpec:
        name = str(d["name"])
        dims = tuple(parse_dim(x, f"input {name!r}") for x in d["dims"])
        return InputSpec(name, dims, DType(str(d["dtype"])))


@dataclass(frozen=True)
class ShapeVars:
    """The inputs' specs and the variables' bounds; binds a call's arrays to sizes."""

    inputs: tuple[InputSpec, ...]
    bounds: Mapping[str, tuple[int, int]]
    #: every variable, in the order of first appearance (set by ``__post_init__``)
    _order: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())
    #: :meth:`bind` for a call that breaks nothing, as generated code (``__post_init__``)
    _bind_fast: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        seen: list[str] = []
        for spec in self.inputs:
            seen += [v for v in spec.variables if v not in seen]
        object.__setattr__(self, "_order", tuple(seen))  # read by every bind: kept
        object.__setattr__(self, "_bind_fast", self._generated_bind())
        known = set(self.variables)
        unknown = sorted(set(self.bounds) - known)
        if unknown:
            raise TesseraError(f"dim_bounds names {', '.join(map(repr, unknown))}, which no "
                               f"input dimension uses (the variables are "
                               f"{', '.join(map(repr, self.variables)) or 'none'})")

    @property
    def variables(self) -> list[str]:
        """Every variable, in the order of first appearance."""
        return list(self._order)

    def describe(self) -> str:
        """``input_ids: int64[batch, seq], mask: int64[batch, seq]; 1 <= batch <= 64``."""
        text = ", ".join(str(s) for s in self.inputs)
        bounds = ", ".join(f"{lo} <= {v} <= {hi}" for v, (lo, hi) in self.bounds.items())
        return f"{text}; {bounds}" if bounds else text

    def __reduce__(self) -> tuple[Any, ...]:  # the generated bind is not pickled: remade
        return (ShapeVars, (self.inputs, dict(self.bounds)))

    def _generated_bind(self) -> Any:
        """:meth:`bind` as straight-line code that returns None at the first check that
        fails (the general loop then finds and names it): a service calls it per request."""
        lines = ["def bind(arrays):"]
        scope: dict[str, Any] = {}
        index = {v: i for i, v in enumerate(self._order)}
        bound: set[str] = set()
        for k, spec in enumerate(self.inputs):
            scope[f"d{k}"] = np.dtype(spec.dtype.numpy)
            lines += [f"    a = arrays[{spec.name!r}]", f"    if a.dtype != d{k}:",
                      "        return None", "    s = a.shape",
                      f"    if len(s) != {len(spec.dims)}:", "        return None"]
            for axis, dim in enumerate(spec.dims):
                if isinstance(dim, int):
                    lines += [f"    if s[{axis}] != {dim}:", "        return None"]
                elif dim in bound:
                    lines += [f"    if s[{axis}] != x{index[dim]}:", "        return None"]
                else:
                    bound.add(dim)
                    lines.append(f"    x{index[dim]} = s[{axis}]")
                    if dim in self.bounds:
                        lo, hi = self.bounds[dim]
                        lines += [f"    if not {int(lo)} <= x{index[dim]} <= {int(hi)}:",
                                  "        return None"]
        items = ", ".join(f"{v!r}: x{i}" for v, i in index.items())
        lines.append(f"    return {{{items}}}")
        exec(compile("\n".join(lines), "<tessera bind>", "exec"), scope)  # noqa: S102
        return scope["bind"]

    def bind(self, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
        """Each variable's size in a call on ``arrays`` (every input present, checked for its
        dtype, rank and fixed sizes); a :class:`RunError` names the input and the relation it
        breaks."""
        fast = self._bind_fast(arrays) if self._bind_fast is not None else None
        if fast is not None:
            return fast  # type: ignore[no-any-return]
        sizes: dict[str, int] = {}
        origin: dict[str, str] = {}
        for spec in self.inputs:
            array = arrays[spec.name]
            if array.dtype != spec.dtype.numpy:
                raise RunError(f"input {spec.name!r}: expected dtype {spec.dtype}, got "
                               f"{array.dtype}")
            shape = tuple(int(n) for n in array.shape)
            if len(shape) != len(spec.dims):
                raise RunError(f"input {spec.name!r}: expected rank {len(spec.dims)} "
                               f"({format_dims(spec.dims)}), got shape {list(shape)}")
            for i, (dim, n) in enumerate(zip(spec.dims, shape)):
                if isinstance(dim, int):
                    if n != dim:
                        raise RunError(f"input {spec.name!r}: dimension {i} must be {dim} "
                                       f"(shape {format_dims(spec.dims)}), got {list(shape)}")
                    continue
                if dim in sizes:
                    if sizes[dim] != n:
                        raise RunError(f"input {spec.name!r}: dimension {i} is {n}, but "
                                       f"{dim!r} is {sizes[dim]} ({origin[dim]}); the model's "
                                       f"inputs are {self.describe()}")
                    continue
                lo, hi = self.bounds.get(dim, (0, None))  # type: ignore[assignment]
                if n < lo or (hi is not None and n > hi):
                    raise RunError(f"input {spec.name!r}: dimension {i} ({dim!r}) is {n}, "
                                   f"outside its bounds {lo} <= {dim} <= {hi}")
                sizes[dim] = n
                origin[dim] = f"input {spec.name!r} dimension {i}"
        return sizes

    def shapes(self, sizes: Mapping[str, int]) -> dict[str, list[int]]:
        """Every input's concrete shape for the variables' ``sizes``."""
        return {s.name: [d if isinstance(d, int) else int(sizes[d]) for d in s.dims]
                for s in self.inputs}

    def sizes_of_shapes(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
        """The variables' sizes that concrete ``shapes`` (input name -> shape; an input whose
        dimensions are all fixed may be left out) give; the same checks as :meth:`bind`,
        without arrays."""
        shapes = {**{s.name: list(s.dims) for s in self.inputs if is_static(s.dims)},
                  **shapes}
        missing = [s.name for s in self.inputs if s.name not in shapes]
        unknown = [n for n in shapes if n not in {s.name for s in self.inputs}]
        if missing or unknown:
            raise TesseraError(f"shapes must give every input of the model ({self.describe()})"
                               f"{'; missing ' + ', '.join(missing) if missing else ''}"
                               f"{'; unknown ' + ', '.join(unknown) if unknown else ''}")
        arrays = {s.name: np.lib.stride_tricks.as_strided(
                      np.zeros((), s.dtype.numpy), shape=tuple(int(n) for n in shapes[s.name]),
                      strides=(0,) * len(shapes[s.name]))
                  for s in self.inputs}
        return self.bind(arrays)

    def key(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The cache key of ``sizes``: the variables' sizes in :attr:`variables` order."""
        return tuple(int(sizes[v]) for v in self._order)

    @staticmethod
    def text(sizes: Mapping[str, int]) -> str:
        """``batch=3, seq=7``."""
        return ", ".join(f"{v}={n}" for v, n in sizes.items())
