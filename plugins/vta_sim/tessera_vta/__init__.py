"""tessera-vta: a simulated VTA accelerator (ISA, compiler, numpy fsim, Verilog tsim)."""

from __future__ import annotations

from .config import DEFAULT_CONFIG, VTAConfig

__all__ = ["DEFAULT_CONFIG", "VTAConfig"]
__version__ = "0.1.0"
