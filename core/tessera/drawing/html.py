"""A picture of a partitioned graph as one self-contained HTML page (inline SVG, CSS and JS).

Nodes are laid out as a layered DAG (:mod:`tessera.drawing.layout`), filled with the color of
their region's backend; each region has an outline, device copies are diamonds, nodes that fell
back are outlined in red and a legend lists each backend's device, nodes and regions. Hovering
a node shows its op, name, outputs, region, backend and device; ctrl+wheel (or the buttons)
zooms, dragging pans, the search box highlights nodes by name or op.

The page loads nothing: its policy allows only its own two scripts (by hash) and no network.
Every name is escaped; a script error or a blocked script is recorded on ``<body data-errors>``.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Sequence
from html import escape
from typing import Protocol

from tessera.drawing.dot import DrawnNode, DrawnRegion, drawing
from tessera.drawing.layout import COLUMN_GAP, Box, Layout, Step, layered_layout
from tessera.ir.graph import Function
from tessera.ir.types import human_bytes


class Report(Protocol):
    """What the page reads of a partition report
    (:class:`~tessera.partition.report.PartitionReport`): the target, the nodes that fell
    back (node, op, backend) and those a backend declined (node, op, backend, reason,
    backend that runs it)."""

    @property
    def target(self) -> str: ...

    @property
    def fallback(self) -> Sequence[tuple[str, str, str]]: ...

    @property
    def declined(self) -> Sequence[tuple[str, str, str, str, str]]: ...

#: (node fill, outline and text, region tint) per backend, in the order of the sorted backends.
PALETTE = [("#9cc9ee", "#1f5f8b", "#e6f1fb"), ("#a8dc9a", "#2f7a24", "#ebf7e7"),
           ("#f7c27a", "#9a5b00", "#fdf1df"), ("#d6aee0", "#74358a", "#f6ecf8"),
           ("#f3a59e", "#a2322a", "#fdeceb"), ("#99d9cf", "#1f7468", "#e8f6f4"),
           ("#e6d58a", "#7d6a12", "#faf6e2"), ("#b9c0f5", "#39439e", "#eef0fd")]
FALLBACK_COLOR = "#d62728"
COPY_COLOR = "#e07b00"
_NODE_H = 38.0
_MAX_W = 210.0
_PAD = 9.0
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _esc(text: object) -> str:
    """Text safe in HTML and XML content and in quoted attributes."""
    return escape(_CONTROL.sub("?", str(text)), quote=True)


def _fit(text: str, chars: int) -> str:
    """``text`` shortened in the middle to at most ``chars`` characters."""
    if len(text) <= chars:
        return text
    head = (chars - 1) // 2
    return text[:head] + "\u2026" + text[len(text) - (chars - 1 - head):]


def _text_width(text: str, size: float, bold: bool = False) -> float:
    return len(text) * size * (0.64 if bold else 0.6)


def _colors(backends: list[str]) -> dict[str, tuple[str, str, str]]:
    return {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(backends)}


def _labels(n: DrawnNode) -> tuple[str, str]:
    """The two lines drawn in a node (the second may be empty)."""
    if n.kind == "input":
        return n.name, str(n.values[0].type) if n.values else ""
    if n.kind == "output":
        return n.name, "output"
    if n.kind == "copy":
        return "copy", f"{n.src} \u2192 {n.device}"
    return n.op, n.name


def _box(n: DrawnNode) -> Box:
    first, second = _labels(n)
    chars = int((_MAX_W - 22) / 6.3)
    width = max(_text_width(_fit(first, chars), 12, True),
                _text_width(_fit(second, chars), 10.5)) + 24
    if n.kind == "copy":
        width += 40
    elif n.kind in ("input", "output"):
        width += 16
    return Box(n.id, min(max(width, 84.0), _MAX_W + (40 if n.kind == "copy" else 0)), _NODE_H,
               n.region)


def _tooltip(n: DrawnNode, fell_back: dict[str, str],
             declined: dict[str, str] | None = None) -> str:
    values = "\n".join(f"  {v.name}: {v.type}" for v in n.values)
    if n.kind == "input":
        return f"model input {n.name}\n{values.strip()}"
    if n.kind == "output":
        return f"model output {n.name}\n{values.strip()}"
    if n.kind == "copy":
        size = sum(v.type.nbytes for v in n.values)
        return (f"device copy {n.name}\nfrom {n.src} to {n.device} ({human_bytes(size)})\n"
                f"outputs:\n{values}")
    text = (f"{n.op} {n.name}\noutputs:\n{values}\nregion: {n.region}\n"
            f"backend: {n.backend}\ndevice: {n.device}")
    if n.name in fell_back:
        text += f"\nfell back: no backend of the target claimed it; runs on {fell_back[n.name]}"
    if declined and n.name in declined:
        text += f"\n{declined[n.name]}"
    return text


def _node_svg(n: DrawnNode, box: Box, color: tuple[str, str, str] | None, fallback: bool,
              tooltip: str) -> str:
    x0, y0, w, h = box.x - box.width / 2, box.y, box.width, box.height
    attrs = (f'class="node" data-id="{_esc(n.id)}" data-kind="{n.kind}" '
             f'data-name="{_esc(n.name)}" data-op="{_esc(n.op)}" data-layer="{box.layer}"')
    if n.kind == "op":
        attrs += (f' data-region="{_esc(n.region)}" data-backend="{_esc(n.backend)}" '
                  f'data-device="{_esc(n.device)}"')
    if n.kind == "copy":
        attrs += f' data-src="{_esc(n.src)}" data-dst="{_esc(n.device)}"'
    if fallback:
        attrs += ' data-fallback="1"'
    parts = [f"<g {attrs}><title>{_esc(tooltip)}</title>"]
    fill, stroke = (color[0], color[1]) if color else ("#ffffff", "#555555")
    if n.kind in ("input", "output"):
        parts.append(f'<ellipse class="shape" cx="{box.x:.1f}" cy="{y0 + h / 2:.1f}" '
                     f'rx="{w / 2:.1f}" ry="{h / 2:.1f}" fill="#ffffff" stroke="#555555"/>')
    elif n.kind == "copy":
        pts = (f"{x0:.1f},{y0 + h / 2:.1f} {box.x:.1f},{y0:.1f} {x0 + w:.1f},{y0 + h / 2:.1f} "
               f"{box.x:.1f},{y0 + h:.1f}")
        parts.append(f'<polygon class="shape copy" points="{pts}" fill="#fff4e0" '
                     f'stroke="{COPY_COLOR}" stroke-width="2"/>')
    else:
        parts.append(f'<rect class="shape" x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" '
                     f'height="{h:.1f}" rx="6" fill="{fill}" stroke="{stroke}"/>')
    if fallback:
        parts.append(f'<rect class="fallback-mark" x="{x0 - 4:.1f}" y="{y0 - 4:.1f}" '
                     f'width="{w + 8:.1f}" height="{h + 8:.1f}" rx="8" fill="none" '
                     f'stroke="{FALLBACK_COLOR}" stroke-width="2" stroke-dasharray="5 3"/>'
                     f'<circle cx="{x0 + w:.1f}" cy="{y0:.1f}" r="7" fill="{FALLBACK_COLOR}"/>'
                     f'<text class="badge" x="{x0 + w:.1f}" y="{y0 + 3.5:.1f}">!</text>')
    first, second = _labels(n)
    chars = int((w - (62 if n.kind == "copy" else 22)) / 6.3)
    text_color = stroke if color else "#222222"
    if second:
        parts.append(f'<text class="l1" x="{box.x:.1f}" y="{y0 + 16:.1f}" fill="{text_color}">'
                     f'{_esc(_fit(first, chars))}</text><text class="l2" x="{box.x:.1f}" '
                     f'y="{y0 + 30:.1f}">{_esc(_fit(second, max(chars, 6)))}</text>')
    else:
        parts.append(f'<text class="l1" x="{box.x:.1f}" y="{y0 + h / 2 + 4:.1f}" '
                     f'fill="{text_color}">{_esc(_fit(first, chars))}</text>')
    parts.append("</g>")
    return "".join(parts)


def _edge_path(piece: list[Step]) -> str:
    """Path data of one piece of a route (curves across the gaps between layers)."""
    d = []
    x0 = y0 = 0.0
    for kind, x, y in piece:
        if kind == "C":
            mid = (y0 + y) / 2
            d.append(f"C{x0:.1f},{mid:.1f} {x:.1f},{mid:.1f} {x:.1f},{y:.1f}")
        else:
            d.append(f"{kind}{x:.1f},{y:.1f}")
        x0, y0 = x, y
    return " ".join(d)


def _region_outlines(region: DrawnRegion, layout: Layout, color: tuple[str, str, str]
                     ) -> tuple[str, str]:
    """One outline per run of consecutive layers holding the region's nodes, with a label."""
    spans: dict[int, tuple[float, float]] = {}
    for n in region.nodes:
        b = layout.boxes[n.id]
        lo, hi = spans.get(b.layer, (b.x - b.width / 2, b.x + b.width / 2))
        spans[b.layer] = (min(lo, b.x - b.width / 2), max(hi, b.x + b.width / 2))
    runs: list[list[int]] = []
    for layer in sorted(spans):
        if runs and runs[-1][-1] == layer - 1 and (layout.column_of[layer]
                                                   == layout.column_of[layer - 1]):
            runs[-1].append(layer)
        else:
            runs.append([layer])
    count = len(region.nodes)
    title = (f"region {region.name}: {region.backend} on {region.device}, {count} node"
             f"{'s' if count != 1 else ''}")
    parts = [f'<g class="region" data-region="{_esc(region.name)}" '
             f'data-backend="{_esc(region.backend)}"><title>{_esc(title)}</title>']
    labels = []
    band = layout.band_height
    for k, run in enumerate(runs):
        top = [layout.band_top[i] - _PAD for i in run]
        bottom = [layout.band_top[i] + band + _PAD for i in run]
        left = [spans[i][0] - _PAD for i in run]
        right = [spans[i][1] + _PAD for i in run]
        d = [f"M{left[0]:.1f},{top[0]:.1f}"]
        for j in range(len(run)):
            d.append(f"L{right[j]:.1f},{top[j]:.1f} L{right[j]:.1f},{bottom[j]:.1f}")
        for j in range(len(run) - 1, -1, -1):
            d.append(f"L{left[j]:.1f},{bottom[j]:.1f} L{left[j]:.1f},{top[j]:.1f}")
        parts.append(f'<path class="outline" d="{" ".join(d)} Z" fill="{color[2]}" '
                     f'stroke="{color[1]}"/>')
        text = region.name if k == 0 else f"{region.name} (cont.)"
        chars = max(int((right[0] - left[0] + 40) / 6.2), 8)
        labels.append(f'<text class="region-label" x="{left[0] + 4:.1f}" y="{top[0] - 4:.1f}" '
                      f'fill="{color[1]}" data-region="{_esc(region.name)}">'
                      f'{_esc(_fit(text, chars))}</text>')
    parts.append("</g>")
    return "".join(parts), "".join(labels)


