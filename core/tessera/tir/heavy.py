"""Running the compiler's tree-heavy work efficiently on CPython: :func:`heavy_work`.

Lowering a model builds and rewrites millions of small TIR/TE nodes, recursing through them
(visit -> visit_X -> rebuild -> visit ...). Two interpreter mechanisms cost much of that time
and :func:`heavy_work` switches both off while a decorated function runs. Nothing else changes:
the function runs with its arguments, and its result or exception passes through.

* **Stack chunks.** CPython 3.11 keeps the frames of Python functions in 16 KiB chunks that
  it maps when a call needs one more and unmaps as soon as the call that opened it returns.
  A recursive pass goes up and down across a chunk boundary many thousand times per kernel,
  each time an ``mmap``, page faults and a ``munmap`` (measured: 30% of the CPU time of the
  TIR pipeline on the light models was system time doing that). A chunk is as large as the
  call that opens it needs (rounded up to a power of two), and the calls made from that
  frame go into the same chunk while they fit: the function runs under a frame with ~250 KiB
  of unused local slots, so the whole recursion below it lives in one 512 KiB chunk
  (thousands of frames), mapped once.
* **Garbage collection.** The collector runs every 700 container allocations and, every so
  often, traverses every object alive; while a model is lowered most allocations are tree
  nodes freed by reference counting, and the traversals of the growing heap (kernels, LLVM IR
  objects) cost a tenth of an llvm compile. Inside heavy work the first-generation threshold is
  at least :data:`GC_THRESHOLD` allocations; it is restored when the outermost heavy work
  (of any thread) returns.

Nested heavy work runs directly.
"""

from __future__ import annotations

import functools
import gc
import threading
import types
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["GC_THRESHOLD", "heavy_work", "run_heavy_work"]

F = TypeVar("F", bound=Callable[..., Any])

#: The least first-generation garbage collection threshold inside heavy work (CPython's
#: default is 700).
GC_THRESHOLD = 100_000

#: Unused local slots of the frame: 8 bytes each, with CPython's 1000-slot overhead just over
#: 256 KiB, so the chunk opened for it is 512 KiB and about half of it is left for callees.
_PAD_SLOTS = 31_769


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


def _padded_caller() -> Callable[..., Any]:
    """:func:`_call` with ``_PAD_SLOTS`` more local variables (never set) in its code."""
    code = _call.__code__
    try:
        padded = code.replace(
            co_varnames=code.co_varnames + tuple(f"_pad{i}" for i in range(_PAD_SLOTS)),
            co_nlocals=code.co_nlocals + _PAD_SLOTS)
    except (TypeError, ValueError):  # pragma: no cover - an interpreter without the option
        return _call
    return types.FunctionType(padded, _call.__globals__, "_call_on_deep_stack")


_CALLER = _padded_caller()
_thread = threading.local()
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] | None = None


def _relax_gc() -> None:
    global _gc_users, _gc_saved
    with _gc_lock:
        _gc_users += 1
        if _gc_users == 1:
            _gc_saved = gc.get_threshold()
            if _gc_saved[0] < GC_THRESHOLD:
                gc.set_threshold(GC_THRESHOLD, *_gc_saved[1:])


def _restore_gc() -> None:
    global _gc_users, _gc_saved
    with _gc_lock:
        _gc_users -= 1
        if _gc_users == 0 and _gc_saved is not None:
            gc.set_threshold(*_gc_saved)
            _gc_saved = None


def run_heavy_work(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as heavy work (see the module's doc); a direct call when this
    thread already is in heavy work."""
    if getattr(_thread, "heavy", False):
        return fn(*args, **kwargs)
    _thread.heavy = True
    _relax_gc()
    try:
        return _CALLER(fn, args, kwargs)
    finally:
        _restore_gc()
        _thread.heavy = False


def heavy_work(fn: F) -> F:
    """Decorate ``fn`` to run as heavy work (:func:`run_heavy_work`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run_heavy_work(fn, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
