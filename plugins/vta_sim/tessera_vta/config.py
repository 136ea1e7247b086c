"""The VTA hardware configuration: one frozen value, loadable from and savable to JSON.

The defaults are VTA's own (shared/VTA.md): a 1x16x16 int8 GEMM core with int32 accumulators,
a 32 KiB micro-op buffer, 32 KiB input buffer, 256 KiB weight buffer and 128 KiB accumulator
buffer. Sizes are kept as base-2 logarithms, as in TVM's ``vta_config.json``, whose files this
class also reads (``TARGET`` and ``HW_VER`` are accepted and ignored).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Keys of TVM's vta_config.json that describe the board, not the core; read and ignored.
_IGNORED_TVM_KEYS = frozenset({"target", "hw_ver"})

#: Bits of one micro-op and of one instruction.
UOP_BITS = 32
INSN_BITS = 128


@dataclass(frozen=True)
class VTAConfig:
    """Parameters of one VTA core. Every derived size is a property."""

    log_inp_width: int = 3
    log_wgt_width: int = 3
    log_acc_width: int = 5
    log_batch: int = 0
    log_block: int = 4
    log_uop_buff_size: int = 15
    log_inp_buff_size: int = 15
    log_wgt_buff_size: int = 18
    log_acc_buff_size: int = 17
    #: Clock used to turn cycle counts into time (100 MHz: Pynq).
    clock_mhz: float = 100.0
    #: Width of each module's DRAM port in bytes a cycle (a 64-bit AXI bus: 8).
    dram_bytes_per_cycle: int = 8

    def __post_init__(self) -> None:
        for name in ("log_inp_width", "log_wgt_width", "log_acc_width"):
            expected = 5 if name == "log_acc_width" else 3
            if getattr(self, name) != expected:
                raise ValueError(
                    f"VTAConfig.{name} = {getattr(self, name)}: only int8 inputs/weights and "
                    f"int32 accumulators are modelled (expected {expected})"
                )
        if not 0 <= self.log_batch <= 4:
            raise ValueError(f"VTAConfig.log_batch = {self.log_batch}: expected 0..4")
        if not 1 <= self.log_block <= 6:
            raise ValueError(f"VTAConfig.log_block = {self.log_block}: expected 1..6")
        for name, depth in (
            ("log_uop_buff_size", self.log_uop_depth),
            ("log_inp_buff_size", self.log_inp_depth),
            ("log_wgt_buff_size", self.log_wgt_depth),
            ("log_acc_buff_size", self.log_acc_depth),
        ):
            if depth < 1:
                raise ValueError(
                    f"VTAConfig.{name} = {getattr(self, name)} leaves a buffer of {2**depth} "
                    "element(s): too small for one element per row"
                )
        if self.log_uop_depth > 13:
            raise ValueError(
                f"a micro-op buffer of {self.uop_depth} entries needs {self.log_uop_depth}-bit "
                "uop_bgn fields; the first instruction word has room for 13"
            )
        uop_fields = self.log_acc_depth + self.log_inp_depth + self.log_wgt_depth
        if uop_fields > UOP_BITS:
            raise ValueError(
                f"micro-op fields need {uop_fields} bits (acc {self.log_acc_depth} + inp "
                f"{self.log_inp_depth} + wgt {self.log_wgt_depth}) but a micro-op has {UOP_BITS}"
            )
        factors = 2 * (self.log_acc_depth + self.log_inp_depth + self.log_wgt_depth)
        if 64 + factors > INSN_BITS:
            raise ValueError(
                f"GEMM loop factors need {factors} bits, more than the 64 an instruction has left"
            )
        if self.dram_bytes_per_cycle not in (4, 8, 16, 32, 64):
            raise ValueError(
                f"VTAConfig.dram_bytes_per_cycle = {self.dram_bytes_per_cycle}: "
                "expected 4, 8, 16, 32 or 64"
            )
        if self.clock_mhz <= 0:
            raise ValueError(f"VTAConfig.clock_mhz = {self.clock_mhz}: expected > 0")

    # -- tensor shapes -------------------------------------------------------------------------

    @property
    def batch(self) -> int:
        """Rows of one GEMM operand (BATCH)."""
        return 1 << self.log_batch

    @property
    def block(self) -> int:
        """BLOCK_IN = BLOCK_OUT: the GEMM core multiplies (batch x block) by (block x block)."""
        return 1 << self.log_block

    @property
    def block_in(self) -> int:
        return self.block

    @property
    def block_out(self) -> int:
        return self.block

    @property
    def macs_per_cycle(self) -> int:
        """Multiply-accumulates of one GEMM micro-op iteration."""
        return self.batch * self.block_in * self.block_out

    @property
    def peak_gops(self) -> float:
        """Peak throughput in giga-operations (2 per MAC) a second at ``clock_mhz``."""
        return 2 * self.macs_per_cycle * self.clock_mhz / 1000.0

    # -- element sizes in bytes (DRAM addresses count in these units) ---------------------------

    @property
    def inp_elem_bytes(self) -> int:
        """One input row: batch x block_in int8."""
        return self.batch * self.block_in * (1 << self.log_inp_width) // 8

    @property
    def wgt_elem_bytes(self) -> int:
        """One weight block: block_out x block_in int8."""
        return self.block_out * self.block_in * (1 << self.log_wgt_width) // 8

    @property
    def acc_elem_bytes(self) -> int:
        """One accumulator row: batch x block_out int32."""
        return self.batch * self.block_out * (1 << self.log_acc_width) // 8

    @property
    def out_elem_bytes(self) -> int:
        """One output row: batch x block_out int8."""
        return self.batch * self.block_out

    @property
    def uop_elem_bytes(self) -> int:
        return UOP_BITS // 8

    # -- buffer depths (elements), as base-2 logarithms and counts ------------------------------

    @property
    def log_uop_depth(self) -> int:
        return self.log_uop_buff_size - (UOP_BITS.bit_length() - 1) + 3

    @property
    def log_inp_depth(self) -> int:
        return self.log_inp_buff_size - (self.inp_elem_bytes.bit_length() - 1)

    @property
    def log_wgt_depth(self) -> int:
        return self.log_wgt_buff_size - (self.wgt_elem_bytes.bit_length() - 1)

    @property
    def log_acc_depth(self) -> int:
        return self.log_acc_buff_size - (self.acc_elem_bytes.bit_length() - 1)

    @property
    def uop_depth(self) -> int:
        return 1 << self.log_uop_depth

    @property
    def inp_depth(self) -> int:
        return 1 << self.log_inp_depth

    @property
    def wgt_depth(self) -> int:
        return 1 << self.log_wgt_depth

    @property
    def acc_depth(self) -> int:
        return 1 << self.log_acc_depth

    @property
    def out_depth(self) -> int:
        """The output buffer has one int8 row per accumulator row."""
        return self.acc_depth

    # -- JSON ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VTAConfig:
        """Build from a dict; keys are matched case-insensitively (TVM writes them upper-case)."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            name = key.lower()
            if name in _IGNORED_TVM_KEYS:
                continue
            if name not in known:
                raise ValueError(
                    f"unknown VTA configuration key {key!r}; known keys: {', '.join(sorted(known))}"
                )
            kwargs[name] = value
        return cls(**kwargs)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> VTAConfig:
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> VTAConfig:
        return cls.from_json(Path(path).read_text())


DEFAULT_CONFIG = VTAConfig()