def _svg(picture_nodes: list[DrawnNode], regions: list[DrawnRegion], layout: Layout,
         edges: list[tuple[str, str]], colors: dict[str, tuple[str, str, str]],
         fell_back: dict[str, str], declined: dict[str, str] | None = None) -> str:
    kinds = {n.id: n.kind for n in picture_nodes}
    w, h = layout.width, layout.height
    out = [f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" '
           f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" data-width="{w:.0f}" '
           f'data-height="{h:.0f}" data-layers="{layout.layers}" '
           f'data-columns="{len(layout.columns)}" '
           f'data-crossings="{layout.crossings}" role="img">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#6b6b6b"/>'
           '</marker><marker id="arrow-copy" viewBox="0 0 10 10" refX="9" refY="5" '
           f'markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" '
           f'fill="{COPY_COLOR}"/></marker></defs>']
    outlines, labels = [], []
    for r in regions:
        shape, label = _region_outlines(r, layout, colors[r.backend])
        outlines.append(shape)
        labels.append(label)
    breaks = "".join(f'<line class="column-break" x1="{right + COLUMN_GAP / 2:.1f}" y1="8" '
                     f'x2="{right + COLUMN_GAP / 2:.1f}" y2="{h - 8:.1f}"/>'
                     for _, right in layout.columns[:-1])
    out.append(f'<g class="regions">{breaks}{"".join(outlines)}</g><g class="edges">')
    drawn = set(edges)
    for route in layout.routes:
        if (route.src, route.dst) not in drawn:
            continue
        copy = "copy" in (kinds.get(route.src), kinds.get(route.dst))
        cls, marker = ("edge copy-edge", "arrow-copy") if copy else ("edge", "arrow")
        for k, piece in enumerate(route.pieces):
            part = f' data-part="{k}"' if len(route.pieces) > 1 else ""
            out.append(f'<path class="{cls}" data-src="{_esc(route.src)}" '
                       f'data-dst="{_esc(route.dst)}"{part} d="{_edge_path(piece)}" '
                       f'marker-end="url(#{marker})"/>')
    out.append(f'</g><g class="region-labels">{"".join(labels)}</g><g class="nodes">')
    for n in picture_nodes:
        color = colors.get(n.backend) if n.kind == "op" else None
        fallback = n.kind == "op" and n.name in fell_back
        out.append(_node_svg(n, layout.boxes[n.id], color, fallback,
                             _tooltip(n, fell_back, declined)))
    out.append("</g></svg>")
    return "\n".join(out)


