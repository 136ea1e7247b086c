"""The one lock around ``llvmlite.binding``.

llvmlite serialises each of its C calls, but a compile is a sequence of them (parse, verify,
optimise, emit; create an engine, add an object, finalise) over LLVM's process-wide state, so
every sequence runs under this lock. It sits below every module that touches that state
(:mod:`.triple` registers targets, :mod:`.machine` creates target machines and optimises,
:mod:`.loader` links), so each can import it.

It is a :class:`~tessera.plugin.native_lock.NativeLock`: at exit it waits for the compile under
way and then lets no other start, because the C runtime's ``exit()`` destroys LLVM's global
context, and with it the module a background compile would still be optimising.
"""

from __future__ import annotations

from tessera.plugin.native_lock import NativeLock

#: Serialises every use of llvmlite.binding (parsing, optimising, emitting, JIT linking).
LLVM_LOCK = NativeLock("LLVM")
