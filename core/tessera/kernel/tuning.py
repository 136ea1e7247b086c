"""What a code-generating backend's tuning hooks share: the prepared regions of this process
(``Backend.tuning_candidate`` and ``tuning_features`` are called again and again for one
region, so it is prepared and fused once), and the loop-nest features of a kernel's configs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from typing import Any

from tessera.errors import CompileError
from tessera.ir.graph import Function
from tessera.ir.types import TensorType
from tessera.tir.features import loop_features
from tessera.tir.stmt import PrimFunc
from tessera.topi.from_graph import kernel_names

__all__ = ["PreparedRegions", "config_features"]


class PreparedRegions(dict):
    """Regions of this process prepared for one backend: ``(id(region), key)`` -> (region,
    fused groups, kernel names, value types of the prepared graph). An entry is used only
    while it holds the same region object (an id can be reused)."""

    def __init__(self, backend: str) -> None:
        super().__init__()
        self.backend = backend

    def group(self, region: Function, kernel: str, key: Hashable,
              prepare: Callable[[], tuple[Function, list[Any]]]
              ) -> tuple[Any, dict[str, TensorType]]:
        """The fused group that ``kernel`` (a name of ``compile``'s kernels) runs, of
        ``region`` prepared by ``prepare()`` once per region object and ``key``; with the
        value types of the prepared region."""
        ident = (id(region), key)
        prepared = self.get(ident)
        if prepared is None or prepared[0] is not region:
            func, groups = prepare()
            types = {v.name: v.type for v in func.inputs}
            types.update({v.name: v.type for n in func.nodes for v in n.outputs})
            prepared = self[ident] = (region, groups, kernel_names(groups, f"{region.name}_"),
                                      types)
        _, groups, names, types = prepared
        if kernel not in names:
            raise CompileError(f"{self.backend}: region {region.name} has no kernel "
                               f"{kernel!r}")
        return groups[names.index(kernel)], types


def config_features(configs: list[dict[str, Any]], key: str,
                    nest: Callable[[dict[str, dict[str, Any]]], PrimFunc]
                    ) -> list[list[float] | None]:
    """The loop-nest features (:func:`tessera.tir.features.loop_features`) of
    ``nest({key: config})`` for each config; None for a config that does not lower."""
    out: list[list[float] | None] = []
    for config in configs:
        try:
            with warnings.catch_warnings():  # a knob value that is not a candidate
                warnings.simplefilter("ignore")
                prim = nest({key: config})
            out.append(loop_features(prim))
        except Exception:  # noqa: BLE001 - this config has no features; the tuner goes on
            out.append(None)
    return out
