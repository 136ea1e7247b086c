"""Optional packages some tests need: without one, those tests skip and say how to install it.

    ort = require("onnxruntime")          # in a module or a test: import it, or skip
    @needs("xgboost")                     # a marker: skip the test where it is missing

``./run-tests.sh`` installs every one of them (the ``test`` extra of each project), except
Verilator (apt-get, see tessera_vta.tsim) and a GPU.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

#: module -> the command that installs it
INSTALL = {
    "onnxruntime": "pip install onnxruntime (or pip install -e '.[test]')",
    "xgboost": "pip install 'tessera[tune]' (xgboost-cpu)",
    "ray": "pip install 'tessera[distributed]'",
    "llvmlite": "pip install -e plugins/llvm",
}


def _reason(module: str) -> str:
    return f"{module} is not installed: {INSTALL[module]}"


def require(module: str) -> Any:
    """``module`` imported, or the calling test (or module, at import time) skipped."""
    return pytest.importorskip(module, reason=_reason(module))


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return True


def needs(module: str) -> pytest.MarkDecorator:
    """A marker that skips the test where ``module`` cannot be found."""
    return pytest.mark.skipif(_missing(module), reason=_reason(module))
