"""``tessera plugins``: the installed backends, where they come from, and whether they run here.

Broken plugins (an import that failed, a hook that raised) are listed with their error.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from tessera.plugin.manager import backend_unavailable


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
        reason = backend_unavailable(backend)
        try:
            version = backend.version()
        except Exception:  # noqa: BLE001
            version = info.version if info else "?"
        status = "available" if not reason else f"unavailable: {reason}"
        rows.append([name, backend.device, info.distribution if info else "?", version, status])
    return rows


def backend_details(name: str, backend: Any) -> list[str]:
    """``tessera plugins -v``: a backend's device, options, claims and artifact version."""
    from tessera.plugin import contract
    from tessera.plugin.target import TargetKind

    lines = [f"{name}:"]
    try:
        api = type(backend.device_api()).__name__
    except Exception as e:  # noqa: BLE001 - a listing never fails
        api = f"device_api() raised {type(e).__name__}: {e}"
    lines.append(f"  device: {backend.device} ({api})" + (
        f"; warning: {contract.check_device(backend)}" if contract.check_device(backend) else ""))
    lines.append(f"  class: {type(backend).__module__}.{type(backend).__qualname__}")
    lines.append(f"  artifact version: {backend.artifact_version}; default rank: "
                 f"{backend.default_rank}")
    try:
        threads = backend.host_threads()
    except Exception as e:  # noqa: BLE001 - a listing never fails
        threads = f"host_threads() raised {type(e).__name__}: {e}"
    if threads:
        lines.append(f"  host threads: {threads}")
    if backend.options:
        lines.append("  options:")
        lines += [f"    -{k}: {d}" for k, d in backend.options.items()]
    else:
        lines.append("  options: none")
    if backend.code_forms:
        lines.append(f"  --dump-code forms: {', '.join(backend.code_forms)}")
    try:
        patterns = backend.claims(TargetKind(name))
        singles = sorted({p.op for p in patterns if isinstance(p.op, str) and not p.inputs})
        composites = [p.name for p in patterns if p.inputs]
        lines.append(f"  claims {len(singles)} ops: {_wrap(singles)}")
        if composites:
            lines.append(f"  composites: {', '.join(composites)}")
    except Exception as e:  # noqa: BLE001
        lines.append(f"  claims: claims() raised {type(e).__name__}: {e}")
    return lines


def _wrap(items: list[str], width: int = 88, indent: str = "    ") -> str:
    out, line = [], ""
    for item in items:
        if line and len(line) + len(item) + 2 > width:
            out.append(line + ",")
            line = indent + item
        else:
            line = f"{line}, {item}" if line else item
    out.append(line)
    return "\n".join(out)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plugins", help="list installed backends and broken plugins",
        description="List the installed backends (distribution, version, device, whether they "
                    "can run here) and plugins that failed to load; with -v also each "
                    "backend's device API, options, claimed ops and composites.")
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
    if getattr(args, "verbose", False):
        for name, backend in registry.backends.items():
            print()
            print("\n".join(backend_details(name, backend)))
    broken = [info for info in registry.plugins if info.error]
    if broken:
        print("\nbroken plugins:")
        print(format_table(["PLUGIN", "DISTRIBUTION", "VERSION", "ERROR"],
                           [[i.name, i.distribution, i.version, i.error or ""] for i in broken]))
    return 0
