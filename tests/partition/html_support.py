"""Shared by the HTML-picture tests: example partitioned graphs and readers of the page."""

from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET
import zlib

import numpy as np

from tessera.backends.reference import ReferenceBackend
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.partition import PartitionResult, partition
from tessera.plugin.target import TargetKind
from tessera.testing.opaque import OpaqueBackend

SVG = "{http://www.w3.org/2000/svg}"
EVIL = "<script>alert(1)</script>"
REF = (ReferenceBackend(), TargetKind("ref"))


def one_device() -> PartitionResult:
    """A small branchy graph, all on the reference backend (one region, no copies)."""
    fn = Function("small")
    x = fn.add_input("x", TensorType((2, 3), DType.float32))
    a = fn.op("Relu", x, name="a")
    b = fn.op("Neg", a, name="b")
    c = fn.op("Exp", a, name="c")
    fn.outputs = [fn.op("Add", b, c, name="d")]
    return partition(fn, [REF], REF, "ref")


def two_devices() -> PartitionResult:
    """MatMul + Add -> Relu -> Softmax -> Mul -> Tanh on an opaque device, with a Neg branch
    named like a script: Softmax is not claimed by the opaque backend and falls back to the
    reference backend on the host, between copies."""
    rng = np.random.default_rng(0)
    fn = Function("two devices")
    x = fn.add_input("x", TensorType((4, 16), DType.float32))
    m = fn.op("MatMul", x, fn.constant(rng.standard_normal((16, 8)).astype(np.float32), "W"),
              name="mm")
    a = fn.op("Add", m, fn.constant(np.ones(8, np.float32), "b"), name="bias")
    r = fn.op("Relu", a, name="relu")
    s = fn.op("Softmax", r, name="softmax", axis=-1)
    p = fn.op("Mul", s, fn.constant(np.ones(8, np.float32), "c"), name="scale")
    y = fn.op("Tanh", p, name="tanh")
    evil = fn.op("Neg", r, name=EVIL)
    fn.outputs = [y, evil]
    fn.attrs["output_names"] = ["y", "out\"&'<"]
    return partition(fn, [(OpaqueBackend(), TargetKind("opaque"))], REF, "opaque")


def svg_of(page: str) -> ET.Element:
    """The page's graph, parsed as XML."""
    start = page.index('<svg id="graph"')
    end = page.index("</svg>", start) + len("</svg>")
    return ET.fromstring(page[start:end])


def legend_of(page: str) -> ET.Element:
    start = page.index('<table id="legend"')
    end = page.index("</table>", start) + len("</table>")
    return ET.fromstring(page[start:end])


def nodes_of(svg: ET.Element, kind: str | None = None) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG}g") if g.get("class") == "node"
            and (kind is None or g.get("data-kind") == kind)]


def edges_of(svg: ET.Element) -> list[ET.Element]:
    return [p for p in svg.iter(f"{SVG}path") if "edge" in (p.get("class") or "").split()]


def path_ends(d: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """First and last point of SVG path data."""
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
    return (numbers[0], numbers[1]), (numbers[-2], numbers[-1])


def box_of(node: ET.Element) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) of a node's shape."""
    shape = next(e for e in node if "shape" in (e.get("class") or "").split())
    if shape.tag == f"{SVG}rect":
        x, y = float(shape.get("x")), float(shape.get("y"))
        return x, y, x + float(shape.get("width")), y + float(shape.get("height"))
    if shape.tag == f"{SVG}ellipse":
        cx, cy = float(shape.get("cx")), float(shape.get("cy"))
        rx, ry = float(shape.get("rx")), float(shape.get("ry"))
        return cx - rx, cy - ry, cx + rx, cy + ry
    points = [tuple(map(float, p.split(","))) for p in shape.get("points").split()]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs), max(ys)


def read_png(data: bytes) -> np.ndarray:
    """An 8-bit, non-interlaced RGB or RGBA PNG as an (h, w, channels) array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        kind = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(channels, stride):
                row[i] = (row[i] + row[i - channels]) & 0xFF
        elif kind == 2:
            row = bytearray((a + b) & 0xFF for a, b in zip(row, prev))
        elif kind == 3:
            for i in range(stride):
                left = row[i - channels] if i >= channels else 0
                row[i] = (row[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                left = row[i - channels] if i >= channels else 0
                up, up_left = prev[i], prev[i - channels] if i >= channels else 0
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                row[i] = (row[i] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                    else up_left)) & 0xFF
        rows.append(bytes(row))
        prev = row
    return np.frombuffer(b"".join(rows), np.uint8).reshape(height, width, channels)
