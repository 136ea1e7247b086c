"""Which installed distribution a module or backend comes from, and its version."""

from __future__ import annotations

import importlib.metadata as md

__all__ = ["distribution_version"]


def distribution_version(module_or_dist: str) -> str:
    """The installed version of a distribution, given its name or a module inside it."""
    candidates = [module_or_dist, module_or_dist.split(".")[0],
                  module_or_dist.split(".")[0].replace("_", "-")]
    for top, dists in md.packages_distributions().items():
        if top == module_or_dist.split(".")[0]:
            candidates = list(dists) + candidates
    for name in candidates:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return "0+unknown"
