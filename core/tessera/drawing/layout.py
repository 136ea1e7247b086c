"""A layered drawing of a DAG, computed in Python (no Graphviz): the layout of the HTML picture.

1. Layers: longest path from the sources (a source sits just above its first user).
2. An edge spanning several layers goes through one dummy point per layer it crosses; the long
   edges of one source share their dummies (one lane that branches off at each user).
3. Order within a layer: barycenter sweeps down and up, keeping the ordering with the fewest
   crossings; boxes of one group (a region) stay side by side in every layer.
4. x: each box moves toward the mean x of its neighbours, the order and the gaps kept by a
   weighted isotonic regression (pool adjacent violators); y: one band per layer.
5. A deep, narrow graph (a ResNet is a chain of 100+ layers) wraps into side-by-side columns
   of consecutive layers, as a newspaper does, up to a page width; an edge crossing from one
   column to the next leaves the bottom of the first and enters the top of the next.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque
from dataclasses import dataclass, field

#: Horizontal gap between boxes of one group, between groups, and around a dummy lane.
GAP = 16.0
GROUP_GAP = 30.0
LANE_GAP = 18.0
#: Vertical gap between two layers (room for edges and region labels).
LAYER_GAP = 44.0
MARGIN = 24.0
#: Wrapping: the width columns may fill, the gap between columns, the fewest layers a column
#: holds, and the height up to which a graph stays one column.
PAGE_WIDTH = 1500.0
COLUMN_GAP = 56.0
MIN_COLUMN_LAYERS = 16
ONE_COLUMN_HEIGHT = 1800.0
#: How far an edge crossing to the next column runs past its column's end.
STUB = 24.0


@dataclass
class Box:
    """A node to place: its size, its group (boxes of a group stay together) and, once laid out,
    its center x, top y, layer and column."""

    id: str
    width: float
    height: float
    group: str = ""
    x: float = 0.0
    y: float = 0.0
    layer: int = 0
    column: int = 0

    @property
    def top(self) -> float:
        return self.y

    @property
    def bottom(self) -> float:
        return self.y + self.height


#: A drawing step of an edge: ("M", x, y) moves, ("L", x, y) draws a line, ("C", x, y) a curve
#: leaving and entering vertically.
Step = tuple[str, float, float]


@dataclass
class Route:
    """An edge's path from the bottom of ``src`` to the top of ``dst``: one piece per column it
    runs through (each piece ends with an arrow)."""

    src: str
    dst: str
    pieces: list[list[Step]] = field(default_factory=list)


@dataclass
class Layout:
    boxes: dict[str, Box]
    routes: list[Route]
    width: float
    height: float
    layers: int
    #: top y of each layer's band (in its column), the bands' height, each layer's column
    band_top: list[float] = field(default_factory=list)
    band_height: float = 0.0
    column_of: list[int] = field(default_factory=list)
    #: (left, right) x of each column
    columns: list[tuple[float, float]] = field(default_factory=list)
    crossings: int = 0


@dataclass
class _Slot:
    """A box or a dummy point in a layer."""

    key: str
    width: float
    group: str
    dummy: bool
    pos: float = 0.0
    x: float = 0.0


def layered_layout(boxes: list[Box], edges: list[tuple[str, str]], sweeps: int = 8,
                   straighten: int = 12, page_width: float = PAGE_WIDTH) -> Layout:
    """Lay ``boxes`` out top to bottom so that every edge (``src``, ``dst``) points down, in
    columns when the graph is deep and narrow (within ``page_width``; 0: one column).

    Edges naming unknown boxes are ignored, repeated ones drawn once; a cycle (not expected of a
    dataflow graph) is broken in the boxes' order."""
    by_id = {b.id: b for b in boxes}
    index = {b.id: i for i, b in enumerate(boxes)}
    pairs = list(dict.fromkeys((a, b) for a, b in edges if a in by_id and b in by_id and a != b))
    kept = _topological(boxes, pairs)
    pairs = [(a, b) for a, b in pairs if a in kept[b]]
    layer = _layers(boxes, pairs, index)
    for b in boxes:
        b.layer = layer[b.id]
    count = max(layer.values(), default=-1) + 1
    slots, down, up, lanes = _proper_graph(boxes, pairs, layer, count)
    crossings = _order(slots, down, up, sweeps)
    _place_x(slots, down, up, straighten)
    band = max((b.height for b in boxes), default=0.0)
    per_column = _layers_per_column(slots, count, band, page_width)
    column_of = [i // per_column for i in range(count)]
    band_top = [MARGIN + (i % per_column) * (band + LAYER_GAP) for i in range(count)]
    columns: list[tuple[float, float]] = []
    left = MARGIN
    where: dict[str, tuple[float, int]] = {}
    for c in range(column_of[-1] + 1 if count else 0):
        rows = slots[c * per_column:(c + 1) * per_column]
        lo = min((s.x - s.width / 2 for row in rows for s in row), default=0.0)
        hi = max((s.x + s.width / 2 for row in rows for s in row), default=0.0)
        for row in rows:
            for s in row:
                s.x += left - lo
        columns.append((left, left + hi - lo))
        left += hi - lo + COLUMN_GAP
    for i, row in enumerate(slots):
        for s in row:
            where[s.key] = (s.x, i)
            if not s.dummy:
                box = by_id[s.key]
                box.x, box.column = s.x, column_of[i]
                box.y = band_top[i] + (band - box.height) / 2
    routes = []
    for a, b in pairs:
        src, dst = by_id[a], by_id[b]
        points = [(src.x, src.bottom, src.layer)]
        for key in lanes.get((a, b), []):
            x, i = where[key]
            points += [(x, band_top[i], i), (x, band_top[i] + band, i)]
        points.append((dst.x, dst.top, dst.layer))
        routes.append(Route(a, b, _pieces(points, column_of)))
    width = (columns[-1][1] if columns else 0.0) + MARGIN
    rows_drawn = min(per_column, count)
    height = MARGIN + rows_drawn * band + max(rows_drawn - 1, 0) * LAYER_GAP + MARGIN
    return Layout(by_id, routes, width, height, count, band_top, band, column_of, columns,
                  crossings)


def _layers_per_column(slots: list[list[_Slot]], count: int, band: float,
                       page_width: float) -> int:
    """All layers in one column, or as many columns as fit ``page_width`` for a deep graph."""
    if count == 0 or count * (band + LAYER_GAP) <= ONE_COLUMN_HEIGHT or page_width <= 0:
        return max(count, 1)
    lo = min((s.x - s.width / 2 for row in slots for s in row), default=0.0)
    hi = max((s.x + s.width / 2 for row in slots for s in row), default=0.0)
    fit = int((page_width - 2 * MARGIN + COLUMN_GAP) // (hi - lo + COLUMN_GAP))
    columns = max(1, min(fit, math.ceil(count / MIN_COLUMN_LAYERS)))
    return math.ceil(count / columns)


def _pieces(points: list[tuple[float, float, int]], column_of: list[int]) -> list[list[Step]]:
    """Steps through ``points`` (bottom of a layer, then top and bottom of each layer crossed,
    then top of the last): a curve across each gap between layers, a line through each layer,
    and a break (two stubs) where the next layer is in the next column."""
    pieces: list[list[Step]] = [[("M", points[0][0], points[0][1])]]
    for k in range(len(points) - 1):
        (x1, y1, l1), (x2, y2, l2) = points[k], points[k + 1]
        if k % 2:
            pieces[-1].append(("L", x2, y2))
        elif column_of[l1] == column_of[l2]:
            pieces[-1].append(("C", x2, y2))
        else:
            pieces[-1].append(("L", x1, y1 + STUB))
            pieces.append([("M", x2, y2 - STUB), ("L", x2, y2)])
    return pieces


def _topological(boxes: list[Box], pairs: list[tuple[str, str]]) -> dict[str, set[str]]:
    """For each box, the predecessors whose edges keep the graph acyclic (Kahn's algorithm,
    ties and cycles broken in the boxes' order)."""
    index = {b.id: i for i, b in enumerate(boxes)}
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for a, b in pairs:
        preds[b].append(a)
        succs[a].append(b)
    waiting = {b.id: len(preds[b.id]) for b in boxes}
    ready = [(index[v], v) for v, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    done: set[str] = set()
    kept: dict[str, set[str]] = {}
    stuck = 0  # the first box not yet done, taken when a cycle leaves none ready
    while len(done) < len(boxes):
        if ready:
            _, v = heapq.heappop(ready)
            if v in done:
                continue
        else:
            while boxes[stuck].id in done:
                stuck += 1
            v = boxes[stuck].id
        kept[v] = {p for p in preds[v] if p in done}
        done.add(v)
        for s in succs[v]:
            waiting[s] -= 1
            if waiting[s] == 0 and s not in done:
                heapq.heappush(ready, (index[s], s))
    return kept


def _layers(boxes: list[Box], pairs: list[tuple[str, str]], index: dict[str, int]
            ) -> dict[str, int]:
    """Longest path from the sources (``pairs`` are acyclic); then each source moves down to
    just above its first user."""
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for a, b in pairs:
        preds[b].append(a)
        succs[a].append(b)
    layer: dict[str, int] = {}
    remaining = {b.id: len(preds[b.id]) for b in boxes}
    ready = deque(sorted((v for v, n in remaining.items() if n == 0), key=index.__getitem__))
    while ready:
        v = ready.popleft()
        layer[v] = max((layer[p] + 1 for p in preds[v]), default=0)
        for s in succs[v]:
            remaining[s] -= 1
            if remaining[s] == 0:
                ready.append(s)
    for b in boxes:
        if not preds[b.id] and succs[b.id]:
            layer[b.id] = max(0, min(layer[s] for s in succs[b.id]) - 1)
    return layer


def _proper_graph(boxes: list[Box], pairs: list[tuple[str, str]], layer: dict[str, int],
                  count: int) -> tuple[list[list[_Slot]], dict[str, list[str]],
                                       dict[str, list[str]], dict[tuple[str, str], list[str]]]:
    """Slots per layer (boxes and dummies), the edges between adjacent layers, and each edge's
    dummies."""
    slots: list[list[_Slot]] = [[] for _ in range(count)]
    for b in boxes:
        slots[layer[b.id]].append(_Slot(b.id, b.width, b.group or f"#{b.id}", False))
    down: dict[str, list[str]] = defaultdict(list)
    up: dict[str, list[str]] = defaultdict(list)

    def link(a: str, b: str) -> None:
        if b not in down[a]:
            down[a].append(b)
            up[b].append(a)

    long: dict[str, list[str]] = defaultdict(list)
    for a, b in pairs:
        if layer[b] - layer[a] == 1:
            link(a, b)
        else:
            long[a].append(b)
    lanes: dict[tuple[str, str], list[str]] = {}
    for a, targets in long.items():
        deepest = max(layer[t] for t in targets)
        lane = []
        prev = a
        for i in range(layer[a] + 1, deepest):
            key = f"~{a}~{i}"
            slots[i].append(_Slot(key, 0.0, f"#{key}", True))
            link(prev, key)
            lane.append(key)
            prev = key
        for t in targets:
            used = lane[:layer[t] - layer[a] - 1]
            link(used[-1], t)
            lanes[(a, t)] = used
    return slots, down, up, lanes


def _order(slots: list[list[_Slot]], down: dict[str, list[str]], up: dict[str, list[str]],
           sweeps: int) -> int:
    """Barycenter ordering, grouped; leaves ``slots`` in the best order found and returns its
    number of crossings."""
    for row in slots:
        for i, s in enumerate(row):
            s.pos = float(i)
    best = [list(row) for row in slots]
    best_crossings = _crossings(slots, down)
    for sweep in range(sweeps):
        going_down = sweep % 2 == 0
        rows = range(1, len(slots)) if going_down else range(len(slots) - 2, -1, -1)
        for i in rows:
            ref = {s.key: s.pos for s in slots[i - 1 if going_down else i + 1]}
            near = up if going_down else down
            _sort_row(slots[i], {s.key: [ref[k] for k in near.get(s.key, ()) if k in ref]
                                 for s in slots[i]})
        crossings = _crossings(slots, down)
        if crossings < best_crossings:
            best, best_crossings = [list(row) for row in slots], crossings
        if best_crossings == 0:
            break
    for i, row in enumerate(best):
        slots[i] = row
        for j, s in enumerate(row):
            s.pos = float(j)
    return best_crossings


def _sort_row(row: list[_Slot], neighbours: dict[str, list[float]]) -> None:
    center = {s.key: (sum(neighbours[s.key]) / len(neighbours[s.key]) if neighbours[s.key]
                      else s.pos) for s in row}
    groups: dict[str, list[_Slot]] = defaultdict(list)
    for s in row:
        groups[s.group].append(s)
    order = sorted(groups.values(), key=lambda g: (sum(center[s.key] for s in g) / len(g),
                                                   min(s.pos for s in g)))
    row[:] = [s for g in order for s in sorted(g, key=lambda s: (center[s.key], s.pos))]
    for j, s in enumerate(row):
        s.pos = float(j)


def _crossings(slots: list[list[_Slot]], down: dict[str, list[str]]) -> int:
    total = 0
    for i in range(len(slots) - 1):
        pos = {s.key: s.pos for s in slots[i + 1]}
        ends = sorted((s.pos, pos[t]) for s in slots[i] for t in down.get(s.key, ()) if t in pos)
        total += _inversions([b for _, b in ends])
    return total


def _inversions(values: list[float]) -> int:
    """Pairs i < j with values[i] > values[j] (merge sort)."""
    if len(values) < 2:
        return 0
    mid = len(values) // 2
    left, right = values[:mid], values[mid:]
    count = _inversions(left) + _inversions(right)
    left.sort()
    right.sort()
    j = 0
    for v in left:
        while j < len(right) and right[j] < v:
            j += 1
        count += j
    return count


def _gap(a: _Slot, b: _Slot) -> float:
    if a.dummy or b.dummy:
        gap = LANE_GAP
    else:
        gap = GAP if a.group == b.group else GROUP_GAP
    return a.width / 2 + gap + b.width / 2


def _place_x(slots: list[list[_Slot]], down: dict[str, list[str]], up: dict[str, list[str]],
             rounds: int) -> None:
    """Packed rows, then rounds pulling each slot toward its neighbours' mean x (down, up,
    both), each row kept in order with its gaps."""
    for row in slots:
        x = 0.0
        for j, s in enumerate(row):
            if j:
                x += _gap(row[j - 1], s)
            s.x = x
        shift = x / 2
        for s in row:
            s.x -= shift
    xs = {s.key: s for row in slots for s in row}
    for r in range(rounds):
        mode = ("down", "up", "both")[r % 3] if r < rounds - 1 else "both"
        rows = range(len(slots)) if mode != "up" else range(len(slots) - 1, -1, -1)
        for i in rows:
            row = slots[i]
            wanted, weights = [], []
            for s in row:
                near = (list(up.get(s.key, ())) if mode != "up" else []) + \
                       (list(down.get(s.key, ())) if mode != "down" else [])
                if near:
                    wanted.append(sum(xs[k].x for k in near) / len(near))
                    weights.append(1.0)
                else:
                    wanted.append(s.x)
                    weights.append(0.05)
            for s, x in zip(row, _isotonic(row, wanted, weights)):
                s.x = x


def _isotonic(row: list[_Slot], wanted: list[float], weights: list[float]) -> list[float]:
    """x closest to ``wanted`` (weighted squares) keeping the row's order and gaps."""
    offsets = [0.0]
    for j in range(1, len(row)):
        offsets.append(offsets[-1] + _gap(row[j - 1], row[j]))
    blocks: list[list[float]] = []  # [mean, weight, count]
    for y, w in zip((x - o for x, o in zip(wanted, offsets)), weights):
        blocks.append([y, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    out: list[float] = []
    for mean, _, n in blocks:
        out += [mean] * int(n)
    return [y + o for y, o in zip(out, offsets)]
