"""The llvm tuning candidate's cache flush (``tessera tune --cache-flush``): its weights
evicted by streaming a buffer larger than the caches, its input loaded again; the results do
not change."""

from __future__ import annotations

import numpy as np

import tessera
from plugins.llvm.tests.test_winograd import conv_model, conv_task
from tessera.autotune.measure import time_candidate
from tessera.plugin.target import Target
from tessera_llvm.cpu import cpu_info
from tessera_llvm.schedules.common import CPUInfo
from tessera_llvm.tuning import _EVICTION, eviction_bytes


def test_flushed_runs_compute_the_same() -> None:
    model, _, _ = conv_model(1, 16, 10, 10, 16, 1, seed=3)
    mod = tessera.compile(model, target="llvm", keep_graph_weights=True)
    task = conv_task(mod)
    cr = next(cr for cr in mod.compiled.values() if task.kernels[0] in cr.info["schedules"])
    backend, kind = mod.backends[cr.backend], Target.parse(task.target).kinds[0]
    cand = backend.tuning_candidate(cr.region, task.kernels[0], {}, kind, mod.compile_options)
    assert cand.flush is not None
    cand.run()
    want = [o.copy() for o in cand.outputs()]
    costs = time_candidate(cand, number=2, repeat=2, cache_flush=True)
    assert len(costs) == 2 and all(c > 0 for c in costs)
    assert all(np.array_equal(g, w) for g, w in zip(cand.outputs(), want))
    assert _EVICTION and _EVICTION[0].nbytes == eviction_bytes(cpu_info()) // 8 * 8


def test_eviction_covers_every_cache() -> None:
    cpu = CPUInfo(l2_bytes=1 << 20, l3_bytes=32 << 20, num_threads=2)
    assert eviction_bytes(cpu) == 2 * (34 << 20)
    assert eviction_bytes(CPUInfo(l2_bytes=256 << 10, l3_bytes=1 << 20, num_threads=1)) \
        == 8 << 20
