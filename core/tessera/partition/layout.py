"""Moved to :mod:`tessera.drawing.layout`; this path re-exports it."""

from tessera.drawing.layout import (
    COLUMN_GAP,
    GAP,
    GROUP_GAP,
    LANE_GAP,
    LAYER_GAP,
    MARGIN,
    MIN_COLUMN_LAYERS,
    ONE_COLUMN_HEIGHT,
    PAGE_WIDTH,
    STUB,
    Box,
    Layout,
    Route,
    Step,
    layered_layout,
)

__all__ = ["COLUMN_GAP", "GAP", "GROUP_GAP", "LANE_GAP", "LAYER_GAP", "MARGIN",
           "MIN_COLUMN_LAYERS", "ONE_COLUMN_HEIGHT", "PAGE_WIDTH", "STUB", "Box", "Layout",
           "Route", "Step", "layered_layout"]
