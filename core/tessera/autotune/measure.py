"""Measuring tuning candidates, each in a worker process.

A backend builds a candidate (``Backend.tuning_candidate``): one kernel of a region scheduled
with a config, on buffers of its own filled with seeded random data (constants keep their
values). :func:`time_candidate` runs it ``number`` times per measurement (more while a
measurement lasts under ``min_repeat_ms``), ``repeat`` measurements, and returns seconds per
run; before that, :func:`check_outputs` compares its outputs with the default config's.

:class:`Measurer` does this in a worker process (``spawn``), one candidate at a time, so the
process that tunes survives any candidate: one that takes longer than ``timeout`` seconds to
build and measure is killed ("timeout"), one that kills its process is reported ("crash: exit
code ..."), one whose outputs differ from the default's is "wrong result: ...". Each costs one
trial; the worker is restarted for the next candidate.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Measurer", "MeasureResult", "TuningCandidate", "check_outputs", "time_candidate"]

#: Seconds a new worker may take to start (import Tessera and the backend) on top of the
#: timeout.
STARTUP_S = 60.0


@dataclass
class TuningCandidate:
    """One kernel built alone: ``run()`` computes it once on its buffers, ``outputs()``
    returns host copies of its outputs, ``flops`` is its work per run (0 when unknown).
    ``tolerance``: how far its outputs may be from another config's, relative to their
    largest magnitude, on top of :func:`check_outputs`' tolerances: a config that computes
    by another algorithm, which rounds differently (a Winograd convolution)."""

    run: Callable[[], None]
    outputs: Callable[[], list[np.ndarray]]
    flops: int = 0
    tolerance: float = 0.0


@dataclass
class MeasureResult:
    """Seconds per run of each measurement, or why there are none."""

    costs: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def mean(self) -> float:
        return sum(self.costs) / len(self.costs) if self.costs and not self.error else \
            float("inf")


def time_candidate(c: TuningCandidate, number: int = 1, repeat: int = 3,
                   min_repeat_ms: float = 0.0) -> list[float]:
    """Seconds per run of ``repeat`` measurements, each of ``number`` runs (more when that
    lasts under ``min_repeat_ms``), after one untimed run."""
    c.run()
    n = max(1, number)
    if min_repeat_ms > 0:
        start = time.perf_counter()
        c.run()
        once = max(time.perf_counter() - start, 1e-9)
        n = max(n, int(np.ceil(min_repeat_ms / 1000.0 / once)))
    costs = []
    for _ in range(max(1, repeat)):
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
    from tessera.plugin.manager import get_backend

    return get_backend(spec)


def _pack_region(region: Any) -> Any:
    """A region for the worker: a Function as its JSON and its constants (pickling the
    linked graph of a deep model recurses past Python's limit), anything else as is."""
    from tessera.ir.graph import Function

    if not isinstance(region, Function):
        return ("object", region)
    from tessera.ir.serialize import to_json

    fns = [region] + [n.body for n in region.nodes if n.body is not None]
    params = {v.name: np.asarray(v.data) for fn in fns for v in fn.constants()}
    return ("function", to_json(region, with_data=False), params)


def _unpack_region(packed: Any) -> Any:
    if packed[0] == "object":
        return packed[1]
    from tessera.ir.serialize import from_json

    return from_json(packed[1], packed[2])


def _worker(conn: Any, payload: bytes) -> None:
    """The worker process: build and time the candidates the parent sends."""
    backend_spec, packed, target, options = pickle.loads(payload)
    region = _unpack_region(packed)
    backend = _backend_from(backend_spec)
    references: dict[str, list[np.ndarray]] = {}
    tolerances: dict[str, float] = {}
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        kernel, key, config, number, repeat, min_ms = request
        try:
            if kernel not in references:
                default = backend.tuning_candidate(region, kernel, {}, target, options)
                default.run()
                references[kernel] = [np.array(o, copy=True) for o in default.outputs()]
                tolerances[kernel] = float(getattr(default, "tolerance", 0.0))
            cand = backend.tuning_candidate(region, kernel, {key: config}, target, options)
            cand.run()
            wrong = check_outputs([np.asarray(o) for o in cand.outputs()], references[kernel],
                                  max(tolerances[kernel], float(getattr(cand, "tolerance", 0.0))))
            if wrong:
                conn.send(([], f"wrong result: {wrong}"))
                continue
            conn.send((time_candidate(cand, number, repeat, min_ms), None))
        except Exception as err:  # noqa: BLE001 - a failed build is a result
            conn.send(([], f"error: {type(err).__name__}: {str(err).splitlines()[0][:300]}"))


class Measurer:
    """A worker process measuring candidates of one region's kernels (module doc)."""

    def __init__(self, backend: Any, region: Any, target: Any, options: Any,
                 timeout: float = 10.0, number: int = 1, repeat: int = 3,
                 min_repeat_ms: float = 0.0) -> None:
        spec = getattr(backend, "tuning_spec", None) or \
            f"{type(backend).__module__}:{type(backend).__qualname__}"
        self.payload = pickle.dumps((spec, _pack_region(region), target, options))
        self.timeout = timeout
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self._references: set[str] = set()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_worker, args=(child, self.payload), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def measure(self, kernel: str, key: str, config: dict[str, Any]) -> MeasureResult:
        """Build and time ``kernel`` with ``config`` for workload ``key``."""
        allowance = 0.0
        if self._proc is None or not self._proc.is_alive():
            self._kill()
            self._start()
            self._references = set()
        if kernel not in self._references:
            # a new worker imports Tessera, and a kernel's first candidate also builds the
            # default schedule's outputs to compare with: neither counts against the timeout
            allowance = STARTUP_S + self.timeout
        try:
            self._conn.send((kernel, key, dict(config), self.number, self.repeat,
                             self.min_repeat_ms))
            if not self._conn.poll(self.timeout + allowance):
                self._kill()
                return MeasureResult(error=f"timeout after {self.timeout:g} s")
            costs, error = self._conn.recv()
            self._references.add(kernel)
        except (EOFError, OSError, BrokenPipeError):
            self._proc.join(5)
            code = self._proc.exitcode
            self._kill()
            return MeasureResult(error=f"crash: the worker exited with code {code}")
        return MeasureResult(list(costs), error)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        if self._proc is not None:
            self._proc.join(5)
        self._kill()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
