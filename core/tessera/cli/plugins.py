"""``tessera plugins``: the installed backends, where they come from, and whether they run here.

Broken plugins (an import that failed, a hook that raised) are listed with their error.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any

from tessera import plugin
from tessera.plugin import contract
from tessera.plugin.manager import backend_unavailable, default_cpu_target
from tessera.plugin.target import TargetKind


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table with left-aligned columns and a dashed rule under the header."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


#: Width of the listing: reasons and op lists wrap to it, the status column stays under it.
WIDTH = 100
#: Longest reason the status column shows; a longer one is cut there and given in full below.
STATUS_WIDTH = 60


def short_reason(reason: str, limit: int = STATUS_WIDTH) -> str:
    """The first clause of ``reason`` (up to `` (`` or ``; ``, where the details and advice
    start), on one line and at most ``limit`` characters: the table's status column."""
    text = " ".join(reason.split())
    for stop in (" (", "; "):
        if stop in text:
            text = text[:text.index(stop)]
    if len(text) > limit:
        text = text[:limit - 4].rsplit(" ", 1)[0] + " ..."
    return text


def _reasons(registry: Any) -> dict[str, str | None]:
    return {name: backend_unavailable(backend) for name, backend in registry.backends.items()}


def backend_rows(registry: Any, reasons: dict[str, str | None] | None = None) -> list[list[str]]:
    """One row per backend: name, device, distribution, version, status (a short reason)."""
    owner = {b: info for info in registry.plugins for b in info.backends}
    reasons = _reasons(registry) if reasons is None else reasons
    rows = []
    for name, backend in registry.backends.items():
        info = owner.get(name)
        reason = reasons.get(name)
        try:
            version = backend.version()
        except Exception:  # noqa: BLE001
            version = info.version if info else "?"
        status = "available" if not reason else f"unavailable: {short_reason(reason)}"
        rows.append([name, backend.device, info.distribution if info else "?", version, status])
    return rows


def unavailable_notes(reasons: dict[str, str | None], width: int = WIDTH) -> list[str]:
    """The reasons the status column shortened, in full and wrapped, each once (backends with
    the same reason share a line): ``cudnn, cublas: no CUDA driver ...``."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in reasons.items():
        if reason and short_reason(reason) != " ".join(reason.split()):
            by_reason.setdefault(" ".join(reason.split()), []).append(name)
    return [textwrap.fill(f"{', '.join(names)}: {reason}", width, initial_indent="  ",
                          subsequent_indent="    ", break_long_words=False,
                          break_on_hyphens=False)
            for reason, names in by_reason.items()]


def backend_details(name: str, backend: Any) -> list[str]:
    """``tessera plugins -v``: a backend's device, options, claims and artifact version."""
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
        lines.append(textwrap.fill(f"host threads: {threads}", WIDTH, initial_indent="  ",
                                   subsequent_indent="    ", break_long_words=False,
                                   break_on_hyphens=False))
    if backend.options:
        lines.append("  options:")
        lines += [textwrap.fill(f"-{k}: {d}", WIDTH, initial_indent="    ",
                                subsequent_indent="      ", break_long_words=False,
                                break_on_hyphens=False)
                  for k, d in backend.options.items()]
    else:
        lines.append("  options: none")
    if backend.code_forms:
        lines.append(f"  --dump-code forms: {', '.join(backend.code_forms)}")
    try:
        patterns = backend.claims(TargetKind(name))
        singles = sorted({p.op for p in patterns if isinstance(p.op, str) and not p.inputs})
        # one name per composite: a pattern may come in several forms (both operand orders
        # of an Add)
        composites = list(dict.fromkeys(p.name for p in patterns if p.inputs))
        lines.append(_wrap(f"  claims {len(singles)} ops: ", singles))
        if composites:
            lines.append(_wrap(f"  composites ({len(composites)}): ", composites))
    except Exception as e:  # noqa: BLE001
        lines.append(f"  claims: claims() raised {type(e).__name__}: {e}")
    return lines


def _wrap(prefix: str, items: list[str], width: int = WIDTH, indent: str = "    ") -> str:
    """``prefix`` and the comma-separated ``items``, wrapped to ``width`` between items."""
    out, line = [], prefix
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        if line.strip() and line != prefix and len(line) + 1 + len(text) > width:
            out.append(line)
            line = indent + text
        else:
            line = f"{line} {text}" if line != prefix else prefix + text
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
    registry = plugin.get_registry()  # via the package: a replaced get_registry (tests) counts
    reasons = _reasons(registry)
    print("backends:")
    print(format_table(["BACKEND", "DEVICE", "DISTRIBUTION", "VERSION", "STATUS"],
                       backend_rows(registry, reasons)))
    notes = unavailable_notes(reasons)
    if notes:
        print("\nwhy unavailable:")
        print("\n".join(notes))
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
