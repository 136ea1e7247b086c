"""The HTML partition picture: every node drawn once, colored by backend as the legend says,
copies and fallback nodes marked, edges pointing down the layers, names escaped, deep graphs
wrapped into columns without overlaps."""

from __future__ import annotations

from collections import Counter

import pytest
from partition.html_support import (
    EVIL,
    REF,
    SVG,
    box_of,
    edges_of,
    legend_of,
    nodes_of,
    one_device,
    path_ends,
    svg_of,
    two_devices,
)

from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.partition import COPY_OP, REGION_OP, PartitionResult, partition
from tessera.partition.dot import drawing
from tessera.partition.html import FALLBACK_COLOR, to_html

CASES = {"one device": one_device, "two devices": two_devices}


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest) -> tuple[PartitionResult, str]:
    result = CASES[request.param]()
    return result, to_html(result.graph, title=request.param, report=result.report)


def _ops(result: PartitionResult) -> list[str]:
    return [n.name for r in result.graph.nodes if r.op == REGION_OP for n in r.body.nodes]


def test_every_node_is_drawn_once(case: tuple[PartitionResult, str]) -> None:
    result, page = case
    svg = svg_of(page)
    assert Counter(g.get("data-name") for g in nodes_of(svg, "op")) == Counter(_ops(result))
    assert len(nodes_of(svg, "input")) == len(result.graph.inputs)
    assert len(nodes_of(svg, "output")) == len(result.graph.outputs)
    assert len(nodes_of(svg, "copy")) == sum(n.op == COPY_OP for n in result.graph.nodes)
    ids = [g.get("data-id") for g in nodes_of(svg)]
    assert len(ids) == len(set(ids))
    # each op's region, backend and device are the partitioner's
    where = {n.name: (r.body.name, r.attrs["backend"], r.attrs["device"])
             for r in result.graph.nodes if r.op == REGION_OP for n in r.body.nodes}
    for g in nodes_of(svg, "op"):
        assert (g.get("data-region"), g.get("data-backend"), g.get("data-device")) == \
            where[g.get("data-name")]
    # one outline per region
    regions = {g.get("data-region") for g in svg.iter(f"{SVG}g") if g.get("class") == "region"}
    assert regions == {r.body.name for r in result.graph.nodes if r.op == REGION_OP}


def test_colors_follow_the_legend(case: tuple[PartitionResult, str]) -> None:
    result, page = case
    svg, legend = svg_of(page), legend_of(page)
    rows = {tr.get("data-backend"): tr for tr in legend.iter("tr")
            if tr.get("class") == "legend-backend"}
    assert set(rows) == {r.backend for r in result.report.regions}
    fills = {b: tr.get("data-fill") for b, tr in rows.items()}
    assert len(set(fills.values())) == len(fills)
    for b, tr in rows.items():
        cells = [td.text for td in tr.iter("td")]
        regions = [r for r in result.report.regions if r.backend == b]
        assert cells[1:] == [b, regions[0].device, str(sum(len(r.nodes) for r in regions)),
                             str(len(regions))]
    for g in nodes_of(svg, "op"):
        shape = next(e for e in g if e.get("class") == "shape")
        assert shape.get("fill") == fills[g.get("data-backend")]


def test_edges_point_down_the_layers(case: tuple[PartitionResult, str]) -> None:
    result, page = case
    svg = svg_of(page)
    layer = {g.get("data-id"): int(g.get("data-layer")) for g in nodes_of(svg)}
    drawn = set()
    for path in edges_of(svg):
        src, dst = path.get("data-src"), path.get("data-dst")
        assert layer[src] < layer[dst], (src, dst)
        (_, y0), (_, y1) = path_ends(path.get("d"))
        assert y0 < y1, (src, dst)
        drawn.add((src, dst))
    assert drawn == {(a, b) for a, b, _ in drawing(result.graph).edges}


def test_copies_and_fallback_are_marked() -> None:
    result = two_devices()
    page = to_html(result.graph, report=result.report)
    svg = svg_of(page)
    copies = nodes_of(svg, "copy")
    assert len(copies) == len(result.report.copies) >= 2
    assert {(c.get("data-src"), c.get("data-dst")) for c in copies} == \
        {("cpu", "opaque"), ("opaque", "cpu")}
    for c in copies:
        assert [e.tag for e in c if e.get("class") == "shape copy"] == [f"{SVG}polygon"]
    kinds = {g.get("data-id"): g.get("data-kind") for g in nodes_of(svg)}
    for path in edges_of(svg):
        touches_copy = "copy" in (kinds[path.get("data-src")], kinds[path.get("data-dst")])
        assert ("copy-edge" in path.get("class")) == touches_copy
    fell = [g for g in nodes_of(svg) if g.get("data-fallback")]
    assert [g.get("data-name") for g in fell] == ["softmax"]
    assert fell[0].get("data-backend") == "ref"
    assert any(e.get("stroke") == FALLBACK_COLOR for e in fell[0])
    assert "fell back" in fell[0].find(f"{SVG}title").text
    legend = legend_of(page)
    row = next(tr for tr in legend.iter("tr") if tr.get("class") == "legend-fallback")
    assert [td.text for td in row.iter("td")][2] == "1"
    assert "2</b> devices (cpu, opaque)" in page


