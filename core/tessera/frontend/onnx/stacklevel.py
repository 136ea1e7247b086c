"""The ``stacklevel`` of an importer warning: the first frame outside Tessera."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["caller_stacklevel"]

_PACKAGE_DIR = str(Path(__file__).parents[2])


def caller_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the function calling this one that makes
    the warning point at the first frame outside the ``tessera`` package: the user's call of
    ``tessera.compile``, ``import_onnx``, ... however deep in Tessera the warning is raised."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level += 1
        frame = frame.f_back
    return level
