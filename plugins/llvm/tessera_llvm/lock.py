"""The one lock around ``llvmlite.binding``, which is not thread-safe.

It sits below every module that touches LLVM's process-wide state (:mod:`.triple` registers
targets, :mod:`.machine` creates target machines and optimises, :mod:`.loader` links), so
each can import it.
"""

from __future__ import annotations

import threading

#: Serialises every use of llvmlite.binding (parsing, optimising, emitting, JIT linking).
LLVM_LOCK = threading.RLock()
