"""The native thread pool that parallel loops run on, built for machines that are not idle.

Kernels launch a parallel loop with ``tessera_parallel_for(fn, closure, extent, grain)``, where
``fn`` is ``void fn(i64 begin, i64 end, ptr closure)``; the call returns when every iteration
of ``[0, extent)`` has run exactly once. The pool is native code, written in LLVM IR
(:mod:`tessera_llvm.pool_ir`) and JIT-compiled once per process; ``tessera_parallel_for`` is
registered with ``llvmlite.binding.add_symbol`` so the object code of kernels links to it.
Workers are POSIX threads created on first use; they block all signals.

A service's machine has neighbours (other processes, a CPU quota, another library's threads in
the same process), and the OS deschedules any thread for a whole time slice when one of them
wants its core. The pool is built so that a loop waits for a descheduled thread as little as
possible:

- **Chunks claimed dynamically.** The loop is split into up to ``chunks_per_thread`` chunks per
  thread taking part (at least ``grain`` iterations each). Each thread owns a contiguous range
  of chunks in a slot of its own (one cache line: the range as ``hi << 32 | lo``, changed by
  compare-and-swap) and runs it front to back; then it takes the other slots' chunks from
  their backs. The calling thread works too and claims until no chunk is left, so a worker the
  OS has not run yet costs nothing: nobody waits for a chunk that nobody started. Without
  stealing, thread ``t`` gets the same range loop after loop, and works on data its caches
  hold.
- **Stragglers sit out.** The caller then waits only for chunks already running. A worker that
  finishes its last one long after the caller ran out of chunks (``straggler_us`` and three of
  the caller's chunks) was descheduled in the middle of it; it sits out the next loops (it is
  neither given chunks nor woken) for 10 ms, doubling up to 320 ms while it keeps straggling.
  Such a wait outlasts the spin budget, so the clock is read for it only once the caller has
  gone to sleep: a loop whose threads all finish together pays two clock reads.
- **Load.** :func:`adapt_to_load`, called before each region's kernels run, caps the threads
  taking part while other runnable tasks leave fewer free cores than threads
  (:func:`tessera.plugin.threads.threads_under_load`).
- **Waiting.** A waiting thread (a worker between loops, the caller at the end of one) spins
  with ``pause`` for at most ``spin_us`` of wall time (the clock is read every 16 pauses) and
  then sleeps on a futex; the caller wakes exactly the workers taking part, each on its own
  word. Nothing calls ``sched_yield``: with a CPU-bound neighbour on the core, yielding hands
  it the core for the rest of a time slice. The spin budget follows the load
  (:func:`adapt_to_load`): 100 us while other tasks are runnable, :data:`IDLE_SPIN_US` while
  none are, so that workers stay awake across the gap between two requests of a service (a
  worker whose core went idle comes back slowly; see :data:`IDLE_SPIN_US`).

- Nesting and concurrency: a launch while the pool is busy (from inside a worker, or from a
  second Python thread) runs its whole range serially in the calling thread.
- Thread count: ``TESSERA_NUM_THREADS``, else the CPU affinity mask capped by a cgroup CPU
  quota (:func:`tessera.plugin.threads.default_thread_count`); :func:`set_num_threads`.
- Exit: workers are never joined; the process exits with them asleep or spinning, and the JIT
  memory holding the pool is never freed.
- ``fork``: the child resets the pool (its workers did not survive the fork) and starts new ones.

Launch cost of an empty body (:func:`measure_launch_overhead`, 2-core Zen 5 VM, workers awake):
0.26-0.33 us with 2 threads (the pool with one fixed chunk per thread took 0.12 us; the rest is
the claiming and stealing: each thread reads the other's slot); tens of us when workers must be
woken, which the caller no longer waits for.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import llvmlite.binding as llvm

from tessera.plugin.threads import (
    affinity_cpus,
    cpu_quota,
    default_thread_count,
    runnable_tasks,
    threads_under_load,
)
from tessera_llvm import machine
from tessera_llvm.pool_ir import DEFAULT_SPIN_US, KNOB_TYPES, MAX_WORKERS, PoolIR


class _Runtime:
    """The compiled pool of this process: the JIT engine (never freed) and entry points."""

    def __init__(self) -> None:
        tm = machine.target_machine()
        pool = PoolIR(tm.triple, str(tm.target_data), platform.machine().lower()).build()
        names = ["tessera_parallel_for", "tessera_pool_started_workers",
                 "tessera_pool_after_fork", "tessera_pool_bench", "tessera_extendhfsf2",
                 "tessera_truncsfhf2", "tessera_pool_get_sit_outs", "tessera_pool_awake_workers"]
        for knob in _KNOBS:
            names += [f"tessera_pool_set_{knob}", f"tessera_pool_get_{knob}"]
        with machine.LLVM_LOCK:
            mod = machine.compile_ir(pool, tm, speed_level=2)
            engine = llvm.create_mcjit_compiler(mod, tm)
            engine.finalize_object()
            addr = {name: engine.get_function_address(name) for name in names}
            # Kernels and workers run this code until the process ends: never free it.
            engine.detach()
            mod.detach()
            llvm.add_symbol("tessera_parallel_for", addr["tessera_parallel_for"])
            process = ctypes.CDLL(None)
            for libcall, ours in (("__extendhfsf2", "tessera_extendhfsf2"),
                                  ("__truncsfhf2", "tessera_truncsfhf2")):
                if not hasattr(process, libcall):
                    llvm.add_symbol(libcall, addr[ours])
        self.addresses = addr
        self.parallel_for = addr["tessera_parallel_for"]
        self.set: dict[str, Callable[[int], None]] = {}
        self.get: dict[str, Callable[[], int]] = {}
        for knob, ctype in _KNOBS.items():
            self.set[knob] = ctypes.CFUNCTYPE(None, ctype)(addr[f"tessera_pool_set_{knob}"])
            self.get[knob] = ctypes.CFUNCTYPE(ctype)(addr[f"tessera_pool_get_{knob}"])
        self.started_workers = ctypes.CFUNCTYPE(ctypes.c_int32)(
            addr["tessera_pool_started_workers"])
        self.after_fork = ctypes.CFUNCTYPE(None)(addr["tessera_pool_after_fork"])
        self.sit_outs = ctypes.CFUNCTYPE(ctypes.c_int64)(addr["tessera_pool_get_sit_outs"])
        self.awake_workers = ctypes.CFUNCTYPE(ctypes.c_int32)(addr["tessera_pool_awake_workers"])
        self.cores = affinity_cpus()
        # /proc/loadavg counts the runnable tasks of every CPU: they compete with this
        # process's threads only when it may run on every CPU (no taskset, no cpuset)
        self.load_aware = (os.environ.get("TESSERA_LOAD_AWARE", "1").strip() not in ("0", "")
                           and self.cores >= (os.cpu_count() or 0))
        self.next_sample = 0
        #: Other runnable tasks in the last samples of adapt_to_load.
        self.others: list[int] = []
        self.bench = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(
            addr["tessera_pool_bench"])
        threads, source = default_thread_count()
        self.thread_source = source
        self.set["nthreads"](min(threads, MAX_WORKERS + 1))
        #: Whether the spin budget was set (``TESSERA_SPIN_US``, :func:`set_spin_us`) rather
        #: than following the load.
        self.spin_pinned = False
        #: Under a cgroup CPU quota a spinning thread spends the quota: it never spins long.
        self.quota_limited = cpu_quota() is not None
        spin = os.environ.get("TESSERA_SPIN_US", "").strip()
        if spin:
            try:
                self.set["spin_ns"](max(0, int(float(spin) * 1000)))
                self.spin_pinned = True
            except ValueError:
                warnings.warn(f"TESSERA_SPIN_US={spin!r} is not a number of microseconds; "
                              f"its spin follows the load", stacklevel=2)


#: The pool's settable words and their C types.
_KNOBS = {name: ctypes.c_int32 if ty.width == 32 else ctypes.c_int64
          for name, ty in KNOB_TYPES.items()}

_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> _Runtime:
    """The process's pool, compiled and registered on first use."""
    global _runtime
    if _runtime is None:
        with _runtime_lock:
            if _runtime is None:
                _runtime = _Runtime()
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=_after_fork_in_child)
    return _runtime


