"""One cuda kernel built alone for the tuner (``CUDABackend.tuning_candidate``).

The backend lowers the region with the candidate's knobs
(:func:`~tessera_cuda.backend.build_region`: the same schedules, pipeline and NVRTC compile as
``compile``); :func:`cuda_candidate` loads its cubin on the GPU and binds
the fused group named ``kernel`` to buffers of its own: the group's constants and seeded
random data of its other inputs, copied to the device once. ``run()`` launches the group's
kernels on the device's stream and waits for them; the tuner times ``timer(n)``: n launches
between two events on the stream, as the GPU's clock measures them.

:func:`cuda_features` (``CUDABackend.tuning_features``) lowers the group's schedule with
each config to its loop nest (``te.lower``, before the cuda TIR pipeline) and reads its
features
(:func:`tessera.autotune.features.loop_features`); that needs neither NVRTC nor a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import CompileError
from tessera.ir.graph import Function
from tessera.kernel.lowering import prepare_region
from tessera.kernel.tuning import PreparedRegions, config_features
from tessera.plugin.candidate import TuningCandidate, random_array

from .driver import CUDADevice, LoadedModule
from .graphs import make_group_kernel
from .lowering import lower_group_tir

#: Fused regions of this process: (id(region), opt_level) -> (region, groups, kernel names,
#: value types).
_FUSED = PreparedRegions("cuda")


def cuda_features(region: Function, kernel: str, configs: list[dict[str, Any]], key: str,
                  gpu: Any, opt_level: int) -> list[list[float] | None]:
    """The loop-nest features of the group ``kernel`` lowered with each config (knob values of
    workload ``key``) for ``gpu``; None for a config that does not lower (a block too large
    for the GPU, say)."""
    group, _ = _FUSED.group(region, kernel, opt_level,
                            lambda: prepare_region(region, opt_level))
    return config_features(
        configs, key,
        lambda overrides: lower_group_tir(group, kernel, gpu, overrides, passes=False)[0])


def cuda_candidate(device: CUDADevice, region: Function, built: Any,
                   kernel: str) -> TuningCandidate:
    """The fused group ``kernel`` of ``built`` (``region`` built with the candidate's knobs: a
    :class:`~tessera_cuda.backend.BuiltRegion`) loaded on ``device``, a GPU, and bound to
    buffers of its own."""
    entry = next((e for e in built.table if e["name"] == kernel), None)
    if entry is None:
        raise CompileError(f"cuda: region {region.name} has no kernel {kernel!r} (it has "
                           f"{', '.join(e['name'] for e in built.table)})")
    module = LoadedModule.load(device, built.cubin, [x["kernel"] for x in entry["launches"]])
    compiled_kernel, _ = make_group_kernel(module, entry)
    types = {v.name: v.type for v in built.lowered.func.inputs}
    types.update({v.name: v.type for n in built.lowered.func.nodes for v in n.outputs})
    constants = {k: np.ascontiguousarray(np.asarray(v.data))
                 for k, v in built.lowered.constants.items()}
    rng = np.random.default_rng(0)
    host_in = [constants[n] if n in constants else random_array(types[n], rng)
               for n in entry["inputs"]]
    ins = [device.from_host(a) for a in host_in]
    outs_host = [np.empty(tuple(types[n].shape), np.dtype(types[n].dtype.numpy))
                 for n in entry["outputs"]]
    outs = [device.from_host(o) for o in outs_host]
    workspace = int(entry.get("workspace", 0))
    scratch = [device.from_host(np.zeros(workspace, np.uint8))] if workspace else []

    def run() -> None:
        compiled_kernel.fn(ins, outs + scratch)
        device.synchronize()

    def timer(n: int) -> float:
        start = device.record_event()
        for _ in range(n):
            compiled_kernel.fn(ins, outs + scratch)
        return device.elapsed_ms(start, device.record_event()) / 1000.0 / n

    def outputs() -> list[np.ndarray]:
        for buf, host in zip(outs, outs_host):
            device.copy_to_host(buf, host)
        device.synchronize()
        return [o.copy() for o in outs_host]

    return TuningCandidate(run, outputs, int(entry.get("flops", 0)), timer=timer)
