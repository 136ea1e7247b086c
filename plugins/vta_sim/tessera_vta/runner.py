"""Running compiled programs on either simulator."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import tsim
from .compiler.program import Program
from .fsim import run_fsim
from .machine import Counters


@dataclass
class RunResult:
    """A layer's output and what the simulator measured.

    ``counters`` come from fsim (its cycles are the timing model's estimate); ``cycles`` is
    fsim's estimate or, with tsim, the Verilog model's count from launch to FINISH.
    """

    output: np.ndarray
    cycles: int
    simulator: str
    counters: Counters | None = None

    def gops(self, macs: int, clock_mhz: float) -> float:
        """Giga-operations a second (2 per MAC) implied by ``cycles`` at ``clock_mhz``."""
        return 2 * macs * clock_mhz * 1e6 / max(self.cycles, 1) / 1e9


def run(program: Program, x: np.ndarray, sim: str = "fsim") -> RunResult:
    """Run ``program`` on input ``x`` with ``sim`` = "fsim" (numpy) or "tsim" (Verilog)."""
    dram = program.dram_with_input(x)
    if sim == "fsim":
        final, counters = run_fsim(program.insns, dram, program.config)
        return RunResult(program.read_output(final), counters.cycles, "fsim", counters)
    if sim == "tsim":
        final, cycles = tsim.run_tsim(program.insns, dram, program.config)
        return RunResult(program.read_output(final), cycles, "tsim")
    raise ValueError(f"unknown simulator {sim!r}: expected 'fsim' or 'tsim'")
