"""A lock around a native library that must not be running when the process exits.

A backend that drives a native compiler from Python (LLVM through llvmlite, NVRTC) serialises
its calls with a lock. That is not enough at exit: a background compile (a
:class:`~tessera.runtime.dynamic.DynamicModule` with ``background_compile=True``, or any
daemon thread of a user's) can still be inside the library when the C runtime's ``exit()``
runs the library's static destructors. LLVM's global context then deletes the very module its
optimiser is working on (seen as ``verifyLoop``/``dyn_cast`` assertions, "An asserting value
handle still pointed to this value", and segfaults: a use after free, not two threads in
LLVM at once).

:class:`NativeLock` is that lock with an exit guard: when the interpreter exits (``atexit``),
it waits for the thread inside the library to leave, then keeps the lock for good. A thread
that asks for it afterwards gets a :class:`~tessera.errors.CompileError` ("the process is
exiting") instead of entering the library, so no native call is under way when ``exit()``
tears the library down, and nobody waits forever for a lock that will not come back.
"""

from __future__ import annotations

import atexit
import threading
from types import TracebackType

from tessera.errors import CompileError

__all__ = ["NativeLock"]

#: Seconds between two looks at the exit flag while waiting for the lock.
_POLL_S = 0.05


class NativeLock:
    """A re-entrant lock (``with lock: ...``) for the calls into one native library, guarded
    at exit (module doc). ``library`` names it in errors."""

    def __init__(self, library: str) -> None:
        self.library = library
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._guard: threading.Thread | None = None  # the thread that holds it for good
        atexit.register(self.close)

    @property
    def closed(self) -> bool:
        """Whether the guard has taken the lock for good (the process is exiting)."""
        return self._closed.is_set()

    def acquire(self) -> None:
        """Take the lock (re-entrant); CompileError once the process is exiting."""
        while True:
            if self._closed.is_set() and self._guard is not threading.current_thread():
                raise CompileError(f"{self.library}: the process is exiting; no new "
                                   f"{self.library} work starts")
            if self._lock.acquire(timeout=_POLL_S):
                if self._closed.is_set() and self._guard is not threading.current_thread():
                    self._lock.release()  # the guard is waiting for it; let it have it
                    continue
                return

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> NativeLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def close(self) -> None:
        """Wait for the thread inside the library to leave it, then keep the lock: later
        ``acquire`` calls from other threads raise. Run at exit; idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._lock.acquire()  # the holder finishes its call; no one else gets in after it
        self._guard = threading.current_thread()