def _after_fork_in_child() -> None:
    if _runtime is not None:
        _runtime.after_fork()


def ensure_runtime() -> None:
    """Compile the pool and register ``tessera_parallel_for`` (before linking kernels)."""
    runtime()


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (the caller included) for later parallel loops."""
    if n < 1:
        raise ValueError(f"number of threads must be at least 1, got {n}")
    rt = runtime()
    n = min(int(n), MAX_WORKERS + 1)
    if n != rt.get["nthreads"]():  # setting the count in use again keeps its source
        rt.set["nthreads"](n)
        rt.thread_source = f"set_num_threads({n})"


@contextmanager
def num_threads(n: int) -> Iterator[None]:
    """``n`` threads inside the block; the count and its source are restored after it."""
    rt = runtime()
    saved = rt.get["nthreads"](), rt.thread_source
    set_num_threads(n)
    try:
        yield
    finally:
        rt.set["nthreads"](saved[0])
        rt.thread_source = saved[1]


def get_num_threads() -> int:
    """The number of threads parallel loops use (the caller included)."""
    return int(runtime().get["nthreads"]())


def thread_count_source() -> str:
    """Where the thread count in use came from (``TESSERA_NUM_THREADS``, the CPU affinity, a
    cgroup quota, ``set_num_threads``...)."""
    return runtime().thread_source


def set_spin_us(us: float | None) -> None:
    """Spin up to ``us`` microseconds before a waiting thread sleeps (0: sleep at once), from
    now on whatever the load; None: follow the load again (:func:`adapt_to_load`)."""
    rt = runtime()
    rt.spin_pinned = us is not None
    rt.set["spin_ns"](max(0, int((DEFAULT_SPIN_US if us is None else us) * 1000)))


def spin_pinned() -> bool:
    """Whether the spin budget was set (``TESSERA_SPIN_US``, :func:`set_spin_us`) rather than
    following the load."""
    return runtime().spin_pinned


def get_spin_us() -> float:
    """The time a waiting thread spins before it sleeps, in microseconds."""
    return runtime().get["spin_ns"]() / 1000.0


def set_chunks_per_thread(n: int) -> None:
    """Split parallel loops into up to ``n`` chunks per thread (at least 1)."""
    if n < 1:
        raise ValueError(f"chunks per thread must be at least 1, got {n}")
    runtime().set["chunks_per_thread"](int(n))


def get_chunks_per_thread() -> int:
    """The most chunks per thread a parallel loop is split into."""
    return int(runtime().get["chunks_per_thread"]())


def set_straggler_us(us: float) -> None:
    """A worker that finishes ``us`` microseconds (and three of the caller's chunks) after the
    caller ran out of chunks sits out the next loops for a while (0: workers never sit out)."""
    runtime().set["straggler_ns"](max(0, int(us * 1000)))


def get_straggler_us() -> float:
    """The straggler time in microseconds (0: off)."""
    return runtime().get["straggler_ns"]() / 1000.0


def sit_outs() -> int:
    """How many times a straggling worker was made to sit out, since the process started."""
    return int(runtime().sit_outs())


def inject_worker_delay(us: float) -> None:
    """For tests: every worker sleeps ``us`` microseconds after it sees a job and before it
    claims a chunk (0: no delay), as a worker the OS has descheduled would."""
    runtime().set["worker_delay_ns"](max(0, int(us * 1000)))


#: How long waiting threads spin while no other task is runnable (:func:`adapt_to_load`), in
#: microseconds. A worker that sleeps on a futex between two requests of a service comes back
#: slowly: on a 2-core VM (Xeon, 2026-12) a small CNN answering requests 10 ms apart ran at
#: 2.3x the time it took back to back with workers that slept after 100 us, at 1.2x with
#: workers that spun 20 ms (``benchmarks/serving.py --traces images``). onnxruntime's workers
#: spin about 28 ms after each run; Intel's OpenMP 200 ms (``KMP_BLOCKTIME``).
IDLE_SPIN_US = 20_000
#: How often :func:`adapt_to_load` samples the machine's runnable tasks.
LOAD_SAMPLE_NS = 5_000_000
#: Samples a task must be seen in, in a row, to count as a neighbour (the fewest others over
#: the last samples decide): a task that runs for a moment does not cost the pool its threads.
LOAD_WINDOW = 3


def adapt_to_load() -> None:
    """Cap the threads parallel loops use while other tasks keep this machine's cores busy:
    :func:`tessera.plugin.threads.threads_under_load` of the fewest other runnable tasks in the
    last :data:`LOAD_WINDOW` samples (``/proc/loadavg``'s runnable count less this thread and
    the pool's awake workers), sampled at most every 5 ms; cheap to call before every model
    run (one clock read otherwise). Off where the process may not run on every CPU (the
    runnable count would include other CPUs' tasks), where there is no ``/proc/loadavg``, and
    with ``TESSERA_LOAD_AWARE=0`` or :func:`set_load_aware`.

    It also sets how long waiting threads spin, unless that was set
    (:func:`set_spin_us`): :data:`IDLE_SPIN_US` while none of the last samples saw another
    runnable task and no CPU quota applies, 100 us otherwise (and wherever it is off): a
    spinning thread keeps its core from a neighbour, and spends a quota."""
    rt = _runtime or runtime()
    now = time.monotonic_ns()
    if now < rt.next_sample or not rt.load_aware:
        return
    rt.next_sample = now + LOAD_SAMPLE_NS
    running = runnable_tasks()
    if running is None:
        rt.load_aware = False
        return
    rt.others = (rt.others + [running - 1 - rt.awake_workers()])[-LOAD_WINDOW:]
    threads = rt.get["nthreads"]()
    want = threads_under_load(rt.cores, threads, min(rt.others))
    rt.set["cap"](0 if want >= threads else want)
    if not rt.spin_pinned:
        idle = max(rt.others) <= 0 and not rt.quota_limited
        rt.set["spin_ns"]((IDLE_SPIN_US if idle else DEFAULT_SPIN_US) * 1000)


def set_load_aware(on: bool) -> None:
    """Turn :func:`adapt_to_load` on or off (off also lifts its cap, and waiting threads
    spin 100 us unless :func:`set_spin_us` set otherwise)."""
    rt = runtime()
    rt.load_aware = bool(on)
    rt.set["cap"](0)
    rt.others = []
    if not rt.spin_pinned:
        rt.set["spin_ns"](DEFAULT_SPIN_US * 1000)


def is_load_aware() -> bool:
    """Whether :func:`adapt_to_load` caps the threads."""
    return runtime().load_aware


def load_cap() -> int:
    """The threads :func:`adapt_to_load` currently allows (0: no cap)."""
    return int(runtime().get["cap"]())


def measure_launch_overhead(launches: int = 10000, extent: int | None = None) -> float:
    """Microseconds per ``tessera_parallel_for`` launch of an empty body, measured in a native
    loop (no Python in between); ``extent`` defaults to the thread count (one chunk per
    thread)."""
    rt = runtime()
    ext = extent if extent is not None else get_num_threads()
    rt.bench(100, ext)  # start the workers, warm up
    t0 = time.perf_counter()
    rt.bench(launches, ext)
    return (time.perf_counter() - t0) / launches * 1e6
