"""Partition a function into regions, one backend each, with device copies between devices.

1. Claims: backends in target priority order take the nodes their patterns match (largest
   patterns first); a match is a group that stays together.
2. Fallback: nodes no backend claimed go to the fallback backend and are reported.
   Shape-only nodes (Reshape, Flatten, Squeeze, Unsqueeze) then move to the device their data
   lives on where a backend there claims them and that removes copies
   (:mod:`tessera.partition.views`); the report lists them.
3. Merging: groups are visited in topological order and join a region of the same backend that
   feeds them, unless that would create a cycle between regions (another region on a path from
   the candidate region to the group).
4. Regions become ``Region`` nodes whose ``body`` is a function; a value read on another device
   than the one it lives on goes through one explicit ``DeviceCopy`` node per (value, device).

The result is a :class:`~tessera.partition.regions.PartitionedGraph`: the graph and, as typed
fields, each region's backend, target kind, device, matches, inputs and outputs and each copy's
devices. The graph carries the same facts as attributes (a region body's ``backend``,
``device``, ``target`` and ``matches``; a region node's ``backend`` and ``device``; a copy's
``src`` and ``dst``) for the readers that see only the graph: backends, through the contract's
``region_matches`` and ``kind_of_region``, the drawings, and an artifact's ``graph.json``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tessera.errors import PartitionError, TesseraError
from tessera.ir.graph import COPY_OP, REGION_OP, Function, Node, Value
from tessera.ir.symbolic import dim_str
from tessera.ir.types import TensorType
from tessera.partition.regions import DeviceCopy, PartitionedGraph, Region
from tessera.partition.report import CopyInfo, PartitionReport, RegionInfo
from tessera.partition.views import place_views
from tessera.plugin import contract
from tessera.plugin.patterns import PatternCheckError, record_matches

if TYPE_CHECKING:
    from tessera.plugin.backend import Backend
    from tessera.plugin.target import TargetKind

HOST = "cpu"
# REGION_OP and COPY_OP are defined by the IR (tessera.ir.graph) and importable from here.


@dataclass
class _Group:
    nodes: list[Node]
    backend: Backend
    kind: TargetKind
    pattern: str
    index: int = 0
    region: _Region | None = None
    root: Node | None = None


@dataclass
class _Region:
    backend: Backend
    kind: TargetKind
    groups: list[_Group] = field(default_factory=list)
    #: regions this one reads from directly
    deps: list[_Region] = field(default_factory=list)


def claim_groups(fn: Function, backends: list[tuple[Backend, TargetKind]],
                 fallback: tuple[Backend, TargetKind] | list[tuple[Backend, TargetKind]]
                 ) -> tuple[list[_Group], list[Node]]:
    """Assign every node to a group; return the groups and the nodes that fell back.

    ``fallback`` is one backend or a list tried in order for the nodes no backend of the
    target claims (the best installed CPU backend, then ``ref``)."""
    users = fn.users()
    out_ids = {id(v) for v in fn.outputs}
    by_op: dict[str, list[Node]] = defaultdict(list)
    for node in fn.nodes:
        by_op[node.op].append(node)
    owner: dict[int, _Group] = {}
    groups: list[_Group] = []

    def claim(backend: Backend, kind: TargetKind) -> None:
        claimed = contract.call(backend, "claims()", backend.claims, kind)
        patterns = sorted(contract.check_claims(backend, claimed), key=lambda p: -p.size)
        for pattern in patterns:
            roots = [pattern.op] if isinstance(pattern.op, str) else list(pattern.op)
            for root_op in roots:
                for node in by_op.get(root_op, ()):
                    if id(node) in owner:
                        continue
                    try:
                        matched = pattern.match(node, users, out_ids)
                    except PatternCheckError as e:
                        contract.check_failed(backend, e.pattern, e.node, e.error)
                        continue
                    if matched is None or any(id(n) in owner for n in matched):
                        continue
                    group = _Group(matched, backend, kind, pattern.name)
                    groups.append(group)
                    for n in matched:
                        owner[id(n)] = group

    for backend, kind in backends:
        claim(backend, kind)
    fell_back = [n for n in fn.nodes if id(n) not in owner]
    fallbacks = fallback if isinstance(fallback, list) else [fallback]
    if fell_back:
        for backend, kind in fallbacks:
            claim(backend, kind)
    for node in fell_back:
        if id(node) not in owner:
            names = ", ".join(repr(b.name) for b, _ in fallbacks)
            raise PartitionError(f"node {node.name} ({node.op}) is claimed by no backend of the "
                                 f"target and the fallback backend(s) {names} cannot run it "
                                 f"either")
    # order groups by their root's (last node's) position; a group is contiguous in dependency
    position = {id(n): i for i, n in enumerate(fn.nodes)}
    for g in groups:
        root = g.nodes[0]  # as matched: root first
        g.nodes.sort(key=lambda n: position[id(n)])
        g.root = root
        g.index = position[id(g.nodes[-1])]
    groups.sort(key=lambda g: g.index)
    return groups, fell_back


def _group_order(groups: list[_Group]) -> list[_Group]:
    """Groups in a topological order of the contracted graph."""
    owner = {id(n): g for g in groups for n in g.nodes}
    deps: dict[int, set[int]] = {}
    for g in groups:
        d: set[int] = set()
        for n in g.nodes:
            for v in n.inputs:
                if v is not None and v.producer is not None:
                    p = owner.get(id(v.producer))
                    if p is not None and p is not g:
                        d.add(id(p))
        deps[id(g)] = d
    order: list[_Group] = []
    done: set[int] = set()
    remaining = list(groups)
    while remaining:
        progressed = []
        rest = []
        for g in remaining:
            if deps[id(g)] <= done:
                progressed.append(g)
            else:
                rest.append(g)
        if not progressed:
            names = ", ".join(n.name for g in rest[:3] for n in g.nodes[:1])
            raise PartitionError(f"claimed groups form a cycle (near {names})")
        for g in progressed:
            done.add(id(g))
            order.append(g)
        remaining = rest
    return order


def _depends_on(start: _Region, target: _Region) -> bool:
    """Whether ``start`` reads, directly or through other regions, from ``target``."""
    stack = [start]
    seen: set[int] = set()
    while stack:
        r = stack.pop()
        if r is target:
            return True
        if id(r) in seen:
            continue
        seen.add(id(r))
        stack.extend(r.deps)
    return False


def merge_regions(groups: list[_Group]) -> list[_Region]:
    """Merge groups into regions of one backend without creating cycles between regions."""
    owner = {id(n): g for g in groups for n in g.nodes}
    regions: list[_Region] = []
    for g in _group_order(groups):
        preds: list[_Region] = []
        for n in g.nodes:
            for v in n.inputs:
                if v is None or v.producer is None:
                    continue
                pg = owner.get(id(v.producer))
                if pg is None or pg is g or pg.region is None:
                    continue
                if all(pg.region is not r for r in preds):
                    preds.append(pg.region)
        target: _Region | None = None
        for cand in preds:
            if cand.backend is not g.backend or cand.kind != g.kind:
                continue
            # merging is safe iff no other predecessor region depends on the candidate
            if all(p is cand or not _depends_on(p, cand) for p in preds):
                target = cand
                break
        if target is None and not preds and regions:
            # a group that reads no other group's value goes to a region of its backend
            # rather than starting one of its own (it adds no dependency, its readers may then
            # join that region, and one region is one bound kernel sequence per run): one
            # computed from sizes and constants alone (Range, ShapeValues in a symbolic graph)
            # to the latest region of its backend; one that reads graph inputs (an embedding
            # lookup, a mask made from the attention mask) only to the last region of all, so
            # that another backend's readers of it wait for nothing more than before
            last = regions[-1]
            if _reads_no_tensor(g):
                target = next((r for r in reversed(regions)
                               if r.backend is g.backend and r.kind == g.kind), None)
            elif last.backend is g.backend and last.kind == g.kind:
                target = last
        if target is None:
            target = _Region(g.backend, g.kind)
            regions.append(target)
        for p in preds:
            if p is not target and all(p is not d for d in target.deps):
                target.deps.append(p)
        target.groups.append(g)
        g.region = target
    return regions


def _reads_no_tensor(g: _Group) -> bool:
    """Whether ``g``'s nodes read only constants and each other (no graph input, no value of
    another group)."""
    inside = {id(n) for n in g.nodes}
    return all(v is None or v.data is not None or
               (v.producer is not None and id(v.producer) in inside)
               for n in g.nodes for v in n.inputs)


#: The partitioner's result (the name it had before the typed regions).
PartitionResult = PartitionedGraph


def partition(fn: Function, backends: list[tuple[Backend, TargetKind]],
              fallback: tuple[Backend, TargetKind] | list[tuple[Backend, TargetKind]],
              target_text: str = "") -> PartitionedGraph:
    """Partition ``fn`` for ``backends`` (priority order); see the module docstring."""
    groups, fell_back = claim_groups(fn, backends, fallback)
    fallbacks = fallback if isinstance(fallback, list) else [fallback]
    placed = place_views(fn, groups, backends, fallbacks)
    regions = merge_regions(groups)
    report = PartitionReport(target_text or ", ".join(str(k) for _, k in backends))
    group_of = {id(n): g for g in groups for n in g.nodes}
    moved = {name for name, *_ in placed}
    report.fallback = [(n.name, n.op, group_of[id(n)].backend.name) for n in fell_back
                       if n.name not in moved]
    report.placed = placed
    report.declined = [d for d in declined_nodes(fn, backends, group_of) if d[0] not in moved]
    steps: list[Region | DeviceCopy] = []

    region_of: dict[int, int] = {}
    for ri, r in enumerate(regions):
        for g in r.groups:
            for n in g.nodes:
                region_of[id(n)] = ri
    position = {id(n): i for i, n in enumerate(fn.nodes)}
    region_nodes = [sorted((n for g in r.groups for n in g.nodes), key=lambda n: position[id(n)])
                    for r in regions]
    users = fn.users()
    graph_out = {id(v) for v in fn.outputs}

    top = Function(fn.name, dict(fn.attrs))
    for v in fn.inputs:
        top.add_input(v.name, v.type)
    top_inputs = {v.name: tv for v, tv in zip(fn.inputs, top.inputs)}
    # where each value lives: (top-level value, device)
    home: dict[int, tuple[Value, str]] = {id(v): (top_inputs[v.name], HOST) for v in fn.inputs}
    copies: dict[tuple[int, str], Value] = {}

    def on_device(v: Value, device: str) -> Value:
        """The top-level value holding ``v`` on ``device`` (adding a copy when needed)."""
        if v.is_constant:
            return v
        tv, dev = home[id(v)]
        if dev == device:
            return tv
        key = (id(v), device)
        if key not in copies:
            out = Value(top.fresh_name(f"{v.name}@{device}"), v.type)
            name = top.fresh_node_name(f"copy_{v.name}_to_{device}")
            top.append(Node(COPY_OP, name, [tv], [out], {"src": dev, "dst": device}))
            steps.append(DeviceCopy(name, tv.name, out.name, out.type, dev, device))
            copies[key] = out
            report.copies.append(CopyInfo(v.name, dev, device, _copy_bytes(v.type, fn)))
        return copies[key]

    # regions in dependency order: a region runs after every region it reads from
    order = _region_order(region_nodes, region_of)
    for ri in order:
        r = regions[ri]
        nodes = region_nodes[ri]
        device = r.backend.device
        inside = {id(n) for n in nodes}
        body = Function(f"region{len(report.regions)}_{r.backend.name}",
                        {"backend": r.backend.name, "device": device,
                         "target": str(r.kind)})
        if fn.attrs.get("dim_bounds"):  # the size variables' ranges, for symbolic regions
            body.attrs["dim_bounds"] = dict(fn.attrs["dim_bounds"])
        mapping: dict[int, Value] = {}
        outer_inputs: list[Value] = []
        for n in nodes:
            for v in n.inputs:
                if v is None or v.is_constant or id(v) in mapping:
                    continue
                if v.producer is not None and id(v.producer) in inside:
                    continue
                outer = on_device(v, device)
                mapping[id(v)] = body.add_input(outer.name, v.type)
                outer_inputs.append(outer)
        for n in nodes:
            outs = [Value(o.name, o.type) for o in n.outputs]
            for o, new in zip(n.outputs, outs):
                mapping[id(o)] = new
            body.append(Node(n.op, n.name, [mapping.get(id(v), v) if v is not None else None
                                            for v in n.inputs], outs, dict(n.attrs)))
        escaping: list[Value] = []
        for n in nodes:
            for o in n.outputs:
                external = id(o) in graph_out or any(
                    id(u) not in inside for u, _ in users.get(o, []))
                if external:
                    escaping.append(o)
        body.outputs = [mapping[id(o)] for o in escaping]
        matches = [(g.pattern, [n.name for n in _root_first(g)]) for g in r.groups]
        record_matches(body, matches)
        region_outs = [Value(o.name, o.type) for o in escaping]
        rnode = Node(REGION_OP, top.fresh_node_name(body.name), outer_inputs, region_outs,
                     {"backend": r.backend.name, "device": device}, body)
        top.append(rnode)
        steps.append(Region(body.name, body, r.backend.name, r.kind, device,
                            tuple((p, tuple(names)) for p, names in matches),
                            tuple(v.name for v in outer_inputs),
                            tuple(v.name for v in region_outs), rnode))
        for o, ro in zip(escaping, region_outs):
            home[id(o)] = (ro, device)
        report.regions.append(RegionInfo(body.name, r.backend.name, device,
                                         [n.name for n in nodes], [n.op for n in nodes],
                                         [v.name for v in outer_inputs],
                                         [v.name for v in region_outs]))
    top.outputs = [on_device(v, HOST) if not v.is_constant else v for v in fn.outputs]
    return PartitionedGraph(top, steps, report)


def _copy_bytes(t: TensorType, fn: Function) -> int | str:
    """The bytes a device copy of type ``t`` moves: a symbolic type's at the size variables'
    upper bounds (``dim_bounds``: the planned buffer the runtime copies), or its size
    expression's text where a variable has no bound (the report stays plain data)."""
    if t.is_static:
        return int(t.nbytes)
    try:
        return int(t.upper_bound(fn.attrs.get("dim_bounds") or {}).nbytes)
    except TesseraError:
        return dim_str(t.nbytes)


