"""fsim: the functional simulator. Runs an instruction stream as VTA's three modules would.

Instructions are dispatched in order to the load, compute and store modules; each module runs its
own instructions in order. The modules are scheduled round-robin, one instruction a turn; an
instruction whose pop flags name an empty token queue waits. When no module can move the stream
deadlocks (:class:`DeadlockError`). At FINISH every load and store must be ordered before it
through tokens and every queue must be empty (:class:`TokenError`). Errors name the instruction
by index and disassembly.

Besides the data, the simulator keeps counters and an estimated cycle count
(:mod:`tessera_vta.timing`): each module has its own clock, and a pop waits for the push time of
the token it takes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .asm import disassemble
from .config import VTAConfig
from .errors import DeadlockError, SimulationError, TokenError
from .isa import Alu, Finish, Gemm, Instruction, Load, Module, Store
from .machine import Counters, Machine
from .timing import insn_cycles

#: The four token queues, named (producer, consumer).
QUEUES = (
    (Module.LOAD, Module.COMPUTE),
    (Module.COMPUTE, Module.LOAD),
    (Module.COMPUTE, Module.STORE),
    (Module.STORE, Module.COMPUTE),
)

_PREV = {Module.COMPUTE: Module.LOAD, Module.STORE: Module.COMPUTE}
_NEXT = {Module.LOAD: Module.COMPUTE, Module.COMPUTE: Module.STORE}


def describe(index: int, insn: Instruction) -> str:
    """``#index 'text'``: how errors name an instruction."""
    return f"#{index} '{disassemble(insn)}'"


def queue_name(queue: tuple[Module, Module]) -> str:
    return f"{queue[0].name.lower()}->{queue[1].name.lower()}"


def pop_queues(module: Module, insn: Instruction) -> list[tuple[Module, Module]]:
    """The token queues ``insn`` pops from when run by ``module``."""
    queues = []
    if insn.pop_prev and module in _PREV:
        queues.append((_PREV[module], module))
    if insn.pop_next and module in _NEXT:
        queues.append((_NEXT[module], module))
    return queues


def push_queues(module: Module, insn: Instruction) -> list[tuple[Module, Module]]:
    """The token queues ``insn`` pushes to when run by ``module``."""
    queues = []
    if insn.push_prev and module in _PREV:
        queues.append((module, _PREV[module]))
    if insn.push_next and module in _NEXT:
        queues.append((module, _NEXT[module]))
    return queues


def check_stream(insns: list[Instruction]) -> None:
    """Static checks: exactly one FINISH, last; no flag naming a queue the module lacks."""
    finishes = [i for i, insn in enumerate(insns) if isinstance(insn, Finish)]
    if not finishes:
        raise SimulationError("the stream has no FINISH instruction")
    if finishes[0] != len(insns) - 1:
        first, after = finishes[0], finishes[0] + 1
        raise SimulationError(
            f"{describe(after, insns[after])} comes after FINISH {describe(first, insns[first])}"
        )
    for index, insn in enumerate(insns):
        module = insn.module
        for flag, table in (("prev", _PREV), ("next", _NEXT)):
            if (getattr(insn, f"pop_{flag}") or getattr(insn, f"push_{flag}")) and (
                module not in table
            ):
                raise SimulationError(
                    f"{describe(index, insn)}: the {module.name.lower()} module has no "
                    f"'{flag}' module, so {flag} dependency flags are invalid"
                )


@dataclass
class _Token:
    """A token in a queue: when it was pushed, by whom, and the pusher's vector clock."""

    time: int
    pusher: int
    clock: tuple[int, ...]


@dataclass
class _ModuleState:
    insns: list[tuple[int, Instruction]]
    position: int = 0
    time: int = 0
    #: Instructions of each module known to have completed before this module's next one.
    clock: list[int] = field(default_factory=lambda: [0, 0, 0])

    @property
    def done(self) -> bool:
        return self.position >= len(self.insns)

    @property
    def head(self) -> tuple[int, Instruction]:
        return self.insns[self.position]