def test_tooltip_and_header() -> None:
    result = two_devices()
    page = to_html(result.graph, title="tiny.onnx", report=result.report)
    svg = svg_of(page)
    mm = next(g for g in nodes_of(svg, "op") if g.get("data-name") == "mm")
    tip = mm.find(f"{SVG}title").text
    for fragment in ("MatMul mm", "float32[4, 8]", "region: region0_opaque", "backend: opaque",
                     "device: opaque"):
        assert fragment in tip, tip
    assert "<title>tiny.onnx" in page and "<h1>tiny.onnx</h1>" in page
    assert "target <b>opaque</b>" in page
    ops, regions = len(_ops(result)), len(result.report.regions)
    assert f"<b>{ops}</b> nodes in <b>{regions}</b> regions on <b>2</b> backends" in page
    assert f"<b>{len(result.report.copies)}</b> device copies" in page
    assert "<b>1</b> fallback node<" in page
    # without a report: the backends stand for the target, nothing is marked as fallback
    bare = to_html(result.graph)
    assert "target <b>opaque, ref</b>" in bare and "data-fallback" not in bare
    assert "<h1>two devices</h1>" in bare


def test_every_name_is_escaped() -> None:
    result = two_devices()
    page = to_html(result.graph, title=EVIL, report=result.report)
    assert "<script>alert" not in page
    assert page.count("<script") == 2  # the page's own: the error recorder and the viewer
    svg = svg_of(page)
    evil = [g for g in nodes_of(svg) if g.get("data-name") == EVIL]
    assert len(evil) == 1
    assert EVIL in evil[0].find(f"{SVG}title").text
    outputs = {g.get("data-name") for g in nodes_of(svg, "output")}
    assert outputs == {"y", "out\"&'<"}
    # only the page's own scripts may run
    assert "script-src 'sha256-" in page and "default-src 'none'" in page


def test_control_characters_keep_the_page_well_formed() -> None:
    fn = Function("g")
    x = fn.add_input("x\x01\x1b", TensorType((2,), DType.float32))
    fn.outputs = [fn.op("Relu", x, name="r\x00elu")]
    svg = svg_of(to_html(partition(fn, [REF], REF).graph))
    assert {g.get("data-name") for g in nodes_of(svg)} >= {"r?elu", "x??"}


def _deep_graph(blocks: int) -> Function:
    """A ResNet-like chain: each block a two-op branch added to its shortcut, some blocks
    with a projected shortcut."""
    fn = Function("deep")
    v = fn.add_input("x", TensorType((1, 8), DType.float32))
    for i in range(blocks):
        a = fn.op("Relu", fn.op("Neg", v, name=f"b{i}_neg"), name=f"b{i}_relu")
        short = fn.op("Exp", v, name=f"b{i}_proj") if i % 4 == 0 else v
        v = fn.op("Add", a, short, name=f"b{i}_add")
    fn.outputs = [v]
    return fn


def test_deep_graph_wraps_into_columns_without_overlaps() -> None:
    graph = partition(_deep_graph(60), [REF], REF).graph
    svg = svg_of(to_html(graph))
    width, height = float(svg.get("width")), float(svg.get("height"))
    assert int(svg.get("data-columns")) > 1
    assert int(svg.get("data-layers")) >= 180
    assert width <= 1500 and height < 180 * 82 / 2  # wrapped, not one 15000-pixel column
    boxes = [box_of(g) for g in nodes_of(svg)]
    assert len(boxes) == 60 * 3 + 15 + 2
    for left, top, right, bottom in boxes:
        assert 0 <= left < right <= width and 0 <= top < bottom <= height
    boxes.sort()
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if b[0] >= a[2]:
                break
            assert b[1] >= a[3] or a[1] >= b[3], (a, b)
    # an edge from one column to the next is drawn in two pieces, both pointing down
    pieces = Counter((p.get("data-src"), p.get("data-dst")) for p in edges_of(svg))
    assert max(pieces.values()) >= 2