def _legend(regions: list[DrawnRegion], copies: list[DrawnNode], colors: dict[str, tuple[str,
            str, str]], fell_back: dict[str, str]) -> str:
    nodes: Counter[str] = Counter()
    count: Counter[str] = Counter()
    devices: dict[str, list[str]] = {}
    for r in regions:
        nodes[r.backend] += len(r.nodes)
        count[r.backend] += 1
        devices.setdefault(r.backend, [])
        if r.device not in devices[r.backend]:
            devices[r.backend].append(r.device)
    rows = ['<table id="legend"><tr><th></th><th>backend</th><th>device</th><th>nodes</th>'
            '<th>regions</th></tr>']
    for backend, (fill, stroke, _) in colors.items():
        rows.append(f'<tr class="legend-backend" data-backend="{_esc(backend)}" '
                    f'data-fill="{fill}"><td><span class="swatch" style="background:{fill};'
                    f'border-color:{stroke}"></span></td><td>{_esc(backend)}</td>'
                    f'<td>{_esc(", ".join(devices[backend]))}</td><td>{nodes[backend]}</td>'
                    f'<td>{count[backend]}</td></tr>')
    if copies:
        size = human_bytes(sum(v.type.nbytes for c in copies for v in c.values))
        rows.append(f'<tr class="legend-copy"><td><span class="swatch diamond"></span></td>'
                    f'<td colspan="2">device copy ({size})</td><td>{len(copies)}</td><td></td>'
                    f'</tr>')
    if fell_back:
        rows.append('<tr class="legend-fallback" title="no backend of the target claimed these '
                    'nodes"><td><span class="swatch fallback"></span></td><td colspan="2">fell '
                    f'back</td><td>{len(fell_back)}</td><td></td></tr>')
    rows.append("</table>")
    return "".join(rows)


