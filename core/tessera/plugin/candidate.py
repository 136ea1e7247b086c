"""What ``Backend.tuning_candidate`` returns: one kernel built alone for the tuner to measure,
and the seeded random data its inputs are filled with. Part of the plugin contract, so that a
backend builds candidates without importing the tuner (:mod:`tessera.autotune.measure` times
them in worker processes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["TuningCandidate", "random_array"]


@dataclass
class TuningCandidate:
    """One kernel built alone: ``run()`` computes it once on its buffers, ``outputs()``
    returns host copies of its outputs, ``flops`` is its work per run (0 when unknown).
    ``tolerance``: how far its outputs may be from another config's, relative to their
    largest magnitude, on top of :func:`check_outputs`' tolerances: a config that computes
    by another algorithm, which rounds differently (a Winograd convolution). ``timer``:
    for a device with its own clock (a GPU's events), ``timer(n)`` runs the kernel ``n`` times
    and returns the seconds per run the device measured; None: the host's clock times
    ``run()``. ``flush``: puts the caches in the state a run inside a model finds them in
    (its constants evicted, its other inputs loaded), for ``cache_flush`` measurements;
    None: the backend cannot (such a candidate is timed without it)."""

    run: Callable[[], None]
    outputs: Callable[[], list[np.ndarray]]
    flops: int = 0
    tolerance: float = 0.0
    timer: Callable[[int], float] | None = None
    flush: Callable[[], None] | None = None


def random_array(t: Any, rng: np.random.Generator) -> np.ndarray:
    """Seeded data of tensor type ``t`` for a candidate's inputs: standard normal floats,
    small integers (-8 to 8 within the type's range), random booleans."""
    dtype = np.dtype(t.dtype.numpy)
    shape = tuple(int(d) for d in t.shape)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -8), min(info.max, 8), shape, endpoint=True).astype(dtype)
