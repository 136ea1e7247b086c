"""A backend whose tuning candidates log when they are built, checked and timed (a line per
interval in ``region["log"]``: pid, mode, phase, start, end), importable by the measurement
worker processes: what shows that builds overlap and measurements never do."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from tessera.autotune.measure import TuningCandidate


def _log(path: str, mode: str, phase: str, start: float) -> None:
    line = f"{os.getpid()} {mode} {phase} {start!r} {time.time()!r}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class LoggingBackend:
    name = "logging"

    def tuning_candidate(self, region: dict[str, Any], kernel: str,
                         overrides: dict[str, dict[str, Any]], target: Any,
                         options: Any) -> TuningCandidate:
        mode = str(next(iter(overrides.values()), {}).get("mode", "default"))
        start = time.time()
        if mode != "default":
            time.sleep(region["build_s"])  # "compiling"
            _log(region["log"], mode, "build", start)
        out = np.zeros(8, np.float32)
        calls = [0]

        def run() -> None:
            t = time.time()
            time.sleep(region["run_s"])
            out[:] = np.arange(8, dtype=np.float32)
            calls[0] += 1
            if mode != "default":
                _log(region["log"], mode, "check" if calls[0] == 1 else "time", t)

        return TuningCandidate(run, lambda: [out.copy()], flops=8)


def read_log(path: str) -> list[tuple[int, str, str, float, float]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            pid, mode, phase, start, end = line.split()
            rows.append((int(pid), mode, phase, float(start), float(end)))
    return rows