_CSS = """
*{box-sizing:border-box}
html,body{margin:0;height:100%}
body{display:flex;flex-direction:column;font:13px system-ui,-apple-system,"Segoe UI",Roboto,
"DejaVu Sans",sans-serif;color:#222;background:#fafafa}
header{padding:10px 16px;border-bottom:1px solid #ddd;background:#fff;display:flex;gap:28px;
flex-wrap:wrap;align-items:flex-start}
h1{font-size:18px;margin:0 0 4px}
.facts{color:#444;line-height:1.5}
.facts b{color:#111}
#legend{border-collapse:collapse;font-size:12px}
#legend th{font-weight:600;text-align:left;color:#555;padding:0 8px 2px 0}
#legend td{padding:1px 8px 1px 0}
.swatch{display:inline-block;width:16px;height:12px;border:1.5px solid;border-radius:3px;
vertical-align:middle}
.swatch.diamond{width:11px;height:11px;transform:rotate(45deg);background:#fff4e0;
border-color:#e07b00;border-radius:1px}
.swatch.fallback{border:2px dashed #d62728;background:#fff}
.tools{display:flex;gap:6px;align-items:center;margin-top:6px}
.tools button{font:inherit;padding:1px 8px;border:1px solid #bbb;border-radius:4px;
background:#f4f4f4;cursor:pointer}
.tools input{font:inherit;padding:1px 6px;width:14em}
.hint{color:#777;font-size:12px}
#view{flex:1;overflow:auto;background:#fff;cursor:grab}
#view.dragging{cursor:grabbing}
#graph{display:block;margin:0 auto;user-select:none}
#graph text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
text-anchor:middle;pointer-events:none}
#graph .l1{font-size:12px;font-weight:600}
#graph .l2{font-size:10.5px;fill:#333}
#graph .badge{font-size:10px;font-weight:700;fill:#fff}
#graph .outline{stroke-width:1.5;stroke-linejoin:round}
#graph .region-label{font-size:11px;font-weight:600;text-anchor:start;paint-order:stroke;
stroke:#fff;stroke-width:3px}
#graph .edge{fill:none;stroke:#8a8a8a;stroke-width:1.2}
#graph .copy-edge{stroke:#e07b00;stroke-dasharray:5 3;stroke-width:1.5}
#graph .column-break{stroke:#d0d0d0;stroke-dasharray:2 6}
#graph .edge.hot{stroke:#111;stroke-width:2.4}
#graph .node{cursor:default}
#graph .node:hover .shape{stroke-width:2.5}
#graph.searching .node{opacity:.25}
#graph.searching .node.hit{opacity:1}
#graph .node.hit .shape{stroke:#000;stroke-width:3}
"""

