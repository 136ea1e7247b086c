"""tessera-vta tests need only numpy and the plugin itself (not the core `tessera` package),
except ``test_plugin.py`` (the Tessera backend), which needs Tessera and the plugin's entry point
and skips otherwise.

When the plugin is not installed (``pip install -e plugins/vta_sim``), its source folder is put
on the path so the tests still run from a fresh clone.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("tessera_vta") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
