"""A picture of a partitioned graph: Graphviz DOT with one colored cluster per region.

``dot -Tsvg model.dot -o model.svg`` renders it (Graphviz is not a dependency; the text is
readable on its own and most viewers accept it).
"""

from __future__ import annotations

from tessera.ir.graph import Function
from tessera.partition.partitioner import COPY_OP, REGION_OP

_COLORS = ["#cfe2f3", "#d9ead3", "#fce5cd", "#ead1dc", "#fff2cc", "#d0e0e3", "#f4cccc",
           "#d9d2e9"]


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def to_dot(graph: Function, max_nodes_per_region: int = 400) -> str:
    """DOT text for a partitioned graph: regions as clusters colored by backend, copies as
    diamonds, model inputs/outputs as ellipses."""
    backends = sorted({n.attrs.get("backend", "") for n in graph.nodes if n.op == REGION_OP})
    color = {b: _COLORS[i % len(_COLORS)] for i, b in enumerate(backends)}
    lines = ["digraph tessera {", "  rankdir=TB;", '  node [shape=box, fontsize=10, '
             'style="rounded,filled", fillcolor=white];']
    producer: dict[str, str] = {}
    for v in graph.inputs:
        vid = f"in_{v.name}"
        label = _quote(f"{v.name}\n{v.type}")
        lines.append(f"  {_quote(vid)} [shape=ellipse, label={label}];")
        producer[v.name] = vid
    edges: list[tuple[str, str, str]] = []
    for ri, node in enumerate(graph.nodes):
        if node.op == COPY_OP:
            nid = f"copy_{ri}"
            label = f"copy {node.attrs['src']} -> {node.attrs['dst']}"
            lines.append(f"  {_quote(nid)} [shape=diamond, fillcolor=\"#eeeeee\", "
                         f"label={_quote(label)}];")
            src = node.inputs[0]
            if src is not None and src.name in producer:
                edges.append((producer[src.name], nid, src.name))
            producer[node.outputs[0].name] = nid
            continue
        if node.op != REGION_OP or node.body is None:
            continue
        body = node.body
        backend = node.attrs.get("backend", "")
        lines.append(f"  subgraph {_quote('cluster_' + body.name)} {{")
        device = node.attrs.get("device", "")
        lines.append(f"    label={_quote(f'{body.name} [{backend} on {device}]')};")
        lines.append(f'    style=filled; fillcolor="{color.get(backend, "#ffffff")}";')
        inner: dict[str, str] = {}
        for outer, inner_v in zip(node.inputs, body.inputs):
            if outer is not None:
                inner[inner_v.name] = producer.get(outer.name, "")
        shown = body.nodes[:max_nodes_per_region]
        for k, n in enumerate(shown):
            nid = f"{body.name}/{k}"
            label = _quote(f"{n.op}\n{n.name}")
            lines.append(f"    {_quote(nid)} [label={label}];")
            for v in n.inputs:
                if v is not None and not v.is_constant and inner.get(v.name):
                    edges.append((inner[v.name], nid, ""))
            for o in n.outputs:
                inner[o.name] = nid
        if len(body.nodes) > len(shown):
            more = _quote(f"... {len(body.nodes) - len(shown)} more nodes")
            lines.append(f"    {_quote(body.name + '/more')} [label={more}];")
        lines.append("  }")
        for o in node.outputs:
            producer[o.name] = inner.get(o.name, "")
    names = graph.attrs.get("output_names") or [v.name for v in graph.outputs]
    for v, name in zip(graph.outputs, names):
        oid = f"out_{name}"
        lines.append(f"  {_quote(oid)} [shape=ellipse, label={_quote(name)}];")
        if producer.get(v.name):
            edges.append((producer[v.name], oid, ""))
    for a, b, label in edges:
        attr = f" [label={_quote(label)}]" if label else ""
        lines.append(f"  {_quote(a)} -> {_quote(b)}{attr};")
    lines.append("}")
    return "\n".join(lines) + "\n"
