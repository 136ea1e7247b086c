"""What every graph pass builds on: the :class:`Pass` base class, and :class:`Rewriter` and
:func:`take_name`, the graph-editing helpers the rewriting passes share."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tessera.ir.graph import Function, Node, Value


class Pass:
    """Base class of graph passes.

    Subclasses set ``name`` (defaults to the class name) and ``opt_level`` (the lowest optimization
    level that runs the pass) and implement :meth:`run`.
    """

    name: str = ""
    opt_level: int = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name"):
            cls.name = cls.__name__

    def run(self, fn: Function) -> Function:
        """Transform ``fn`` (in place is fine) and return the result."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} (opt_level >= {self.opt_level})>"


class Rewriter:
    """Edits one function while keeping track of who reads each value.

    Rewriting passes walk the nodes in order and ask "is this value read once?" at every step;
    recounting the whole graph each time would make them quadratic. A Rewriter keeps the
    readers of every value up to date through its edits:

    * :meth:`add` appends a type-checked node (``finish`` puts it in topological order),
    * :meth:`set_input` changes one input of a node,
    * :meth:`replace` makes every reader of a value (nodes and function outputs) read another,
    * :meth:`remove` drops a node and :meth:`remove_if_unused` drops nodes nobody reads,
    * :meth:`finish` applies the removals and sorts the nodes.

    Changes made to ``node.inputs`` directly are not tracked (fine for constants, whose reader
    counts passes do not ask for).
    """

    def __init__(self, fn: Function):
        self.fn = fn
        self._readers: dict[Value, list[tuple[Node, int]]] = {}
        self._dead: set[int] = set()
        for node in fn.nodes:
            self._track(node)

    def _track(self, node: Node) -> None:
        for i, v in enumerate(node.inputs):
            if v is not None:
                self._readers.setdefault(v, []).append((node, i))

    def _untrack(self, node: Node) -> None:
        for i, v in enumerate(node.inputs):
            if v is not None:
                readers = self._readers.get(v, [])
                self._readers[v] = [(n, j) for n, j in readers if not (n is node and j == i)]

    def count(self, v: Value) -> int:
        """How many times ``v`` is read: node inputs plus function outputs."""
        return len(self._readers.get(v, ())) + sum(1 for o in self.fn.outputs if o is v)

    def readers(self, v: Value) -> list[Node]:
        """The nodes that read ``v`` (once per input that reads it)."""
        return [n for n, _ in self._readers.get(v, ())]

    def add(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any] | None = None,
            name: str | None = None) -> Node:
        """Append a one-output node, type-checked through the registry."""
        node = self.fn.add_node(op, inputs, attrs or {}, name=name, num_outputs=1)
        self._track(node)
        return node

    def set_input(self, node: Node, i: int, v: Value | None) -> None:
        old = node.inputs[i]
        if old is not None:
            self._readers[old] = [(n, j) for n, j in self._readers.get(old, [])
                                  if not (n is node and j == i)]
        node.inputs[i] = v
        if v is not None:
            self._readers.setdefault(v, []).append((node, i))

    def replace(self, old: Value, new: Value) -> None:
        """Make every reader of ``old`` (nodes and function outputs) read ``new``."""
        if old is new:
            return
        moved = self._readers.pop(old, [])
        for node, i in moved:
            node.inputs[i] = new
        self._readers.setdefault(new, []).extend(moved)
        if any(o is old for o in self.fn.outputs):
            self.fn.outputs = [new if o is old else o for o in self.fn.outputs]

    def remove(self, node: Node) -> None:
        """Drop ``node`` (its outputs should no longer be read)."""
        if id(node) not in self._dead:
            self._dead.add(id(node))
            self._untrack(node)

    def is_removed(self, node: Node) -> bool:
        return id(node) in self._dead

    def remove_if_unused(self, nodes: Iterable[Node]) -> None:
        """Drop those of ``nodes`` whose outputs nobody reads, then their producers that become
        unread in turn: what a rewrite bypassed, not every dead node of the function."""
        work = list(nodes)
        while work:
            node = work.pop()
            if id(node) in self._dead or any(self.count(o) for o in node.outputs):
                continue
            self.remove(node)
            work.extend(v.producer for v in node.inputs
                        if v is not None and v.producer is not None and not self.count(v))

    def finish(self) -> Function:
        """Apply the removals and restore topological order; returns the function."""
        if self._dead:
            self.fn.nodes = [n for n in self.fn.nodes if id(n) not in self._dead]
            self._dead.clear()
        self.fn.topo_sort()
        return self.fn


def take_name(fn: Function, new: Value, old: Value) -> None:
    """Let the node output ``new`` carry the name of ``old``, which is leaving the graph (``old``
    is renamed out of the way). Graph inputs and constants keep their own names."""
    if new.producer is None or new is old:
        return
    name = old.name
    old.name = fn.fresh_name(f"{name}_dead")
    new.name = name
