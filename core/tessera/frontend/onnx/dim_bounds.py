"""The size variables' ranges a symbolic module is compiled for, and where each comes from.

A module compiled once for every size plans its memory at the variables' upper bounds
(``dim_bounds``). Each variable's range is, in this order:

1. the caller's (``dim_bounds={"seq": (1, 512)}``);
2. the model's: a relation between sizes that only one variable enters and that holds up to
   some size and no further (a position table of 512 rows added to a ``seq``-long sequence:
   ``seq <= 512``), found by probing the relation's check;
3. a default: the largest power of two, at most :data:`DEFAULT_CEILING`, at which the
   model's live activations (at the busiest node of the ONNX graph's order, 4 bytes an
   element: about what the planned arena holds) stay within :data:`ACTIVATION_BUDGET`, the
   other variables at their upper bounds. A batch-like variable (the first dimension of
   every input that uses it) is held at :data:`BATCH_DEFAULT` while the others grow
   together, and then grows alone while the activations fit: a service's batches are few
   requests, its lengths long (GPT-2's logits would otherwise cap batch and length at 64
   each; this gives 8 and 512).

The low end is 0 (an empty batch, no detections) unless the caller says otherwise.
:func:`model_dim_bounds` returns the bounds and a note per variable saying which of the three
it is (shown by a call beyond them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from tessera.errors import TesseraError
from tessera.frontend.onnx.order import _sorted_nodes as sorted_nodes
from tessera.frontend.onnx.symbolic_eval import relations_check, to_python, variables_of
from tessera.frontend.onnx.symbolic_shapes import Relation, SymValue, model_symbolic
from tessera.ir.symbolic import InputSpec, check_bounds

__all__ = ["ACTIVATION_BUDGET", "BATCH_DEFAULT", "DEFAULT_CEILING", "model_dim_bounds"]

#: The activations' estimated size (bytes) the default bounds stay within.
ACTIVATION_BUDGET = 1 << 30
#: The largest default upper bound of a variable.
DEFAULT_CEILING = 4096
#: A batch-like variable's bound while the other defaults grow (then it grows itself).
BATCH_DEFAULT = 8
#: The largest size probed for a bound the model implies.
_PROBE_LIMIT = 1 << 24


def model_dim_bounds(proto: onnx.ModelProto, specs: Sequence[InputSpec],
                     given: Mapping[str, Sequence[int]] | None = None,
                     frozen: Mapping[str, np.ndarray] | None = None
                     ) -> tuple[dict[str, tuple[int, int]], dict[str, str], list[Relation]]:
    """Every variable of ``specs`` with its ``(low, high)`` and a note on where it comes from
    (the caller's ``given``, the model's relations, or the default): see the module doc; and
    the relations between sizes the model needs (what a call is checked against)."""
    variables: list[str] = []
    for spec in specs:
        variables += [v for v in spec.variables if v not in variables]
    bounds = check_bounds(given)
    unknown = sorted(set(bounds) - set(variables))
    if unknown:
        raise TesseraError(f"dim_bounds names {', '.join(map(repr, unknown))}, which no input "
                           f"dimension uses (the variables are "
                           f"{', '.join(map(repr, variables)) or 'none'})")
    notes = {v: "given (dim_bounds)" for v in bounds}
    nodes = sorted_nodes(proto.graph)
    values, relations = model_symbolic(proto, {s.name: list(s.dims) for s in specs}, frozen,
                                       {v: (lo, hi) for v, (lo, hi) in bounds.items()})
    for v in variables:
        if v in bounds:
            continue
        implied = _implied_upper(v, relations)
        if implied is not None:
            bounds[v] = (0, implied[0])
            notes[v] = f"from the model ({implied[1]})"
    left = [v for v in variables if v not in bounds]
    if left:
        estimate = _peak_activation_bytes(nodes, values, specs)
        batch = [v for v in left if _batch_like(v, specs)]
        rest = [v for v in left if v not in batch]
        if batch and rest:
            held = {**bounds, **{v: (0, BATCH_DEFAULT) for v in batch}}
            size = _default_size(rest, held, estimate)
            for v in rest:
                bounds[v] = (0, size)
            size = max(_default_size(batch, bounds, estimate), BATCH_DEFAULT)
            for v in batch:
                bounds[v] = (0, size)
        else:
            size = _default_size(left, bounds, estimate)
            for v in left:
                bounds[v] = (0, size)
        for v in left:
            notes[v] = (f"default: the largest power of two up to {DEFAULT_CEILING} whose "
                        f"activations fit in {ACTIVATION_BUDGET >> 20} MiB"
                        + (f" (a batch: the other sizes first, at {BATCH_DEFAULT})"
                           if v in batch and rest else ""))
    return {v: bounds[v] for v in variables}, {v: notes[v] for v in variables}, relations


def _implied_upper(var: str, relations: Sequence[Relation]) -> tuple[int, str] | None:
    """The largest size of ``var`` that the relations over it alone admit, when they admit
    every size from 1 up to it and none just above (else None), and the node that says so."""
    own = [r for r in relations if variables_of(r.condition) == {var}]
    check = relations_check(own) if own else None
    if check is None:
        return None

    def ok(n: int) -> bool:
        return check({var: n}) is None

    if not ok(1):
        return None
    good = 1
    while good < _PROBE_LIMIT and ok(good * 2):
        good *= 2
    if good >= _PROBE_LIMIT:
        return None
    bad = good * 2
    while bad - good > 1:  # ok(good), not ok(bad)
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    if not all(ok(n) for n in range(max(1, good - 3), good + 1)) or \
            any(ok(n) for n in range(good + 1, good + 4)):
        return None  # not a plain upper limit (every other size, say)
    broken = check({var: good + 1}) or ""
    return good, broken.split(";")[0]


def _batch_like(var: str, specs: Sequence[InputSpec]) -> bool:
    """Whether ``var`` is the first dimension of every input that uses it, and nothing else
    there."""
    uses = [i for spec in specs for i, d in enumerate(spec.dims) if d == var]
    return bool(uses) and all(i == 0 for i in uses)


def _default_size(left: Sequence[str], bounds: Mapping[str, tuple[int, int]],
                  estimate: Callable[[Mapping[str, int]], int]) -> int:
    """The largest power of two up to :data:`DEFAULT_CEILING` at which every variable of
    ``left`` keeps the estimated activations within :data:`ACTIVATION_BUDGET`."""
    size = 1
    while size < DEFAULT_CEILING:
        at = {v: hi for v, (_, hi) in bounds.items()}
        at.update({v: size * 2 for v in left})
        if estimate(at) > ACTIVATION_BUDGET:
            break
        size *= 2
    return size


def _peak_activation_bytes(nodes: Sequence[onnx.NodeProto], values: Mapping[str, SymValue],
                           specs: Sequence[InputSpec]) -> Callable[[Mapping[str, int]], int]:
    """The most bytes the variable-sized values hold at once as the nodes run in order (each
    value live from its node, or the start for an input, to its last reader), 4 bytes an
    element."""
    sized: list[str] = []
    terms: list[str] = []
    for name, value in values.items():
        if value.shape is None or not any(variables_of(d) for d in value.shape):
            continue
        try:
            terms.append("*".join(f"max({to_python(d)}, 0)" for d in value.shape) or "1")
        except TypeError:
            continue
        sized.append(name)
    index = {name: i for i, name in enumerate(sized)}
    last: dict[str, int] = {}
    for step, node in enumerate(nodes):
        for name in node.input:
            last[name] = step
    born: list[list[int]] = [[] for _ in nodes]
    dies: list[list[int]] = [[] for _ in nodes]
    start = [index[s.name] for s in specs if s.name in index]
    for step, node in enumerate(nodes):
        born[step] = [index[n] for n in node.output if n in index]
    for name, i in index.items():
        if name in last:
            dies[last[name]].append(i)
    source = "def counts(s):\n    return [" + ", ".join(terms) + "]\n"
    scope: dict[str, Any] = {}
    exec(compile(source, "<tessera activation estimate>", "exec"), scope)  # noqa: S102
    counts: Callable[[Mapping[str, int]], list[int]] = scope["counts"]

    def peak(sizes: Mapping[str, int]) -> int:
        n = counts(sizes)
        live = peak_live = sum(n[i] for i in start)
        for step in range(len(nodes)):
            live += sum(n[i] for i in born[step])
            peak_live = max(peak_live, live)
            live -= sum(n[i] for i in dies[step])
        return 4 * peak_live
    return peak
