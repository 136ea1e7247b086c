"""Execution states for concurrent runs: a pool that grows on demand.

An execution state is an :class:`~tessera.runtime.executor.Executor`: the arenas of one run
(one per device) and the kernel calls and sequences bound to them. Constants are not part of
it: every state reads the compiled regions' constant buffers. ``Module.run(**inputs)`` takes a
state from the pool for the length of the call, so calls from several threads run in parallel,
each in memory of its own; a call that finds no idle state builds a new one. At most
``max_idle`` idle states are kept; a state returned while that many are idle is dropped (its
arenas freed), so a burst of concurrency does not pin memory for ever.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from tessera.plugin.threads import affinity_cpus

State = TypeVar("State")


def default_max_idle() -> int:
    """Idle states a pool keeps: the CPUs this process may run on, at least 2 (services rarely
    run more calls at once than there are cores to run them)."""
    return max(2, affinity_cpus())


class StatePool(Generic[State]):
    """Idle execution states, handed out one caller at a time.

    ``factory`` builds a new state; it runs outside the pool's lock, so a slow build does not
    hold back calls that find an idle state."""

    def __init__(self, factory: Callable[[], State], max_idle: int | None = None) -> None:
        self._factory = factory
        self._idle: list[State] = []
        self._lock = threading.Lock()
        self.max_idle = default_max_idle() if max_idle is None else max(1, max_idle)
        #: States built so far (for reports and tests).
        self.created = 0

    def acquire(self) -> State:
        """An idle state, or a new one when none is idle. The caller owns it until
        :meth:`release`."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self.created += 1
        try:
            return self._factory()
        except BaseException:
            with self._lock:
                self.created -= 1
            raise

    def release(self, state: State) -> None:
        """Give ``state`` back; it is dropped when ``max_idle`` states are already idle."""
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(state)

    @contextmanager
    def state(self) -> Iterator[State]:
        """``with pool.state() as s:`` owns ``s`` for the block."""
        s = self.acquire()
        try:
            yield s
        finally:
            self.release(s)

    @property
    def idle(self) -> int:
        """How many states are idle now."""
        with self._lock:
            return len(self._idle)
