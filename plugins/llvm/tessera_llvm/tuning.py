"""One llvm kernel built alone for the tuner (``LLVMBackend.tuning_candidate``), and the
loop-nest features of its configs (``LLVMBackend.tuning_features``).

The region is prepared as ``compile`` prepares it (layouts, packed weights, fused groups;
once per region object in the process), the kernel's group is scheduled with the
candidate's knobs, lowered, compiled for the host and linked; its inputs are the group's
constants and seeded random data of the other inputs' types. For features, the group's
schedule is only lowered to its loop nest (``te.lower``, before the TIR pipeline: 6 ms for
a direct ResNet-50 convolution, 36 ms for a Winograd one, against 50 and 230 ms through the
pipeline), and :func:`tessera.autotune.features.loop_features` reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.ir.graph import Function
from tessera.ir.types import TensorType
from tessera.kernel.tuning import PreparedRegions, config_features
from tessera.plugin.candidate import TuningCandidate, random_array

from .build import build_module
from .cpu import CPUInfo, cpu_info
from .lowering import lower_group, prepare_region, scheduled_loop_nest

#: How far a Winograd convolution's outputs may be from the direct convolution's, relative
#: to their largest magnitude (``TuningCandidate.tolerance``): F(4x4, 3x3) was observed at
#: 2.3e-5 from a float64 reference with 512 input channels, the direct convolution at 2.4e-6
#: (plugins/llvm/tests/test_winograd.py).
WINOGRAD_TOLERANCE = 1e-4

#: Prepared regions of this process: (id(region), CPU and opt level) -> (region, fused
#: groups, kernel names, value types).
_PREPARED = PreparedRegions("llvm")


def _group(region: Function, kernel: str, cpu: CPUInfo, opt_level: int
           ) -> tuple[Any, dict[str, TensorType]]:
    """The fused group that ``kernel`` runs, of ``region`` prepared once per region object
    and CPU (the value types of the prepared region with it)."""
    return _PREPARED.group(region, kernel, repr((cpu, opt_level)),
                           lambda: prepare_region(region, cpu, opt_level))


def llvm_features(region: Function, kernel: str, configs: list[dict[str, Any]], key: str,
                  cpu: CPUInfo, opt_level: int) -> list[list[float] | None]:
    """The loop-nest features of kernel ``kernel`` scheduled with each config (knob values
    of workload ``key``; :func:`~tessera_llvm.lowering.scheduled_loop_nest`); None for a
    config that does not lower."""
    group, _ = _group(region, kernel, cpu, opt_level)
    return config_features(configs, key,
                           lambda overrides: scheduled_loop_nest(group, kernel, cpu, overrides))


def llvm_candidate(region: Function, kernel: str, overrides: dict[str, dict[str, Any]],
                   cpu: CPUInfo, opt_level: int, mcpu: str | None,
                   mattr: str | None) -> TuningCandidate:
    group, types = _group(region, kernel, cpu, opt_level)
    lowered, consts = lower_group(group, kernel, cpu, overrides)
    fn = build_module([lowered.func], f"{kernel}_tune", mcpu=mcpu, mattr=mattr).load() \
        .get(kernel)
    constants = {v.name: np.ascontiguousarray(np.asarray(v.data)) for v in consts}
    rng = np.random.default_rng(0)
    args = [constants[n] if n in constants else random_array(types[n], rng)
            for n in lowered.inputs]
    outs = [np.empty(tuple(types[n].shape), np.dtype(types[n].dtype.numpy))
            for n in lowered.outputs]
    # the workspace allocated once, as the runtime does (a fresh one per call costs page
    # faults that a kernel with large scratch buffers, a Winograd convolution's, pays most)
    scratch = [np.empty(fn.workspace_bytes, np.uint8)] if fn.workspace_bytes else []

    def run() -> None:
        fn(args + outs + scratch)

    inputs = [a for n, a in zip(lowered.inputs, args) if n not in constants and a.size]

    def flush() -> None:
        evict_caches()
        for a in inputs:  # the kernel before it in a model just wrote them
            a.reshape(-1).view(np.uint8).max()

    tolerance = WINOGRAD_TOLERANCE if lowered.config.get("template") == "winograd" else 0.0
    return TuningCandidate(run, lambda: [o.copy() for o in outs], lowered.flops,
                           tolerance=tolerance, flush=flush)


#: The buffer :func:`evict_caches` streams through (made on first use, one per process).
_EVICTION: list[np.ndarray] = []


def eviction_bytes(cpu: CPUInfo) -> int:
    """Twice what this machine's caches hold (every core's L2, the L3), at least 8 MiB: what
    streaming through leaves none of the data before it in the caches."""
    return max(8 << 20, 2 * (cpu.l3_bytes + cpu.l2_bytes * max(1, cpu.num_threads)))


def evict_caches() -> None:
    """Evict every cache line of this machine (the host's cache sizes, read from the OS) by
    reading and writing a buffer of :func:`eviction_bytes`, as a model's other layers do to a
    kernel's weights between two of its runs."""
    if not _EVICTION:
        _EVICTION.append(np.zeros(eviction_bytes(cpu_info()) // 8, np.uint64))
    _EVICTION[0] += np.uint64(1)