_ERRORS_JS = """window.__errors=[];
function __record(m){window.__errors.push(String(m));
if(document.body){document.body.setAttribute('data-errors',window.__errors.join(' | '));}}
window.onerror=function(msg,src,line,col){__record(msg+' (line '+line+':'+col+')');return false;};
document.addEventListener('securitypolicyviolation',function(e){
__record('blocked by the page policy: '+e.violatedDirective);});"""

_JS = """(function(){
var svg=document.getElementById('graph'),view=document.getElementById('view');
var W=+svg.getAttribute('data-width'),H=+svg.getAttribute('data-height'),scale=1;
var shown=document.getElementById('zoom-level');
function zoom(s,cx,cy){s=Math.max(0.05,Math.min(4,s));
if(cx===undefined){cx=view.clientWidth/2;cy=view.clientHeight/2;}
var gx=(view.scrollLeft+cx)/scale,gy=(view.scrollTop+cy)/scale;scale=s;
svg.setAttribute('width',(W*s).toFixed(0));svg.setAttribute('height',(H*s).toFixed(0));
view.scrollLeft=gx*s-cx;view.scrollTop=gy*s-cy;shown.textContent=Math.round(s*100)+'%';}
view.addEventListener('wheel',function(e){if(!e.ctrlKey&&!e.metaKey)return;e.preventDefault();
var r=view.getBoundingClientRect();zoom(scale*Math.exp(-e.deltaY*0.002),e.clientX-r.left,
e.clientY-r.top);},{passive:false});
var drag=null;
view.addEventListener('pointerdown',function(e){if(e.button!==0)return;
drag={x:e.clientX,y:e.clientY,l:view.scrollLeft,t:view.scrollTop};view.classList.add('dragging');});
window.addEventListener('pointermove',function(e){if(!drag)return;
view.scrollLeft=drag.l-(e.clientX-drag.x);view.scrollTop=drag.t-(e.clientY-drag.y);});
window.addEventListener('pointerup',function(){drag=null;view.classList.remove('dragging');});
document.getElementById('zoom-in').addEventListener('click',function(){zoom(scale*1.25);});
document.getElementById('zoom-out').addEventListener('click',function(){zoom(scale/1.25);});
document.getElementById('zoom-reset').addEventListener('click',function(){zoom(1);});
document.getElementById('zoom-fit').addEventListener('click',function(){
zoom(Math.min(view.clientWidth/W,view.clientHeight/H),0,0);});
var edges={};
svg.querySelectorAll('.edge').forEach(function(p){
[p.getAttribute('data-src'),p.getAttribute('data-dst')].forEach(function(k){
(edges[k]=edges[k]||[]).push(p);});});
var nodes=Array.prototype.slice.call(svg.querySelectorAll('.node'));
nodes.forEach(function(g){var k=g.getAttribute('data-id');
g.addEventListener('mouseenter',function(){(edges[k]||[]).forEach(function(p){
p.classList.add('hot');});});
g.addEventListener('mouseleave',function(){(edges[k]||[]).forEach(function(p){
p.classList.remove('hot');});});});
var find=document.getElementById('find'),hits=[],at=0;
function reveal(g){var b=g.getBBox();view.scrollLeft=b.x*scale-view.clientWidth/2;
view.scrollTop=b.y*scale-view.clientHeight/2;}
find.addEventListener('input',function(){var q=find.value.trim().toLowerCase();hits=[];at=0;
nodes.forEach(function(g){var m=q!==''&&((g.getAttribute('data-name')||'').toLowerCase()
.indexOf(q)>=0||(g.getAttribute('data-op')||'').toLowerCase().indexOf(q)>=0);
g.classList.toggle('hit',m);if(m)hits.push(g);});
svg.classList.toggle('searching',q!=='');
document.getElementById('find-count').textContent=q?hits.length+' found':'';
if(hits.length)reveal(hits[0]);});
find.addEventListener('keydown',function(e){if(e.key==='Enter'&&hits.length){
at=(at+1)%hits.length;reveal(hits[at]);}});
if(W>view.clientWidth&&view.clientWidth>0){zoom(Math.max(view.clientWidth/W,0.35),0,0);}
document.body.setAttribute('data-errors',window.__errors.join(' | '));
document.body.setAttribute('data-ready','1');
})();"""