class FunctionalSimulator:
    """Runs instruction streams against one :class:`Machine` (DRAM + SRAM buffers)."""

    def __init__(self, config: VTAConfig, dram: np.ndarray) -> None:
        self.config = config
        self.machine = Machine(config, dram)

    @property
    def counters(self) -> Counters:
        return self.machine.counters

    def run(self, insns: list[Instruction]) -> Counters:
        """Execute ``insns`` to FINISH; returns the counters (also kept on the simulator)."""
        check_stream(insns)
        modules = {m: _ModuleState([]) for m in Module}
        for index, insn in enumerate(insns):
            modules[insn.module].insns.append((index, insn))
        queues: dict[tuple[Module, Module], deque[_Token]] = {q: deque() for q in QUEUES}
        counts = {m: len(state.insns) for m, state in modules.items()}
        start_cycles = self.counters.cycles
        while True:
            progressed = False
            for module in Module:
                state = modules[module]
                if state.done:
                    continue
                index, insn = state.head
                wanted = pop_queues(module, insn)
                if any(not queues[q] for q in wanted):
                    continue
                tokens = [queues[q].popleft() for q in wanted]
                self._step(module, state, index, insn, tokens, queues)
                progressed = True
                if isinstance(insn, Finish):
                    self._check_finish(index, insn, state, modules, counts, queues)
                    self.counters.cycles = start_cycles + state.time
                    return self.counters
            if not progressed:
                raise DeadlockError(self._deadlock_message(modules, queues))

    def _step(
        self,
        module: Module,
        state: _ModuleState,
        index: int,
        insn: Instruction,
        tokens: list[_Token],
        queues: dict[tuple[Module, Module], deque[_Token]],
    ) -> None:
        start = max([state.time] + [token.time for token in tokens])
        for token in tokens:
            state.clock = [max(a, b) for a, b in zip(state.clock, token.clock)]
        try:
            self._execute(insn)
        except SimulationError as err:
            raise SimulationError(f"{describe(index, insn)}: {err}") from None
        state.time = start + insn_cycles(insn, self.config)
        state.position += 1
        state.clock[module] += 1
        for queue in push_queues(module, insn):
            queues[queue].append(_Token(state.time, index, tuple(state.clock)))
        name = type(insn).__name__.upper()
        self.counters.instructions[name] = self.counters.instructions.get(name, 0) + 1

    def _execute(self, insn: Instruction) -> None:
        if isinstance(insn, Load):
            self.machine.load(insn)
        elif isinstance(insn, Store):
            self.machine.store(insn)
        elif isinstance(insn, Gemm):
            self.machine.gemm(insn)
        elif isinstance(insn, Alu):
            self.machine.alu(insn)

    @staticmethod
    def _check_finish(
        index: int,
        insn: Instruction,
        state: _ModuleState,
        modules: dict[Module, _ModuleState],
        counts: dict[Module, int],
        queues: dict[tuple[Module, Module], deque[_Token]],
    ) -> None:
        for other in (Module.LOAD, Module.STORE):
            ordered = state.clock[other]
            if ordered < counts[other]:
                first_index, first = modules[other].insns[ordered]
                raise TokenError(
                    f"FINISH {describe(index, insn)} is not ordered after "
                    f"{describe(first_index, first)} of the {other.name.lower()} module: no "
                    "chain of tokens makes FINISH wait for it, so the host could see the stream "
                    "done while it still runs"
                )
        leftovers = [
            f"{len(tokens)} in {queue_name(queue)} (pushed by "
            + ", ".join(f"#{token.pusher}" for token in tokens)
            + ")"
            for queue, tokens in queues.items()
            if tokens
        ]
        if leftovers:
            raise TokenError(
                f"tokens left at FINISH {describe(index, insn)}: " + "; ".join(leftovers)
            )

    @staticmethod
    def _deadlock_message(
        modules: dict[Module, _ModuleState],
        queues: dict[tuple[Module, Module], deque[_Token]],
    ) -> str:
        lines = ["deadlock: no module can proceed"]
        for module, state in modules.items():
            if state.done:
                lines.append(f"  {module.name.lower()} module: all its instructions done")
                continue
            index, insn = state.head
            empty = [queue_name(q) for q in pop_queues(module, insn) if not queues[q]]
            lines.append(
                f"  {module.name.lower()} module waits at {describe(index, insn)} "
                f"for a token in {', '.join(empty)}"
            )
        return "\n".join(lines)


def run_fsim(
    insns: list[Instruction], dram: np.ndarray, config: VTAConfig
) -> tuple[np.ndarray, Counters]:
    """Run ``insns`` on a copy of ``dram``; returns (final DRAM, counters)."""
    simulator = FunctionalSimulator(config, dram.copy())
    counters = simulator.run(insns)
    return simulator.machine.dram, counters
