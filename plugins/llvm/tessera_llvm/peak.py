"""The host's float32 FMA peak, measured with code from Tessera's own code generator.

A roofline needs the highest rate the CPU reaches with the instructions our kernels use. The
kernel here is hand-written TIR built by the same code generator and LLVM pipeline as every
model (and for the same ``-mcpu``): ``K`` independent vector accumulators, each updated
``acc = acc * a + b`` in a long serial loop. The code generator puts ``contract`` fast-math
flags on float arithmetic, so each update is one FMA instruction (``vfmadd`` on x86, ``fmla``
on AArch64), and the loop body touches no memory. ``K`` covers the FMA latency times the FMA
units (8 in flight on a 2-unit, 4-cycle core) while the accumulators and the two operands fit
the vector register file (12 with AVX2's 16 registers, 24 with 32).

The multi-thread peak runs the same loop in every task of a parallel loop (one task per
thread) on the native thread pool. Results are cached per process.

    >>> from tessera_llvm.peak import measure_fma_peak
    >>> print(measure_fma_peak(2).describe())      # doctest: +SKIP
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np

from tessera import tir
from tessera_llvm import parallel
from tessera_llvm.build import BuiltModule, build_module
from tessera_llvm.cpu import cpu_info

#: Most accumulators the kernel keeps (more only lengthens the loop body).
MAX_ACCUMULATORS = 24
#: Seconds one timed call of the kernel should last, timed calls per measurement (the best
#: one counts: a shared machine only ever makes a call slower) and the pause between calls
#: (other work on a shared machine comes and goes; the best call is one it left alone).
CALL_SECONDS = 0.02
REPEATS = 8
PAUSE_SECONDS = 0.01

F = tir.ForKind


@dataclass(frozen=True)
class PeakResult:
    """A measured float32 FMA peak: ``gflops`` with ``threads`` threads and
    ``per_thread_gflops`` with one; the kernel's vector ``lanes`` and ``accumulators``; the
    CPU the code was generated for (``cpu``) and its theoretical float32 operations per cycle
    per core (``flops_per_cycle``, from :class:`~tessera_llvm.schedules.common.CPUInfo`)."""

    gflops: float
    per_thread_gflops: float
    threads: int
    lanes: int
    accumulators: int
    cpu: str
    flops_per_cycle: int

    @property
    def implied_ghz(self) -> float:
        """The clock at which one core's theoretical peak equals the one-thread measurement:
        a plausible CPU clock (1-6 GHz) when the FMA-unit count of the CPU model is right."""
        return self.per_thread_gflops / max(self.flops_per_cycle, 1)

    @property
    def scaling(self) -> float:
        """The ``threads``-thread rate over ``threads`` times the one-thread rate: about 1 on
        idle cores, less when other work shared them (or threads share a core's FMA units)."""
        return self.gflops / max(self.threads * self.per_thread_gflops, 1e-9)

    def describe(self) -> str:
        """One line for reports (two when the threads did not scale)."""
        text = (f"FMA peak (float32, {self.cpu}, {self.lanes} lanes x {self.accumulators} "
                f"accumulators): {self.gflops:.1f} GFLOP/s with {self.threads} thread(s), "
                f"{self.per_thread_gflops:.1f} per thread; theoretical "
                f"{self.flops_per_cycle} flop/cycle/core, i.e. {self.implied_ghz:.2f} GHz")
        if self.threads > 1 and self.scaling < 0.9:
            text += (f"\n  note: {self.threads} threads reached {100 * self.scaling:.0f}% of "
                     f"{self.threads} x one thread: other work shared the cores (or SMT)")
        return text


def accumulators_for(vector_registers: int) -> int:
    """Accumulators for a register file of ``vector_registers``: all but the two operands and
    two spare registers, at most :data:`MAX_ACCUMULATORS`."""
    return max(1, min(vector_registers - 4, MAX_ACCUMULATORS))


def fma_kernel(name: str, lanes: int, accumulators: int, tasks: int) -> tir.PrimFunc:
    """``fma_kernel(X, N, Out)``: ``tasks`` parallel tasks (a serial kernel when 1) each run
    ``N[0]`` iterations of ``acc_k = acc_k * a + b`` over ``accumulators`` vectors of ``lanes``
    float32 (``a = X[0:lanes]``, ``b = X[lanes:2*lanes]``) and store the sum of their
    accumulators in ``Out[task * lanes:(task + 1) * lanes]``. Each iteration is
    ``2 * lanes * accumulators`` floating-point operations."""
    x = tir.Buffer("X", [2 * lanes], "float32")
    n = tir.Buffer("N", [1], "int64")
    out = tir.Buffer("Out", [tasks * lanes], "float32")
    acc = tir.Buffer("acc", [accumulators * lanes], "float32", scope="local")
    task, it = tir.Var("task"), tir.Var("it")

    def vec(k: int) -> tir.Ramp:
        return tir.Ramp(tir.const(k * lanes), 1, lanes)

    a, b = x[vec(0)], x[vec(1)]
    # distinct starting values, so that no two accumulators are the same computation
    init = [tir.BufferStore(acc, tir.Broadcast(tir.const(float(k + 1), "float32"), lanes),
                            [vec(k)]) for k in range(accumulators)]
    update = [tir.BufferStore(acc, acc[vec(k)] * a + b, [vec(k)]) for k in range(accumulators)]
    total = acc[vec(0)]
    for k in range(1, accumulators):
        total = total + acc[vec(k)]
    body = tir.Allocate(acc, tir.seq(
        *init,
        tir.For(it, 0, n[0], F.SERIAL, tir.seq(*update)),
        tir.BufferStore(out, total, [tir.Ramp(task * lanes, 1, lanes)])))
    if tasks == 1:
        body = tir.LetStmt(task, tir.const(0), body)
    else:
        body = tir.For(task, 0, tasks, F.PARALLEL, body)
    return tir.PrimFunc(name, [x, n, out], body)


def build_peak_kernels(threads: int, mcpu: str | None = None) -> tuple[BuiltModule, int, int]:
    """The module with ``fma_peak_1`` (one thread) and ``fma_peak_n`` (``threads`` tasks) for
    ``mcpu`` (the host when None), with its lanes and accumulators."""
    info = cpu_info(mcpu)
    lanes, k = info.vector_lanes, accumulators_for(info.vector_registers)
    funcs = [fma_kernel("fma_peak_1", lanes, k, 1),
             fma_kernel("fma_peak_n", lanes, k, max(threads, 1))]
    return build_module(funcs, "fma_peak", mcpu=mcpu), lanes, k


def _check_runs_here(mcpu: str | None) -> None:
    if mcpu is None or mcpu in ("native", "host"):
        return
    host, target = cpu_info(), cpu_info(mcpu)
    if target.arch != host.arch or target.vector_lanes > host.vector_lanes:
        raise ValueError(f"cannot measure an FMA peak with code for -mcpu={mcpu} "
                         f"({target.arch}, {target.vector_lanes} float32 lanes) on this host "
                         f"({host.name}: {host.arch}, {host.vector_lanes} lanes)")


def _best_gflops(fn: object, x: np.ndarray, out: np.ndarray, flops_per_iter: int) -> float:
    """Calibrate the iteration count to :data:`CALL_SECONDS`, then the best of
    :data:`REPEATS` calls, in GFLOP/s."""
    n = np.array([1 << 12], np.int64)
    fn([x, n, out])  # warm up (starts the pool's workers)
    while True:
        start = time.perf_counter()
        fn([x, n, out])
        elapsed = time.perf_counter() - start
        if elapsed >= CALL_SECONDS / 4 or n[0] >= 1 << 40:
            break
        n[0] *= 4
    n[0] = max(1, int(n[0] * CALL_SECONDS / max(elapsed, 1e-9)))
    best = float("inf")
    for _ in range(REPEATS):
        time.sleep(PAUSE_SECONDS)
        start = time.perf_counter()
        fn([x, n, out])
        best = min(best, time.perf_counter() - start)
    return flops_per_iter * int(n[0]) / best / 1e9


@functools.lru_cache(maxsize=16)
def _measure(threads: int, mcpu: str | None) -> PeakResult:
    _check_runs_here(mcpu)
    built, lanes, k = build_peak_kernels(threads, mcpu)
    lib = built.load()
    x = np.concatenate([np.full(lanes, 0.999, np.float32), np.full(lanes, 1e-3, np.float32)])
    per_iter = 2 * lanes * k
    single = _best_gflops(lib.get("fma_peak_1"), x, np.zeros(lanes, np.float32), per_iter)
    with parallel.num_threads(threads):
        multi = _best_gflops(lib.get("fma_peak_n"), x, np.zeros(threads * lanes, np.float32),
                             per_iter * threads)
    info = cpu_info(mcpu)
    return PeakResult(gflops=multi, per_thread_gflops=single, threads=threads, lanes=lanes,
                      accumulators=k, cpu=info.name, flops_per_cycle=info.peak_flops_per_cycle)


def measure_fma_peak(threads: int | None = None, mcpu: str | None = None) -> PeakResult:
    """Measure the float32 FMA peak of this host with ``threads`` threads (default: the
    thread pool's count, ``TESSERA_NUM_THREADS`` or the CPU count) and with one, using code
    generated for ``mcpu`` (default: the host CPU). ValueError when code for ``mcpu`` cannot
    run here (another architecture, wider vectors than the host has). Cached per process."""
    count = threads if threads is not None else parallel.get_num_threads()
    if count < 1:
        raise ValueError(f"number of threads must be at least 1, got {count}")
    if mcpu in ("native", "host"):
        mcpu = None
    return _measure(int(count), mcpu)
