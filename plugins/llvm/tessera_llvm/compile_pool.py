"""Optimise one large LLVM module on several cores.

llvmlite serialises every call into LLVM within a process, so threads cannot share the O3
pipeline's work. A region's kernels are therefore generated as modules of their own, parts
(:class:`tessera_llvm.build.ModuleBuilder`), which a :class:`PartOptimizer` optimises in
worker processes (:mod:`tessera_llvm.llvm_worker`: ``python -m``, llvmlite only, started once
and kept for later compiles) as soon as each part is complete: while this process lowers the
next kernels (Python), a worker runs O3 on the ones before. What no worker has started when
the last part is done is optimised here, at the same time as the workers finish theirs. The
optimised parts come back as bitcode and are linked into one module, which is emitted as one
object file, so nothing downstream (the loader, artifacts, the kernel cache) sees the split.
The parts are optimised exactly as one module would be: every kernel is a function of its own
and calls nothing across parts.

``TESSERA_COMPILE_JOBS`` sets how many processes work on one module (this one included;
default: the CPUs this process may run on, at most :data:`MAX_JOBS`; ``1`` compiles everything
here, in one part). A part holds at least :data:`PART_NODES` TIR nodes (smaller ones would
cost more in start-up and transfer than they save). Whatever goes wrong with a worker (it
cannot be started, dies, or reports an error) only means that its part is optimised here.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import select
import subprocess
import sys
import threading

import llvmlite.binding as llvm

from tessera.errors import CompileError
from tessera_llvm.llvm_worker import hello, read_frame, write_frame
from tessera_llvm.lock import LLVM_LOCK
from tessera_llvm.machine import compile_ir
from tessera_llvm.pipeline import MachineSpec

#: The environment variable that sets how many processes optimise one module.
JOBS_ENV = "TESSERA_COMPILE_JOBS"
#: The most processes one module is split over by default.
MAX_JOBS = 8
#: Seconds a new worker may take to say that it is ready.
START_TIMEOUT_S = 30.0
#: :func:`~tessera_llvm.build.build_module` optimises a module of fewer TIR nodes than this,
#: given all at once, in one piece, here. (Measured on the 2-core Xeon: the symbolic 4-layer
#: encoder's region holds 39,000, which O3 takes 1.5 s over; its static form at 1x128 5,800
#: (0.3 s); the symbolic image CNN 133,000.)
MIN_PARALLEL_NODES = 10_000
#: The TIR nodes of a part of a module built as it is lowered
#: (:class:`~tessera_llvm.build.ModuleBuilder`): a part is closed, and goes to a worker, once
#: its functions hold this many.
PART_NODES = 1_000


def compile_jobs() -> int:
    """How many processes may optimise one module (``TESSERA_COMPILE_JOBS``, else the CPUs
    this process may run on, at most :data:`MAX_JOBS`)."""
    setting = os.environ.get(JOBS_ENV, "").strip()
    if setting:
        try:
            jobs = int(setting)
        except ValueError:
            jobs = 0
        if jobs < 1:
            raise CompileError(f"{JOBS_ENV}={setting!r}: expected a whole number of processes, "
                               "1 or more (1: compile in this process only)")
        return jobs
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_JOBS, cpus))


class _Worker:
    """One ``python -m tessera_llvm.llvm_worker`` process."""

    def __init__(self) -> None:
        self.pid = os.getpid()  # the process that started it (a fork must not use it)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tessera_llvm.llvm_worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, close_fds=True)
        self.greeted = False

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def _greet(self) -> None:
        """Wait (at most :data:`START_TIMEOUT_S`) for the worker's hello, and check that it
        runs this process's llvmlite and LLVM (``sys.executable`` may not be this Python, or
        not Python at all, in an embedded interpreter); RuntimeError otherwise."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_S)
        said = read_frame(self.proc.stdout) if ready else None
        if said != hello():
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"compile worker {self.proc.pid} did not start as expected "
                               f"(it said {said!r})")
        self.greeted = True

    def optimize(self, header: bytes, text: bytes) -> bytes:
        """The bitcode of ``text`` optimised as ``header`` says; RuntimeError when the worker
        fails (its message) or is gone."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if not self.greeted:
            self._greet()
        try:
            write_frame(self.proc.stdin, header)
            write_frame(self.proc.stdin, text)
            self.proc.stdin.flush()
            status = read_frame(self.proc.stdout)
            data = read_frame(self.proc.stdout)
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"compile worker {self.proc.pid}: {exc}") from exc
        if status != b"ok" or data is None:
            what = data.decode(errors="replace") if data is not None else "it exited"
            raise RuntimeError(f"compile worker {self.proc.pid}: {what}")
        return data

    def close(self) -> None:
        if self.pid != os.getpid():
            return
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


_lock = threading.Lock()
_idle: list[_Worker] = []
_started: list[_Worker] = []


def prepare(count: int) -> None:
    """Start workers now, up to ``count`` in all, so that they are ready when the parts are
    (a worker takes a fifth of a second to start; the code generation in between hides it)."""
    with _lock:
        _forget_gone()
        while len(_started) < count:
            try:
                worker = _Worker()
            except OSError:
                return
            _started.append(worker)
            _idle.append(worker)


def _forget_gone() -> None:
    """Drop workers that exited or belong to the process this one was forked from."""
    for w in [w for w in _started if not w.alive()]:
        _started.remove(w)
        if w in _idle:
            _idle.remove(w)


def _take(count: int) -> list[_Worker]:
    """Up to ``count`` idle workers, started as needed (fewer when they cannot be)."""
    prepare(count)
    with _lock:
        taken, _idle[:] = _idle[:count], _idle[count:]
    return taken


def _give_back(workers: list[_Worker]) -> None:
    with _lock:
        _idle.extend(w for w in workers if w.alive())


@atexit.register
def shutdown() -> None:
    """End every worker (their input closed: each exits after the job it is on)."""
    with _lock:
        workers = list(_started)
        _started.clear()
        _idle.clear()
    for w in workers:
        w.close()


def _header(spec: MachineSpec, loop_unrolling: bool) -> bytes:
    return json.dumps({"machine": spec.as_dict(), "speed_level": 3,
                       "loop_unrolling": loop_unrolling}).encode()


class PartOptimizer:
    """Parts of a module optimised (O3) as they come, while this process goes on with other
    work (lowering the next kernels): :meth:`submit` queues an IR text for ``workers`` idle
    worker processes (taken from the pool, started as needed); :meth:`collect` optimises here
    the parts no worker has started, newest first, while the workers finish theirs, and gives
    every part's module in the order submitted. Each is parsed, verified and optimised as
    :func:`tessera_llvm.machine.compile_ir` does; a part whose worker failed (or could not be
    started) is optimised here, so an invalid one raises the same CompileError either way.
    Call :meth:`collect` or :meth:`cancel` once, at the end: both give the workers back."""

    def __init__(self, spec: MachineSpec, tm: llvm.TargetMachine, workers: int) -> None:
        self.spec, self.tm = spec, tm
        self._texts: list[tuple[str, bool]] = []
        self._answers: dict[int, bytes | Exception] = {}
        self._queue: collections.deque[int] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._workers = _take(workers) if workers > 0 else []
        self._threads = [threading.Thread(target=self._serve, args=(w,), daemon=True,
                                          name=f"tessera-llvm-part-{i}")
                         for i, w in enumerate(self._workers)]
        for t in self._threads:
            t.start()

    def submit(self, text: str, loop_unrolling: bool = True) -> None:
        """Queue ``text`` (LLVM unrolls its loops unless ``loop_unrolling`` is false)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("PartOptimizer.submit after collect or cancel")
            self._texts.append((text, loop_unrolling))
            self._queue.append(len(self._texts) - 1)
            self._cond.notify()

    def _serve(self, worker: _Worker) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                index = self._queue.popleft()
            text, unrolling = self._texts[index]
            try:
                answer: bytes | Exception = worker.optimize(_header(self.spec, unrolling),
                                                            text.encode())
            except Exception as exc:  # noqa: BLE001 - the part is then optimised here
                answer = exc
            with self._cond:
                self._answers[index] = answer

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _join(self) -> None:
        for t in self._threads:
            t.join()
        _give_back(self._workers)
        self._workers, self._threads = [], []

    def collect(self) -> list[llvm.ModuleRef]:
        """Every part's optimised module, in the order submitted."""
        self._close()
        mine: dict[int, llvm.ModuleRef] = {}
        try:
            while True:
                with self._cond:
                    if not self._queue:
                        break
                    index = self._queue.pop()
                text, unrolling = self._texts[index]
                mine[index] = compile_ir(text, self.tm, loop_unrolling=unrolling)
        finally:
            self._join()
        modules = []
        for index, (text, unrolling) in enumerate(self._texts):
            answer = self._answers.get(index)
            if index in mine:
                modules.append(mine[index])
            elif isinstance(answer, bytes):
                with LLVM_LOCK:
                    modules.append(llvm.parse_bitcode(answer))
            else:
                modules.append(compile_ir(text, self.tm, loop_unrolling=unrolling))
        return modules

    def cancel(self) -> None:
        """Drop the parts not started; wait for those under way (their results unused)."""
        with self._cond:
            self._queue.clear()
        self._close()
        self._join()
