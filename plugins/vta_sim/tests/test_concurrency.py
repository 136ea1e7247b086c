"""A module with VTA regions called from many threads: fsim runs in parallel (each call packs
its own DRAM image), tsim takes turns on the one Verilated core; every result equals the
single-threaded one, and counters stay whole."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

tessera = pytest.importorskip("tessera")

from plugins.vta_sim.tests.test_plugin import qdq_layer  # noqa: E402
from tessera.plugin import get_backends  # noqa: E402
from tessera_vta.tsim import unavailable_reason  # noqa: E402

pytestmark = pytest.mark.skipif(
    "vta_sim" not in get_backends(),
    reason="the vta_sim entry point is not registered (pip install -e plugins/vta_sim)")

THREADS = 4
TSIM = unavailable_reason()


@pytest.mark.parametrize("sim", ["fsim", pytest.param("tsim", marks=pytest.mark.skipif(
    TSIM is not None, reason=f"tsim unavailable: {TSIM}"))])
def test_threads_share_one_vta_module(sim):
    rng = np.random.default_rng(11)
    model, x_shape = qdq_layer(rng, n=1, c=16, h=8, w=8, o=16)
    mod = tessera.compile(model, target=f"vta_sim -sim={sim}, ref")
    assert any(r.backend == "vta_sim" for r in mod.partition_report().regions)
    xs = [(rng.standard_normal(x_shape) * 1.5).astype(np.float32) for _ in range(THREADS * 2)]
    want = [mod.run(x=x)["y"] for x in xs]
    assert len({w.tobytes() for w in want}) == len(want)  # distinct inputs, distinct outputs
    calls = 3 if sim == "tsim" else 6
    start = threading.Barrier(THREADS)

    def worker(t: int) -> list[bool]:
        start.wait()
        return [np.array_equal(mod.run(x=xs[(t + c) % len(xs)])["y"], want[(t + c) % len(xs)])
                for c in range(calls)]

    with ThreadPoolExecutor(THREADS) as pool:
        ok = [o for os in pool.map(worker, range(THREADS)) for o in os]
    assert all(ok), f"{ok.count(False)} of {len(ok)} concurrent results differ"
    counters = mod.profile(x=xs[0]).counters["vta_sim"]
    assert counters["gemm_macs"] > 0 and counters["instructions"] > 0
