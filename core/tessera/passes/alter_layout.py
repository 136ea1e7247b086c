"""Moved to :mod:`tessera.kernel.alter_layout`: a graph pass only the code-generating backends
use. This module re-exports it, so the old import path keeps working."""

from tessera.kernel.alter_layout import (
    ChooseFn,
    alter_conv_layout,
    count_layout_transforms,
)

__all__ = [
    "ChooseFn", "alter_conv_layout", "count_layout_transforms",
]