def _hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


class _Picture:
    """A partitioned graph laid out and drawn as SVG, with the facts the page's header and
    the standalone SVG's caption state."""

    def __init__(self, graph: Function, report: Report | None) -> None:
        picture = drawing(graph)
        nodes = picture.nodes()
        self.regions, self.copies = picture.regions, picture.copies
        self.colors = _colors(picture.backends())
        self.fell_back = {name: backend
                          for name, _, backend in (report.fallback if report else [])}
        edges = list(dict.fromkeys((a, b) for a, b, _ in picture.edges))
        self.layout = layered_layout([_box(n) for n in nodes], edges)
        declined = {name: f"declined by {backend}: {reason}"
                    for name, _, backend, reason, _ in (report.declined if report else [])}
        self.svg = _svg(nodes, self.regions, self.layout, edges, self.colors, self.fell_back,
                        declined)
        self.target = report.target if report else ", ".join(picture.backends())
        self.ops = sum(len(r.nodes) for r in self.regions)
        self.devices = sorted({r.device for r in self.regions} | {c.device for c in self.copies}
                              | {c.src for c in self.copies})
        self.copy_bytes = human_bytes(sum(v.type.nbytes for c in self.copies for v in c.values))
        self.inputs, self.outputs = len(picture.inputs), len(picture.outputs)

    def facts(self, bold: Callable[[object], str]) -> list[str]:
        """The header's lines (numbers through ``bold``)."""
        regions, colors, devices, copies = self.regions, self.colors, self.devices, self.copies
        return [f"target {bold(self.target)}",
                f"{bold(self.ops)} nodes in {bold(len(regions))} region"
                f"{'s' if len(regions) != 1 else ''} on {bold(len(colors))} backend"
                f"{'s' if len(colors) != 1 else ''} and {bold(len(devices))} device"
                f"{'s' if len(devices) != 1 else ''} ({_esc(', '.join(devices))}); "
                f"{bold(len(copies))} device cop{'ies' if len(copies) != 1 else 'y'}"
                f"{f' ({self.copy_bytes})' if copies else ''}; {bold(len(self.fell_back))} "
                f"fallback node{'s' if len(self.fell_back) != 1 else ''}",
                f"{self.inputs} input(s), {self.outputs} output(s), {self.layout.layers} "
                f"layers"]


