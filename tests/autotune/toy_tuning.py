"""A backend whose tuning candidates misbehave on request (knob ``mode``), importable by the
measurement worker process: ``ok`` computes the right output, ``slow`` too but slower,
``wrong`` a wrong one, ``crash`` kills its process, ``hang`` never returns, ``raise`` fails
to build, ``cold`` is 3 ms slower on a run after its ``flush`` (a cache miss)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from tessera.autotune.measure import TuningCandidate


class MisbehavingBackend:
    name = "misbehaving"

    def tuning_candidate(self, region: Any, kernel: str, overrides: dict[str, dict[str, Any]],
                         target: Any, options: Any) -> TuningCandidate:
        config = next(iter(overrides.values()), {})
        mode = config.get("mode", "ok")
        if mode == "raise":
            raise ValueError("this candidate does not build")
        x = np.arange(16, dtype=np.float32) * region["scale"]
        out = np.zeros(16, np.float32)
        cold = [False]

        def run() -> None:
            if cold[0]:
                time.sleep(0.003)
                cold[0] = False
            if mode == "crash":
                os._exit(3)
            if mode == "hang":
                time.sleep(3600)
            if mode == "slow":
                time.sleep(0.002)
            out[:] = x + (1.0 if mode == "wrong" else 0.0)

        def flush() -> None:
            cold[0] = True

        return TuningCandidate(run, lambda: [out.copy()], flops=16,
                               flush=flush if mode == "cold" else None)
