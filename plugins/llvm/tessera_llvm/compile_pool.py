"""Optimise one large LLVM module on several cores.

llvmlite serialises every call into LLVM within a process, so threads cannot share the O3
pipeline's work. :func:`tessera_llvm.build.build_module` therefore splits a large region's
kernels into parts (:func:`split_parts`, balanced by the size of their TIR), generates each
part as a module of its own, and :func:`optimize_parts` optimises the first here and the others
at the same time in worker processes (:mod:`tessera_llvm.llvm_worker`: ``python -m``, llvmlite
only, started once and kept for later compiles). The optimised parts come back as bitcode and
are linked into one module, which is emitted as one object file, so nothing downstream (the
loader, artifacts, the kernel cache) sees the split. The parts are optimised exactly as one
module would be: every kernel is a function of its own and calls nothing across parts.

``TESSERA_COMPILE_JOBS`` sets how many processes work on one module (this one included;
default: the CPUs this process may run on, at most :data:`MAX_JOBS`; ``1`` compiles everything
here). Regions smaller than :data:`MIN_PARALLEL_NODES` TIR nodes are not split: a part's
start-up and transfer would cost more than it saves. Whatever goes wrong with a worker (it
cannot be started, dies, or reports an error) only means that its part is optimised here.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Sequence

import llvmlite.binding as llvm

from tessera.errors import CompileError
from tessera.tir.stmt import PrimFunc
from tessera.tir.transform._util import stmt_count
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
#: Regions with fewer TIR nodes than this are optimised in one piece, here. (Measured on the
#: 2-core Xeon: the symbolic 4-layer encoder's region holds 39,000, which O3 takes 1.5 s over;
#: its static form at 1x128 5,800 (0.3 s); the symbolic image CNN 133,000.)
MIN_PARALLEL_NODES = 10_000


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


def split_parts(funcs: Sequence[PrimFunc], jobs: int | None = None,
                min_nodes: int | None = None) -> list[list[PrimFunc]]:
    """``funcs`` in parts to optimise at once: one part (all of them, in order) when there is
    one job or the functions hold fewer than ``min_nodes`` (default
    :data:`MIN_PARALLEL_NODES`) TIR nodes; else up to ``jobs`` parts of about equal size,
    largest function first into the smallest part, each part in the functions' order."""
    jobs = compile_jobs() if jobs is None else jobs
    min_nodes = MIN_PARALLEL_NODES if min_nodes is None else min_nodes
    if jobs <= 1 or len(funcs) <= 1:
        return [list(funcs)]
    sizes = [stmt_count(f.body) for f in funcs]
    if sum(sizes) < min_nodes:
        return [list(funcs)]
    count = min(jobs, len(funcs))
    loads = [0] * count
    part_of = [0] * len(funcs)
    for i in sorted(range(len(funcs)), key=lambda i: -sizes[i]):
        p = min(range(count), key=lambda p: loads[p])
        part_of[i] = p
        loads[p] += sizes[i]
    return [[f for f, p in zip(funcs, part_of) if p == k] for k in range(count)]


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


def optimize_parts(texts: Sequence[str], spec: MachineSpec, tm: llvm.TargetMachine,
                   loop_unrolling: bool = True) -> list[llvm.ModuleRef]:
    """Each IR text of ``texts`` parsed, verified and optimised (O3) as
    :func:`tessera_llvm.machine.compile_ir` does: the first here, the others in workers at the
    same time; a part no worker could take, or whose worker failed, is optimised here after
    the first (so an invalid module raises the same CompileError either way)."""
    header = json.dumps({"machine": spec.as_dict(), "speed_level": 3,
                         "loop_unrolling": loop_unrolling}).encode()
    workers = _take(len(texts) - 1)
    answers: dict[int, bytes | Exception] = {}

    def run(index: int, worker: _Worker) -> None:
        try:
            answers[index] = worker.optimize(header, texts[index].encode())
        except Exception as exc:  # noqa: BLE001 - the part is then optimised here
            answers[index] = exc

    threads = [threading.Thread(target=run, args=(i, w), daemon=True,
                                name=f"tessera-llvm-part-{i}")
               for i, w in zip(range(1, len(texts)), workers)]
    for t in threads:
        t.start()
    try:
        modules = [compile_ir(texts[0], tm, loop_unrolling=loop_unrolling)]
    finally:
        for t in threads:
            t.join()
        _give_back(workers)
    for i in range(1, len(texts)):
        answer = answers.get(i)
        if isinstance(answer, bytes):
            with LLVM_LOCK:
                modules.append(llvm.parse_bitcode(answer))
        else:
            modules.append(compile_ir(texts[i], tm, loop_unrolling=loop_unrolling))
    return modules
