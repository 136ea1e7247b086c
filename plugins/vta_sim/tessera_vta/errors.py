"""The errors tessera-vta raises on purpose; each message names the instruction or field."""

from __future__ import annotations


class VTAError(Exception):
    """Base class of every tessera-vta error."""


class EncodingError(VTAError, ValueError):
    """A field does not fit its bit width, or bits do not decode to a valid instruction."""


class AsmError(VTAError, ValueError):
    """A line of assembly text could not be parsed."""


class SimulationError(VTAError, RuntimeError):
    """An instruction stream misbehaved in a simulator (out-of-range access, bad stream)."""


class DeadlockError(SimulationError):
    """No module can proceed: every unfinished module waits for a token nobody will push."""


class TokenError(SimulationError):
    """The stream reached FINISH with tokens left in a queue or unordered instructions."""


class CompileError(VTAError, ValueError):
    """A layer cannot be lowered to VTA instructions (unsupported shape or parameter)."""


class TsimError(VTAError, RuntimeError):
    """The Verilog simulator could not be built or run, or it disagreed with the stream."""


class TsimUnavailable(TsimError):
    """Verilator or pyverilator is missing; the message says which and how to install it."""
