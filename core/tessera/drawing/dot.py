"""A picture of a partitioned graph: Graphviz DOT with one colored cluster per region.

``dot -Tsvg model.dot -o model.svg`` renders it (Graphviz is not a dependency; the text is
readable on its own and most viewers accept it). :func:`drawing` is what the picture shows
(nodes, regions, copies, edges), shared with the HTML picture of :mod:`tessera.drawing.html`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.ir.graph import COPY_OP, REGION_OP, Function, Value

_COLORS = ["#cfe2f3", "#d9ead3", "#fce5cd", "#ead1dc", "#fff2cc", "#d0e0e3", "#f4cccc",
           "#d9d2e9"]


@dataclass
class DrawnNode:
    """One box of the picture: a model input or output, a device copy, or a node of a region
    (``more`` stands for the nodes of a region left out)."""

    id: str
    kind: str  # "input", "output", "copy", "op" or "more"
    op: str
    name: str
    #: the region's name, backend and device (for "op" and "more"); a copy's destination device
    region: str = ""
    backend: str = ""
    device: str = ""
    #: the values it makes (for tooltips: names, shapes, dtypes)
    values: list[Value] = field(default_factory=list)
    #: a copy's source device
    src: str = ""


@dataclass
class DrawnRegion:
    """A region: its backend, device and drawn nodes (``hidden`` more were left out)."""

    name: str
    backend: str
    device: str
    nodes: list[DrawnNode] = field(default_factory=list)
    hidden: int = 0


@dataclass
class Drawing:
    """What a picture of a partitioned graph shows, in execution order."""

    inputs: list[DrawnNode] = field(default_factory=list)
    #: the top-level steps: regions and device copies, in order
    steps: list[DrawnRegion | DrawnNode] = field(default_factory=list)
    outputs: list[DrawnNode] = field(default_factory=list)
    #: (from id, to id, label): a value flowing between two drawn nodes
    edges: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def regions(self) -> list[DrawnRegion]:
        return [s for s in self.steps if isinstance(s, DrawnRegion)]

    @property
    def copies(self) -> list[DrawnNode]:
        return [s for s in self.steps if isinstance(s, DrawnNode)]

    def nodes(self) -> list[DrawnNode]:
        """Every drawn node: inputs, then each step's nodes, then outputs."""
        found = list(self.inputs)
        for s in self.steps:
            found += s.nodes if isinstance(s, DrawnRegion) else [s]
        return found + self.outputs

    def backends(self) -> list[str]:
        """The backends of the regions, sorted (the order of the colors)."""
        return sorted({r.backend for r in self.regions})


def drawing(graph: Function, max_nodes_per_region: int | None = None) -> Drawing:
    """The nodes, regions, copies and edges of a partitioned graph, as both pictures draw them:
    each region's nodes (at most ``max_nodes_per_region``, then one ``more`` node), each device
    copy, the model's inputs and outputs, and the edges between them."""
    out = Drawing()
    producer: dict[str, str] = {}
    for v in graph.inputs:
        out.inputs.append(DrawnNode(f"in_{v.name}", "input", "input", v.name, values=[v]))
        producer[v.name] = f"in_{v.name}"
    for ri, node in enumerate(graph.nodes):
        if node.op == COPY_OP:
            nid = f"copy_{ri}"
            out.steps.append(DrawnNode(nid, "copy", COPY_OP, node.name, device=node.attrs["dst"],
                                       values=list(node.outputs), src=node.attrs["src"]))
            src = node.inputs[0]
            if src is not None and src.name in producer:
                out.edges.append((producer[src.name], nid, src.name))
            producer[node.outputs[0].name] = nid
            continue
        if node.op != REGION_OP or node.body is None:
            continue
        body = node.body
        region = DrawnRegion(body.name, node.attrs.get("backend", ""),
                             node.attrs.get("device", ""))
        out.steps.append(region)
        inner: dict[str, str] = {}
        for outer, inner_v in zip(node.inputs, body.inputs):
            if outer is not None:
                inner[inner_v.name] = producer.get(outer.name, "")
        limit = len(body.nodes) if max_nodes_per_region is None else max_nodes_per_region
        for k, n in enumerate(body.nodes[:limit]):
            nid = f"{body.name}/{k}"
            region.nodes.append(DrawnNode(nid, "op", n.op, n.name, body.name, region.backend,
                                          region.device, list(n.outputs)))
            for v in n.inputs:
                if v is not None and not v.is_constant and inner.get(v.name):
                    out.edges.append((inner[v.name], nid, ""))
            for o in n.outputs:
                inner[o.name] = nid
        region.hidden = len(body.nodes) - len(region.nodes)
        if region.hidden:
            region.nodes.append(DrawnNode(f"{body.name}/more", "more", "",
                                          f"... {region.hidden} more nodes", body.name,
                                          region.backend, region.device))
        for o in node.outputs:
            producer[o.name] = inner.get(o.name, "")
    names = graph.attrs.get("output_names") or [v.name for v in graph.outputs]
    for v, name in zip(graph.outputs, names):
        oid = f"out_{name}"
        out.outputs.append(DrawnNode(oid, "output", "output", name, values=[v]))
        if producer.get(v.name):
            out.edges.append((producer[v.name], oid, ""))
    return out


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def to_dot(graph: Function, max_nodes_per_region: int = 400) -> str:
    """DOT text for a partitioned graph: regions as clusters colored by backend, copies as
    diamonds, model inputs/outputs as ellipses."""
    picture = drawing(graph, max_nodes_per_region)
    color = {b: _COLORS[i % len(_COLORS)] for i, b in enumerate(picture.backends())}
    lines = ["digraph tessera {", "  rankdir=TB;", '  node [shape=box, fontsize=10, '
             'style="rounded,filled", fillcolor=white];']
    for n in picture.inputs:
        label = _quote(f"{n.name}\n{n.values[0].type}")
        lines.append(f"  {_quote(n.id)} [shape=ellipse, label={label}];")
    for step in picture.steps:
        if isinstance(step, DrawnNode):
            label = f"copy {step.src} -> {step.device}"
            lines.append(f"  {_quote(step.id)} [shape=diamond, fillcolor=\"#eeeeee\", "
                         f"label={_quote(label)}];")
            continue
        lines.append(f"  subgraph {_quote('cluster_' + step.name)} {{")
        lines.append(f"    label={_quote(f'{step.name} [{step.backend} on {step.device}]')};")
        lines.append(f'    style=filled; fillcolor="{color.get(step.backend, "#ffffff")}";')
        for n in step.nodes:
            label = _quote(n.name if n.kind == "more" else f"{n.op}\n{n.name}")
            lines.append(f"    {_quote(n.id)} [label={label}];")
        lines.append("  }")
    for n in picture.outputs:
        lines.append(f"  {_quote(n.id)} [shape=ellipse, label={_quote(n.name)}];")
    for a, b, label in picture.edges:
        attr = f" [label={_quote(label)}]" if label else ""
        lines.append(f"  {_quote(a)} -> {_quote(b)}{attr};")
    lines.append("}")
    return "\n".join(lines) + "\n"
