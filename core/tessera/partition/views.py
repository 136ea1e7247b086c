"""Shape-only nodes follow their data.

A Reshape, Flatten, Squeeze or Unsqueeze node moves no data: it gives its input's bytes a new
shape. Claimed by priority, such a node can land on another device than the one its data lives
on, and then costs a copy to that device and usually one back: the Flatten after a CPU pooling
that an NPU claims, or the Reshape between two NPU convolutions that a backend earlier in the
target took. After the claims (:func:`~tessera.partition.partitioner.claim_groups`), each
*view tree* (the shape-only nodes that read a value computed by a node, and the shape-only
nodes that read theirs) moves to the device that value lives on when

- a backend on that device claims each of its nodes alone (a single-op pattern that matches:
  the backend that computed the value first, then the target's backends in priority order,
  then, on the host, the fallbacks), and
- the move removes device copies: fewer (value, device) pairs read away from where they live.

A view of a model input or a constant stays where the claims put it (so a backend's own node
tests, a single Reshape of an input, still run on it), as does a shape-only node inside a
composite match or one whose shape operand is computed. Every other claim keeps its place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tessera.ir.graph import Function, Node, Value
from tessera.plugin import contract
from tessera.plugin.patterns import Pattern, PatternCheckError

if TYPE_CHECKING:
    from tessera.plugin.backend import Backend
    from tessera.plugin.target import TargetKind

#: Ops that only reshape their first input: the data stays as it is, in the same bytes.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})

HOST = "cpu"

#: (node, op, backend that claimed it, backend that runs it) for each node moved.
Placed = tuple[str, str, str, str]
#: A backend that takes a node: the backend, its target kind, the pattern that matched.
_Taker = tuple["Backend", "TargetKind", str]


def place_views(fn: Function, groups: Sequence[Any],
                backends: Sequence[tuple[Backend, TargetKind]],
                fallbacks: Sequence[tuple[Backend, TargetKind]]) -> list[Placed]:
    """Move the view trees of ``fn`` to their data's device where that removes copies (see
    the module doc). ``groups`` are the claimed groups (``nodes``, ``backend``, ``kind``,
    ``pattern``), changed in place; returns what moved, in node order."""
    owner = {id(n): g for g in groups for n in g.nodes}
    users = fn.users()
    graph_out = {id(v) for v in fn.outputs}
    claims = _Claims(users, graph_out)
    seen: set[int] = set()
    moved: list[Placed] = []
    for producer in fn.nodes:
        if id(producer) in seen:
            continue
        home = owner[id(producer)]
        device = home.backend.device
        order = [(home.backend, home.kind)] + [
            pair for pair in (*backends, *(fallbacks if device == HOST else ()))
            if pair[0].device == device and pair[0] is not home.backend]
        for value in producer.outputs:
            views = _views_reading(value, owner, users)
            if all(owner[id(node)].backend.device == device for node in views):
                seen.update(id(node) for node in views)  # already with their data
                continue
            tree = _tree(value, owner, users, claims, order)
            seen.update(id(node) for node, _ in tree)
            if tree and _moves_save_copies(value, tree, device, owner, users, graph_out):
                for node, (backend, kind, pattern) in tree:
                    group = owner[id(node)]
                    if group.backend.device != device:
                        moved.append((node.name, node.op, group.backend.name, backend.name))
                        group.backend, group.kind, group.pattern = backend, kind, pattern
    position = {n.name: i for i, n in enumerate(fn.nodes)}
    return sorted(moved, key=lambda m: position[m[0]])


def is_view(node: Node, owner: dict[int, Any]) -> bool:
    """A shape-only node that may move alone: one of :data:`VIEW_OPS`, claimed alone (not
    inside a composite), its data computed by a node and its other operands constants."""
    if node.op not in VIEW_OPS or len(node.outputs) != 1 or len(owner[id(node)].nodes) != 1:
        return False
    data, *rest = node.inputs
    return (data is not None and not data.is_constant and data.producer is not None
            and all(v is None or v.is_constant for v in rest))


def _walk(value: Value, owner: dict[int, Any], users: dict[Value, list[tuple[Node, int]]],
          take: Callable[[Node], _Taker | None] | None) -> list[tuple[Node, _Taker | None]]:
    """The views reading ``value`` as their data and, transitively, each other's outputs,
    each with ``take(node)``; given a ``take``, only the views it takes (and those reading
    theirs)."""
    out: list[tuple[Node, _Taker | None]] = []
    stack = [value]
    while stack:
        for node, index in users.get(stack.pop(), []):
            if index != 0 or not is_view(node, owner):
                continue
            took = take(node) if take is not None else None
            if take is None or took is not None:
                out.append((node, took))
                stack.append(node.outputs[0])
    return out


def _views_reading(value: Value, owner: dict[int, Any],
                   users: dict[Value, list[tuple[Node, int]]]) -> list[Node]:
    """The views reading ``value`` as their data and, transitively, each other's outputs."""
    return [node for node, _ in _walk(value, owner, users, None)]


