"""Measuring tuning candidates in worker processes: built in parallel, timed one at a time.

A backend builds a candidate (``Backend.tuning_candidate``): one kernel of a region scheduled
with a config, on buffers of its own filled with seeded random data (constants keep their
values). :func:`time_candidate` runs it ``number`` times per measurement (more while a
measurement lasts under ``min_repeat_ms``), ``repeat`` measurements, and returns seconds per
run; before that, :func:`check_outputs` compares its outputs with the default config's. With
``cache_flush`` (TVM's ``enable_cpu_cache_flush``), the candidate's ``flush`` runs before each
timed run, outside the time: in a model, a kernel finds its input in the caches (the kernel
before it wrote it) but not its weights (every other layer's went through the caches since
its last run), and measured alone, over and over, it would find everything there.

:class:`Measurer` does this in worker processes (``spawn``), so the process that tunes survives
any candidate. As tvmc's ``--parallel``, it splits a candidate's build from its measurement:
:meth:`Measurer.measure_batch` has up to ``parallel`` workers each *build* one candidate at the
same time (compile it and check its outputs, which runs it once), each worker keeping what it
built; then it *times* the built candidates one after the other while the other workers wait
idle, so every measurement runs on an otherwise idle machine. ``parallel=1`` (the default) is
one worker building then timing each candidate in turn.

Each phase of a candidate has ``timeout`` seconds (tvmc's builder and runner time-outs): one
that takes longer to build or to be timed is killed ("timeout after ... s"), one that kills its
process is reported ("crash: the worker exited with code ..."), one whose build raises is
"error: ...", one whose outputs differ from the default's is "wrong result: ...". Each costs one
trial, never the run; that worker is restarted for the next candidate. Before a worker's first
candidate of a kernel, it has ``STARTUP_S`` plus ``timeout`` seconds more to start (import
Tessera and the backend) and build the default schedule's reference outputs. Workers ignore
SIGINT (Ctrl-C reaches the process that tunes, which kills them) and, on Linux, die with the
process that started them.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.ir.graph import Function
from tessera.ir.serialize import from_json, to_json
from tessera.plugin.candidate import TuningCandidate, random_array
from tessera.plugin.manager import get_backend

__all__ = ["Measurer", "MeasureResult", "TuningCandidate", "check_outputs", "measurement_payload",
           "random_array", "time_candidate"]

#: Seconds a new worker may take to start (import Tessera and the backend) on top of the
#: timeout.
STARTUP_S = 60.0


@dataclass
class MeasureResult:
    """Seconds per run of each measurement, or why there are none; ``host`` and ``cpu`` name
    the machine that measured when it is not this one (a Ray worker), else they are empty."""

    costs: list[float] = field(default_factory=list)
    error: str | None = None
    host: str = ""
    cpu: str = ""

    @property
    def mean(self) -> float:
        return sum(self.costs) / len(self.costs) if self.costs and not self.error else \
            float("inf")


def time_candidate(c: TuningCandidate, number: int = 1, repeat: int = 3,
                   min_repeat_ms: float = 0.0, cache_flush: bool = False) -> list[float]:
    """Seconds per run of ``repeat`` measurements, each of ``number`` runs (more when that
    lasts under ``min_repeat_ms``), after one untimed run; with ``cache_flush`` (and a
    candidate with a ``flush``), each run is timed alone after ``flush()`` (module doc)."""
    flush = c.flush if cache_flush and c.timer is None else None
    c.run()
    n = max(1, number)
    if min_repeat_ms > 0:
        start = time.perf_counter()
        c.run()
        once = max(time.perf_counter() - start, 1e-9)
        n = max(n, int(np.ceil(min_repeat_ms / 1000.0 / once)))
    costs = []
    for _ in range(max(1, repeat)):
        if c.timer is not None:
            costs.append(float(c.timer(n)))
            continue
        if flush is not None:
            total = 0.0
            for _ in range(n):
                flush()
                start = time.perf_counter()
                c.run()
                total += time.perf_counter() - start
            costs.append(total / n)
            continue
        start = time.perf_counter()
        for _ in range(n):
            c.run()
        costs.append((time.perf_counter() - start) / n)
    return costs


def check_outputs(got: list[np.ndarray], want: list[np.ndarray],
                  tolerance: float = 0.0) -> str | None:
    """None when ``got`` equals ``want`` (floats within 1e-4 relative, 1e-5 plus
    ``tolerance`` times the largest ``|want|`` absolute; integers exactly), else what
    differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {k}: {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
        if w.dtype.kind in "fc":
            scale = float(np.nanmax(np.abs(w))) if tolerance and w.size else 0.0
            if not np.allclose(g, w, rtol=1e-4, atol=1e-5 + tolerance * scale,
                               equal_nan=True):
                diff = float(np.nanmax(np.abs(g.astype(np.float64) - w.astype(np.float64))))
                return f"output {k}: max abs diff {diff:.3g} from the default schedule"
        elif not np.array_equal(g, w):
            return f"output {k}: {int(np.count_nonzero(g != w))} elements differ from the " \
                   f"default schedule"
    return None


def _backend_from(spec: str) -> Any:
    """A backend by its class path (``module:QualName``), instantiated without arguments, or
    by its registered name."""
    if ":" in spec:
        import importlib

        module, _, qual = spec.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        return obj()
    return get_backend(spec)


def _pack_region(region: Any) -> Any:
    """A region for the worker: a Function as its JSON and its constants (pickling the
    linked graph of a deep model recurses past Python's limit), anything else as is."""
    if not isinstance(region, Function):
        return ("object", region)
    fns = [region] + [n.body for n in region.nodes if n.body is not None]
    params = {v.name: np.asarray(v.data) for fn in fns for v in fn.constants()}
    return ("function", to_json(region, with_data=False), params)


def _unpack_region(packed: Any) -> Any:
    if packed[0] == "object":
        return packed[1]
    return from_json(packed[1], packed[2])


def _detach_from_terminal(parent: int) -> None:
    """A worker ignores Ctrl-C (the tuning process handles it and kills its workers) and, on
    Linux, is killed when its parent dies (a killed tuning process or Ray worker leaves no
    candidate running)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(0)


def _error_text(err: BaseException) -> str:
    lines = str(err).splitlines()
    return f"error: {type(err).__name__}: {(lines[0] if lines else '')[:300]}"


def _worker(conn: Any, payload: bytes, parent: int = 0) -> None:
    """The worker process: build the candidates the parent sends (keeping the last one built),
    time the built one when asked."""
    if parent:
        _detach_from_terminal(parent)
    backend_spec, packed, target, options = pickle.loads(payload)
    region = _unpack_region(packed)
    backend = _backend_from(backend_spec)
    references: dict[str, list[np.ndarray]] = {}
    tolerances: dict[str, float] = {}
    built: TuningCandidate | None = None
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        if request[0] == "run":
            _, number, repeat, min_ms, flush = request
            cand, built = built, None
            try:
                if cand is None:
                    raise RuntimeError("no candidate was built")
                conn.send((time_candidate(cand, number, repeat, min_ms, flush), None))
            except Exception as err:  # noqa: BLE001 - a failed run is a result
                conn.send(([], _error_text(err)))
            continue
        _, kernel, key, config = request  # "build"
        built = None
        try:
            if kernel not in references:
                default = backend.tuning_candidate(region, kernel, {}, target, options)
                default.run()
                references[kernel] = [np.array(o, copy=True) for o in default.outputs()]
                tolerances[kernel] = float(getattr(default, "tolerance", 0.0))
                conn.send(("ready", None))  # the candidate's own time-out starts now
            cand = backend.tuning_candidate(region, kernel, {key: config}, target, options)
            cand.run()
            wrong = check_outputs([np.asarray(o) for o in cand.outputs()], references[kernel],
                                  max(tolerances[kernel], float(getattr(cand, "tolerance", 0.0))))
            if wrong:
                conn.send(("built", f"wrong result: {wrong}"))
                continue
            built = cand
            conn.send(("built", None))
        except Exception as err:  # noqa: BLE001 - a failed build is a result
            conn.send(("built", _error_text(err)))


def measurement_payload(backend: Any, region: Any, target: Any, options: Any) -> bytes:
    """What a worker needs to build a region's candidates, pickled: the backend's class path
    (or its ``tuning_spec``), the region (:func:`_pack_region`), the target and the compile
    options."""
    spec = getattr(backend, "tuning_spec", None) or \
        f"{type(backend).__module__}:{type(backend).__qualname__}"
    return pickle.dumps((spec, _pack_region(region), target, options))


class _Worker:
    """One worker process, the pipe to it and the kernels it has reference outputs of."""

    def __init__(self, ctx: Any, payload: bytes) -> None:
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, payload, os.getpid()),
                                daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.references: set[str] = set()

    def alive(self) -> bool:
        return self.proc.is_alive()

    def crashed(self) -> str:
        self.proc.join(5)
        code = self.proc.exitcode
        self.kill()
        return f"crash: the worker exited with code {code}"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def close(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(5)
        self.kill()


class BatchMeasurer:
    """What the local and the Ray measurers share: ``measure`` of one config is a batch of
    one (subclasses implement ``measure_batch``)."""

    def measure_batch(self, kernel: str, key: str, configs: Sequence[dict[str, Any]]
                      ) -> Iterator[tuple[int, MeasureResult]]:
        raise NotImplementedError

    def measure(self, kernel: str, key: str, config: dict[str, Any]) -> MeasureResult:
        """Build and time ``kernel`` with ``config`` for workload ``key``."""
        batch = self.measure_batch(kernel, key, [config])
        try:
            return next(batch)[1]
        finally:
            batch.close()


class Measurer(BatchMeasurer):
    """Worker processes measuring candidates of one region's kernels: up to ``parallel``
    built at once, timed one at a time (module doc)."""

    def __init__(self, backend: Any, region: Any, target: Any, options: Any,
                 timeout: float = 10.0, number: int = 1, repeat: int = 3,
                 min_repeat_ms: float = 0.0, parallel: int = 1,
                 cache_flush: bool = False) -> None:
        self.payload = measurement_payload(backend, region, target, options)
        self._setup(timeout, number, repeat, min_repeat_ms, parallel, cache_flush)

    @classmethod
    def from_payload(cls, payload: bytes, timeout: float = 10.0, number: int = 1,
                     repeat: int = 3, min_repeat_ms: float = 0.0,
                     parallel: int = 1, cache_flush: bool = False) -> Measurer:
        """A measurer of another measurer's :attr:`payload` (the backend, region, target
        and options, pickled): how a Ray worker gets the tuning process's region."""
        m = cls.__new__(cls)
        m.payload = payload
        m._setup(timeout, number, repeat, min_repeat_ms, parallel, cache_flush)
        return m

    def _setup(self, timeout: float, number: int, repeat: int, min_repeat_ms: float,
               parallel: int, cache_flush: bool = False) -> None:
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, not {parallel}")
        self.timeout = timeout
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.cache_flush = cache_flush
        self.parallel = parallel
        self._ctx = mp.get_context("spawn")
        self._workers: list[_Worker | None] = [None] * parallel

    @property
    def batch_size(self) -> int:
        """How many candidates :meth:`measure_batch` builds at once."""
        return self.parallel

    def _worker(self, i: int) -> _Worker:
        w = self._workers[i]
        if w is None or not w.alive():
            if w is not None:
                w.kill()
            w = self._workers[i] = _Worker(self._ctx, self.payload)
        return w

    def _drop(self, i: int, w: _Worker) -> None:
        w.kill()
        if self._workers[i] is w:
            self._workers[i] = None

    def measure_batch(self, kernel: str, key: str, configs: Sequence[dict[str, Any]]
                      ) -> Iterator[tuple[int, MeasureResult]]:
        """Build and time ``kernel`` with each of ``configs`` for workload ``key``: up to
        ``parallel`` built at the same time, then timed one after the other; yields (index in
        ``configs``, result) in order as each is known. Stopping early (``close()``, a
        ``break``) drops the candidates built but not yet timed."""
        for start in range(0, len(configs), self.parallel):
            chunk = configs[start:start + self.parallel]
            yield from ((start + i, r) for i, r in self._chunk(kernel, key, chunk))

    def _chunk(self, kernel: str, key: str, configs: Sequence[dict[str, Any]]
               ) -> Iterator[tuple[int, MeasureResult]]:
        workers = [self._worker(i) for i in range(len(configs))]
        errors: dict[int, str] = {}
        busy: set[int] = set()  # workers whose answer has not been read
        try:
            # build every candidate at once
            pending: dict[Any, tuple[int, float]] = {}
            for i, (w, config) in enumerate(zip(workers, configs)):
                # a new worker imports Tessera, and a kernel's first candidate also builds
                # the default schedule's outputs to compare with (then says "ready"): neither
                # counts against the candidate's timeout
                allowance = 0.0 if kernel in w.references else STARTUP_S + self.timeout
                try:
                    w.conn.send(("build", kernel, key, dict(config)))
                except (OSError, BrokenPipeError):
                    errors[i] = w.crashed()
                    continue
                busy.add(i)
                pending[w.conn] = (i, time.monotonic() + self.timeout + allowance)
            while pending:
                wait = min(d for _, d in pending.values()) - time.monotonic()
                for conn in mp.connection.wait(list(pending), max(wait, 0.0)):
                    i, _ = pending.pop(conn)
                    try:
                        phase, error = conn.recv()
                    except (EOFError, OSError):
                        busy.discard(i)
                        errors[i] = workers[i].crashed()
                        continue
                    workers[i].references.add(kernel)
                    if phase == "ready":
                        pending[conn] = (i, time.monotonic() + self.timeout)
                        continue
                    busy.discard(i)
                    if error is not None:
                        errors[i] = error
                now = time.monotonic()
                for conn, (i, deadline) in list(pending.items()):
                    if deadline <= now:
                        del pending[conn]
                        busy.discard(i)
                        self._drop(i, workers[i])
                        errors[i] = f"timeout after {self.timeout:g} s"
            # then time them one at a time, the other workers idle
            for i, w in enumerate(workers):
                if i in errors:
                    yield i, MeasureResult(error=errors[i])
                    continue
                yield i, self._run(i, w, busy)
        finally:
            for i in busy:  # an answer still to come would be read as the next one's
                self._drop(i, workers[i])

    def _run(self, i: int, w: _Worker, busy: set[int]) -> MeasureResult:
        try:
            w.conn.send(("run", self.number, self.repeat, self.min_repeat_ms,
                         self.cache_flush))
            busy.add(i)
            if not w.conn.poll(self.timeout):
                self._drop(i, w)
                busy.discard(i)
                return MeasureResult(error=f"timeout after {self.timeout:g} s")
            costs, error = w.conn.recv()
            busy.discard(i)
        except (EOFError, OSError, BrokenPipeError):
            busy.discard(i)
            return MeasureResult(error=w.crashed())
        return MeasureResult(list(costs), error)

    def close(self) -> None:
        for i, w in enumerate(self._workers):
            if w is not None:
                w.close()
                self._workers[i] = None

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