def to_svg(graph: Function, *, title: str | None = None,
           report: Report | None = None) -> str:
    """The picture of :func:`to_html` as one standalone SVG file (its styles inside, a
    caption with the model's name, target and counts above the graph, each node's details in
    its ``<title>`` tooltip), for viewers and documents that show SVG but no HTML."""
    pic = _Picture(graph, report)
    name = title if title is not None else graph.name
    w, h = pic.layout.width, pic.layout.height
    caption = [f"{_esc(name)} \u2014 Tessera partition",
               *pic.facts(lambda v: f'<tspan font-weight="700">{_esc(v)}</tspan>')]
    top = 18.0 * len(caption) + 14
    width = max(w, 60 + 7.0 * max(len(re.sub(r"<[^>]+>", "", c)) for c in caption))
    lines = "".join(f'<text class="caption{" title" if i == 0 else ""}" x="12" '
                    f'y="{22 + 18 * i:.0f}">{line}</text>' for i, line in enumerate(caption))
    styles = "\n".join(line for line in _CSS.strip().splitlines()
                       if line.startswith(("#graph", "text-anchor", "stroke:#fff")))
    graph_svg = pic.svg.replace('<svg id="graph" ', f'<svg id="graph" x="0" y="{top:.0f}" ', 1)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
            f'height="{h + top:.0f}" viewBox="0 0 {width:.0f} {h + top:.0f}">\n'
            f"<title>{_esc(name)} \u2014 Tessera partition</title>\n"
            f"<style>{styles}\n.caption{{font:13px system-ui,sans-serif;fill:#333}}\n"
            f".caption.title{{font-size:16px;font-weight:700;fill:#111}}</style>\n"
            f'<rect width="100%" height="100%" fill="#ffffff"/>\n{lines}\n{graph_svg}\n'
            f"</svg>\n")


def to_html(graph: Function, *, title: str | None = None,
            report: Report | None = None) -> str:
    """A self-contained HTML page drawing a partitioned graph (see the module docstring).

    ``title`` names the model in the header (default: the graph's name); ``report`` (the
    module's partition report) gives the target, the nodes that fell back and the reasons
    backends gave for declining nodes (shown in the nodes' tooltips)."""
    pic = _Picture(graph, report)
    regions, copies, colors, fell_back = pic.regions, pic.copies, pic.colors, pic.fell_back
    svg = pic.svg
    name = title if title is not None else graph.name
    facts = "".join(f"<div>{line}</div>" for line in pic.facts(lambda v: f"<b>{_esc(v)}</b>"))
    tools = ('<div class="tools"><button id="zoom-out" type="button" title="zoom out">\u2212'
             '</button><span id="zoom-level">100%</span><button id="zoom-in" type="button" '
             'title="zoom in">+</button><button id="zoom-reset" type="button">1:1</button>'
             '<button id="zoom-fit" type="button">fit</button><input id="find" type="search" '
             'placeholder="find a node or op" aria-label="find a node or op">'
             '<span id="find-count" class="hint"></span></div>'
             '<div class="hint">hover a node for details; ctrl+wheel zooms, drag pans</div>')
    policy = (f"default-src 'none'; style-src 'unsafe-inline'; "
              f"script-src {_hash(_ERRORS_JS)} {_hash(_JS)}")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_esc(name)} \u2014 Tessera partition</title>\n"
            f"<style>{_CSS}</style>\n<script>{_ERRORS_JS}</script></head>\n"
            f'<body data-errors="">\n<header><div><h1>{_esc(name)}</h1>'
            f'<div class="facts">{facts}</div>{tools}</div>'
            f"{_legend(regions, copies, colors, fell_back)}</header>\n"
            f'<div id="view">\n{svg}\n</div>\n<script>{_JS}</script>\n</body></html>\n')
