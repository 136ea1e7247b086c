"""Symbolic shapes: input specs bound from the arrays of each call, and dimension expressions.

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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import RunError, TesseraError
from tessera.ir.types import DType

__all__ = ["Dim", "DimAlgebra", "InputSpec", "ShapeDim", "ShapeVars", "attr_vars",
           "broadcast_dims", "check_bounds", "current_dim_bounds", "dim_algebra",
           "dim_bounds_scope", "dim_from_json", "dim_key",
           "dim_str", "dim_to_json", "dim_var", "dim_vars", "dims_equal", "eval_dim",
           "format_dims", "format_shape", "has_dim_expr", "install_dim_algebra", "is_dim_expr",
           "is_static", "is_static_dim", "normalize_dim", "parse_dim", "prod_dims",
           "shapes_equal", "substitute"]

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
    #: where each bound comes from (``"given (dim_bounds)"``, ``"from the model (...)"``),
    #: for the error of a call beyond it
    notes: Mapping[str, str] = field(default_factory=dict, compare=False)
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
        return (ShapeVars, (self.inputs, dict(self.bounds), dict(self.notes)))

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
                    note = (f" ({self.notes[dim]}; a module for other sizes is compiled "
                            f"with dim_bounds)" if dim in self.notes else "")
                    raise RunError(f"input {spec.name!r}: dimension {i} ({dim!r}) is {n}, "
                                   f"outside its bounds {lo} <= {dim} <= {hi}{note}")
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


# -- symbolic dimensions in the graph IR ---------------------------------------------------------
#
# A :class:`~tessera.ir.types.TensorType` dimension is an ``int`` or an integer expression over
# the model's size variables (``batch``, ``seq``): a TIR expression (``tessera.tir.expr``,
# int64). The IR sits below ``tir`` in the layering (docs/architecture.md), so it does not
# import it: it works on expressions through a :class:`DimAlgebra`, which the layer that may
# import both installs (:mod:`tessera.passes.dim_algebra`, imported with ``tessera``). The
# helpers below are what the IR, the op schemas' inference and the passes use.

class DimAlgebra:
    """The operations on dimension expressions the IR needs (implemented with TIR by
    :class:`tessera.passes.dim_algebra.TirDimAlgebra`). Variables compare by name."""

    def is_expr(self, value: Any) -> bool:
        raise NotImplementedError

    def var(self, name: str) -> Any:
        """The variable ``name`` (one object per name)."""
        raise NotImplementedError

    def normalize(self, expr: Any) -> Any:
        """A canonical form of ``expr`` (sizes are non-negative): an ``int`` when constant,
        equal polynomials give structurally equal expressions."""
        raise NotImplementedError

    def key(self, expr: Any) -> Any:
        """A hashable structural key (variables by name)."""
        raise NotImplementedError

    def evaluate(self, expr: Any, sizes: Mapping[str, int]) -> int:
        raise NotImplementedError

    def variables(self, expr: Any) -> set[str]:
        raise NotImplementedError

    def bound(self, expr: Any, bounds: Mapping[str, tuple[int, int]]
              ) -> tuple[int | None, int | None]:
        """Constant (lo, hi) of ``expr`` for variables within ``bounds`` (others >= 0)."""
        raise NotImplementedError

    def prove(self, cond: Any) -> bool:
        """Whether condition ``cond`` holds for every non-negative size."""
        raise NotImplementedError

    def eq(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def minimum(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def maximum(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def select(self, cond: Any, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def to_str(self, expr: Any) -> str:
        raise NotImplementedError

    def to_json(self, expr: Any) -> Any:
        raise NotImplementedError

    def from_json(self, data: Any) -> Any:
        raise NotImplementedError


_ALGEBRA: DimAlgebra | None = None

#: The variables' known ranges where dimensions are normalized and compared (see
#: :func:`dim_bounds_scope`); a variable not named is non-negative.
_BOUNDS: ContextVar[Mapping[str, tuple[int, int]] | None] = ContextVar("tessera_dim_bounds",
                                                                        default=None)


@contextmanager
def dim_bounds_scope(bounds: Mapping[str, Sequence[int]] | None) -> Iterator[None]:
    """Within the block, dimensions are simplified and compared knowing the variables'
    ``bounds`` (``{"seq": (1, 512)}``: ``min(seq, 512)`` is ``seq``). A graph keeps its
    bounds in ``attrs["dim_bounds"]``; ``Function.add_node``, the verifier and the pass
    manager enter them."""
    if not bounds:
        yield
        return
    given = {str(k): (int(v[0]), int(v[1])) for k, v in bounds.items()}
    merged = {**(_BOUNDS.get() or {}), **given}
    token = _BOUNDS.set(merged)
    try:
        yield
    finally:
        _BOUNDS.reset(token)


def current_dim_bounds() -> Mapping[str, tuple[int, int]]:
    """The bounds :func:`dim_bounds_scope` set (empty outside one)."""
    return _BOUNDS.get() or {}


def install_dim_algebra(algebra: DimAlgebra) -> None:
    """Make ``algebra`` the one the IR uses for symbolic dimensions."""
    global _ALGEBRA
    _ALGEBRA = algebra


def dim_algebra() -> DimAlgebra:
    """The installed :class:`DimAlgebra`; an error when none is (``import tessera`` installs
    the TIR one)."""
    if _ALGEBRA is None:
        raise TesseraError("symbolic dimensions need the TIR dimension algebra: import tessera "
                           "(tessera.passes.dim_algebra installs it)")
    return _ALGEBRA


#: One dimension of a graph type: an int or a dimension expression.
ShapeDim = Any


def is_dim_expr(value: Any) -> bool:
    """Whether ``value`` is a (non-constant) dimension expression."""
    return (_ALGEBRA is not None and not isinstance(value, (int, np.integer))
            and _ALGEBRA.is_expr(value))


def dim_var(name: str) -> Any:
    """The size variable ``name`` as a dimension expression."""
    if not isinstance(name, str) or not _VAR.match(name):
        raise TesseraError(f"{name!r} is not a valid size variable name")
    return dim_algebra().var(name)


def normalize_dim(d: Any, where: str = "dimension") -> ShapeDim:
    """``d`` as a graph dimension: an int (from any integer or a constant expression), or a
    canonical expression (a ``str`` names a variable)."""
    if isinstance(d, (bool, np.bool_)):
        return int(d)
    if isinstance(d, (int, np.integer)):
        return int(d)
    if isinstance(d, str):
        return dim_var(d.strip()) if not d.strip().isdigit() else int(d)
    alg = dim_algebra()
    if not alg.is_expr(d):
        raise TesseraError(f"{where}: expected an int or a dimension expression, got {d!r}")
    out = alg.normalize(d)
    return int(out) if isinstance(out, (int, np.integer)) else out


def is_static_dim(d: Any) -> bool:
    return isinstance(d, (int, np.integer))


def dim_key(d: ShapeDim) -> Any:
    """A hashable key of a dimension: the int, or the expression's structural key."""
    return int(d) if isinstance(d, (int, np.integer)) else dim_algebra().key(d)


