"""Moved to :mod:`tessera.drawing.html`; this path re-exports it."""

from tessera.drawing.html import COPY_COLOR, FALLBACK_COLOR, PALETTE, Report, to_html

__all__ = ["COPY_COLOR", "FALLBACK_COLOR", "PALETTE", "Report", "to_html"]
