"""Claim patterns: what a backend says it can run.

A :class:`Pattern` matches a node by op name and an optional check, and optionally the producers
of its inputs by sub-patterns, so a composite such as ``QLinearConv → Relu`` is written
``Pattern("Relu", inputs=[Pattern("QLinearConv")])``. The nodes a composite matches become one
group that stays together in one region; every value inside the group other than the root's
outputs must have no reader outside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tessera.ir.graph import Function, Node, Value

Check = Callable[[Node], bool]


class PatternCheckError(Exception):
    """A pattern's ``check`` raised on a node (a bug in the backend that declared it). The
    partitioner reports it (:func:`tessera.plugin.contract.check_failed`) and treats the pattern
    as not matching there."""

    def __init__(self, pattern: Pattern, node: Node, error: BaseException):
        super().__init__(f"check of pattern {pattern.name!r} raised {type(error).__name__}: "
                         f"{error} on node {node.name}")
        self.pattern = pattern
        self.node = node
        self.error = error


@dataclass(frozen=True)
class PatternMatch:
    """One pattern match inside a region, as ``compile`` sees it: the claimed pattern's name
    and the matched nodes, root first (the node whose outputs leave the match)."""

    pattern: str
    nodes: tuple[Node, ...]

    @property
    def root(self) -> Node:
        return self.nodes[0]


#: Key of ``Function.attrs`` under which the partitioner records a region's matches.
MATCHES_ATTR = "matches"


def record_matches(region: Function, matches: list[tuple[str, list[str]]]) -> None:
    """Store (pattern name, node names root first) pairs on a region body."""
    region.attrs[MATCHES_ATTR] = [[pattern, *names] for pattern, names in matches]


def region_matches(region: Function) -> list[PatternMatch]:
    """The pattern matches the partitioner made for ``region``, in the region's node order.

    A backend's ``compile`` uses them to find the composites it claimed (``Pattern(...,
    name="ConvRelu")``) without detecting them again; every node of the region is in exactly
    one match (a single-op pattern for the rest). Regions made before matches were recorded
    (old artifacts) give one single-op match per node, named after its op."""
    by_name = {n.name: n for n in region.nodes}
    recorded = region.attrs.get(MATCHES_ATTR)
    if not recorded:
        return [PatternMatch(n.op, (n,)) for n in region.nodes]
    out = []
    for entry in recorded:
        pattern, *names = entry
        out.append(PatternMatch(str(pattern), tuple(by_name[n] for n in names if n in by_name)))
    position = {id(n): i for i, n in enumerate(region.nodes)}
    return sorted((m for m in out if m.nodes),
                  key=lambda m: position[id(m.root)])


@dataclass(frozen=True)
class Pattern:
    """Match a node whose op is ``op`` (or one of them) and for which ``check(node)`` holds.

    ``inputs``: None matches any inputs; otherwise one entry per input, a sub-pattern that the
    producer of that input must match or None for any value.
    """

    op: str | tuple[str, ...]
    inputs: tuple[Pattern | None, ...] | None = None
    check: Check | None = field(default=None, compare=False)
    name: str = ""

    def __init__(self, op: str | Sequence[str], inputs: Sequence[Pattern | None] | None = None,
                 check: Check | None = None, name: str = ""):
        object.__setattr__(self, "op", op if isinstance(op, str) else tuple(op))
        object.__setattr__(self, "inputs", tuple(inputs) if inputs is not None else None)
        object.__setattr__(self, "check", check)
        object.__setattr__(self, "name", name or self._default_name())

    def _default_name(self) -> str:
        ops = self.op if isinstance(self.op, str) else "|".join(self.op)
        if not self.inputs:
            return ops
        inner = [p.name for p in self.inputs if p is not None]
        return f"{'+'.join(inner)}->{ops}" if inner else ops

    def ops(self) -> set[str]:
        """Every op name this pattern (and its sub-patterns) can match."""
        names = {self.op} if isinstance(self.op, str) else set(self.op)
        for sub in self.inputs or ():
            if sub is not None:
                names |= sub.ops()
        return names

    @property
    def size(self) -> int:
        """Number of nodes a match covers."""
        return 1 + sum(p.size for p in (self.inputs or ()) if p is not None)

    def _accepts(self, node: Node) -> bool:
        ok_op = node.op == self.op if isinstance(self.op, str) else node.op in self.op
        if not ok_op:
            return False
        if self.check is None:
            return True
        try:
            return bool(self.check(node))
        except Exception as e:  # noqa: BLE001 - the partitioner reports it for the backend
            raise PatternCheckError(self, node, e) from e

    def match(self, node: Node, users: dict[Value, list[tuple[Node, int]]],
              outputs: set[int] | frozenset[int] = frozenset()) -> list[Node] | None:
        """The nodes matched with ``node`` as root (root first), or None.

        ``users`` is the function's use map and ``outputs`` the ids of its output values: an
        interior node whose outputs are read outside the match (or are function outputs) cannot
        be part of it.
        """
        if not self._accepts(node):
            return None
        matched = [node]
        if self.inputs is None:
            return matched
        if len(self.inputs) > len(node.inputs):
            return None
        for sub, value in zip(self.inputs, node.inputs):
            if sub is None:
                continue
            if value is None or value.producer is None:
                return None
            producer = value.producer
            if any(id(o) in outputs for o in producer.outputs):
                return None
            inner = sub.match(producer, users, outputs)
            if inner is None:
                return None
            matched.extend(inner)
        ids = {id(n) for n in matched}
        for interior in matched[1:]:
            for out in interior.outputs:
                if any(id(user) not in ids for user, _ in users.get(out, [])):
                    return None
        if len(ids) != len(matched):
            return None
        return matched


def op(name: str | Sequence[str], check: Check | None = None) -> Pattern:
    """A single-op pattern."""
    return Pattern(name, None, check)


def ops(names: Sequence[str], check: Check | None = None) -> list[Pattern]:
    """One single-op pattern per name, sharing a check."""
    return [Pattern(n, None, check) for n in names]