def dims_equal(a: ShapeDim, b: ShapeDim) -> bool:
    """Whether two dimensions are the same (structurally, after normalization)."""
    a_int, b_int = isinstance(a, (int, np.integer)), isinstance(b, (int, np.integer))
    if a_int and b_int:
        return int(a) == int(b)
    if a_int or b_int:
        return False
    return a is b or dim_algebra().key(a) == dim_algebra().key(b)


def shapes_equal(a: Sequence[ShapeDim], b: Sequence[ShapeDim]) -> bool:
    return len(a) == len(b) and all(dims_equal(x, y) for x, y in zip(a, b))


def eval_dim(d: ShapeDim, sizes: Mapping[str, int]) -> int:
    """The value of a dimension for the variables' ``sizes``."""
    if isinstance(d, (int, np.integer)):
        return int(d)
    return int(dim_algebra().evaluate(d, sizes))


def dim_vars(d: ShapeDim) -> set[str]:
    """The variables a dimension uses."""
    if isinstance(d, (int, np.integer)):
        return set()
    return dim_algebra().variables(d)


def dim_str(d: ShapeDim) -> str:
    return str(int(d)) if isinstance(d, (int, np.integer)) else dim_algebra().to_str(d)


def dim_to_json(d: ShapeDim) -> Any:
    """An int as itself, an expression as ``{"dim": ...}`` (its algebra's JSON form)."""
    if isinstance(d, (int, np.integer)):
        return int(d)
    return {"dim": dim_algebra().to_json(d)}


