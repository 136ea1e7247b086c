"""Pictures of a partitioned graph: Graphviz DOT (:mod:`~tessera.drawing.dot`), and a
self-contained HTML page or the same picture as a standalone SVG file
(:mod:`~tessera.drawing.html`, laid out by :mod:`~tessera.drawing.layout`).

Drawings read a partitioned graph (its ``Region`` and ``DeviceCopy`` nodes and the backend and
device each region node names) and, for the page, a partition report's target, fallbacks and
declines; they import nothing of Tessera but ``ir`` (docs/architecture.md). The old paths
``tessera.partition.dot``, ``.html`` and ``.layout`` re-export these modules.
"""

from tessera.drawing.dot import Drawing, DrawnNode, DrawnRegion, drawing, to_dot
from tessera.drawing.html import to_html, to_svg

__all__ = ["Drawing", "DrawnNode", "DrawnRegion", "drawing", "to_dot", "to_html", "to_svg"]
