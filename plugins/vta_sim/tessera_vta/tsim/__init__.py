"""tsim: the Verilog model of the VTA core, built with Verilator and driven through pyverilator.

``run_tsim(insns, dram, config)`` runs a stream bit-exactly like fsim and returns the final DRAM
and the cycle count from launch to FINISH. ``unavailable_reason()`` says why it cannot run here.
"""

from __future__ import annotations

from .build import build_model, cache_root, unavailable_reason
from .driver import TsimModel, load_model, run_tsim

__all__ = [
    "TsimModel",
    "build_model",
    "cache_root",
    "load_model",
    "run_tsim",
    "unavailable_reason",
]
