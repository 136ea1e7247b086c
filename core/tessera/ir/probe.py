"""Type inference with symbolic shapes, built on each op's static ``infer``.

:meth:`OpSchema.infer_types <tessera.ir.schema.OpSchema.infer_types>` comes here when an input
type has symbolic dimensions or an attribute holds a size expression:

* an op with a ``symbolic_infer`` rule gives its output shapes; its static ``infer``, run once
  at a probe size (every variable set to a value), gives the dtypes and checks the rule (the
  shapes evaluated at the probe must be what ``infer`` says);
* any other op is *probed*: its static ``infer`` runs at each point of a grid of sizes (three
  values per variable) and each output dimension is fitted as a polynomial of degree at most 2
  in each variable (exact rational coefficients; ``seq // 2`` when the fit has halves), then
  checked at further sizes, small and large. A dimension that is no such polynomial (``min(seq,
  k)`` for a k among the probed sizes, a data-dependent size) fails the check, and the node
  gets an :class:`OpError` naming it, its op and why.

The grid's sizes are multiples of 16, so ops that need a dimension divisible by a small power
of two infer; the checks include odd sizes, so a floor division the grid cannot see fails
rather than fitting one parity only. A fit is exact for the polynomial dimensions ops compute
from their inputs' (products, sums, exact quotients).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from tessera.errors import OpError, TesseraError
from tessera.ir import symbolic as _sym
from tessera.ir.types import TensorType

if TYPE_CHECKING:  # annotations only: the schema module imports this one
    from tessera.ir.schema import OpSchema

__all__ = ["GRID", "MAX_VARIABLES", "infer", "probe_sizes"]

#: The values each variable takes on the fitting grid.
GRID = (16, 32, 48)
#: At most this many variables in one node (the grid has ``3 ** n`` points).
MAX_VARIABLES = 4


def probe_sizes(names: Sequence[str], base: int = 48, step: int = 16) -> dict[str, int]:
    """A probe point: distinct values, multiples of 16, one per variable."""
    return {n: base + step * i for i, n in enumerate(sorted(names))}


def rule_probe_sizes(names: Sequence[str]) -> dict[str, int]:
    """The point a symbolic rule is checked at: :func:`probe_sizes`, with a variable whose
    known upper bound (:func:`~tessera.ir.symbolic.dim_bounds_scope`) is below its value
    taken at the bound instead (less its index among the variables, to keep the values
    distinct): the rule may have simplified with the bounds (``min(seq, 16)`` is ``seq``
    where ``seq <= 16``), so beyond them it need not agree with the op's inference."""
    sizes = probe_sizes(names)
    bounds = _sym.current_dim_bounds()
    for i, n in enumerate(sorted(names)):
        lo, hi = bounds.get(n, (0, None))
        if hi is not None and sizes[n] > hi and hi - i >= max(lo, 1):
            sizes[n] = hi - i
    return sizes


def _variables(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[str]:
    names: set[str] = set()
    for t in types:
        if t is not None:
            names |= t.variables
    for v in attrs.values():
        names |= _sym.attr_vars(v)
    return sorted(names)


def _describe(types: Sequence[TensorType | None]) -> str:
    return ", ".join(str(t) if t is not None else "-" for t in types)


def _at(schema: OpSchema, node: str, types: Sequence[TensorType | None],
        attrs: Mapping[str, Any], sizes: Mapping[str, int]) -> list[TensorType]:
    """The op's static inference at ``sizes``."""
    concrete = [t.evaluate(sizes) if t is not None else None for t in types]
    values = {k: _sym.substitute(v, sizes) for k, v in attrs.items()}
    return schema._infer_static(node, concrete, values)


def infer(schema: OpSchema, node: str, types: list[TensorType | None],
          attrs: dict[str, Any]) -> list[TensorType]:
    """Output types of ``schema``'s op for symbolic ``types``/``attrs`` (see the module)."""
    prefix = f"node {node} ({schema.name}): "
    names = _variables(types, attrs)
    try:
        if schema.symbolic_infer is not None:
            return _by_rule(schema, node, types, attrs, names)
        return _by_probes(schema, node, types, attrs, names)
    except (OpError, TesseraError, TypeError, ValueError, IndexError, ZeroDivisionError) as e:
        msg = str(e)
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
        raise OpError(f"{prefix}cannot infer output types symbolically for inputs "
                      f"({_describe(types)}): {msg}") from None


def _by_rule(schema: OpSchema, node: str, types: list[TensorType | None],
             attrs: dict[str, Any], names: list[str]) -> list[TensorType]:
    assert schema.symbolic_infer is not None
    result = schema.symbolic_infer(*types, **attrs)
    shapes = [result] if isinstance(result, tuple) else list(result)
    sizes = rule_probe_sizes(names)
    static = _at(schema, node, types, attrs, sizes)
    if len(shapes) < len(static):
        raise OpError(f"the symbolic rule gives {len(shapes)} outputs, the op {len(static)}")
    out = []
    for i, (shape, want) in enumerate(zip(shapes, static)):
        t = shape if isinstance(shape, TensorType) else TensorType(tuple(shape), want.dtype)
        if t.evaluate(sizes) != want:
            raise OpError(f"output {i}: the symbolic rule gives {t}, which at "
                          f"{_sizes_text(sizes)} is {t.evaluate(sizes)}, not {want}")
        out.append(t)
    return out


def _sizes_text(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _inverse_vandermonde() -> list[list[Fraction]]:
    """The inverse of ``V[j][e] = GRID[j] ** e`` (exact)."""
    n = len(GRID)
    m = [[Fraction(x) ** e for e in range(n)] + [Fraction(int(i == j)) for i in range(n)]
         for j, x in enumerate(GRID)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if m[r][col] != 0)
        m[col], m[pivot] = m[pivot], m[col]
        lead = m[col][col]
        m[col] = [v / lead for v in m[col]]
        for r in range(n):
            if r != col and m[r][col] != 0:
                f = m[r][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col])]
    return [row[n:] for row in m]