def declined_nodes(fn: Function, backends: list[tuple[Backend, TargetKind]],
                   group_of: dict[int, _Group]) -> list[tuple[str, str, str, str, str]]:
    """(node, op, backend, reason, backend that runs it) for each node that a backend earlier
    in the target left to a later one although its patterns name the node's op, with the
    reason it gives (:meth:`Backend.declines`; nodes it gives none for are not listed)."""
    claimed_ops = []
    for backend, kind in backends:
        patterns = contract.call(backend, "claims()", backend.claims, kind)
        claimed_ops.append(set().union(*(p.ops() for p in patterns)) if patterns else set())
    out = []
    for node in fn.nodes:
        owner = group_of[id(node)].backend
        for (backend, kind), ops in zip(backends, claimed_ops):
            if backend is owner:
                break
            if node.op not in ops:
                continue
            reason = contract.call(backend, "declines()", backend.declines, node, kind)
            if reason:
                out.append((node.name, node.op, backend.name, str(reason), owner.name))
                break
    return out


def _root_first(group: _Group) -> list[Node]:
    root = group.root if group.root is not None else group.nodes[-1]
    return [root] + [n for n in group.nodes if n is not root]


def _region_order(region_nodes: list[list[Node]], region_of: dict[int, int]) -> list[int]:
    deps: list[set[int]] = []
    for ri, nodes in enumerate(region_nodes):
        d: set[int] = set()
        for n in nodes:
            for v in n.inputs:
                if v is not None and v.producer is not None:
                    pr = region_of.get(id(v.producer))
                    if pr is not None and pr != ri:
                        d.add(pr)
        deps.append(d)
    order: list[int] = []
    done: set[int] = set()
    pending = list(range(len(region_nodes)))
    while pending:
        ready = [r for r in pending if deps[r] <= done]
        if not ready:
            raise PartitionError("regions depend on each other in a cycle (partitioner bug)")
        for r in ready:
            done.add(r)
            order.append(r)
        pending = [r for r in pending if r not in done]
    return order