def dim_from_json(data: Any) -> ShapeDim:
    if isinstance(data, dict) and "dim" in data:
        return normalize_dim(dim_algebra().from_json(data["dim"]))
    return int(data)


def has_dim_expr(value: Any) -> bool:
    """Whether an attribute value (possibly a nested list) holds a dimension expression."""
    if isinstance(value, (list, tuple)):
        return any(has_dim_expr(v) for v in value)
    return is_dim_expr(value)


def attr_vars(value: Any) -> set[str]:
    """The variables an attribute value (possibly a nested list) uses."""
    if isinstance(value, (list, tuple)):
        out: set[str] = set()
        for v in value:
            out |= attr_vars(v)
        return out
    return dim_vars(value) if is_dim_expr(value) else set()


def substitute(value: Any, sizes: Mapping[str, int]) -> Any:
    """An attribute value with every dimension expression evaluated at ``sizes`` (lists
    and tuples kept as such)."""
    if isinstance(value, list):
        return [substitute(v, sizes) for v in value]
    if isinstance(value, tuple):
        return tuple(substitute(v, sizes) for v in value)
    if is_dim_expr(value):
        return eval_dim(value, sizes)
    return value


def prod_dims(dims: Sequence[ShapeDim]) -> ShapeDim:
    """The product of dimensions: an int when all are ints, else a normalized expression."""
    total: Any = None
    static = 1
    for d in dims:
        if isinstance(d, (int, np.integer)):
            static *= int(d)
        else:
            total = d if total is None else total * d
    if total is None:
        return static
    return normalize_dim(total * static if static != 1 else total)


def broadcast_dims(*shapes: Sequence[ShapeDim]) -> tuple[ShapeDim, ...]:
    """Numpy broadcasting of shapes with symbolic dimensions: per axis, the dimensions other
    than 1 must be equal (structurally, or provably). Two dimensions that may differ (``batch``
    and ``seq``) raise :class:`TesseraError`: nothing says which one the result has."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[ShapeDim] = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if axis >= rank - len(s)]
        chosen: ShapeDim = 1
        for d in dims:
            if isinstance(d, (int, np.integer)) and int(d) == 1:
                continue
            if isinstance(chosen, int) and chosen == 1:
                chosen = d
            elif not dims_equal(chosen, d):
                if isinstance(chosen, int) and isinstance(d, (int, np.integer)):
                    raise TesseraError(f"shapes {', '.join(format_shape(s) for s in shapes)} "
                                       f"do not broadcast")
                alg = dim_algebra()
                if not alg.prove(alg.eq(chosen, d)):
                    raise TesseraError(
                        f"shapes {', '.join(format_shape(s) for s in shapes)}: dimensions "
                        f"{dim_str(chosen)} and {dim_str(d)} (axis {axis}) may differ, so "
                        f"they do not broadcast symbolically")
        out.append(chosen)
    return tuple(out)


def format_shape(shape: Sequence[ShapeDim]) -> str:
    """``[batch, seq, 512]``."""
    return "[" + ", ".join(dim_str(d) for d in shape) + "]"