_VINV = _inverse_vandermonde()


def _fit(values: Mapping[tuple[int, ...], int], n: int) -> dict[tuple[int, ...], Fraction]:
    """Coefficients (by exponent tuple) of the polynomial through ``values`` on the grid."""
    coeffs: dict[tuple[int, ...], Fraction] = {k: Fraction(v) for k, v in values.items()}
    k = len(GRID)
    for axis in range(n):
        new: dict[tuple[int, ...], Fraction] = {}
        for idx in coeffs:
            if idx[axis] != 0:
                continue
            column = [coeffs[idx[:axis] + (j,) + idx[axis + 1:]] for j in range(k)]
            for e in range(k):
                new[idx[:axis] + (e,) + idx[axis + 1:]] = sum(
                    (_VINV[e][j] * column[j] for j in range(k)), Fraction(0))
        coeffs = new
    return {e: c for e, c in coeffs.items() if c != 0}


def _expression(coeffs: Mapping[tuple[int, ...], Fraction], names: Sequence[str]) -> Any:
    """The fitted polynomial as a dimension (``p // d`` for rational coefficients)."""
    denominator = 1
    for c in coeffs.values():
        denominator = denominator * c.denominator // math.gcd(denominator, c.denominator)
    total: Any = 0
    for exps, c in sorted(coeffs.items()):
        term: Any = int(c * denominator)
        for name, e in zip(names, exps):
            for _ in range(e):
                term = term * _sym.dim_var(name)
        total = total + term
    if denominator != 1 and not isinstance(total, int):
        total = total // denominator
    elif denominator != 1:
        total = total // denominator
    return _sym.normalize_dim(total)


def _verify_points(names: Sequence[str], large: bool) -> list[dict[str, int]]:
    """Checks beyond the grid: larger sizes, equal sizes, and odd ones (a floor division the
    grid's multiples of 16 hide). ``large`` adds sizes above 1000 (not for an op whose types
    come from running its reference on zeros: those would be allocated)."""
    points = [probe_sizes(names, 64, 16), {n: 80 for n in names}, probe_sizes(names, 77, 2)]
    return points + [probe_sizes(names, 1024, 32)] if large else points


def _by_probes(schema: OpSchema, node: str, types: list[TensorType | None],
               attrs: dict[str, Any], names: list[str]) -> list[TensorType]:
    n = len(names)
    if n > MAX_VARIABLES:
        raise OpError(f"{n} size variables ({', '.join(names)}); probing handles at most "
                      f"{MAX_VARIABLES}")
    grid = list(itertools.product(range(len(GRID)), repeat=n))
    results: dict[tuple[int, ...], list[TensorType]] = {}
    for idx in grid:
        sizes = {name: GRID[i] for name, i in zip(names, idx)}
        results[idx] = _at(schema, node, types, attrs, sizes)
    first = results[grid[0]]
    for idx, res in results.items():
        if len(res) != len(first) or any(a.ndim != b.ndim or a.dtype != b.dtype
                                          for a, b in zip(res, first)):
            sizes = {name: GRID[i] for name, i in zip(names, idx)}
            raise OpError(f"the outputs' number, ranks or dtypes change with the sizes "
                          f"({[str(t) for t in first]} at the first probe, "
                          f"{[str(t) for t in res]} at {_sizes_text(sizes)})")
    out: list[TensorType] = []
    for k, t in enumerate(first):
        dims = []
        for axis in range(t.ndim):
            values = {idx: res[k].shape[axis] for idx, res in results.items()}
            if len(set(values.values())) == 1:
                dims.append(next(iter(values.values())))
            else:
                dims.append(_expression(_fit(values, n), names))
        out.append(TensorType(tuple(dims), t.dtype))
    for sizes in _verify_points(names, large=schema.infer is not None):
        want = _at(schema, node, types, attrs, sizes)
        for k, (t, w) in enumerate(zip(out, want)):
            if t.evaluate(sizes) != w:
                raise OpError(f"output {k}: no dimension expression fits (fitted {t}, which "
                              f"at {_sizes_text(sizes)} is {t.evaluate(sizes)}, not {w})")
    return out
