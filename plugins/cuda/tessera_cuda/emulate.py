"""Run a lowered region's CUDA C on the host (:mod:`.host_exec`), group by group, with numpy
arrays: how CI checks the generated kernels of whole graphs against the reference without a
GPU. A region with run-time sizes (``LoweredRegion.size_names``) runs at the ``sizes`` given
(size variable -> int): its buffers are allocated at those sizes and its kernels launched with
them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tessera.errors import RunError

from .host_exec import HostModule
from .lowering import LoweredRegion

__all__ = ["run_on_host"]


def run_on_host(lowered: LoweredRegion, inputs: Mapping[str, np.ndarray],
                sanitize: str | None = None, sizes: Mapping[str, int] | None = None,
                module: HostModule | None = None) -> dict[str, np.ndarray]:
    """The region's outputs for ``inputs`` (by input name), computed by its generated CUDA C
    on the host CPU (``module``: the source already built, to run a region at many sizes);
    a region with run-time sizes needs ``sizes``."""
    if lowered.size_names and sizes is None:
        raise RunError(f"the region's kernels take run-time sizes "
                       f"({', '.join(lowered.size_names)}): pass sizes")
    order = [int(sizes[n]) for n in lowered.size_names] if sizes is not None and \
        lowered.size_names else None
    module = module or HostModule(lowered.source, sanitize=sanitize)
    values: dict[str, np.ndarray] = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
    for name, const in lowered.constants.items():
        values[name] = np.ascontiguousarray(np.asarray(const.data))
    types = {v.name: v.type for v in lowered.func.inputs}
    types.update({v.name: v.type for n in lowered.func.nodes for v in n.outputs})
    for group in lowered.groups:
        arrays: dict[str, np.ndarray] = {}
        params = group.kernels.func.params
        for p, value in zip(params, group.inputs + group.outputs):
            if value not in values:
                t = types[value]
                if not t.is_static:
                    t = t.evaluate(dict(sizes or {}))
                values[value] = np.empty(t.shape, dtype=np.dtype(str(t.dtype)))
            arrays[p.name] = values[value]
        module.run_group(group.kernels, arrays, order if group.kernels.func.size_vars else None)
    return {v.name: values[v.name] for v in lowered.func.outputs}
