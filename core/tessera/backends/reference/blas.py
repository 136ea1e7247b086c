"""The BLAS threads numpy uses while reference kernels run.

The reference backend runs one numpy op at a time from Python. Its matrix products go to the
BLAS numpy was built with (OpenBLAS in the wheels), whose own thread pool wakes, spins and
yields around every call: on a 2-core machine that made ResNet-50 on ``ref`` take 800 ms with
two BLAS threads against 149 ms with one, with 100+ ms outliers on small models even when the
machine was otherwise idle, and far worse beside CPU-bound neighbours. So while a reference
region runs, numpy's BLAS is limited to ``TESSERA_REF_BLAS_THREADS`` threads (default 1; 0
leaves numpy's own setting alone), through ``threadpoolctl`` (which finds and sets the BLAS
libraries loaded in the process when the first reference region runs, numpy's among them:
OpenBLAS, MKL or BLIS). The limit is process-wide while any reference region runs (numpy in
other threads of the process is limited meanwhile too) and restored when the last one ends.
"""

from __future__ import annotations

import os
import threading
import warnings
from types import TracebackType
from typing import Any

ENV_VAR = "TESSERA_REF_BLAS_THREADS"


def configured_threads() -> int:
    """The BLAS threads reference kernels run with (0: numpy's own setting)."""
    text = os.environ.get(ENV_VAR, "").strip()
    try:
        return max(0, int(text)) if text else 1
    except ValueError:
        return 1


class BlasLimit:
    """A context manager: numpy's BLAS limited to :func:`configured_threads` threads while
    at least one thread is inside it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._controller: Any = None
        self._limiter: Any = None

    def prepare(self) -> None:
        """Find the BLAS pools now (importing threadpoolctl and scanning the process's
        libraries takes milliseconds, more without bytecode caches): called at compile time so
        that a module's first run does not pay it."""
        with self._lock:
            if configured_threads() and self._controller is None:
                self._controller = _controller()

    def __enter__(self) -> BlasLimit:
        with self._lock:
            self._inside += 1
            if self._inside == 1:
                n = configured_threads()
                if n and self._controller is None:
                    self._controller = _controller()
                if n and self._controller is not False:
                    self._limiter = self._controller.limit(limits=n, user_api="blas")
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._limiter is not None:
                self._limiter.restore_original_limits()
                self._limiter = None

    def describe(self) -> str:
        n = configured_threads()
        if n and self._controller is False:
            return "numpy's BLAS threads as numpy has them (threadpoolctl is not installed)"
        if not n:
            return f"numpy's BLAS threads as numpy has them ({ENV_VAR}=0)"
        return (f"numpy's BLAS limited to {n} thread{'s' if n != 1 else ''} while its kernels "
                f"run ({ENV_VAR})")


#: The one limit all reference regions share.
BLAS_THREADS = BlasLimit()


def _controller() -> Any:
    """threadpoolctl's controller of the process's BLAS pools; False, with one warning, where
    threadpoolctl is missing (an environment installed with --no-deps, such as a lent GPU
    machine's): the kernels then run with numpy's own thread setting."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        warnings.warn("threadpoolctl is not installed, so numpy's BLAS threads are not limited "
                      "while reference kernels run (pip install threadpoolctl)", RuntimeWarning,
                      stacklevel=3)
        return False
    return ThreadpoolController()
