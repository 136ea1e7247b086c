"""Moved to :mod:`tessera.drawing.dot`; this path re-exports it."""

from tessera.drawing.dot import Drawing, DrawnNode, DrawnRegion, drawing, to_dot

__all__ = ["Drawing", "DrawnNode", "DrawnRegion", "drawing", "to_dot"]
