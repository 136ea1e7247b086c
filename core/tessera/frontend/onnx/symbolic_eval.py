"""Symbolic sizes evaluated: Python source of TIR integer expressions (a split plan writes
the contents of shape values with it), and the check of relations between sizes that a
dynamic module calls, generated once and called once per run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tessera.frontend.onnx.symbolic_shapes import Relation
from tessera.tir import expr as E
from tessera.tir.functor import post_order_visit

__all__ = ["bounds_conflicts", "relations_check", "relations_source", "source_check",
           "to_python", "uses_any_var", "variables_of"]


def variables_of(e: E.PrimExpr) -> set[str]:
    """The names of the variables an expression reads."""
    names: set[str] = set()
    post_order_visit(e, lambda n: names.add(n.name) if isinstance(n, E.Var) else None)
    return names


def bounds_conflicts(relations: Sequence[Relation],
                     bounds: Mapping[str, tuple[int, int]]) -> list[str]:
    """The relations that sizes allowed by ``bounds`` break, each with the first such sizes:
    every relation over bounded variables only, checked at each corner of their bounds
    (``dim_bounds`` that admit sizes the model cannot take)."""
    found = []
    for relation in relations:
        names = sorted(variables_of(relation.condition))
        if not names or any(n not in bounds for n in names) or len(names) > 4:
            continue
        check = relations_check([relation])
        if check is None:
            continue
        for corner in itertools.product(*(bounds[n] for n in names)):
            broken = check(dict(zip(names, corner)))
            if broken is not None:
                found.append(broken)
                break
    return found


def uses_any_var(e: E.PrimExpr) -> bool:
    """Whether an expression reads a variable."""
    return bool(variables_of(e))


def to_python(e: E.PrimExpr) -> str:
    """An integer expression as Python source over the variables (by name in ``s``); raises
    ``TypeError`` for a node it does not write."""
    if isinstance(e, E.IntImm):
        return str(int(e.value))
    if isinstance(e, E.Var):
        return f"s[{e.name!r}]"
    if isinstance(e, E.Min | E.Max):
        return f"{e.symbol}({to_python(e.a)}, {to_python(e.b)})"
    if isinstance(e, E.And | E.Or):
        return f"({to_python(e.a)} {'and' if isinstance(e, E.And) else 'or'} {to_python(e.b)})"
    if isinstance(e, E.BinaryOp) and not isinstance(e, E.Div):  # +, //, %, ==, <, ...
        return f"({to_python(e.a)} {e.symbol} {to_python(e.b)})"
    if isinstance(e, E.Not):
        return f"(not {to_python(e.a)})"
    if isinstance(e, E.Select):
        return (f"({to_python(e.true_value)} if {to_python(e.condition)} else "
                f"{to_python(e.false_value)})")
    if isinstance(e, E.Cast):
        return f"int({to_python(e.value)})"
    raise TypeError(f"no Python form for {type(e).__name__}")


def relations_source(relations: Sequence[Relation]) -> list[dict[str, Any]]:
    """The relations as plain data a module keeps (and an artifact stores): per relation its
    condition as Python source over the sizes (``check``), its node and text, and the sizes
    an error shows (``[text, source]`` pairs). Relations it cannot write are left out."""
    out = []
    for r in relations:
        try:
            out.append({"check": to_python(r.condition), "node": r.node, "text": r.text,
                        "sizes": [[str(e), to_python(e)] for e in r.sizes if uses_any_var(e)]})
        except TypeError:
            continue
    return out


def source_check(items: Sequence[Mapping[str, Any]]
                 ) -> Callable[[Mapping[str, int]], str | None] | None:
    """One function of the variables' sizes that returns None when every relation of
    ``items`` (:func:`relations_source`) holds, else a message naming the first broken one
    (its node, what it needs, the sizes it got); None when there is nothing to check."""
    if not items:
        return None
    lines = ["def check(s):"]
    for i, item in enumerate(items):
        lines.append(f"    if not {item['check']}:")
        lines.append(f"        return {i}")
    lines.append("    return None")
    scope: dict[str, Any] = {}
    exec(compile("\n".join(lines), "<tessera size relations>", "exec"), scope)  # noqa: S102
    check = scope["check"]

    def run(sizes: Mapping[str, int]) -> str | None:
        broken = check(sizes)
        if broken is None:
            return None
        item = items[broken]
        got = ", ".join(f"{text} = {eval(src, {'s': sizes})}"  # noqa: S307
                        for text, src in item["sizes"])
        return f"node {item['node']}: {item['text']}; here {got}"
    return run


def relations_check(relations: Sequence[Relation]
                    ) -> Callable[[Mapping[str, int]], str | None] | None:
    """:func:`source_check` of the relations."""
    return source_check(relations_source(relations))