def _tree(value: Value, owner: dict[int, Any], users: dict[Value, list[tuple[Node, int]]],
          claims: _Claims, order: Sequence[tuple[Backend, TargetKind]]
          ) -> list[tuple[Node, _Taker]]:
    """The views reading ``value`` (as their data) and, transitively, each other's outputs,
    that a backend of ``order`` (those on the value's device) takes, with the one that would."""
    return [(node, took) for node, took in
            _walk(value, owner, users, lambda node: claims.taker(node, order))
            if took is not None]


def _moves_save_copies(value: Value, tree: list[tuple[Node, _Taker]], device: str,
                       owner: dict[int, Any], users: dict[Value, list[tuple[Node, int]]],
                       graph_out: set[int]) -> bool:
    """Whether running every node of ``tree`` on ``device`` needs fewer device copies of the
    values involved (``value`` and the tree's outputs) than where they are now."""
    inside = {id(node) for node, _ in tree}
    values = [value] + [node.outputs[0] for node, _ in tree]

    def copies(device_of: Callable[[Node], str]) -> int:
        total = 0
        for v in values:
            assert v.producer is not None
            readers = {device_of(u) for u, _ in users.get(v, [])}
            if id(v) in graph_out:
                readers.add(HOST)
            readers.discard(device_of(v.producer))
            total += len(readers)
        return total

    def now(node: Node) -> str:
        return owner[id(node)].backend.device

    def after(node: Node) -> str:
        return device if id(node) in inside else now(node)

    return copies(after) < copies(now)


class _Claims:
    """Which backend takes a node alone, each backend's patterns asked for once."""

    def __init__(self, users: dict[Value, list[tuple[Node, int]]], graph_out: set[int]):
        self._users = users
        self._graph_out = graph_out
        self._patterns: dict[int, list[tuple[set[str], Pattern]]] = {}

    def taker(self, node: Node, order: Sequence[tuple[Backend, TargetKind]]) -> _Taker | None:
        """The first of ``order`` with a pattern that matches ``node`` alone."""
        for backend, kind in order:
            for ops, pattern in self._of(backend, kind):
                if node.op not in ops:
                    continue
                try:
                    matched = pattern.match(node, self._users, self._graph_out)
                except PatternCheckError as e:
                    contract.check_failed(backend, e.pattern, e.node, e.error)
                    continue
                if matched is not None and len(matched) == 1 and matched[0] is node:
                    return backend, kind, pattern.name
        return None

    def _of(self, backend: Backend, kind: TargetKind) -> list[tuple[set[str], Pattern]]:
        key = id(backend)
        if key not in self._patterns:
            claimed = contract.call(backend, "claims()", backend.claims, kind)
            self._patterns[key] = [(p.ops(), p) for p in contract.check_claims(backend, claimed)]
        return self._patterns[key]
