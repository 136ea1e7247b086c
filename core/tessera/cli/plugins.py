"""``tessera plugins``: the installed backends, where they come from, and whether they run here.

Broken plugins (an import that failed, a hook that raised) are listed with their error.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table with left-aligned columns and a dashed rule under the header."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def backend_rows(registry: Any) -> list[list[str]]:
    """One row per backend: name, device, distribution, version, status."""
    owner = {b: info for info in registry.plugins for b in info.backends}
    rows = []
    for name, backend in registry.backends.items():
        info = owner.get(name)
        try:
            reason = backend.available()
        except Exception as e:  # noqa: BLE001 - a plugin's check must not break the listing
            reason = f"available() raised {type(e).__name__}: {e}"
        try:
            version = backend.version()
        except Exception:  # noqa: BLE001
            version = info.version if info else "?"
        status = "available" if not reason else f"unavailable: {reason}"
        rows.append([name, backend.device, info.distribution if info else "?", version, status])
    return rows


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plugins", help="list installed backends and broken plugins",
        description="List the installed backends (distribution, version, device, whether they "
                    "can run here) and plugins that failed to load.")
    parser.set_defaults(handler=run_plugins)


def run_plugins(args: argparse.Namespace) -> int:
    from tessera.plugin import get_registry
    from tessera.plugin.manager import default_cpu_target

    registry = get_registry()
    print("backends:")
    print(format_table(["BACKEND", "DEVICE", "DISTRIBUTION", "VERSION", "STATUS"],
                       backend_rows(registry)))
    try:
        print(f"\ndefault CPU target (auto): {default_cpu_target()}")
    except Exception as e:  # noqa: BLE001 - report, do not fail the listing
        print(f"\ndefault CPU target (auto): none ({e})")
    broken = [info for info in registry.plugins if info.error]
    if broken:
        print("\nbroken plugins:")
        print(format_table(["PLUGIN", "DISTRIBUTION", "VERSION", "ERROR"],
                           [[i.name, i.distribution, i.version, i.error or ""] for i in broken]))
    return 0
