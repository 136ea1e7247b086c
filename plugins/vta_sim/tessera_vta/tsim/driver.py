"""Running instruction streams on the Verilated core.

The stream is encoded and appended to a copy of the DRAM image; the C++ harness points the
RTL's DPI memory functions at that buffer, launches the core and clocks it until FINISH. Each
run starts from a freshly constructed core (zeroed buffers, as in fsim). The result is the final
DRAM and the cycle count from launch to FINISH, checked the way fsim checks a stream: no stall
(deadlock), no access outside DRAM, no tokens or instructions left over.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import VTAConfig
from ..errors import TsimError
from ..fsim import check_stream, describe
from ..isa import Alu, AluOp, Instruction, Module, encode_stream
from ..timing import insn_cycles
from .build import build_model

#: Cycles in a row with nothing moving that count as a deadlock.
STALL_LIMIT = 64
_INSN_ALIGN = 64


@dataclass
class TsimStatus:
    """What the core reported at the end of a run."""

    done: bool
    cycles: int
    fetched: int
    executed: dict[Module, int]
    tokens: dict[str, int]
    queues_empty: bool


class TsimModel:
    """One loaded Verilated core (one pyverilator instance) for one configuration.

    There is one core and one harness DRAM pointer per process, so :meth:`run` holds a lock:
    concurrent runs (a module called from several threads) take turns on the core."""

    def __init__(self, library: Path, config: VTAConfig) -> None:
        import pyverilator

        self.config = config
        self._lock = threading.Lock()
        self.sim = pyverilator.PyVerilator(str(library))
        lib = self.sim.lib
        lib.vta_harness_set_dram.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.vta_harness_bad_accesses.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        lib.vta_harness_bad_accesses.restype = ctypes.c_uint64
        lib.vta_harness_run.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_uint32,
            ctypes.c_uint64,
            ctypes.c_uint32,
        ]
        lib.vta_harness_run.restype = ctypes.c_int
        lib.construct.restype = ctypes.c_void_p
        lib.destruct.argtypes = [ctypes.c_void_p]

    def _fresh_core(self) -> None:
        """Replace the Verilated core with a new one: every buffer and queue starts at zero,
        as in fsim, so no state leaks from one run into the next."""
        lib = self.sim.lib
        lib.destruct(self.sim.model)
        self.sim.model = lib.construct()

    def _status(self) -> TsimStatus:
        io = self.sim.io
        return TsimStatus(
            done=bool(io.done),
            cycles=int(io.cycles),
            fetched=int(io.fetched),
            executed={
                Module.LOAD: int(io.load_executed),
                Module.COMPUTE: int(io.compute_executed),
                Module.STORE: int(io.store_executed),
            },
            tokens={
                "load->compute": int(io.tokens_load_compute),
                "compute->load": int(io.tokens_compute_load),
                "compute->store": int(io.tokens_compute_store),
                "store->compute": int(io.tokens_store_compute),
            },
            queues_empty=bool(io.queues_empty),
        )

    def run(
        self, insns: list[Instruction], dram: np.ndarray, max_cycles: int | None = None
    ) -> tuple[np.ndarray, int]:
        """Run ``insns`` against a copy of ``dram``; returns (final DRAM, cycles to FINISH)."""
        check_stream(insns)
        for index, insn in enumerate(insns):
            if isinstance(insn, Alu) and insn.alu_opcode == AluOp.MUL:
                raise TsimError(
                    f"{describe(index, insn)}: ALU MUL exists only in the functional simulator "
                    "(as in VTA); the Verilog core has no multiplier in its ALU"
                )
        code = np.frombuffer(encode_stream(insns, self.config), dtype=np.uint8)
        insn_addr = -(-dram.size // _INSN_ALIGN) * _INSN_ALIGN
        if insn_addr + code.size >= 1 << 32:
            raise TsimError("DRAM image and instructions exceed the 32-bit address space")
        memory = np.zeros(insn_addr + code.size, dtype=np.uint8)
        memory[: dram.size] = dram
        memory[insn_addr:] = code
        if max_cycles is None:
            max_cycles = 4 * sum(insn_cycles(insn, self.config) for insn in insns) + 100_000

        with self._lock:
            self._fresh_core()
            lib = self.sim.lib
            lib.vta_harness_set_dram(memory.ctypes.data, memory.size)
            try:
                outcome = lib.vta_harness_run(
                    self.sim.model, insn_addr, len(insns), max_cycles, STALL_LIMIT
                )
                first_bad = ctypes.c_uint64(0)
                bad = lib.vta_harness_bad_accesses(ctypes.byref(first_bad))
            finally:
                lib.vta_harness_set_dram(None, 0)
            status = self._status()
        self._check(insns, outcome, status, max_cycles)
        if bad:
            raise TsimError(
                f"tsim made {bad} DRAM access(es) outside the {dram.size}-byte image "
                f"(first at byte {first_bad.value})"
            )
        return memory[: dram.size].copy(), status.cycles

    @staticmethod
    def _check(insns: list[Instruction], outcome: int, status: TsimStatus, max_cycles: int) -> None:
        per_module: dict[Module, list[int]] = {m: [] for m in Module}
        for index, insn in enumerate(insns):
            per_module[insn.module].append(index)
        if outcome != 0:
            why = "stalled (deadlock)" if outcome == 1 else f"ran past {max_cycles} cycles"
            lines = [f"tsim {why} after {status.cycles} cycles; fetched {status.fetched}"]
            for module, indices in per_module.items():
                done = status.executed[module]
                if done < len(indices):
                    head = indices[done]
                    lines.append(
                        f"  {module.name.lower()} module waits at {describe(head, insns[head])}"
                    )
            lines.append(f"  tokens: {status.tokens}")
            raise TsimError("\n".join(lines))
        leftover = {name: count for name, count in status.tokens.items() if count}
        pending = {
            m.name.lower(): len(per_module[m]) - status.executed[m]
            for m in Module
            if status.executed[m] < len(per_module[m])
        }
        if leftover or pending or not status.queues_empty:
            raise TsimError(
                f"tsim reached FINISH with tokens left {leftover} and instructions pending "
                f"{pending}: the stream does not synchronize its end"
            )


_MODELS: dict[VTAConfig, TsimModel] = {}
_MODELS_LOCK = threading.Lock()


def load_model(config: VTAConfig, verbose: bool = False) -> TsimModel:
    """The core for ``config``, built (or taken from the cache) and loaded once per process."""
    with _MODELS_LOCK:
        if config not in _MODELS:
            _MODELS[config] = TsimModel(build_model(config, verbose=verbose), config)
        return _MODELS[config]


def run_tsim(
    insns: list[Instruction], dram: np.ndarray, config: VTAConfig
) -> tuple[np.ndarray, int]:
    """Run ``insns`` on the Verilog core; returns (final DRAM, cycles from launch to FINISH)."""
    return load_model(config).run(insns, dram)
